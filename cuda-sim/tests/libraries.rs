//! The simulated cuBLAS and cuRAND (`src/driver/libs/`): products equal to a CPU reference
//! for f32, f64, f16 and bf16 (strided batched, every transpose, padded leading dimensions),
//! the generators' distributions and determinism, the checks (bounds, a cross-stream race,
//! an uninitialised read, leaked and twice-destroyed handles), each with its correct twin,
//! a start-up as candle's, and the library's other names reaching the same state. Each
//! scenario runs in a child process under the simulator, and the parent test reads its report.

use std::ffi::c_void;

use cudarc::cublas::sys as blas;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::curand::CudaRng;
use cudarc::curand::sys as rand;
use cudarc::driver::sys;

#[macro_use]
mod common;
use common::*;

use blas::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};

// ---------------------------------------------------------------------------------------------
// Helpers: raw device memory and raw cuBLAS calls.

/// `bytes` of device memory (never written).
fn alloc(bytes: usize) -> sys::CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: a context is current; valid out-pointer.
    unsafe { ok(sys::cuMemAlloc_v2(&mut ptr, bytes)) };
    ptr
}

fn free(ptr: sys::CUdeviceptr) {
    // SAFETY: our own allocation.
    unsafe { ok(sys::cuMemFree_v2(ptr)) };
}

/// Device memory holding `data`.
fn upload<T: Copy>(data: &[T]) -> sys::CUdeviceptr {
    let bytes = std::mem::size_of_val(data);
    let ptr = alloc(bytes);
    // SAFETY: `bytes` bytes of device memory and of `data`. The copy from pageable memory
    // may return before the device side is written, with the transfer still on the legacy
    // stream, which the libraries' non-blocking streams do not follow: waited for here.
    unsafe {
        ok(sys::cuMemcpyHtoD_v2(ptr, data.as_ptr().cast(), bytes));
        ok(sys::cuStreamSynchronize(LEGACY));
    }
    ptr
}

/// `len` elements of device memory at `ptr`, once the context's work is done.
fn download<T: Copy + Default>(ptr: sys::CUdeviceptr, len: usize) -> Vec<T> {
    let mut out = vec![T::default(); len];
    // SAFETY: `len` elements on both sides.
    unsafe {
        ok(sys::cuCtxSynchronize());
        ok(sys::cuMemcpyDtoH_v2(
            out.as_mut_ptr().cast(),
            ptr,
            std::mem::size_of_val(&out[..]),
        ))
    };
    out
}

fn blas_ok(status: blas::cublasStatus_t) {
    assert_eq!(status, blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
}

fn create_blas() -> blas::cublasHandle_t {
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    unsafe { blas_ok(blas::cublasCreate_v2(&mut handle)) };
    handle
}

/// A strided-batched gemm through `cublasGemmStridedBatchedEx`, all of type `ty`, computed in
/// f32 (f64 for f64), alpha and beta on the host.
#[allow(clippy::too_many_arguments)]
fn gemm_ex(
    handle: blas::cublasHandle_t,
    ty: blas::cudaDataType_t,
    (transa, transb): (blas::cublasOperation_t, blas::cublasOperation_t),
    (m, n, k, batch): (i32, i32, i32, i32),
    (a, lda, sa): (sys::CUdeviceptr, i32, i64),
    (b, ldb, sb): (sys::CUdeviceptr, i32, i64),
    (c, ldc, sc): (sys::CUdeviceptr, i32, i64),
    (alpha, beta): (f64, f64),
) -> blas::cublasStatus_t {
    let (alpha32, beta32) = (alpha as f32, beta as f32);
    let f64_data = ty == blas::cudaDataType_t::CUDA_R_64F;
    let (pa, pb, compute): (*const c_void, *const c_void, _) = if f64_data {
        (
            (&alpha as *const f64).cast(),
            (&beta as *const f64).cast(),
            blas::cublasComputeType_t::CUBLAS_COMPUTE_64F,
        )
    } else {
        (
            (&alpha32 as *const f32).cast(),
            (&beta32 as *const f32).cast(),
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    };
    // SAFETY: device pointers of this process; host scalars of the compute type.
    unsafe {
        blas::cublasGemmStridedBatchedEx(
            handle,
            transa,
            transb,
            m,
            n,
            k,
            pa,
            a as *const c_void,
            ty,
            lda,
            sa,
            b as *const c_void,
            ty,
            ldb,
            sb,
            pb,
            c as *mut c_void,
            ty,
            ldc,
            sc,
            batch,
            compute,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
        )
    }
}

/// The column-major reference product, batch by batch, in f64.
#[allow(clippy::too_many_arguments)]
fn reference(
    (ta, tb): (bool, bool),
    (m, n, k, batch): (usize, usize, usize, usize),
    (a, lda, sa): (&[f64], usize, usize),
    (b, ldb, sb): (&[f64], usize, usize),
    (c, ldc, sc): (&mut [f64], usize, usize),
    (alpha, beta): (f64, f64),
) {
    for p in 0..batch {
        for j in 0..n {
            for i in 0..m {
                let mut sum = 0.0;
                for l in 0..k {
                    let x = if ta {
                        a[p * sa + l + i * lda]
                    } else {
                        a[p * sa + i + l * lda]
                    };
                    let y = if tb {
                        b[p * sb + j + l * ldb]
                    } else {
                        b[p * sb + l + j * ldb]
                    };
                    sum += x * y;
                }
                let at = p * sc + i + j * ldc;
                c[at] = alpha * sum + if beta == 0.0 { 0.0 } else { beta * c[at] };
            }
        }
    }
}

/// Small multiples of 1/4: products and sums of a few of them are exact in every type, so
/// results must equal the reference exactly.
fn quarters(len: usize, salt: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (((i * 7 + salt * 3) % 9) as f64 - 4.0) / 4.0)
        .collect()
}

/// f16 bits of `x` (exactly representable; normal or zero).
fn to_f16(x: f64) -> u16 {
    if x == 0.0 {
        return 0;
    }
    let bits = (x as f32).to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127;
    sign | (((exp + 15) as u16) << 10) | ((bits & 0x7f_ffff) >> 13) as u16
}

fn from_f16(h: u16) -> f64 {
    if h & 0x7fff == 0 {
        return 0.0;
    }
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32 + 127 - 15;
    let man = ((h & 0x3ff) as u32) << 13;
    f64::from(f32::from_bits(sign | (exp << 23) | man))
}

fn to_bf16(x: f64) -> u16 {
    ((x as f32).to_bits() >> 16) as u16
}

fn from_bf16(h: u16) -> f64 {
    f64::from(f32::from_bits((h as u32) << 16))
}

/// The shapes and transposes of the product tests: (transa, transb, m, n, k, batch, padding
/// of the leading dimensions).
const CASES: [(bool, bool, usize, usize, usize, usize, usize); 6] = [
    (false, false, 3, 5, 4, 2, 0),
    (false, true, 8, 1, 7, 3, 2),
    (true, false, 1, 6, 2, 1, 1),
    (true, true, 4, 4, 4, 2, 3),
    (false, false, 16, 9, 13, 1, 0),
    (true, false, 5, 3, 11, 4, 1),
];

/// Runs every case for one data type; `encode`/`decode` move values to and from its bytes.
fn check_products<T: Copy + Default + PartialEq + std::fmt::Debug>(
    handle: blas::cublasHandle_t,
    ty: blas::cudaDataType_t,
    encode: fn(f64) -> T,
    decode: fn(T) -> f64,
) {
    for (case, &(ta, tb, m, n, k, batch, pad)) in CASES.iter().enumerate() {
        let (rows_a, cols_a) = if ta { (k, m) } else { (m, k) };
        let (rows_b, cols_b) = if tb { (n, k) } else { (k, n) };
        let (lda, ldb, ldc) = (rows_a + pad, rows_b + pad, m + pad);
        let (sa, sb, sc) = (lda * cols_a + pad, ldb * cols_b, ldc * n + 1);
        let a = quarters(sa * batch, case);
        let b = quarters(sb * batch, case + 1);
        let mut c = quarters(sc * batch, case + 2);
        let (alpha, beta) = (
            if case % 2 == 0 { 1.0 } else { -0.5 },
            0.5 * (case % 3) as f64,
        );
        let (da, db, dc) = (
            upload(&a.iter().map(|&x| encode(x)).collect::<Vec<T>>()),
            upload(&b.iter().map(|&x| encode(x)).collect::<Vec<T>>()),
            upload(&c.iter().map(|&x| encode(x)).collect::<Vec<T>>()),
        );
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        blas_ok(gemm_ex(
            handle,
            ty,
            (op(ta), op(tb)),
            (m as i32, n as i32, k as i32, batch as i32),
            (da, lda as i32, sa as i64),
            (db, ldb as i32, sb as i64),
            (dc, ldc as i32, sc as i64),
            (alpha, beta),
        ));
        reference(
            (ta, tb),
            (m, n, k, batch),
            (&a, lda, sa),
            (&b, ldb, sb),
            (&mut c, ldc, sc),
            (alpha, beta),
        );
        let got: Vec<f64> = download::<T>(dc, c.len()).into_iter().map(decode).collect();
        assert_eq!(got, c, "{ty:?} case {case}");
        for ptr in [da, db, dc] {
            free(ptr);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Results.

/// f32 and f64 through cudarc's safe `Gemm` (strided batched and single), f16, bf16, f32 and
/// f64 through `cublasGemmStridedBatchedEx`, device pointer mode, and argument validation.
fn products() {
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let cublas = CudaBlas::new(stream.clone()).unwrap();
    // The safe API: C (2x3) = A (2x4) * B (4x3), then a batch of two with B transposed.
    let a: Vec<f32> = (0..8).map(|x| x as f32).collect();
    let b: Vec<f32> = (0..12).map(|x| (x % 5) as f32 - 2.0).collect();
    let da = stream.clone_htod(&a).unwrap();
    let db = stream.clone_htod(&b).unwrap();
    let mut dc = stream.alloc_zeros::<f32>(6).unwrap();
    let config = GemmConfig {
        transa: CUBLAS_OP_N,
        transb: CUBLAS_OP_N,
        m: 2,
        n: 3,
        k: 4,
        alpha: 1.0f32,
        lda: 2,
        ldb: 4,
        beta: 0.0,
        ldc: 2,
    };
    // SAFETY: the buffers hold the matrices the configuration describes.
    unsafe { cublas.gemm(config, &da, &db, &mut dc) }.unwrap();
    let got = stream.clone_dtoh(&dc).unwrap();
    let mut want = vec![0.0; 6];
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    reference(
        (false, false),
        (2, 3, 4, 1),
        (&wide(&a), 2, 0),
        (&wide(&b), 4, 0),
        (&mut want, 2, 0),
        (1.0, 0.0),
    );
    assert_eq!(wide(&got), want);
    // f64, strided batched, B transposed: two batches of (3x2) = (3x2) * (2x2)^T.
    let a: Vec<f64> = quarters(12, 1);
    let b: Vec<f64> = quarters(8, 2);
    let mut want = quarters(12, 3);
    let da = stream.clone_htod(&a).unwrap();
    let db = stream.clone_htod(&b).unwrap();
    let mut dc = stream.clone_htod(&want).unwrap();
    let config = StridedBatchedConfig {
        gemm: GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_T,
            m: 3,
            n: 2,
            k: 2,
            alpha: 2.0f64,
            lda: 3,
            ldb: 2,
            beta: -1.0,
            ldc: 3,
        },
        batch_size: 2,
        stride_a: 6,
        stride_b: 4,
        stride_c: 6,
    };
    // SAFETY: as above.
    unsafe { cublas.gemm_strided_batched(config, &da, &db, &mut dc) }.unwrap();
    reference(
        (false, true),
        (3, 2, 2, 2),
        (&a, 3, 6),
        (&b, 2, 4),
        (&mut want, 3, 6),
        (2.0, -1.0),
    );
    assert_eq!(stream.clone_dtoh(&dc).unwrap(), want);
    stream.synchronize().unwrap();

    // Every data type through the Ex form, on the handle's stream.
    let handle = *cublas.handle();
    check_products::<f32>(
        handle,
        blas::cudaDataType_t::CUDA_R_32F,
        |x| x as f32,
        f64::from,
    );
    check_products::<f64>(handle, blas::cudaDataType_t::CUDA_R_64F, |x| x, |x| x);
    check_products::<u16>(handle, blas::cudaDataType_t::CUDA_R_16F, to_f16, from_f16);
    check_products::<u16>(
        handle,
        blas::cudaDataType_t::CUDA_R_16BF,
        to_bf16,
        from_bf16,
    );

    // Rounding once to f16: 1 + 2^-11 + 2^-12 (exact in f32) rounds up to 1 + 2^-10.
    let one = upload(&[to_f16(1.0)]);
    let third = 1.0 + (-11f64).exp2() + (-12f64).exp2();
    let a = upload(&[
        to_f16(1.0),
        to_f16((-11f64).exp2()),
        to_f16((-12f64).exp2()),
    ]);
    let b = upload(&[to_f16(1.0); 3]);
    let c = alloc(2);
    blas_ok(gemm_ex(
        handle,
        blas::cudaDataType_t::CUDA_R_16F,
        (CUBLAS_OP_T, CUBLAS_OP_N),
        (1, 1, 3, 1),
        (a, 3, 0),
        (b, 3, 0),
        (c, 1, 0),
        (1.0, 0.0),
    ));
    assert!(third > 1.0);
    assert_eq!(download::<u16>(c, 1), [to_f16(1.0 + (-10f64).exp2())]);
    for ptr in [one, a, b, c] {
        free(ptr);
    }

    // Device pointer mode: alpha and beta read from device memory when the work runs.
    cublas
        .set_pointer_mode(blas::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE)
        .unwrap();
    let scalars = upload(&[3.0f32, 0.0f32]);
    let a = upload(&[2.0f32]);
    let b = upload(&[5.0f32]);
    let c = alloc(4);
    // SAFETY: 1x1 matrices and device scalars of this process.
    unsafe {
        blas_ok(blas::cublasSgemm_v2(
            handle,
            CUBLAS_OP_N,
            CUBLAS_OP_N,
            1,
            1,
            1,
            scalars as *const f32,
            a as *const f32,
            1,
            b as *const f32,
            1,
            (scalars + 4) as *const f32,
            c as *mut f32,
            1,
        ))
    };
    assert_eq!(download::<f32>(c, 1), [30.0]);
    cublas
        .set_pointer_mode(blas::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST)
        .unwrap();

    // Validation as cuBLAS's: negative sizes, short leading dimensions, bad types.
    let invalid = blas::cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE;
    let ty = blas::cudaDataType_t::CUDA_R_32F;
    let ops = (CUBLAS_OP_N, CUBLAS_OP_N);
    let bad = |dims, lds: (i32, i32, i32)| {
        gemm_ex(
            handle,
            ty,
            ops,
            dims,
            (a, lds.0, 0),
            (b, lds.1, 0),
            (c, lds.2, 0),
            (1.0, 0.0),
        )
    };
    assert_eq!(bad((-1, 1, 1, 1), (1, 1, 1)), invalid);
    assert_eq!(bad((1, 1, 1, -1), (1, 1, 1)), invalid);
    assert_eq!(bad((4, 1, 1, 1), (3, 1, 4)), invalid, "lda < m");
    assert_eq!(bad((1, 1, 4, 1), (1, 3, 1)), invalid, "ldb < k");
    assert_eq!(bad((4, 1, 1, 1), (4, 1, 3)), invalid, "ldc < m");
    // Nothing to do: success without touching anything.
    assert_eq!(
        bad((0, 1, 1, 1), (1, 1, 1)),
        blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS
    );
    // f64 data with an f32 compute type is not a combination cuBLAS has.
    let f64_with_f32 = {
        let one = 1.0f32;
        // SAFETY: as above; the call is refused before anything is read.
        unsafe {
            blas::cublasGemmEx(
                handle,
                CUBLAS_OP_N,
                CUBLAS_OP_N,
                1,
                1,
                1,
                (&one as *const f32).cast(),
                a as *const c_void,
                blas::cudaDataType_t::CUDA_R_64F,
                1,
                b as *const c_void,
                blas::cudaDataType_t::CUDA_R_64F,
                1,
                (&one as *const f32).cast(),
                c as *mut c_void,
                blas::cudaDataType_t::CUDA_R_64F,
                1,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
    };
    assert_eq!(
        f64_with_f32,
        blas::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
    );
    for ptr in [scalars, a, b, c] {
        free(ptr);
    }
    drop(cublas);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_products() {
    child();
    products();
}

#[test]
fn products_equal_the_reference() {
    assert_clean(&report_of("scenario_products"));
}

// ---------------------------------------------------------------------------------------------
// The checks, each planted with its correct twin.

/// A 4x4 f32 product on the handle's stream into `c`, of A and B written here (freed after
/// the product: `cuMemFree` waits for the device's work, which would order everything).
fn product_into(
    handle: blas::cublasHandle_t,
    c: sys::CUdeviceptr,
    beta: f64,
) -> (blas::cublasStatus_t, [sys::CUdeviceptr; 2]) {
    let a = upload(&[1.0f32; 16]);
    let b = upload(&[2.0f32; 16]);
    let status = gemm_ex(
        handle,
        blas::cudaDataType_t::CUDA_R_32F,
        (CUBLAS_OP_N, CUBLAS_OP_N),
        (4, 4, 4, 1),
        (a, 4, 0),
        (b, 4, 0),
        (c, 4, 0),
        (1.0, beta),
    );
    (status, [a, b])
}

/// C one element too short (the twin: exactly long enough): `out-of-bounds`, and the call
/// fails with `CUBLAS_STATUS_EXECUTION_FAILED`.
fn bounds(correct: bool) {
    setup();
    let handle = create_blas();
    let c = alloc(if correct { 64 } else { 60 });
    let (status, inputs) = product_into(handle, c, 0.0);
    if correct {
        blas_ok(status);
        assert_eq!(download::<f32>(c, 16), [8.0f32; 16]);
    } else {
        assert_eq!(status, blas::cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED);
    }
    inputs.into_iter().for_each(free);
    free(c);
    // SAFETY: our own handle.
    unsafe { blas_ok(blas::cublasDestroy_v2(handle)) };
    teardown();
}

planted!(
    gemm_past_its_allocation_is_out_of_bounds,
    scenario_bounds,
    scenario_bounds_twin,
    bounds,
    "out-of-bounds",
    [
        "cublasGemmStridedBatchedEx (call #",
        "past the end of the 60-byte allocation"
    ]
);

/// A product on stream 1 writes C, a copy on stream 2 reads it (the twin: an event between).
fn race(correct: bool) {
    setup();
    let (s1, s2) = (new_stream(), new_stream());
    let handle = create_blas();
    // SAFETY: our own handle and stream.
    unsafe { blas_ok(blas::cublasSetStream_v2(handle, s1 as _)) };
    let c = alloc(64);
    let (status, inputs) = product_into(handle, c, 0.0);
    blas_ok(status);
    let mut event = std::ptr::null_mut();
    // SAFETY: our own event and streams.
    unsafe {
        ok(sys::cuEventCreate(&mut event, 0));
        if correct {
            ok(sys::cuEventRecord(event, s1));
            ok(sys::cuStreamWaitEvent(s2, event, 0));
        }
    }
    let mut host = [0.0f32; 16];
    // SAFETY: 64 bytes each side.
    unsafe {
        ok(sys::cuMemcpyDtoHAsync_v2(
            host.as_mut_ptr().cast(),
            c,
            64,
            s2,
        ));
        ok(sys::cuStreamSynchronize(s2));
        ok(sys::cuStreamSynchronize(s1));
        ok(sys::cuEventDestroy_v2(event));
        blas_ok(blas::cublasDestroy_v2(handle));
    }
    assert_eq!(host, [8.0; 16]);
    inputs.into_iter().for_each(free);
    free(c);
    destroy_stream(s1);
    destroy_stream(s2);
    teardown();
}

planted!(
    gemm_output_read_on_another_stream_races,
    scenario_race,
    scenario_race_twin,
    race,
    "data-race",
    ["cublasGemmStridedBatchedEx", "4x4x4 gemm", "a copy"]
);

/// beta = 1 reads a C never written (the twin: beta = 0, which never reads C).
fn uninitialised(correct: bool) {
    setup();
    let handle = create_blas();
    let c = alloc(64);
    let (status, inputs) = product_into(handle, c, if correct { 0.0 } else { 1.0 });
    blas_ok(status);
    inputs.into_iter().for_each(free);
    free(c);
    // SAFETY: our own handle.
    unsafe { blas_ok(blas::cublasDestroy_v2(handle)) };
    teardown();
}

planted!(
    gemm_reading_unwritten_c_is_uninitialised,
    scenario_uninitialised,
    scenario_uninitialised_twin,
    uninitialised,
    "uninitialized-read",
    [
        "cublasGemmStridedBatchedEx (4x4x4 gemm",
        "64 bytes of which were never written"
    ]
);

/// A handle destroyed twice, then used (the twin: destroyed once).
fn destroyed(correct: bool) {
    setup();
    let handle = create_blas();
    // SAFETY: our own handle; the second destroy and the use are the planted bugs, which the
    // simulator refuses without touching anything.
    unsafe {
        blas_ok(blas::cublasDestroy_v2(handle));
        if !correct {
            assert_eq!(
                blas::cublasDestroy_v2(handle),
                blas::cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED
            );
            assert_eq!(
                blas::cublasSetStream_v2(handle, std::ptr::null_mut()),
                blas::cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED
            );
        }
    }
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_destroyed() {
    child();
    destroyed(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_destroyed_twin() {
    child();
    destroyed(true);
}

#[test]
fn blas_handle_destroyed_twice_and_used() {
    let report = report_of("scenario_destroyed");
    assert_eq!(
        kinds(&report),
        ["double-destroy", "destroyed-handle"],
        "{:?}",
        report.violations
    );
    assert_message_contains(&report, 0, "cuBLAS handle");
    assert_message_contains(&report, 0, "cublasDestroy_v2");
    assert_no_leaks(&report);
    assert_clean(&report_of("scenario_destroyed_twin"));
}

/// A cuBLAS handle and a cuRAND generator never destroyed (the twin: both dropped).
fn leak(correct: bool) {
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let cublas = CudaBlas::new(stream.clone()).unwrap();
    let rng = CudaRng::new(7, stream.clone()).unwrap();
    if correct {
        drop(cublas);
        drop(rng);
    } else {
        std::mem::forget(cublas);
        std::mem::forget(rng);
    }
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_leak() {
    child();
    leak(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_leak_twin() {
    child();
    leak(true);
}

#[test]
fn handles_left_at_exit_are_leaks() {
    let report = report_of("scenario_leak");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let leaks = report.leaks_without_primary();
    assert_eq!(leaks.get("cublas_handle"), Some(&1), "{leaks:?}");
    assert_eq!(leaks.get("curand_generator"), Some(&1), "{leaks:?}");
    assert_eq!(leaks.len(), 2, "{leaks:?}");
    assert_clean(&report_of("scenario_leak_twin"));
}

// ---------------------------------------------------------------------------------------------
// cuRAND.

fn generators() {
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    const N: usize = 100_000;
    let rng = CudaRng::new(42, stream.clone()).unwrap();
    // Uniform f32 in (0, 1], mean 1/2, variance 1/12.
    let mut buf = stream.alloc_zeros::<f32>(N).unwrap();
    rng.fill_with_uniform(&mut buf).unwrap();
    let uniform = stream.clone_dtoh(&buf).unwrap();
    assert!(uniform.iter().all(|&x| x > 0.0 && x <= 1.0));
    let mean = uniform.iter().map(|&x| f64::from(x)).sum::<f64>() / N as f64;
    assert!((mean - 0.5).abs() < 0.005, "uniform mean {mean}");
    // The next call continues the sequence.
    rng.fill_with_uniform(&mut buf).unwrap();
    let next = stream.clone_dtoh(&buf).unwrap();
    assert_ne!(uniform, next);
    // Uniform f64.
    let mut wide = stream.alloc_zeros::<f64>(N).unwrap();
    rng.fill_with_uniform(&mut wide).unwrap();
    let values = stream.clone_dtoh(&wide).unwrap();
    assert!(values.iter().all(|&x| x > 0.0 && x <= 1.0));
    let mean = values.iter().sum::<f64>() / N as f64;
    assert!((mean - 0.5).abs() < 0.005, "uniform f64 mean {mean}");
    // Normal f32 and f64: mean and standard deviation as asked.
    rng.fill_with_normal(&mut buf, 3.0f32, 2.0f32).unwrap();
    let normal: Vec<f64> = stream
        .clone_dtoh(&buf)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    let (m, s) = moments(&normal);
    assert!(
        (m - 3.0).abs() < 0.03 && (s - 2.0).abs() < 0.03,
        "normal {m} {s}"
    );
    rng.fill_with_normal(&mut wide, -1.0f64, 0.5f64).unwrap();
    let (m, s) = moments(&stream.clone_dtoh(&wide).unwrap());
    assert!(
        (m + 1.0).abs() < 0.01 && (s - 0.5).abs() < 0.01,
        "normal f64 {m} {s}"
    );
    // Log-normal: exp of a normal.
    rng.fill_with_log_normal(&mut wide, 0.0f64, 0.25f64)
        .unwrap();
    let logs: Vec<f64> = stream
        .clone_dtoh(&wide)
        .unwrap()
        .iter()
        .map(|x| x.ln())
        .collect();
    let (m, s) = moments(&logs);
    assert!(
        m.abs() < 0.01 && (s - 0.25).abs() < 0.01,
        "log-normal {m} {s}"
    );
    // An odd count of normal values is refused, as cuRAND refuses it.
    let mut odd = stream.alloc_zeros::<f32>(3).unwrap();
    let refused = rng.fill_with_normal(&mut odd, 0.0f32, 1.0f32).unwrap_err();
    assert_eq!(
        refused.0,
        rand::curandStatus_t::CURAND_STATUS_LENGTH_NOT_MULTIPLE
    );
    // The same seed gives the same numbers; another seed others.
    let again = CudaRng::new(42, stream.clone()).unwrap();
    again.fill_with_uniform(&mut buf).unwrap();
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), uniform);
    let other = CudaRng::new(43, stream.clone()).unwrap();
    other.fill_with_uniform(&mut buf).unwrap();
    assert_ne!(stream.clone_dtoh(&buf).unwrap(), uniform);
    // An offset skips values.
    let mut skipped = CudaRng::new(42, stream.clone()).unwrap();
    skipped.set_offset(10).unwrap();
    let mut short = stream.alloc_zeros::<f32>(5).unwrap();
    skipped.fill_with_uniform(&mut short).unwrap();
    assert_eq!(stream.clone_dtoh(&short).unwrap(), uniform[10..15]);
    stream.synchronize().unwrap();
}

/// Mean and standard deviation.
fn moments(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_generators() {
    child();
    generators();
}

#[test]
fn generators_have_their_distributions() {
    assert_clean(&report_of("scenario_generators"));
}

/// A generator's output range one element past its allocation: `out-of-bounds`, and
/// `CURAND_STATUS_LAUNCH_FAILURE` (the twin: the whole allocation).
fn generator_bounds(correct: bool) {
    setup();
    let out = alloc(64);
    let mut generator = std::ptr::null_mut();
    // SAFETY: valid out-pointer; our own generator and allocation; the planted call is
    // refused before anything is written.
    unsafe {
        assert_eq!(
            rand::curandCreateGenerator(
                &mut generator,
                rand::curandRngType_t::CURAND_RNG_PSEUDO_DEFAULT
            ),
            rand::curandStatus_t::CURAND_STATUS_SUCCESS
        );
        let status =
            rand::curandGenerateUniform(generator, out as *mut f32, if correct { 16 } else { 17 });
        let want = if correct {
            rand::curandStatus_t::CURAND_STATUS_SUCCESS
        } else {
            rand::curandStatus_t::CURAND_STATUS_LAUNCH_FAILURE
        };
        assert_eq!(status, want);
        assert_eq!(
            rand::curandDestroyGenerator(generator),
            rand::curandStatus_t::CURAND_STATUS_SUCCESS
        );
    }
    free(out);
    teardown();
}

planted!(
    generator_past_its_allocation_is_out_of_bounds,
    scenario_generator_bounds,
    scenario_generator_bounds_twin,
    generator_bounds,
    "out-of-bounds",
    [
        "curandGenerateUniform (call #",
        "past the end of the 64-byte allocation"
    ]
);

// ---------------------------------------------------------------------------------------------
// candle's start-up and the library's names.

/// What `candle_core::CudaDevice::new` does (cudarc 0.19.10): a context, its per-thread
/// stream, a cuBLAS handle and a cuRAND generator on it; then a random normal fill and a bf16
/// strided-batched product as candle issues them, and the drops.
fn candle_startup() {
    let context = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = context.per_thread_stream();
    let cublas = CudaBlas::new(stream.clone()).unwrap();
    let curand = CudaRng::new(299792458, stream.clone()).unwrap();
    let mut data = stream.alloc_zeros::<f32>(64).unwrap();
    curand.fill_with_normal(&mut data, 0.0, 1.0).unwrap();
    let lhs = upload(&[to_bf16(0.5); 2 * 8 * 4]);
    let rhs = upload(&[to_bf16(2.0); 2 * 4 * 3]);
    let out = alloc(2 * 8 * 3 * 2);
    blas_ok(gemm_ex(
        *cublas.handle(),
        blas::cudaDataType_t::CUDA_R_16BF,
        (CUBLAS_OP_N, CUBLAS_OP_N),
        (3, 8, 4, 2),
        (rhs, 3, 12),
        (lhs, 4, 32),
        (out, 3, 24),
        (1.0, 0.0),
    ));
    let got: Vec<f64> = download::<u16>(out, 48)
        .into_iter()
        .map(from_bf16)
        .collect();
    assert_eq!(got, [4.0; 48]);
    for ptr in [lhs, rhs, out] {
        free(ptr);
    }
    let values = stream.clone_dtoh(&data).unwrap();
    assert!(values.iter().any(|&x| x != 0.0));
    drop(curand);
    drop(cublas);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_candle_startup() {
    child();
    candle_startup();
}

#[test]
fn candle_startup_runs_clean() {
    assert_clean(&report_of("scenario_candle_startup"));
}

/// Every name of the library is the same loaded file: one handle from `dlopen`, and the
/// allocation made through cudarc's `libcuda.so` is known to the cuRAND reached through
/// each name (a generator writing into it succeeds, checked against that allocation).
fn names() {
    setup();
    let out = alloc(16);
    let open = |name: &std::ffi::CStr| {
        // SAFETY: dlopen of a library on the path; RTLD_NOW | RTLD_NOLOAD is not used, so the
        // library is loaded (or its reference count raised).
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null(), "dlopen {name:?}");
        handle
    };
    let driver = open(c"libcuda.so");
    for name in [
        c"libcuda.so.1",
        c"libcublas.so",
        c"libcublas.so.13",
        c"libcublasLt.so",
        c"libcublasLt.so.13",
        c"libcurand.so",
        c"libcurand.so.10",
    ] {
        let handle = open(name);
        assert_eq!(handle, driver, "{name:?} is another file");
        type Create = unsafe extern "C" fn(*mut *mut c_void, u32) -> u32;
        type Uniform = unsafe extern "C" fn(*mut c_void, *mut f32, usize) -> u32;
        type Destroy = unsafe extern "C" fn(*mut c_void) -> u32;
        // SAFETY: symbols of the simulator, with cuRAND's signatures; `out` holds 4 floats.
        unsafe {
            let symbol = |s: &std::ffi::CStr| {
                let found = libc::dlsym(handle, s.as_ptr());
                assert!(!found.is_null(), "{s:?} in {name:?}");
                found
            };
            let create: Create = std::mem::transmute(symbol(c"curandCreateGenerator"));
            let uniform: Uniform = std::mem::transmute(symbol(c"curandGenerateUniform"));
            let destroy: Destroy = std::mem::transmute(symbol(c"curandDestroyGenerator"));
            let mut generator = std::ptr::null_mut();
            assert_eq!(create(&mut generator, 100), 0);
            assert_eq!(uniform(generator, out as *mut f32, 4), 0, "{name:?}");
            assert_eq!(destroy(generator), 0);
            libc::dlclose(handle);
        }
    }
    // SAFETY: the reference taken above.
    unsafe { libc::dlclose(driver) };
    free(out);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_names() {
    child();
    names();
}

#[test]
fn every_name_reaches_the_same_simulator() {
    let report = report_of("scenario_names");
    assert_clean(&report);
    assert_eq!(report.calls.get("curandGenerateUniform"), Some(&7));
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt, and cuBLAS's gemv and asum.

/// f32 through cudarc's safe `CudaBlasLT` (plain, then a batch of two with A and B
/// transposed), then raw calls: device scalars, and the refusals (`NOT_SUPPORTED`) of a ReLU
/// epilogue and of a D that is not C. Then `cublasSgemv_v2` (both operations, a negative
/// increment), `cublasDasum_v2` and `cublasHgemm` against the reference.
fn lt_products() {
    use cudarc::cublaslt::sys as lt;
    use cudarc::cublaslt::{CudaBlasLT, Matmul, MatmulConfig};
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let cublaslt = CudaBlasLT::new(stream.clone()).unwrap();
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let narrow = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    // Two batches of A (3x4, stored transposed: 4x3, ld 4), B (4x2 stored transposed: 2x4,
    // ld 2), C (3x2, ld 3, starting from ones, beta 0.5).
    let (m, n, k, batch) = (3usize, 2usize, 4usize, 2usize);
    let a = narrow(&quarters(k * m * batch, 1));
    let b = narrow(&quarters(n * k * batch, 2));
    let c = vec![1.0f32; m * n * batch];
    for (transposed, batches) in [(false, 1), (true, batch)] {
        let (lda, ldb) = if transposed { (k, n) } else { (m, k) };
        let da = stream.clone_htod(&a).unwrap();
        let db = stream.clone_htod(&b).unwrap();
        let mut dc = stream.clone_htod(&c).unwrap();
        let strided = |len: usize| (batches > 1).then_some(len as i64);
        let config = MatmulConfig {
            transa: transposed,
            transb: transposed,
            transc: false,
            m: m as u64,
            n: n as u64,
            k: k as u64,
            alpha: 1.5,
            lda: lda as i64,
            ldb: ldb as i64,
            beta: 0.5,
            ldc: m as i64,
            stride_a: strided(m * k),
            stride_b: strided(k * n),
            stride_c: strided(m * n),
            stride_bias: None,
            batch_size: (batches > 1).then_some(batches as i32),
        };
        // SAFETY: the buffers hold the matrices (and batches) the configuration describes.
        unsafe { cublaslt.matmul(config, &da, &db, &mut dc, None, None) }.unwrap();
        let got = stream.clone_dtoh(&dc).unwrap();
        let mut want = wide(&c);
        reference(
            (transposed, transposed),
            (m, n, k, batches),
            (&wide(&a), lda, m * k),
            (&wide(&b), ldb, k * n),
            (&mut want, m, m * n),
            (1.5, 0.5),
        );
        assert_eq!(
            wide(&got[..m * n * batches]),
            want[..m * n * batches],
            "transposed {transposed}"
        );
    }

    // Raw calls on one description and three layouts (A 3x4, B 4x2, C 3x2).
    ctx.bind_to_thread().unwrap();
    let ok =
        |status: lt::cublasStatus_t| assert_eq!(status, lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
    let f32_type = lt::cudaDataType_t::CUDA_R_32F;
    let (da, db, dc, dd) = (
        upload(&a[..m * k]),
        upload(&b[..k * n]),
        upload(&c[..m * n]),
        upload(&c[..m * n]),
    );
    let scalars = upload(&[2.0f32, 0.0]);
    // SAFETY: cuBLASLt's API with valid out-pointers, attribute buffers of the sizes given,
    // device buffers holding the matrices the layouts describe, and device scalars.
    unsafe {
        let mut handle = std::ptr::null_mut();
        ok(lt::cublasLtCreate(&mut handle));
        let mut desc = std::ptr::null_mut();
        ok(lt::cublasLtMatmulDescCreate(
            &mut desc,
            lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            f32_type,
        ));
        let device_mode = 1i32;
        ok(lt::cublasLtMatmulDescSetAttribute(
            desc,
            lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_POINTER_MODE,
            (&device_mode as *const i32).cast(),
            4,
        ));
        let layout = |rows: usize, cols: usize| {
            let mut layout = std::ptr::null_mut();
            ok(lt::cublasLtMatrixLayoutCreate(
                &mut layout,
                f32_type,
                rows as u64,
                cols as u64,
                rows as i64,
            ));
            layout
        };
        let (la, lb, lc) = (layout(m, k), layout(k, n), layout(m, n));
        let mut preference = std::ptr::null_mut();
        ok(lt::cublasLtMatmulPreferenceCreate(&mut preference));
        let mut result = std::mem::zeroed::<lt::cublasLtMatmulHeuristicResult_t>();
        let mut count = 0;
        let heuristic = |result: &mut lt::cublasLtMatmulHeuristicResult_t, count: &mut i32| {
            lt::cublasLtMatmulAlgoGetHeuristic(
                handle, desc, la, lb, lc, lc, preference, 1, result, count,
            )
        };
        ok(heuristic(&mut result, &mut count));
        assert_eq!((count, result.workspaceSize), (1, 0));
        let s = scalars as *const c_void;
        let beta = (scalars + 4) as *const c_void;
        let cu = stream.cu_stream() as lt::cudaStream_t;
        let algo = result.algo;
        // D = 2 * A * B (device scalars 2 and 0) with C = dc, into `d`.
        let matmul = |d: sys::CUdeviceptr| {
            lt::cublasLtMatmul(
                handle,
                desc,
                s,
                da as _,
                la,
                db as _,
                lb,
                beta,
                dc as _,
                lc,
                d as _,
                lc,
                &algo,
                std::ptr::null_mut(),
                0,
                cu,
            )
        };
        ok(matmul(dc));
        stream.synchronize().unwrap();
        let mut want = vec![0.0; m * n];
        reference(
            (false, false),
            (m, n, k, 1),
            (&wide(&a), m, 0),
            (&wide(&b), k, 0),
            (&mut want, m, 0),
            (2.0, 0.0),
        );
        assert_eq!(wide(&download::<f32>(dc, m * n)), want);
        // D is not C: not simulated, refused before anything runs.
        let refused = lt::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED;
        assert_eq!(matmul(dd), refused);
        // A ReLU epilogue: not simulated.
        let relu = lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU;
        ok(lt::cublasLtMatmulDescSetAttribute(
            desc,
            lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
            (&relu as *const lt::cublasLtEpilogue_t).cast(),
            4,
        ));
        assert_eq!(matmul(dc), refused);
        assert_eq!(heuristic(&mut result, &mut count), refused);
        for layout in [la, lb, lc] {
            ok(lt::cublasLtMatrixLayoutDestroy(layout));
        }
        ok(lt::cublasLtMatmulPreferenceDestroy(preference));
        ok(lt::cublasLtMatmulDescDestroy(desc));
        ok(lt::cublasLtDestroy(handle));
    }
    for ptr in [da, db, dc, dd, scalars] {
        free(ptr);
    }

    // gemv: y = 0.5 * op(A) * x + 2 * y with A 3x4 (ld 5), both operations; x walked backwards.
    let cublas = CudaBlas::new(stream.clone()).unwrap();
    let handle = *cublas.handle();
    let (rows, cols, ld) = (3usize, 4usize, 5usize);
    let a = narrow(&quarters(ld * cols, 3));
    for (op, trans) in [(CUBLAS_OP_N, false), (CUBLAS_OP_T, true)] {
        let (len_x, len_y) = if trans { (rows, cols) } else { (cols, rows) };
        let x = narrow(&quarters(len_x, 4));
        let y = narrow(&quarters(len_y, 5));
        let (da, dx, dy) = (upload(&a), upload(&x), upload(&y));
        let (alpha, beta) = (0.5f32, 2.0f32);
        // SAFETY: valid handle, host scalars, device buffers of the sizes the call reads.
        unsafe {
            blas_ok(blas::cublasSgemv_v2(
                handle,
                op,
                rows as i32,
                cols as i32,
                &alpha,
                da as _,
                ld as i32,
                dx as _,
                -1,
                &beta,
                dy as _,
                1,
            ));
        }
        stream.synchronize().unwrap();
        let got = wide(&download::<f32>(dy, len_y));
        for (i, &value) in got.iter().enumerate() {
            let sum: f64 = (0..len_x)
                .map(|j| {
                    let element = if trans { a[j + i * ld] } else { a[i + j * ld] };
                    f64::from(element) * f64::from(x[len_x - 1 - j])
                })
                .sum();
            assert_eq!(
                value,
                0.5 * sum + 2.0 * f64::from(y[i]),
                "gemv trans {trans}, row {i}"
            );
        }
        for ptr in [da, dx, dy] {
            free(ptr);
        }
    }
    // asum: the sum of magnitudes of every other element.
    let x = quarters(9, 6);
    let dx = upload(&x);
    let mut sum = 0.0f64;
    // SAFETY: valid handle, device vector of 9 doubles, host result in host pointer mode.
    unsafe { blas_ok(blas::cublasDasum_v2(handle, 5, dx as _, 2, &mut sum)) };
    assert_eq!(sum, x.iter().step_by(2).map(|v| v.abs()).sum::<f64>());
    free(dx);
    // Hgemm (cudarc's `Gemm<f16>` reaches it by name, bindgen has no binding): C (2x3) = 0.5 *
    // A (2x4) * B (4x3) + 2 * C in f16.
    let (m, n, k) = (2usize, 3usize, 4usize);
    let (a, b, c) = (quarters(m * k, 7), quarters(k * n, 8), quarters(m * n, 9));
    let half = |v: &[f64]| v.iter().map(|&x| to_f16(x)).collect::<Vec<u16>>();
    let (da, db, dc) = (upload(&half(&a)), upload(&half(&b)), upload(&half(&c)));
    type Hgemm = unsafe extern "C" fn(
        blas::cublasHandle_t,
        blas::cublasOperation_t,
        blas::cublasOperation_t,
        i32,
        i32,
        i32,
        *const u16,
        *const u16,
        i32,
        *const u16,
        i32,
        *const u16,
        *mut u16,
        i32,
    ) -> blas::cublasStatus_t;
    let (alpha, beta) = (to_f16(0.5), to_f16(2.0));
    // SAFETY: the simulator's cublasHgemm, with cuBLAS's signature (`__half` is 16 bits);
    // device buffers holding the matrices, host scalars.
    unsafe {
        let library = libc::dlopen(c"libcublas.so".as_ptr(), libc::RTLD_NOW);
        assert!(!library.is_null());
        let symbol = libc::dlsym(library, c"cublasHgemm".as_ptr());
        assert!(!symbol.is_null(), "cublasHgemm is exported");
        let hgemm: Hgemm = std::mem::transmute(symbol);
        blas_ok(hgemm(
            handle,
            CUBLAS_OP_N,
            CUBLAS_OP_N,
            m as i32,
            n as i32,
            k as i32,
            &alpha,
            da as _,
            m as i32,
            db as _,
            k as i32,
            &beta,
            dc as _,
            m as i32,
        ));
        libc::dlclose(library);
    }
    stream.synchronize().unwrap();
    let mut want = c.clone();
    reference(
        (false, false),
        (m, n, k, 1),
        (&a, m, 0),
        (&b, k, 0),
        (&mut want, m, 0),
        (0.5, 2.0),
    );
    let got: Vec<f64> = download::<u16>(dc, m * n)
        .into_iter()
        .map(from_f16)
        .collect();
    assert_eq!(got, want, "Hgemm");
    for ptr in [da, db, dc] {
        free(ptr);
    }
    drop(cublas);
    drop(cublaslt);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_lt_products() {
    child();
    lt_products();
}

#[test]
fn cublaslt_products_gemv_and_asum_equal_the_reference() {
    let report = report_of("scenario_lt_products");
    assert_clean(&report);
    assert_eq!(report.calls.get("cublasLtMatmul"), Some(&5));
}

/// A cuBLASLt layout destroyed twice (a `double-destroy`), or once (the twin); a
/// description left alive (a `cublaslt_descriptor` leak), or destroyed (the twin).
fn lt_destroyed(correct: bool) {
    use cudarc::cublaslt::sys as lt;
    setup();
    // SAFETY: valid out-pointers; the second destroy is the planted bug.
    unsafe {
        let mut layout = std::ptr::null_mut();
        lt::cublasLtMatrixLayoutCreate(&mut layout, lt::cudaDataType_t::CUDA_R_32F, 2, 2, 2);
        lt::cublasLtMatrixLayoutDestroy(layout);
        let mut desc = std::ptr::null_mut();
        lt::cublasLtMatmulDescCreate(
            &mut desc,
            lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lt::cudaDataType_t::CUDA_R_32F,
        );
        if !correct {
            assert_eq!(
                lt::cublasLtMatrixLayoutDestroy(layout),
                lt::cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED
            );
        } else {
            lt::cublasLtMatmulDescDestroy(desc);
        }
    }
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_lt_destroyed() {
    child();
    lt_destroyed(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_lt_destroyed_twin() {
    child();
    lt_destroyed(true);
}

#[test]
fn cublaslt_descriptors_destroyed_twice_or_left_are_reported() {
    let report = report_of("scenario_lt_destroyed");
    assert_eq!(
        report.of_kind("double-destroy").len(),
        1,
        "{:?}",
        report.violations
    );
    assert_eq!(report.leaks.get("cublaslt_descriptor"), Some(&1));
    assert_clean(&report_of("scenario_lt_destroyed_twin"));
}
