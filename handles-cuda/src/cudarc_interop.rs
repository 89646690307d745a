//! Interoperation with cudarc's safe types: wrap a `CudaContext`, `CudaStream` or `CudaSlice`
//! as a handle that keeps the cudarc object alive, and hand handles back to cudarc where its
//! API allows.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr as _};

use crate::context::{Context, ContextHandle};
use crate::device_ptr::DevicePtrHandle;
use crate::driver::ensure_loaded;
use crate::error::{Error, Result, driver_error};
use crate::scope::{current_raw, restore_current};
use crate::stream::{Stream, StreamHandle};

impl ContextHandle {
    /// Wraps a cudarc context. The handle keeps `context` alive (with-owner) and never
    /// releases it itself.
    pub fn from_cudarc(context: &Arc<CudaContext>) -> Self {
        let record = Context::reference(Some(context.ordinal()));
        // SAFETY: the raw context is valid while the cudarc context lives, and the handle
        // keeps it alive.
        unsafe { ContextHandle::from_raw_with_owner(context.cu_ctx(), record, context.clone()) }
    }

    /// A cudarc context for the same device's primary context. cudarc retains the primary
    /// context itself, so the result is independent of this handle. Fails for contexts that
    /// are not known to be a device's primary context.
    pub fn to_cudarc(&self) -> Result<Arc<CudaContext>> {
        ensure_loaded()?;
        let Some(ordinal) = self.device() else {
            return Err(Error::InvalidArgument(
                "this context's device is unknown; only primary contexts convert to cudarc".into(),
            ));
        };
        // cudarc makes the context it returns current on this thread; the caller's current
        // context is put back, whatever cudarc did.
        let previous = current_raw()?;
        let made = CudaContext::new(ordinal);
        restore_current(previous)?;
        let context = made.map_err(|error| driver_error("cudarc CudaContext::new", error.0))?;
        if context.cu_ctx() != self.as_cu() {
            return Err(Error::InvalidArgument(
                "this is not the device's primary context".into(),
            ));
        }
        Ok(context)
    }
}

impl StreamHandle {
    /// Wraps a cudarc stream. The handle keeps `stream` (and so its context) alive and never
    /// destroys it itself.
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> Self {
        let record = Stream {
            context: Some(ContextHandle::from_cudarc(stream.context())),
        };
        // SAFETY: the raw stream is valid while the cudarc stream lives, and the handle keeps
        // it alive.
        unsafe { StreamHandle::from_raw_with_owner(stream.cu_stream(), record, stream.clone()) }
    }

    /// A cudarc stream wrapping this one without owning it.
    ///
    /// # Safety
    ///
    /// This handle (or a clone) must outlive every use of the returned cudarc stream, and
    /// `context` must be the context this stream belongs to.
    pub unsafe fn to_cudarc_borrowed(&self, context: &Arc<CudaContext>) -> Arc<CudaStream> {
        // SAFETY: forwarded from this function's contract.
        unsafe { context.wrap_borrowed_stream(self.as_cu()) }
    }
}

impl DevicePtrHandle {
    /// Wraps a cudarc slice. The handle keeps `slice` (and its stream and context) alive and
    /// never frees the memory itself: cudarc frees it when the last handle drops the slice.
    pub fn from_cudarc_slice<T: Send + Sync + 'static>(slice: CudaSlice<T>) -> Self {
        let size = slice.num_bytes();
        let stream = slice.stream().clone();
        // Asking for the pointer orders `stream` after pending writes, as cudarc requires.
        let raw = {
            let (raw, sync) = slice.device_ptr(&stream);
            drop(sync);
            raw
        };
        let record = DevicePtrHandle::unowned_record(size);
        // SAFETY: the memory is valid while the slice lives, and the handle keeps it alive.
        unsafe { DevicePtrHandle::from_raw_with_owner(raw, record, slice) }
    }
}
