//! The serving benchmark: an inference server's request loop, written on raw driver calls, on
//! cudarc's safe layer (event tracking off, and on) and on handles-cuda, with the same kernels
//! and the same work, interleaved in one process.
//!
//! `serving` runs the full measurement on GPU 0 (sized for well under two minutes on an H200,
//! an estimate: not yet measured there); `serving --quick` runs a few requests per variant at 1
//! and 4 threads, to check the program on the simulator:
//! `cuda-sim run --strict -- target/debug/serving --quick`.
//!
//! The variants: raw driver calls; cudarc with event tracking off, and on (its default);
//! handles-cuda through its safe API, where the host reads and writes the pinned staging
//! buffers through host views; and handles-cuda again with the staging buffers reached through
//! their raw addresses (`unsafe`, ordered by the events as in the raw variant), which shows what
//! the views cost. The graph buffer is made by each API's own allocation (`cuMemAlloc`; cudarc's
//! `alloc`, from the pool); only the timed loop is compared.
//!
//! # A request
//!
//! Each of N worker threads serves requests in a loop on a stream of its own. A request:
//!
//! 1. writes its input into a pinned host staging buffer (after the host has waited for the
//!    event of the request that used that staging buffer before);
//! 2. allocates its input and output buffers from the device's memory pool, ordered on the
//!    worker's stream;
//! 3. copies the input in, host to device, asynchronously;
//! 4. copies it into the worker's graph buffer, replays the worker's captured graph (three
//!    kernel nodes on that buffer: `add_one`, `add_u32` by 10, `add_one`), and copies the
//!    graph buffer into the request's output buffer (device to device);
//! 5. copies the output out to a pinned host buffer, asynchronously;
//! 6. frees its two buffers, ordered on the stream, and records an event (a reused one);
//! 7. the next stage, the host, waits for that event before it reads the output (checking
//!    it: every value must be the input's plus 12) and before it reuses the staging buffers.
//!
//! A captured graph bakes in the addresses of its buffers, and each request's buffers come
//! from the pool at addresses of their own. The design here is a graph per worker over a buffer
//! of that worker, which each request copies into and out of (two device-to-device copies of
//! 16 KiB, a microsecond each on the GPU): all three APIs can do it in their safe layers.
//! Updating the graph's kernel nodes per request to the request's buffers would save those two
//! copies but costs three node updates per request, and cudarc's safe layer has no node
//! update at all, so the variants could not do the same thing.
//!
//! Each worker keeps two requests in flight (two staging slots of pinned memory, one event
//! each): it queues request `i`, then waits for request `i - 1`. A request's latency is from
//! the start of its queueing to the moment the host has seen its event complete and read its
//! output; throughput is all threads' requests over the wall time of the run.

use std::sync::{Arc, Barrier, mpsc};
use std::time::Instant;

use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaSlice, CudaStream, PinnedHostSlice,
    PushKernelArg, sys,
};
use handles_bench::{allowed_cpus, median, pin_to};
use handles_cuda::{
    ContextHandle, DeviceBuffer, DevicePtrHandle, KernelHandle, LaunchConfig, LibraryHandle,
    MemoryPoolHandle, StreamFlags, StreamHandle,
    code::{Buffer, TypedKernel},
    exec::{EventFlags, EventRecycler, RecycledEvent},
    graph::{CaptureMode, GraphExecHandle, GraphHandle},
};

/// The checked-in test kernels: `add_one(data, n)` and `add_u32(data, value, n)` are used.
const PTX: &str = include_str!("../../../tests/kernels/test_kernels.ptx");
/// Threads per block of every kernel node.
const BLOCK: u32 = 256;
/// What `add_u32` adds in the graph's second node.
const ADDED: u32 = 10;
/// What the whole graph adds to each value: `add_one`, `add_u32` by `ADDED`, `add_one`.
const GRAPH_ADDS: u32 = ADDED + 2;
/// Requests in flight per worker: staging slots, one event each.
const DEPTH: usize = 2;

fn ok(status: sys::CUresult) {
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
}

/// The sizes of one run of the benchmark.
struct Plan {
    /// `u32` values per request.
    elements: u32,
    /// Thread counts, each with the requests each thread serves per timed run.
    threads: [(usize, usize); 2],
    /// Timed rounds per thread count (every variant once per round, on workers made for the
    /// round, after a short untimed run of each).
    rounds: usize,
    /// Every this many requests of a worker, the whole output is checked (else its first and
    /// last values).
    check_every: usize,
}

const FULL: Plan = Plan {
    elements: 4096,
    threads: [(1, 2000), (16, 1000)],
    rounds: 15,
    check_every: 8,
};

/// `--count`: one thread, no rounds (the threads and rounds are not used).
const COUNT: Plan = Plan {
    elements: 256,
    threads: [(1, 0), (1, 0)],
    rounds: 0,
    check_every: usize::MAX,
};

const QUICK: Plan = Plan {
    elements: 1024,
    threads: [(1, 8), (4, 8)],
    rounds: 1,
    check_every: 1,
};

/// The input value `j` of request `request` of worker `worker`: every request's input differs,
/// so an output left from another request fails the check.
fn input(worker: usize, request: usize, j: usize) -> u32 {
    let seed = (((worker as u32) << 24) ^ request as u32).wrapping_mul(2_654_435_761);
    seed ^ j as u32
}

/// Fills `values` with the input of the request.
fn fill(values: &mut [u32], worker: usize, request: usize) {
    for (j, value) in values.iter_mut().enumerate() {
        *value = input(worker, request, j);
    }
}

/// Checks the output of a request: every value if `whole`, else the first and the last.
/// Returns whether the whole output was checked. Panics on a wrong value.
fn check(values: &[u32], worker: usize, request: usize, whole: bool) -> bool {
    let last = values.len() - 1;
    let mut checked = |j: usize| {
        let expected = input(worker, request, j).wrapping_add(GRAPH_ADDS);
        assert_eq!(
            values[j], expected,
            "worker {worker}, request {request}: output value {j} is wrong"
        );
    };
    if whole {
        (0..values.len()).for_each(&mut checked);
    } else {
        checked(0);
        checked(last);
    }
    whole
}

/// One worker of one variant: its stream, graph, graph buffer, staging buffers and events.
/// Made on the thread that runs it, with the context bound there (cudarc's `CudaGraph` is
/// neither `Send` nor `Sync`: a graph stays on the thread that captured it).
trait Worker {
    /// Queues request `request` in staging slot `slot`, whose previous request has completed.
    fn submit(&mut self, slot: usize, worker: usize, request: usize);
    /// Waits for the request in `slot`, then reads and checks its output; whether it checked
    /// all of it.
    fn complete(&mut self, slot: usize, worker: usize, request: usize, whole: bool) -> bool;
}

/// What one worker thread measured.
struct Served {
    /// Latency of each request, ns.
    latencies: Vec<f64>,
    /// Requests whose whole output was checked.
    checked: usize,
    /// When the thread finished.
    end: Instant,
}

/// Serves `requests` requests on `worker`, two in flight.
fn serve(worker: &mut dyn Worker, index: usize, requests: usize, check_every: usize) -> Served {
    let mut latencies = Vec::with_capacity(requests);
    let mut started = [Instant::now(); DEPTH];
    let mut checked = 0;
    for i in 0..requests + DEPTH - 1 {
        if i < requests {
            let slot = i % DEPTH;
            // The slot's previous request (i - DEPTH) completed at step i - 1 below.
            started[slot] = Instant::now();
            worker.submit(slot, index, i);
        }
        if i + 1 >= DEPTH {
            let done = i + 1 - DEPTH;
            let slot = done % DEPTH;
            let whole = done.is_multiple_of(check_every) || done + 1 == requests;
            checked += usize::from(worker.complete(slot, index, done, whole));
            latencies.push(started[slot].elapsed().as_nanos() as f64);
        }
    }
    Served {
        latencies,
        checked,
        end: Instant::now(),
    }
}

/// One timed run of a variant: every worker serves `requests` requests on its thread, after a
/// common start.
struct Run {
    per_second: f64,
    p50: f64,
    p99: f64,
    checked: usize,
}

/// The worker threads of one variant at one thread count, waiting for runs.
struct Crew {
    commands: Vec<mpsc::Sender<Option<usize>>>,
    start: Arc<Barrier>,
    results: mpsc::Receiver<Served>,
}

impl Crew {
    /// Starts `threads` threads in `scope`, each making its worker of `variant` and then
    /// serving runs. They are made one after another: cudarc's tracked variant switches its
    /// context's event tracking off while it allocates a graph buffer. Worker `index` of every
    /// variant is pinned to the same CPU (the `index`-th allowed one, round robin): the crews
    /// run one at a time, so each variant's runs get the same cores (unpinned, one variant's
    /// one-thread rate moved by 15% between two runs on one machine, 37293 and 32418/s).
    fn start<'scope, 'env: 'scope>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        threads: usize,
        check_every: usize,
        shared: &'env Shared,
        variant: usize,
    ) -> Crew {
        let start = Arc::new(Barrier::new(threads + 1));
        let (report, results) = mpsc::channel();
        let mut commands = Vec::new();
        let cpus = allowed_cpus();
        for index in 0..threads {
            let (command, orders) = mpsc::channel::<Option<usize>>();
            let (ready, made) = mpsc::channel();
            let (start, report) = (start.clone(), report.clone());
            let cpu = cpus[index % cpus.len()];
            scope.spawn(move || {
                pin_to(cpu);
                let mut worker = make(shared, variant);
                ready.send(()).unwrap();
                while let Ok(Some(requests)) = orders.recv() {
                    start.wait();
                    let served = serve(worker.as_mut(), index, requests, check_every);
                    report.send(served).unwrap();
                }
                drop(worker);
                // The events this thread's recycler cache keeps: destroyed now, not by the
                // thread-local destructor at the thread's exit, which may run after the scope
                // has seen the thread finish (and after the process has exited).
                handles_cuda::exec::clear_recycled_events();
                ContextHandle::unbind_thread().unwrap();
            });
            made.recv().unwrap();
            commands.push(command);
        }
        Crew {
            commands,
            start,
            results,
        }
    }

    /// One timed run: every thread serves `requests` requests from a common start.
    fn run(&self, requests: usize) -> Run {
        for command in &self.commands {
            command.send(Some(requests)).unwrap();
        }
        self.start.wait();
        let start = Instant::now();
        let served: Vec<Served> = (0..self.commands.len())
            .map(|_| self.results.recv().unwrap())
            .collect();
        let end = served.iter().map(|s| s.end).max().unwrap();
        let mut latencies: Vec<f64> = served.iter().flat_map(|s| s.latencies.clone()).collect();
        latencies.sort_by(|a, b| a.total_cmp(b));
        let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
        Run {
            per_second: latencies.len() as f64 / (end - start).as_secs_f64(),
            p50: at(0.5),
            p99: at(0.99),
            checked: served.iter().map(|s| s.checked).sum(),
        }
    }

    /// Ends the threads (each drops its worker).
    fn stop(self) {
        for command in &self.commands {
            command.send(None).unwrap();
        }
    }
}

/// What every variant's workers are made from: the context, the pool, the kernels as each API
/// loads them.
struct Shared {
    elements: u32,
    context: ContextHandle,
    pool: MemoryPoolHandle,
    recycler: EventRecycler,
    add_one: AddOne,
    add_u32: AddU32,
    raw: RawKernels,
    untracked: CudarcKernels,
    tracked: CudarcKernels,
}

impl Shared {
    fn bytes(&self) -> usize {
        self.elements as usize * 4
    }
}

/// `add_one(data, n)`, typed.
type AddOne = TypedKernel<(Buffer, u32)>;
/// `add_u32(data, value, n)`, typed.
type AddU32 = TypedKernel<(Buffer, u32, u32)>;

/// Whether `n` u32 values fit in `buffer`.
fn in_bounds(buffer: &DevicePtrHandle, n: u32) -> handles_cuda::Result<()> {
    if n as usize * 4 <= buffer.size() {
        Ok(())
    } else {
        Err(handles_cuda::Error::InvalidArgument(
            "too many elements".into(),
        ))
    }
}

/// `add_one(data, n)` and `add_u32(data, value, n)` from the test kernels, typed and
/// bounds-checked; they keep their library.
fn handles_kernels() -> (AddOne, AddU32) {
    let library = LibraryHandle::load_ptx(PTX).unwrap();
    let add_one = KernelHandle::get(&library, "add_one").unwrap();
    let add_u32 = KernelHandle::get(&library, "add_u32").unwrap();
    // SAFETY: `(Buffer, u32)` is `add_one`'s parameter list, and `add_one(data, n)` touches
    // `n` 32-bit elements of `data` (threads past `n` return), which the check bounds by the
    // buffer's size.
    let add_one = unsafe {
        add_one
            .typed::<(Buffer, u32)>(|args: &(&DevicePtrHandle, u32), _| in_bounds(args.0, args.1))
    }
    .unwrap();
    // SAFETY: `(Buffer, u32, u32)` is `add_u32`'s parameter list, and `add_u32(data, value,
    // n)` touches `n` 32-bit elements of `data` (threads past `n` return), which the check
    // bounds by the buffer's size.
    let add_u32 = unsafe {
        add_u32.typed::<(Buffer, u32, u32)>(|args: &(&DevicePtrHandle, u32, u32), _| {
            in_bounds(args.0, args.2)
        })
    }
    .unwrap();
    (add_one, add_u32)
}

// ---------------------------------------------------------------------------------------------
// Raw driver calls.

/// The module loaded with `cuModuleLoadData` and its two functions; unloaded on drop, by the
/// main thread at its end, after every worker thread (each drops its worker, whose graphs
/// launched these functions, after synchronising its stream) has ended.
struct RawKernels {
    module: sys::CUmodule,
    add_one: sys::CUfunction,
    add_u32: sys::CUfunction,
}

impl RawKernels {
    fn load() -> Self {
        let source = std::ffi::CString::new(PTX).unwrap();
        let (mut module, mut add_one, mut add_u32) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // SAFETY: the primary context is current on this thread (main sets it); `source` is a
        // NUL-terminated PTX image; the out-pointers are valid; the names are NUL-terminated.
        unsafe {
            ok(sys::cuModuleLoadData(&mut module, source.as_ptr().cast()));
            ok(sys::cuModuleGetFunction(
                &mut add_one,
                module,
                c"add_one".as_ptr(),
            ));
            ok(sys::cuModuleGetFunction(
                &mut add_u32,
                module,
                c"add_u32".as_ptr(),
            ));
        }
        RawKernels {
            module,
            add_one,
            add_u32,
        }
    }
}

impl Drop for RawKernels {
    fn drop(&mut self) {
        // SAFETY: the module was loaded once in the primary context, which is current on the
        // main thread that drops this; every raw worker, whose graphs launched its functions,
        // synchronised its stream and was dropped before (see `RawKernels`).
        unsafe { ok(sys::cuModuleUnload(self.module)) };
    }
}

// SAFETY: the workers' threads only read the handles (to capture launches of the functions);
// a loaded module's functions may be launched from any thread with its context current, and
// only the main thread, which loaded it, unloads it (on drop, after the worker threads ended).
unsafe impl Sync for RawKernels {}

struct RawWorker {
    context: sys::CUcontext,
    stream: sys::CUstream,
    pool: sys::CUmemoryPool,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    work: sys::CUdeviceptr,
    staging_in: [*mut u32; DEPTH],
    staging_out: [*mut u32; DEPTH],
    events: [sys::CUevent; DEPTH],
    elements: u32,
}

impl RawWorker {
    fn new(shared: &Shared) -> Self {
        let bytes = shared.bytes();
        let elements = shared.elements;
        let mut worker = RawWorker {
            context: shared.context.as_cu(),
            stream: std::ptr::null_mut(),
            pool: shared.pool.as_cu(),
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            work: 0,
            staging_in: [std::ptr::null_mut(); DEPTH],
            staging_out: [std::ptr::null_mut(); DEPTH],
            events: [std::ptr::null_mut(); DEPTH],
            elements,
        };
        // SAFETY: the primary context is alive for the whole benchmark; bound to this worker's
        // thread for its life.
        unsafe { ok(sys::cuCtxSetCurrent(worker.context)) };
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        let (mut n, mut value) = (elements, ADDED);
        let grid = elements.div_ceil(BLOCK);
        // SAFETY: the primary context is current on this thread (just above); every out-pointer
        // is valid; the kernels' parameter arrays point at live locals of the right types
        // (`data` a device pointer, `value` and `n` u32), and each kernel touches `n` values of
        // `work`, which holds `elements`.
        unsafe {
            ok(sys::cuStreamCreate(
                &mut worker.stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            ));
            ok(sys::cuMemAlloc_v2(&mut worker.work, bytes));
            for slot in 0..DEPTH {
                let mut host = std::ptr::null_mut();
                ok(sys::cuMemHostAlloc(&mut host, bytes, 0));
                worker.staging_in[slot] = host.cast();
                ok(sys::cuMemHostAlloc(&mut host, bytes, 0));
                worker.staging_out[slot] = host.cast();
                ok(sys::cuEventCreate(&mut worker.events[slot], flags));
            }
            let mut data = worker.work;
            let mut one = [
                (&raw mut data).cast::<std::ffi::c_void>(),
                (&raw mut n).cast(),
            ];
            let mut add = [
                (&raw mut data).cast::<std::ffi::c_void>(),
                (&raw mut value).cast(),
                (&raw mut n).cast(),
            ];
            let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
            ok(sys::cuStreamBeginCapture_v2(worker.stream, mode));
            let launch = |function, params: *mut *mut std::ffi::c_void| {
                ok(sys::cuLaunchKernel(
                    function,
                    grid,
                    1,
                    1,
                    BLOCK,
                    1,
                    1,
                    0,
                    worker.stream,
                    params,
                    std::ptr::null_mut(),
                ))
            };
            launch(shared.raw.add_one, one.as_mut_ptr());
            launch(shared.raw.add_u32, add.as_mut_ptr());
            launch(shared.raw.add_one, one.as_mut_ptr());
            ok(sys::cuStreamEndCapture(worker.stream, &mut worker.graph));
            ok(sys::cuGraphInstantiateWithFlags(
                &mut worker.exec,
                worker.graph,
                0,
            ));
        }
        worker
    }
}

impl Worker for RawWorker {
    fn submit(&mut self, slot: usize, worker: usize, request: usize) {
        let n = self.elements as usize;
        let bytes = n * 4;
        // SAFETY: `staging_in[slot]` is a live pinned allocation of `n` u32 values; the host
        // waited for the event of the slot's previous request (`complete`), recorded after the
        // copy that read it, so no device work touches it now.
        fill(
            unsafe { std::slice::from_raw_parts_mut(self.staging_in[slot], n) },
            worker,
            request,
        );
        let (mut input, mut output) = (0, 0);
        // SAFETY: the context is current (bound in `new`, on this thread); the stream, pool, executable graph, event
        // and all buffers are alive; every copy is `bytes` long and within its buffers (all
        // hold `n` values); every use of `input`, `output` and `work` is ordered on the one
        // stream between the allocation and the free; the staging buffers are not touched by
        // the host until the event recorded after the copies has completed.
        unsafe {
            ok(sys::cuMemAllocFromPoolAsync(
                &mut input,
                bytes,
                self.pool,
                self.stream,
            ));
            ok(sys::cuMemAllocFromPoolAsync(
                &mut output,
                bytes,
                self.pool,
                self.stream,
            ));
            ok(sys::cuMemcpyHtoDAsync_v2(
                input,
                self.staging_in[slot].cast(),
                bytes,
                self.stream,
            ));
            ok(sys::cuMemcpyDtoDAsync_v2(
                self.work,
                input,
                bytes,
                self.stream,
            ));
            ok(sys::cuGraphLaunch(self.exec, self.stream));
            ok(sys::cuMemcpyDtoDAsync_v2(
                output,
                self.work,
                bytes,
                self.stream,
            ));
            ok(sys::cuMemcpyDtoHAsync_v2(
                self.staging_out[slot].cast(),
                output,
                bytes,
                self.stream,
            ));
            ok(sys::cuMemFreeAsync(input, self.stream));
            ok(sys::cuMemFreeAsync(output, self.stream));
            ok(sys::cuEventRecord(self.events[slot], self.stream));
        }
    }

    fn complete(&mut self, slot: usize, worker: usize, request: usize, whole: bool) -> bool {
        // SAFETY: the event is alive; the context is current.
        unsafe { ok(sys::cuEventSynchronize(self.events[slot])) };
        // SAFETY: the event, recorded after the copy into `staging_out[slot]`, has completed,
        // and no later work on the slot is queued before the next `submit` of this slot.
        let output =
            unsafe { std::slice::from_raw_parts(self.staging_out[slot], self.elements as usize) };
        check(output, worker, request, whole)
    }
}

impl Drop for RawWorker {
    fn drop(&mut self) {
        // SAFETY: the primary context is made current; the stream is synchronised first, so
        // nothing queued uses the graph, the buffers or the events when they are destroyed,
        // each once.
        unsafe {
            ok(sys::cuCtxSetCurrent(self.context));
            ok(sys::cuStreamSynchronize(self.stream));
            ok(sys::cuGraphExecDestroy(self.exec));
            ok(sys::cuGraphDestroy(self.graph));
            for slot in 0..DEPTH {
                ok(sys::cuEventDestroy_v2(self.events[slot]));
                ok(sys::cuMemFreeHost(self.staging_in[slot].cast()));
                ok(sys::cuMemFreeHost(self.staging_out[slot].cast()));
            }
            ok(sys::cuMemFree_v2(self.work));
            ok(sys::cuStreamDestroy_v2(self.stream));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// cudarc's safe layer.

struct CudarcKernels {
    context: Arc<CudaContext>,
    add_one: CudaFunction,
    add_u32: CudaFunction,
}

impl CudarcKernels {
    /// A `CudaContext` of its own (on the primary context) with event tracking as asked, and
    /// the kernels loaded in it.
    fn load(tracking: bool) -> Self {
        let context = CudaContext::new(0).unwrap();
        if !tracking {
            // SAFETY: this context's slices are each used on the one stream of their worker
            // (request buffers, graph buffer) and freed on it; the pinned buffers' reuse is
            // ordered by the worker's events (`CudarcWorker::complete`).
            unsafe { context.disable_event_tracking() };
        }
        let module = context
            .load_module(cudarc::nvrtc::Ptx::from_src(PTX))
            .unwrap();
        CudarcKernels {
            add_one: module.load_function("add_one").unwrap(),
            add_u32: module.load_function("add_u32").unwrap(),
            context,
        }
    }
}

struct CudarcWorker {
    stream: Arc<CudaStream>,
    graph: CudaGraph,
    work: CudaSlice<u32>,
    staging_in: [PinnedHostSlice<u32>; DEPTH],
    staging_out: [PinnedHostSlice<u32>; DEPTH],
    events: [CudaEvent; DEPTH],
    elements: usize,
}

impl CudarcWorker {
    fn new(kernels: &CudarcKernels, elements: u32) -> Self {
        let context = &kernels.context;
        context.bind_to_thread().unwrap();
        let stream = context.new_stream().unwrap();
        let tracking = context.is_event_tracking();
        // The graph buffer is used only on this worker's stream (the graph's kernels, and the
        // copies into and out of it), so it needs no events: allocated untracked even with
        // tracking on, a capture then records no event of it (an event recorded inside a
        // capture cannot be waited for outside it).
        // SAFETY: while tracking is off, only this buffer is allocated, and it is used on one
        // stream only (above); tracking is put back as it was right after.
        unsafe { context.disable_event_tracking() };
        // SAFETY: the graph's first use of the buffer is a copy into all of it (`submit`).
        let mut work = unsafe { stream.alloc::<u32>(elements as usize) }.unwrap();
        if tracking {
            // SAFETY: as above: tracking is back on for every later slice of this context.
            unsafe { context.enable_event_tracking() };
        }
        // Not write-combined (cudarc's `alloc_pinned` default): the host reads the outputs, and
        // the raw and handles-cuda variants use plain pinned memory (flags 0).
        // SAFETY: every staging buffer is written (inputs) or copied into (outputs) before it
        // is read.
        let pinned = || unsafe { context.alloc_pinned_with_flags::<u32>(elements as usize, 0) };
        let staging_in = [0; DEPTH].map(|_| pinned().unwrap());
        let staging_out = [0; DEPTH].map(|_| pinned().unwrap());
        let events = [0; DEPTH].map(|_| context.new_event(None).unwrap());
        let config = cudarc::driver::LaunchConfig {
            grid_dim: (elements.div_ceil(BLOCK), 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .unwrap();
        // SAFETY (each launch): the arguments are `add_one`'s `(data, n)` and `add_u32`'s
        // `(data, value, n)`; each touches `n` values of `work`, which holds `elements`.
        for node in 0..3 {
            if node == 1 {
                let mut builder = stream.launch_builder(&kernels.add_u32);
                builder.arg(&mut work).arg(&ADDED).arg(&elements);
                // SAFETY: see above.
                unsafe { builder.launch(config) }.unwrap();
            } else {
                let mut builder = stream.launch_builder(&kernels.add_one);
                builder.arg(&mut work).arg(&elements);
                // SAFETY: see above.
                unsafe { builder.launch(config) }.unwrap();
            }
        }
        let graph = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .unwrap()
            .expect("a captured graph");
        CudarcWorker {
            stream,
            graph,
            work,
            staging_in,
            staging_out,
            events,
            elements: elements as usize,
        }
    }
}

impl Worker for CudarcWorker {
    fn submit(&mut self, slot: usize, worker: usize, request: usize) {
        fill(
            self.staging_in[slot].as_mut_slice().unwrap(),
            worker,
            request,
        );
        // SAFETY: both buffers are written in full (the copies below) before they are read.
        let mut input = unsafe { self.stream.alloc::<u32>(self.elements) }.unwrap();
        // SAFETY: as above.
        let mut output = unsafe { self.stream.alloc::<u32>(self.elements) }.unwrap();
        self.stream
            .memcpy_htod(&self.staging_in[slot], &mut input)
            .unwrap();
        self.stream.memcpy_dtod(&input, &mut self.work).unwrap();
        self.graph.launch().unwrap();
        self.stream.memcpy_dtod(&self.work, &mut output).unwrap();
        self.stream
            .memcpy_dtoh(&output, &mut self.staging_out[slot])
            .unwrap();
        drop(input);
        drop(output);
        self.events[slot].record(&self.stream).unwrap();
    }

    fn complete(&mut self, slot: usize, worker: usize, request: usize, whole: bool) -> bool {
        self.events[slot].synchronize().unwrap();
        check(
            self.staging_out[slot].as_slice().unwrap(),
            worker,
            request,
            whole,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// handles-cuda.

struct HandlesWorker {
    stream: StreamHandle,
    pool: MemoryPoolHandle,
    exec: GraphExecHandle,
    work: DeviceBuffer<u32>,
    staging_in: [DeviceBuffer<u32>; DEPTH],
    staging_out: [DeviceBuffer<u32>; DEPTH],
    recycler: EventRecycler,
    events: [Option<RecycledEvent>; DEPTH],
    elements: usize,
    /// Whether the host reaches the staging buffers through their raw addresses (`unsafe`,
    /// ordered by the events) instead of host views.
    raw_staging: bool,
}

impl HandlesWorker {
    fn new(shared: &Shared, raw_staging: bool) -> Self {
        let context = &shared.context;
        // What a server's worker thread does: later calls find the context current.
        context.bind_to_thread().unwrap();
        let stream = StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap();
        let n = shared.elements;
        let work = DeviceBuffer::<u32>::alloc(context, n as usize).unwrap();
        let config = LaunchConfig::linear(n, BLOCK);
        let graph = GraphHandle::capture(context, CaptureMode::ThreadLocal, |capture| {
            capture.launch(&shared.add_one, &config, (work.as_bytes(), n))?;
            capture.launch(&shared.add_u32, &config, (work.as_bytes(), ADDED, n))?;
            capture.launch(&shared.add_one, &config, (work.as_bytes(), n))
        })
        .unwrap();
        let exec = graph.instantiate().unwrap();
        let pinned = || DeviceBuffer::<u32>::alloc_host(context, n as usize).unwrap();
        HandlesWorker {
            stream,
            pool: shared.pool.clone(),
            exec,
            work,
            staging_in: [0; DEPTH].map(|_| pinned()),
            staging_out: [0; DEPTH].map(|_| pinned()),
            recycler: shared.recycler.clone(),
            events: [const { None }; DEPTH],
            elements: n as usize,
            raw_staging,
        }
    }

    /// The host address of a staging buffer's values: `alloc_host`'s raw value is the host
    /// address of the pinned allocation (page-aligned, so aligned for `u32`), alive while the
    /// buffer is.
    fn host_address(buffer: &DeviceBuffer<u32>) -> *mut u32 {
        buffer.as_bytes().as_cu() as usize as *mut u32
    }
}

impl Worker for HandlesWorker {
    fn submit(&mut self, slot: usize, worker: usize, request: usize) {
        let staging_in = &self.staging_in[slot];
        if self.raw_staging {
            // SAFETY: `host_address` is the start of `len()` live, aligned u32 values; the host
            // waited for the event of the slot's previous request (`complete`), recorded after
            // the copy that read this buffer, and nothing else uses it: no device work and no
            // view (none is opened in this variant), so this slice is the only access.
            let values = unsafe {
                std::slice::from_raw_parts_mut(Self::host_address(staging_in), staging_in.len())
            };
            fill(values, worker, request);
        } else {
            fill(&mut staging_in.host_view_mut().unwrap(), worker, request);
        }
        let stream = &self.stream;
        let input =
            DeviceBuffer::<u32>::alloc_from_pool(&self.pool, self.elements, stream).unwrap();
        let output =
            DeviceBuffer::<u32>::alloc_from_pool(&self.pool, self.elements, stream).unwrap();
        staging_in.copy_to_device(&input, stream).unwrap();
        input.copy_to_device(&self.work, stream).unwrap();
        self.exec.launch(stream).unwrap();
        self.work.copy_to_device(&output, stream).unwrap();
        output
            .copy_to_device(&self.staging_out[slot], stream)
            .unwrap();
        drop(input);
        drop(output);
        let event = self.recycler.acquire().unwrap();
        event.record(stream).unwrap();
        self.events[slot] = Some(event);
    }

    fn complete(&mut self, slot: usize, worker: usize, request: usize, whole: bool) -> bool {
        let event = self.events[slot].take().expect("a request in the slot");
        event.synchronize().unwrap();
        drop(event);
        let staging_out = &self.staging_out[slot];
        if self.raw_staging {
            // SAFETY: `host_address` is the start of `len()` live, aligned u32 values; the
            // event, recorded after the copy into this buffer, has completed, and no later work
            // on it is queued before the slot's next request; no view is opened in this variant.
            let values = unsafe {
                std::slice::from_raw_parts(Self::host_address(staging_out), staging_out.len())
            };
            check(values, worker, request, whole)
        } else {
            check(&staging_out.host_view().unwrap(), worker, request, whole)
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// The variants, in table order (the first is the ratios' reference).
const VARIANTS: [&str; 5] = [
    "raw driver calls",
    "cudarc (event tracking off)",
    "cudarc (event tracking on)",
    "handles-cuda (host views of the staging buffers)",
    "handles-cuda (staging buffers through raw pointers, unsafe)",
];

/// Makes one worker of `variant`, on the calling thread.
fn make(shared: &Shared, variant: usize) -> Box<dyn Worker + '_> {
    match variant {
        0 => Box::new(RawWorker::new(shared)),
        1 => Box::new(CudarcWorker::new(&shared.untracked, shared.elements)),
        2 => Box::new(CudarcWorker::new(&shared.tracked, shared.elements)),
        3 => Box::new(HandlesWorker::new(shared, false)),
        _ => Box::new(HandlesWorker::new(shared, true)),
    }
}

/// What `main` was asked to do.
#[derive(Clone, Copy)]
enum Mode {
    /// The measurement.
    Full,
    /// A few requests per variant, to check the program.
    Quick,
    /// `--count VARIANT N`: `N` requests of one worker of `VARIANT` on the main thread, for
    /// `scripts/count-instructions.sh` (instructions per request: the difference between two
    /// values of `N`, over the difference of `N`).
    Count(usize, usize),
}

const USAGE: &str = "usage: serving [--quick | --count VARIANT N]   (VARIANT 0-4: raw, cudarc \
                     untracked, cudarc tracked, handles-cuda views, handles-cuda raw staging)";

fn mode() -> Mode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args[..] {
        [] => Mode::Full,
        ["--quick"] => Mode::Quick,
        ["--count", variant, n] => match (variant.parse(), n.parse()) {
            (Ok(variant), Ok(n)) if variant < VARIANTS.len() => Mode::Count(variant, n),
            _ => usage(),
        },
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(2);
}

fn main() {
    let mode = mode();
    let quick = matches!(mode, Mode::Quick);
    let plan = match mode {
        Mode::Full => FULL,
        Mode::Quick => QUICK,
        // Small requests: the simulated kernels' cost is the same for every variant, and
        // only the API's own instructions are compared.
        Mode::Count(..) => COUNT,
    };
    // A failed check (or any failure) on a worker thread ends the process: the main thread
    // would otherwise wait for that worker's results forever.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
    if let Err(error) = handles_cuda::driver::ensure_loaded() {
        println!("serving needs a CUDA driver: {error}");
        return;
    }
    let context = ContextHandle::primary(0).unwrap();
    // The raw calls below assume a current context, as cudarc's do.
    // SAFETY: the primary context is alive while `context` is.
    unsafe { ok(sys::cuCtxSetCurrent(context.as_cu())) };
    // Every variant allocates from the device's default pool (cudarc's `alloc` uses the
    // device's current pool, which is it). Keep what it frees for reuse instead of releasing
    // it to the system at each synchronisation (a release threshold of 0, the default).
    let pool = MemoryPoolHandle::device_default(0).unwrap();
    pool.set_release_threshold(u64::MAX).unwrap();
    let (add_one, add_u32) = handles_kernels();
    let shared = Shared {
        elements: plan.elements,
        recycler: EventRecycler::new(&context, EventFlags::default()).unwrap(),
        context,
        pool,
        add_one,
        add_u32,
        raw: RawKernels::load(),
        untracked: CudarcKernels::load(false),
        tracked: CudarcKernels::load(true),
    };
    if let Mode::Count(variant, requests) = mode {
        let mut worker = make(&shared, variant);
        let served = serve(worker.as_mut(), 0, requests, usize::MAX);
        assert_eq!(served.latencies.len(), requests);
        drop(worker);
        handles_cuda::exec::clear_recycled_events();
        return;
    }
    println!(
        "serving: {} values (u32) per request, {} requests in flight per worker, {} rounds{}",
        plan.elements,
        DEPTH,
        plan.rounds,
        if quick { " (--quick)" } else { "" }
    );
    if quick {
        println!("--quick checks correctness: its timings (on the simulator, say) mean nothing");
    }
    println!();
    println!(
        "| threads | variant | requests/s | p50 latency (µs) | p99 latency (µs) | requests/s ratio to raw | outputs checked whole |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (threads, requests) in plan.threads {
        let mut runs: Vec<Vec<Run>> = (0..VARIANTS.len()).map(|_| Vec::new()).collect();
        for round in 0..plan.rounds {
            // Fresh workers every round (streams, staging buffers, graphs): a worker's rate
            // depends on the resources it was given as well as on its code (kept for a whole
            // run, one variant's one-thread rate sat near 32k or 37k requests/s from run to
            // run, the raw calls' too), so every variant draws its resources anew each round.
            std::thread::scope(|scope| {
                let crews: Vec<Crew> = (0..VARIANTS.len())
                    .map(|variant| Crew::start(scope, threads, plan.check_every, &shared, variant))
                    .collect();
                // One short untimed run of each variant first (warm pools, caches, graph
                // uploads).
                if !quick {
                    for crew in &crews {
                        crew.run(requests.div_ceil(4));
                    }
                }
                // Rotate the starting variant each round so no variant always runs first.
                for offset in 0..VARIANTS.len() {
                    let variant = (round + offset) % VARIANTS.len();
                    runs[variant].push(crews[variant].run(requests));
                }
                crews.into_iter().for_each(Crew::stop);
            });
        }
        let medians: Vec<[f64; 3]> = runs
            .iter()
            .map(|runs| {
                let of = |field: fn(&Run) -> f64| median(runs.iter().map(field).collect());
                [of(|r| r.per_second), of(|r| r.p50), of(|r| r.p99)]
            })
            .collect();
        for (variant, name) in VARIANTS.iter().enumerate() {
            let [per_second, p50, p99] = medians[variant];
            let checked: usize = runs[variant].iter().map(|r| r.checked).sum();
            assert!(checked > 0, "{name}: no output was checked");
            println!(
                "| {threads} | {name} | {per_second:.0} | {:.1} | {:.1} | {:.3} | {checked} |",
                p50 / 1e3,
                p99 / 1e3,
                per_second / medians[0][0],
            );
        }
    }
    println!();
    println!("serving: done, every checked output correct");
}
