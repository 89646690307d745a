//! Executable graphs: instantiated from a graph, launched, updated. An executable graph keeps
//! what its nodes reference, as of its latest instantiation or update, and reports each
//! attached buffer as used on every launch's stream, so nothing it uses is freed or unloaded
//! before the launch completes.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUgraphExec};
use handles_core::ResourceHandle;

use crate::driver::call::{deleter_status, driver, out};
use crate::driver::current::in_context;
use crate::error::{Error, GraphRule, LaunchProblem, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::{Queued, StreamHandle};
use crate::graph::book::Span;
use crate::graph::launch_plan::LaunchPlan;
use crate::graph::nodes::{Attachment, GraphHandle};
use crate::order::contexts_used::ContextsUsed;
use crate::sync::lock;

/// An executable graph.
///
/// Ownership: [`GraphHandle::instantiate`] owns it and destroys it when the last clone drops
/// (the driver defers the destruction past a launch still running). Keeps alive: its context,
/// the graph it was instantiated from (whose nodes name its nodes, for node updates), and the
/// handles its nodes reference, as of the latest instantiation or update.
#[derive(ResourceHandle)]
#[handle(raw = CUgraphExec, accessor = as_cu, delete = destroy_graph_exec)]
pub struct GraphExec {
    /// The context the graph runs in.
    #[owner]
    pub context: ContextHandle,
    pub(crate) attachments: Mutex<Attached>,
    /// The ordinal of the device its nodes run on (its context's).
    ordinal: usize,
    /// The id of the graph it was instantiated from, whose nodes name its nodes.
    pub(crate) graph: u64,
    /// The nodes of that graph when it was instantiated (added through this crate), sorted:
    /// only they name nodes of this executable graph.
    pub(crate) nodes: Vec<usize>,
    /// That graph, kept alive: the driver names an executable graph's nodes by the source
    /// graph's nodes, which die with it (driver 580 answers `CUDA_ERROR_INVALID_VALUE` to a
    /// node update once the source graph is destroyed: a dangling node handle).
    pub(crate) source: GraphHandle,
    /// Held while it lives, for a graph with memory nodes: one instantiation at a time.
    _instance: Option<Arc<()>>,
    /// For a graph with memory nodes, the contexts its launches ran in: its memory belongs to
    /// the source graph, so the executable graph (and with it the source graph, which its
    /// record keeps) is destroyed only after every launch has run.
    memory_launches: Option<ContextsUsed>,
}

/// What an executable graph keeps for its nodes: every attachment (the list each launch
/// reports), where each node's lie in it, and which nodes use which graph-owned memory.
pub(crate) struct Attached {
    pub(crate) all: Arc<[Attachment]>,
    /// The attachments of nodes named by the source graph's nodes; after a whole-graph update
    /// none (a later node update then adds to the list rather than replacing).
    pub(crate) spans: Vec<Span>,
    /// (node, start of graph-owned memory) of every use; empty for graphs without memory nodes.
    pub(crate) memory_uses: Vec<(usize, sys::CUdeviceptr)>,
    /// What a launch checks and reports, worked out from `all` whenever it changes.
    plan: LaunchPlan,
    /// The ordinal of the device the graph's nodes run on, which the plan is worked out for.
    ordinal: usize,
}

impl Attached {
    pub(crate) fn new(
        all: Arc<[Attachment]>,
        spans: Vec<Span>,
        memory_uses: Vec<(usize, sys::CUdeviceptr)>,
        ordinal: usize,
    ) -> Self {
        let plan = LaunchPlan::of(&all, ordinal);
        Attached {
            all,
            spans,
            memory_uses,
            plan,
            ordinal,
        }
    }

    /// Puts `new` in place of `node`'s attachments (after the list when they are not known)
    /// and returns the list before, for the caller to drop once the lock is released.
    pub(crate) fn replace(&mut self, node: usize, new: Vec<Attachment>) -> Arc<[Attachment]> {
        let (start, len) = match self.spans.iter().position(|span| span.node == node) {
            Some(index) => {
                let span = self.spans.remove(index);
                (span.start, span.len)
            }
            None => (self.all.len(), 0),
        };
        let added = new.len();
        let mut list: Vec<Attachment> = Vec::with_capacity(self.all.len() - len + added);
        list.extend_from_slice(&self.all[..start]);
        list.extend(new);
        list.extend_from_slice(&self.all[start + len..]);
        for span in &mut self.spans {
            if span.start > start {
                span.start = span.start - len + added;
            }
        }
        if added > 0 {
            self.spans.push(Span {
                node,
                start,
                len: added,
            });
        }
        let list: Arc<[Attachment]> = list.into();
        self.plan = LaunchPlan::of(&list, self.ordinal);
        std::mem::replace(&mut self.all, list)
    }
}
// SAFETY: the CUDA driver API lets executable graphs be launched and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for GraphExec {}

fn destroy_graph_exec(raw: CUgraphExec, exec: &GraphExec) -> Result<()> {
    let Some(launches) = &exec.memory_launches else {
        // SAFETY: the handle owns `raw` and this deleter runs once.
        return deleter_status(unsafe { driver!(cuGraphExecDestroy(raw)) });
    };
    // The graph's memory is freed with it, after every launch's work. The destruction may run
    // later (on the disposal thread, once no capture runs): it keeps the source graph, what the
    // nodes reference and the instance token (the source refuses a second executable graph
    // while this one exists) until then. If the wait fails, the executable graph is leaked
    // (reported) with its source and token: a launch may still use the graph's memory.
    let kept = (
        exec.source.clone(),
        Arc::clone(&lock(&exec.attachments).all),
        exec._instance.clone(),
    );
    let sendable = SendExec(raw);
    launches.release_after_all("GraphExec", raw as isize, move |waited| {
        let (source, attached, instance) = kept;
        if let Err(error) = waited {
            std::mem::forget((source, instance));
            return Err(error);
        }
        let _kept = (source, attached, instance);
        // The whole wrapper is moved in (a field alone would be captured otherwise).
        let sendable = sendable;
        let raw = sendable.0;
        // SAFETY: the handle owned `raw` and is gone; this release runs once; every context
        // that launched it has finished that work.
        deleter_status(unsafe { driver!(cuGraphExecDestroy(raw)) })
    })
}

/// An executable graph that may cross threads, for a destruction run on the disposal thread.
struct SendExec(CUgraphExec);
// SAFETY: a `CUgraphExec` is an opaque driver handle; its destruction is the one call made
// through it here, once no handle can launch it.
unsafe impl Send for SendExec {}

impl GraphHandle {
    /// Instantiates the graph (`cuGraphInstantiateWithFlags`): the executable graph keeps
    /// what the graph's nodes reference now, and keeps this graph (whose nodes name its nodes
    /// in node updates) while it lives.
    pub fn instantiate(&self) -> Result<GraphExecHandle> {
        self.refuse_body_alone("instantiating")?;
        // The lock is held across the driver call, so no node can be added between the copy
        // of what the nodes reference and the instantiation of the nodes.
        let attached = lock(&self.record().attachments);
        let mut book = lock(&self.record().book);
        let instance = book.instantiating()?;
        let ordinal = self.device_ordinal()?;
        let kept = Attached::new(
            attached.as_slice().into(),
            book.spans.clone(),
            book.memory_uses(),
            ordinal,
        );
        let graph = self.id();
        let nodes = book.nodes();
        let context = self.context();
        in_context(context.as_cu(), || {
            // SAFETY: the graph is alive and its context current; `raw` is an out-pointer.
            let raw =
                out(|raw| unsafe { driver!(cuGraphInstantiateWithFlags(raw, self.as_cu(), 0)) })?;
            let record = GraphExec {
                context: context.clone(),
                attachments: Mutex::new(kept),
                ordinal,
                graph,
                nodes,
                source: self.clone(),
                memory_launches: instance.is_some().then(ContextsUsed::new),
                _instance: instance,
            };
            // SAFETY: a fresh executable graph owned by nobody else; the record keeps alive
            // everything its nodes reference; `destroy_graph_exec` destroys it once.
            Ok(unsafe { GraphExecHandle::from_raw(raw, record) })
        })
    }
}

/// Refuses a launch of a graph with a cooperative node whose grid needs `needs`
/// multiprocessors on a stream whose context has fewer (a green context's share): whether the
/// driver would then run the grid on that share, where it cannot be resident at once and its
/// grid-wide barrier would never open, is not established, so it is never tried.
fn refuse_cooperative_on_fewer_sms(needs: u32, stream: &StreamHandle) -> Result<()> {
    // The context the stream's work runs in: for a default-stream token, the current one (a
    // green context bound to the thread, say).
    let share = stream.owning_context()?.sm_count();
    match share {
        Some(multiprocessors) if multiprocessors < needs => Err(Error::BadLaunch {
            what: LaunchProblem::CooperativeGraph {
                needs,
                multiprocessors,
            },
        }),
        _ => Ok(()),
    }
}

/// The raw context under which a plan's notes of contexts are made once: `stream`'s, when
/// known (see [`LaunchPlan::noted_for`]).
#[inline(always)]
fn noted_context(stream: &StreamHandle) -> Option<usize> {
    stream.context().as_ref().map(|c| c.as_cu() as usize)
}

impl GraphExecHandle {
    /// Launches the graph on `stream` (`cuGraphLaunch`). Every buffer the graph references is
    /// then reported as used on `stream`, and every kernel's library notes the launch, so
    /// nothing the graph uses is freed or unloaded before the launch completes.
    pub fn launch(&self, stream: &StreamHandle) -> Result<()> {
        // Held for the launch, for two reasons. An update cannot swap what the graph keeps
        // while it is noted. And the driver documents `cuGraphLaunch` under its graph
        // thread-safety note: calls on one graph object are not synchronized inside the
        // driver, and the caller must serialize them; a handle shared between threads would
        // otherwise launch one executable graph from two threads at once. Uncontended, the
        // lock is one compare-and-swap and one swap.
        let attached = lock(&self.record().attachments);
        let plan = &attached.plan;
        // The grid's need is checked first, on the host's own figures: on driver 580 a capture
        // query of the per-thread stream with a green context current is itself refused
        // (`CUDA_ERROR_INVALID_HANDLE`), and the reason to give is the grid's.
        if plan.cooperative_sms > 0 {
            refuse_cooperative_on_fewer_sms(plan.cooperative_sms, stream)?;
        }
        stream.refuse_if_captured()?;
        // The buffers are checked again at every launch, on the device the graph's nodes run
        // on (its context's, whatever the stream): a device's access to a pool can be revoked
        // after the graph was built, and its kernels would fault.
        let context = self.context();
        let ordinal = self.record().ordinal;
        // Most plans check nothing (every buffer's reach is fixed): then no guards to hold.
        if plan.checked.is_empty() {
            return self.queue_and_report(plan, stream);
        }
        let mut held = Vec::new();
        for buffer in &plan.checked {
            let guard = buffer.check_accessible_in(context, ordinal)?;
            if guard.is_held() {
                held.push(guard);
            }
        }
        // The reach guards are held until the uses are reported, so no host view opens in
        // between.
        let reported = self.queue_and_report(plan, stream);
        drop(held);
        reported
    }

    /// Queues the launch on `stream` and, once it is queued, reports every use of `plan`
    /// whatever else fails. Called with the attachments' lock held (`plan` is borrowed from
    /// it) and the reach guards of the buffers it checks.
    #[inline(always)]
    fn queue_and_report(&self, plan: &LaunchPlan, stream: &StreamHandle) -> Result<()> {
        let context = self.context();
        // No context is made current for the call: the stream names it (driver 580 launches a
        // graph on a stream with no context current, or another one, and runs it:
        // `cuda-sim/probes/graph_launch_context.py`); a default-stream token is bound to its
        // context as for any stream-ordered call.
        let queued = stream.queue(|raw_stream| {
            // SAFETY: the executable graph and the stream are alive; the record keeps alive
            // everything the graph's nodes reference.
            unsafe { driver!(cuGraphLaunch(self.as_cu(), raw_stream)) }
        });
        // Once the graph is queued, every use is reported whatever else fails. The launch is
        // work of the stream's context as well as the graph's (they differ when the stream is
        // another context's, a green context's say): both are noted, so that an unload, or the
        // release of a host node's closure, waits for the launch whichever it is.
        let Queued { queued, status } = queued;
        if !queued {
            return status;
        }
        // Most launches have nothing to report: no buffer recorded per launch, and every note
        // of a context already made for streams of this one. Then the status is returned as
        // it is, not moved through the report's.
        if plan.recorded.is_empty() && plan.noted_for(noted_context(stream)) {
            return status;
        }
        status.and(self.report_launch(plan, stream, context))
    }

    /// Reports the uses of a queued launch of `plan` on `stream`: every buffer's, and the
    /// notes of contexts not yet made for streams of `stream`'s context.
    #[inline(always)]
    fn report_launch(
        &self,
        plan: &LaunchPlan,
        stream: &StreamHandle,
        context: &ContextHandle,
    ) -> Result<()> {
        let mut status = Ok(());
        for buffer in &plan.recorded {
            status = status.and(buffer.record_use(stream));
        }
        // The notes of contexts: made once for streams of one context (see the plan).
        let noted_in = noted_context(stream);
        if plan.noted_for(noted_in) {
            return status;
        }
        for buffer in &plan.noted {
            status = status.and(buffer.record_use(stream));
        }
        for library in &plan.libraries {
            let noted = library
                .note_launch(context.as_cu(), || Ok(context.clone()))
                .and_then(|()| library.note_stream_launch(stream));
            status = status.and(noted);
        }
        if let Some(launches) = &self.record().memory_launches {
            let noted = launches
                .note(context.as_cu(), || Ok(context.clone()))
                .and_then(|()| launches.note_stream(stream));
            status = status.and(noted);
        }
        for function in &plan.hosts {
            let launched_in = &function.record().launched_in;
            let noted = launched_in
                .note(context.as_cu(), || Ok(context.clone()))
                .and_then(|()| launched_in.note_stream(stream));
            status = status.and(noted);
        }
        if status.is_ok() {
            plan.mark_noted_for(noted_in);
        }
        status
    }

    /// Updates the executable graph to `graph`'s nodes (`cuGraphExecUpdate`). On success it
    /// keeps what `graph`'s nodes reference and releases what it kept before; launches
    /// already queued were ordered before those releases when they were launched. A graph
    /// whose topology differs is an error, and the executable graph is unchanged.
    pub fn update(&self, graph: &GraphHandle) -> Result<()> {
        graph.refuse_body_alone("updating an executable graph from")?;
        // Both locks across the driver call: no node can be added to `graph` between the copy
        // and the update, and no launch can run the new nodes while reporting the old ones.
        let source = lock(&graph.record().attachments);
        let source_memory = {
            let book = lock(&graph.record().book);
            book.refuse_undefined_conditions()?;
            book.has_memory()
        };
        let mut kept = lock(&self.record().attachments);
        if source_memory || self.record()._instance.is_some() {
            return Err(Error::GraphRule(GraphRule::UpdateWithMemory));
        }
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
                sys::CUresult::CUDA_SUCCESS => Ok(std::mem::replace(
                    &mut *kept,
                    Attached::new(
                        source.as_slice().into(),
                        Vec::new(),
                        Vec::new(),
                        self.record().ordinal,
                    ),
                )),
                code => Err(Error::GraphUpdate {
                    result: format!("{:?}", info.result),
                    driver: Box::new(crate::driver::call::driver_error("cuGraphExecUpdate", code)),
                }),
            }
        });
        drop((kept, source));
        previous.map(drop)
    }

    fn current_attachments(&self) -> Arc<[Attachment]> {
        lock(&self.record().attachments).all.clone()
    }

    /// The number of handles the executable graph keeps alive for its nodes.
    pub fn attachment_count(&self) -> usize {
        self.current_attachments()
            .iter()
            .filter(|attachment| !matches!(attachment, Attachment::Cooperative(_)))
            .count()
    }
}
