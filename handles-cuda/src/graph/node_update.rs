//! Per-node updates of an executable graph: a kernel node's arguments and configuration
//! (`cuGraphExecKernelNodeSetParams_v2`), a memset node's and a copy node's parameters
//! (`cuGraphExecMemsetNodeSetParams`, `cuGraphExecMemcpyNodeSetParams`), and turning a node off
//! and on (`cuGraphNodeSetEnabled`, `cuGraphNodeGetEnabled`).
//!
//! A node of the executable graph is named by the [`GraphNode`] of the graph it was
//! instantiated from (checked by the graph's id). The new parameters pass the same checks as
//! the node constructors (the kernel's bounds check, ranges, reach). An update replaces that
//! node's attachments only, under the executable graph's lock, so no launch reports the old
//! ones while running the new node; the old ones are released after the lock, and every launch
//! that used them reported its use when it was queued, so their release is ordered after those
//! launches: the one mechanism of whole-graph [`GraphExecHandle::update`]. After a whole-graph
//! update the nodes' attachments are no longer told apart: a node update then keeps the old
//! ones too (until the next whole-graph update or the executable graph's end).
//!
//! Graph-owned memory may be passed only where the node used it when it was added (its
//! dependencies were checked then): [`GraphRule::NewGraphMemory`] otherwise.

use cudarc::driver::sys::CUgraphNode;

use crate::code::config::LaunchConfig;
use crate::code::launch::TypedKernel;
use crate::code::params::KernelParams;
use crate::driver::call::driver;
use crate::driver::current::in_context;
use crate::error::{Error, GraphRule, Result};
use crate::exec::stream::StreamHandle;
use crate::graph::exec::GraphExecHandle;
use crate::graph::nodes::{Attachment, GraphHandle, GraphNode, kernel_node_params};
use crate::memory::device_ptr::DevicePtrHandle;
use crate::sync::lock;

impl GraphExecHandle {
    /// The raw node of this executable graph that `node` names.
    fn exec_node(&self, node: GraphNode) -> Result<CUgraphNode> {
        if node.graph != self.record().graph {
            return Err(Error::ForeignNode {
                node_graph: node.graph,
                graph: self.record().graph,
            });
        }
        if self
            .record()
            .nodes
            .binary_search(&(node.raw as usize))
            .is_err()
        {
            return Err(Error::GraphRule(GraphRule::NotInstantiated));
        }
        Ok(node.raw)
    }

    /// The ordinal of the device the nodes run on.
    fn node_device(&self) -> Result<usize> {
        match self.context().device() {
            Some(ordinal) => Ok(ordinal),
            None => StreamHandle::legacy_in(self.context())?.device_ordinal(),
        }
    }

    /// The reach check of a buffer passed to a node update of `node`.
    fn check_update_buffer(
        &self,
        node: CUgraphNode,
        buffer: &DevicePtrHandle,
        ordinal: usize,
    ) -> Result<()> {
        match buffer.graph_owner() {
            None => buffer.check_accessible_from(ordinal),
            Some(owner) if owner != self.record().graph => {
                Err(Error::GraphRule(GraphRule::OtherGraph {
                    owner,
                    graph: self.record().graph,
                }))
            }
            Some(_) => {
                let start = buffer.ordering_root().as_cu();
                let used = lock(&self.record().attachments)
                    .memory_uses
                    .contains(&(node as usize, start));
                if used {
                    Ok(())
                } else {
                    Err(Error::GraphRule(GraphRule::NewGraphMemory))
                }
            }
        }
    }

    /// Runs `set` (the driver call) under the executable graph's lock and, once it succeeded,
    /// makes `new` the node's attachments; the old ones are released after the lock.
    fn replace_node(
        &self,
        node: CUgraphNode,
        new: Vec<Attachment>,
        set: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut attached = lock(&self.record().attachments);
        in_context(self.context().as_cu(), set)?;
        let previous = attached.replace(node as usize, new);
        drop(attached);
        drop(previous);
        Ok(())
    }

    /// Sets a kernel node's kernel, configuration and arguments for later launches: the same
    /// checks as [`GraphHandle::add_kernel_node`]; the node keeps `kernel` and the buffers now,
    /// and what it kept before is released after the launches that used it.
    pub fn set_kernel_node_params<P: KernelParams>(
        &self,
        node: GraphNode,
        kernel: &TypedKernel<P>,
        config: &LaunchConfig,
        args: P::Args<'_>,
    ) -> Result<()> {
        let raw_node = self.exec_node(node)?;
        let ordinal = self.node_device()?;
        kernel.check_launch(config, &args, ordinal, |buffer| {
            self.check_update_buffer(raw_node, buffer, ordinal)
        })?;
        // As when the node was added: a conditional handle only of the graph's own hierarchy,
        // and the same ones the node took (what reads them was checked against those setters).
        let source = &self.record().source;
        source.check_conditionals::<P>(&args)?;
        source.refuse_setter_change::<P>(&node, &args)?;
        let mut attachments = vec![Attachment::Kernel(kernel.kernel().clone())];
        P::for_each_buffer(&args, |buffer| {
            if buffer.graph_owner().is_none() {
                attachments.push(Attachment::Buffer(buffer.clone()));
            }
        });
        let context = self.context().as_cu();
        self.replace_node(raw_node, attachments, || {
            P::with_pointers(&args, |params| {
                let node_params = kernel_node_params(config, kernel.kernel(), params, context);
                // SAFETY: the executable graph is alive and `raw_node` one of its nodes (named
                // by its source graph's id); the parameters are copied during the call; the
                // bounds check passed, and the node keeps the kernel and buffers from now on.
                unsafe {
                    driver!(cuGraphExecKernelNodeSetParams_v2(
                        self.as_cu(),
                        raw_node,
                        &node_params
                    ))
                }
            })
        })
    }

    /// Sets a memset node to fill `len` bytes of `buffer` from byte `offset` with `value` in
    /// later launches (as [`GraphHandle::add_memset_node`]). The driver requires the same
    /// device as the node's original buffer.
    pub fn set_memset_node_params(
        &self,
        node: GraphNode,
        buffer: &DevicePtrHandle,
        offset: usize,
        value: u8,
        len: usize,
    ) -> Result<()> {
        let raw_node = self.exec_node(node)?;
        let start = buffer.range(offset, len)?;
        self.check_update_buffer(raw_node, buffer, self.node_device()?)?;
        let params = GraphHandle::memset_params(start, value, len);
        let attachments = node_buffers([buffer]);
        self.replace_node(raw_node, attachments, || {
            // SAFETY: the executable graph is alive and `raw_node` one of its nodes; the range
            // lies in the buffer, which the node keeps from now on.
            unsafe {
                driver!(cuGraphExecMemsetNodeSetParams(
                    self.as_cu(),
                    raw_node,
                    &params,
                    self.context().as_cu()
                ))
            }
        })
    }

    /// Sets a copy node to copy `len` bytes from byte `src_offset` of `src` to byte
    /// `dst_offset` of `dst` in later launches (as [`GraphHandle::add_copy_node`]). The driver
    /// requires the same devices as the node's original buffers.
    pub fn set_copy_node_params(
        &self,
        node: GraphNode,
        src: &DevicePtrHandle,
        src_offset: usize,
        dst: &DevicePtrHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let raw_node = self.exec_node(node)?;
        let (from, to) = src.copy_ranges(src_offset, dst, dst_offset, len)?;
        let ordinal = self.node_device()?;
        self.check_update_buffer(raw_node, src, ordinal)?;
        self.check_update_buffer(raw_node, dst, ordinal)?;
        let params = GraphHandle::copy_params(from, to, len);
        let attachments = node_buffers([src, dst]);
        self.replace_node(raw_node, attachments, || {
            // SAFETY: the executable graph is alive and `raw_node` one of its nodes; both
            // ranges lie in their buffers, which the node keeps from now on.
            unsafe {
                driver!(cuGraphExecMemcpyNodeSetParams(
                    self.as_cu(),
                    raw_node,
                    &params,
                    self.context().as_cu()
                ))
            }
        })
    }

    /// Turns a node off (`false`: later launches skip it, as an empty node) or on again
    /// (`cuGraphNodeSetEnabled`; kernel, memset and copy nodes). The node keeps its
    /// attachments while off.
    pub fn set_node_enabled(&self, node: GraphNode, enabled: bool) -> Result<()> {
        let raw_node = self.exec_node(node)?;
        // The lock orders the change against launches reporting their uses.
        let _attached = lock(&self.record().attachments);
        // SAFETY: the executable graph is alive and `raw_node` one of its nodes.
        in_context(self.context().as_cu(), || unsafe {
            driver!(cuGraphNodeSetEnabled(
                self.as_cu(),
                raw_node,
                u32::from(enabled)
            ))
        })
    }

    /// Whether a node runs in later launches (`cuGraphNodeGetEnabled`).
    pub fn node_enabled(&self, node: GraphNode) -> Result<bool> {
        let raw_node = self.exec_node(node)?;
        let mut enabled: u32 = 0;
        // SAFETY: the executable graph is alive, `raw_node` one of its nodes, and `enabled` a
        // valid out-pointer.
        in_context(self.context().as_cu(), || unsafe {
            driver!(cuGraphNodeGetEnabled(self.as_cu(), raw_node, &mut enabled))
        })?;
        Ok(enabled != 0)
    }
}

/// The attachments of a memset or copy node: its buffers that are not graph-owned.
fn node_buffers<'a>(buffers: impl IntoIterator<Item = &'a DevicePtrHandle>) -> Vec<Attachment> {
    buffers
        .into_iter()
        .filter(|buffer| buffer.graph_owner().is_none())
        .map(|buffer| Attachment::Buffer(buffer.clone()))
        .collect()
}

impl GraphNode {
    /// The raw node, for driver calls this crate does not wrap (the caller keeps its graph
    /// alive, and passes it only with that graph or an executable graph made from it).
    pub fn as_cu(&self) -> CUgraphNode {
        self.raw
    }
}
