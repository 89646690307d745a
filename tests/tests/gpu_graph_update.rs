//! Graph-owned memory (allocation and free nodes), per-node updates of executable graphs
//! (kernel arguments, memset and copy parameters, enable/disable) and fork/join captures, on a
//! GPU; `on_the_simulator` runs them all again on the simulated driver, strictly, whose checker
//! reports any use of freed memory. None of them returns early.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use handles_cuda::driver::sys;
use handles_cuda::graph::{CaptureMode, GraphHandle};
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, GraphRule, LaunchConfig, MemoryPoolHandle, PoolProps,
    StreamHandle,
};
use handles_tests::kernels::{TestKernels, read_words};
use handles_tests::{Failures, serial, stream};

mod simulator;

macro_rules! refused {
    ($result:expr, $pattern:pat) => {
        match $result {
            Err($pattern) => {}
            other => panic!("expected {}, got {other:?}", stringify!($pattern)),
        }
    };
}

const N: u32 = 256;
const BYTES: usize = N as usize * 4;

fn config() -> LaunchConfig {
    LaunchConfig::linear(N, 64)
}

/// A buffer of `N` words, all `value`, from `pool`.
fn filled(
    pool: &MemoryPoolHandle,
    kernels: &TestKernels,
    stream: &StreamHandle,
    value: u32,
) -> DevicePtrHandle {
    let buffer = DevicePtrHandle::alloc_from_pool(pool, BYTES, stream).unwrap();
    kernels
        .fill
        .launch(stream, &config(), (&buffer, value, N))
        .unwrap();
    buffer
}

/// Opens the gate when dropped, so a host node waiting for it never hangs a failing test.
struct Gate(Arc<AtomicBool>);

impl Drop for Gate {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_owned_memory_is_used_across_100_replays() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let out = DevicePtrHandle::alloc(&context, BYTES).unwrap();
    let count = DevicePtrHandle::alloc(&context, 4).unwrap();
    count.memset_async(0, 4, &stream).unwrap();

    let graph = GraphHandle::create(&context).unwrap();
    let (allocated, scratch) = graph.add_mem_alloc_node(&[], BYTES).unwrap();
    let fill = graph
        .add_kernel_node(&[allocated], &kernels.fill, &config(), (&scratch, 7, N))
        .unwrap();
    let add = graph
        .add_kernel_node(&[fill], &kernels.add, &config(), (&scratch, 3, N))
        .unwrap();
    let copied = graph
        .add_copy_node(&[add], &scratch, 0, &out, 0, BYTES)
        .unwrap();
    let counted = graph
        .add_kernel_node(
            &[copied],
            &kernels.add_one,
            &LaunchConfig::linear(1, 1),
            (&count, 1),
        )
        .unwrap();
    graph.add_mem_free_node(&[copied], &scratch).unwrap();
    assert!(graph.has_memory_nodes());
    // Graph-owned memory is not an attachment: kernels (3), out, count.
    assert_eq!(graph.attachment_count(), 5);
    let _ = counted;

    let exec = graph.instantiate().unwrap();
    for replay in 0..100 {
        if replay % 10 == 0 {
            out.memset_async(0, BYTES, &stream).unwrap();
        }
        exec.launch(&stream).unwrap();
        if replay % 10 == 0 {
            assert_eq!(
                read_words(&out, &stream),
                vec![10; N as usize],
                "replay {replay}"
            );
        }
    }
    assert_eq!(read_words(&out, &stream), vec![10; N as usize]);
    assert_eq!(read_words(&count, &stream), vec![100]);

    // Outside its graph the memory is refused: on a stream, in a direct launch, in a capture.
    refused!(
        scratch.memset_async(0, BYTES, &stream),
        Error::GraphRule(GraphRule::OutsideGraph)
    );
    refused!(
        kernels.fill.launch(&stream, &config(), (&scratch, 1, N)),
        Error::GraphRule(GraphRule::OutsideGraph)
    );
    let view = scratch.view(0, 16).unwrap();
    refused!(
        view.copy_to_async(0, &out, 0, 16, &stream),
        Error::GraphRule(GraphRule::OutsideGraph)
    );
    refused!(
        GraphHandle::capture(&context, CaptureMode::Global, |capture| {
            capture.memset(&scratch, 0, 0, BYTES)
        })
        .map(drop),
        Error::GraphRule(GraphRule::OutsideGraph)
    );
    drop((graph, scratch, view));
    stream.synchronize().unwrap();
    drop(exec);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn kernel_node_arguments_update_and_the_old_buffer_outlives_a_queued_replay() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let other = handles_tests::stream(&context);
    let kernels = TestKernels::load().unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let seed = filled(&pool, &kernels, &stream, 4);
    let first_src = filled(&pool, &kernels, &stream, 5);
    let second_src = filled(&pool, &kernels, &stream, 6);
    let out = DevicePtrHandle::alloc_from_pool(&pool, BYTES, &stream).unwrap();
    stream.synchronize().unwrap();

    let open = Arc::new(AtomicBool::new(false));
    let gate = Gate(open.clone());
    let graph = GraphHandle::create(&context).unwrap();
    let waiting = graph
        .add_host_node(&[], move || {
            let start = Instant::now();
            while !open.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    let copy = graph
        .add_kernel_node(&[waiting], &kernels.copy, &config(), (&out, &seed, N))
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    // The executable graph keeps its source graph (whose nodes name its nodes), and so `seed`:
    // the first update gives the node `first_src`, which then only the node keeps.
    exec.set_kernel_node_params(copy, &kernels.copy, &config(), (&out, &first_src, N))
        .unwrap();
    // The first replay waits behind the host node: queued, not run, on another stream than
    // the one the old source is freed on.
    exec.launch(&other).unwrap();
    exec.set_kernel_node_params(copy, &kernels.copy, &config(), (&out, &second_src, N))
        .unwrap();
    // The user's last handle of the old source goes now: its free (on `stream`, where it was
    // allocated) must wait for the replay queued on `other`. Memory allocated and overwritten
    // on `stream` meanwhile, which the pool may take from that free, must not take its place.
    drop(first_src);
    let intruder = DevicePtrHandle::alloc_from_pool(&pool, BYTES, &stream).unwrap();
    intruder.memset_async(0xee, BYTES, &stream).unwrap();
    drop(gate);
    assert_eq!(read_words(&out, &other), vec![5; N as usize]);
    exec.launch(&other).unwrap();
    assert_eq!(read_words(&out, &other), vec![6; N as usize]);
    // The node keeps the kernel and its two buffers; the old source was released.
    assert_eq!(
        exec.attachment_count(),
        4,
        "host node, kernel, out, second source"
    );
    drop(seed);

    // A node of another graph names no node of this executable graph.
    let stranger = GraphHandle::create(&context).unwrap();
    let foreign = stranger.add_empty_node(&[]).unwrap();
    refused!(
        exec.set_kernel_node_params(foreign, &kernels.copy, &config(), (&out, &second_src, N)),
        Error::ForeignNode { .. }
    );
    // Nor does a node its graph got after the instantiation (the executable graph keeps the
    // graph, so the test reaches it through a second graph built the same way).
    let later_graph = GraphHandle::create(&context).unwrap();
    let first = later_graph.add_empty_node(&[]).unwrap();
    let later_exec = later_graph.instantiate().unwrap();
    let later = later_graph.add_empty_node(&[first]).unwrap();
    refused!(
        later_exec.set_node_enabled(later, false),
        Error::GraphRule(GraphRule::NotInstantiated)
    );
    drop((later_exec, later_graph));
    // The bounds check runs as for a new node, and a refused update changes nothing.
    let small = DevicePtrHandle::alloc_from_pool(&pool, 16, &stream).unwrap();
    assert!(
        exec.set_kernel_node_params(copy, &kernels.copy, &config(), (&out, &small, N))
            .is_err()
    );
    exec.launch(&stream).unwrap();
    assert_eq!(read_words(&out, &stream), vec![6; N as usize]);
    other.synchronize().unwrap();
    drop((exec, intruder));
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn memset_and_copy_nodes_update_and_nodes_turn_off_and_on() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let (first, second) = (
        DevicePtrHandle::alloc_from_pool(&pool, BYTES, &stream).unwrap(),
        DevicePtrHandle::alloc_from_pool(&pool, BYTES, &stream).unwrap(),
    );
    let (out, other_out) = (
        DevicePtrHandle::alloc_from_pool(&pool, BYTES, &stream).unwrap(),
        DevicePtrHandle::alloc_from_pool(&pool, BYTES, &stream).unwrap(),
    );
    let graph = GraphHandle::create(&context).unwrap();
    let set = graph.add_memset_node(&[], &first, 0, 0x01, BYTES).unwrap();
    let add = graph
        .add_kernel_node(&[set], &kernels.add, &config(), (&first, 1, N))
        .unwrap();
    let copy = graph
        .add_copy_node(&[add], &first, 0, &out, 0, BYTES)
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    exec.launch(&stream).unwrap();
    assert_eq!(read_words(&out, &stream), vec![0x0101_0102; N as usize]);

    exec.set_memset_node_params(set, &second, 0, 0x02, BYTES)
        .unwrap();
    exec.set_copy_node_params(copy, &second, 0, &other_out, 0, BYTES)
        .unwrap();
    exec.launch(&stream).unwrap();
    // The kernel still adds to `first` (0x01010102 + 1); the copy now takes `second`.
    assert_eq!(
        read_words(&other_out, &stream),
        vec![0x0202_0202; N as usize]
    );
    assert_eq!(read_words(&first, &stream), vec![0x0101_0103; N as usize]);
    // Ranges are checked as for new nodes.
    refused!(
        exec.set_memset_node_params(set, &second, 8, 0, BYTES),
        Error::OutOfRange { .. }
    );

    // Off, the kernel does not run; on again, it does.
    assert!(exec.node_enabled(add).unwrap());
    exec.set_node_enabled(add, false).unwrap();
    assert!(!exec.node_enabled(add).unwrap());
    first.memset_async(0, BYTES, &stream).unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(read_words(&first, &stream), vec![0; N as usize]);
    exec.set_node_enabled(add, true).unwrap();
    assert!(exec.node_enabled(add).unwrap());
    exec.launch(&stream).unwrap();
    assert_eq!(read_words(&first, &stream), vec![1; N as usize]);
    // Old buffers dropped by the user stay with the executable graph while it needs them.
    drop((first, second));
    exec.launch(&stream).unwrap();
    assert_eq!(
        read_words(&other_out, &stream),
        vec![0x0202_0202; N as usize]
    );
    drop(exec);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_fork_join_capture_runs_both_branches_before_the_join() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let [a, b, c, d] = [0; 4].map(|_| DevicePtrHandle::alloc(&context, BYTES).unwrap());
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        capture.memset(&c, 0, 0, BYTES)?;
        let branch = capture.fork()?;
        branch.launch(&kernels.fill, &config(), (&b, 2, N))?;
        branch.launch(&kernels.add, &config(), (&b, 40, N))?;
        capture.launch(&kernels.fill, &config(), (&a, 1, N))?;
        capture.join(branch)?;
        // After the join: both branches' work is done.
        capture.copy(&b, 0, &c, 0, BYTES)?;
        capture.launch(&kernels.add, &config(), (&c, 0, N))?;
        // A branch never joined is joined when the capture ends.
        let late = capture.fork()?;
        late.launch(&kernels.fill, &config(), (&d, 9, N))
    })
    .unwrap();
    drop(kernels);
    let exec = graph.instantiate().unwrap();
    drop(graph);
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    assert_eq!(read_words(&a, &stream), vec![1; N as usize]);
    assert_eq!(read_words(&b, &stream), vec![42; N as usize]);
    assert_eq!(read_words(&c, &stream), vec![42; N as usize]);
    assert_eq!(read_words(&d, &stream), vec![9; N as usize]);

    // A panic inside the closure, with a branch open, still ends the capture and both streams.
    let kernels = TestKernels::load().unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        GraphHandle::capture(&context, CaptureMode::Global, |capture| {
            let branch = capture.fork()?;
            branch.launch(&kernels.fill, &config(), (&a, 3, N))?;
            panic!("a capture closure panicked on purpose")
        })
    }));
    assert!(panicked.is_err());
    // The streams are usable afterwards, and a new capture works.
    a.memset_async(0, BYTES, &stream).unwrap();
    let again = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        capture.launch(&kernels.fill, &config(), (&a, 4, N))
    })
    .unwrap();
    again.instantiate().unwrap().launch(&stream).unwrap();
    assert_eq!(read_words(&a, &stream), vec![4; N as usize]);
    drop(exec);
    failures.assert_none();
}

/// A raw driver status.
fn status(call: sys::CUresult) -> sys::CUresult {
    call
}

/// What the driver itself answers for graphs with memory nodes, through raw calls: printed,
/// and the rules this crate enforces asserted (`graph::memory_nodes`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn driver_rules_of_memory_nodes() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let raw_stream = stream.as_cu();
    // The raw calls run with the context current.
    context.run(|| -> handles_cuda::Result<()> {
        // SAFETY: raw driver calls on objects made here, with valid out-pointers; every
        // object is destroyed at the end.
    unsafe {
        let mut graph = std::ptr::null_mut();
        assert_eq!(sys::cuGraphCreate(&mut graph, 0), sys::CUresult::CUDA_SUCCESS);
        let mut props: sys::CUmemPoolProps = std::mem::zeroed();
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        let mut params = sys::CUDA_MEM_ALLOC_NODE_PARAMS {
            poolProps: props,
            accessDescs: std::ptr::null(),
            accessDescCount: 0,
            bytesize: 1 << 20,
            dptr: 0,
        };
        let mut alloc = std::ptr::null_mut();
        let added = status(sys::cuGraphAddMemAllocNode(
            &mut alloc,
            graph,
            std::ptr::null(),
            0,
            &mut params,
        ));
        println!("driver rule: add an allocation node -> {added:?}, address {:#x}", params.dptr);
        assert_eq!(added, sys::CUresult::CUDA_SUCCESS);
        // Not freed in the graph: the memory outlives the launch.
        let mut exec = std::ptr::null_mut();
        let first = status(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
        println!("driver rule: instantiate (no free node) -> {first:?}");
        assert_eq!(first, sys::CUresult::CUDA_SUCCESS);
        let mut second_exec = std::ptr::null_mut();
        let second = status(sys::cuGraphInstantiateWithFlags(&mut second_exec, graph, 0));
        println!("driver rule: a second instantiation while the first lives -> {second:?}");
        assert_ne!(second, sys::CUresult::CUDA_SUCCESS);
        let launched = status(sys::cuGraphLaunch(exec, raw_stream));
        println!("driver rule: first launch -> {launched:?}");
        assert_eq!(launched, sys::CUresult::CUDA_SUCCESS);
        let relaunched = status(sys::cuGraphLaunch(exec, raw_stream));
        println!("driver rule: a launch while the previous launch's allocation is live -> {relaunched:?}");
        assert_ne!(relaunched, sys::CUresult::CUDA_SUCCESS);
        let enabled = status(sys::cuGraphNodeSetEnabled(exec, alloc, 0));
        println!("driver rule: turning an allocation node off -> {enabled:?}");
        assert_ne!(enabled, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuStreamSynchronize(raw_stream), sys::CUresult::CUDA_SUCCESS);
        // The memory left live by the launch is freed outside the graph.
        assert_eq!(sys::cuMemFreeAsync(params.dptr, raw_stream), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuStreamSynchronize(raw_stream), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuGraphExecDestroy(exec), sys::CUresult::CUDA_SUCCESS);
        // With the first gone, a new instantiation works.
        let third = status(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
        println!("driver rule: instantiate again after the first was destroyed -> {third:?}");
        assert_eq!(third, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuGraphExecDestroy(exec), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuGraphDestroy(graph), sys::CUresult::CUDA_SUCCESS);
    }
    Ok(())
    })
    .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn memory_node_rules_are_typed_errors() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let second_stream = handles_tests::stream(&context);
    let kernels = TestKernels::load().unwrap();
    let count = DevicePtrHandle::alloc(&context, 4).unwrap();
    count.memset_async(0, 4, &stream).unwrap();

    let graph = GraphHandle::create(&context).unwrap();
    let (allocated, scratch) = graph.add_mem_alloc_node(&[], BYTES).unwrap();
    let unrelated = graph.add_empty_node(&[]).unwrap();
    // A user must depend on the allocation node.
    refused!(
        graph.add_kernel_node(&[unrelated], &kernels.fill, &config(), (&scratch, 1, N)),
        Error::GraphRule(GraphRule::BeforeAlloc)
    );
    refused!(
        graph.add_memset_node(&[], &scratch, 0, 0, BYTES),
        Error::GraphRule(GraphRule::BeforeAlloc)
    );
    let joined = graph.add_empty_node(&[allocated, unrelated]).unwrap();
    let user = graph
        .add_kernel_node(&[joined], &kernels.fill, &config(), (&scratch, 1, N))
        .unwrap();
    let counted = graph
        .add_kernel_node(
            &[user],
            &kernels.add_one,
            &LaunchConfig::linear(1, 1),
            (&count, 1),
        )
        .unwrap();
    // Another graph cannot use it.
    let other = GraphHandle::create(&context).unwrap();
    refused!(
        other.add_memset_node(&[], &scratch, 0, 0, BYTES),
        Error::GraphRule(GraphRule::OtherGraph { .. })
    );
    refused!(
        other.add_mem_free_node(&[], &scratch),
        Error::GraphRule(GraphRule::OtherGraph { .. })
    );
    // Not instantiable before it is freed.
    refused!(
        graph.instantiate().map(drop),
        Error::GraphRule(GraphRule::NotFreed)
    );
    // The free must depend on every user; a view is not the allocation.
    refused!(
        graph.add_mem_free_node(&[allocated], &scratch),
        Error::GraphRule(GraphRule::FreeBeforeUse)
    );
    refused!(
        graph.add_mem_free_node(&[user], &scratch.view(0, 16).unwrap()),
        Error::GraphRule(GraphRule::BadFree)
    );
    refused!(
        graph.add_mem_free_node(&[], &count),
        Error::GraphRule(GraphRule::OutsideGraph)
    );
    let freed = graph.add_mem_free_node(&[user], &scratch).unwrap();
    refused!(
        graph.add_mem_free_node(&[freed], &scratch),
        Error::GraphRule(GraphRule::BadFree)
    );
    // No use after the free.
    refused!(
        graph.add_memset_node(&[freed], &scratch, 0, 0, BYTES),
        Error::GraphRule(GraphRule::AfterFree)
    );

    let exec = graph.instantiate().unwrap();
    // One executable graph at a time (the driver's rule, checked before the driver).
    refused!(
        graph.instantiate().map(drop),
        Error::GraphRule(GraphRule::SecondInstance)
    );
    // No whole-graph update of, or from, a graph with memory nodes.
    let plain = GraphHandle::create(&context).unwrap();
    plain.add_empty_node(&[]).unwrap();
    let plain_exec = plain.instantiate().unwrap();
    refused!(
        exec.update(&graph),
        Error::GraphRule(GraphRule::UpdateWithMemory)
    );
    refused!(
        plain_exec.update(&graph),
        Error::GraphRule(GraphRule::UpdateWithMemory)
    );
    // A node update may pass only the graph-owned memory the node used.
    exec.set_kernel_node_params(user, &kernels.fill, &config(), (&scratch, 2, N))
        .unwrap();
    refused!(
        exec.set_kernel_node_params(
            counted,
            &kernels.add_one,
            &LaunchConfig::linear(1, 1),
            (&scratch, 1)
        ),
        Error::GraphRule(GraphRule::NewGraphMemory)
    );
    // Launches of the one executable graph on two streams: the driver orders them.
    for i in 0..20 {
        let on = if i % 2 == 0 { &stream } else { &second_stream };
        exec.launch(on).unwrap();
    }
    second_stream.synchronize().unwrap();
    assert_eq!(read_words(&count, &stream), vec![20]);
    drop(exec);
    // Once the executable graph is gone, the graph instantiates again.
    let again = graph.instantiate().unwrap();
    again.launch(&stream).unwrap();
    assert_eq!(read_words(&count, &stream), vec![21]);
    drop((again, plain_exec));
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_graph_update",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
