//! **Capture** runs in [`GraphHandle::capture`] on a stream of its own, which the closure can
//! reach only through the [`Capture`] it is given (which stays on the closure's thread). No
//! other code can queue work on that stream, allocate on it or free on it: nothing can be
//! captured that the graph does not attach, and a capture never sees an allocation or a free.

use cudarc::driver::sys::{self, CUgraph};

use crate::code::config::LaunchConfig;
use crate::code::launch::{LaunchOptions, TypedKernel};
use crate::code::params::KernelParams;
use crate::driver::call::driver;
use crate::error::{Error, GraphRule, Result};
use crate::exec::context::ContextHandle;
use crate::exec::event::{EventFlags, EventHandle};
use crate::exec::stream::{StreamFlags, StreamHandle};
use crate::graph::nodes::{Attachment, GraphHandle};
use crate::memory::device_ptr::DevicePtrHandle;

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
        // Branches never joined are joined now (also after a panic): the driver refuses to
        // end a capture with unjoined work. If a join fails, the end reports the driver's
        // error, and the capture is invalidated with no graph made.
        capture.join_all();
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

/// The work methods of a [`Capture`] and of a [`CaptureBranch`], one definition for both: each
/// queues on the stream that `self.target()` names, through the capture's own checks and
/// attachments (`launch_on`, `memset_on`, `copy_on`). `$on` says where, for the docs.
macro_rules! work_methods {
    ($on:literal) => {
        #[doc = concat!("Captures a launch of `kernel`", $on, " (see [`TypedKernel::launch`]).")]
        pub fn launch<P: KernelParams>(
            &self,
            kernel: &TypedKernel<P>,
            config: &LaunchConfig,
            args: P::Args<'_>,
        ) -> Result<()> {
            let (capture, stream) = self.target();
            capture.launch_on(stream, kernel, config, None, args)
        }

        #[doc = concat!("Captures a launch with extra attributes", $on, " (see [`TypedKernel::launch_ex`]); every option")]
        /// is checked before the driver is called, a cooperative grid against the occupancy of
        /// the capture's device (and again at every launch of the graph, against the stream's
        /// context). Programmatic serialization becomes a programmatic edge of the graph (CUDA
        /// 12.3 or later) from the kernel this launch depends on in the capture: the kernel may
        /// start before that one ends (and waits for it with `griddepcontrol.wait`). Each
        /// launch of the graph reports every buffer the graph keeps on the launch's stream, so
        /// a free waits for the whole graph, both kernels included. A programmatic event is
        /// refused ([`GraphRule::ProgrammaticEventInCapture`]): its record would be an outside
        /// event recorded in the capture.
        pub fn launch_ex<P: KernelParams>(
            &self,
            kernel: &TypedKernel<P>,
            config: &LaunchConfig,
            options: &LaunchOptions,
            args: P::Args<'_>,
        ) -> Result<()> {
            let (capture, stream) = self.target();
            capture.launch_on(stream, kernel, config, Some(options), args)
        }

        #[doc = concat!("Captures a fill of `len` bytes of `buffer` from byte `offset` with `value`", $on, ".")]
        pub fn memset(
            &self,
            buffer: &DevicePtrHandle,
            offset: usize,
            value: u8,
            len: usize,
        ) -> Result<()> {
            let (capture, stream) = self.target();
            capture.memset_on(stream, buffer, offset, value, len)
        }

        #[doc = concat!("Captures a device-to-device copy", $on, " (see [`DevicePtrHandle::copy_to_async`]).")]
        pub fn copy(
            &self,
            src: &DevicePtrHandle,
            src_offset: usize,
            dst: &DevicePtrHandle,
            dst_offset: usize,
            len: usize,
        ) -> Result<()> {
            let (capture, stream) = self.target();
            capture.copy_on(stream, src, src_offset, dst, dst_offset, len)
        }
    };
}

impl GraphHandle {
    /// Captures the work `record` queues through its [`Capture`] into a new graph: a stream
    /// of its own is created in `context`, captured in `mode` while `record` runs, and the
    /// graph is returned with everything the captured work referenced attached. If `record`
    /// or the capture fails, the capture is ended and its partial graph destroyed.
    ///
    /// While `record` runs, stream-ordered work through handles on any other stream from its
    /// thread (a launch, copy, memset, event record or wait, host function or graph launch on
    /// an outer stream) is refused with [`Error::OutsideCapture`]: it would run at once and be
    /// left out of the graph. Allocations and frees on outer streams go ahead, and other
    /// threads are not affected.
    ///
    /// Releases that must wait for whole contexts (synchronous memory, libraries, host
    /// functions, mappings, graphs with memory nodes) dropped while any capture runs are
    /// handed to the disposal thread, which waits and releases once no capture runs: a
    /// context synchronisation would invalidate the capture. For the same reason the capture
    /// begins only once such waits already under way on other threads have returned (after at
    /// most a second it begins anyway, and fails if one still runs).
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
            context: context.clone().into_owned(),
            attachments: std::cell::RefCell::new(Vec::new()),
            branches: std::cell::RefCell::new(Vec::new()),
            events: std::cell::RefCell::new(Vec::new()),
            next_branch: std::cell::Cell::new(0),
            _not_send: std::marker::PhantomData,
        };
        // Ended whatever happened, also if `record` panics: a stream must not be left
        // capturing (and the guard drops before `_counted`, so the count still covers it).
        let ending = EndCapture::new(capture);
        let recorded = {
            // Work on any other stream from this thread is refused while `record` runs.
            let _closure = crate::driver::capture::ClosureOnThisThread::begin();
            record(ending.capture())
        };
        let (capture, graph, ended) = ending.end();
        let attachments = capture.attachments.into_inner();
        let made = (!graph.is_null()).then(|| Self::owning(graph, context, attachments));
        recorded?;
        ended?;
        made.ok_or(Error::NothingMade {
            what: "the capture produced no graph",
        })
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
    context: ContextHandle,
    attachments: std::cell::RefCell<Vec<Attachment>>,
    /// Forked branches not joined yet: their id and private stream.
    branches: std::cell::RefCell<Vec<(u64, StreamHandle)>>,
    /// The private events of forks and joins, destroyed with the capture.
    events: std::cell::RefCell<Vec<EventHandle>>,
    next_branch: std::cell::Cell<u64>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Capture {
    /// The capture and the stream its work methods queue on.
    fn target(&self) -> (&Capture, &StreamHandle) {
        (self, &self.stream)
    }

    fn attach(&self, attachment: Attachment) {
        self.attachments.borrow_mut().push(attachment);
    }

    work_methods!("");

    /// Forks the capture: a branch whose work runs after everything captured so far here,
    /// and concurrently with what is captured here after the fork, until
    /// [`Self::join`] joins it back. The branch queues on a private stream of its own, joined
    /// to the capture through a private event; it borrows the capture, so it cannot outlive
    /// the closure, and a branch not joined is joined when the capture ends.
    pub fn fork(&self) -> Result<CaptureBranch<'_>> {
        self.fork_from(&self.stream)
    }

    /// Joins `branch` back: what is captured here afterwards runs after all of the branch's
    /// work.
    pub fn join(&self, branch: CaptureBranch<'_>) -> Result<()> {
        if !std::ptr::eq(branch.capture, self) {
            return Err(Error::GraphRule(GraphRule::ForeignBranch));
        }
        self.join_into(&self.stream, branch.id)
    }

    /// A new branch whose first work waits for what `from` has captured so far.
    fn fork_from(&self, from: &StreamHandle) -> Result<CaptureBranch<'_>> {
        let stream = StreamHandle::create_unregistered(
            &self.context,
            StreamFlags { non_blocking: true },
            0,
        )?;
        self.order(from, &stream)?;
        let id = self.next_branch.get();
        self.next_branch.set(id + 1);
        self.branches.borrow_mut().push((id, stream.clone()));
        Ok(CaptureBranch {
            capture: self,
            id,
            stream,
        })
    }

    /// Joins branch `id` into `into` (the capture's stream or a branch's).
    fn join_into(&self, into: &StreamHandle, id: u64) -> Result<()> {
        let stream = {
            let branches = self.branches.borrow();
            let Some((_, stream)) = branches.iter().find(|(branch, _)| *branch == id) else {
                return Ok(());
            };
            stream.clone()
        };
        self.order(&stream, into)?;
        self.branches
            .borrow_mut()
            .retain(|(branch, _)| *branch != id);
        Ok(())
    }

    /// Joins every branch not joined yet into the capture's stream.
    fn join_all(&self) {
        let ids: Vec<u64> = self.branches.borrow().iter().map(|(id, _)| *id).collect();
        for id in ids {
            let _ = self.join_into(&self.stream, id);
        }
    }

    /// Orders what is captured on `after` from now on after what `before` has captured so
    /// far: a private event recorded on `before`, waited for on `after`.
    fn order(&self, before: &StreamHandle, after: &StreamHandle) -> Result<()> {
        let event = EventHandle::create_binding(&self.context, EventFlags::default(), false)?;
        // SAFETY: the event and both streams are alive; both streams are this capture's
        // private streams (the origin, or a branch joined to it), which no other code can
        // reach: the record is a capture dependency, not work, and the wait joins `after` to
        // this capture only.
        unsafe {
            driver!(cuEventRecord(event.as_cu(), before.as_cu()))?;
            driver!(cuStreamWaitEvent(after.as_cu(), event.as_cu(), 0))?;
        }
        self.events.borrow_mut().push(event);
        Ok(())
    }

    fn launch_on<P: KernelParams>(
        &self,
        stream: &StreamHandle,
        kernel: &TypedKernel<P>,
        config: &LaunchConfig,
        options: Option<&LaunchOptions>,
        args: P::Args<'_>,
    ) -> Result<()> {
        let (queued, cooperative_sms) = kernel.launch_captured(stream, config, options, &args)?;
        // Attached once the node is in the graph, whatever the call returns afterwards: a
        // closure that ignores the error must not leave a node whose buffers nothing keeps.
        if queued.queued {
            if cooperative_sms > 0 {
                self.attach(Attachment::Cooperative(cooperative_sms));
            }
            self.attach(Attachment::Kernel(kernel.kernel().clone()));
            P::for_each_buffer(&args, |buffer| {
                self.attach(Attachment::Buffer(buffer.clone()))
            });
        }
        queued.status
    }

    fn memset_on(
        &self,
        stream: &StreamHandle,
        buffer: &DevicePtrHandle,
        offset: usize,
        value: u8,
        len: usize,
    ) -> Result<()> {
        let start = buffer.range(offset, len)?;
        let _buffer_reach = buffer.check_accessible_on(stream)?;
        // SAFETY: the capture's stream is alive; the range lies in the buffer, which the
        // graph will keep alive.
        unsafe { driver!(cuMemsetD8Async(start, value, len, stream.as_cu())) }?;
        self.attach(Attachment::Buffer(buffer.clone()));
        Ok(())
    }

    fn copy_on(
        &self,
        stream: &StreamHandle,
        src: &DevicePtrHandle,
        src_offset: usize,
        dst: &DevicePtrHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let (from, to) = src.copy_ranges(src_offset, dst, dst_offset, len)?;
        let _src_reach = src.check_accessible_on(stream)?;
        let _dst_reach = dst.check_accessible_on(stream)?;
        // SAFETY: the capture's stream is alive; both ranges lie in their buffers, which the
        // graph will keep alive.
        unsafe { driver!(cuMemcpyAsync(to, from, len, stream.as_cu())) }?;
        self.attach(Attachment::Buffer(src.clone()));
        self.attach(Attachment::Buffer(dst.clone()));
        Ok(())
    }
}

/// A forked branch of a [`Capture`] ([`Capture::fork`]): its work is captured on a private
/// stream of its own, concurrently with the capture's after the fork, and attached to the same
/// graph. It borrows the capture, so it stays inside the capture's closure; join it back with
/// [`Capture::join`] (a branch never joined is joined when the capture ends).
pub struct CaptureBranch<'a> {
    capture: &'a Capture,
    id: u64,
    stream: StreamHandle,
}

impl<'a> CaptureBranch<'a> {
    /// The capture and this branch's stream, which its work methods queue on.
    fn target(&self) -> (&Capture, &StreamHandle) {
        (self.capture, &self.stream)
    }

    work_methods!(" on this branch");

    /// Forks this branch again (see [`Capture::fork`]).
    pub fn fork(&self) -> Result<CaptureBranch<'a>> {
        self.capture.fork_from(&self.stream)
    }

    /// Joins `other` into this branch: this branch's later work runs after all of `other`'s.
    pub fn join(&self, other: CaptureBranch<'_>) -> Result<()> {
        if !std::ptr::eq(other.capture, self.capture) {
            return Err(Error::GraphRule(GraphRule::ForeignBranch));
        }
        self.capture.join_into(&self.stream, other.id)
    }
}
