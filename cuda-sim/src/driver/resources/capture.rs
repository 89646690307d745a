//! Stream capture (`cuStreamBeginCapture_v2` … `cuStreamEndCapture`). A capture session owns
//! a graph from its start (so `cuStreamGetCaptureInfo_v3` can hand it out and user objects
//! can be retained by it); stream operations issued on a capturing stream become nodes that
//! depend on the stream's previous node instead of running.
//!
//! Fork and join work as in the driver: an event recorded in a capture is a captured event; a
//! stream that waits for it joins the capture, a capturing stream that waits for it takes its
//! node as a dependency. Operations that would synchronise with a capturing stream fail with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (the host waiting for it) or
//! `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` (legacy-stream work that would join it), and
//! invalidate the capture: its later operations fail with
//! `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, and so does its end.

use std::cell::Cell;

use crate::base::errors::INVALID_VALUE;
use crate::base::types::{CuResult, Raw, STREAM_LEGACY};
use crate::resources::streams::Target;
use crate::resources::work::Op;
use crate::{Sim, resources::contexts};

pub const STATUS_NONE: u32 = 0;
pub const STATUS_ACTIVE: u32 = 1;
pub const STATUS_INVALIDATED: u32 = 2;

pub const MODE_GLOBAL: u32 = 0;
pub const MODE_THREAD_LOCAL: u32 = 1;
pub const MODE_RELAXED: u32 = 2;

pub const ILLEGAL_STATE: CuResult = 401;
pub const STREAM_CAPTURE_UNSUPPORTED: CuResult = 900;
pub const STREAM_CAPTURE_INVALIDATED: CuResult = 901;
pub const STREAM_CAPTURE_UNMATCHED: CuResult = 903;
pub const STREAM_CAPTURE_ISOLATION: CuResult = 905;
pub const STREAM_CAPTURE_UNJOINED: CuResult = 904;
pub const STREAM_CAPTURE_IMPLICIT: CuResult = 906;
/// `CUDA_ERROR_CAPTURED_EVENT`: the host asked about an event recorded in an active capture.
pub const CAPTURED_EVENT: CuResult = 907;
pub const STREAM_CAPTURE_WRONG_THREAD: CuResult = 908;

thread_local! {
    /// This thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`).
    static MODE: Cell<u32> = const { Cell::new(MODE_GLOBAL) };
}

/// `cuThreadExchangeStreamCaptureMode`: sets this thread's mode, returns the previous one.
pub fn exchange_mode(mode: u32) -> Result<u32, CuResult> {
    if mode > MODE_RELAXED {
        return Err(INVALID_VALUE);
    }
    MODE.try_with(|cell| cell.replace(mode))
        .map_err(|_| INVALID_VALUE)
}

/// One capture, from `cuStreamBeginCapture_v2` on its origin stream to `cuStreamEndCapture`.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    pub graph: Raw,
    pub mode: u32,
    /// The thread that began it (non-relaxed captures must end there).
    pub thread: u64,
    /// The origin stream's timeline.
    pub origin: usize,
    pub context: Raw,
    pub invalidated: bool,
    /// The last nodes of streams that joined the capture and were destroyed before it
    /// ended: the end still needs them joined back, as on the driver.
    pub left: Vec<Raw>,
}

/// A stream taking part in a capture (the origin, or a stream that joined it).
#[derive(Debug)]
pub struct Capturing {
    pub session: u64,
    /// The nodes the stream's next operation depends on.
    pub deps: Vec<Raw>,
}

impl Sim {
    /// `cuStreamBeginCapture_v2`. The legacy default stream cannot be captured.
    pub fn begin_capture(&mut self, stream: Raw, mode: u32) -> Result<(), CuResult> {
        if mode > MODE_RELAXED {
            return Err(INVALID_VALUE);
        }
        let target = self.stream(stream, "cuStreamBeginCapture_v2")?;
        if matches!(target.token, Some(0) | Some(STREAM_LEGACY)) {
            return Err(STREAM_CAPTURE_UNSUPPORTED);
        }
        if self.capturing.contains_key(&target.timeline) {
            return Err(ILLEGAL_STATE);
        }
        let id = self.next_capture;
        self.next_capture += 1;
        let graph = self.create_graph();
        self.graphs.get_mut(&graph).expect("created").capture = Some(id);
        self.sessions.insert(
            id,
            Session {
                id,
                graph,
                mode,
                thread: contexts::thread_id(),
                origin: target.timeline,
                context: target.context,
                invalidated: false,
                left: Vec::new(),
            },
        );
        self.capturing.insert(
            target.timeline,
            Capturing {
                session: id,
                deps: Vec::new(),
            },
        );
        Ok(())
    }

    /// Ends session `id`: every stream in it stops capturing; returns its graph.
    fn close_session(&mut self, id: u64) -> Option<Session> {
        self.capturing.retain(|_, c| c.session != id);
        let session = self.sessions.remove(&id)?;
        if let Some(graph) = self.graphs.get_mut(&session.graph) {
            graph.capture = None;
        }
        Some(session)
    }

    /// `cuStreamEndCapture`: the captured graph, or the error of an invalidated capture (whose
    /// graph is destroyed, as the driver does).
    pub fn end_capture(&mut self, stream: Raw) -> Result<Raw, CuResult> {
        let target = self.stream(stream, "cuStreamEndCapture")?;
        let Some(capturing) = self.capturing.get(&target.timeline) else {
            return Err(ILLEGAL_STATE);
        };
        let session = &self.sessions[&capturing.session];
        if session.origin != target.timeline {
            return Err(STREAM_CAPTURE_UNMATCHED);
        }
        if session.mode != MODE_RELAXED && session.thread != contexts::thread_id() {
            return Err(STREAM_CAPTURE_WRONG_THREAD);
        }
        let unjoined = self.unjoined_streams(capturing.session, target.timeline);
        let session = self
            .close_session(capturing.session)
            .expect("the session of a capturing stream");
        if unjoined && !session.invalidated {
            // Measured on driver 580 (probes/capture_codes.h200.txt, `unjoined_end`): a stream
            // that joined the capture and was not joined back fails the end.
            if self.graphs.contains_key(&session.graph) {
                self.remove_graph(session.graph);
            }
            return Err(STREAM_CAPTURE_UNJOINED);
        }
        if session.invalidated {
            if self.graphs.contains_key(&session.graph) {
                self.remove_graph(session.graph);
            }
            return Err(STREAM_CAPTURE_INVALIDATED);
        }
        if !self.graphs.contains_key(&session.graph) {
            // The program destroyed the capture's graph while capturing.
            return Err(STREAM_CAPTURE_INVALIDATED);
        }
        Ok(session.graph)
    }

    /// Whether a stream of session `id` other than the origin (alive, or destroyed while it
    /// took part) has last captured nodes the origin does not depend on: it forked from the
    /// capture and never joined back.
    fn unjoined_streams(&self, id: u64, origin: usize) -> bool {
        let Some(graph) = self
            .sessions
            .get(&id)
            .and_then(|session| self.graphs.get(&session.graph))
        else {
            return false;
        };
        let deps_of: std::collections::HashMap<Raw, &[Raw]> = graph
            .nodes
            .iter()
            .map(|node| (node.raw, node.deps.as_slice()))
            .collect();
        let mut covered: std::collections::HashSet<Raw> = std::collections::HashSet::new();
        let mut stack: Vec<Raw> = self.capturing[&origin].deps.clone();
        while let Some(node) = stack.pop() {
            if covered.insert(node) {
                stack.extend(deps_of.get(&node).copied().unwrap_or_default());
            }
        }
        let left = self.sessions[&id].left.iter();
        self.capturing
            .iter()
            .filter(|&(&timeline, c)| c.session == id && timeline != origin)
            .flat_map(|(_, c)| c.deps.iter())
            .chain(left)
            .any(|node| !covered.contains(node))
    }

    /// Refuses a "potentially unsafe" call (`cuMemAlloc`) while a capture forbids it, as the
    /// driver does (measured on driver 580, probes/capture_codes.h200.txt, `sync_alloc`):
    /// unless this thread's interaction mode is relaxed, any global-mode capture and any
    /// non-relaxed capture this thread began refuse it with
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and are invalidated.
    pub fn forbid_unsafe_call(&mut self) -> Result<(), CuResult> {
        let mode = MODE.try_with(Cell::get).unwrap_or(MODE_GLOBAL);
        if mode == MODE_RELAXED {
            return Ok(());
        }
        let thread = contexts::thread_id();
        let refusing: Vec<u64> = self
            .sessions
            .values()
            .filter(|s| {
                s.mode != MODE_RELAXED
                    && ((s.mode == MODE_GLOBAL && mode == MODE_GLOBAL) || s.thread == thread)
            })
            .map(|s| s.id)
            .collect();
        if refusing.is_empty() {
            return Ok(());
        }
        for id in refusing {
            self.invalidate(id);
        }
        Err(STREAM_CAPTURE_UNSUPPORTED)
    }

    /// A capturing stream that is destroyed leaves its capture; an origin stream ends it (the
    /// graph is destroyed: nothing can end the capture any more).
    pub fn abandon_capture(&mut self, timeline: usize) {
        let Some(capturing) = self.capturing.remove(&timeline) else {
            return;
        };
        if let Some(session) = self.sessions.get_mut(&capturing.session)
            && session.origin != timeline
        {
            session.left.extend(capturing.deps.iter().copied());
        }
        if self
            .sessions
            .get(&capturing.session)
            .is_some_and(|s| s.origin == timeline)
            && let Some(session) = self.close_session(capturing.session)
            && self.graphs.contains_key(&session.graph)
        {
            self.remove_graph(session.graph);
        }
    }

    /// `(status, id, graph, dependencies)` of `stream` (`cuStreamIsCapturing`,
    /// `cuStreamGetCaptureInfo_v3`).
    pub fn capture_info(&mut self, stream: Raw) -> Result<(u32, u64, Raw, &[Raw]), CuResult> {
        let target = self.stream(stream, "cuStreamGetCaptureInfo")?;
        // The legacy stream while a blocking stream of its context captures: its work would
        // join that capture, and the driver says so without invalidating it.
        if !self.legacy_conflicts(target).is_empty() {
            return Err(STREAM_CAPTURE_IMPLICIT);
        }
        let Some(capturing) = self.capturing.get(&target.timeline) else {
            return Ok((STATUS_NONE, 0, 0, &[]));
        };
        let session = &self.sessions[&capturing.session];
        let status = if session.invalidated {
            STATUS_INVALIDATED
        } else {
            STATUS_ACTIVE
        };
        Ok((status, session.id, session.graph, &capturing.deps))
    }

    /// Marks session `id` invalidated.
    pub fn invalidate(&mut self, id: u64) {
        if let Some(session) = self.sessions.get_mut(&id) {
            session.invalidated = true;
        }
    }

    /// Records `op` as a node of `target`'s capture, after the stream's previous node.
    pub fn capture_op(&mut self, target: Target, op: Op) -> Result<(), CuResult> {
        let capturing = &self.capturing[&target.timeline];
        let id = capturing.session;
        let deps = capturing.deps.clone();
        let session = &self.sessions[&id];
        if session.invalidated {
            return Err(STREAM_CAPTURE_INVALIDATED);
        }
        let graph = session.graph;
        if !self.graphs.contains_key(&graph) {
            self.invalidate(id);
            return Err(STREAM_CAPTURE_INVALIDATED);
        }
        // A record makes no node, as on the driver (without `CU_EVENT_RECORD_EXTERNAL`): the
        // event stands for the stream's current dependencies, which a wait forks or joins.
        if let Op::EventRecord(event) = op {
            self.event(event)?.captured = Some((id, deps));
            return Ok(());
        }
        let node = self.add_node(graph, &deps, op)?;
        self.capturing
            .get_mut(&target.timeline)
            .expect("capturing")
            .deps = vec![node];
        Ok(())
    }

    /// The active sessions a legacy-stream operation on `target` would implicitly
    /// synchronise with: captures of blocking streams of its context.
    fn legacy_conflicts(&self, target: Target) -> Vec<u64> {
        let context = &self.contexts[&target.context];
        if target.timeline != context.legacy {
            return Vec::new();
        }
        let mut sessions: Vec<u64> = context
            .blocking
            .iter()
            .filter_map(|t| self.capturing.get(t))
            .map(|c| c.session)
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        sessions
    }

    /// Legacy-stream work while a blocking stream of the context captures would join the
    /// capture implicitly: refused (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`, or `…_UNSUPPORTED`
    /// for a synchronous call), and the captures are invalidated.
    pub fn check_legacy_capture(&mut self, target: Target, sync: bool) -> Result<(), CuResult> {
        let conflicts = self.legacy_conflicts(target);
        if conflicts.is_empty() {
            return Ok(());
        }
        for id in conflicts {
            self.invalidate(id);
        }
        Err(if sync {
            STREAM_CAPTURE_UNSUPPORTED
        } else {
            STREAM_CAPTURE_IMPLICIT
        })
    }

    /// The error for a call that the capture of `target` does not allow (a synchronisation, a
    /// stream-ordered allocation): the capture is invalidated.
    pub fn refuse_in_capture(&mut self, target: Target) -> CuResult {
        if let Some(id) = self.capturing.get(&target.timeline).map(|c| c.session) {
            self.invalidate(id);
        }
        for id in self.legacy_conflicts(target) {
            self.invalidate(id);
        }
        STREAM_CAPTURE_UNSUPPORTED
    }

    /// Refuses a call on `target` that cannot be captured, if the stream captures (or is the
    /// legacy stream of a context with a capturing blocking stream).
    pub fn forbid_capture(&mut self, target: Target) -> Result<(), CuResult> {
        if self.capturing.contains_key(&target.timeline)
            || !self.legacy_conflicts(target).is_empty()
        {
            return Err(self.refuse_in_capture(target));
        }
        Ok(())
    }

    /// `cuCtxSynchronize` waits for every stream of the context: refused while one captures.
    pub fn forbid_context_capture(&mut self, context: Raw) -> Result<(), CuResult> {
        let streams = self.context(context)?.streams.clone();
        let sessions: Vec<u64> = streams
            .iter()
            .filter_map(|t| self.capturing.get(t))
            .map(|c| c.session)
            .collect();
        if sessions.is_empty() {
            return Ok(());
        }
        for id in sessions {
            self.invalidate(id);
        }
        Err(STREAM_CAPTURE_UNSUPPORTED)
    }

    /// The active capture session an event was last recorded in, if any.
    fn captured_in(&mut self, event: Raw) -> Result<Option<(u64, Vec<Raw>)>, CuResult> {
        let captured = self.event(event)?.captured.clone();
        Ok(captured.filter(|(id, _)| self.sessions.contains_key(id)))
    }

    /// `cuEventSynchronize`/`cuEventQuery` (`invalidates`) and `cuEventElapsedTime` (not) of
    /// an event recorded in an active capture: the host cannot ask about work that has not
    /// run. Refused with `CUDA_ERROR_CAPTURED_EVENT`, as driver 580 does
    /// (probes/capture_codes.h200.txt): the first two invalidate the capture, the last not.
    pub fn forbid_captured_event(&mut self, event: Raw, invalidates: bool) -> Result<(), CuResult> {
        if let Some((id, _)) = self.captured_in(event)? {
            if invalidates {
                self.invalidate(id);
            }
            return Err(CAPTURED_EVENT);
        }
        Ok(())
    }

    /// `cuStreamWaitEvent` of a captured event: a capturing stream of the same capture takes
    /// the event's node as a dependency; a stream that does not capture joins the capture.
    /// Returns whether the wait was handled so.
    pub fn join_capture(&mut self, target: Target, event: Raw) -> Result<bool, CuResult> {
        let Some((id, nodes)) = self.captured_in(event)? else {
            // A capturing stream cannot wait for work outside its capture: driver 580 refuses
            // the wait on an event recorded outside it (even a completed one) and invalidates
            // the capture; an event never recorded is no dependency at all
            // (probes/capture_codes.h200.txt, `wait_on_*`).
            if let Some(id) = self.capturing.get(&target.timeline).map(|c| c.session) {
                let event = self.event(event)?;
                if event.recorded.is_some() || event.captured.is_some() {
                    self.invalidate(id);
                    return Err(STREAM_CAPTURE_ISOLATION);
                }
            }
            return Ok(false);
        };
        if self.sessions[&id].invalidated {
            return Err(STREAM_CAPTURE_INVALIDATED);
        }
        match self.capturing.get_mut(&target.timeline) {
            Some(capturing) if capturing.session == id => {
                for node in nodes {
                    if !capturing.deps.contains(&node) {
                        capturing.deps.push(node);
                    }
                }
            }
            Some(_) => return Err(STREAM_CAPTURE_ISOLATION),
            None => {
                if matches!(target.token, Some(0) | Some(STREAM_LEGACY)) {
                    self.invalidate(id);
                    return Err(STREAM_CAPTURE_IMPLICIT);
                }
                self.capturing.insert(
                    target.timeline,
                    Capturing {
                        session: id,
                        deps: nodes,
                    },
                );
            }
        }
        Ok(true)
    }
}
