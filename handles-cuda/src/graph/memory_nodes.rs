//! Graph-owned memory: allocation and free nodes (`cuGraphAddMemAllocNode`,
//! `cuGraphAddMemFreeNode`), checked against the graph's record of its nodes' dependencies
//! (`book.rs`).
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

use cudarc::driver::sys;

use crate::driver::call::driver;
use crate::error::{Error, GraphRule, Result};
use crate::graph::book::Owned;
use crate::graph::nodes::{GraphHandle, GraphNode};
use crate::memory::device_ptr::DevicePtrHandle;
use crate::memory::pool::PoolLocation;
use crate::sync::lock;

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
        self.refuse_in_body("a memory allocation node")?;
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
        self.refuse_in_body("a memory free node")?;
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
