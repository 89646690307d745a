//! Occupancy-chosen against hand-chosen block sizes: one memory-bound kernel (`y = a x + y`
//! over 2^26 floats, one element per thread) launched with the block size
//! `cuOccupancyMaxPotentialBlockSize` picks and with 32, 128 and 1024 threads, each launch
//! followed by a stream synchronisation, so a sample is the kernel's time plus one
//! synchronisation; and the cost of the query itself, raw against ours.

use handles_bench::{Measured, Variant, interleave, keep};
use handles_cuda::StreamHandle;
use handles_cuda::code::{Elements, OccupancyFlags, ProgramHandle, SharedPerBlock, TypedKernel};
use handles_cuda::driver::sys;
use handles_cuda::{ContextHandle, DeviceBuffer, KernelHandle, LaunchConfig, LibraryHandle};

const SOURCE: &str = r#"
extern "C" __global__ void axpy(float *y, const float *x, unsigned n, float a) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

const ELEMENTS: u32 = 1 << 26;

fn axpy() -> TypedKernel<(Elements<f32>, Elements<f32>, u32, f32)> {
    let program = ProgramHandle::new(SOURCE, "axpy.cu").unwrap();
    program.compile(&["--gpu-architecture=compute_90"]).unwrap();
    let library = LibraryHandle::load_data(&program.ptx().unwrap()).unwrap();
    let kernel = KernelHandle::get(&library, "axpy").unwrap();
    // SAFETY: `axpy(y, x, n, a)` touches elements below `n` of `y` and `x`, which the check
    // keeps within both buffers.
    unsafe {
        kernel.typed::<(Elements<f32>, Elements<f32>, u32, f32)>(|(y, x, n, _), _| {
            if *n as usize <= y.len().min(x.len()) {
                Ok(())
            } else {
                Err(handles_cuda::Error::InvalidArgument(
                    "n exceeds a buffer".into(),
                ))
            }
        })
    }
    .unwrap()
}

/// The kernel with each block size, launched and waited for; the first row is the
/// occupancy-chosen size.
pub fn block_sizes(context: &ContextHandle, stream: &StreamHandle) -> Measured {
    let axpy = axpy();
    let chosen = axpy
        .kernel()
        .potential_block_size(
            context,
            SharedPerBlock::Fixed(0),
            0,
            OccupancyFlags::Default,
        )
        .unwrap();
    let y = DeviceBuffer::<f32>::zeroed(ELEMENTS as usize, stream).unwrap();
    let x = DeviceBuffer::from_slice(&vec![1.0f32; ELEMENTS as usize], stream).unwrap();
    let name: &'static str = Box::leak(
        format!(
            "occupancy-chosen block of {} (min grid {})",
            chosen.block, chosen.min_grid
        )
        .into_boxed_str(),
    );
    let run = |block: u32| {
        let config = LaunchConfig::linear(ELEMENTS, block);
        let (axpy, y, x) = (&axpy, &y, &x);
        move || {
            axpy.launch(stream, &config, (keep(y), x, ELEMENTS, 0.5))
                .unwrap();
            stream.synchronize().unwrap();
        }
    };
    interleave(
        &mut [
            Variant::new(name, run(chosen.block)),
            Variant::new("hand-chosen block of 32", run(32)),
            Variant::new("hand-chosen block of 128", run(128)),
            Variant::new("hand-chosen block of 1024", run(1024)),
        ],
        15,
        10,
        || {},
    )
}

/// `cuOccupancyMaxPotentialBlockSize`, raw and through `potential_block_size`.
pub fn query(context: &ContextHandle) -> Measured {
    let axpy = axpy();
    let function = axpy.kernel().as_cu() as sys::CUfunction;
    interleave(
        &mut [
            Variant::new("raw cuOccupancyMaxPotentialBlockSize", || {
                let (mut grid, mut block) = (0, 0);
                // SAFETY: the primary context is current; the kernel is alive; both
                // out-pointers are valid.
                let status = unsafe {
                    sys::cuOccupancyMaxPotentialBlockSize(
                        &mut grid,
                        &mut block,
                        keep(function),
                        None,
                        0,
                        0,
                    )
                };
                assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
                keep((grid, block));
            }),
            Variant::new("handles-cuda KernelHandle::potential_block_size", || {
                keep(
                    axpy.kernel()
                        .potential_block_size(
                            context,
                            SharedPerBlock::Fixed(0),
                            0,
                            OccupancyFlags::Default,
                        )
                        .unwrap(),
                );
            }),
        ],
        31,
        200,
        || {},
    )
}

/// Prints this file's rows.
pub fn report_all(context: &ContextHandle, stream: &StreamHandle) {
    super::report(
        "axpy over 2^26 floats + synchronize, by block size",
        &block_sizes(context, stream),
    );
    super::report("occupancy query: potential block size", &query(context));
}
