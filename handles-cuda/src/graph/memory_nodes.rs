//! Graph-owned memory: allocation and free nodes (`cuGraphAddMemAllocNode`,
//! `cuGraphAddMemFreeNode`), and the graph's record of its nodes' dependencies, which the
//! rules below are checked against.
//!
//! # The rules
//!
//! The driver's rules (CUDA driver API documentation of `cuGraphAddMemAllocNode` and
//! `cuGraphAddMemFreeNode`, and measured on an H200 with driver 580: `tests/tests/gpu_graph_update.rs`
//! `driver_rules_of_memory_nodes` prints what the driver answers), and what this crate does
//! about each:
//!
//! | driver rule | here |
//! |---|---|
//! | the address is fixed when the node is added, for every instantiation and launch | the handle [`GraphHandle::add_mem_alloc_node`] returns carries it, with the graph's id |
//! | the memory may be used by nodes ordered after the allocation node and before the free node | a node using it must depend, directly or transitively, on the allocation node ([`GraphRule::BeforeAlloc`]), may not be added after the free node ([`GraphRule::AfterFree`]), and the free node must depend on every node that uses it ([`GraphRule::FreeBeforeUse`]) |
//! | memory not freed in its graph outlives the launch; launching again while it is live fails | every allocation node needs a free node before `instantiate` ([`GraphRule::NotFreed`]): the memory never lives outside a launch |
//! | freed once, and only inside its graph | one free node ([`GraphRule::BadFree`]); no other free exists: the handle frees nothing |
//! | one instantiation of a graph with memory nodes at a time | `instantiate` refuses while an executable graph made from it is alive ([`GraphRule::SecondInstance`]) |
//! | launches of one executable graph are ordered one after the other, whatever the streams | nothing to add: two launches never share the memory at once |
//! | whole-graph update does not take memory nodes | refused before the driver ([`GraphRule::UpdateWithMemory`]) |
//!
//! Outside its graph the memory is never mapped, so every other use is refused: the reach check
//! every stream-ordered use passes (`DevicePtrHandle::check_accessible_on`, and so captures)
//! answers [`GraphRule::OutsideGraph`], and nodes of other graphs [`GraphRule::OtherGraph`]. It
//! is not an attachment: the graph and its executable graph own it, and nothing outside them
//! can order anything against it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use cudarc::driver::sys::{self, CUdeviceptr, CUgraphNode};

use crate::driver::call::driver;
use crate::error::{Error, GraphRule, Result};
use crate::graph::nodes::{Attachment, GraphHandle, GraphNode};
use crate::memory::device_ptr::DevicePtrHandle;
use crate::memory::pool::PoolLocation;
use crate::sync::lock;

/// One allocation node's memory.
struct Owned {
    start: CUdeviceptr,
    /// The allocation node, then every node that uses the memory.
    users: Vec<usize>,
    freed: bool,
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
    memory: Vec<Owned>,
    /// The executable graph made from this graph, while one lives (graphs with memory nodes).
    instance: Weak<()>,
}

/// What `add_node` learned from a node's attachments: those to keep, and the graph-owned
/// memory the node uses (by start address).
pub(crate) struct Sorted {
    pub(crate) kept: Vec<Attachment>,
    pub(crate) owned: Vec<CUdeviceptr>,
}

impl Book {
    /// Whether `target` is one of `deps` or reached from them through dependencies.
    fn reaches(&self, deps: &[usize], target: usize) -> bool {
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

    fn owned(&self, start: CUdeviceptr) -> Option<&Owned> {
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

    /// The rules of instantiation: every allocation freed, one executable graph at a time.
    /// Returns the token the executable graph keeps while it lives (graphs with memory nodes).
    pub(crate) fn instantiating(&mut self) -> Result<Option<Arc<()>>> {
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

impl GraphHandle {
    /// Adds an allocation node: `size` bytes of device memory of the graph's device, allocated
    /// at every launch when the node runs, after `dependencies` (`cuGraphAddMemAllocNode`).
    ///
    /// The returned handle names the memory for nodes of this graph only: a node using it must
    /// depend on the returned node (directly or through others), and
    /// [`Self::add_mem_free_node`] must free it, after every such node, before the graph is
    /// instantiated. Any use outside this graph is refused with [`GraphRule::OutsideGraph`].
    /// The module documentation of `graph::memory_nodes` lists the driver's rules.
    pub fn add_mem_alloc_node(
        &self,
        dependencies: &[GraphNode],
        size: usize,
    ) -> Result<(GraphNode, DevicePtrHandle)> {
        if size == 0 {
            return Err(Error::ZeroSize {
                what: "the size of graph-owned memory",
            });
        }
        let ordinal = self.device_ordinal()?;
        // SAFETY: the props struct is plain data for which all-zero is the documented default.
        let mut pool_props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        pool_props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        pool_props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        pool_props.location = crate::memory::pool::raw_location(PoolLocation::Device(ordinal));
        let mut params = sys::CUDA_MEM_ALLOC_NODE_PARAMS {
            poolProps: pool_props,
            accessDescs: std::ptr::null(),
            accessDescCount: 0,
            bytesize: size,
            dptr: 0,
        };
        let graph = self.as_cu();
        let node = self.add_node(dependencies, [], |node, deps| {
            // SAFETY: the graph is alive; `deps` are nodes of this graph; `params` is fully
            // initialised and the driver writes the address into it during the call.
            unsafe {
                driver!(cuGraphAddMemAllocNode(
                    node,
                    graph,
                    deps.as_ptr(),
                    deps.len(),
                    &mut params
                ))
            }
        })?;
        if params.dptr == 0 {
            return Err(Error::NothingMade {
                what: "cuGraphAddMemAllocNode returned no address",
            });
        }
        // Registered before the handle exists, so no node can name the memory unregistered.
        lock(&self.record().book).memory.push(Owned {
            start: params.dptr,
            users: vec![node.raw as usize],
            freed: false,
        });
        Ok((
            node,
            DevicePtrHandle::graph_owned(params.dptr, size, self.id()),
        ))
    }

    /// Adds the free node of graph-owned `memory` (the whole allocation's handle that
    /// [`Self::add_mem_alloc_node`] returned), after `dependencies`, which must reach the
    /// allocation node and every node that uses the memory (`cuGraphAddMemFreeNode`). Once it
    /// is added, no further node may use the memory.
    pub fn add_mem_free_node(
        &self,
        dependencies: &[GraphNode],
        memory: &DevicePtrHandle,
    ) -> Result<GraphNode> {
        let graph = self.id();
        let owner = memory
            .graph_owner()
            .ok_or(Error::GraphRule(GraphRule::OutsideGraph))?;
        if owner != graph {
            return Err(Error::GraphRule(GraphRule::OtherGraph { owner, graph }));
        }
        if memory.ordering_root().as_cu() != memory.as_cu()
            || memory.ordering_root().size() != memory.size()
        {
            return Err(Error::GraphRule(GraphRule::BadFree));
        }
        let start = memory.as_cu();
        let raw_graph = self.as_cu();
        self.add_node_checked(
            dependencies,
            [],
            |book, deps| {
                let owned = book
                    .owned(start)
                    .ok_or(Error::GraphRule(GraphRule::BadFree))?;
                if owned.freed {
                    return Err(Error::GraphRule(GraphRule::BadFree));
                }
                if owned.users.iter().any(|&user| !book.reaches(deps, user)) {
                    return Err(Error::GraphRule(GraphRule::FreeBeforeUse));
                }
                Ok(())
            },
            |node, deps| {
                // SAFETY: the graph is alive; `deps` are nodes of this graph, which reach the
                // allocation node and every user of the memory (checked above, under the lock
                // that every node addition takes).
                unsafe {
                    driver!(cuGraphAddMemFreeNode(
                        node,
                        raw_graph,
                        deps.as_ptr(),
                        deps.len(),
                        start
                    ))
                }
            },
            |book| {
                if let Some(owned) = book.memory.iter_mut().find(|o| o.start == start) {
                    owned.freed = true;
                }
            },
        )
    }

    /// Whether the graph has allocation nodes.
    pub fn has_memory_nodes(&self) -> bool {
        lock(&self.record().book).has_memory()
    }
}
