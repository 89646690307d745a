//! A GEMM through cuBLAS on buffers and a stream from handles-cuda, checked against the same
//! product computed on the CPU; a cuDNN and a cuBLASLt handle made on the same stream and
//! context. Without a driver or without cuBLAS, it says so in one sentence and exits with 0.
//!
//! `cargo run -p handles-cuda-libs --example gemm`

use handles_cuda::{
    ContextHandle, DevicePtrHandle, MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
};
use handles_cuda_libs::{CublasHandle, CublasLtHandle, CudnnHandle, LibError, MatmulDescHandle};

const M: usize = 96;
const N: usize = 64;
const K: usize = 80;

fn main() {
    match run() {
        Ok(()) => {}
        Err(LibError::Cuda(handles_cuda::Error::DriverNotFound)) => {
            println!("No NVIDIA driver was found on this machine, so there is no GEMM to run.");
        }
        Err(LibError::Missing(library)) => {
            println!("{library} is not installed on this machine, so there is no GEMM to run.");
        }
        Err(error) => {
            eprintln!("gemm failed: {error}");
            std::process::exit(1);
        }
    }
}

fn upload(
    values: &[f32],
    pool: &MemoryPoolHandle,
    stream: &StreamHandle,
) -> Result<DevicePtrHandle, LibError> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let buffer = DevicePtrHandle::alloc_from_pool(pool, bytes.len(), stream)?;
    buffer.copy_from_host(&bytes, stream)?;
    Ok(buffer)
}

fn run() -> Result<(), LibError> {
    handles_cuda::driver::ensure_loaded()?;
    let context = ContextHandle::primary(0)?;
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
    let cublas = CublasHandle::new(&stream)?;
    println!("cuBLAS {} on {cublas:?}", cublas.version()?);
    // Column-major A (M×K) and B (K×N) with small integers, so the f32 product is exact.
    let a: Vec<f32> = (0..M * K).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let b: Vec<f32> = (0..K * N).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let (a_gpu, b_gpu) = (upload(&a, &pool, &stream)?, upload(&b, &pool, &stream)?);
    let c_gpu = DevicePtrHandle::alloc_from_pool(&pool, M * N * 4, &stream)?;
    // The application lets go of everything but the cuBLAS handle and the buffers: the handle
    // keeps its stream and context, the buffers their pool.
    drop((context, stream, pool));
    cublas.sgemm((M, N, K), &a_gpu, &b_gpu, &c_gpu)?;
    let mut bytes = vec![0u8; M * N * 4];
    c_gpu.copy_to_host(&mut bytes, cublas.stream())?;
    let c: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|x| f32::from_ne_bytes(x.try_into().unwrap()))
        .collect();
    let mut wrong = 0;
    for col in 0..N {
        for row in 0..M {
            let expected: f32 = (0..K).map(|i| a[i * M + row] * b[col * K + i]).sum();
            if c[col * M + row] != expected {
                wrong += 1;
            }
        }
    }
    println!(
        "sgemm {M}x{K} · {K}x{N}: {} of {} elements match the CPU product",
        M * N - wrong,
        M * N
    );
    if wrong != 0 {
        return Err(LibError::InvalidArgument(format!(
            "{wrong} elements differ"
        )));
    }
    // The other handles, on the same stream and context.
    match CudnnHandle::new(cublas.stream()) {
        Ok(cudnn) => println!("cuDNN {} on {cudnn:?}", CudnnHandle::version()?),
        Err(LibError::Missing(library)) => println!("{library} is not installed; skipped"),
        Err(error) => return Err(error),
    }
    let lt = CublasLtHandle::new(cublas.context())?;
    let desc = MatmulDescHandle::f32()?;
    println!("cuBLASLt {lt:?} with {desc:?}");
    drop((a_gpu, b_gpu, c_gpu));
    drop(cublas); // destroys the handle, then its stream, then the context retain
    println!("done");
    Ok(())
}
