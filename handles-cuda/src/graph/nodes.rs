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
//! **Capture** runs in [`GraphHandle::capture`] on a stream of its own, which the closure can
//! reach only through the [`Capture`] it is given (which stays on the closure's thread). No
//! other code can queue work on that stream, allocate on it or free on it: nothing can be
//! captured that the graph does not attach, and a capture never sees an allocation or a free.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUgraph, CUgraphExec, CUgraphNode};
use handles_core::ResourceHandle;

use crate::code::kernel::KernelHandle;
use crate::code::launch::{KernelParams, LaunchConfig, TypedKernel};
use crate::driver::call::{deleter_status, driver, out};
use crate::driver::current::in_context;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::event::EventHandle;
use crate::exec::stream::{StreamFlags, StreamHandle};
use crate::memory::device_ptr::DevicePtrHandle;
use crate::sync::lock;

/// A handle a graph node references, kept alive by the graph and its executable instances.
#[derive(Clone)]
pub(crate) enum Attachment {
    Buffer(DevicePtrHandle),
    Kernel(KernelHandle),
    /// Held only to keep the event alive.
    Event(#[allow(dead_code)] EventHandle),
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
    attachments: Mutex<Vec<Attachment>>,
}
// SAFETY: the CUDA driver API lets graphs be used and destroyed from any thread; adding nodes
// is serialised by the attachments' lock.
unsafe impl handles_core::ThreadSafe for Graph {}

fn destroy_graph(raw: CUgraph, _: &Graph) -> Result<()> {
    // SAFETY: the handle owns `raw` and this deleter runs once.
    deleter_status(unsafe { driver!(cuGraphDestroy(raw)) })
}

/// An executable graph.
///
/// Ownership: [`GraphHandle::instantiate`] owns it and destroys it when the last clone drops
/// (the driver defers the destruction past a launch still running). Keeps alive: its context
/// and the handles its nodes reference, as of the latest instantiation or update.
#[derive(ResourceHandle)]
#[handle(raw = CUgraphExec, accessor = as_cu, delete = destroy_graph_exec)]
pub struct GraphExec {
    /// The context the graph runs in.
    #[owner]
    pub context: ContextHandle,
    attachments: Mutex<Arc<[Attachment]>>,
}
// SAFETY: the CUDA driver API lets executable graphs be launched and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for GraphExec {}

fn destroy_graph_exec(raw: CUgraphExec, _: &GraphExec) -> Result<()> {
    // SAFETY: the handle owns `raw` and this deleter runs once.
    deleter_status(unsafe { driver!(cuGraphExecDestroy(raw)) })
}

/// A node of a graph, to name as a dependency of later nodes of the same graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphNode {
    raw: CUgraphNode,
    graph: u64,
}

// SAFETY: a node is an identifier the driver hands out; it is only passed back to the driver
// together with its graph, which the caller's handle keeps alive.
unsafe impl Send for GraphNode {}
// SAFETY: as for `Send`.
unsafe impl Sync for GraphNode {}

/// How a capture treats potentially unsafe API calls made by other threads while it runs
/// (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// Unsafe calls from any thread fail while the capture runs.
    #[default]
    Global,
    /// Unsafe calls from this thread fail while the capture runs.
    ThreadLocal,
    /// No calls are prohibited.
    Relaxed,
}

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// Ends a capture when dropped, so that a panic in the recording closure never leaves the
/// stream capturing (a partial graph is destroyed then); [`EndCapture::end`] ends it normally
/// and returns the result.
struct EndCapture {
    capture: Option<Capture>,
    graph: CUgraph,
    ended: Option<Result<()>>,
}

impl EndCapture {
    fn new(capture: Capture) -> Self {
        EndCapture {
            capture: Some(capture),
            graph: std::ptr::null_mut(),
            ended: None,
        }
    }

    fn capture(&self) -> &Capture {
        self.capture.as_ref().expect("present until ended")
    }

    fn finish(&mut self) {
        if self.ended.is_some() {
            return;
        }
        let Some(capture) = &self.capture else {
            return;
        };
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is alive and capturing; `graph` is a valid out-pointer.
        let ended = unsafe { driver!(cuStreamEndCapture(capture.stream.as_cu(), &mut graph)) };
        self.graph = graph;
        self.ended = Some(ended);
    }

    /// Ends the capture: the capture, the graph it made (null if none) and the status.
    fn end(mut self) -> (Capture, CUgraph, Result<()>) {
        self.finish();
        let capture = self.capture.take().expect("present until ended");
        let graph = std::mem::replace(&mut self.graph, std::ptr::null_mut());
        let ended = self.ended.replace(Ok(())).unwrap_or(Ok(()));
        (capture, graph, ended)
    }
}

impl Drop for EndCapture {
    fn drop(&mut self) {
        self.finish();
        if !self.graph.is_null() {
            // SAFETY: a graph this capture made and nothing else refers to, destroyed once.
            let _ = unsafe { driver!(cuGraphDestroy(self.graph)) };
        }
    }
}

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

    fn owning(raw: CUgraph, context: &ContextHandle, attachments: Vec<Attachment>) -> Self {
        let record = Graph {
            context: context.clone(),
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            attachments: Mutex::new(attachments),
        };
        // SAFETY: a fresh graph owned by nobody else; `destroy_graph` destroys it once.
        unsafe { GraphHandle::from_raw(raw, record) }
    }

    /// Captures the work `record` queues through its [`Capture`] into a new graph: a stream
    /// of its own is created in `context`, captured in `mode` while `record` runs, and the
    /// graph is returned with everything the captured work referenced attached. If `record`
    /// or the capture fails, the capture is ended and its partial graph destroyed.
    pub fn capture(
        context: &ContextHandle,
        mode: CaptureMode,
        record: impl FnOnce(&Capture) -> Result<()>,
    ) -> Result<Self> {
        let context = &context.keep_alive()?;
        // Not in the stream registry: no lookup by raw value can reach it and queue work that
        // the capture would take in unattached.
        let stream =
            StreamHandle::create_unregistered(context, StreamFlags { non_blocking: true }, 0)?;
        let raw_mode = match mode {
            CaptureMode::Global => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => {
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            }
            CaptureMode::Relaxed => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        // While any capture runs, every stream-ordered call asks the driver whether its stream
        // is capturing (`StreamHandle::refuse_if_captured`): defence in depth, should any
        // stream ever join this one's capture.
        let _counted = crate::driver::capture::CaptureInProgress::begin();
        // SAFETY: the stream is alive and only this function can reach it.
        unsafe { driver!(cuStreamBeginCapture_v2(stream.as_cu(), raw_mode)) }?;
        let capture = Capture {
            stream,
            attachments: std::cell::RefCell::new(Vec::new()),
            _not_send: std::marker::PhantomData,
        };
        // Ended whatever happened, also if `record` panics: a stream must not be left
        // capturing (and the guard drops before `_counted`, so the count still covers it).
        let ending = EndCapture::new(capture);
        let recorded = record(ending.capture());
        let (capture, graph, ended) = ending.end();
        let attachments = capture.attachments.into_inner();
        let made = (!graph.is_null()).then(|| Self::owning(graph, context, attachments));
        recorded?;
        ended?;
        made.ok_or_else(|| Error::InvalidArgument("the capture produced no graph".into()))
    }

    /// The ordinal of the device the graph's nodes run on.
    fn device_ordinal(&self) -> Result<usize> {
        match self.context().device() {
            Some(ordinal) => Ok(ordinal),
            None => StreamHandle::legacy_in(self.context())?.device_ordinal(),
        }
    }

    fn check_dependencies(&self, dependencies: &[GraphNode]) -> Result<Vec<CUgraphNode>> {
        let id = self.id();
        if let Some(foreign) = dependencies.iter().find(|node| node.graph != id) {
            return Err(Error::InvalidArgument(format!(
                "a dependency node belongs to graph {}, not to this graph ({id})",
                foreign.graph
            )));
        }
        Ok(dependencies.iter().map(|node| node.raw).collect())
    }

    /// Adds a node through `add` (the driver call) and attaches `attachments` to the graph,
    /// under the graph's lock.
    fn add_node(
        &self,
        dependencies: &[GraphNode],
        attachments: impl IntoIterator<Item = Attachment>,
        add: impl FnOnce(*mut CUgraphNode, &[CUgraphNode]) -> Result<()>,
    ) -> Result<GraphNode> {
        let raw_dependencies = self.check_dependencies(dependencies)?;
        let mut attached = lock(&self.record().attachments);
        let mut node: CUgraphNode = std::ptr::null_mut();
        add(&mut node, &raw_dependencies)?;
        attached.extend(attachments);
        Ok(GraphNode {
            raw: node,
            graph: self.id(),
        })
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
        kernel.check_launch(config, &args, ordinal)?;
        let mut attachments = vec![Attachment::Kernel(kernel.kernel().clone())];
        P::for_each_buffer(&args, |buffer| {
            attachments.push(Attachment::Buffer(buffer.clone()))
        });
        let context = self.context().as_cu();
        self.add_node(dependencies, attachments, |node, deps| {
            P::with_pointers(&args, |params| {
                let node_params = sys::CUDA_KERNEL_NODE_PARAMS {
                    func: std::ptr::null_mut(),
                    gridDimX: config.grid[0],
                    gridDimY: config.grid[1],
                    gridDimZ: config.grid[2],
                    blockDimX: config.block[0],
                    blockDimY: config.block[1],
                    blockDimZ: config.block[2],
                    sharedMemBytes: config.shared_mem_bytes,
                    kernelParams: params,
                    extra: std::ptr::null_mut(),
                    kern: kernel.kernel().as_cu(),
                    ctx: context,
                };
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
        })
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
        let start = buffer.checked_range(offset, len)?;
        buffer.check_accessible_from(self.device_ordinal()?)?;
        let params = sys::CUDA_MEMSET_NODE_PARAMS {
            dst: start,
            pitch: 0,
            value: u32::from(value),
            elementSize: 1,
            width: len,
            height: 1,
        };
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
        let from = src.checked_range(src_offset, len)?;
        let to = dst.checked_range(dst_offset, len)?;
        if from.abs_diff(to) < len as u64 {
            return Err(Error::InvalidArgument(
                "the source and destination ranges overlap".into(),
            ));
        }
        let ordinal = self.device_ordinal()?;
        src.check_accessible_from(ordinal)?;
        dst.check_accessible_from(ordinal)?;
        // Every field written out: the memory types are enums without a zero value.
        let device = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        let params = sys::CUDA_MEMCPY3D {
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
        };
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
        let (graph, raw_event) = (self.as_cu(), event.as_cu());
        self.add_node(
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
        )
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
        lock(&self.record().attachments).len()
    }

    /// Instantiates the graph (`cuGraphInstantiateWithFlags`): the executable graph keeps
    /// what the graph's nodes reference now, and stays valid after this graph is dropped.
    pub fn instantiate(&self) -> Result<GraphExecHandle> {
        // The lock is held across the driver call, so no node can be added between the copy
        // of what the nodes reference and the instantiation of the nodes.
        let attached = lock(&self.record().attachments);
        let attachments: Arc<[Attachment]> = attached.as_slice().into();
        let context = self.context();
        in_context(context.as_cu(), || {
            // SAFETY: the graph is alive and its context current; `raw` is an out-pointer.
            let raw =
                out(|raw| unsafe { driver!(cuGraphInstantiateWithFlags(raw, self.as_cu(), 0)) })?;
            let record = GraphExec {
                context: context.clone(),
                attachments: Mutex::new(attachments),
            };
            // SAFETY: a fresh executable graph owned by nobody else; the record keeps alive
            // everything its nodes reference; `destroy_graph_exec` destroys it once.
            Ok(unsafe { GraphExecHandle::from_raw(raw, record) })
        })
    }
}

impl GraphExecHandle {
    /// Launches the graph on `stream` (`cuGraphLaunch`). Every buffer the graph references is
    /// then reported as used on `stream`, and every kernel's library notes the launch, so
    /// nothing the graph uses is freed or unloaded before the launch completes.
    pub fn launch(&self, stream: &StreamHandle) -> Result<()> {
        // Held for the launch: an update cannot swap what the graph keeps while it is noted.
        let attachments = lock(&self.record().attachments);
        stream.refuse_if_captured()?;
        // The buffers are checked again at every launch: a device's access to a pool can be
        // revoked after the graph was built, and its kernels would fault.
        for attachment in attachments.iter() {
            if let Attachment::Buffer(buffer) = attachment {
                buffer.check_accessible_on(stream)?;
            }
        }
        let queued = stream.queue_bound(|raw_stream| {
            // SAFETY: the executable graph and the stream are alive; the record keeps alive
            // everything the graph's nodes reference.
            unsafe { driver!(cuGraphLaunch(self.as_cu(), raw_stream)) }
        });
        // Once the graph is queued, every use is reported whatever else fails.
        queued.then(|| {
            let context = self.context();
            let mut status = Ok(());
            for attachment in attachments.iter() {
                let noted = match attachment {
                    Attachment::Buffer(buffer) => buffer.note_use(stream),
                    Attachment::Kernel(kernel) => kernel
                        .library()
                        .note_launch(context.as_cu(), || Ok(context.clone())),
                    Attachment::Event(_) => Ok(()),
                };
                status = status.and(noted);
            }
            status
        })
    }

    /// Updates the executable graph to `graph`'s nodes (`cuGraphExecUpdate`). On success it
    /// keeps what `graph`'s nodes reference and releases what it kept before; launches
    /// already queued were ordered before those releases when they were launched. A graph
    /// whose topology differs is an error, and the executable graph is unchanged.
    pub fn update(&self, graph: &GraphHandle) -> Result<()> {
        // Both locks across the driver call: no node can be added to `graph` between the copy
        // and the update, and no launch can run the new nodes while reporting the old ones.
        let source = lock(&graph.record().attachments);
        let mut kept = lock(&self.record().attachments);
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        // The attachments are swapped inside the call, as soon as the driver has taken the new
        // nodes: a failure to restore the caller's context afterwards cannot undo the update.
        let previous = in_context(self.context().as_cu(), || {
            // SAFETY: both graphs are alive; `info` is a valid out-pointer.
            match unsafe { sys::cuGraphExecUpdate_v2(self.as_cu(), graph.as_cu(), &mut info) } {
                sys::CUresult::CUDA_SUCCESS => {
                    Ok(std::mem::replace(&mut *kept, source.as_slice().into()))
                }
                code => Err(Error::InvalidArgument(format!(
                    "the executable graph cannot take this graph's nodes ({:?}): {}",
                    info.result,
                    crate::driver::call::driver_error("cuGraphExecUpdate", code)
                ))),
            }
        });
        drop((kept, source));
        previous.map(drop)
    }

    fn current_attachments(&self) -> Arc<[Attachment]> {
        lock(&self.record().attachments).clone()
    }

    /// The number of handles the executable graph keeps alive for its nodes.
    pub fn attachment_count(&self) -> usize {
        self.current_attachments().len()
    }
}

/// The work of a [`GraphHandle::capture`]: each method queues its operation on the capture's
/// private stream, where it is recorded into the graph, and attaches what it references.
/// Stays on the thread that runs the capture.
///
/// There is deliberately no event record or wait here: an event recorded in a capture is a
/// fork point that lets any other stream join the capture, and everything queued on that
/// stream would then be captured without being attached. Event nodes are added explicitly
/// ([`GraphHandle::add_event_record_node`], [`GraphHandle::add_event_wait_node`]).
pub struct Capture {
    stream: StreamHandle,
    attachments: std::cell::RefCell<Vec<Attachment>>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Capture {
    fn attach(&self, attachment: Attachment) {
        self.attachments.borrow_mut().push(attachment);
    }

    /// Captures a launch of `kernel` (see [`TypedKernel::launch`]).
    pub fn launch<P: KernelParams>(
        &self,
        kernel: &TypedKernel<P>,
        config: &LaunchConfig,
        args: P::Args<'_>,
    ) -> Result<()> {
        kernel.launch_captured(&self.stream, config, &args)?;
        self.attach(Attachment::Kernel(kernel.kernel().clone()));
        P::for_each_buffer(&args, |buffer| {
            self.attach(Attachment::Buffer(buffer.clone()))
        });
        Ok(())
    }

    /// Captures a fill of `len` bytes of `buffer` from byte `offset` with `value`.
    pub fn memset(
        &self,
        buffer: &DevicePtrHandle,
        offset: usize,
        value: u8,
        len: usize,
    ) -> Result<()> {
        let start = buffer.checked_range(offset, len)?;
        buffer.check_accessible_on(&self.stream)?;
        // SAFETY: the capture's stream is alive; the range lies in the buffer, which the
        // graph will keep alive.
        unsafe { driver!(cuMemsetD8Async(start, value, len, self.stream.as_cu())) }?;
        self.attach(Attachment::Buffer(buffer.clone()));
        Ok(())
    }

    /// Captures a device-to-device copy (see [`DevicePtrHandle::copy_to_async`]).
    pub fn copy(
        &self,
        src: &DevicePtrHandle,
        src_offset: usize,
        dst: &DevicePtrHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let from = src.checked_range(src_offset, len)?;
        let to = dst.checked_range(dst_offset, len)?;
        if from.abs_diff(to) < len as u64 {
            return Err(Error::InvalidArgument(
                "the source and destination ranges overlap".into(),
            ));
        }
        src.check_accessible_on(&self.stream)?;
        dst.check_accessible_on(&self.stream)?;
        // SAFETY: the capture's stream is alive; both ranges lie in their buffers, which the
        // graph will keep alive.
        unsafe { driver!(cuMemcpyAsync(to, from, len, self.stream.as_cu())) }?;
        self.attach(Attachment::Buffer(src.clone()));
        self.attach(Attachment::Buffer(dst.clone()));
        Ok(())
    }
}

/// Which of the two event nodes [`GraphHandle::add_event_record_node`] and
/// [`GraphHandle::add_event_wait_node`] add.
#[derive(Clone, Copy)]
enum EventNode {
    Record,
    Wait,
}
