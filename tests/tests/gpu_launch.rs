//! GPU tests of cooperative and programmatic dependent launches, occupancy queries and tensor
//! maps (TMA: tiled, and im2col, whose copies the PTX interpreter does not run, so its tests
//! here encode and check maps only). They need a CUDA GPU and are ignored by default (run them with
//! `--include-ignored`); `on_the_simulator` runs them all again on the simulated driver, whose
//! PTX interpreter runs the same NVRTC-compiled kernels, except those named in
//! `NOT_SIMULATED`. None of them returns early.

use std::ffi::c_int;

use cudarc::driver::sys;
use handles_cuda::code::{Elements, KernelParams, OobFill, ProgramHandle};
use handles_cuda::code::{
    Im2colTensor, Interleave, LaunchOptions, OccupancyFlags, ProgrammaticEvent, SharedPerBlock,
    Swizzle, TensorDescription, TensorMap, TiledTensor, TypedKernel,
};
use handles_cuda::exec::{Device, EventFlags};
use handles_cuda::graph::{CaptureMode, GraphHandle};
use handles_cuda::{
    ContextHandle, DeviceBuffer, Error, EventHandle, KernelHandle, LaunchConfig, LaunchProblem,
    LibraryHandle, StreamHandle, TensorMapProblem,
};
use handles_tests::{Failures, serial, stream};

mod simulator;

const SOURCE: &str = r#"
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

// A sum over a grid whose blocks wait for each other: correct only when every block is
// resident at once, which a cooperative launch guarantees.
extern "C" __global__ void cooperative_sum(const float *xs, unsigned n, float *partials,
                                           unsigned *arrived, float *total) {
    __shared__ float sums[256];
    float sum = 0.0f;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        sum += xs[i];
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = sums[0];
        __threadfence();
        atomicAdd(arrived, 1u);
        // The grid-wide barrier: every block has written its partial sum.
        while (atomicAdd(arrived, 0u) < gridDim.x) {}
        __threadfence();
        if (blockIdx.x == 0) {
            float all = 0.0f;
            for (unsigned b = 0; b < gridDim.x; ++b) all += ((volatile float *)partials)[b];
            *total = all;
        }
    }
}

extern "C" __global__ void pdl_first(float *data, float *scratch, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        scratch[i] = (float)i;
        data[i] = scratch[i] * 3.0f;
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

extern "C" __global__ void pdl_second(const float *data, float *out, unsigned n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = data[i] + 1.0f;
}

// Stages each block's elements through dynamic shared memory (one float per thread).
extern "C" __global__ void staged_scale(float *xs, unsigned n, float by) {
    extern __shared__ float stage[];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    stage[threadIdx.x] = i < n ? xs[i] : 0.0f;
    __syncthreads();
    if (i < n) xs[i] = stage[threadIdx.x] * by;
}

// One 16 x 16 tile per block: TMA load into shared memory, x * 2 + 1, TMA store.
extern "C" __global__ void tma_copy(const __grid_constant__ TensorMap in,
                                    const __grid_constant__ TensorMap out) {
    __shared__ alignas(128) float tile[16 * 16];
    __shared__ alignas(8) unsigned long long bar;
    int x = blockIdx.x * 16, y = blockIdx.y * 16;
    unsigned tile_s = (unsigned)__cvta_generic_to_shared(tile);
    unsigned bar_s = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar_s), "r"(1) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long state;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                     : "=l"(state) : "r"(bar_s), "r"(16 * 16 * 4) : "memory");
        (void)state;
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(tile_s), "l"(&in), "r"(x), "r"(y), "r"(bar_s) : "memory");
    }
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar_s), "r"(0) : "memory");
    }
    tile[threadIdx.x] = tile[threadIdx.x] * 2.0f + 1.0f;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"(&out), "r"(x), "r"(y), "r"(tile_s) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
}
"#;

/// Asserts that `$result` is an error matching `$pattern`.
macro_rules! refused {
    ($result:expr, $pattern:pat) => {
        match $result {
            Err($pattern) => {}
            other => panic!("expected {}, got {other:?}", stringify!($pattern)),
        }
    };
}

/// The test kernels, compiled by NVRTC for compute capability 9.0 (TMA and
/// `griddepcontrol` need it) and loaded.
fn library() -> LibraryHandle {
    let program = ProgramHandle::new(SOURCE, "launch.cu").unwrap();
    if let Err(error) = program.compile(&["--gpu-architecture=compute_90", "-std=c++17"]) {
        panic!("{error}\n{}", program.log().unwrap_or_default());
    }
    LibraryHandle::load_data(&program.ptx().unwrap()).unwrap()
}

/// A kernel of `library` with the parameter list `P`, checked only by the driver's limits:
/// each test sizes its buffers for the grid it launches.
fn kernel<P: KernelParams>(library: &LibraryHandle, name: &str) -> TypedKernel<P> {
    let kernel = KernelHandle::get(library, name).unwrap();
    // SAFETY: every test passes buffers of at least `n` elements with `n` the kernel's bound
    // (or, for `cooperative_sum`, a `partials` buffer of one element per block of the grid),
    // and `tma_copy` touches global memory only through its two tensor maps.
    unsafe { kernel.typed::<P>(|_, _| Ok(())) }.unwrap()
}

fn setup() -> (ContextHandle, StreamHandle, LibraryHandle) {
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    (context, stream, library())
}

type CooperativeSum = (
    Elements<f32>,
    u32,
    Elements<f32>,
    Elements<u32>,
    Elements<f32>,
);

/// Blocks of 256 threads of `cooperative_sum` that fit on the device at once.
fn cooperative_grid(sum: &TypedKernel<CooperativeSum>, context: &ContextHandle) -> (u32, u32, u32) {
    let per_sm = sum
        .kernel()
        .max_active_blocks_per_sm(context, 256, 0, OccupancyFlags::Default)
        .unwrap();
    let sms = Device::new(0)
        .unwrap()
        .properties()
        .unwrap()
        .multiprocessor_count;
    assert!(per_sm >= 1, "{per_sm}");
    (per_sm, sms, per_sm * sms)
}

/// A cooperative sum over 2^20 values (`i % modulo`): its buffers, a grid of `extra` blocks
/// more than fill the device (0: exactly full), and the expected total.
struct Reduction {
    xs: DeviceBuffer<f32>,
    partials: DeviceBuffer<f32>,
    arrived: DeviceBuffer<u32>,
    total: DeviceBuffer<f32>,
    n: u32,
    blocks: u32,
    config: LaunchConfig,
    options: LaunchOptions,
    expected: f64,
}

impl Reduction {
    fn new(
        sum: &TypedKernel<CooperativeSum>,
        context: &ContextHandle,
        stream: &StreamHandle,
        modulo: u32,
        extra: u32,
    ) -> Reduction {
        let blocks = cooperative_grid(sum, context).2 + extra;
        let n = 1u32 << 20;
        let values: Vec<f32> = (0..n).map(|i| (i % modulo) as f32).collect();
        Reduction {
            xs: DeviceBuffer::from_slice(&values, stream).unwrap(),
            partials: DeviceBuffer::<f32>::zeroed(blocks as usize, stream).unwrap(),
            arrived: DeviceBuffer::<u32>::zeroed(1, stream).unwrap(),
            total: DeviceBuffer::<f32>::zeroed(1, stream).unwrap(),
            n,
            blocks,
            config: LaunchConfig {
                grid: [blocks, 1, 1],
                block: [256, 1, 1],
                shared_mem_bytes: 0,
            },
            options: LaunchOptions {
                cooperative: true,
                ..LaunchOptions::default()
            },
            expected: values.iter().map(|&v| f64::from(v)).sum(),
        }
    }

    /// The kernel's arguments.
    fn args(&self) -> <CooperativeSum as KernelParams>::Args<'_> {
        (&self.xs, self.n, &self.partials, &self.arrived, &self.total)
    }

    /// Checks the total and that every block arrived at the barrier.
    fn check(&self, stream: &StreamHandle, what: &str) {
        assert_eq!(
            f64::from(self.total.to_vec(stream).unwrap()[0]),
            self.expected,
            "{what}"
        );
        assert_eq!(
            self.arrived.to_vec(stream).unwrap()[0],
            self.blocks,
            "{what}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_cooperative_reduction_synchronises_the_whole_grid() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let sum = kernel::<CooperativeSum>(&library, "cooperative_sum");
    let reduction = Reduction::new(&sum, &context, &stream, 7, 0);
    sum.launch_ex(
        &stream,
        &reduction.config,
        &reduction.options,
        reduction.args(),
    )
    .unwrap();
    reduction.check(&stream, "one launch");
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_cooperative_grid_beyond_occupancy_is_refused_before_the_driver() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let sum = kernel::<CooperativeSum>(&library, "cooperative_sum");
    let (per_sm, sms, most) = cooperative_grid(&sum, &context);
    let reduction = Reduction::new(&sum, &context, &stream, 7, 1);
    let (config, options) = (reduction.config, &reduction.options);
    let result = sum.launch_ex(&stream, &config, options, reduction.args());
    match result {
        Err(Error::BadLaunch {
            what:
                LaunchProblem::CooperativeGrid {
                    blocks,
                    max,
                    per_sm: p,
                    multiprocessors,
                },
        }) => assert_eq!(
            (blocks, max, p, multiprocessors),
            (u64::from(most) + 1, u64::from(most), per_sm, sms)
        ),
        other => panic!("expected a CooperativeGrid refusal, got {other:?}"),
    }
    // More dynamic shared memory per block lowers the limit: the check uses the launch's.
    let mut big = config;
    big.grid = [most, 1, 1];
    big.shared_mem_bytes = 40 * 1024;
    refused!(
        sum.launch_ex(&stream, &big, options, reduction.args()),
        Error::BadLaunch {
            what: LaunchProblem::CooperativeGrid { .. }
        }
    );
    // Nothing ran: no block arrived.
    assert_eq!(reduction.arrived.to_vec(&stream).unwrap(), [0]);
    failures.assert_none();
}

type First = (Elements<f32>, Elements<f32>, u32);
type Second = (Elements<f32>, Elements<f32>, u32);

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_dependent_launch_reads_what_its_predecessor_wrote() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let first = kernel::<First>(&library, "pdl_first");
    let second = kernel::<Second>(&library, "pdl_second");
    let n = 100_000u32;
    let config = LaunchConfig::linear(n, 256);
    for round in 0..3 {
        let data = DeviceBuffer::<f32>::alloc_async(n as usize, &stream).unwrap();
        let out = DeviceBuffer::<f32>::alloc_async(n as usize, &stream).unwrap();
        let scratch = DeviceBuffer::<f32>::alloc_async(n as usize, &stream).unwrap();
        first
            .launch(&stream, &config, (&data, &scratch, n))
            .unwrap();
        // The last handle of a buffer only the first kernel used, dropped between the two
        // launches: its free is queued after the first kernel, before the dependent one.
        drop(scratch);
        let options = LaunchOptions {
            programmatic_serialization: true,
            ..LaunchOptions::default()
        };
        second
            .launch_ex(&stream, &config, &options, (&data, &out, n))
            .unwrap();
        // Both buffers' last handles dropped after the dependent launch: their frees are
        // ordered after both kernels.
        let values = out.to_vec(&stream).unwrap();
        drop((data, out));
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(v, i as f32 * 3.0 + 1.0, "round {round}, element {i}");
        }
    }
    // The event form: recorded by the launch once every block has triggered.
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    let data = DeviceBuffer::<f32>::alloc_async(n as usize, &stream).unwrap();
    let scratch = DeviceBuffer::<f32>::alloc_async(n as usize, &stream).unwrap();
    let options = LaunchOptions {
        programmatic_event: Some(ProgrammaticEvent {
            event: event.clone(),
            trigger_at_block_start: false,
        }),
        ..LaunchOptions::default()
    };
    first
        .launch_ex(&stream, &config, &options, (&data, &scratch, n))
        .unwrap();
    event.synchronize().unwrap();
    let values = data.to_vec(&stream).unwrap();
    assert!(values.iter().enumerate().all(|(i, &v)| v == i as f32 * 3.0));
    // An event that records timestamps cannot be a programmatic event.
    let timed = EventHandle::create(&context, EventFlags::timing()).unwrap();
    let options = LaunchOptions {
        programmatic_event: Some(ProgrammaticEvent {
            event: timed,
            trigger_at_block_start: true,
        }),
        ..LaunchOptions::default()
    };
    refused!(
        first.launch_ex(&stream, &config, &options, (&data, &scratch, n)),
        Error::BadFlags { .. }
    );
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_dependent_pair_replays_after_its_buffers_handles_are_dropped() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let first = kernel::<First>(&library, "pdl_first");
    let second = kernel::<Second>(&library, "pdl_second");
    let n = 100_000u32;
    let config = LaunchConfig::linear(n, 256);
    let data = DeviceBuffer::<f32>::zeroed(n as usize, &stream).unwrap();
    let scratch = DeviceBuffer::<f32>::zeroed(n as usize, &stream).unwrap();
    let out = DeviceBuffer::<f32>::zeroed(n as usize, &stream).unwrap();
    let dependent = LaunchOptions {
        programmatic_serialization: true,
        ..LaunchOptions::default()
    };
    let graph = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        capture.launch(&first, &config, (&data, &scratch, n))?;
        // The dependent kernel, captured as a programmatic edge from the first.
        capture.launch_ex(&second, &config, &dependent, (&data, &out, n))
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    // Every user handle of the buffers is gone: the graph keeps them.
    drop((graph, data, scratch));
    for round in 0..3 {
        let bytes = out.as_bytes();
        bytes.memset_async(0, bytes.size(), &stream).unwrap();
        exec.launch(&stream).unwrap();
        let values = out.to_vec(&stream).unwrap();
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(v, i as f32 * 3.0 + 1.0, "replay {round}, element {i}");
        }
    }
    drop((exec, out));
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_launch_options_are_checked_before_the_driver() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let sum = kernel::<CooperativeSum>(&library, "cooperative_sum");
    let first = kernel::<First>(&library, "pdl_first");
    let too_big = Reduction::new(&sum, &context, &stream, 7, 1);
    // A cooperative grid beyond occupancy: refused in the capture, which then fails whole.
    let captured = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        capture.launch_ex(&sum, &too_big.config, &too_big.options, too_big.args())
    });
    refused!(
        captured,
        Error::BadLaunch {
            what: LaunchProblem::CooperativeGrid { .. }
        }
    );
    // A programmatic event: refused, it would be an outside event recorded in the capture.
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    let with_event = LaunchOptions {
        programmatic_event: Some(ProgrammaticEvent {
            event: event.clone(),
            trigger_at_block_start: false,
        }),
        ..LaunchOptions::default()
    };
    let n = 256u32;
    let data = DeviceBuffer::<f32>::zeroed(n as usize, &stream).unwrap();
    let scratch = DeviceBuffer::<f32>::zeroed(n as usize, &stream).unwrap();
    // `first` with `options`, captured on the capture's stream or on a forked branch.
    let capture_first = |options: &LaunchOptions, on_branch: bool| {
        GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
            let (config, args) = (LaunchConfig::linear(n, 128), (&data, &scratch, n));
            if on_branch {
                capture.fork()?.launch_ex(&first, &config, options, args)
            } else {
                capture.launch_ex(&first, &config, options, args)
            }
        })
    };
    refused!(
        capture_first(&with_event, false),
        Error::GraphRule(handles_cuda::GraphRule::ProgrammaticEventInCapture)
    );
    // A bad cluster shape on a branch: refused like a stream launch's.
    let clustered = LaunchOptions {
        cluster: Some([3, 1, 1]),
        ..LaunchOptions::default()
    };
    refused!(
        capture_first(&clustered, true),
        Error::BadLaunch {
            what: LaunchProblem::ClusterDivide { .. }
        }
    );
    // Nothing ran: no block arrived, the data is untouched.
    assert_eq!(too_big.arrived.to_vec(&stream).unwrap(), [0]);
    assert!(data.to_vec(&stream).unwrap().iter().all(|&v| v == 0.0));
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_cooperative_reduction_replays() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let sum = kernel::<CooperativeSum>(&library, "cooperative_sum");
    let reduction = Reduction::new(&sum, &context, &stream, 5, 0);
    let graph = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        // The barrier's counter starts at zero at every replay.
        capture.memset(reduction.arrived.as_bytes(), 0, 0, 4)?;
        capture.launch_ex(
            &sum,
            &reduction.config,
            &reduction.options,
            reduction.args(),
        )
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    for round in 0..3 {
        exec.launch(&stream).unwrap();
        reduction.check(&stream, &format!("replay {round}"));
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_cooperative_grid_is_refused_on_a_green_context_too_small_for_it() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let scale = kernel::<Staged>(&library, "staged_scale");
    let per_sm = scale
        .kernel()
        .max_active_blocks_per_sm(&context, 256, staged_bytes(256), OccupancyFlags::Default)
        .unwrap();
    let sms = Device::new(0)
        .unwrap()
        .properties()
        .unwrap()
        .multiprocessor_count;
    // Every multiprocessor full: the grid needs all of them at once.
    let blocks = per_sm * sms;
    let n = blocks * 256;
    let xs = DeviceBuffer::from_slice(&vec![1.0f32; n as usize], &stream).unwrap();
    let cooperative = LaunchOptions {
        cooperative: true,
        ..LaunchOptions::default()
    };
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: staged_bytes(256) as u32,
    };
    let graph = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        capture.launch_ex(&scale, &config, &cooperative, (&xs, n, 2.0))
    })
    .unwrap();
    // A parent that holds it as a child graph carries the need too.
    let parent = GraphHandle::create(&context).unwrap();
    parent.add_child_graph_node(&[], &graph).unwrap();
    let exec = graph.instantiate().unwrap();
    let parent_exec = parent.instantiate().unwrap();
    let green = handles_cuda::exec::GreenContextHandle::create(0, 16).unwrap();
    let green_stream = green.create_stream(0).unwrap();
    let share = green.sm_count();
    assert!(share < sms, "a green context of {share} of {sms} SMs");
    for exec in [&exec, &parent_exec] {
        match exec.launch(&green_stream) {
            Err(Error::BadLaunch {
                what:
                    LaunchProblem::CooperativeGraph {
                        needs,
                        multiprocessors,
                    },
            }) => assert_eq!((needs, multiprocessors), (sms, share)),
            other => panic!("expected a CooperativeGraph refusal, got {other:?}"),
        }
    }
    // The legacy stream with the green context bound to the thread runs in that context too.
    let green_context = green.context().unwrap();
    green_context.bind_to_thread().unwrap();
    let on_legacy = exec.launch(&StreamHandle::legacy());
    ContextHandle::unbind_thread().unwrap();
    refused!(
        on_legacy,
        Error::BadLaunch {
            what: LaunchProblem::CooperativeGraph { .. }
        }
    );
    green_stream.synchronize().unwrap();
    // On the capture's context it runs, twice (the child's copy and the graph itself).
    exec.launch(&stream).unwrap();
    parent_exec.launch(&stream).unwrap();
    assert!(xs.to_vec(&stream).unwrap().iter().all(|&v| v == 4.0));
    drop((
        exec,
        parent_exec,
        graph,
        parent,
        green_stream,
        green_context,
        green,
    ));
    failures.assert_none();
}

type Staged = (Elements<f32>, u32, f32);

/// The dynamic shared memory `staged_scale` uses per block: one float per thread.
fn staged_bytes(block: u32) -> usize {
    block as usize * 4
}

extern "C" fn staged_bytes_raw(block: c_int) -> usize {
    block.max(0) as usize * 4
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn occupancy_queries_agree_with_the_driver_and_launch() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let staged = kernel::<Staged>(&library, "staged_scale");
    let k = staged.kernel();
    let function = k.as_cu() as sys::CUfunction;
    let flags = OccupancyFlags::Default;

    let per_sm = k
        .max_active_blocks_per_sm(&context, 256, 1024, flags)
        .unwrap();
    let potential = k
        .potential_block_size(&context, SharedPerBlock::PerBlock(staged_bytes), 0, flags)
        .unwrap();
    let fixed = k
        .potential_block_size(&context, SharedPerBlock::Fixed(0), 512, flags)
        .unwrap();
    let available = k.available_dynamic_shared(&context, 2, 256).unwrap();
    let config_256 = LaunchConfig::linear(256 * 264, 256);
    let clusters = k
        .max_active_clusters(&context, &config_256, [2, 1, 1])
        .unwrap();

    // The driver's own answers, asked directly in the same context.
    let raw = context
        .run(|| -> handles_cuda::Result<_> {
            let (mut blocks, mut grid, mut block, mut grid_fixed, mut block_fixed) =
                (0, 0, 0, 0, 0);
            let mut bytes = 0usize;
            let mut raw_clusters = 0;
            // SAFETY: the kernel is alive and its context current; every out-pointer is
            // valid; the callback matches `CUoccupancyB2DSize`; the launch configuration and
            // its one attribute live for the call.
            unsafe {
                assert_eq!(
                    sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                        &mut blocks,
                        function,
                        256,
                        1024
                    ),
                    sys::CUresult::CUDA_SUCCESS
                );
                assert_eq!(
                    sys::cuOccupancyMaxPotentialBlockSize(
                        &mut grid,
                        &mut block,
                        function,
                        Some(staged_bytes_raw),
                        0,
                        0
                    ),
                    sys::CUresult::CUDA_SUCCESS
                );
                assert_eq!(
                    sys::cuOccupancyMaxPotentialBlockSize(
                        &mut grid_fixed,
                        &mut block_fixed,
                        function,
                        None,
                        0,
                        512
                    ),
                    sys::CUresult::CUDA_SUCCESS
                );
                assert_eq!(
                    sys::cuOccupancyAvailableDynamicSMemPerBlock(&mut bytes, function, 2, 256),
                    sys::CUresult::CUDA_SUCCESS
                );
                let mut attribute: sys::CUlaunchAttribute = std::mem::zeroed();
                attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
                attribute.value.clusterDim.x = 2;
                attribute.value.clusterDim.y = 1;
                attribute.value.clusterDim.z = 1;
                let config = sys::CUlaunchConfig {
                    gridDimX: config_256.grid[0],
                    gridDimY: 1,
                    gridDimZ: 1,
                    blockDimX: 256,
                    blockDimY: 1,
                    blockDimZ: 1,
                    sharedMemBytes: 0,
                    hStream: std::ptr::null_mut(),
                    attrs: &mut attribute,
                    numAttrs: 1,
                };
                assert_eq!(
                    sys::cuOccupancyMaxActiveClusters(&mut raw_clusters, function, &config),
                    sys::CUresult::CUDA_SUCCESS
                );
            }
            Ok((
                blocks,
                grid,
                block,
                grid_fixed,
                block_fixed,
                bytes,
                raw_clusters,
            ))
        })
        .unwrap();
    assert_eq!(
        raw,
        (
            per_sm as c_int,
            potential.min_grid as c_int,
            potential.block as c_int,
            fixed.min_grid as c_int,
            fixed.block as c_int,
            available,
            clusters as c_int
        )
    );
    assert!(per_sm >= 1 && potential.block >= 32 && potential.min_grid >= 1);
    assert!(fixed.block <= 512 && clusters >= 1 && available >= 1024);
    // The shared memory `available_dynamic_shared` allows still lets two blocks reside.
    assert!(
        k.max_active_blocks_per_sm(&context, 256, available, flags)
            .unwrap()
            >= 2
    );
    // A launch with the occupancy-chosen block size and its shared memory succeeds.
    let n = potential.block * potential.min_grid;
    let xs = DeviceBuffer::from_slice(&vec![1.5f32; n as usize], &stream).unwrap();
    let config = LaunchConfig {
        grid: [potential.min_grid, 1, 1],
        block: [potential.block, 1, 1],
        shared_mem_bytes: staged_bytes(potential.block) as u32,
    };
    staged.launch(&stream, &config, (&xs, n, 2.0)).unwrap();
    let values = xs.to_vec(&stream).unwrap();
    let wrong: Vec<(usize, f32)> = values
        .iter()
        .enumerate()
        .filter(|&(_, &x)| x != 3.0)
        .map(|(i, &x)| (i, x))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {n} elements wrong (grid {:?}, block {:?}, {} bytes shared); first: {:?}",
        wrong.len(),
        config.grid,
        config.block,
        config.shared_mem_bytes,
        &wrong[..wrong.len().min(8)]
    );
    // So does a cluster launch of that shape.
    let options = LaunchOptions {
        cluster: Some([2, 1, 1]),
        ..LaunchOptions::default()
    };
    let cluster_config = LaunchConfig {
        grid: [2 * clusters.min(64), 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 1024,
    };
    staged
        .launch_ex(
            &stream,
            &cluster_config,
            &options,
            (&xs, n.min(256 * 128), 1.0),
        )
        .unwrap();
    // A panic in the shared-memory function reaches the caller, after the driver call.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        k.potential_block_size(
            &context,
            SharedPerBlock::PerBlock(|_| panic!("no shared memory today")),
            0,
            flags,
        )
    }));
    assert!(panicked.is_err());
    stream.synchronize().unwrap();
    failures.assert_none();
}

/// A host copy is complete when it returns, for every stream. The driver's synchronous copy
/// from pageable memory returns once its source is staged, with the transfer still on the
/// legacy stream, which a non-blocking stream does not follow; the kernel queued right after
/// must still read every byte of it, round after round (on the simulator, its race check
/// reports any kernel that nothing orders after the copy).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_copy_is_complete_before_the_next_kernel_of_a_non_blocking_stream() {
    let _serial = serial();
    let failures = Failures::watch();
    let (_context, stream, library) = setup();
    let staged = kernel::<Staged>(&library, "staged_scale");
    let n: u32 = 1 << 18;
    let config = LaunchConfig {
        shared_mem_bytes: staged_bytes(256) as u32,
        ..LaunchConfig::linear(n, 256)
    };
    for round in 0..4u32 {
        let values: Vec<f32> = (0..n).map(|i| ((i + round) % 1000) as f32).collect();
        let xs = DeviceBuffer::from_slice(&values, &stream).unwrap();
        staged.launch(&stream, &config, (&xs, n, 2.0)).unwrap();
        let wrong = |by: f32, of: &[f32]| {
            let back = xs.to_vec(&stream).unwrap();
            back.iter()
                .zip(of)
                .filter(|&(got, x)| *got != x * by)
                .count()
        };
        assert_eq!(wrong(2.0, &values), 0, "round {round}: elements wrong");
        // A second copy into the same buffer, then a kernel again.
        let next: Vec<f32> = values.iter().map(|x| x + 1.0).collect();
        xs.copy_from(&next, &stream).unwrap();
        staged.launch(&stream, &config, (&xs, n, 3.0)).unwrap();
        assert_eq!(
            wrong(3.0, &next),
            0,
            "round {round}: elements wrong after the second copy"
        );
    }
    failures.assert_none();
}

type TmaCopy = (TensorMap<f32>, TensorMap<f32>);

/// The bytes of `values`, for a copy from device memory.
fn bytemuck_bytes(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: any bytes are a valid `f32`; the slice covers exactly the values' memory.
    unsafe {
        std::slice::from_raw_parts_mut(
            values.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(values),
        )
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_tma_kernel_copies_tiles_through_shared_memory() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, library) = setup();
    let copy = kernel::<TmaCopy>(&library, "tma_copy");
    assert_eq!(
        copy.kernel().param_sizes().as_deref(),
        Some(&[128, 128][..])
    );
    // 40 x 24 floats: the right and bottom tiles hang over the edge (clipped by the map).
    let (columns, rows) = (40u64, 24u64);
    let values: Vec<f32> = (0..columns * rows).map(|i| i as f32 * 0.5).collect();
    let input = DeviceBuffer::from_slice(&values, &stream).unwrap();
    let output = DeviceBuffer::<f32>::zeroed(values.len(), &stream).unwrap();
    let description = TiledTensor::matrix(columns, rows, 4, 16, 16);
    let in_map = TensorMap::tiled(&input, &description).unwrap();
    let out_map = TensorMap::tiled(&output, &description).unwrap();
    // The maps keep their buffers: the input's own handle can go.
    drop(input);
    let config = LaunchConfig {
        grid: [columns.div_ceil(16) as u32, rows.div_ceil(16) as u32, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    copy.launch(&stream, &config, (&in_map, &out_map)).unwrap();
    let result = output.to_vec(&stream).unwrap();
    for (i, (&got, &x)) in result.iter().zip(&values).enumerate() {
        assert_eq!(got, x * 2.0 + 1.0, "element {i}");
    }
    assert_eq!(in_map.buffer().len(), values.len());
    // Captured into a graph: the graph keeps both buffers after every map and handle is gone.
    output
        .as_bytes()
        .memset_async(0, values.len() * 4, &stream)
        .unwrap();
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        capture.launch(&copy, &config, (&in_map, &out_map))
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    drop((graph, in_map, out_map));
    let output_bytes = output.as_bytes().clone();
    drop(output);
    for _ in 0..2 {
        exec.launch(&stream).unwrap();
    }
    let mut result = vec![0f32; values.len()];
    output_bytes
        .copy_to_host(bytemuck_bytes(&mut result), &stream)
        .unwrap();
    for (i, (&got, &x)) in result.iter().zip(&values).enumerate() {
        assert_eq!(got, x * 2.0 + 1.0, "element {i}, from the graph");
    }
    drop((exec, output_bytes));
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_tensor_map_used_on_another_stream_is_freed_after_the_kernel() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, home, library) = setup();
    let other = stream(&context);
    let copy = kernel::<TmaCopy>(&library, "tma_copy");
    let (columns, rows) = (64u64, 32u64);
    let values: Vec<f32> = (0..columns * rows).map(|i| i as f32).collect();
    let description = TiledTensor::matrix(columns, rows, 4, 16, 16);
    let output = DeviceBuffer::<f32>::zeroed(values.len(), &home).unwrap();
    let out_map = TensorMap::tiled(&output, &description).unwrap();
    let config = LaunchConfig {
        grid: [4, 2, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    home.synchronize().unwrap();
    for round in 0..4 {
        // Allocated on `home`, used by a kernel on `other`, and its last handle (the map's)
        // dropped right after the launch: the free must wait for the kernel on `other`.
        let input = DeviceBuffer::from_slice(&values, &home).unwrap();
        home.synchronize().unwrap();
        let in_map = TensorMap::tiled(&input, &description).unwrap();
        drop(input);
        copy.launch(&other, &config, (&in_map, &out_map)).unwrap();
        drop(in_map);
        let result = output.to_vec(&other).unwrap();
        for (i, (&got, &x)) in result.iter().zip(&values).enumerate() {
            assert_eq!(got, x * 2.0 + 1.0, "round {round}, element {i}");
        }
    }
    drop((out_map, output));
    other.synchronize().unwrap();
    home.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tensor_maps_are_checked_at_encode_time() {
    let _serial = serial();
    let failures = Failures::watch();
    let (_context, stream, _library) = setup();
    let buffer = DeviceBuffer::<f32>::zeroed(40 * 24, &stream).unwrap();
    let good = TiledTensor::matrix(40, 24, 4, 16, 16);
    let problem = |description: &TiledTensor, buffer: &DeviceBuffer<f32>| match TensorMap::tiled(
        buffer,
        description,
    ) {
        Err(Error::BadTensorMap { what }) => what,
        other => panic!("expected a BadTensorMap error, got {other:?}"),
    };
    let mut d = good.clone();
    d.dims.clear();
    assert_eq!(
        problem(&d, &buffer),
        TensorMapProblem::Rank {
            rank: 0,
            min: 1,
            max: 5
        }
    );
    let mut d = good.clone();
    d.box_dims.push(1);
    assert_eq!(
        problem(&d, &buffer),
        TensorMapProblem::Length {
            what: "box_dims",
            len: 3,
            rank: 2
        }
    );
    // 10 floats per row: a 40-byte stride.
    assert_eq!(
        problem(&TiledTensor::matrix(10, 24, 4, 8, 8), &buffer),
        TensorMapProblem::Stride {
            axis: 0,
            stride: 40,
            multiple: 16,
            at_least: 40
        }
    );
    let mut d = good.clone();
    d.strides[0] = 144;
    assert_eq!(
        problem(&d, &buffer),
        TensorMapProblem::Stride {
            axis: 0,
            stride: 144,
            multiple: 16,
            at_least: 160
        }
    );
    assert_eq!(
        problem(&TiledTensor::matrix(40, 24, 4, 16, 300), &buffer),
        TensorMapProblem::BoxDimension { axis: 1, size: 300 }
    );
    assert_eq!(
        problem(&TiledTensor::matrix(40, 24, 4, 3, 16), &buffer),
        TensorMapProblem::BoxInner {
            bytes: 12,
            max: 2048
        }
    );
    let mut d = good.clone();
    d.element_strides = vec![1, 9];
    assert_eq!(
        problem(&d, &buffer),
        TensorMapProblem::ElementStride { axis: 1, stride: 9 }
    );
    let mut d = good.clone();
    d.dims[0] = 0;
    assert_eq!(
        problem(&d, &buffer),
        TensorMapProblem::Dimension { axis: 0, size: 0 }
    );
    // A view one element in: 4 bytes past a 16-byte boundary.
    let shifted = buffer.slice(1..40 * 24).unwrap();
    let address = shifted.as_bytes().as_cu();
    assert_eq!(
        problem(&TiledTensor::matrix(36, 20, 4, 16, 16), &shifted),
        TensorMapProblem::Alignment {
            address,
            multiple: 16
        }
    );
    // 24 rows of 40 floats do not fit in 23 rows.
    let short = buffer.slice(0..40 * 23).unwrap();
    assert_eq!(
        problem(&good, &short),
        TensorMapProblem::Extent {
            needed: 40 * 24 * 4,
            available: 40 * 23 * 4
        }
    );
    let words = DeviceBuffer::<u32>::zeroed(40 * 24, &stream).unwrap();
    let mut d = good.clone();
    d.oob_fill = OobFill::Nan;
    match TensorMap::tiled(&words, &d) {
        Err(Error::BadTensorMap {
            what: TensorMapProblem::NanFill,
        }) => {}
        other => panic!("expected a NanFill refusal, got {other:?}"),
    }
    // The refused inputs are still the caller's, and a good description encodes.
    let map = TensorMap::tiled(&buffer, &good).unwrap();
    assert_eq!(map.description(), &TensorDescription::Tiled(good.clone()));
    assert_ne!(map.as_bytes(), &[0u8; 128]);
    failures.assert_none();
}

/// The refusal of `description` over `buffer`, or a panic.
fn im2col_problem<T: handles_cuda::code::TensorElement>(
    description: &Im2colTensor,
    buffer: &DeviceBuffer<T>,
) -> TensorMapProblem {
    match TensorMap::im2col(buffer, description) {
        Err(Error::BadTensorMap { what }) => what,
        other => panic!("expected a BadTensorMap error, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn im2col_tensor_maps_are_checked_at_encode_time() {
    let _serial = serial();
    let failures = Failures::watch();
    let (_context, stream, _library) = setup();
    // Two 8 x 8 images of 64 float channels (256 bytes a pixel).
    let buffer = DeviceBuffer::<f32>::zeroed(64 * 8 * 8 * 2, &stream).unwrap();
    let good = Im2colTensor::nhwc(64, 8, 8, 2, 4, 32, 64);
    let problem = |d: &Im2colTensor| im2col_problem(d, &buffer);
    let mut d = good.clone();
    d.dims.truncate(2);
    d.strides.truncate(1);
    assert_eq!(
        problem(&d),
        TensorMapProblem::Rank {
            rank: 2,
            min: 3,
            max: 5
        }
    );
    let mut d = good.clone();
    d.lower_corner.push(0);
    assert_eq!(
        problem(&d),
        TensorMapProblem::Length {
            what: "lower_corner",
            len: 3,
            rank: 4
        }
    );
    let mut d = good.clone();
    d.upper_corner.clear();
    assert_eq!(
        problem(&d),
        TensorMapProblem::Length {
            what: "upper_corner",
            len: 0,
            rank: 4
        }
    );
    // Rank 4 allows offsets in -128..=127.
    let mut d = good.clone();
    d.lower_corner = vec![-129, 0];
    assert_eq!(
        problem(&d),
        TensorMapProblem::Corner {
            which: "lower_corner",
            axis: 0,
            offset: -129,
            min: -128,
            max: 127
        }
    );
    let mut d = good.clone();
    d.upper_corner = vec![0, 128];
    assert_eq!(
        problem(&d),
        TensorMapProblem::Corner {
            which: "upper_corner",
            axis: 1,
            offset: 128,
            min: -128,
            max: 127
        }
    );
    // 8 pixels wide, the upper corner 8 in from the right: nothing left in W.
    let mut d = good.clone();
    d.upper_corner = vec![-8, 0];
    assert_eq!(
        problem(&d),
        TensorMapProblem::EmptyPixelBox { axis: 0, size: 0 }
    );
    let mut d = good.clone();
    d.channels_per_pixel = 0;
    assert_eq!(
        problem(&d),
        TensorMapProblem::ChannelsPerPixel { channels: 0 }
    );
    let mut d = good.clone();
    d.pixels_per_column = 1025;
    assert_eq!(
        problem(&d),
        TensorMapProblem::PixelsPerColumn { pixels: 1025 }
    );
    // The shared rules, as for tiled maps: 3 channels are 12 bytes, 64 channels too wide for
    // a 128-byte swizzle.
    let mut d = good.clone();
    d.channels_per_pixel = 3;
    assert_eq!(
        problem(&d),
        TensorMapProblem::BoxInner {
            bytes: 12,
            max: 2048
        }
    );
    let mut d = good.clone();
    d.channels_per_pixel = 64;
    d.swizzle = Swizzle::B128;
    assert_eq!(
        problem(&d),
        TensorMapProblem::BoxInner {
            bytes: 256,
            max: 128
        }
    );
    let mut d = good.clone();
    d.strides[0] = 248;
    assert_eq!(
        problem(&d),
        TensorMapProblem::Stride {
            axis: 0,
            stride: 248,
            multiple: 16,
            at_least: 256
        }
    );
    // A 32-byte interleave needs strides (and the address) in multiples of 32.
    let mut d = Im2colTensor::nhwc(4, 8, 8, 2, 4, 4, 64);
    d.interleave = Interleave::B32;
    assert_eq!(
        problem(&d),
        TensorMapProblem::Stride {
            axis: 0,
            stride: 16,
            multiple: 32,
            at_least: 16
        }
    );
    let mut d = good.clone();
    d.element_strides = vec![1, 2, 9, 1];
    assert_eq!(
        problem(&d),
        TensorMapProblem::ElementStride { axis: 2, stride: 9 }
    );
    let mut d = good.clone();
    d.dims[3] = 0;
    assert_eq!(
        problem(&d),
        TensorMapProblem::Dimension { axis: 3, size: 0 }
    );
    // A view one element in: 4 bytes past a 16-byte boundary.
    let shifted = buffer.slice(1..64 * 8 * 8 * 2).unwrap();
    let address = shifted.as_bytes().as_cu();
    assert_eq!(
        im2col_problem(&Im2colTensor::nhwc(64, 8, 8, 1, 4, 32, 64), &shifted),
        TensorMapProblem::Alignment {
            address,
            multiple: 16
        }
    );
    // Two images do not fit in one and a half.
    let short = buffer.slice(0..64 * 8 * 8 * 3 / 2).unwrap();
    assert_eq!(
        im2col_problem(&good, &short),
        TensorMapProblem::Extent {
            needed: 64 * 8 * 8 * 2 * 4,
            available: 64 * 8 * 8 * 3 / 2 * 4
        }
    );
    let words = DeviceBuffer::<u32>::zeroed(64 * 8 * 8 * 2, &stream).unwrap();
    let mut d = good.clone();
    d.oob_fill = handles_cuda::code::OobFill::Nan;
    assert_eq!(im2col_problem(&d, &words), TensorMapProblem::NanFill);
    // The refused inputs are still the caller's, and good descriptions encode: padding of 1
    // around a 3 x 3 filter (lower corner -1, upper corner 1 - 3 + 1 = -1), rank 3 and 5 at
    // their corner limits, and the limits of pixels per column and channels per pixel.
    let mut padded = good.clone();
    padded.lower_corner = vec![-1, -1];
    padded.upper_corner = vec![-1, -1];
    padded.element_strides = vec![1, 2, 2, 1];
    let map = TensorMap::im2col(&buffer, &padded).unwrap();
    assert_eq!(
        map.description(),
        &TensorDescription::Im2col(padded.clone())
    );
    assert_ne!(map.as_bytes(), &[0u8; 128]);
    assert_eq!(map.buffer().len(), buffer.len());
    let mut nwc = good.clone();
    nwc.dims = vec![64, 64, 2];
    nwc.strides = vec![256, 256 * 64];
    nwc.lower_corner = vec![-32768];
    nwc.upper_corner = vec![32767];
    TensorMap::im2col(&buffer, &nwc).unwrap();
    nwc.upper_corner = vec![32768];
    assert_eq!(
        problem(&nwc),
        TensorMapProblem::Corner {
            which: "upper_corner",
            axis: 0,
            offset: 32768,
            min: -32768,
            max: 32767
        }
    );
    let mut ndhwc = good.clone();
    ndhwc.dims = vec![64, 4, 4, 4, 2];
    ndhwc.strides = vec![256, 1024, 4096, 16384];
    ndhwc.lower_corner = vec![-16, -16, -16];
    ndhwc.upper_corner = vec![15, 15, 15];
    TensorMap::im2col(&buffer, &ndhwc).unwrap();
    ndhwc.lower_corner = vec![-16, -17, -16];
    assert_eq!(
        problem(&ndhwc),
        TensorMapProblem::Corner {
            which: "lower_corner",
            axis: 1,
            offset: -17,
            min: -16,
            max: 15
        }
    );
    let mut d = good.clone();
    d.pixels_per_column = 1024;
    d.l2_promotion = handles_cuda::code::L2Promotion::B128;
    TensorMap::im2col(&buffer, &d).unwrap();
    let mut d = good.clone();
    d.channels_per_pixel = 16;
    d.swizzle = Swizzle::B64;
    TensorMap::im2col(&buffer, &d).unwrap();
    let bytes = DeviceBuffer::<u8>::zeroed(512 * 16, &stream).unwrap();
    TensorMap::im2col(&bytes, &Im2colTensor::nhwc(512, 4, 4, 1, 1, 256, 16)).unwrap();
    assert_eq!(
        im2col_problem(&Im2colTensor::nhwc(512, 4, 4, 1, 1, 272, 16), &bytes),
        TensorMapProblem::ChannelsPerPixel { channels: 272 }
    );
    drop((map, buffer, words, bytes));
    stream.synchronize().unwrap();
    failures.assert_none();
}

/// What the driver itself answers to `d` over the memory at `address` (`cuTensorMapEncodeIm2col`
/// called directly, in `context`).
fn raw_im2col(context: &ContextHandle, address: u64, d: &Im2colTensor) -> sys::CUresult {
    let rank = d.dims.len();
    // Corner arrays of at least one entry, so that no pointer is null.
    let corner = |c: &[i32]| {
        let mut c = c.to_vec();
        c.resize(c.len().max(rank.saturating_sub(2)).max(1), 0);
        c
    };
    let (lower, upper) = (corner(&d.lower_corner), corner(&d.upper_corner));
    let element_strides = if d.element_strides.is_empty() {
        vec![1; rank.max(1)]
    } else {
        d.element_strides.clone()
    };
    let mut strides = d.strides.clone();
    strides.push(0);
    let interleave = match d.interleave {
        Interleave::None => sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
        Interleave::B16 => sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_16B,
        Interleave::B32 => sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_32B,
    };
    let swizzle = match d.swizzle {
        Swizzle::None => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    context
        .run(|| -> handles_cuda::Result<sys::CUresult> {
            let mut map = Box::new(sys::CUtensorMap { opaque: [0; 16] });
            // SAFETY: a context is current; `map` is a writable, aligned descriptor; every
            // array holds at least the entries the rank asks for (padded above); the address
            // is of a live buffer of the caller's.
            Ok(unsafe {
                sys::cuTensorMapEncodeIm2col(
                    &mut *map,
                    sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                    rank as u32,
                    address as *mut std::ffi::c_void,
                    d.dims.as_ptr(),
                    strides.as_ptr(),
                    lower.as_ptr(),
                    upper.as_ptr(),
                    d.channels_per_pixel,
                    d.pixels_per_column,
                    element_strides.as_ptr(),
                    interleave,
                    swizzle,
                    sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE,
                    sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
                )
            })
        })
        .unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn im2col_refusals_agree_with_the_driver() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream, _library) = setup();
    let buffer = DeviceBuffer::<f32>::zeroed(64 * 8 * 8 * 2, &stream).unwrap();
    let address = buffer.as_bytes().as_cu();
    let good = Im2colTensor::nhwc(64, 8, 8, 2, 4, 32, 64);
    let with = |change: &dyn Fn(&mut Im2colTensor)| {
        let mut d = good.clone();
        change(&mut d);
        d
    };
    // Each rule that im2col adds, just past its limit (refused by both) and at it (accepted
    // by both). The shared rules are the tiled maps' (checked against the driver there).
    let cases: Vec<(&str, Im2colTensor, bool)> = vec![
        ("rank 4", good.clone(), true),
        (
            "rank 2",
            with(&|d| {
                d.dims.truncate(2);
                d.strides.truncate(1);
                d.lower_corner.clear();
                d.upper_corner.clear();
            }),
            false,
        ),
        (
            "rank 4, lower corner -128",
            with(&|d| d.lower_corner = vec![-128, -128]),
            true,
        ),
        (
            "rank 4, lower corner -129",
            with(&|d| d.lower_corner = vec![-129, 0]),
            false,
        ),
        (
            "rank 4, upper corner 127",
            with(&|d| d.upper_corner = vec![127, 127]),
            true,
        ),
        (
            "rank 4, upper corner 128",
            with(&|d| d.upper_corner = vec![0, 128]),
            false,
        ),
        (
            "a one-pixel-wide box",
            with(&|d| d.upper_corner = vec![-7, 0]),
            true,
        ),
        (
            "an empty box",
            with(&|d| d.upper_corner = vec![-8, 0]),
            false,
        ),
        (
            "rank 3, corners -32768 and 32767",
            with(&|d| {
                d.dims = vec![64, 64, 2];
                d.strides = vec![256, 256 * 64];
                d.lower_corner = vec![-32768];
                d.upper_corner = vec![32767];
            }),
            true,
        ),
        (
            "rank 3, lower corner -32769",
            with(&|d| {
                d.dims = vec![64, 64, 2];
                d.strides = vec![256, 256 * 64];
                d.lower_corner = vec![-32769];
                d.upper_corner = vec![0];
            }),
            false,
        ),
        (
            "rank 5, corners -16 and 15",
            with(&|d| {
                d.dims = vec![64, 4, 4, 4, 2];
                d.strides = vec![256, 1024, 4096, 16384];
                d.lower_corner = vec![-16, -16, -16];
                d.upper_corner = vec![15, 15, 15];
            }),
            true,
        ),
        (
            "rank 5, upper corner 16",
            with(&|d| {
                d.dims = vec![64, 4, 4, 4, 2];
                d.strides = vec![256, 1024, 4096, 16384];
                d.lower_corner = vec![0, 0, 0];
                d.upper_corner = vec![0, 0, 16];
            }),
            false,
        ),
        (
            "4 channels (16 bytes)",
            with(&|d| d.channels_per_pixel = 4),
            true,
        ),
        ("0 channels", with(&|d| d.channels_per_pixel = 0), false),
        ("1024 pixels", with(&|d| d.pixels_per_column = 1024), true),
        ("1025 pixels", with(&|d| d.pixels_per_column = 1025), false),
        ("0 pixels", with(&|d| d.pixels_per_column = 0), false),
    ];
    let mut disagreements = Vec::new();
    for (name, d, valid) in &cases {
        let ours = TensorMap::im2col(&buffer, d);
        let driver = raw_im2col(&context, address, d);
        let driver_ok = driver == sys::CUresult::CUDA_SUCCESS;
        if ours.is_ok() != *valid || driver_ok != *valid {
            disagreements.push(format!(
                "{name}: expected {}, ours {:?}, the driver {driver:?}",
                if *valid { "accepted" } else { "refused" },
                ours.map(drop)
            ));
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
    drop(buffer);
    stream.synchronize().unwrap();
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[
    (
        "a_cooperative_reduction_synchronises_the_whole_grid",
        "grid-wide synchronisation needs every block resident at once; the simulator runs \
         blocks one after another, so the blocks waiting at the grid barrier would wait forever",
    ),
    (
        "a_captured_cooperative_reduction_replays",
        "the same grid-wide barrier, in a captured graph",
    ),
];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_launch",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
