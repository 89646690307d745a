//! Conditional nodes (if, if/else, while, switch), child-graph nodes and the DOT dump, with
//! kernels compiled by NVRTC that set the conditions on the device. They need a CUDA GPU and
//! are ignored by default (run them with `--include-ignored`); `on_the_simulator` runs them
//! all again on the simulated driver, whose PTX interpreter runs the same kernels and reports
//! their `cudaGraphSetConditional` calls. None of them returns early.

use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, KernelHandle, LaunchConfig, LibraryHandle, StreamHandle,
    code::{Buffer, TypedKernel},
    graph::{Conditional, ConditionalHandle, ConditionalKind, DotFlags, GraphHandle},
};
use handles_tests::{Failures, serial, stream};

mod simulator;

/// A word that no body writes.
const UNTOUCHED: u32 = 0xdead_beef;

struct Kernels {
    library: LibraryHandle,
    count_to: TypedKernel<(Conditional, Buffer, u32)>,
    set_from: TypedKernel<(Conditional, Buffer)>,
    put: TypedKernel<(Buffer, u32)>,
    add_one: TypedKernel<(Buffer, u32)>,
}

/// `Err` unless `buffer` holds at least `words` 32-bit words.
fn holds(buffer: &DevicePtrHandle, words: usize) -> handles_cuda::Result<()> {
    if buffer.size() >= words * 4 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "the buffer holds {} bytes, fewer than {words} words",
            buffer.size()
        )))
    }
}

fn compile() -> Kernels {
    let library = handles_tests::conditional_kernels::load().unwrap();
    let get = |name: &str| KernelHandle::get(&library, name).unwrap();
    // SAFETY: (all four) the parameter lists are the kernels' own; each kernel touches only
    // the first word of each buffer (add_one: the first n words), which the checks require;
    // a grid's extra threads do the same (count_to, set_from and put are launched as one
    // thread by every test).
    unsafe {
        Kernels {
            count_to: get("count_to")
                .typed(
                    |(_, counter, _): &(&ConditionalHandle, &DevicePtrHandle, u32), _| {
                        holds(counter, 1)
                    },
                )
                .unwrap(),
            set_from: get("set_from")
                .typed(
                    |(_, selector): &(&ConditionalHandle, &DevicePtrHandle), _| holds(selector, 1),
                )
                .unwrap(),
            put: get("put")
                .typed(|(out, _): &(&DevicePtrHandle, u32), _| holds(out, 1))
                .unwrap(),
            add_one: get("add_one")
                .typed(|(xs, n): &(&DevicePtrHandle, u32), _| holds(xs, *n as usize))
                .unwrap(),
            library,
        }
    }
}

fn one() -> LaunchConfig {
    LaunchConfig::linear(1, 1)
}

fn word(context: &ContextHandle, stream: &StreamHandle, value: u32) -> DevicePtrHandle {
    let buffer = DevicePtrHandle::alloc(context, 4).unwrap();
    write(&buffer, stream, value);
    buffer
}

fn write(buffer: &DevicePtrHandle, stream: &StreamHandle, value: u32) {
    buffer.copy_from_host(&value.to_ne_bytes(), stream).unwrap();
}

fn read(buffer: &DevicePtrHandle, stream: &StreamHandle) -> u32 {
    let mut bytes = [0u8; 4];
    buffer.copy_to_host(&mut bytes, stream).unwrap();
    u32::from_ne_bytes(bytes)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_while_loop_that_a_kernel_ends() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = compile();
    let counter = word(&context, &stream, 0);
    let graph = GraphHandle::create(&context).unwrap();
    // Starts at 1, so the body runs at least once; the body's 5th pass sets it to 0.
    let handle = graph.create_conditional(Some(1)).unwrap();
    assert_eq!(handle.default_value(), Some(1));
    let reset = graph.add_memset_node(&[], &counter, 0, 0, 4).unwrap();
    let looped = graph
        .add_conditional_node(&[reset], &handle, ConditionalKind::While)
        .unwrap();
    assert_eq!(looped.bodies.len(), 1);
    let body = &looped.bodies[0];
    assert!(body.is_conditional_body());
    let before = graph.attachment_count();
    body.add_kernel_node(&[], &kernels.count_to, &one(), (&handle, &counter, 5))
        .unwrap();
    // The body's kernel and buffer are kept by the outer graph.
    assert_eq!(graph.attachment_count(), before + 2);
    let exec = graph.instantiate().unwrap();
    drop((looped, graph));
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
        assert_eq!(read(&counter, &stream), 5, "the loop ran 5 times");
    }
    drop(kernels.library);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_switch_over_three_bodies() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = compile();
    let (selector, out) = (word(&context, &stream, 0), word(&context, &stream, 0));
    let graph = GraphHandle::create(&context).unwrap();
    // No default: the kernel before the node always sets it.
    let handle = graph.create_conditional(None).unwrap();
    let set = graph
        .add_kernel_node(&[], &kernels.set_from, &one(), (&handle, &selector))
        .unwrap();
    let switch = graph
        .add_conditional_node(&[set], &handle, ConditionalKind::Switch(3))
        .unwrap();
    assert_eq!(switch.bodies.len(), 3);
    for (i, body) in switch.bodies.iter().enumerate() {
        body.add_kernel_node(&[], &kernels.put, &one(), (&out, 100 + i as u32))
            .unwrap();
    }
    let exec = graph.instantiate().unwrap();
    for (value, expected) in [(0, 100), (1, 101), (2, 102), (3, UNTOUCHED), (7, UNTOUCHED)] {
        write(&selector, &stream, value);
        write(&out, &stream, UNTOUCHED);
        exec.launch(&stream).unwrap();
        assert_eq!(read(&out, &stream), expected, "switch on {value}");
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn if_and_if_else() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = compile();
    let selector = word(&context, &stream, 0);
    let (then_out, else_out) = (word(&context, &stream, 0), word(&context, &stream, 0));
    let graph = GraphHandle::create(&context).unwrap();
    let (if_handle, else_handle) = (
        graph.create_conditional(Some(0)).unwrap(),
        graph.create_conditional(Some(0)).unwrap(),
    );
    let set = graph
        .add_kernel_node(&[], &kernels.set_from, &one(), (&if_handle, &selector))
        .unwrap();
    let set_else = graph
        .add_kernel_node(&[set], &kernels.set_from, &one(), (&else_handle, &selector))
        .unwrap();
    let only_if = graph
        .add_conditional_node(&[set_else], &if_handle, ConditionalKind::If)
        .unwrap();
    only_if.bodies[0]
        .add_kernel_node(&[], &kernels.put, &one(), (&then_out, 1))
        .unwrap();
    let if_else = graph
        .add_conditional_node(&[only_if.node], &else_handle, ConditionalKind::IfElse)
        .unwrap();
    assert_eq!(if_else.bodies.len(), 2);
    if_else.bodies[0]
        .add_kernel_node(&[], &kernels.put, &one(), (&else_out, 10))
        .unwrap();
    // The else body: a memset and a copy node, through an empty node.
    let empty = if_else.bodies[1].add_empty_node(&[]).unwrap();
    let twenty = word(&context, &stream, 20);
    if_else.bodies[1]
        .add_copy_node(&[empty], &twenty, 0, &else_out, 0, 4)
        .unwrap();
    let exec = graph.instantiate().unwrap();
    for (value, then_expected, else_expected) in [
        (1, 1, 10),
        (0, UNTOUCHED, 20),
        (5, 1, 10),
        (0, UNTOUCHED, 20),
    ] {
        write(&selector, &stream, value);
        write(&then_out, &stream, UNTOUCHED);
        write(&else_out, &stream, UNTOUCHED);
        exec.launch(&stream).unwrap();
        assert_eq!(read(&then_out, &stream), then_expected, "if on {value}");
        assert_eq!(
            read(&else_out, &stream),
            else_expected,
            "if/else on {value}"
        );
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_child_graph_whose_buffers_outlive_every_user_handle() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let n = 256u32;
    let start: Vec<u8> = (0..n).flat_map(|i| (i * 3).to_ne_bytes()).collect();
    let out = DevicePtrHandle::alloc(&context, n as usize * 4).unwrap();
    let exec = {
        let kernels = compile();
        let xs = DevicePtrHandle::alloc(&context, n as usize * 4).unwrap();
        xs.copy_from_host(&start, &stream).unwrap();
        let weak = xs.downgrade();
        let child = GraphHandle::create(&context).unwrap();
        let added = child
            .add_kernel_node(
                &[],
                &kernels.add_one,
                &LaunchConfig::linear(n, 64),
                (&xs, n),
            )
            .unwrap();
        child
            .add_copy_node(&[added], &xs, 0, &out, 0, n as usize * 4)
            .unwrap();
        let parent = GraphHandle::create(&context).unwrap();
        let kept = child.attachment_count();
        parent.add_child_graph_node(&[], &child).unwrap();
        assert_eq!(parent.attachment_count(), kept);
        // The parent has a copy of the child as it was: a later node of the child is neither
        // in the copy nor kept by the parent.
        child.add_memset_node(&[], &xs, 0, 0, 4).unwrap();
        assert_eq!(parent.attachment_count(), kept);
        let exec = parent.instantiate().unwrap();
        // Every user handle of the buffer, kernels, library, child and parent goes now.
        drop((xs, kernels, child, parent));
        assert!(
            weak.upgrade().is_some(),
            "the executable graph keeps the buffer"
        );
        exec
    };
    for round in 1..=3u32 {
        exec.launch(&stream).unwrap();
        let mut bytes = vec![0u8; n as usize * 4];
        out.copy_to_host(&mut bytes, &stream).unwrap();
        for (i, chunk) in bytes.chunks_exact(4).enumerate() {
            let value = u32::from_ne_bytes(chunk.try_into().unwrap());
            assert_eq!(
                value,
                i as u32 * 3 + round,
                "element {i} after {round} launches"
            );
        }
    }
    drop(exec);
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn conditional_misuse_is_refused() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = compile();
    let selector = word(&context, &stream, 1);
    let (mine, other) = (
        GraphHandle::create(&context).unwrap(),
        GraphHandle::create(&context).unwrap(),
    );
    let handle = mine.create_conditional(Some(0)).unwrap();
    assert_eq!(handle.graph_id(), mine.id());
    // A handle of another graph: in a conditional node, and as a kernel node's argument.
    assert!(matches!(
        other.add_conditional_node(&[], &handle, ConditionalKind::If),
        Err(Error::ForeignConditional { handle_graph, graph, .. })
            if handle_graph == mine.id() && graph == other.id()
    ));
    assert!(matches!(
        other.add_kernel_node(&[], &kernels.set_from, &one(), (&handle, &selector)),
        Err(Error::ForeignConditional { .. })
    ));
    // On a stream, no graph runs the kernel: refused before the driver is called.
    assert!(matches!(
        kernels
            .set_from
            .launch(&stream, &one(), (&handle, &selector)),
        Err(Error::ForeignConditional { graph: 0, .. })
    ));
    // Nothing was lost: the handle still drives one node of its own graph.
    let node = mine
        .add_conditional_node(&[], &handle, ConditionalKind::If)
        .unwrap();
    assert!(matches!(
        mine.add_conditional_node(&[], &handle, ConditionalKind::While),
        Err(Error::ConditionalInUse)
    ));
    let body = &node.bodies[0];
    // A body's handle in a nested node: its own graph encloses the body.
    let inner = mine.create_conditional(Some(0)).unwrap();
    body.add_conditional_node(&[], &inner, ConditionalKind::If)
        .unwrap();
    // Nodes that bodies cannot hold.
    assert!(matches!(
        body.add_host_node(&[], || {}),
        Err(Error::NotInConditionalBody { .. })
    ));
    let event = handles_cuda::EventHandle::create(&context, Default::default()).unwrap();
    assert!(matches!(
        body.add_event_record_node(&[], &event),
        Err(Error::NotInConditionalBody { .. })
    ));
    assert!(matches!(
        body.add_event_wait_node(&[], &event),
        Err(Error::NotInConditionalBody { .. })
    ));
    let with_host = GraphHandle::create(&context).unwrap();
    with_host.add_host_node(&[], || {}).unwrap();
    assert!(matches!(
        body.add_child_graph_node(&[], &with_host),
        Err(Error::NotInConditionalBody { .. })
    ));
    // A child graph without such nodes is fine.
    let plain = GraphHandle::create(&context).unwrap();
    plain.add_memset_node(&[], &selector, 0, 1, 4).unwrap();
    body.add_child_graph_node(&[], &plain).unwrap();
    // A graph with a conditional node cannot be a child graph (nor can its bodies, which
    // hold the nested one).
    assert!(matches!(
        other.add_child_graph_node(&[], &mine),
        Err(Error::ConditionalInChild)
    ));
    assert!(matches!(
        other.add_child_graph_node(&[], body),
        Err(Error::ConditionalBodyAlone { .. })
    ));
    // Memory nodes cannot be in a body, and a graph with memory nodes cannot be a child.
    assert!(matches!(
        body.add_mem_alloc_node(&[], 256),
        Err(Error::NotInConditionalBody { .. })
    ));
    let with_memory = GraphHandle::create(&context).unwrap();
    let (allocated, memory) = with_memory.add_mem_alloc_node(&[], 256).unwrap();
    with_memory
        .add_mem_free_node(&[allocated], &memory)
        .unwrap();
    assert!(matches!(
        other.add_child_graph_node(&[], &with_memory),
        Err(Error::GraphRule(handles_cuda::GraphRule::MemoryInChild))
    ));
    // A body is not a graph of its own.
    assert!(matches!(
        body.instantiate(),
        Err(Error::ConditionalBodyAlone { .. })
    ));
    assert!(matches!(
        mine.add_conditional_node(&[], &handle, ConditionalKind::Switch(0)),
        Err(Error::GraphRule(
            handles_cuda::GraphRule::SwitchWithoutBodies
        ))
    ));
    // The graph is still whole: it runs (both conditions 0, nothing in the bodies runs).
    let exec = mine.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn debug_dot_writes_the_graph() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = compile();
    let counter = word(&context, &stream, 0);
    let graph = GraphHandle::create(&context).unwrap();
    let handle = graph.create_conditional(Some(1)).unwrap();
    let looped = graph
        .add_conditional_node(&[], &handle, ConditionalKind::While)
        .unwrap();
    looped.bodies[0]
        .add_kernel_node(&[], &kernels.count_to, &one(), (&handle, &counter, 2))
        .unwrap();
    let path = std::env::temp_dir().join(format!("handles-dot-{}.dot", std::process::id()));
    graph
        .debug_dot(&path, DotFlags::VERBOSE | DotFlags::CONDITIONAL_NODE_PARAMS)
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(text.contains("digraph"), "{text}");
    assert!(text.lines().count() > 2, "{text}");
    assert!(matches!(
        graph.debug_dot("bad\0path", DotFlags::NONE),
        Err(Error::InteriorNul { .. })
    ));
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_graph_nodes",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
