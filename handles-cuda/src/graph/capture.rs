//! **Capture** runs in [`GraphHandle::capture`] on a stream of its own, which the closure can
//! reach only through the [`Capture`] it is given (which stays on the closure's thread). No
//! other code can queue work on that stream, allocate on it or free on it: nothing can be
//! captured that the graph does not attach, and a capture never sees an allocation or a free.

use cudarc::driver::sys::{self, CUgraph};

use crate::code::launch::{LaunchConfig, TypedKernel};
use crate::code::params::KernelParams;
use crate::driver::call::driver;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
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
        let start = buffer.range(offset, len)?;
        let _buffer_reach = buffer.check_accessible_on(&self.stream)?;
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
        let (from, to) = src.copy_ranges(src_offset, dst, dst_offset, len)?;
        let _src_reach = src.check_accessible_on(&self.stream)?;
        let _dst_reach = dst.check_accessible_on(&self.stream)?;
        // SAFETY: the capture's stream is alive; both ranges lie in their buffers, which the
        // graph will keep alive.
        unsafe { driver!(cuMemcpyAsync(to, from, len, self.stream.as_cu())) }?;
        self.attach(Attachment::Buffer(src.clone()));
        self.attach(Attachment::Buffer(dst.clone()));
        Ok(())
    }
}
