//! CUDA graphs (`CUgraph`) and their executable instances (`CUgraphExec`), with everything
//! their nodes reference kept alive.
//!
//! A node holds raw values (a kernel, buffer addresses, an event), which the driver does not
//! keep alive. So every node added through this module also adds the handle behind each raw
//! value to the graph's *attachments*; instantiation copies them into the executable graph,
//! which holds them until it is destroyed or updated. An executable graph therefore outlives
//! every handle the program dropped, and stays launchable.
//!
//! Launching an executable graph reports each attached buffer as used on the launch's stream
//! and notes the launch's context in each attached kernel's library, exactly as a direct
//! launch does; so after the executable graph (or an update) releases a buffer, the buffer's
//! free is still ordered after every launch that used it.
//!
//! Captures are in `capture.rs`, executable graphs in `exec.rs`.

use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cudarc::driver::sys::{self, CUgraph, CUgraphNode};
use handles_core::ResourceHandle;

use crate::code::config::LaunchConfig;
use crate::code::kernel::KernelHandle;
use crate::code::launch::TypedKernel;
use crate::code::params::KernelParams;
use crate::driver::call::{deleter_status, driver, out};
use crate::driver::current::in_context;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::event::EventHandle;
use crate::exec::stream::StreamHandle;
pub(crate) use crate::graph::book::Attachment;
use crate::graph::book::Book;
use crate::graph::host::HostFunctionHandle;
use crate::memory::device_ptr::DevicePtrHandle;
use crate::sync::lock;

/// What makes a graph a conditional node's body: the outermost graph, which keeps what the
/// body's nodes reference (and, held here, keeps the body itself alive), and the ids of the
/// graphs that enclose it, innermost last.
pub(crate) struct Body {
    pub(crate) home: GraphHandle,
    pub(crate) enclosing: Vec<u64>,
}

/// A graph being built.
///
/// Ownership: [`GraphHandle::create`] and [`GraphHandle::capture`] own the graph and destroy
/// it when the last clone drops. Keeps alive: its context, and every handle its nodes
/// reference (buffers, kernels and so libraries, events).
#[derive(ResourceHandle)]
#[handle(raw = CUgraph, accessor = as_cu, delete = destroy_graph)]
pub struct Graph {
    /// The context the graph's nodes run in.
    #[owner]
    pub context: ContextHandle,
    /// A process-wide unique id: nodes carry it, so a node is only ever used in its graph.
    #[handle(copy)]
    pub id: u64,
    pub(crate) attachments: Mutex<Vec<Attachment>>,
    /// For a conditional node's body graph: the outermost graph, which keeps what the body's
    /// nodes reference, and the ids of the enclosing graphs (`conditional.rs`). `None` for a
    /// graph this crate created or captured, which it owns.
    pub(crate) body: Option<Body>,
    /// Set once the graph has a node that conditional bodies cannot hold (host and event
    /// nodes), so that it is refused as a child graph inside a body.
    pub(crate) not_for_bodies: AtomicBool,
    /// Set once the graph has a conditional node (the driver refuses it as a child graph) or a
    /// conditional handle (a copy could carry a kernel setting it outside its graph).
    pub(crate) has_conditional: AtomicBool,
    /// The nodes' dependencies, attachment spans and graph-owned memory (locked after
    /// `attachments`).
    pub(crate) book: Mutex<Book>,
}
// SAFETY: the CUDA driver API lets graphs be used and destroyed from any thread; adding nodes
// is serialised by the attachments' lock.
unsafe impl handles_core::ThreadSafe for Graph {}

fn destroy_graph(raw: CUgraph, graph: &Graph) -> Result<()> {
    if graph.body.is_some() {
        // A body graph belongs to its conditional node: the driver destroys it with its graph.
        return Ok(());
    }
    // SAFETY: the handle owns `raw` and this deleter runs once.
    deleter_status(unsafe { driver!(cuGraphDestroy(raw)) })
}

/// A node of a graph, to name as a dependency of later nodes of the same graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphNode {
    pub(crate) raw: CUgraphNode,
    pub(crate) graph: u64,
}

// SAFETY: a node is an identifier the driver hands out; it is only passed back to the driver
// together with its graph, which the caller's handle keeps alive.
unsafe impl Send for GraphNode {}
// SAFETY: as for `Send`.
unsafe impl Sync for GraphNode {}

pub(crate) static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

impl GraphHandle {
    /// An empty graph whose nodes will run in `context` (`cuGraphCreate`).
    pub fn create(context: &ContextHandle) -> Result<Self> {
        let context = &context.keep_alive()?;
        in_context(context.as_cu(), || {
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            let raw = out(|raw| unsafe { driver!(cuGraphCreate(raw, 0)) })?;
            Ok(Self::owning(raw, context, Vec::new()))
        })
    }

    pub(crate) fn owning(
        raw: CUgraph,
        context: &ContextHandle,
        attachments: Vec<Attachment>,
    ) -> Self {
        let record = Graph {
            context: context.clone(),
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            attachments: Mutex::new(attachments),
            body: None,
            not_for_bodies: AtomicBool::new(false),
            has_conditional: AtomicBool::new(false),
            book: Mutex::new(Book::default()),
        };
        // SAFETY: a fresh graph owned by nobody else; `destroy_graph` destroys it once.
        unsafe { GraphHandle::from_raw(raw, record) }
    }

    /// The ordinal of the device the graph's nodes run on.
    pub(crate) fn device_ordinal(&self) -> Result<usize> {
        match self.context().device() {
            Some(ordinal) => Ok(ordinal),
            None => StreamHandle::legacy_in(self.context())?.device_ordinal(),
        }
    }

    /// The graph whose attachments keep what this graph's nodes reference: the graph itself,
    /// or for a conditional body, the outermost graph.
    pub(crate) fn home(&self) -> &GraphHandle {
        match &self.record().body {
            Some(body) => &body.home,
            None => self,
        }
    }

    pub(crate) fn check_dependencies(
        &self,
        dependencies: &[GraphNode],
    ) -> Result<Vec<CUgraphNode>> {
        let id = self.id();
        if let Some(foreign) = dependencies.iter().find(|node| node.graph != id) {
            return Err(Error::ForeignNode {
                node_graph: foreign.graph,
                graph: id,
            });
        }
        Ok(dependencies.iter().map(|node| node.raw).collect())
    }

    /// Adds a node through `add` (the driver call) and attaches `attachments` to the graph,
    /// under the graph's lock. Graph-owned memory among them is checked against its rules
    /// (`memory_nodes.rs`) and recorded as used by the node instead of attached.
    pub(crate) fn add_node(
        &self,
        dependencies: &[GraphNode],
        attachments: impl IntoIterator<Item = Attachment>,
        add: impl FnOnce(*mut CUgraphNode, &[CUgraphNode]) -> Result<()>,
    ) -> Result<GraphNode> {
        self.add_node_checked(dependencies, attachments, |_, _| Ok(()), add, |_| {})
    }

    /// [`Self::add_node`] with `check` run first and `record` run after the node was added,
    /// both on the graph's book under its lock (the rules of free nodes).
    pub(crate) fn add_node_checked(
        &self,
        dependencies: &[GraphNode],
        attachments: impl IntoIterator<Item = Attachment>,
        check: impl FnOnce(&Book, &[usize]) -> Result<()>,
        add: impl FnOnce(*mut CUgraphNode, &[CUgraphNode]) -> Result<()>,
        record: impl FnOnce(&mut Book),
    ) -> Result<GraphNode> {
        let raw_dependencies = self.check_dependencies(dependencies)?;
        let keys: Vec<usize> = raw_dependencies.iter().map(|&node| node as usize).collect();
        // A conditional body's nodes attach to the outermost graph, which keeps them; the
        // dependency rules are the body's own (its book).
        let mut attached = lock(&self.home().record().attachments);
        let mut book = lock(&self.record().book);
        let sorted = book.sort(self.id(), &keys, attachments)?;
        check(&book, &keys)?;
        let mut node: CUgraphNode = std::ptr::null_mut();
        add(&mut node, &raw_dependencies)?;
        book.added(
            node,
            &keys,
            attached.len(),
            sorted.kept.len(),
            &sorted.owned,
        );
        record(&mut book);
        attached.extend(sorted.kept);
        Ok(GraphNode {
            raw: node,
            graph: self.id(),
        })
    }

    /// The reach check of a buffer a node of this graph uses: graph-owned memory is checked
    /// by `add_node` against the node's dependencies instead (it lies on the graph's device).
    pub(crate) fn check_node_buffer(buffer: &DevicePtrHandle, ordinal: usize) -> Result<()> {
        match buffer.graph_owner() {
            Some(_) => Ok(()),
            None => buffer.check_accessible_from(ordinal),
        }
    }

    /// Adds a kernel node: `kernel` launched with `config` and `args`, after `dependencies`.
    /// The configuration and the kernel's bounds check run now; the graph keeps the kernel
    /// and every buffer argument.
    pub fn add_kernel_node<P: KernelParams>(
        &self,
        dependencies: &[GraphNode],
        kernel: &TypedKernel<P>,
        config: &LaunchConfig,
        args: P::Args<'_>,
    ) -> Result<GraphNode> {
        let ordinal = self.device_ordinal()?;
        kernel.check_launch(config, &args, ordinal, |buffer| {
            Self::check_node_buffer(buffer, ordinal)
        })?;
        self.check_conditionals::<P>(&args)?;
        let mut attachments = vec![Attachment::Kernel(kernel.kernel().clone())];
        P::for_each_buffer(&args, |buffer| {
            attachments.push(Attachment::Buffer(buffer.clone()))
        });
        let context = self.context().as_cu();
        let node = self.add_node(dependencies, attachments, |node, deps| {
            P::with_pointers(&args, |params| {
                let node_params = kernel_node_params(config, kernel.kernel(), params, context);
                // SAFETY: the graph is alive; `deps` are nodes of this graph (checked by id);
                // the parameters are copied by the driver during the call; the kernel's
                // bounds check passed, and the graph keeps the kernel and buffers alive.
                unsafe {
                    driver!(cuGraphAddKernelNode_v2(
                        node,
                        self.as_cu(),
                        deps.as_ptr(),
                        deps.len(),
                        &node_params
                    ))
                }
            })
        })?;
        self.note_setters::<P>(&node, &args);
        Ok(node)
    }

    /// Adds a node that fills `len` bytes of `buffer` from byte `offset` with `value`.
    pub fn add_memset_node(
        &self,
        dependencies: &[GraphNode],
        buffer: &DevicePtrHandle,
        offset: usize,
        value: u8,
        len: usize,
    ) -> Result<GraphNode> {
        let start = buffer.range(offset, len)?;
        Self::check_node_buffer(buffer, self.device_ordinal()?)?;
        let params = Self::memset_params(start, value, len);
        let attachments = [Attachment::Buffer(buffer.clone())];
        self.add_node(dependencies, attachments, |node, deps| {
            // SAFETY: the graph and context are alive; the range lies in the buffer, which
            // the graph keeps alive.
            unsafe {
                driver!(cuGraphAddMemsetNode(
                    node,
                    self.as_cu(),
                    deps.as_ptr(),
                    deps.len(),
                    &params,
                    self.context().as_cu()
                ))
            }
        })
    }

    /// Adds a node that copies `len` bytes from byte `src_offset` of `src` to byte
    /// `dst_offset` of `dst` (device to device; the ranges must not overlap).
    pub fn add_copy_node(
        &self,
        dependencies: &[GraphNode],
        src: &DevicePtrHandle,
        src_offset: usize,
        dst: &DevicePtrHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<GraphNode> {
        let (from, to) = src.copy_ranges(src_offset, dst, dst_offset, len)?;
        let ordinal = self.device_ordinal()?;
        Self::check_node_buffer(src, ordinal)?;
        Self::check_node_buffer(dst, ordinal)?;
        let params = Self::copy_params(from, to, len);
        let attachments = [
            Attachment::Buffer(src.clone()),
            Attachment::Buffer(dst.clone()),
        ];
        self.add_node(dependencies, attachments, |node, deps| {
            // SAFETY: the graph and context are alive; both ranges lie in their buffers,
            // which the graph keeps alive.
            unsafe {
                driver!(cuGraphAddMemcpyNode(
                    node,
                    self.as_cu(),
                    deps.as_ptr(),
                    deps.len(),
                    &params,
                    self.context().as_cu()
                ))
            }
        })
    }

    /// Adds a node that records `event`.
    pub fn add_event_record_node(
        &self,
        dependencies: &[GraphNode],
        event: &EventHandle,
    ) -> Result<GraphNode> {
        self.add_event_node(dependencies, event, EventNode::Record)
    }

    /// Adds a node that waits for `event`.
    pub fn add_event_wait_node(
        &self,
        dependencies: &[GraphNode],
        event: &EventHandle,
    ) -> Result<GraphNode> {
        self.add_event_node(dependencies, event, EventNode::Wait)
    }

    /// The one path of the two event nodes: both attach the event, which the graph then keeps.
    fn add_event_node(
        &self,
        dependencies: &[GraphNode],
        event: &EventHandle,
        kind: EventNode,
    ) -> Result<GraphNode> {
        self.refuse_in_body(match kind {
            EventNode::Record => "an event record node",
            EventNode::Wait => "an event wait node",
        })?;
        if let EventNode::Record = kind {
            event.require_recordable_in(self.context().as_cu())?;
            // Every launch of the graph records the event, not through `record`.
            event.before_uncounted_records();
        }
        let (graph, raw_event) = (self.as_cu(), event.as_cu());
        let added = self.add_node(
            dependencies,
            [Attachment::Event(event.clone())],
            |node, deps| {
                let (deps, count) = (deps.as_ptr(), deps.len());
                // SAFETY: the graph and the event are alive; `deps` points at `count` nodes
                // that `add_node` checked belong to this graph; the graph keeps the event.
                unsafe {
                    match kind {
                        EventNode::Record => driver!(cuGraphAddEventRecordNode(
                            node, graph, deps, count, raw_event
                        )),
                        EventNode::Wait => {
                            driver!(cuGraphAddEventWaitNode(node, graph, deps, count, raw_event))
                        }
                    }
                }
            },
        )?;
        self.record().not_for_bodies.store(true, Ordering::Relaxed);
        Ok(added)
    }

    /// Adds a node that does nothing, to join dependencies.
    pub fn add_empty_node(&self, dependencies: &[GraphNode]) -> Result<GraphNode> {
        self.add_node(dependencies, [], |node, deps| {
            // SAFETY: the graph is alive; `deps` are nodes of this graph.
            unsafe {
                driver!(cuGraphAddEmptyNode(
                    node,
                    self.as_cu(),
                    deps.as_ptr(),
                    deps.len()
                ))
            }
        })
    }

    /// The number of handles the graph keeps alive for its nodes.
    pub fn attachment_count(&self) -> usize {
        lock(&self.home().record().attachments)
            .iter()
            .filter(|attachment| !matches!(attachment, Attachment::Cooperative(_)))
            .count()
    }
}

impl GraphHandle {
    /// Adds a node that calls `f` on a driver thread, after `dependencies`, at every launch
    /// of an executable graph made from this graph (`cuGraphAddHostNode`). The graph and its
    /// executable graphs keep `f`; it is dropped only after every launch that could call it has
    /// finished. As for `StreamHandle::launch_host`, `f` must not call CUDA, and a panic is
    /// caught and reported at each launch.
    pub fn add_host_node<F: Fn() + Send + Sync + 'static>(
        &self,
        dependencies: &[GraphNode],
        f: F,
    ) -> Result<GraphNode> {
        self.refuse_in_body("a host node")?;
        let function = HostFunctionHandle::new(Box::new(f));
        let params = cudarc::driver::sys::CUDA_HOST_NODE_PARAMS {
            fn_: Some(crate::graph::host::run_repeated),
            userData: function.address() as *mut c_void,
        };
        let graph = self.as_cu();
        let added = self.add_node(
            dependencies,
            [Attachment::Host(function.clone())],
            |node, deps| {
                // SAFETY: the graph is alive; `deps` are nodes of this graph; `params` names a
                // closure that the graph keeps alive through its attachment (and each
                // executable graph through its copy) until every launch that calls it ends.
                unsafe {
                    driver!(cuGraphAddHostNode(
                        node,
                        graph,
                        deps.as_ptr(),
                        deps.len(),
                        &params
                    ))
                }
            },
        )?;
        self.record().not_for_bodies.store(true, Ordering::Relaxed);
        Ok(added)
    }
}

impl GraphHandle {
    /// The parameters of a memset node filling `len` bytes from `start` with `value`.
    pub(crate) fn memset_params(
        start: sys::CUdeviceptr,
        value: u8,
        len: usize,
    ) -> sys::CUDA_MEMSET_NODE_PARAMS {
        sys::CUDA_MEMSET_NODE_PARAMS {
            dst: start,
            pitch: 0,
            value: u32::from(value),
            elementSize: 1,
            width: len,
            height: 1,
        }
    }

    /// The parameters of a copy node copying `len` bytes from `from` to `to` (device memory).
    pub(crate) fn copy_params(
        from: sys::CUdeviceptr,
        to: sys::CUdeviceptr,
        len: usize,
    ) -> sys::CUDA_MEMCPY3D {
        let device = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        // Every field written out: the memory types are enums without a zero value.
        sys::CUDA_MEMCPY3D {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: device,
            srcHost: std::ptr::null(),
            srcDevice: from,
            srcArray: std::ptr::null_mut(),
            reserved0: std::ptr::null_mut(),
            srcPitch: 0,
            srcHeight: 0,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: device,
            dstHost: std::ptr::null_mut(),
            dstDevice: to,
            dstArray: std::ptr::null_mut(),
            reserved1: std::ptr::null_mut(),
            dstPitch: 0,
            dstHeight: 0,
            WidthInBytes: len,
            Height: 1,
            Depth: 1,
        }
    }
}

/// Which of the two event nodes [`GraphHandle::add_event_record_node`] and
/// [`GraphHandle::add_event_wait_node`] add.
#[derive(Clone, Copy)]
enum EventNode {
    Record,
    Wait,
}

/// The driver's parameters of a kernel node: `kernel` launched with `config` and the packed
/// arguments `params`, in `context`. The one place a kernel node's fields are filled (a node
/// added, a node updated).
pub(crate) fn kernel_node_params(
    config: &LaunchConfig,
    kernel: &KernelHandle,
    params: *mut *mut c_void,
    context: sys::CUcontext,
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    let raw = config.raw(std::ptr::null_mut(), &mut []);
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: std::ptr::null_mut(),
        gridDimX: raw.gridDimX,
        gridDimY: raw.gridDimY,
        gridDimZ: raw.gridDimZ,
        blockDimX: raw.blockDimX,
        blockDimY: raw.blockDimY,
        blockDimZ: raw.blockDimZ,
        sharedMemBytes: raw.sharedMemBytes,
        kernelParams: params,
        extra: std::ptr::null_mut(),
        kern: kernel.as_cu(),
        ctx: context,
    }
}
