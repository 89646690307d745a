//! Graphs and executable graphs. A graph is a list of nodes in insertion order; a node can
//! only depend on nodes added before it, so that order is topological. Instantiation copies
//! the node list (the graph may be destroyed afterwards, as with the driver) and takes its own
//! references to the graph's user objects. A launch executes the nodes in order, one stream
//! operation per node on the launch stream's timeline, checking the handles and memory they
//! use then; for the data-race check (`races`) each node's operations carry the node, so that
//! only the graph's edges order the nodes of one launch. The nodes run in the exec's context
//! (the one current at instantiation), whatever the launch stream's, as driver 580 runs them:
//! their memory touches are checked for that context's device, and `cuCtxSynchronize` of that
//! context waits for the launch.

use std::collections::{BTreeMap, BTreeSet};

use crate::base::errors::INVALID_VALUE;
use crate::base::types::{CuResult, Raw};
use crate::order::checker::NodeTag;
use crate::resources::streams::Target;
use crate::resources::work::Op;
use crate::{Kind, Sim};

/// `CUgraphExecUpdateResult` values the simulator reports.
pub const UPDATE_SUCCESS: u32 = 0;
pub const UPDATE_ERROR_TOPOLOGY_CHANGED: u32 = 2;
pub const UPDATE_ERROR_NODE_TYPE_CHANGED: u32 = 3;
/// `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`.
pub const GRAPH_EXEC_UPDATE_FAILURE: CuResult = 910;

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH` and `…_USE_NODE_PRIORITY`: accepted
/// (there are no graph allocations to free, and node priorities do not change the order).
const INSTANTIATE_FLAGS: u64 = 1 | 8;

/// An operation of a graph launch, with the node it is (`None`: not a node, or a launch whose
/// nodes are taken as a chain).
pub type TaggedOp = (Op, Option<NodeTag>);

/// A node: its operation and the nodes it depends on.
#[derive(Clone, Debug)]
pub struct Node {
    pub raw: Raw,
    pub deps: Vec<Raw>,
    pub op: Op,
}

/// A graph (created, or made by a capture).
#[derive(Debug)]
pub struct Graph {
    pub raw: Raw,
    pub nodes: Vec<Node>,
    /// References held on user objects, by object.
    pub user_objects: BTreeMap<Raw, u32>,
    /// The capture session recording into it, while one does.
    pub capture: Option<u64>,
}

/// An executable graph.
#[derive(Debug)]
pub struct GraphExec {
    pub raw: Raw,
    pub nodes: Vec<Node>,
    pub user_objects: BTreeMap<Raw, u32>,
    /// The graph it was instantiated from (its nodes name the exec's nodes).
    pub graph: Raw,
    /// Nodes turned off by `cuGraphNodeSetEnabled`: launches run them as empty nodes.
    pub disabled: BTreeSet<Raw>,
    /// The context current at instantiation, which the nodes run in.
    pub context: Raw,
}

impl Sim {
    /// A live graph, or the error (and violation) for a destroyed one.
    pub fn graph(&mut self, raw: Raw) -> Result<&mut Graph, CuResult> {
        if !self.graphs.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::Graph, false));
        }
        Ok(self.graphs.get_mut(&raw).expect("checked"))
    }

    /// A live executable graph, or the error (and violation) for a destroyed one.
    pub fn graph_exec(&mut self, raw: Raw) -> Result<&mut GraphExec, CuResult> {
        if !self.execs.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::GraphExec, false));
        }
        Ok(self.execs.get_mut(&raw).expect("checked"))
    }

    pub fn create_graph(&mut self) -> Raw {
        let raw = self.new_raw(Kind::Graph);
        self.graphs.insert(
            raw,
            Graph {
                raw,
                nodes: Vec::new(),
                user_objects: BTreeMap::new(),
                capture: None,
            },
        );
        raw
    }

    /// Removes a live graph, dropping its user-object references.
    pub fn remove_graph(&mut self, raw: Raw) {
        if let Some(graph) = self.graphs.remove(&raw) {
            self.bury(raw, Kind::Graph);
            self.drop_references(graph.user_objects);
            // Conditional nodes' bodies go with their graph.
            for node in &graph.nodes {
                self.conditionals.arrays.remove(&node.raw);
            }
            for body in self.bodies_of(raw) {
                self.conditionals.bodies.remove(&body);
                self.remove_graph(body);
            }
            self.release_graph_memory(&graph.nodes);
        }
    }

    pub fn destroy_graph(&mut self, raw: Raw) -> Result<(), CuResult> {
        if !self.graphs.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::Graph, true));
        }
        self.refuse_body(raw, "destroying")?;
        self.remove_graph(raw);
        Ok(())
    }

    /// Adds a node depending on `deps`, which must be distinct nodes of the graph.
    pub fn add_node(&mut self, graph: Raw, deps: &[Raw], op: Op) -> Result<Raw, CuResult> {
        self.check_body_node(graph, &op)?;
        let known = &self.graph(graph)?.nodes;
        for (i, dep) in deps.iter().enumerate() {
            if deps[..i].contains(dep) || !known.iter().any(|n| n.raw == *dep) {
                return Err(INVALID_VALUE);
            }
        }
        let raw = self.new_raw(Kind::GraphNode);
        self.graphs
            .get_mut(&graph)
            .expect("checked")
            .nodes
            .push(Node {
                raw,
                deps: deps.to_vec(),
                op,
            });
        Ok(raw)
    }

    /// `cuGraphInstantiateWithFlags`: needs a current context, like the driver.
    pub fn instantiate(&mut self, graph: Raw, flags: u64) -> Result<Raw, CuResult> {
        if flags & !INSTANTIATE_FLAGS != 0 {
            return Err(INVALID_VALUE);
        }
        let context = self.require_current("cuGraphInstantiateWithFlags")?;
        self.refuse_body(graph, "instantiating")?;
        let source = graph;
        let graph = self.graph(graph)?;
        let mut nodes = graph.nodes.clone();
        let user_objects = graph.user_objects.clone();
        // The driver's one instantiation at a time of a graph with memory nodes: checked
        // before anything is taken.
        self.check_memory_instance(source)?;
        for (&object, &count) in &user_objects {
            if let Some(object) = self.user_objects.get_mut(&object) {
                object.refs += u64::from(count);
            }
        }
        let raw = self.new_raw(Kind::GraphExec);
        let mut handles = Vec::new();
        for node in &mut nodes {
            let op = std::mem::replace(&mut node.op, Op::Empty);
            node.op = self.resolve(vec![op], Some(raw), &mut handles).remove(0);
        }
        self.note_exec_handles(raw, handles);
        self.retain_graph_memory(source, raw, &nodes);
        self.execs.insert(
            raw,
            GraphExec {
                raw,
                nodes,
                user_objects,
                graph: source,
                disabled: BTreeSet::new(),
                context,
            },
        );
        Ok(raw)
    }

    /// `cuGraphExecDestroy`. The exec's references are dropped now. The conditional handles
    /// its nodes read are kept: a launch held back by a stream wait runs its kernels after the
    /// destroy (the driver frees an in-flight exec when its launch completes), and their sets
    /// of those handles are legal; raw handles are never reused, so the entry names no other.
    pub fn destroy_exec(&mut self, raw: Raw) -> Result<(), CuResult> {
        let Some(exec) = self.execs.remove(&raw) else {
            return Err(self.dead_handle(raw, Kind::GraphExec, true));
        };
        self.bury(raw, Kind::GraphExec);
        self.drop_references(exec.user_objects);
        self.forget_memory_instance(raw);
        self.release_graph_memory(&exec.nodes);
        Ok(())
    }

    /// `cuGraphExecUpdate_v2`: succeeds when `graph` has as many nodes as the exec, of the
    /// same types in the same order; the exec then runs `graph`'s parameters. Returns
    /// `(result, error node, error-from node)`; the exec keeps its user-object references.
    pub fn update_exec(&mut self, exec: Raw, graph: Raw) -> Result<(u32, Raw, Raw), CuResult> {
        self.graph_exec(exec)?;
        self.refuse_body(graph, "updating an executable graph from")?;
        let mut nodes = self.graph(graph)?.nodes.clone();
        let current = &self.execs[&exec].nodes;
        if current.len() != nodes.len() {
            return Ok((UPDATE_ERROR_TOPOLOGY_CHANGED, 0, 0));
        }
        for (old, new) in current.iter().zip(&nodes) {
            if old.op.node_type() != new.op.node_type() {
                return Ok((UPDATE_ERROR_NODE_TYPE_CHANGED, new.raw, old.raw));
            }
        }
        let mut handles = Vec::new();
        for node in &mut nodes {
            let op = std::mem::replace(&mut node.op, Op::Empty);
            node.op = self.resolve(vec![op], Some(exec), &mut handles).remove(0);
        }
        self.note_exec_handles(exec, handles);
        self.execs.get_mut(&exec).expect("checked").nodes = nodes;
        Ok((UPDATE_SUCCESS, 0, 0))
    }

    /// The operations a launch of `exec` runs on `target`, in order (child graphs
    /// expanded), and the target they run on: `target`'s stream, running work of the exec's
    /// context. On another context's stream the last operation is `Op::LaunchDone`, and the
    /// exec's context counts the launch as pending until it ran. While `target` captures, the
    /// launch is recorded as one child-graph node and nothing is returned.
    pub fn graph_launch_ops(
        &mut self,
        exec: Raw,
        target: Target,
    ) -> Result<(Vec<TaggedOp>, Target), CuResult> {
        let context = self.graph_exec(exec)?.context;
        // A destroyed context leaves the nodes to the stream's (the driver's behaviour then
        // was not measured).
        let work = match self.contexts.get(&context) {
            Some(ctx) => target.running(context, ctx.device),
            None => target,
        };
        let handles = self.exec_handles(exec);
        let ops: Vec<Op> = {
            let graph_exec = self.graph_exec(exec)?;
            // The launch starts with its conditional handles at their defaults; a disabled
            // node runs as an empty one.
            std::iter::once(Op::ResetConditionals(handles))
                .chain(graph_exec.nodes.iter().map(
                    |n| match graph_exec.disabled.contains(&n.raw) {
                        true => Op::Empty,
                        false => n.op.clone(),
                    },
                ))
                .collect()
        };
        self.check_memory_launch(exec, &ops, target)?;
        if self.capturing.contains_key(&target.timeline) {
            self.capture_op(target, Op::Child(ops))?;
            return Ok((Vec::new(), work));
        }
        self.check_legacy_capture(target, false)?;
        // Each node's operations are tagged with the node, so that the race check orders the
        // nodes of this launch by the graph's edges only.
        let launch = {
            let nodes = &self.graph_exec(exec)?.nodes;
            // A node that waits for an event may wait for another node of the same launch:
            // then the launch's nodes are taken as a chain.
            match nodes.iter().any(|node| waits_for_event(&node.op)) {
                true => None,
                false => {
                    let deps = dependency_indices(nodes);
                    self.races.register_launch(&deps)
                }
            }
        };
        let mut flat = Vec::with_capacity(ops.len() + 1);
        for (index, op) in ops.into_iter().enumerate() {
            // The first operation resets the conditional handles; it is no node.
            let tag = index
                .checked_sub(1)
                .zip(launch)
                .map(|(node, launch)| NodeTag {
                    launch,
                    node: node as u32,
                });
            let mut expanded = Vec::new();
            Op::flatten(vec![op], &mut expanded);
            flat.extend(expanded.into_iter().map(|op| (op, tag)));
        }
        if work.work != target.context {
            self.foreign_launch_started(work.work);
            flat.push((Op::LaunchDone(work.work), None));
        }
        Ok((flat, work))
    }
}

/// Whether `op` waits for an event, itself or in a child graph or conditional body.
fn waits_for_event(op: &Op) -> bool {
    match op {
        Op::EventWait(_) => true,
        Op::Child(ops) => ops.iter().any(waits_for_event),
        Op::Conditional(conditional) => conditional
            .resolved
            .iter()
            .flatten()
            .flatten()
            .any(waits_for_event),
        _ => false,
    }
}

/// For each node, the indices of the nodes it depends on (`usize::MAX` for one not in
/// `nodes`, which `Races::register_launch` refuses).
fn dependency_indices(nodes: &[Node]) -> Vec<Vec<usize>> {
    let index: std::collections::HashMap<Raw, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.raw, i))
        .collect();
    nodes
        .iter()
        .map(|node| {
            node.deps
                .iter()
                .map(|dep| index.get(dep).copied().unwrap_or(usize::MAX))
                .collect()
        })
        .collect()
}
