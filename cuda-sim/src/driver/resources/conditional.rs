//! Conditional nodes, their handles and bodies, child-graph nodes, and the DOT dump of a
//! graph.
//!
//! * **Handles** (`cuGraphConditionalHandleCreate`) belong to the graph they were made on,
//!   and drive one conditional node of that graph or of a body nested in it. Each launch of
//!   an executable graph starts with every handle its conditional nodes read at its default
//!   (`CU_GRAPH_COND_ASSIGN_DEFAULT`) or undefined; a kernel of the launch sets one with
//!   `cudaGraphSetConditional` (the PTX interpreter reports the calls). A set from a launch on
//!   a stream, or of a handle the launched graph does not read, is a violation (the driver
//!   gives it no meaning); so is a node reading an undefined handle.
//! * **Conditional nodes** (`cuGraphAddNode` with `CU_GRAPH_NODE_TYPE_CONDITIONAL`) get body
//!   graphs that the driver owns: destroyed with their graph, never by the program (a
//!   violation). Bodies take kernel, memset, copy, empty, child-graph and conditional nodes
//!   only. At instantiation (and when the graph becomes a child) the bodies' nodes are copied
//!   into the node, and a launch runs them when the node executes: if (one body, or two with
//!   else), while (the body again as long as the handle is non-zero, checked before each
//!   run) and switch (body `n` for value `n`, none past the last).
//! * **Child-graph nodes** (`cuGraphAddChildGraphNode`) copy the child when they are added;
//!   a child with conditional nodes is refused (a violation), as the driver does.
//! * **`cuGraphDebugDotPrint`** writes the graph, bodies nested, as Graphviz DOT.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::base::errors::{INVALID_VALUE, NOT_SUPPORTED, OUT_OF_MEMORY};
use crate::base::types::{CuResult, Raw};
use crate::resources::streams::Target;
use crate::resources::work::{ConditionalOp, Op};
use crate::{Kind, Sim};

/// `CU_GRAPH_COND_TYPE_IF`, `_WHILE` and `_SWITCH`.
pub const COND_IF: u32 = 0;
pub const COND_WHILE: u32 = 1;
pub const COND_SWITCH: u32 = 2;
/// `CU_GRAPH_COND_ASSIGN_DEFAULT`.
const ASSIGN_DEFAULT: u32 = 1;
/// A while node stops after this many runs of its body, with a violation: on the GPU the
/// loop would not end.
const MAX_ITERATIONS: u64 = 1 << 20;
/// The most bodies a switch node gets here. The driver documents any size above zero; each
/// body is a graph, so a size like `u32::MAX` would need 4 billion of them (the simulator
/// aborted the process allocating their handles). Beyond this limit the node is refused with
/// `CUDA_ERROR_OUT_OF_MEMORY`, as a driver out of memory for them would refuse it (what driver
/// 580 answers for such sizes was not measured).
pub const MAX_SWITCH_BODIES: u32 = 1 << 16;

/// `CUDA_CONDITIONAL_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConditionalNodeParams {
    pub handle: u64,
    pub kind: u32,
    pub size: u32,
    pub bodies: *mut Raw,
    pub context: Raw,
}

/// `CUgraphNodeParams` (CUDA 12.3 to 13.1 layout): the type, then a 232-byte union, of which
/// the simulator reads the conditional member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GraphNodeParams {
    pub kind: u32,
    pub reserved0: [i32; 3],
    pub conditional: ConditionalNodeParams,
    pub rest: [u64; 25],
    pub reserved2: i64,
}

/// One conditional handle.
#[derive(Clone, Debug)]
pub struct Handle {
    /// The graph it was made on.
    pub graph: Raw,
    pub default: Option<u32>,
    /// The conditional node that reads it.
    pub node: Option<Raw>,
    /// Its value in the launch running now (`None`: undefined).
    pub value: Option<u32>,
}

/// The simulator's conditional-node state.
#[derive(Debug, Default)]
pub struct Conditionals {
    pub handles: HashMap<u64, Handle>,
    /// Body graph → the graph holding its conditional node.
    pub bodies: HashMap<Raw, Raw>,
    /// Each conditional node's body array, which the program reads through `phGraph_out`
    /// (kept where it is for the node's lifetime).
    pub arrays: HashMap<Raw, Box<[Raw]>>,
    /// Executable graph → the handles its conditional nodes read.
    pub execs: HashMap<Raw, Vec<u64>>,
}

impl Op {
    /// Whether a conditional node's body may hold this operation.
    pub fn allowed_in_body(&self) -> bool {
        match self {
            Op::Kernel(_) | Op::Memset { .. } | Op::Memcpy { .. } | Op::Empty => true,
            Op::Library(_) => true,
            Op::Conditional(_) => true,
            Op::Child(ops) => ops.iter().all(Op::allowed_in_body),
            Op::Upload { .. }
            | Op::EventRecord(_)
            | Op::EventWait(_)
            | Op::Host(..)
            // The driver refuses memory nodes in bodies, as in child graphs.
            | Op::GraphAlloc { .. }
            | Op::GraphFree { .. }
            | Op::ResetConditionals(_)
            | Op::LaunchDone(_) => false,
        }
    }
}

impl Sim {
    /// `cuGraphConditionalHandleCreate`.
    pub fn create_conditional(
        &mut self,
        graph: Raw,
        context: Raw,
        default: u32,
        flags: u32,
    ) -> Result<u64, CuResult> {
        self.graph(graph)?;
        if flags & !ASSIGN_DEFAULT != 0 {
            return Err(INVALID_VALUE);
        }
        if context == 0 {
            self.require_current("cuGraphConditionalHandleCreate")?;
        } else {
            self.context(context)?;
        }
        let raw = self.new_raw(Kind::Conditional) as u64;
        self.conditionals.handles.insert(
            raw,
            Handle {
                graph,
                default: (flags & ASSIGN_DEFAULT != 0).then_some(default),
                node: None,
                value: None,
            },
        );
        Ok(raw)
    }

    /// Whether `outer` is `inner` or encloses it (through bodies).
    fn encloses(&self, outer: Raw, mut inner: Raw) -> bool {
        loop {
            if inner == outer {
                return true;
            }
            match self.conditionals.bodies.get(&inner) {
                Some(&parent) => inner = parent,
                None => return false,
            }
        }
    }

    /// Whether `graph` is a conditional node's body.
    pub fn is_body(&self, graph: Raw) -> bool {
        self.conditionals.bodies.contains_key(&graph)
    }

    /// The body graphs of conditional nodes of `graph`.
    pub fn bodies_of(&self, graph: Raw) -> Vec<Raw> {
        let mut bodies: Vec<Raw> = self
            .conditionals
            .bodies
            .iter()
            .filter(|&(_, &parent)| parent == graph)
            .map(|(&body, _)| body)
            .collect();
        bodies.sort_unstable();
        bodies
    }

    /// `cuGraphAddNode` of a conditional node: checks the handle and the kind, creates the
    /// bodies, and returns the node and the body array's address.
    pub fn add_conditional_node(
        &mut self,
        graph: Raw,
        deps: &[Raw],
        params: &ConditionalNodeParams,
    ) -> Result<(Raw, *mut Raw), CuResult> {
        self.graph(graph)?;
        let Some(handle) = self.conditionals.handles.get(&params.handle).cloned() else {
            self.checker.violation(
                "conditional-handle",
                format!(
                    "conditional node of graph {graph:#x} given {:#x}, which is no conditional handle",
                    params.handle
                ),
            );
            return Err(INVALID_VALUE);
        };
        if !self.encloses(handle.graph, graph) {
            self.checker.violation(
                "conditional-handle",
                format!(
                    "conditional handle {:#x} of graph {:#x} used by a node of graph {graph:#x}, which that graph does not enclose",
                    params.handle, handle.graph
                ),
            );
            return Err(INVALID_VALUE);
        }
        if let Some(node) = handle.node {
            self.checker.violation(
                "conditional-handle",
                format!(
                    "conditional handle {:#x} already drives node {node:#x}",
                    params.handle
                ),
            );
            return Err(INVALID_VALUE);
        }
        if params.context != 0 {
            self.context(params.context)?;
        }
        let version = crate::base::abi::simulated_version();
        let valid = match (params.kind, params.size) {
            (COND_IF, 1) | (COND_WHILE, 1) => true,
            (COND_IF, 2) | (COND_SWITCH, 1..) if version < 12080 => {
                return Err(NOT_SUPPORTED);
            }
            (COND_IF, 2) | (COND_SWITCH, 1..) => true,
            _ => false,
        };
        if !valid {
            return Err(INVALID_VALUE);
        }
        if params.size > MAX_SWITCH_BODIES {
            return Err(OUT_OF_MEMORY);
        }
        let mut bodies: Vec<Raw> = Vec::new();
        bodies
            .try_reserve_exact(params.size as usize)
            .map_err(|_| OUT_OF_MEMORY)?;
        bodies.extend((0..params.size).map(|_| self.create_graph()));
        let op = Op::Conditional(Box::new(ConditionalOp {
            handle: params.handle,
            kind: params.kind,
            bodies: bodies.clone(),
            resolved: None,
        }));
        let node = match self.add_node(graph, deps, op) {
            Ok(node) => node,
            Err(code) => {
                for body in bodies {
                    self.remove_graph(body);
                }
                return Err(code);
            }
        };
        for &body in &bodies {
            self.conditionals.bodies.insert(body, graph);
        }
        if let Some(handle) = self.conditionals.handles.get_mut(&params.handle) {
            handle.node = Some(node);
        }
        let mut array = bodies.into_boxed_slice();
        let address = array.as_mut_ptr();
        self.conditionals.arrays.insert(node, array);
        Ok((node, address))
    }

    /// The operations of `ops` made ready to run: conditional nodes get their bodies'
    /// operations (copied now, recursively), kernels are marked as launches of `exec`, and
    /// every handle a conditional node reads is added to `handles`.
    pub fn resolve(&self, ops: Vec<Op>, exec: Option<Raw>, handles: &mut Vec<u64>) -> Vec<Op> {
        ops.into_iter()
            .map(|op| match op {
                Op::Kernel(mut launch) => {
                    if exec.is_some() {
                        launch.exec = exec;
                    }
                    Op::Kernel(launch)
                }
                Op::Child(children) => Op::Child(self.resolve(children, exec, handles)),
                Op::Conditional(mut conditional) => {
                    handles.push(conditional.handle);
                    let bodies = match conditional.resolved.take() {
                        Some(bodies) => bodies,
                        None => conditional
                            .bodies
                            .iter()
                            .map(|body| {
                                self.graphs.get(body).map_or_else(Vec::new, |graph| {
                                    graph.nodes.iter().map(|n| n.op.clone()).collect()
                                })
                            })
                            .collect(),
                    };
                    conditional.resolved = Some(
                        bodies
                            .into_iter()
                            .map(|body| self.resolve(body, exec, handles))
                            .collect(),
                    );
                    Op::Conditional(conditional)
                }
                op => op,
            })
            .collect()
    }

    /// Records the handles executable graph `exec`'s conditional nodes read.
    pub fn note_exec_handles(&mut self, exec: Raw, mut handles: Vec<u64>) {
        handles.sort_unstable();
        handles.dedup();
        self.conditionals.execs.insert(exec, handles);
    }

    /// The handles executable graph `exec`'s conditional nodes read (none for an unknown exec).
    pub fn exec_handles(&self, exec: Raw) -> Vec<u64> {
        self.conditionals
            .execs
            .get(&exec)
            .cloned()
            .unwrap_or_default()
    }

    /// The start of a launch: each of `handles` (those its exec reads) takes its default, or
    /// becomes undefined.
    pub fn reset_conditionals(&mut self, handles: &[u64]) {
        for raw in handles {
            if let Some(handle) = self.conditionals.handles.get_mut(raw) {
                handle.value = handle.default;
            }
        }
    }

    /// `cudaGraphSetConditional(handle, value)` by kernel `name`, launched by `exec` (`None`:
    /// on a stream).
    pub fn set_conditional(&mut self, exec: Option<Raw>, name: &str, handle: u64, value: u32) {
        let Some(exec) = exec else {
            self.checker.violation(
                "conditional-set",
                format!(
                    "kernel {name}, launched on a stream, sets conditional handle {handle:#x}: only a launch of its graph may"
                ),
            );
            return;
        };
        let reads = self
            .conditionals
            .execs
            .get(&exec)
            .is_some_and(|handles| handles.contains(&handle));
        if !reads {
            self.checker.violation(
                "conditional-set",
                format!(
                    "kernel {name} of graph exec {exec:#x} sets conditional handle {handle:#x}, which no conditional node of that graph reads"
                ),
            );
            return;
        }
        if let Some(h) = self.conditionals.handles.get_mut(&handle) {
            h.value = Some(value);
        }
    }

    /// The value of `handle` for its node now; undefined is a violation (read as 0).
    fn condition(&mut self, handle: u64) -> u32 {
        match self.conditionals.handles.get(&handle).and_then(|h| h.value) {
            Some(value) => value,
            None => {
                self.checker.violation(
                    "conditional-undefined",
                    format!(
                        "a conditional node reads handle {handle:#x}, which has no default and was not set in this launch"
                    ),
                );
                0
            }
        }
    }

    /// Executes a conditional node on `target`.
    pub fn run_conditional(
        &mut self,
        target: Target,
        conditional: &ConditionalOp,
    ) -> Result<(), CuResult> {
        let Some(bodies) = &conditional.resolved else {
            // Only instantiated graphs run: their nodes are resolved.
            return Err(INVALID_VALUE);
        };
        self.enqueue(target);
        match conditional.kind {
            COND_IF => {
                let value = self.condition(conditional.handle);
                let body = if value != 0 {
                    bodies.first()
                } else {
                    bodies.get(1)
                };
                if let Some(body) = body {
                    self.run_body(target, body)?;
                }
            }
            COND_WHILE => {
                let mut runs = 0u64;
                while self.condition(conditional.handle) != 0 {
                    if runs == MAX_ITERATIONS {
                        self.checker.violation(
                            "conditional-loop",
                            format!(
                                "a while node on handle {:#x} ran its body {runs} times without the handle becoming 0",
                                conditional.handle
                            ),
                        );
                        break;
                    }
                    self.run_body(target, &bodies[0])?;
                    runs += 1;
                }
            }
            _ => {
                let value = self.condition(conditional.handle) as usize;
                if let Some(body) = bodies.get(value) {
                    self.run_body(target, body)?;
                }
            }
        }
        Ok(())
    }

    /// Runs a body's operations in order, now (a body holds no host functions or event
    /// operations, so nothing is deferred).
    fn run_body(&mut self, target: Target, ops: &[Op]) -> Result<(), CuResult> {
        for op in ops {
            match op {
                Op::Child(children) => self.run_body(target, children)?,
                op => {
                    let calls = self.execute(target, op)?;
                    debug_assert!(calls.is_empty(), "a body holds no host function");
                }
            }
        }
        Ok(())
    }

    /// Refuses `op` in `graph` when `graph` is a body that cannot hold it.
    pub fn check_body_node(&mut self, graph: Raw, op: &Op) -> Result<(), CuResult> {
        if self.is_body(graph) && !op.allowed_in_body() {
            self.checker.violation(
                "conditional-body",
                format!(
                    "a node of type {} added to body graph {graph:#x}: bodies hold kernel, memset, copy, empty, child and conditional nodes only",
                    op.node_type()
                ),
            );
            return Err(INVALID_VALUE);
        }
        Ok(())
    }

    /// Refuses to destroy or instantiate a body graph on its own (`what`).
    pub fn refuse_body(&mut self, graph: Raw, what: &str) -> Result<(), CuResult> {
        if self.is_body(graph) {
            self.checker.violation(
                "conditional-body",
                format!("{what} body graph {graph:#x}, which belongs to its conditional node"),
            );
            return Err(INVALID_VALUE);
        }
        Ok(())
    }

    /// `cuGraphAddChildGraphNode`: the child's operations, copied now.
    pub fn child_graph_op(&mut self, child: Raw) -> Result<Op, CuResult> {
        let ops: Vec<Op> = self
            .graph(child)?
            .nodes
            .iter()
            .map(|n| n.op.clone())
            .collect();
        if ops.iter().any(|op| matches!(op, Op::Conditional(_))) {
            self.checker.violation(
                "child-graph",
                format!("graph {child:#x} has conditional nodes, and cannot be a child graph"),
            );
            return Err(INVALID_VALUE);
        }
        Ok(Op::Child(ops))
    }

    /// `cuGraphDebugDotPrint`: the graph as DOT text.
    pub fn dot(&mut self, graph: Raw) -> Result<String, CuResult> {
        self.graph(graph)?;
        let mut text = String::from("digraph cuda_sim {\n");
        self.dot_graph(graph, 1, &mut text);
        text.push_str("}\n");
        Ok(text)
    }

    fn dot_graph(&self, graph: Raw, depth: usize, text: &mut String) {
        let indent = "  ".repeat(depth);
        let Some(g) = self.graphs.get(&graph) else {
            return;
        };
        for node in &g.nodes {
            let label = match &node.op {
                Op::Kernel(launch) => format!(
                    "kernel {:#x} grid {:?} block {:?}",
                    launch.kernel, launch.grid, launch.block
                ),
                Op::Memset { dst, count, .. } => format!("memset {dst:#x} x{count}"),
                Op::Memcpy { dst, src, len, .. } => {
                    format!("memcpy {src:#x} -> {dst:#x} ({len} bytes)")
                }
                Op::Conditional(c) => {
                    let kind = match c.kind {
                        COND_IF => "if",
                        COND_WHILE => "while",
                        _ => "switch",
                    };
                    format!("conditional {kind} on {:#x}", c.handle)
                }
                op => format!("node type {}", op.node_type()),
            };
            let _ = writeln!(text, "{indent}n{:x} [label=\"{label}\"];", node.raw);
            for dep in &node.deps {
                let _ = writeln!(text, "{indent}n{dep:x} -> n{:x};", node.raw);
            }
            if let Op::Conditional(c) = &node.op {
                for (i, body) in c.bodies.iter().enumerate() {
                    let _ = writeln!(
                        text,
                        "{indent}subgraph cluster_{body:x} {{ label=\"body {i} of n{:x}\";",
                        node.raw
                    );
                    self.dot_graph(*body, depth + 1, text);
                    let _ = writeln!(text, "{indent}}}");
                }
            }
        }
    }
}
