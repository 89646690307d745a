//! The conditional-handle kernel parameter: a [`ConditionalHandle`] passed as [`Conditional`]
//! lets a kernel of a graph set the value that a conditional node of that graph reads
//! (device side: `cudaGraphSetConditional(handle, value)`).
//!
//! A handle is made on a graph (`GraphHandle::create_conditional`, in `graph/conditional.rs`)
//! and means something only to launches of that graph: the node checks of `graph/` refuse it
//! in any other graph's kernel nodes, and the stream launches of `launch.rs` refuse every
//! kernel with a conditional argument (no graph runs them, and the driver gives a set from
//! outside a graph launch no meaning).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// A kernel parameter that is a graph's conditional handle (`CUgraphConditionalHandle`, a
/// 64-bit value): a launch passes a `&ConditionalHandle`. Allowed only in kernel nodes of the
/// graph the handle was made for (or of graphs nested in it); a launch on a stream is refused.
#[derive(Clone, Copy, Debug)]
pub struct Conditional;

/// A conditional node's condition (`cuGraphConditionalHandleCreate`): made on one graph,
/// read by one conditional node of that graph (or of a body graph nested in it), and set by
/// its kernels through a [`Conditional`] parameter.
///
/// Ownership: the driver keeps the handle as long as its graph; it has no destructor. Keeps
/// alive: nothing (the graph's own handles keep the graph).
#[derive(Clone, Debug)]
pub struct ConditionalHandle {
    raw: u64,
    /// The id of the graph it was made on.
    graph: u64,
    /// The id of that graph's outermost graph (itself, unless it is a body graph).
    root: u64,
    default: Option<u32>,
    /// Whether a conditional node already reads it (shared by the clones).
    used: Arc<AtomicBool>,
    /// The kernel nodes that take it as a parameter, and what its reading node found (shared
    /// by the clones).
    uses: Arc<Mutex<Uses>>,
}

/// Which nodes set a conditional handle, and whether the node that reads it finds it defined.
#[derive(Debug, Default)]
struct Uses {
    /// Each kernel node that takes the handle: its graph's id and its node (as the graph's book
    /// keys it).
    setters: Vec<(u64, usize)>,
    /// Once a conditional node reads it: whether the condition is defined when that node runs
    /// (a default, or a setter the node depends on in its own graph).
    read: Option<bool>,
}

impl ConditionalHandle {
    pub(crate) fn new(raw: u64, graph: u64, root: u64, default: Option<u32>) -> Self {
        ConditionalHandle {
            raw,
            graph,
            root,
            default,
            used: Arc::new(AtomicBool::new(false)),
            uses: Arc::new(Mutex::new(Uses::default())),
        }
    }

    /// The driver's handle value.
    pub fn as_cu(&self) -> u64 {
        self.raw
    }

    /// The id of the graph it was made on (see [`crate::graph::GraphHandle::id`]).
    pub fn graph_id(&self) -> u64 {
        self.graph
    }

    /// The value assigned at the start of every launch, if one was given at creation
    /// (`CU_GRAPH_COND_ASSIGN_DEFAULT`); without one, the value at a launch's start is
    /// undefined until a kernel sets it.
    pub fn default_value(&self) -> Option<u32> {
        self.default
    }

    /// The outermost graph's id, which every kernel node that sets the handle must share.
    pub(crate) fn root_id(&self) -> u64 {
        self.root
    }

    /// Marks the handle as read by a conditional node; `Err(ConditionalInUse)` if one does
    /// already. [`Self::release`] undoes it when the node could not be added.
    pub(crate) fn claim(&self) -> Result<()> {
        if self.used.swap(true, Ordering::AcqRel) {
            return Err(Error::ConditionalInUse);
        }
        Ok(())
    }

    /// Notes that kernel node `node` of graph `graph` takes it as a parameter (so may set it).
    pub(crate) fn note_setter(&self, graph: u64, node: usize) {
        crate::sync::lock(&self.uses).setters.push((graph, node));
    }

    /// The kernel nodes of graph `graph` that take it as a parameter.
    pub(crate) fn setters_in(&self, graph: u64) -> Vec<usize> {
        crate::sync::lock(&self.uses)
            .setters
            .iter()
            .filter(|&&(of, _)| of == graph)
            .map(|&(_, node)| node)
            .collect()
    }

    /// Whether kernel node `node` of graph `graph` takes it as a parameter.
    pub(crate) fn is_set_by(&self, graph: u64, node: usize) -> bool {
        crate::sync::lock(&self.uses)
            .setters
            .contains(&(graph, node))
    }

    /// Notes that a conditional node now reads it, finding it `defined` or not.
    pub(crate) fn note_reader(&self, defined: bool) {
        crate::sync::lock(&self.uses).read = Some(defined);
    }

    /// Whether the node that reads it would read an undefined value at every launch: no default,
    /// and no kernel node that the reading node depends on (in its own graph) takes it.
    pub(crate) fn never_defined(&self) -> bool {
        crate::sync::lock(&self.uses).read == Some(false)
    }

    /// Whether kernel nodes set it but no conditional node reads it: the driver gives such a
    /// set no meaning (the simulator's `conditional-set`).
    pub(crate) fn set_but_never_read(&self) -> bool {
        let uses = crate::sync::lock(&self.uses);
        uses.read.is_none() && !uses.setters.is_empty()
    }

    /// Undoes [`Self::claim`] (the driver refused the node).
    pub(crate) fn release(&self) {
        self.used.store(false, Ordering::Release);
    }
}
