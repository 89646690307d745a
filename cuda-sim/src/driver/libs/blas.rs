//! The simulated cuBLAS (`libcublas.so.13`): handles, their stream, pointer and math modes, and
//! the products cudarc's `CudaBlas` and candle reach (`cublasSgemm_v2`, `cublasDgemm_v2`,
//! `cublasHgemm`, their strided-batched forms, `cublasGemmEx`, `cublasGemmStridedBatchedEx` for
//! f16, bf16, f32 and f64, `cublasSgemv_v2`, `cublasDgemv_v2`, `cublasSasum_v2`,
//! `cublasDasum_v2`).
//! Arguments are validated as cuBLAS documents (`CUBLAS_STATUS_INVALID_VALUE` for negative
//! sizes, leading dimensions below the rows, unknown operations; `CUBLAS_STATUS_NOT_SUPPORTED`
//! for a type combination cuBLAS lacks; `CUBLAS_STATUS_NOT_INITIALIZED` for a handle that is
//! not live). Work that cannot run (a range outside its allocation, reported as
//! `out-of-bounds`; a destroyed stream) is `CUBLAS_STATUS_EXECUTION_FAILED`, cuBLAS's answer
//! when its kernel's launch fails (on a GPU the fault would surface at a later
//! synchronisation instead).
//!
//! # Safety
//!
//! Every export is a C function of the cuBLAS API: pointers it takes follow that API's
//! contract (a non-null out-pointer is valid for a write of its type; host scalars in host
//! pointer mode are valid for a read of the compute type's scalar). Device addresses are
//! never dereferenced before the simulator checked them against its allocations.

use std::ffi::{c_char, c_int, c_longlong, c_void};

use super::gemm::{Elem, Gemm, Matrix, Precision, Scalars};
use super::{Codes, issue, put, start, with_sim};
use crate::Kind;
use crate::api::faults::Statuses;
use crate::base::types::{CuResult, Raw};
use crate::order::races::Touch;
use crate::resources::library_handles::BlasHandle;
use crate::resources::work::LibraryWork;
use cuda_sim_ptx::Access;

pub const SUCCESS: u32 = 0;
pub const NOT_INITIALIZED: u32 = 1;
pub const ALLOC_FAILED: u32 = 3;
pub const INVALID_VALUE: u32 = 7;
pub const EXECUTION_FAILED: u32 = 13;
pub const INTERNAL_ERROR: u32 = 14;
pub const NOT_SUPPORTED: u32 = 15;

/// cuBLAS's answers.
pub const CODES: Codes = Codes {
    statuses: Statuses {
        success: SUCCESS,
        // A call from a host function or a destructor: cuBLAS's kernels could not launch.
        not_permitted: EXECUTION_FAILED,
        internal: INTERNAL_ERROR,
    },
    not_initialized: NOT_INITIALIZED,
    execution_failed: EXECUTION_FAILED,
    invalid_value: INVALID_VALUE,
};

/// The cuBLAS release played: 13.0.0 (`CUBLAS_VERSION`), with CUDA 13.0.
pub const VERSION: c_int = 130000;

/// The handle `raw`'s settings, reporting a dead handle or a call with another context
/// current (`what` names the call).
fn settings(raw: Raw) -> Result<BlasHandle, CuResult> {
    with_sim(&CODES, |sim| {
        let handle = sim.blas_handle(raw, false)?.clone();
        sim.check_handle_context(handle.context, &format!("cuBLAS handle {raw:#x}"));
        Ok(handle)
    })
}

/// `cublasOperation_t`: whether `op` transposes (`C` is `T` for real data; `CONJG` and
/// unknown values are invalid for gemm).
pub(crate) fn transposes(op: c_int) -> Result<bool, CuResult> {
    match op {
        0 => Ok(false),
        1 | 2 => Ok(true),
        _ => Err(INVALID_VALUE),
    }
}

/// A gemm's arguments, as `cublasGemmStridedBatchedEx` takes them (the other gemm entry
/// points are special cases).
struct GemmArgs {
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: u64,
    a_type: Elem,
    lda: c_int,
    stride_a: c_longlong,
    b: u64,
    b_type: Elem,
    ldb: c_int,
    stride_b: c_longlong,
    beta: *const c_void,
    c: u64,
    c_type: Elem,
    ldc: c_int,
    stride_c: c_longlong,
    batch: c_int,
    /// The scalars' type, from the compute type.
    scalar: Elem,
    precision: Precision,
}

/// Validates `args` as cuBLAS does and issues the product on `handle`'s stream.
fn gemm(call: &'static str, handle: Raw, args: GemmArgs) -> Result<(), CuResult> {
    let settings = settings(handle)?;
    let transa = transposes(args.transa)?;
    let transb = transposes(args.transb)?;
    if args.m < 0 || args.n < 0 || args.k < 0 || args.batch < 0 {
        return Err(INVALID_VALUE);
    }
    let (m, n, k) = (args.m as u64, args.n as u64, args.k as u64);
    let rows_a = if transa { k } else { m };
    let rows_b = if transb { n } else { k };
    if (args.lda as i64) < rows_a.max(1) as i64
        || (args.ldb as i64) < rows_b.max(1) as i64
        || (args.ldc as i64) < m.max(1) as i64
    {
        return Err(INVALID_VALUE);
    }
    if m == 0 || n == 0 || args.batch == 0 {
        return Ok(());
    }
    let scalars = if settings.pointer_mode == 1 {
        Scalars::Device {
            alpha: args.alpha as u64,
            beta: args.beta as u64,
            elem: args.scalar,
        }
    } else {
        if args.alpha.is_null() || args.beta.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null host scalars of the compute type's scalar type, by the API's
        // contract in host pointer mode.
        let (alpha, beta) = unsafe {
            (
                args.scalar.load(args.alpha as u64),
                args.scalar.load(args.beta as u64),
            )
        };
        Scalars::Host { alpha, beta }
    };
    let (lda, ldb, ldc) = (args.lda as i64, args.ldb as i64, args.ldc as i64);
    let work = Gemm {
        call,
        m,
        n,
        k,
        batch: args.batch as u64,
        a: Matrix {
            addr: args.a,
            elem: args.a_type,
            rows: m,
            cols: k,
            rs: if transa { lda } else { 1 },
            cs: if transa { 1 } else { lda },
            stride: args.stride_a,
        },
        b: Matrix {
            addr: args.b,
            elem: args.b_type,
            rows: k,
            cols: n,
            rs: if transb { ldb } else { 1 },
            cs: if transb { 1 } else { ldb },
            stride: args.stride_b,
        },
        c: Matrix {
            addr: args.c,
            elem: args.c_type,
            rows: m,
            cols: n,
            rs: 1,
            cs: ldc,
            stride: args.stride_c,
        },
        precision: args.precision,
        scalars,
    };
    // No matrix may leave the address space (then its footprint could not be computed).
    if work.widest_footprint().is_none() {
        return Err(INVALID_VALUE);
    }
    issue(&CODES, call, settings.stream, work)
}

/// The scalar type and precision of `cublasComputeType_t` `compute` for data types `a`, `b`,
/// `c`, if cuBLAS supports the combination (`cublasGemmEx`'s table, for these four types; the
/// `FAST` and `PEDANTIC` variants compute here as their base type).
pub(crate) fn compute(
    compute: u32,
    a: Elem,
    b: Elem,
    c: Elem,
) -> Result<(Elem, Precision), CuResult> {
    use Elem::*;
    match compute {
        // CUBLAS_COMPUTE_16F(_PEDANTIC): all f16, f16 scalars.
        64 | 65 if (a, b, c) == (F16, F16, F16) => Ok((F16, Precision::F32)),
        // CUBLAS_COMPUTE_32F and its variants.
        68 | 69 | 74 | 75 | 77 => match (a, b, c) {
            (F32, F32, F32) | (F16, F16, F16) | (Bf16, Bf16, Bf16) => Ok((F32, Precision::F32)),
            (F16, F16, F32) | (Bf16, Bf16, F32) => Ok((F32, Precision::F32)),
            _ => Err(NOT_SUPPORTED),
        },
        // CUBLAS_COMPUTE_64F(_PEDANTIC).
        70 | 71 if (a, b, c) == (F64, F64, F64) => Ok((F64, Precision::F64)),
        64 | 65 | 70 | 71 => Err(NOT_SUPPORTED),
        // CUBLAS_COMPUTE_32I and unknown values.
        72 | 73 => Err(NOT_SUPPORTED),
        _ => Err(INVALID_VALUE),
    }
}

pub(crate) fn elem(value: u32) -> Result<Elem, CuResult> {
    Elem::from_cuda(value).ok_or(NOT_SUPPORTED)
}

/// `y = alpha * op(A) * x + beta * y` as a gemm of one column: x and y are matrices of one
/// column whose rows are `inc` elements apart (from the far end when `inc` is negative).
#[allow(clippy::too_many_arguments)]
fn gemv(
    call: &'static str,
    handle: Raw,
    trans: c_int,
    m: c_int,
    n: c_int,
    alpha: *const c_void,
    a: u64,
    lda: c_int,
    x: u64,
    incx: c_int,
    beta: *const c_void,
    y: u64,
    incy: c_int,
    elem: Elem,
) -> Result<(), CuResult> {
    let settings = settings(handle)?;
    let transposed = transposes(trans)?;
    if m < 0 || n < 0 || (lda as i64) < (m.max(1) as i64) || incx == 0 || incy == 0 {
        return Err(INVALID_VALUE);
    }
    let (m, n) = (m as u64, n as u64);
    let (rows, len_x) = if transposed { (n, m) } else { (m, n) };
    if m == 0 || n == 0 {
        return Ok(());
    }
    let scalars = if settings.pointer_mode == 1 {
        Scalars::Device {
            alpha: alpha as u64,
            beta: beta as u64,
            elem,
        }
    } else {
        if alpha.is_null() || beta.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null host scalars of the data type, by the API's contract.
        unsafe {
            Scalars::Host {
                alpha: elem.load(alpha as u64),
                beta: elem.load(beta as u64),
            }
        }
    };
    // A vector's first element: at the far end when its increment is negative (BLAS).
    let first = |base: u64, len: u64, inc: c_int| -> Option<u64> {
        if inc > 0 {
            return Some(base);
        }
        let back = (len as i128 - 1) * -(inc as i128) * elem.size() as i128;
        u64::try_from(base as i128 + back).ok()
    };
    let (Some(x0), Some(y0)) = (first(x, len_x, incx), first(y, rows, incy)) else {
        return Err(INVALID_VALUE);
    };
    let lda = lda as i64;
    let work = Gemm {
        call,
        m: rows,
        n: 1,
        k: len_x,
        batch: 1,
        a: Matrix {
            addr: a,
            elem,
            rows,
            cols: len_x,
            rs: if transposed { lda } else { 1 },
            cs: if transposed { 1 } else { lda },
            stride: 0,
        },
        b: Matrix {
            addr: x0,
            elem,
            rows: len_x,
            cols: 1,
            rs: incx as i64,
            cs: 0,
            stride: 0,
        },
        c: Matrix {
            addr: y0,
            elem,
            rows,
            cols: 1,
            rs: incy as i64,
            cs: 0,
            stride: 0,
        },
        precision: if elem == Elem::F64 {
            Precision::F64
        } else {
            Precision::F32
        },
        scalars,
    };
    if work.widest_footprint().is_none() {
        return Err(INVALID_VALUE);
    }
    issue(&CODES, call, settings.stream, work)
}

/// `sum |x_i|` of `n` elements `inc` apart, written to `result`: host memory (host pointer
/// mode, so the call returns once it is written, as cuBLAS's does) or device memory.
#[derive(Debug)]
struct Asum {
    call: &'static str,
    x: Matrix,
    result: u64,
    on_device: bool,
}

impl LibraryWork for Asum {
    fn describe(&self) -> String {
        format!(
            "{} (asum of {} {})",
            self.call,
            self.x.rows,
            self.x.elem.name()
        )
    }

    unsafe fn footprint(&self) -> Vec<Touch> {
        let mut touches = self.x.ranges(1, Access::Read).unwrap_or_default();
        if self.on_device {
            touches.push(Touch::bytes(self.result, self.x.elem.size(), Access::Write));
        }
        touches
    }

    unsafe fn run(&self) {
        let mut sum = 0.0f64;
        for i in 0..self.x.rows {
            let addr = (self.x.addr as i128
                + i as i128 * self.x.rs as i128 * self.x.elem.size() as i128)
                as u64;
            // SAFETY: x's range was checked, by this function's contract.
            sum += unsafe { self.x.elem.load(addr) }.abs();
        }
        let p = self.result as usize;
        // SAFETY: a device result was checked with the footprint; a host one is the caller's
        // out-pointer, valid for a write by the API's contract (the call waits for this).
        unsafe {
            match self.x.elem {
                Elem::F64 => (p as *mut f64).write_unaligned(sum),
                _ => (p as *mut f32).write_unaligned(sum as f32),
            }
        }
    }
}

fn asum(
    call: &'static str,
    handle: Raw,
    n: c_int,
    x: u64,
    incx: c_int,
    result: u64,
    elem: Elem,
) -> Result<(), CuResult> {
    let settings = settings(handle)?;
    if result == 0 {
        return Err(INVALID_VALUE);
    }
    let on_device = settings.pointer_mode == 1;
    // n <= 0 or incx <= 0: the result is 0 (BLAS), written without reading x.
    let count = if n <= 0 || incx <= 0 { 0 } else { n as u64 };
    let work = Asum {
        call,
        x: Matrix {
            addr: x,
            elem,
            rows: count,
            cols: 1,
            rs: incx.max(1) as i64,
            cs: 0,
            stride: 0,
        },
        result,
        on_device,
    };
    if work.x.ranges(1, Access::Read).is_none() {
        return Err(INVALID_VALUE);
    }
    issue(&CODES, call, settings.stream, work)?;
    if !on_device {
        // The host's result: the call returns once the stream ran it.
        crate::wait_for(|sim| {
            let target = sim.stream(settings.stream, call)?;
            if sim.is_busy(target.timeline) {
                return Ok(None);
            }
            sim.checker.host_waits(target.timeline);
            Ok(Some(()))
        })
        .map_err(|code| CODES.status_of_work(code))?;
    }
    Ok(())
}

/// The typed gemm entry points, each a [`gemm`] of one data type with scalars of that type:
/// `cublas<T>gemm` (`_v2` where cuBLAS names it so) and `cublas<T>gemmStridedBatched`.
macro_rules! typed_gemms {
    ($( $gemm:ident, $batched:ident: $t:ty => $elem:expr, $precision:expr; )*) => {
        library_fns! { CODES.statuses; $(
            fn $gemm(
                handle: Raw, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int,
                alpha: *const $t, a: *const $t, lda: c_int, b: *const $t, ldb: c_int,
                beta: *const $t, c: *mut $t, ldc: c_int
            ) {
                gemm(stringify!($gemm), handle, GemmArgs {
                    transa, transb, m, n, k, alpha: alpha.cast(),
                    a: a as u64, a_type: $elem, lda, stride_a: 0,
                    b: b as u64, b_type: $elem, ldb, stride_b: 0,
                    beta: beta.cast(), c: c as u64, c_type: $elem, ldc, stride_c: 0,
                    batch: 1, scalar: $elem, precision: $precision,
                })
            }

            fn $batched(
                handle: Raw, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int,
                alpha: *const $t, a: *const $t, lda: c_int, stride_a: c_longlong,
                b: *const $t, ldb: c_int, stride_b: c_longlong,
                beta: *const $t, c: *mut $t, ldc: c_int, stride_c: c_longlong, batch: c_int
            ) {
                gemm(stringify!($batched), handle, GemmArgs {
                    transa, transb, m, n, k, alpha: alpha.cast(),
                    a: a as u64, a_type: $elem, lda, stride_a,
                    b: b as u64, b_type: $elem, ldb, stride_b,
                    beta: beta.cast(), c: c as u64, c_type: $elem, ldc, stride_c,
                    batch, scalar: $elem, precision: $precision,
                })
            }
        )* }
    };
}

// `cublasHgemm` takes `__half` scalars and computes as `CUBLAS_COMPUTE_16F` does here (f32
// sums, rounded once), as `cublasGemmEx` with that compute type.
typed_gemms! {
    cublasSgemm_v2, cublasSgemmStridedBatched: f32 => Elem::F32, Precision::F32;
    cublasDgemm_v2, cublasDgemmStridedBatched: f64 => Elem::F64, Precision::F64;
    cublasHgemm, cublasHgemmStridedBatched: u16 => Elem::F16, Precision::F32;
}

/// The text of a status, as `cublasGetStatusString` returns it.
fn status_text(status: u32, name: bool) -> &'static std::ffi::CStr {
    match (status, name) {
        (0, true) => c"CUBLAS_STATUS_SUCCESS",
        (1, true) => c"CUBLAS_STATUS_NOT_INITIALIZED",
        (3, true) => c"CUBLAS_STATUS_ALLOC_FAILED",
        (7, true) => c"CUBLAS_STATUS_INVALID_VALUE",
        (8, true) => c"CUBLAS_STATUS_ARCH_MISMATCH",
        (11, true) => c"CUBLAS_STATUS_MAPPING_ERROR",
        (13, true) => c"CUBLAS_STATUS_EXECUTION_FAILED",
        (14, true) => c"CUBLAS_STATUS_INTERNAL_ERROR",
        (15, true) => c"CUBLAS_STATUS_NOT_SUPPORTED",
        (16, true) => c"CUBLAS_STATUS_LICENSE_ERROR",
        (_, true) => c"CUBLAS_STATUS_UNKNOWN",
        (0, false) => c"the operation completed successfully",
        (1, false) => c"the library was not initialized",
        (3, false) => c"the resource allocation failed",
        (7, false) => c"an invalid numeric value was used as an argument",
        (13, false) => c"the GPU program failed to execute",
        (14, false) => c"an internal operation failed",
        (15, false) => c"the functionality requested is not supported",
        (_, false) => c"unknown error",
    }
}

/// `cublasGetStatusName`: the status's enumerator name (a static string).
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_snake_case)]
pub extern "C" fn cublasGetStatusName(status: u32) -> *const c_char {
    status_text(status, true).as_ptr()
}

/// `cublasGetStatusString`: the status's description (a static string).
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_snake_case)]
pub extern "C" fn cublasGetStatusString(status: u32) -> *const c_char {
    status_text(status, false).as_ptr()
}

library_fns! { CODES.statuses;
    /// Creates a handle in the current context (the driver is started as the runtime would).
    /// No current context: `CUBLAS_STATUS_NOT_INITIALIZED` and a `wrong-context` report (the
    /// runtime under cuBLAS would take device 0's primary context instead).
    fn cublasCreate_v2(handle: *mut Raw) {
        start(&CODES)?;
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(&CODES, |sim| {
            let context = sim.require_current("cublasCreate_v2")?;
            let raw = sim.new_raw(Kind::BlasHandle);
            sim.library_handles.blas.insert(
                raw,
                BlasHandle {
                    context,
                    stream: 0,
                    pointer_mode: 0,
                    math_mode: 0,
                    workspace: (0, 0),
                },
            );
            Ok(raw)
        })?;
        put(handle, raw, INVALID_VALUE)
    }

    /// Destroys a handle: a dead one is a `double-destroy` (or `destroyed-handle` when never
    /// created) and `CUBLAS_STATUS_NOT_INITIALIZED`.
    fn cublasDestroy_v2(handle: Raw) {
        with_sim(&CODES, |sim| {
            sim.blas_handle(handle, true)?;
            sim.library_handles.blas.remove(&handle);
            sim.bury(handle, Kind::BlasHandle);
            Ok(())
        })
    }

    /// Sets the stream the handle's work runs on (0: the default stream). Checked when work
    /// is issued on it, as cuBLAS uses it only then.
    fn cublasSetStream_v2(handle: Raw, stream: Raw) {
        with_sim(&CODES, |sim| {
            sim.blas_handle(handle, false)?.stream = stream;
            Ok(())
        })
    }

    fn cublasGetStream_v2(handle: Raw, stream: *mut Raw) {
        let raw = with_sim(&CODES, |sim| Ok(sim.blas_handle(handle, false)?.stream))?;
        put(stream, raw, INVALID_VALUE)
    }

    /// Host (0) or device (1) pointer mode for alpha, beta and results.
    fn cublasSetPointerMode_v2(handle: Raw, mode: c_int) {
        if !(0..=1).contains(&mode) {
            return Err(INVALID_VALUE);
        }
        with_sim(&CODES, |sim| {
            sim.blas_handle(handle, false)?.pointer_mode = mode as u32;
            Ok(())
        })
    }

    fn cublasGetPointerMode_v2(handle: Raw, mode: *mut c_int) {
        let value = with_sim(&CODES, |sim| Ok(sim.blas_handle(handle, false)?.pointer_mode))?;
        put(mode, value as c_int, INVALID_VALUE)
    }

    /// Records the math mode (the products compute the same whatever it says).
    fn cublasSetMathMode(handle: Raw, mode: c_int) {
        with_sim(&CODES, |sim| {
            sim.blas_handle(handle, false)?.math_mode = mode as u32;
            Ok(())
        })
    }

    fn cublasGetMathMode(handle: Raw, mode: *mut c_int) {
        let value = with_sim(&CODES, |sim| Ok(sim.blas_handle(handle, false)?.math_mode))?;
        put(mode, value as c_int, INVALID_VALUE)
    }

    /// Records a user workspace (the simulated products need none and never touch it).
    fn cublasSetWorkspace_v2(handle: Raw, workspace: *mut c_void, size: usize) {
        with_sim(&CODES, |sim| {
            sim.blas_handle(handle, false)?.workspace = (workspace as u64, size);
            Ok(())
        })
    }

    fn cublasGetVersion_v2(handle: Raw, version: *mut c_int) {
        with_sim(&CODES, |sim| sim.blas_handle(handle, false).map(|_| ()))?;
        put(version, VERSION, INVALID_VALUE)
    }

    /// `MAJOR_VERSION` (0), `MINOR_VERSION` (1), `PATCH_LEVEL` (2) of [`VERSION`].
    fn cublasGetProperty(property: c_int, value: *mut c_int) {
        let answer = match property {
            0 => VERSION / 10000,
            1 => VERSION / 100 % 100,
            2 => VERSION % 100,
            _ => return Err(INVALID_VALUE),
        };
        put(value, answer, INVALID_VALUE)
    }

    /// `cudaDataType_t` A, B, C of f16, bf16, f32 or f64 and a compute type of cuBLAS's table;
    /// the algorithm is ignored.
    fn cublasGemmEx(
        handle: Raw, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int,
        alpha: *const c_void, a: *const c_void, a_type: u32, lda: c_int,
        b: *const c_void, b_type: u32, ldb: c_int,
        beta: *const c_void, c: *mut c_void, c_type: u32, ldc: c_int,
        compute_type: u32, algo: c_int
    ) {
        let _ = algo;
        let (at, bt, ct) = (elem(a_type)?, elem(b_type)?, elem(c_type)?);
        let (scalar, precision) = compute(compute_type, at, bt, ct)?;
        gemm("cublasGemmEx", handle, GemmArgs {
            transa, transb, m, n, k, alpha,
            a: a as u64, a_type: at, lda, stride_a: 0,
            b: b as u64, b_type: bt, ldb, stride_b: 0,
            beta, c: c as u64, c_type: ct, ldc, stride_c: 0,
            batch: 1, scalar, precision,
        })
    }

    fn cublasGemmStridedBatchedEx(
        handle: Raw, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int,
        alpha: *const c_void, a: *const c_void, a_type: u32, lda: c_int, stride_a: c_longlong,
        b: *const c_void, b_type: u32, ldb: c_int, stride_b: c_longlong,
        beta: *const c_void, c: *mut c_void, c_type: u32, ldc: c_int, stride_c: c_longlong,
        batch: c_int, compute_type: u32, algo: c_int
    ) {
        let _ = algo;
        let (at, bt, ct) = (elem(a_type)?, elem(b_type)?, elem(c_type)?);
        let (scalar, precision) = compute(compute_type, at, bt, ct)?;
        gemm("cublasGemmStridedBatchedEx", handle, GemmArgs {
            transa, transb, m, n, k, alpha,
            a: a as u64, a_type: at, lda, stride_a,
            b: b as u64, b_type: bt, ldb, stride_b,
            beta, c: c as u64, c_type: ct, ldc, stride_c,
            batch, scalar, precision,
        })
    }

    fn cublasSgemv_v2(
        handle: Raw, trans: c_int, m: c_int, n: c_int, alpha: *const f32, a: *const f32,
        lda: c_int, x: *const f32, incx: c_int, beta: *const f32, y: *mut f32, incy: c_int
    ) {
        gemv("cublasSgemv_v2", handle, trans, m, n, alpha.cast(), a as u64, lda,
            x as u64, incx, beta.cast(), y as u64, incy, Elem::F32)
    }

    fn cublasDgemv_v2(
        handle: Raw, trans: c_int, m: c_int, n: c_int, alpha: *const f64, a: *const f64,
        lda: c_int, x: *const f64, incx: c_int, beta: *const f64, y: *mut f64, incy: c_int
    ) {
        gemv("cublasDgemv_v2", handle, trans, m, n, alpha.cast(), a as u64, lda,
            x as u64, incx, beta.cast(), y as u64, incy, Elem::F64)
    }

    fn cublasSasum_v2(handle: Raw, n: c_int, x: *const f32, incx: c_int, result: *mut f32) {
        asum("cublasSasum_v2", handle, n, x as u64, incx, result as u64, Elem::F32)
    }

    fn cublasDasum_v2(handle: Raw, n: c_int, x: *const f64, incx: c_int, result: *mut f64) {
        asum("cublasDasum_v2", handle, n, x as u64, incx, result as u64, Elem::F64)
    }

    /// Not simulated: `CUBLAS_STATUS_NOT_SUPPORTED` (cudarc's `GroupedGemm` reaches it).
    fn cublasGemmGroupedBatchedEx(
        handle: Raw, transa: *const c_int, transb: *const c_int, m: *const c_int,
        n: *const c_int, k: *const c_int, alpha: *const c_void, a: *const *const c_void,
        a_type: u32, lda: *const c_int, b: *const *const c_void, b_type: u32,
        ldb: *const c_int, beta: *const c_void, c: *const *mut c_void, c_type: u32,
        ldc: *const c_int, group_count: c_int, group_size: *const c_int, compute_type: u32
    ) {
        let _ = (transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c);
        let _ = (c_type, ldc, group_count, group_size, compute_type);
        settings(handle)?;
        Err(NOT_SUPPORTED)
    }
}
