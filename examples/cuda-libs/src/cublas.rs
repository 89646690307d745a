//! cuBLAS: a handle bound to one stream for its whole life.

use std::sync::OnceLock;

use cudarc::cublas::sys::{self as cublas, cublasStatus_t};
use handles_core::ResourceHandle;
use handles_cuda::{ContextHandle, DevicePtrHandle, StreamHandle};

use crate::checks::{disjoint, f32_bytes, require_fits, require_reachable};
use crate::error::{LibError, check, require};

/// A cuBLAS handle whose every call runs on `stream`, in `context`.
#[derive(ResourceHandle)]
#[handle(raw = cublas::cublasHandle_t, accessor = as_raw, delete = destroy)]
pub struct Cublas {
    /// The stream every call of the handle runs on (set once, at creation).
    #[owner]
    pub stream: StreamHandle,
    /// The context the handle was created in.
    #[owner]
    pub context: ContextHandle,
}
// SAFETY: cuBLAS lets threads share a handle as long as its configuration does not change
// concurrently; this handle's only setting, its stream, is made once before it is shared.
unsafe impl handles_core::ThreadSafe for Cublas {}

fn destroy(raw: cublas::cublasHandle_t, record: &Cublas) -> Result<(), LibError> {
    // SAFETY: the handle owns `raw`; its context is current for the call.
    record
        .context
        .run(|| ok("cublasDestroy", unsafe { cublas::cublasDestroy_v2(raw) }))
}

fn ok(call: &'static str, status: cublasStatus_t) -> Result<(), LibError> {
    check(call, status, cublasStatus_t::CUBLAS_STATUS_SUCCESS)
}

fn loaded() -> Result<(), LibError> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only probes whether the library can be opened.
    require(
        "cuBLAS",
        *PRESENT.get_or_init(|| unsafe { cublas::is_culib_present() }),
    )
}

impl CublasHandle {
    /// A cuBLAS handle on `stream` (`cublasCreate` in the stream's context, then
    /// `cublasSetStream`).
    pub fn new(stream: &StreamHandle) -> Result<Self, LibError> {
        loaded()?;
        let context = crate::context_of(stream)?;
        context.run(|| {
            let mut raw = std::ptr::null_mut();
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            ok("cublasCreate", unsafe { cublas::cublasCreate_v2(&mut raw) })?;
            let record = Cublas {
                stream: stream.clone(),
                context: context.clone(),
            };
            // SAFETY: a fresh cuBLAS handle owned by nobody else, destroyed once by `destroy`
            // in its context, which the record keeps alive with the stream.
            let handle = unsafe { CublasHandle::from_raw(raw, record) };
            // SAFETY: both are alive; a failure drops `handle`, which destroys it.
            ok("cublasSetStream", unsafe {
                cublas::cublasSetStream_v2(raw, stream.as_cu() as _)
            })?;
            Ok(handle)
        })
    }

    /// `C = A·B` for column-major f32 matrices (`cublasSgemm`): `a` is `m`×`k`, `b` is
    /// `k`×`n`, `c` is `m`×`n`. Sizes are checked against the buffers, `c` must not overlap
    /// `a` or `b`, all three must be reachable from the handle's device, and all three are
    /// reported as used on the handle's stream, so none is freed before the multiplication
    /// ran.
    ///
    /// Empty shapes call no cuBLAS: with `m` or `n` zero, C has no elements and nothing is
    /// done; with `k` zero, every element of A·B is an empty sum, so C is zeroed by a memset
    /// on the handle's stream (reported as a use of C there).
    pub fn sgemm(
        &self,
        (m, n, k): (usize, usize, usize),
        a: &DevicePtrHandle,
        b: &DevicePtrHandle,
        c: &DevicePtrHandle,
    ) -> Result<(), LibError> {
        require_fits(a, f32_bytes(m, k)?, || format!("A ({m}x{k} f32)"))?;
        require_fits(b, f32_bytes(k, n)?, || format!("B ({k}x{n} f32)"))?;
        let c_bytes = f32_bytes(m, n)?;
        require_fits(c, c_bytes, || format!("C ({m}x{n} f32)"))?;
        if !disjoint(c, a) || !disjoint(c, b) {
            return Err(LibError::Overlap { output: "C" });
        }
        // Held until the multiplication is queued.
        let _reach = require_reachable([a, b, c], self.stream())?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            // 0.0f32 is four zero bytes.
            return Ok(c.memset_async(0, c_bytes, self.stream())?);
        }
        loaded()?;
        let dim = |value: usize| {
            i32::try_from(value).map_err(|_| LibError::TooLarge {
                what: "dimension",
                value,
            })
        };
        let (mi, ni, ki) = (dim(m)?, dim(n)?, dim(k)?);
        // cuBLAS requires each leading dimension to be at least max(1, rows).
        let (lda, ldb, ldc) = (dim(m.max(1))?, dim(k.max(1))?, dim(m.max(1))?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let op = cublas::cublasOperation_t::CUBLAS_OP_N;
        let mut queued = false;
        let status = self.context().run(|| {
            // SAFETY: the handle, its stream and the three buffers are alive, and reachable
            // from the handle's device (checked above); m, n and k are positive and each
            // buffer holds the matrix its dimensions describe (checked above), with leading
            // dimensions equal to the row counts; C does not overlap A or B.
            let called = ok("cublasSgemm", unsafe {
                cublas::cublasSgemm_v2(
                    self.as_raw(),
                    op,
                    op,
                    mi,
                    ni,
                    ki,
                    &alpha,
                    a.as_cu() as *const f32,
                    lda,
                    b.as_cu() as *const f32,
                    ldb,
                    &beta,
                    c.as_cu() as *mut f32,
                    ldc,
                )
            });
            queued = called.is_ok();
            called
        });
        // Once queued, every buffer is reported whatever else failed (a context restore
        // after the call): an unreported use could be freed before the multiplication.
        if queued {
            let mut reported = Ok(());
            for buffer in [a, b, c] {
                reported = reported.and(buffer.record_use(self.stream()));
            }
            reported?;
        }
        status
    }

    /// The cuBLAS version (`cublasGetVersion`).
    pub fn version(&self) -> Result<i32, LibError> {
        let mut version = 0;
        // SAFETY: the handle is alive; `version` is a valid out-pointer.
        ok("cublasGetVersion", unsafe {
            cublas::cublasGetVersion_v2(self.as_raw(), &mut version)
        })?;
        Ok(version)
    }
}
