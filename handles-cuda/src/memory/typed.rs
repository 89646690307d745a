//! Typed device memory: [`DeviceBuffer<T>`] holds `len` elements of a plain-data type `T`
//! (`bytemuck::Pod`: any bit pattern is a value, no padding, no pointers) in one
//! [`DevicePtrHandle`], so that sizes, offsets and copies are in elements and no user code
//! does byte arithmetic or needs `unsafe`. Kernels take it as an [`Elements<T>`] parameter, whose
//! bounds check can be written in elements.

use std::marker::PhantomData;
use std::ops::Range;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::StreamHandle;
use crate::memory::device_ptr::DevicePtrHandle;
use crate::memory::pool::MemoryPoolHandle;

/// `len` elements of `T` in device memory: a [`DevicePtrHandle`] of `len * size_of::<T>()`
/// bytes with the element type attached. Clones share the allocation, as the handle's do;
/// the memory is freed as the handle's is (after every stream it was used on).
///
/// Every constructor and copy counts in elements; [`DeviceBuffer::as_bytes`] gives the
/// untyped handle for everything else (IPC, graphs, cuBLAS).
pub struct DeviceBuffer<T: Pod> {
    memory: DevicePtrHandle,
    len: usize,
    element: PhantomData<fn() -> T>,
}

impl<T: Pod> Clone for DeviceBuffer<T> {
    fn clone(&self) -> Self {
        DeviceBuffer {
            memory: self.memory.clone(),
            len: self.len,
            element: PhantomData,
        }
    }
}

impl<T: Pod> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("element", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("memory", &self.memory)
            .finish()
    }
}

/// The bytes of `n` elements of `T`, or an error naming the overflow.
fn bytes_of<T>(n: usize) -> Result<usize> {
    n.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::TooLarge {
            count: n,
            element: std::any::type_name::<T>(),
        })
}

impl<T: Pod> DeviceBuffer<T> {
    /// Wraps `memory` as elements of `T`: its size must be a whole number of elements (zero
    /// elements is not an allocation).
    pub fn from_bytes(memory: DevicePtrHandle) -> Result<Self> {
        let size = std::mem::size_of::<T>();
        if size == 0 || !memory.size().is_multiple_of(size) {
            return Err(Error::NotWholeElements {
                size: memory.size(),
                element: std::any::type_name::<T>(),
                element_size: size,
            });
        }
        Ok(DeviceBuffer {
            len: memory.size() / size,
            memory,
            element: PhantomData,
        })
    }

    /// `n` elements with `cuMemAlloc` in `context` (contents unspecified).
    pub fn alloc(context: &ContextHandle, n: usize) -> Result<Self> {
        Self::from_bytes(DevicePtrHandle::alloc(context, bytes_of::<T>(n)?)?)
    }

    /// `n` elements from the current pool of `stream`'s device, ordered on `stream`
    /// (contents unspecified).
    pub fn alloc_async(n: usize, stream: &StreamHandle) -> Result<Self> {
        Self::from_bytes(DevicePtrHandle::alloc_async(bytes_of::<T>(n)?, stream)?)
    }

    /// `n` elements from `pool`, ordered on `stream` (contents unspecified).
    pub fn alloc_from_pool(
        pool: &MemoryPoolHandle,
        n: usize,
        stream: &StreamHandle,
    ) -> Result<Self> {
        Self::from_bytes(DevicePtrHandle::alloc_from_pool(
            pool,
            bytes_of::<T>(n)?,
            stream,
        )?)
    }

    /// `n` zeroed elements from the current pool of `stream`'s device (all-zero bytes are a
    /// value of every `Pod` type).
    pub fn zeroed(n: usize, stream: &StreamHandle) -> Result<Self> {
        let buffer = Self::alloc_async(n, stream)?;
        buffer
            .memory
            .memset_async(0, buffer.memory.size(), stream)?;
        Ok(buffer)
    }

    /// A copy of `values` in new memory from the current pool of `stream`'s device.
    pub fn from_slice(values: &[T], stream: &StreamHandle) -> Result<Self> {
        let buffer = Self::alloc_async(values.len(), stream)?;
        buffer.copy_from(values, stream)?;
        Ok(buffer)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements (never, for an allocation; a view may be empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The untyped handle of these bytes.
    pub fn as_bytes(&self) -> &DevicePtrHandle {
        &self.memory
    }

    /// The untyped handle, consuming the buffer.
    pub fn into_bytes(self) -> DevicePtrHandle {
        self.memory
    }

    /// Copies `values` into the first `values.len()` elements, after the work queued on
    /// `stream`; returns once the copy is complete.
    pub fn copy_from(&self, values: &[T], stream: &StreamHandle) -> Result<()> {
        self.copy_from_at(0, values, stream)
    }

    /// Copies `values` into the elements from `start`, after the work queued on `stream`.
    pub fn copy_from_at(&self, start: usize, values: &[T], stream: &StreamHandle) -> Result<()> {
        self.check_range(start, values.len())?;
        self.memory
            .copy_from_host_at(bytes_of::<T>(start)?, bytemuck::cast_slice(values), stream)
    }

    /// Copies the first `out.len()` elements into `out`, after the work queued on `stream`;
    /// returns once the copy is complete.
    pub fn copy_to(&self, out: &mut [T], stream: &StreamHandle) -> Result<()> {
        self.copy_to_at(0, out, stream)
    }

    /// Copies `out.len()` elements from `start` into `out`, after the work queued on `stream`.
    pub fn copy_to_at(&self, start: usize, out: &mut [T], stream: &StreamHandle) -> Result<()> {
        self.check_range(start, out.len())?;
        self.memory
            .copy_to_host_at(bytes_of::<T>(start)?, bytemuck::cast_slice_mut(out), stream)
    }

    /// All elements, read back after the work queued on `stream`.
    pub fn to_vec(&self, stream: &StreamHandle) -> Result<Vec<T>> {
        let mut values = vec![T::zeroed(); self.len];
        self.copy_to(&mut values, stream)?;
        Ok(values)
    }

    /// Copies every element into `dst` (of the same length), ordered on `stream`.
    pub fn copy_to_device(&self, dst: &DeviceBuffer<T>, stream: &StreamHandle) -> Result<()> {
        if dst.len != self.len {
            return Err(Error::LengthMismatch {
                src: self.len,
                dst: dst.len,
            });
        }
        self.memory
            .copy_to_async(0, &dst.memory, 0, self.memory.size(), stream)
    }

    /// The elements `range` as a buffer of their own, which keeps the whole allocation alive
    /// (a view: no copy).
    pub fn slice(&self, range: Range<usize>) -> Result<DeviceBuffer<T>> {
        if range.start > range.end {
            return Err(Error::ElementsOutOfRange {
                start: range.start,
                end: range.end,
                len: self.len,
            });
        }
        let count = range.end - range.start;
        self.check_range(range.start, count)?;
        let view = self
            .memory
            .view(bytes_of::<T>(range.start)?, bytes_of::<T>(count)?)?;
        Ok(DeviceBuffer {
            memory: view,
            len: count,
            element: PhantomData,
        })
    }

    fn check_range(&self, start: usize, count: usize) -> Result<()> {
        if start.checked_add(count).is_none_or(|end| end > self.len) {
            return Err(Error::ElementsOutOfRange {
                start,
                end: start.saturating_add(count),
                len: self.len,
            });
        }
        Ok(())
    }
}

/// A kernel parameter that is a buffer of `T`: the launch passes a `&DeviceBuffer<T>` and the
/// kernel receives its address, so a bounds check can compare element counts
/// (`args.0.len()`) with the launch's arguments.
pub struct Elements<T: Pod>(PhantomData<fn() -> T>);
