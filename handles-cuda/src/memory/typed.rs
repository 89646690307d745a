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

/// The bytes of `n` elements of `T`, or an error naming the overflow (or the zero-sized type).
pub(crate) fn bytes_of<T>(n: usize) -> Result<usize> {
    refuse_zero_sized::<T>()?;
    n.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::TooLarge {
            count: n,
            element: std::any::type_name::<T>(),
        })
}

fn refuse_zero_sized<T>() -> Result<()> {
    if std::mem::size_of::<T>() == 0 {
        return Err(Error::ZeroSizedElement {
            element: std::any::type_name::<T>(),
        });
    }
    Ok(())
}

impl<T: Pod> DeviceBuffer<T> {
    /// The elements of `memory` (another handle of the same memory, or a view of it): its size
    /// must be a whole number of elements, possibly none, and its address a multiple of `T`'s
    /// alignment. On `Err`, `memory` is untouched.
    pub fn from_bytes(memory: &DevicePtrHandle) -> Result<Self> {
        Self::wrap(memory.clone())
    }

    /// The one check of every typed buffer: whole elements of a sized `T` at an address
    /// aligned for it (a kernel reading a `T` from a misaligned address faults). `size_of` is a
    /// multiple of `align_of`, so every slice of an aligned buffer is aligned too.
    pub(crate) fn wrap(memory: DevicePtrHandle) -> Result<Self> {
        refuse_zero_sized::<T>()?;
        let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        if !memory.size().is_multiple_of(size) {
            return Err(Error::NotWholeElements {
                size: memory.size(),
                element: std::any::type_name::<T>(),
                element_size: size,
            });
        }
        if !memory.as_cu().is_multiple_of(align as u64) {
            return Err(Error::MisalignedElements {
                address: memory.as_cu(),
                element: std::any::type_name::<T>(),
                align,
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
        Self::wrap(DevicePtrHandle::alloc(context, bytes_of::<T>(n)?)?)
    }

    /// `n` elements from the current pool of `stream`'s device, ordered on `stream`
    /// (contents unspecified).
    pub fn alloc_async(n: usize, stream: &StreamHandle) -> Result<Self> {
        Self::wrap(DevicePtrHandle::alloc_async(bytes_of::<T>(n)?, stream)?)
    }

    /// `n` elements from `pool`, ordered on `stream` (contents unspecified).
    pub fn alloc_from_pool(
        pool: &MemoryPoolHandle,
        n: usize,
        stream: &StreamHandle,
    ) -> Result<Self> {
        Self::wrap(DevicePtrHandle::alloc_from_pool(
            pool,
            bytes_of::<T>(n)?,
            stream,
        )?)
    }

    /// `n` elements of pinned host memory in `context` (`cuMemHostAlloc`; contents
    /// unspecified): the staging side of asynchronous copies, which [`copy_to_device`] to and
    /// from device buffers runs on a stream without the host waiting.
    ///
    /// [`copy_to_device`]: DeviceBuffer::copy_to_device
    pub fn alloc_host(context: &ContextHandle, n: usize) -> Result<Self> {
        Self::wrap(DevicePtrHandle::alloc_host(context, bytes_of::<T>(n)?)?)
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
            return Err(Error::ReversedRange {
                start: range.start,
                end: range.end,
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

    pub(crate) fn check_range(&self, start: usize, count: usize) -> Result<()> {
        if start.checked_add(count).is_none_or(|end| end > self.len) {
            return Err(Error::ElementsOutOfRange {
                start,
                count,
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
