//! Graph-owned memory (allocation and free nodes), the per-node setters of executable graphs
//! and turning nodes off and on.
//!
//! An allocation node reserves its address range from the device's arena when it is added;
//! the address stays fixed for the graph and every executable graph made from it, and the range
//! is given back once the graph and those executable graphs are all destroyed. At a launch the
//! allocation node makes the range a live allocation (as the first use, on the launch's stream)
//! and the free node frees it (checked like a stream-ordered free): a use outside the two, in
//! that launch or after it, is a **use-after-free**, and the range outside every launch is in
//! no allocation. The driver's rules, as measured on driver 580 (`gpu_graph_update.rs`,
//! `driver_rules_of_memory_nodes`): a second instantiation of a graph with memory nodes while the
//! first lives fails; a launch while a previous launch's allocation (one the graph does not
//! free) is still live fails; launches of one executable graph are ordered one after the
//! other, whatever their streams (a launch here waits for the previous one's clock).
//!
//! A node of an executable graph is named by its source graph's node, which dies with that
//! graph: every setter refuses, with a violation, once the source graph is destroyed.
//!
//! Not modelled: a second launch of the same executable graph on another stream while the first
//! waits behind a host function (the second runs at once, not after the first).

use std::collections::{BTreeMap, HashMap};

use crate::api::exports_graphs::{add_node, kernel_op, memcpy_op, memset_op};
use crate::base::abi::{get, put};
use crate::base::errors::INVALID_VALUE;
use crate::base::types::*;
use crate::order::checker::Stamp;
use crate::resources::memory::{AllocKind, rounded};
use crate::resources::streams::Target;
use crate::resources::work::{NODE_KERNEL, NODE_MEMCPY, NODE_MEMSET, Op};
use crate::{Sim, with_sim};

/// `CUDA_ERROR_NOT_SUPPORTED`: what driver 580 answers a second instantiation of a graph with
/// memory nodes while the first lives.
pub const SECOND_INSTANCE: CuResult = 801;

/// One allocation node's reserved range.
#[derive(Debug)]
pub struct Reserved {
    pub size: u64,
    pub block: u64,
    pub device: usize,
    /// The graph and executable graphs holding it.
    pub refs: u32,
}

/// The simulator's graph-owned memory.
#[derive(Debug, Default)]
pub struct GraphMemory {
    pub reserved: BTreeMap<u64, Reserved>,
    /// The live executable graph of each graph with memory nodes.
    pub instance: HashMap<Raw, Raw>,
    /// The clock at the end of each executable graph's last launch.
    pub last_launch: HashMap<Raw, Stamp>,
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (v1).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemAllocNodeParams {
    pub pool_props: MemPoolProps,
    pub access_descs: *const MemAccessDesc,
    pub access_desc_count: usize,
    pub bytesize: usize,
    pub dptr: CuDevicePtr,
}

fn memory_addresses(nodes: &[crate::resources::graphs::Node]) -> impl Iterator<Item = u64> + '_ {
    nodes.iter().filter_map(|node| match node.op {
        Op::GraphAlloc { addr, .. } => Some(addr),
        _ => None,
    })
}

impl Sim {
    /// Reserves `size` bytes on `device` for an allocation node of a graph.
    fn reserve_graph_memory(&mut self, device: usize, size: usize) -> Result<u64, CuResult> {
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let block = rounded(size as u64).ok_or(INVALID_VALUE)?;
        let budget = self.budget(Some(device));
        let arena = &mut self.devices[device].sync_arena;
        let (offset, _) = arena.alloc(block, budget)?;
        let addr = arena.base as u64 + offset;
        self.graph_memory.reserved.insert(
            addr,
            Reserved {
                size: size as u64,
                block,
                device,
                refs: 1,
            },
        );
        Ok(addr)
    }

    /// An executable graph made from `graph` takes its own hold of the graph's ranges.
    pub fn retain_graph_memory(
        &mut self,
        graph: Raw,
        exec: Raw,
        nodes: &[crate::resources::graphs::Node],
    ) {
        let mut any = false;
        for addr in memory_addresses(nodes) {
            any = true;
            if let Some(reserved) = self.graph_memory.reserved.get_mut(&addr) {
                reserved.refs += 1;
            }
        }
        if any {
            self.graph_memory.instance.insert(graph, exec);
        }
    }

    /// Drops a graph's or an executable graph's hold of its ranges; a range no one holds is
    /// given back (unmapped first if a launch left it live).
    pub fn release_graph_memory(&mut self, nodes: &[crate::resources::graphs::Node]) {
        let addrs: Vec<u64> = memory_addresses(nodes).collect();
        for addr in addrs {
            let Some(reserved) = self.graph_memory.reserved.get_mut(&addr) else {
                continue;
            };
            reserved.refs -= 1;
            if reserved.refs > 0 {
                continue;
            }
            let reserved = self.graph_memory.reserved.remove(&addr).expect("present");
            if self
                .allocs
                .get(&addr)
                .is_some_and(|a| a.kind == AllocKind::Graph)
            {
                let operation = self.checker.host_op();
                self.remove_alloc(addr, operation);
            }
            let arena = &mut self.devices[reserved.device].sync_arena;
            arena.free(addr - arena.base as u64, reserved.block);
            arena.trim(0);
        }
    }

    /// The one-instantiation rule of graphs with memory nodes.
    pub fn check_memory_instance(&mut self, graph: Raw) -> Result<(), CuResult> {
        let has_memory = memory_addresses(&self.graphs[&graph].nodes)
            .next()
            .is_some();
        if has_memory && self.graph_memory.instance.contains_key(&graph) {
            return Err(SECOND_INSTANCE);
        }
        Ok(())
    }

    pub fn forget_memory_instance(&mut self, exec: Raw) {
        self.graph_memory.instance.retain(|_, e| *e != exec);
        self.graph_memory.last_launch.remove(&exec);
    }

    /// A launch of `exec` running `ops` on `target`: refused while an allocation of a previous
    /// launch is still live; ordered after the previous launch (the driver serialises launches
    /// of one executable graph).
    pub fn check_memory_launch(
        &mut self,
        exec: Raw,
        ops: &[Op],
        target: Target,
    ) -> Result<(), CuResult> {
        for op in ops {
            if let Op::GraphAlloc { addr, .. } = op
                && self.allocs.contains_key(addr)
            {
                return Err(INVALID_VALUE);
            }
        }
        if let Some(stamp) = self.graph_memory.last_launch.get(&exec).cloned() {
            self.checker.wait_stamp(target.timeline, &stamp);
        }
        Ok(())
    }

    /// Notes the end of a launch of `exec` on `timeline`.
    pub fn note_exec_launched(&mut self, exec: Raw, timeline: usize) {
        if self.execs.contains_key(&exec) {
            let stamp = self.checker.stamp(timeline);
            self.graph_memory.last_launch.insert(exec, stamp);
        }
    }

    /// An allocation node runs: its range becomes a live allocation, first used by `target`.
    pub fn run_graph_alloc(
        &mut self,
        target: Target,
        addr: u64,
        size: u64,
    ) -> Result<(), CuResult> {
        let Some(reserved) = self.graph_memory.reserved.get(&addr) else {
            return Err(INVALID_VALUE);
        };
        let (block, device) = (reserved.block, reserved.device);
        if self.allocs.contains_key(&addr) {
            return Err(INVALID_VALUE);
        }
        let operation = self.enqueue(target);
        self.record_alloc(
            addr,
            size,
            block,
            AllocKind::Graph,
            None,
            device,
            Some(target.work),
            Some(operation),
        );
        Ok(())
    }

    /// A free node runs: checked like a stream-ordered free; the range stays reserved.
    pub fn run_graph_free(&mut self, target: Target, addr: u64) -> Result<(), CuResult> {
        let alloc = self.allocation_to_free(addr, &[AllocKind::Graph])?;
        let operation = self.enqueue(target);
        self.check_free_order(&alloc, operation);
        self.remove_alloc(addr, operation);
        Ok(())
    }

    /// The check of every call that names a node of `exec` by its source graph's node: that
    /// graph must be alive, since its nodes die with it (driver 580 answers
    /// `CUDA_ERROR_INVALID_VALUE` then; here it is also a **destroyed-handle** violation).
    fn check_exec_source(&mut self, exec: Raw) -> Result<(), CuResult> {
        let source = self.graph_exec(exec)?.graph;
        if !self.graphs.contains_key(&source) {
            self.dead_handle(source, crate::Kind::Graph, false);
            return Err(INVALID_VALUE);
        }
        Ok(())
    }

    /// Replaces the operation of `node` of `exec`, which must be a node of type `node_type`.
    fn set_exec_node(
        &mut self,
        exec: Raw,
        node: Raw,
        node_type: u32,
        op: Op,
    ) -> Result<(), CuResult> {
        self.check_exec_source(exec)?;
        let exec = self.graph_exec(exec)?;
        let Some(slot) = exec.nodes.iter_mut().find(|n| n.raw == node) else {
            return Err(INVALID_VALUE);
        };
        if slot.op.node_type() != node_type {
            return Err(INVALID_VALUE);
        }
        slot.op = op;
        Ok(())
    }
}

export_fns! {
    fn cuGraphAddMemAllocNode(
        node: *mut Raw,
        graph: Raw,
        deps: *const Raw,
        count: usize,
        params: *mut MemAllocNodeParams
    ) {
        let mut p = get(params.cast_const())?;
        // Pinned device memory of one device, no access descriptors beyond its own.
        if p.pool_props.alloc_type != 1 || p.pool_props.location.kind != 1 {
            return Err(INVALID_VALUE);
        }
        let device = usize::try_from(p.pool_props.location.id).map_err(|_| INVALID_VALUE)?;
        let mut made = 0;
        add_node(node, graph, deps, count, |sim| {
            if device >= sim.devices.len() {
                return Err(INVALID_VALUE);
            }
            let addr = sim.reserve_graph_memory(device, p.bytesize)?;
            made = addr;
            Ok(Op::GraphAlloc { addr, size: p.bytesize as u64 })
        })?;
        p.dptr = made;
        put(params, p)
    }

    fn cuGraphAddMemFreeNode(node: *mut Raw, graph: Raw, deps: *const Raw, count: usize, dptr: CuDevicePtr) {
        add_node(node, graph, deps, count, |sim| {
            let nodes = &sim.graph(graph)?.nodes;
            let allocated = memory_addresses(nodes).any(|addr| addr == dptr);
            let freed = nodes.iter().any(|n| matches!(n.op, Op::GraphFree { addr } if addr == dptr));
            if !allocated || freed {
                return Err(INVALID_VALUE);
            }
            Ok(Op::GraphFree { addr: dptr })
        })
    }

    fn cuGraphExecKernelNodeSetParams_v2(exec: Raw, node: Raw, params: *const KernelNodeParams) {
        let params = get(params)?;
        with_sim(|sim| {
            sim.graph_exec(exec)?;
            let op = kernel_op(sim, &params, "cuGraphExecKernelNodeSetParams_v2")?;
            sim.set_exec_node(exec, node, NODE_KERNEL, op)
        })
    }

    fn cuGraphExecMemsetNodeSetParams(exec: Raw, node: Raw, params: *const MemsetNodeParams, context: Raw) {
        let op = memset_op(&get(params)?)?;
        with_sim(|sim| {
            sim.context(context)?;
            sim.set_exec_node(exec, node, NODE_MEMSET, op)
        })
    }

    fn cuGraphExecMemcpyNodeSetParams(exec: Raw, node: Raw, params: *const Memcpy3D, context: Raw) {
        let op = memcpy_op(&get(params)?)?;
        with_sim(|sim| {
            sim.context(context)?;
            sim.set_exec_node(exec, node, NODE_MEMCPY, op)
        })
    }

    fn cuGraphNodeSetEnabled(exec: Raw, node: Raw, enabled: u32) {
        with_sim(|sim| {
            sim.check_exec_source(exec)?;
            let exec = sim.graph_exec(exec)?;
            let Some(found) = exec.nodes.iter().find(|n| n.raw == node) else {
                return Err(INVALID_VALUE);
            };
            if !matches!(found.op.node_type(), NODE_KERNEL | NODE_MEMSET | NODE_MEMCPY) {
                return Err(INVALID_VALUE);
            }
            if enabled == 0 {
                exec.disabled.insert(node);
            } else {
                exec.disabled.remove(&node);
            }
            Ok(())
        })
    }

    fn cuGraphNodeGetEnabled(exec: Raw, node: Raw, enabled: *mut u32) {
        let on = with_sim(|sim| {
            sim.check_exec_source(exec)?;
            let exec = sim.graph_exec(exec)?;
            if !exec.nodes.iter().any(|n| n.raw == node) {
                return Err(INVALID_VALUE);
            }
            Ok(!exec.disabled.contains(&node))
        })?;
        put(enabled, u32::from(on))
    }
}
