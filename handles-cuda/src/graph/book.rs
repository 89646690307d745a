//! What a graph records besides its driver object: the handles its nodes reference
//! (*attachments*), and its book of the nodes added through this crate (their dependencies,
//! where their attachments lie, its graph-owned memory), which `memory_nodes.rs` checks its
//! rules against and `node_update.rs` replaces one node's attachments by.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use cudarc::driver::sys::{CUdeviceptr, CUgraphNode};

use crate::code::conditional::ConditionalHandle;
use crate::code::kernel::KernelHandle;
use crate::error::{Error, GraphRule, Result};
use crate::exec::event::EventHandle;
use crate::graph::host::HostFunctionHandle;
use crate::memory::device_ptr::DevicePtrHandle;

/// A handle a graph node references, kept alive by the graph and its executable instances.
#[derive(Clone)]
pub(crate) enum Attachment {
    Buffer(DevicePtrHandle),
    Kernel(KernelHandle),
    /// Held only to keep the event alive.
    Event(#[allow(dead_code)] EventHandle),
    /// A host node's closure, which notes every launch's context.
    Host(HostFunctionHandle),
    /// A cooperative kernel node (captured with `LaunchOptions::cooperative`): the
    /// multiprocessors its grid needs to be resident at once, checked at every launch against
    /// the stream's context (a green context's share may be smaller than the capture's).
    Cooperative(u32),
}

/// One allocation node's memory.
pub(crate) struct Owned {
    pub(crate) start: CUdeviceptr,
    /// The allocation node, then every node that uses the memory.
    pub(crate) users: Vec<usize>,
    pub(crate) freed: bool,
}

/// A node's attachments: `len` of them from `start` in the graph's list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) node: usize,
    pub(crate) start: usize,
    pub(crate) len: usize,
}

/// What a graph knows of the nodes added through this crate: their dependencies, where their
/// attachments lie, and its graph-owned memory. Locked after the attachments.
#[derive(Default)]
pub(crate) struct Book {
    deps: HashMap<usize, Vec<usize>>,
    pub(crate) spans: Vec<Span>,
    pub(crate) memory: Vec<Owned>,
    /// The executable graph made from this graph, while one lives (graphs with memory nodes).
    instance: Weak<()>,
    /// The conditional handles that nodes of this graph, or of bodies nested in it, read or
    /// set (kept in the outermost graph's book).
    pub(crate) conditionals: Vec<ConditionalHandle>,
}

/// What `add_node` learned from a node's attachments: those to keep, and the graph-owned
/// memory the node uses (by start address).
pub(crate) struct Sorted {
    pub(crate) kept: Vec<Attachment>,
    pub(crate) owned: Vec<CUdeviceptr>,
}

impl Book {
    /// Whether `target` is one of `deps` or reached from them through dependencies.
    pub(crate) fn reaches(&self, deps: &[usize], target: usize) -> bool {
        let mut seen = HashSet::new();
        let mut stack: Vec<usize> = deps.to_vec();
        while let Some(node) = stack.pop() {
            if node == target {
                return true;
            }
            if seen.insert(node)
                && let Some(more) = self.deps.get(&node)
            {
                stack.extend_from_slice(more);
            }
        }
        false
    }

    pub(crate) fn owned(&self, start: CUdeviceptr) -> Option<&Owned> {
        self.memory.iter().find(|owned| owned.start == start)
    }

    /// Splits a new node's attachments into those the graph keeps and the graph-owned memory
    /// it uses, checking the memory's rules against the node's dependencies `deps`.
    pub(crate) fn sort(
        &self,
        graph: u64,
        deps: &[usize],
        attachments: impl IntoIterator<Item = Attachment>,
    ) -> Result<Sorted> {
        let mut sorted = Sorted {
            kept: Vec::new(),
            owned: Vec::new(),
        };
        for attachment in attachments {
            let Attachment::Buffer(buffer) = &attachment else {
                sorted.kept.push(attachment);
                continue;
            };
            let Some(owner) = buffer.graph_owner() else {
                sorted.kept.push(attachment);
                continue;
            };
            if owner != graph {
                return Err(Error::GraphRule(GraphRule::OtherGraph { owner, graph }));
            }
            let start = buffer.ordering_root().as_cu();
            let owned = self
                .owned(start)
                .ok_or(Error::GraphRule(GraphRule::OtherGraph { owner, graph }))?;
            if owned.freed {
                return Err(Error::GraphRule(GraphRule::AfterFree));
            }
            if !self.reaches(deps, owned.users[0]) {
                return Err(Error::GraphRule(GraphRule::BeforeAlloc));
            }
            if !sorted.owned.contains(&start) {
                sorted.owned.push(start);
            }
        }
        Ok(sorted)
    }

    /// Records a node added with `deps`, its attachments at `start..start + len` of the
    /// graph's list, and its uses of graph-owned memory.
    pub(crate) fn added(
        &mut self,
        node: CUgraphNode,
        deps: &[usize],
        start: usize,
        len: usize,
        owned: &[CUdeviceptr],
    ) {
        let node = node as usize;
        self.deps.insert(node, deps.to_vec());
        if len > 0 {
            self.spans.push(Span { node, start, len });
        }
        for memory in &mut self.memory {
            if owned.contains(&memory.start) {
                memory.users.push(node);
            }
        }
    }

    /// Every node added through this crate, sorted.
    pub(crate) fn nodes(&self) -> Vec<usize> {
        let mut nodes: Vec<usize> = self.deps.keys().copied().collect();
        nodes.sort_unstable();
        nodes
    }

    /// Whether the graph has memory nodes.
    pub(crate) fn has_memory(&self) -> bool {
        !self.memory.is_empty()
    }

    /// The pairs (node, graph-owned memory start) of every use, for an executable graph's node
    /// updates.
    pub(crate) fn memory_uses(&self) -> Vec<(usize, CUdeviceptr)> {
        self.memory
            .iter()
            .flat_map(|owned| owned.users.iter().map(|&node| (node, owned.start)))
            .collect()
    }

    /// `Err(GraphRule::UndefinedCondition)` if a conditional node reads a handle that has no
    /// default and that no kernel node before it (in its graph) takes: every launch would read
    /// an undefined condition (a while node could loop forever); `Err(ConditionalNeverRead)`
    /// if kernel nodes take a handle that no conditional node reads. Checked wherever a graph becomes executable
    /// (instantiation, and a whole-graph update from it).
    pub(crate) fn refuse_undefined_conditions(&self) -> Result<()> {
        if self
            .conditionals
            .iter()
            .any(ConditionalHandle::never_defined)
        {
            return Err(Error::GraphRule(GraphRule::UndefinedCondition));
        }
        if self
            .conditionals
            .iter()
            .any(ConditionalHandle::set_but_never_read)
        {
            return Err(Error::GraphRule(GraphRule::ConditionalNeverRead));
        }
        Ok(())
    }

    /// The rules of instantiation: conditions defined, every allocation freed, one executable
    /// graph at a time.
    /// Returns the token the executable graph keeps while it lives (graphs with memory nodes).
    pub(crate) fn instantiating(&mut self) -> Result<Option<Arc<()>>> {
        self.refuse_undefined_conditions()?;
        if !self.has_memory() {
            return Ok(None);
        }
        if self.memory.iter().any(|owned| !owned.freed) {
            return Err(Error::GraphRule(GraphRule::NotFreed));
        }
        if self.instance.strong_count() > 0 {
            return Err(Error::GraphRule(GraphRule::SecondInstance));
        }
        let token = Arc::new(());
        self.instance = Arc::downgrade(&token);
        Ok(Some(token))
    }
}
