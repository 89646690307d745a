//! Reproducers of the third outside review (issue 37): safe programs that reached undefined
//! behaviour, an abort, a stall or a silent leak, each fixed at the home of its rule. Each runs
//! as a child process on the strict simulator (any violation aborts it) and must finish clean,
//! with no leak; each failed before its fix (RELIABILITY.md names the fix).

mod simulator;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::{Duration, Instant};

use cudarc::driver::CudaContext;
use handles_cuda::code::{OccupancyFlags, SharedPerBlock};
use handles_cuda::exec::{EventFlags, GreenContextHandle, flush_disposals};
use handles_cuda::graph::{ConditionalKind, GraphHandle, MAX_SWITCH_BODIES};
use handles_cuda::memory::PoolLocation;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, GraphRule, KernelHandle, LaunchConfig,
    LibraryHandle, MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
};
use handles_tests::Failures;
use handles_tests::kernels::{PTX, TestKernels};
use simulator::{in_scenario, strict_clean};

/// Runs `scenario_{name}` in a child on the strict simulator and expects a clean report.
fn non_blocking(context: &ContextHandle) -> StreamHandle {
    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
}

// ---------------------------------------------------------------------------------------------
// F5: a callback that this crate runs in another context cannot change the thread's binding.

#[test]
fn f5_an_occupancy_callback_cannot_unbind_a_bound_green_context() {
    strict_clean(
        "f5_an_occupancy_callback_cannot_unbind_a_bound_green_context",
        "1",
    );
}

/// What the shared-memory function saw when it tried to unbind the thread's context.
static UNBIND_INSIDE: Mutex<Option<String>> = Mutex::new(None);

fn unbinding(_block: u32) -> usize {
    let result = ContextHandle::unbind_thread();
    *UNBIND_INSIDE.lock().unwrap() = Some(format!("{result:?}"));
    0
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_f5_an_occupancy_callback_cannot_unbind_a_bound_green_context() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let primary = ContextHandle::primary(0).unwrap();
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let raw_green = green_context.as_cu();
    green_context.bind_to_thread().unwrap();
    // The thread's binding is now the only owner of the green context.
    drop((green_context, green));
    let size = kernels
        .fill
        .kernel()
        .potential_block_size(
            &primary,
            SharedPerBlock::PerBlock(unbinding),
            0,
            OccupancyFlags::default(),
        )
        .unwrap();
    assert!(size.block > 0);
    let seen = UNBIND_INSIDE.lock().unwrap().take().unwrap();
    assert!(seen.contains("WrongContext"), "unbinding inside: {seen}");
    // The green context is still bound and current, and alive: work in it runs.
    let current = ContextHandle::current().unwrap().unwrap();
    assert_eq!(current.as_cu(), raw_green);
    let stream = non_blocking(&current);
    stream.synchronize().unwrap();
    drop((stream, current));
    ContextHandle::unbind_thread().unwrap();
    assert!(ContextHandle::current().unwrap().is_none());
}

// ---------------------------------------------------------------------------------------------
// F8: a host function's panic payload is not dropped on the driver's callback thread.

#[test]
fn f8_a_host_function_panicking_with_a_handle_frees_it_off_the_callback() {
    strict_clean(
        "f8_a_host_function_panicking_with_a_handle_frees_it_off_the_callback",
        "1",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_f8_a_host_function_panicking_with_a_handle_frees_it_off_the_callback() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    // A stream-ordered allocation: its deleter queues `cuMemFreeAsync`, which a host function
    // must not call.
    let mut payload = Some(DevicePtrHandle::alloc_async(4096, &stream).unwrap());
    stream
        .launch_host(move || {
            if let Some(buffer) = payload.take() {
                std::panic::panic_any(buffer);
            }
        })
        .unwrap();
    // A graph host node does the same at its launch.
    let graph = GraphHandle::create(&context).unwrap();
    let node_payload = Mutex::new(Some(DevicePtrHandle::alloc_async(4096, &stream).unwrap()));
    graph
        .add_host_node(&[], move || {
            let taken = node_payload.lock().unwrap().take();
            if let Some(buffer) = taken {
                std::panic::panic_any(buffer);
            }
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert!(flush_disposals(Duration::from_secs(10)));
    let seen = failures.seen();
    assert_eq!(
        seen.iter().filter(|line| line.contains("panicked")).count(),
        2,
        "both panics reported: {seen:?}"
    );
    drop((exec, graph, stream));
}

// ---------------------------------------------------------------------------------------------
// F9: calls in "the current context" resolve it to a handle first.

#[test]
fn f9_kernel_queries_in_a_released_current_context_are_refused() {
    strict_clean(
        "f9_kernel_queries_in_a_released_current_context_are_refused",
        "2",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_f9_kernel_queries_in_a_released_current_context_are_refused() {
    in_scenario();
    // Device 1's memory and its primary context, retained by this crate's handles; device 0's
    // primary context is retained by no one here.
    let context1 = ContextHandle::primary(1).unwrap();
    let stream1 = non_blocking(&context1);
    let buffer = handles_cuda::DeviceBuffer::<f32>::zeroed(64 * 64, &stream1).unwrap();
    let library = LibraryHandle::load_ptx(PTX).unwrap();
    let unbound = std::thread::spawn(move || {
        // cudarc retains and binds device 0's primary context, and on drop releases it (it is
        // destroyed) but leaves it current on this thread.
        drop(CudaContext::new(0).unwrap());
        let kernel = KernelHandle::get(&library, "fill_u32");
        assert!(
            matches!(kernel, Err(Error::WrongContext { .. })),
            "a kernel resolved in a released context: {kernel:?}"
        );
        let description = handles_cuda::code::TiledTensor::matrix(64, 64, 4, 16, 16);
        let map = handles_cuda::code::TensorMap::tiled(&buffer, &description);
        assert!(
            matches!(map, Err(Error::WrongContext { .. })),
            "a tensor map encoded in a released context: {:?}",
            map.err()
        );
        // SAFETY: making no context current is always allowed.
        let status = unsafe { handles_cuda::driver::sys::cuCtxSetCurrent(std::ptr::null_mut()) };
        assert_eq!(status, handles_cuda::driver::sys::CUresult::CUDA_SUCCESS);
        // With no context current, both work (in a primary context they retain).
        KernelHandle::get(&library, "fill_u32").unwrap();
        handles_cuda::code::TensorMap::tiled(&buffer, &description).unwrap();
        handles_cuda::exec::clear_primary_cache();
    });
    unbound.join().unwrap();
    drop((stream1, context1));
}

// ---------------------------------------------------------------------------------------------
// F10: what the disposal thread holds is dropped before the process exits.

#[test]
fn f10_captures_queued_for_disposal_are_dropped_before_exit() {
    strict_clean(
        "f10_captures_queued_for_disposal_are_dropped_before_exit",
        "1",
    );
}

/// Holds handles (only to drop them) and lets go of them slowly, so that the process would
/// exit first.
struct SlowDrop(
    #[allow(dead_code)] Vec<DevicePtrHandle>,
    #[allow(dead_code)] Option<StreamHandle>,
);

impl Drop for SlowDrop {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_f10_captures_queued_for_disposal_are_dropped_before_exit() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let other = non_blocking(&context);
    let held = SlowDrop(
        vec![DevicePtrHandle::alloc(&context, 256).unwrap()],
        Some(other),
    );
    stream
        .launch_host(move || {
            let _keep = &held;
        })
        .unwrap();
    stream.synchronize().unwrap();
    drop((stream, context));
    // A thread that exits with a green context bound: its binding goes to the disposal thread.
    std::thread::spawn(|| {
        let green = GreenContextHandle::create(0, 16).unwrap();
        green.context().unwrap().bind_to_thread().unwrap();
    })
    .join()
    .unwrap();
    // The test returns and the process exits at once: the simulator's leak check at exit
    // must find the allocation, the streams and the green context released.
    handles_cuda::exec::clear_primary_cache();
}

// ---------------------------------------------------------------------------------------------
// F6: a completion never waits behind an unrelated pending one.

#[test]
fn f6_a_completion_is_not_held_back_by_busy_notifiers() {
    strict_clean("f6_a_completion_is_not_held_back_by_busy_notifiers", "1");
}

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `future` until it resolves or `patience` passes; whether it resolved.
fn resolves_within<F: Future>(future: F, patience: Duration) -> bool {
    let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
    let mut task = TaskContext::from_waker(&waker);
    let mut future = pin!(future);
    let start = Instant::now();
    while start.elapsed() < patience {
        if future.as_mut().poll(&mut task).is_ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_f6_a_completion_is_not_held_back_by_busy_notifiers() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let held = non_blocking(&context);
    let open = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&open);
    held.launch_host(move || {
        while !seen.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_micros(100));
        }
    })
    .unwrap();
    // More pending completions than a context keeps notifiers, all held back by the gate.
    let mut pending: Vec<_> = (0..handles_cuda::exec::NOTIFIERS_PER_CONTEXT + 1)
        .map(|_| {
            let event = EventHandle::create(&context, EventFlags::default()).unwrap();
            event.record(&held).unwrap();
            Box::pin(event.completed().unwrap())
        })
        .collect();
    // They are held back indeed.
    assert!(!resolves_within(
        pending[0].as_mut(),
        Duration::from_millis(50)
    ));
    // An unrelated event on another stream, held by a gate of its own until its completion
    // was asked for (so that a notifier is needed), then let go: its completion resolves while
    // the others are pending (it waited behind one of them before the fix).
    let free = non_blocking(&context);
    let go = Arc::new(AtomicBool::new(false));
    let seen_go = Arc::clone(&go);
    free.launch_host(move || {
        while !seen_go.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_micros(100));
        }
    })
    .unwrap();
    let buffer = DevicePtrHandle::alloc(&context, 1024).unwrap();
    buffer.memset_async(7, 1024, &free).unwrap();
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    event.record(&free).unwrap();
    let completion = event.completed().unwrap();
    go.store(true, Ordering::SeqCst);
    let resolved = resolves_within(completion, Duration::from_secs(10));
    open.store(true, Ordering::SeqCst);
    assert!(
        resolved,
        "an unrelated pending completion held this one back"
    );
    for completion in pending {
        assert!(resolves_within(completion, Duration::from_secs(20)));
    }
    held.synchronize().unwrap();
    drop((event, buffer, free, held));
    handles_cuda::exec::clear_notifiers();
}

// ---------------------------------------------------------------------------------------------
// F7 and F12: conditional nodes that nothing defines, and absurd switch sizes.

#[test]
fn f7_f12_undefined_conditions_and_absurd_switches_are_refused() {
    strict_clean(
        "f7_f12_undefined_conditions_and_absurd_switches_are_refused",
        "1",
    );
}

/// `set_from(handle, selector)`: sets the condition to `selector[0]`.
fn set_from_kernel()
-> handles_cuda::code::TypedKernel<(handles_cuda::graph::Conditional, handles_cuda::code::Buffer)> {
    let library = handles_tests::conditional_kernels::load().unwrap();
    let kernel = KernelHandle::get(&library, "set_from").unwrap();
    // SAFETY: set_from reads the first word of its buffer only, which the check requires.
    unsafe {
        kernel.typed(
            |(_, selector): &(&handles_cuda::graph::ConditionalHandle, &DevicePtrHandle), _| {
                if selector.size() >= 4 {
                    Ok(())
                } else {
                    Err(Error::InvalidArgument("the selector holds no word".into()))
                }
            },
        )
    }
    .unwrap()
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_f7_f12_undefined_conditions_and_absurd_switches_are_refused() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    // No default, and no kernel node takes the handle: every launch would read an undefined
    // condition, and a while node might loop forever.
    let graph = GraphHandle::create(&context).unwrap();
    let handle = graph.create_conditional(None).unwrap();
    let looped = graph
        .add_conditional_node(&[], &handle, ConditionalKind::While)
        .unwrap();
    looped.bodies[0].add_empty_node(&[]).unwrap();
    match graph.instantiate() {
        Err(Error::GraphRule(GraphRule::UndefinedCondition)) => {}
        other => panic!("expected UndefinedCondition, got {:?}", other.err()),
    }
    // A whole-graph update from such a graph is refused too.
    let plain = GraphHandle::create(&context).unwrap();
    let exec = plain.instantiate().unwrap();
    assert!(matches!(
        exec.update(&graph),
        Err(Error::GraphRule(GraphRule::UndefinedCondition))
    ));
    // With a default, the same graph instantiates and runs (the body clears nothing, so an
    // if node is used: it runs its body once when the default is 1).
    let defined = GraphHandle::create(&context).unwrap();
    let handle = defined.create_conditional(Some(0)).unwrap();
    let node = defined
        .add_conditional_node(&[], &handle, ConditionalKind::While)
        .unwrap();
    node.bodies[0].add_empty_node(&[]).unwrap();
    defined.instantiate().unwrap().launch(&stream).unwrap();
    stream.synchronize().unwrap();
    // A setter that the reading node does not depend on leaves the first read undefined (N2,
    // found by the fuzzer); one it depends on defines it. A handle set but read by no node is
    // refused too (N1, found by the fuzzer).
    let set_from = set_from_kernel();
    let selector = DevicePtrHandle::alloc(&context, 4).unwrap();
    selector.memset_async(0, 4, &stream).unwrap();
    stream.synchronize().unwrap();
    let unordered = GraphHandle::create(&context).unwrap();
    let handle = unordered.create_conditional(None).unwrap();
    let node = unordered
        .add_conditional_node(&[], &handle, ConditionalKind::If)
        .unwrap();
    node.bodies[0].add_empty_node(&[]).unwrap();
    unordered
        .add_kernel_node(
            &[],
            &set_from,
            &LaunchConfig::linear(1, 1),
            (&handle, &selector),
        )
        .unwrap();
    assert!(matches!(
        unordered.instantiate(),
        Err(Error::GraphRule(GraphRule::UndefinedCondition))
    ));
    let ordered = GraphHandle::create(&context).unwrap();
    let handle = ordered.create_conditional(None).unwrap();
    let set = ordered
        .add_kernel_node(
            &[],
            &set_from,
            &LaunchConfig::linear(1, 1),
            (&handle, &selector),
        )
        .unwrap();
    let node = ordered
        .add_conditional_node(&[set], &handle, ConditionalKind::If)
        .unwrap();
    node.bodies[0].add_empty_node(&[]).unwrap();
    ordered.instantiate().unwrap().launch(&stream).unwrap();
    stream.synchronize().unwrap();
    let unread = GraphHandle::create(&context).unwrap();
    let handle = unread.create_conditional(Some(0)).unwrap();
    unread
        .add_kernel_node(
            &[],
            &set_from,
            &LaunchConfig::linear(1, 1),
            (&handle, &selector),
        )
        .unwrap();
    assert!(matches!(
        unread.instantiate(),
        Err(Error::GraphRule(GraphRule::ConditionalNeverRead))
    ));
    drop((unordered, ordered, unread, selector, set_from));
    // A switch of more bodies than can be made is a typed error, not an abort.
    let switch = GraphHandle::create(&context).unwrap();
    let handle = switch.create_conditional(Some(0)).unwrap();
    match switch.add_conditional_node(&[], &handle, ConditionalKind::Switch(u32::MAX)) {
        Err(Error::TooMany { count, max, .. }) => {
            assert_eq!((count, max), (u32::MAX as usize, MAX_SWITCH_BODIES));
        }
        other => panic!("expected TooMany, got {other:?}"),
    }
    // The handle is still usable by a sensible node.
    let node = switch
        .add_conditional_node(&[], &handle, ConditionalKind::Switch(2))
        .unwrap();
    assert_eq!(node.bodies.len(), 2);
    drop((node, switch, exec, plain, graph, looped, defined, stream));
    let _ = LaunchConfig::linear(1, 1);
}

// ---------------------------------------------------------------------------------------------
// N3 (found by the fuzzer): a wrapped cudarc slice is freed in its own context, whatever is
// current on the thread that drops its handle.

#[test]
fn n3_a_cudarc_slice_is_freed_in_its_context_wherever_it_is_dropped() {
    strict_clean(
        "n3_a_cudarc_slice_is_freed_in_its_context_wherever_it_is_dropped",
        "1",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_n3_a_cudarc_slice_is_freed_in_its_context_wherever_it_is_dropped() {
    in_scenario();
    let cudarc = CudaContext::new(0).unwrap();
    let cudarc_stream = cudarc.default_stream();
    let first =
        DevicePtrHandle::from_cudarc_slice(cudarc_stream.alloc_zeros::<u8>(1024).unwrap()).unwrap();
    let second =
        DevicePtrHandle::from_cudarc_slice(cudarc_stream.alloc_zeros::<u8>(64).unwrap()).unwrap();
    drop(cudarc_stream);
    // On a thread with no context current.
    std::thread::spawn(move || drop(first)).join().unwrap();
    // On a thread with a green context bound.
    let green = GreenContextHandle::create(0, 8).unwrap();
    let green_context = green.context().unwrap();
    std::thread::spawn(move || {
        green_context.bind_to_thread().unwrap();
        drop(second);
        let current = ContextHandle::current().unwrap().unwrap();
        assert_eq!(
            current.as_cu(),
            green_context.as_cu(),
            "the caller's context is kept"
        );
        ContextHandle::unbind_thread().unwrap();
    })
    .join()
    .unwrap();
    cudarc.synchronize().unwrap();
    drop((green, cudarc));
}

// N6 (found by the fuzzer): a cudarc slice of another device is checked for reach like pool
// memory: refused on a device its pool does not grant, accepted once granted.

#[test]
fn n6_a_cudarc_slice_of_another_device_is_checked_for_reach() {
    strict_clean(
        "n6_a_cudarc_slice_of_another_device_is_checked_for_reach",
        "2",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_n6_a_cudarc_slice_of_another_device_is_checked_for_reach() {
    in_scenario();
    let cudarc = CudaContext::new(1).unwrap();
    let cudarc_stream = cudarc.default_stream();
    let buffer =
        DevicePtrHandle::from_cudarc_slice(cudarc_stream.alloc_zeros::<u8>(1024).unwrap()).unwrap();
    cudarc_stream.synchronize().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    assert!(matches!(
        buffer.memset_async(1, 64, &stream),
        Err(Error::Unreachable {
            device: 0,
            owner: Some(1),
            pool: true
        })
    ));
    // Granted through the pool that served it (device 1's default pool), the same use passes.
    let pool = MemoryPoolHandle::device_default(1).unwrap();
    pool.set_peer_access(0, true).unwrap();
    buffer.memset_async(1, 64, &stream).unwrap();
    stream.synchronize().unwrap();
    pool.set_peer_access(0, false).unwrap();
    drop((buffer, cudarc_stream, pool, stream, context, cudarc));
}

// ---------------------------------------------------------------------------------------------
// S2: memory another process can write lends no host view.

#[test]
fn s2_ipc_host_pool_memory_has_no_host_view() {
    strict_clean("s2_ipc_host_pool_memory_has_no_host_view", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_s2_ipc_host_pool_memory_has_no_host_view() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ipc: true,
        ..PoolProps::device(0)
    })
    .unwrap();
    pool.set_peer_access(0, true).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
    buffer.memset_async(3, 4096, &stream).unwrap();
    assert!(matches!(
        buffer.host_view(),
        Err(Error::NotHostAccessible { .. })
    ));
    assert!(matches!(
        buffer.host_view_mut(),
        Err(Error::NotHostAccessible { .. })
    ));
    // The bytes are still readable by a copy.
    let mut bytes = vec![0u8; 4096];
    buffer.copy_to_host(&mut bytes, &stream).unwrap();
    assert!(bytes.iter().all(|&b| b == 3));
    // A host pool that does not export still lends views.
    let private = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ..PoolProps::device(0)
    })
    .unwrap();
    private.set_peer_access(0, true).unwrap();
    let viewed = DevicePtrHandle::alloc_from_pool(&private, 64, &stream).unwrap();
    viewed.memset_async(5, 64, &stream).unwrap();
    assert!(viewed.host_view().unwrap().iter().all(|&b| b == 5));
    drop((viewed, private, buffer, pool, stream));
}
