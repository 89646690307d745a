//! cuBLASLt: a handle and a matmul descriptor, each a few lines of declaration.

use cudarc::cublaslt::sys::{self as lt, cublasStatus_t};
use handles_core::ResourceHandle;
use handles_cuda::ContextHandle;

use crate::error::{LibError, check, require};

/// A cuBLASLt handle, created in `context`.
#[derive(ResourceHandle)]
#[handle(raw = lt::cublasLtHandle_t, accessor = as_raw, delete = destroy_lt)]
pub struct CublasLt {
    /// The context the handle was created in.
    #[owner]
    pub context: ContextHandle,
}
// SAFETY: cuBLASLt handles carry no per-call state and may be used from any thread.
unsafe impl handles_core::ThreadSafe for CublasLt {}

fn destroy_lt(raw: lt::cublasLtHandle_t, record: &CublasLt) -> Result<(), LibError> {
    // SAFETY: the handle owns `raw`; its context is current for the call.
    record
        .context
        .run(|| ok("cublasLtDestroy", unsafe { lt::cublasLtDestroy(raw) }))
}

/// A cuBLASLt matmul descriptor (f32 compute, f32 scale); host-side, owned by no context.
#[derive(ResourceHandle)]
#[handle(raw = lt::cublasLtMatmulDesc_t, accessor = as_raw, delete = destroy_desc)]
pub struct MatmulDesc {}
// SAFETY: a descriptor is host memory of cuBLASLt, used read-only after creation here.
unsafe impl handles_core::ThreadSafe for MatmulDesc {}

fn destroy_desc(raw: lt::cublasLtMatmulDesc_t, _: &MatmulDesc) -> Result<(), LibError> {
    // SAFETY: the handle owns `raw` and this deleter runs once.
    ok("cublasLtMatmulDescDestroy", unsafe {
        lt::cublasLtMatmulDescDestroy(raw)
    })
}

fn ok(call: &'static str, status: cublasStatus_t) -> Result<(), LibError> {
    check(call, status, cublasStatus_t::CUBLAS_STATUS_SUCCESS)
}

fn loaded() -> Result<(), LibError> {
    // SAFETY: only probes whether the library can be opened.
    require("cuBLASLt", unsafe { lt::is_culib_present() })
}

impl CublasLtHandle {
    /// A cuBLASLt handle in `context` (`cublasLtCreate`).
    pub fn new(context: &ContextHandle) -> Result<Self, LibError> {
        loaded()?;
        context.run(|| {
            let mut raw = std::ptr::null_mut();
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            ok("cublasLtCreate", unsafe { lt::cublasLtCreate(&mut raw) })?;
            let record = CublasLt {
                context: context.clone(),
            };
            // SAFETY: a fresh handle owned by nobody else, destroyed once in its context.
            Ok(unsafe { CublasLtHandle::from_raw(raw, record) })
        })
    }
}

impl MatmulDescHandle {
    /// A matmul descriptor computing and scaling in f32 (`cublasLtMatmulDescCreate`).
    pub fn f32() -> Result<Self, LibError> {
        loaded()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the enums are valid values.
        ok("cublasLtMatmulDescCreate", unsafe {
            lt::cublasLtMatmulDescCreate(
                &mut raw,
                lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lt::cudaDataType_t::CUDA_R_32F,
            )
        })?;
        // SAFETY: a fresh descriptor owned by nobody else, destroyed once by `destroy_desc`.
        Ok(unsafe { MatmulDescHandle::from_raw(raw, MatmulDesc {}) })
    }
}
