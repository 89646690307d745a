//! Review 23: adversarial reproducers for issue 23's conditional handles, node updates and
//! thread-bound contexts. Ignored GPU tests; the launchers at the bottom run each group on the
//! simulator in a child of its own.
//!
//! Each test asserts the *sound* behaviour and failed before its fix; they stay as regression
//! tests. (The reference-count race of `handles-core/src/counted.rs` has its reproducer as a
//! loom model: `loom_counted.rs::a_clone_that_downgrades_and_drops_races_the_unique_drop`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use handles_cuda::code::{
    Buffer, Elements, LaunchOptions, OccupancyFlags, ProgramHandle, TypedKernel,
};
use handles_cuda::exec::{Device, EventFlags, GreenContextHandle};
use handles_cuda::graph::{Conditional, ConditionalHandle, ConditionalKind, GraphHandle};
use handles_cuda::{
    ContextHandle, DeviceBuffer, DevicePtrHandle, Error, EventHandle, KernelHandle, LaunchConfig,
    LaunchProblem, LibraryHandle, StreamHandle,
};
use handles_tests::{Failures, serial, stream};

mod simulator;

fn set_from() -> (
    handles_cuda::LibraryHandle,
    TypedKernel<(Conditional, Buffer)>,
) {
    let library = handles_tests::conditional_kernels::load().unwrap();
    let kernel = KernelHandle::get(&library, "set_from").unwrap();
    // SAFETY: the parameter list is the kernel's own; it reads only the first word of the
    // selector, which the check requires.
    let typed = unsafe {
        kernel.typed(
            |(_, selector): &(&ConditionalHandle, &DevicePtrHandle), _| {
                if selector.size() >= 4 {
                    Ok(())
                } else {
                    Err(Error::InvalidArgument("the selector holds no word".into()))
                }
            },
        )
    }
    .unwrap();
    (library, typed)
}

fn word(context: &ContextHandle, stream: &StreamHandle, value: u32) -> DevicePtrHandle {
    let buffer = DevicePtrHandle::alloc(context, 4).unwrap();
    buffer.copy_from_host(&value.to_ne_bytes(), stream).unwrap();
    buffer
}

fn one() -> LaunchConfig {
    LaunchConfig::linear(1, 1)
}

// ---------------------------------------------------------------------------------------
// 1. Conditional handles
// ---------------------------------------------------------------------------------------

/// `GraphExecHandle::set_kernel_node_params` runs the kernel's bounds check and the reach
/// checks, but not the conditional-handle check that `add_kernel_node` runs
/// (`check_conditionals`): a kernel node of graph A can be updated to set a conditional handle
/// made on graph B, which the module's guide promises is impossible ("only kernel nodes of the
/// same outermost graph can take it as an argument"). The update must be refused with
/// `ForeignConditional`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn r23_cond_node_update_refuses_a_handle_of_another_graph() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let (library, set_from) = set_from();
    let selector = word(&context, &stream, 1);
    let out = word(&context, &stream, 0);
    let a = GraphHandle::create(&context).unwrap();
    let handle_a = a.create_conditional(Some(0)).unwrap();
    let setter = a
        .add_kernel_node(&[], &set_from, &one(), (&handle_a, &selector))
        .unwrap();
    let node = a
        .add_conditional_node(&[setter], &handle_a, ConditionalKind::If)
        .unwrap();
    node.bodies[0].add_memset_node(&[], &out, 0, 7, 4).unwrap();
    let b = GraphHandle::create(&context).unwrap();
    let handle_b = b.create_conditional(Some(0)).unwrap();
    // The node-construction check refuses this argument:
    assert!(matches!(
        a.add_kernel_node(&[], &set_from, &one(), (&handle_b, &selector)),
        Err(Error::ForeignConditional { .. })
    ));
    let exec = a.instantiate().unwrap();
    let updated = exec.set_kernel_node_params(setter, &set_from, &one(), (&handle_b, &selector));
    eprintln!("r23: node update with graph B's handle: {updated:?}");
    if updated.is_ok() {
        // Let the simulator see the launch that sets graph B's handle from graph A's kernel.
        exec.launch(&stream).unwrap();
        stream.synchronize().unwrap();
    }
    assert!(
        matches!(updated, Err(Error::ForeignConditional { .. })),
        "a node update made graph A's kernel set a conditional handle of graph B: {updated:?}"
    );
    drop((exec, node, a, b, library));
    failures.assert_none();
}

/// A graph C whose kernel sets C's own conditional handle (no conditional node yet, so
/// `has_conditional` is false and `add_child_graph_node` takes it) becomes a child of graph A.
/// Launches of A then run a kernel that sets a handle of graph C, which no node of A reads and
/// which A's launch gives no meaning (the simulator's rule; `check_conditionals` would refuse
/// the same argument in any kernel node of A). The child must be refused, or its handles
/// checked against A.
#[test]
#[ignore = "needs a CUDA GPU"]
fn r23_cond_child_graph_carries_a_foreign_handle_setter() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let (library, set_from) = set_from();
    let selector = word(&context, &stream, 1);
    let c = GraphHandle::create(&context).unwrap();
    let handle_c = c.create_conditional(Some(0)).unwrap();
    c.add_kernel_node(&[], &set_from, &one(), (&handle_c, &selector))
        .unwrap();
    let a = GraphHandle::create(&context).unwrap();
    let added = a.add_child_graph_node(&[], &c);
    eprintln!("r23: child graph with a setter of its own handle: {added:?}");
    if added.is_ok() {
        let exec = a.instantiate().unwrap();
        exec.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        drop(exec);
    }
    assert!(
        added.is_err(),
        "graph A took a child whose kernel sets graph C's conditional handle"
    );
    drop((a, c, handle_c, library));
    failures.assert_none();
}

/// A conditional body "used alone": `instantiate` and `update` refuse a body
/// (`refuse_body_alone`), but `add_child_graph_node` takes one as the child of another graph
/// X (the body has no conditional node, memory node, host or event node of its own). The
/// body's kernel sets graph A's handle (allowed in the body: its outermost graph is A), so
/// X's launches run a kernel that sets a handle of graph A.
#[test]
#[ignore = "needs a CUDA GPU"]
fn r23_cond_body_used_as_a_child_of_another_graph() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let (library, set_from) = set_from();
    let selector = word(&context, &stream, 0);
    let a = GraphHandle::create(&context).unwrap();
    let handle_a = a.create_conditional(Some(1)).unwrap();
    let looped = a
        .add_conditional_node(&[], &handle_a, ConditionalKind::While)
        .unwrap();
    let body = &looped.bodies[0];
    // Ends the loop: sets A's handle to selector[0] = 0.
    body.add_kernel_node(&[], &set_from, &one(), (&handle_a, &selector))
        .unwrap();
    assert!(matches!(
        body.instantiate(),
        Err(Error::ConditionalBodyAlone { .. })
    ));
    let x = GraphHandle::create(&context).unwrap();
    let added = x.add_child_graph_node(&[], body);
    eprintln!("r23: a conditional body as the child of another graph: {added:?}");
    if added.is_ok() {
        let exec = x.instantiate().unwrap();
        exec.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        drop(exec);
    }
    assert!(
        added.is_err(),
        "graph X took graph A's conditional body, whose kernel sets A's handle, as a child"
    );
    drop((x, looped, a, library));
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------
// 1b. Graph-owned memory
// ---------------------------------------------------------------------------------------

/// A graph with memory nodes whose executable graph is launched, then dropped with the graph
/// while the launch still waits in a host node between its memset and its copy of the
/// graph-owned memory. The executable graph keeps its source graph (`_source`) only while its
/// handle lives, and the driver's deferred destruction of the executable graph does not keep
/// the graph: `cuGraphDestroy` runs while the launch is queued, and the simulator (whose
/// allocation node reserves the range for the graph and its executable graphs) reports the
/// launch's later copy as a use of memory the graph's destruction freed.
#[test]
#[ignore = "needs a CUDA GPU"]
fn r23_gmem_graph_dropped_while_its_launch_runs() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let out = DevicePtrHandle::alloc(&context, 4096).unwrap();
    let graph = GraphHandle::create(&context).unwrap();
    let (alloc, memory) = graph.add_mem_alloc_node(&[], 4096).unwrap();
    let set = graph
        .add_memset_node(&[alloc], &memory, 0, 1, 4096)
        .unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&gate);
    let wait = graph
        .add_host_node(&[set], move || {
            let start = Instant::now();
            while !seen.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    let copy = graph
        .add_copy_node(&[wait], &memory, 0, &out, 0, 4096)
        .unwrap();
    graph.add_mem_free_node(&[copy], &memory).unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    drop((exec, graph, memory));
    gate.store(true, Ordering::SeqCst);
    stream.synchronize().unwrap();
    let mut bytes = vec![0u8; 4096];
    out.copy_to_host(&mut bytes, &stream).unwrap();
    assert!(bytes.iter().all(|&b| b == 1), "the copy read other bytes");
    drop(out);
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------
// 2. Thread-bound contexts
// ---------------------------------------------------------------------------------------

/// `unbind_thread` inside `ContextHandle::run` of another context: `run` saved the bound
/// context as the one to restore; `unbind_thread` sees that the bound context is not current
/// now (the `run` context is), so leaves the current context alone, and drops the binding's
/// handle: the last one of a green context, which is destroyed. `run` then makes the destroyed
/// context current again. The same happens with `other.bind_to_thread()` inside `run`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn r23_ctx_unbind_inside_run_restores_a_destroyed_context() {
    let _serial = serial();
    let failures = Failures::watch();
    std::thread::spawn(|| {
        let primary = ContextHandle::primary(0).unwrap();
        let green = GreenContextHandle::create(0, 1).unwrap();
        let context = green.context().unwrap();
        context.bind_to_thread().unwrap();
        let raw_green = context.as_cu();
        drop((context, green));
        let unbound = primary.run(ContextHandle::unbind_thread);
        let mut current = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { handles_cuda::driver::sys::cuCtxGetCurrent(&mut current) };
        eprintln!(
            "r23: unbind inside run: {unbound:?}; current afterwards {current:?} (the destroyed \
             green context was {raw_green:?})"
        );
        let event = EventHandle::create_in_current(EventFlags::default());
        eprintln!(
            "r23: an event in the current context: {:?}",
            event.as_ref().err()
        );
        drop(event);
        // Refused: `run` restores its caller's context (the bound one) afterwards.
        assert!(
            matches!(unbound, Err(handles_cuda::Error::WrongContext { .. })),
            "{unbound:?}"
        );
        assert_eq!(current, raw_green, "the binding is as it was");
        ContextHandle::unbind_thread().unwrap();
    })
    .join()
    .unwrap();
    failures.assert_none();
}

/// The same through `bind_to_thread` inside `run`: binding the primary context replaces (and
/// drops) the binding of a green context whose other handles are gone, destroying it, and
/// `run` then restores the destroyed context as current.
#[test]
#[ignore = "needs a CUDA GPU"]
fn r23_ctx_bind_inside_run_restores_a_destroyed_context() {
    let _serial = serial();
    let failures = Failures::watch();
    std::thread::spawn(|| {
        let primary = ContextHandle::primary(0).unwrap();
        let green = GreenContextHandle::create(0, 1).unwrap();
        let context = green.context().unwrap();
        context.bind_to_thread().unwrap();
        let raw_green = context.as_cu();
        drop((context, green));
        let bound = primary.run(|| primary.bind_to_thread());
        let mut current = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { handles_cuda::driver::sys::cuCtxGetCurrent(&mut current) };
        eprintln!("r23: bind inside run: {bound:?}; current afterwards {current:?}");
        // Refused: `run` restores its caller's context (the bound one) afterwards.
        assert!(
            matches!(bound, Err(handles_cuda::Error::WrongContext { .. })),
            "{bound:?}"
        );
        assert_eq!(current, raw_green, "the binding is as it was");
        ContextHandle::unbind_thread().unwrap();
    })
    .join()
    .unwrap();
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------
// 3. Cooperative launches
// ---------------------------------------------------------------------------------------

/// The cooperative grid check (`LaunchOptions::check_on_device`) multiplies the kernel's
/// blocks per multiprocessor by the *device's* multiprocessor count, whatever the stream: on a
/// stream of a green context, whose work runs on that context's SMs only, a grid sized for the
/// whole device passes the check although it cannot be resident at once on the green
/// context's SMs. The launch must be refused (`LaunchProblem::CooperativeGrid`) against the
/// green context's `sm_count`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn r23_coop_grid_on_a_green_context_is_checked_against_its_sms() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let program = ProgramHandle::new(
        "extern \"C\" __global__ void touch(unsigned *x) { if (blockIdx.x == 0 && threadIdx.x == 0) x[0] = 1u; }",
        "touch.cu",
    )
    .unwrap();
    program.compile(&["--gpu-architecture=compute_90"]).unwrap();
    let library = LibraryHandle::load_data(&program.ptx().unwrap()).unwrap();
    let kernel = KernelHandle::get(&library, "touch").unwrap();
    // SAFETY: `touch(unsigned *x)` writes x[0] only, which the check requires.
    let touch: TypedKernel<(Elements<u32>,)> = unsafe {
        kernel.typed(|(x,): &(&DeviceBuffer<u32>,), _| {
            if x.is_empty() {
                Err(Error::InvalidArgument("empty".into()))
            } else {
                Ok(())
            }
        })
    }
    .unwrap();
    let green = GreenContextHandle::create(0, 8).unwrap();
    let green_sms = green.sm_count();
    let device_sms = Device::new(0)
        .unwrap()
        .properties()
        .unwrap()
        .multiprocessor_count;
    let green_stream = green.create_stream(0).unwrap();
    let per_sm = touch
        .kernel()
        .max_active_blocks_per_sm(&context, 1024, 0, OccupancyFlags::Default)
        .unwrap();
    let blocks = per_sm * device_sms;
    eprintln!(
        "r23: green context of {green_sms} SMs (device {device_sms}), {per_sm} blocks per SM: \
         a cooperative grid of {blocks} blocks"
    );
    assert!(green_sms < device_sms);
    let x = DeviceBuffer::<u32>::zeroed(1, &green_stream).unwrap();
    let options = LaunchOptions {
        cooperative: true,
        ..LaunchOptions::default()
    };
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [1024, 1, 1],
        shared_mem_bytes: 0,
    };
    let launched = touch.launch_ex(&green_stream, &config, &options, (&x,));
    eprintln!("r23: the cooperative launch on the green stream: {launched:?}");
    green_stream.synchronize().unwrap();
    assert!(
        matches!(
            launched,
            Err(Error::BadLaunch {
                what: LaunchProblem::CooperativeGrid { .. }
            })
        ),
        "a cooperative grid of {blocks} blocks was let through on a green context of \
         {green_sms} SMs ({per_sm} per SM): {launched:?}"
    );
    drop((x, green_stream, green, touch, library));
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------

const NOT_SIMULATED: &[(&str, &str)] = &[];

fn run_group(label: &str, filter: &str) {
    simulator::run_group(label, filter, NOT_SIMULATED);
}

#[test]
fn on_the_simulator_cond_update() {
    run_group("review23 cond update", "r23_cond_node_update");
}

#[test]
fn on_the_simulator_cond_child() {
    run_group("review23 cond child", "r23_cond_child");
}

#[test]
fn on_the_simulator_ctx_unbind() {
    run_group("review23 ctx unbind", "r23_ctx_unbind");
}

#[test]
fn on_the_simulator_ctx_bind() {
    run_group("review23 ctx bind", "r23_ctx_bind");
}

#[test]
fn on_the_simulator_cond_body() {
    run_group("review23 cond body", "r23_cond_body");
}

#[test]
fn on_the_simulator_coop() {
    run_group("review23 coop", "r23_coop");
}

#[test]
fn on_the_simulator_gmem() {
    run_group("review23 gmem", "r23_gmem");
}
