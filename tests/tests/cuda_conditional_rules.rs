//! The simulator's checks of the driver's rules for conditional nodes, child graphs and
//! bodies: each misuse, made with raw driver calls that handles-cuda refuses to make, runs in
//! a child on the simulator, whose report must name it (and nothing else).

mod simulator;

use handles_cuda::driver::sys;
use handles_cuda::graph::{ConditionalKind, GraphHandle};
use handles_cuda::{ContextHandle, DevicePtrHandle, KernelHandle, StreamFlags, StreamHandle};
use simulator::{in_scenario, run_scenario, say};

/// Each scenario, and the one violation kind its report must hold.
const RULES: &[(&str, &str)] = &[
    ("a_set_from_a_stream_launch", "conditional-set"),
    (
        "a_set_of_a_handle_the_graph_does_not_read",
        "conditional-set",
    ),
    ("a_handle_of_another_graph", "conditional-handle"),
    ("a_second_node_on_one_handle", "conditional-handle"),
    ("an_undefined_condition", "conditional-undefined"),
    ("a_host_node_in_a_body", "conditional-body"),
    ("destroying_a_body", "conditional-body"),
    ("a_child_with_a_conditional_node", "child-graph"),
];

#[test]
fn each_conditional_rule_broken_is_a_violation() {
    for &(name, kind) in RULES {
        let report = run_scenario(name, &[], &[]);
        assert!(!report.violations.is_empty(), "{name}: no violation");
        assert!(
            report.violations.iter().all(|v| v.kind == kind),
            "{name}: {:?}",
            report.violations
        );
        say(format!("{name}: {kind}"));
    }
}

fn ok(status: sys::CUresult) {
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
}

fn setup() -> (ContextHandle, StreamHandle) {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    // SAFETY: the primary context is alive while `context` is.
    unsafe { ok(sys::cuCtxSetCurrent(context.as_cu())) };
    (context, stream)
}

/// A raw conditional node of `kind` and `size` on `handle` in `graph`: its status.
fn raw_conditional(graph: sys::CUgraph, handle: u64, size: u32) -> sys::CUresult {
    // SAFETY: all-zero is a valid `CUgraphNodeParams` (integers, pointers, a zero enum).
    let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_: sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
        size,
        phGraph_out: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    let mut node = std::ptr::null_mut();
    // SAFETY: `graph` is alive; no dependencies; `params` is writable.
    unsafe {
        sys::cuGraphAddNode_v2(
            &mut node,
            graph,
            std::ptr::null(),
            std::ptr::null(),
            0,
            &mut params,
        )
    }
}

/// Launches `set_from(handle, selector)` on `stream` with raw calls.
fn raw_set_from(stream: &StreamHandle, handle: u64, selector: &DevicePtrHandle) {
    let library = handles_tests::conditional_kernels::load().unwrap();
    let kernel = KernelHandle::get(&library, "set_from").unwrap();
    let (mut h, mut s) = (handle, selector.as_cu());
    let mut params = [
        (&raw mut h).cast::<std::ffi::c_void>(),
        (&raw mut s).cast::<std::ffi::c_void>(),
    ];
    // SAFETY: set_from takes a handle and a pointer to a live word; the context is current.
    unsafe {
        ok(sys::cuLaunchKernel(
            kernel.as_cu() as sys::CUfunction,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            stream.as_cu(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ))
    };
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_set_from_a_stream_launch() {
    let (context, stream) = setup();
    let graph = GraphHandle::create(&context).unwrap();
    let handle = graph.create_conditional(Some(0)).unwrap();
    let selector = DevicePtrHandle::alloc(&context, 4).unwrap();
    selector.memset_async(0, 4, &stream).unwrap();
    raw_set_from(&stream, handle.as_cu(), &selector);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_set_of_a_handle_the_graph_does_not_read() {
    let (context, stream) = setup();
    let (graph, other) = (
        GraphHandle::create(&context).unwrap(),
        GraphHandle::create(&context).unwrap(),
    );
    let (mine, theirs) = (
        graph.create_conditional(Some(0)).unwrap(),
        other.create_conditional(Some(0)).unwrap(),
    );
    graph
        .add_conditional_node(&[], &mine, ConditionalKind::If)
        .unwrap();
    // A raw kernel node of `graph` that sets `other`'s handle.
    let library = handles_tests::conditional_kernels::load().unwrap();
    let kernel = KernelHandle::get(&library, "set_from").unwrap();
    let selector = DevicePtrHandle::alloc(&context, 4).unwrap();
    selector.memset_async(0, 4, &stream).unwrap();
    let (mut h, mut s) = (theirs.as_cu(), selector.as_cu());
    let mut args = [
        (&raw mut h).cast::<std::ffi::c_void>(),
        (&raw mut s).cast::<std::ffi::c_void>(),
    ];
    let params = sys::CUDA_KERNEL_NODE_PARAMS {
        func: std::ptr::null_mut(),
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 1,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: args.as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: kernel.as_cu(),
        ctx: context.as_cu(),
    };
    let mut node = std::ptr::null_mut();
    // SAFETY: the graph, kernel and selector are alive; the arguments are copied now.
    unsafe {
        ok(sys::cuGraphAddKernelNode_v2(
            &mut node,
            graph.as_cu(),
            std::ptr::null(),
            0,
            &params,
        ))
    };
    let mut exec = std::ptr::null_mut();
    // SAFETY: the graph is alive; the context is current.
    unsafe {
        ok(sys::cuGraphInstantiateWithFlags(
            &mut exec,
            graph.as_cu(),
            0,
        ));
        ok(sys::cuGraphLaunch(exec, stream.as_cu()));
    }
    stream.synchronize().unwrap();
    // SAFETY: the launch is done; destroyed once.
    unsafe { ok(sys::cuGraphExecDestroy(exec)) };
    drop(other);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_handle_of_another_graph() {
    let (context, _stream) = setup();
    let (graph, other) = (
        GraphHandle::create(&context).unwrap(),
        GraphHandle::create(&context).unwrap(),
    );
    let handle = graph.create_conditional(Some(0)).unwrap();
    assert_ne!(
        raw_conditional(other.as_cu(), handle.as_cu(), 1),
        sys::CUresult::CUDA_SUCCESS
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_second_node_on_one_handle() {
    let (context, _stream) = setup();
    let graph = GraphHandle::create(&context).unwrap();
    let handle = graph.create_conditional(Some(0)).unwrap();
    graph
        .add_conditional_node(&[], &handle, ConditionalKind::If)
        .unwrap();
    assert_ne!(
        raw_conditional(graph.as_cu(), handle.as_cu(), 1),
        sys::CUresult::CUDA_SUCCESS
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_an_undefined_condition() {
    let (context, stream) = setup();
    let graph = GraphHandle::create(&context).unwrap();
    // No default and no kernel sets it: the node reads an undefined value.
    let handle = graph.create_conditional(None).unwrap();
    graph
        .add_conditional_node(&[], &handle, ConditionalKind::If)
        .unwrap();
    // handles-cuda refuses to make it executable (`GraphRule::UndefinedCondition`), so the
    // misuse is made with raw calls.
    assert!(matches!(
        graph.instantiate(),
        Err(handles_cuda::Error::GraphRule(
            handles_cuda::GraphRule::UndefinedCondition
        ))
    ));
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: the graph is alive and its context current; `exec` is a valid out-pointer; the
    // executable graph is launched on a live stream of the same context and destroyed after
    // the stream has finished with it.
    unsafe {
        ok(sys::cuGraphInstantiateWithFlags(
            &mut exec,
            graph.as_cu(),
            0,
        ));
        ok(sys::cuGraphLaunch(exec, stream.as_cu()));
        ok(sys::cuStreamSynchronize(stream.as_cu()));
        ok(sys::cuGraphExecDestroy(exec));
    }
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_host_node_in_a_body() {
    let (context, _stream) = setup();
    let graph = GraphHandle::create(&context).unwrap();
    let handle = graph.create_conditional(Some(0)).unwrap();
    let node = graph
        .add_conditional_node(&[], &handle, ConditionalKind::If)
        .unwrap();
    unsafe extern "C" fn nothing(_: *mut std::ffi::c_void) {}
    let params = sys::CUDA_HOST_NODE_PARAMS {
        fn_: Some(nothing),
        userData: std::ptr::null_mut(),
    };
    let mut host = std::ptr::null_mut();
    // SAFETY: the body graph is alive (its handle holds the graph); the function is static.
    let status = unsafe {
        sys::cuGraphAddHostNode(
            &mut host,
            node.bodies[0].as_cu(),
            std::ptr::null(),
            0,
            &params,
        )
    };
    assert_ne!(status, sys::CUresult::CUDA_SUCCESS);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_destroying_a_body() {
    let (context, _stream) = setup();
    let graph = GraphHandle::create(&context).unwrap();
    let handle = graph.create_conditional(Some(0)).unwrap();
    let node = graph
        .add_conditional_node(&[], &handle, ConditionalKind::If)
        .unwrap();
    // SAFETY: a misuse the simulator refuses (the body is its node's): it destroys nothing.
    let status = unsafe { sys::cuGraphDestroy(node.bodies[0].as_cu()) };
    assert_ne!(status, sys::CUresult::CUDA_SUCCESS);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_child_with_a_conditional_node() {
    let (context, _stream) = setup();
    let (graph, parent) = (
        GraphHandle::create(&context).unwrap(),
        GraphHandle::create(&context).unwrap(),
    );
    let handle = graph.create_conditional(Some(0)).unwrap();
    graph
        .add_conditional_node(&[], &handle, ConditionalKind::If)
        .unwrap();
    let mut node = std::ptr::null_mut();
    // SAFETY: both graphs are alive.
    let status = unsafe {
        sys::cuGraphAddChildGraphNode(
            &mut node,
            parent.as_cu(),
            std::ptr::null(),
            0,
            graph.as_cu(),
        )
    };
    assert_ne!(status, sys::CUresult::CUDA_SUCCESS);
}
