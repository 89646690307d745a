//! cuBLAS: a handle bound to one stream for its whole life.

use std::sync::OnceLock;

use cudarc::cublas::sys::{self as cublas, cublasStatus_t};
use handles_core::ResourceHandle;
use handles_cuda::{ContextHandle, DevicePtrHandle, StreamHandle};

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

/// The bytes of an `rows`×`cols` f32 matrix, or an error if that overflows.
fn matrix_bytes(rows: usize, cols: usize) -> Result<usize, LibError> {
    rows.checked_mul(cols)
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(|| LibError::InvalidArgument(format!("a {rows}x{cols} matrix is too large")))
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
    /// `a` or `b`, and all three are reported as used on the handle's stream, so none is
    /// freed before the multiplication ran.
    pub fn sgemm(
        &self,
        (m, n, k): (usize, usize, usize),
        a: &DevicePtrHandle,
        b: &DevicePtrHandle,
        c: &DevicePtrHandle,
    ) -> Result<(), LibError> {
        let fits = |buffer: &DevicePtrHandle, rows, cols, name| -> Result<(), LibError> {
            let bytes = matrix_bytes(rows, cols)?;
            if bytes > buffer.size() {
                return Err(LibError::InvalidArgument(format!(
                    "{name} ({rows}x{cols} f32) needs {bytes} bytes; the buffer has {}",
                    buffer.size()
                )));
            }
            Ok(())
        };
        fits(a, m, k, "A")?;
        fits(b, k, n, "B")?;
        fits(c, m, n, "C")?;
        let disjoint = |x: &DevicePtrHandle, y: &DevicePtrHandle| {
            x.as_cu() + x.size() as u64 <= y.as_cu() || y.as_cu() + y.size() as u64 <= x.as_cu()
        };
        if !disjoint(c, a) || !disjoint(c, b) {
            return Err(LibError::InvalidArgument("C overlaps A or B".into()));
        }
        let dim = |value: usize| {
            i32::try_from(value.max(1))
                .map_err(|_| LibError::InvalidArgument(format!("dimension {value} exceeds i32")))
        };
        let (mi, ni, ki) = (dim(m)?, dim(n)?, dim(k)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let op = cublas::cublasOperation_t::CUBLAS_OP_N;
        let mut queued = false;
        let status = self.context().run(|| {
            // SAFETY: the handle, its stream and the three buffers are alive; each holds the
            // matrix its dimensions describe (checked above), with leading dimensions equal
            // to the row counts; C does not overlap A or B.
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
                    mi,
                    b.as_cu() as *const f32,
                    ki,
                    &beta,
                    c.as_cu() as *mut f32,
                    mi,
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
