//! Device pointers into mapped virtual memory: a pointer to a whole mapping, and a buffer that
//! grows in place by mapping chunks into one reservation. Each pointer keeps its mappings
//! alive, and each mapping's unmap waits for the work its pointers were used in.

use std::sync::Mutex;

use cudarc::driver::sys::CUdeviceptr;

use crate::error::{Error, Result};
use crate::memory::device_ptr::DevicePtrHandle;
use crate::memory::pool::PoolLocation;
use crate::memory::vmm::{
    AddressReservationHandle, MappingHandle, PhysicalAllocationHandle, Sharing, granularity,
    rounded,
};
use crate::sync::lock;

impl MappingHandle {
    /// A device pointer to the whole mapping, which keeps it alive; its uses on streams are
    /// waited for before the unmap.
    pub fn device_ptr(&self) -> DevicePtrHandle {
        DevicePtrHandle::mapped(self.as_cu(), self.size(), vec![self.clone()])
    }
}

/// A buffer that grows in place: one reservation made once, and physical chunks mapped into it
/// on demand. Slices of it ([`GrowableBuffer::slice`]) are device pointers that keep their
/// chunks' mappings alive, so the buffer itself may be dropped first.
pub struct GrowableBuffer {
    reservation: AddressReservationHandle,
    device: usize,
    chunk: usize,
    chunks: Mutex<Vec<MappingHandle>>,
}

impl std::fmt::Debug for GrowableBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrowableBuffer")
            .field("reservation", &self.reservation)
            .field("chunk", &self.chunk)
            .field("mapped", &self.len())
            .finish()
    }
}

impl GrowableBuffer {
    /// Reserves `capacity` bytes on device `ordinal`, to be backed in chunks of `chunk` bytes
    /// (both rounded up to the device's granularity). Nothing is mapped yet.
    pub fn new(ordinal: usize, capacity: usize, chunk: usize) -> Result<Self> {
        let granularity = granularity(PoolLocation::Device(ordinal))?;
        let chunk = rounded(chunk, granularity)?;
        let reservation = AddressReservationHandle::reserve(capacity, chunk)?;
        Ok(GrowableBuffer {
            reservation,
            device: ordinal,
            chunk,
            chunks: Mutex::new(Vec::new()),
        })
    }

    fn chunks(&self) -> std::sync::MutexGuard<'_, Vec<MappingHandle>> {
        lock(&self.chunks)
    }

    /// The bytes mapped so far.
    pub fn len(&self) -> usize {
        self.chunks().len() * self.chunk
    }

    /// Whether nothing is mapped yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The reserved capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.reservation.size()
    }

    /// The base address of the buffer.
    pub fn as_cu(&self) -> CUdeviceptr {
        self.reservation.as_cu()
    }

    /// Maps chunks until at least `size` bytes are backed (a new chunk: `cuMemCreate`, then
    /// `cuMemMap` and `cuMemSetAccess` at the end of what is mapped). An error leaves what was
    /// mapped before.
    pub fn grow_to(&self, size: usize) -> Result<()> {
        if size > self.capacity() {
            return Err(Error::OutOfRange {
                offset: 0,
                len: size,
                size: self.capacity(),
            });
        }
        let mut chunks = self.chunks();
        while chunks.len() * self.chunk < size {
            let physical = PhysicalAllocationHandle::create(
                PoolLocation::Device(self.device),
                self.chunk,
                Sharing::None,
            )?;
            let offset = chunks.len() * self.chunk;
            let mapping = MappingHandle::map(
                &self.reservation,
                offset,
                &physical,
                0,
                self.chunk,
                &[self.device],
            )?;
            chunks.push(mapping);
        }
        Ok(())
    }

    /// A device pointer to `len` bytes from byte `offset`, which must be mapped; it keeps the
    /// mappings it spans alive.
    pub fn slice(&self, offset: usize, len: usize) -> Result<DevicePtrHandle> {
        let chunks = self.chunks();
        let mapped = chunks.len() * self.chunk;
        if len == 0 {
            return Err(Error::ZeroSize {
                what: "a slice needs at least one byte",
            });
        }
        let end = offset.checked_add(len).filter(|&end| end <= mapped);
        let Some(end) = end else {
            return Err(Error::OutOfRange {
                offset,
                len,
                size: mapped,
            });
        };
        let spanned = chunks[offset / self.chunk..end.div_ceil(self.chunk)].to_vec();
        Ok(DevicePtrHandle::mapped(
            self.as_cu() + offset as CUdeviceptr,
            len,
            spanned,
        ))
    }
}
