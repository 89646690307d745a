//! cuDNN: a handle bound to one stream for its whole life.

use cudarc::cudnn::sys::{self as cudnn, cudnnStatus_t};
use handles_core::ResourceHandle;
use handles_cuda::{ContextHandle, StreamHandle};

use crate::error::{LibError, check, require};

/// A cuDNN handle whose calls run on `stream`, in `context`.
#[derive(ResourceHandle)]
#[handle(raw = cudnn::cudnnHandle_t, accessor = as_raw, delete = destroy)]
pub struct Cudnn {
    /// The stream every call of the handle runs on (set once, at creation).
    #[owner]
    pub stream: StreamHandle,
    /// The context the handle was created in.
    #[owner]
    pub context: ContextHandle,
}
// SAFETY: cuDNN lets a handle be used from several threads as long as its stream does not
// change concurrently; this handle's stream is set once, before it is shared.
unsafe impl handles_core::ThreadSafe for Cudnn {}

fn destroy(raw: cudnn::cudnnHandle_t, record: &Cudnn) -> Result<(), LibError> {
    // SAFETY: the handle owns `raw`; its context is current for the call.
    record
        .context
        .run(|| ok("cudnnDestroy", unsafe { cudnn::cudnnDestroy(raw) }))
}

fn ok(call: &'static str, status: cudnnStatus_t) -> Result<(), LibError> {
    check(call, status, cudnnStatus_t::CUDNN_STATUS_SUCCESS)
}

impl CudnnHandle {
    /// A cuDNN handle on `stream` (`cudnnCreate` in the stream's context, then
    /// `cudnnSetStream`).
    pub fn new(stream: &StreamHandle) -> Result<Self, LibError> {
        // SAFETY: only probes whether the library can be opened.
        require("cuDNN", unsafe { cudnn::is_culib_present() })?;
        let context = crate::context_of(stream)?;
        context.run(|| {
            let mut raw = std::ptr::null_mut();
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            ok("cudnnCreate", unsafe { cudnn::cudnnCreate(&mut raw) })?;
            let record = Cudnn {
                stream: stream.clone(),
                context: context.clone(),
            };
            // SAFETY: a fresh cuDNN handle owned by nobody else, destroyed once by `destroy`
            // in its context, which the record keeps alive with the stream.
            let handle = unsafe { CudnnHandle::from_raw(raw, record) };
            // SAFETY: both are alive; a failure drops `handle`, which destroys it.
            ok("cudnnSetStream", unsafe {
                cudnn::cudnnSetStream(raw, stream.as_cu() as _)
            })?;
            Ok(handle)
        })
    }

    /// cuDNN's version (`cudnnGetVersion`), e.g. 90100 for 9.1.0.
    pub fn version() -> Result<usize, LibError> {
        // SAFETY: only probes whether the library can be opened.
        require("cuDNN", unsafe { cudnn::is_culib_present() })?;
        // SAFETY: the library is loaded; the call takes nothing.
        Ok(unsafe { cudnn::cudnnGetVersion() })
    }
}
