//! CUDA events: owned in a context, context-free, and interprocess (IPC) events (exported and
//! imported in `ipc/event.rs`).

use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUcontext, CUevent, CUstream};
use handles_core::ResourceHandle;

use crate::driver::call::{check, completed, deleter_status, driver, out};
use crate::driver::current::{current_raw, in_context_or_bind};
use crate::driver::load::{ensure_loaded, newer, probed};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
pub(crate) use crate::exec::record_count::RecordCount;
use crate::exec::stream::StreamHandle;
use crate::exec::stream_progress::{Known, PROGRESS, RecordStamps, Recording};

/// A CUDA event, with the flags it was created with.
///
/// Ownership: every constructor here owns the event and destroys it when the last clone
/// drops; `from_raw_borrowed` references own nothing. Keeps alive: its context, when created
/// in one. Events are not registered: creating one is the hottest path of the crate (a few
/// hundred nanoseconds in the driver), and a registry lock would add a third to it.
#[derive(ResourceHandle)]
#[handle(raw = CUevent, accessor = as_cu, delete = destroy_event)]
pub struct Event {
    /// The context the event was created in, when created through a context handle.
    #[owner]
    pub context: Option<ContextHandle>,
    /// The flags the event was created with.
    #[handle(copy)]
    pub flags: EventFlags,
    /// The device ordinal of the creating context, when known.
    #[handle(copy)]
    pub device: Option<usize>,
    /// Whether a completion's waiter polls it (see `exec/completion_waiter.rs`).
    pub(crate) records: RecordCount,
    /// Its latest record's place in its stream, when stream order can speak for it
    /// (`exec/stream_progress.rs`).
    pub(crate) stamps: RecordStamps,
}

/// Hands the watches of an event over to the notifier, before the event is recorded again:
/// set by the waiter module when it starts (a function, so that this file needs not import
/// it).
pub(crate) static RERECORD: OnceLock<fn(&EventHandle)> = OnceLock::new();

impl EventHandle {
    /// Before a record of this event that does not come through [`EventHandle::record`] is
    /// made possible (a graph record node): no waiter polls it from now on, and the watches
    /// pending are handed to the notifier first.
    pub(crate) fn before_uncounted_records(&self) {
        // Its stamps first: a wait that began before, whose driver call may see such a record,
        // must not speak for the stream of the record it stamped (`exec/stream_progress.rs`).
        (**self).record().stamps.forget();
        if (**self).record().records.set_uncounted()
            && let Some(hand_over) = RERECORD.get()
        {
            hand_over(self);
        }
    }

    /// Before a record of this event that does not come through [`EventHandle::record`] but is
    /// made by this crate (a launch's programmatic event): the watches pending are handed to
    /// the notifier first. The record is made while the returned recording lives: it is
    /// unstamped, overlaps any stamped one (`exec/stream_progress.rs`), and ends, without
    /// stamps, when the recording is dropped after the driver call.
    pub(crate) fn before_other_record(&self) -> Recording<'_> {
        self.before_record(&(**self).record().records);
        (**self).record().stamps.begin(&PROGRESS, None)
    }

    /// Hands the pending watches of this event to the notifier, if there are any.
    #[inline]
    fn before_record(&self, records: &RecordCount) {
        if records.watched()
            && let Some(hand_over) = RERECORD.get()
        {
            hand_over(self);
        }
    }
}

// SAFETY: the CUDA driver API lets events be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for Event {}

#[inline]
fn destroy_event(raw: CUevent, _: &Event) -> Result<()> {
    // SAFETY: the handle owns `raw` and this deleter runs once.
    deleter_status(unsafe { driver!(cuEventDestroy_v2(raw)) })
}

/// Event creation flags. The default is timing off, spinning waits, not interprocess.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventFlags {
    /// Record timestamps, so `elapsed_ms` works (off by default: it makes events costlier).
    pub timing: bool,
    /// Host waits block the thread instead of spinning (`CU_EVENT_BLOCKING_SYNC`).
    pub blocking_sync: bool,
    /// The event can be shared with other processes (`CU_EVENT_INTERPROCESS`; needs timing off).
    pub interprocess: bool,
}

impl EventFlags {
    /// Flags of an event that records timestamps.
    pub fn timing() -> Self {
        EventFlags {
            timing: true,
            ..Self::default()
        }
    }

    fn to_raw(self) -> Result<u32> {
        if self.interprocess && self.timing {
            return Err(Error::BadFlags {
                what: "an interprocess event must be created with timing disabled",
            });
        }
        let mut raw = 0;
        if !self.timing {
            raw |= sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        }
        if self.blocking_sync {
            raw |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        if self.interprocess {
            raw |= sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32;
        }
        Ok(raw)
    }
}

/// Refuses to record an event of context `own` on a stream whose work runs in another
/// context. Runs inside [`StreamHandle::run`], so for a token bound to a context that context
/// is current, and for an unbound token the caller's.
fn require_same_context(own: CUcontext, stream: &StreamHandle, raw: CUstream) -> Result<()> {
    let theirs = match stream.context() {
        Some(context) => context.as_cu(),
        None if stream.is_default_token() => current_raw()?,
        // SAFETY: the stream is alive while its handle is; `context` is a valid out-pointer.
        None => out(|context| unsafe { driver!(cuStreamGetCtx(raw, context)) })?,
    };
    require_context(own, theirs)
}

/// The one record-context rule: an event of context `own` is recorded only in `own`.
fn require_context(own: CUcontext, theirs: CUcontext) -> Result<()> {
    if theirs != own {
        return Err(Error::WrongContext {
            what: "an event can only be recorded on a stream of the context it was created in",
        });
    }
    Ok(())
}

impl EventHandle {
    /// Refuses a record of this event in `context` (a graph's record node) unless the event
    /// belongs to it; an event without a known context passes, as on a stream.
    pub(crate) fn require_recordable_in(&self, context: CUcontext) -> Result<()> {
        match self.context() {
            Some(own) => require_context(own.as_cu(), context),
            None => Ok(()),
        }
    }
}

impl EventHandle {
    /// Creates an event in `context`, which it keeps alive (a non-owning reference is
    /// resolved to a handle that does, or refused).
    ///
    /// On a thread with no context current, a primary `context` is left current, kept alive by
    /// the thread's primary-context cache until [`clear_primary_cache`] or the thread's exit:
    /// the thread's later calls find it current, as after cudarc's calls. A thread that had a
    /// context current has it current again afterwards.
    ///
    /// [`clear_primary_cache`]: crate::exec::clear_primary_cache
    pub fn create(context: &ContextHandle, flags: EventFlags) -> Result<Self> {
        Self::create_binding(context, flags, true)
    }

    /// [`EventHandle::create`]; with `bind` false, a thread with no context current has none
    /// afterwards either (events this crate makes for itself, inside other calls).
    pub(crate) fn create_binding(
        context: &ContextHandle,
        flags: EventFlags,
        bind: bool,
    ) -> Result<Self> {
        let raw_flags = flags.to_raw()?;
        let context = context.keep_alive()?;
        let bind = bind.then_some(|| context.leave_current());
        in_context_or_bind(context.as_cu(), bind, || {
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            let raw = out(|raw| unsafe { driver!(cuEventCreate(raw, raw_flags)) })?;
            // Made after the call, straight into the handle's box.
            let record = Event {
                device: context.device(),
                context: Some(context.as_ref().clone()),
                flags,
                records: RecordCount::new(flags.interprocess),
                stamps: RecordStamps::default(),
            };
            // SAFETY: a fresh event owned by nobody else; `destroy_event` destroys it.
            Ok(unsafe { EventHandle::from_raw(raw, record) })
        })
    }

    /// Creates an event in the context current on this thread, which it keeps alive: a
    /// context made by this crate, or a device's primary context (retained). Fails if none is
    /// current, or if the current context is one no handle can keep alive.
    pub fn create_in_current(flags: EventFlags) -> Result<Self> {
        ensure_loaded()?;
        flags.to_raw()?;
        // The event keeps its context alive, so the current context must be one a handle can
        // own; a context another library may destroy first is refused.
        let context = ContextHandle::owning(current_raw()?)?;
        Self::create(&context, flags)
    }

    /// Records the event on `stream`. Refused on a stream that other code is capturing into a
    /// graph: the event would become a captured event, through which a wait could pull any
    /// other stream into that capture.
    ///
    /// The event must belong to the context the stream's work runs in: the stream's own
    /// context, or for a default-stream token bound to none, the context current now.
    pub fn record(&self, stream: &StreamHandle) -> Result<()> {
        stream.refuse_if_captured()?;
        self.record_unrefused(stream)
    }

    /// [`Self::record`] for the crate's own markers, which go ahead inside a capture's
    /// closure (on a stream that is not captured): a free queued there is marked as anywhere.
    fn record_marker(&self, stream: &StreamHandle) -> Result<()> {
        stream.refuse_foreign_capture()?;
        self.record_unrefused(stream)
    }

    /// Records the event on `stream`, which the caller has found may be recorded on.
    fn record_unrefused(&self, stream: &StreamHandle) -> Result<()> {
        let event = self.as_cu();
        let own = self.context().as_ref().map(ContextHandle::as_cu);
        let record = (**self).record();
        // A waiter polling this event for an earlier record hands it over first.
        self.before_record(&record.records);
        let recording = record.stamps.begin(&PROGRESS, stream.stamped_id());
        let recorded = stream.run(|raw_stream| {
            if let Some(own) = own {
                require_same_context(own, stream, raw_stream)?;
            }
            // SAFETY: both the event and the stream are alive while their handles are.
            unsafe { driver!(cuEventRecord(event, raw_stream)) }
        });
        recording.end(recorded.is_ok());
        recorded
    }

    /// What stream order tells of this event's latest record before the driver is asked
    /// (`exec/stream_progress.rs`): nothing for an event others may record.
    fn known(&self) -> Known {
        let record = (**self).record();
        if record.records.uncounted() {
            return Known::Unstamped;
        }
        record.stamps.known(&PROGRESS)
    }

    /// Whether the work captured by the last `record` has completed (`cuEventQuery`), without
    /// blocking. An event never recorded counts as completed.
    pub fn query(&self) -> Result<bool> {
        ensure_loaded()?;
        let known = self.known();
        if let Known::Complete = known {
            return Ok(true);
        }
        // SAFETY: the event is alive while `self` is.
        let done = completed("cuEventQuery", unsafe { sys::cuEventQuery(self.as_cu()) })?;
        if let (true, Known::Ask(asked)) = (done, known) {
            (**self).record().stamps.completed(&PROGRESS, asked);
        }
        Ok(done)
    }

    /// A fresh event (no timing), recorded on `stream` now: work queued later anywhere can be
    /// ordered after everything queued on `stream` so far by waiting for it. It keeps the
    /// stream's context alive.
    pub(crate) fn marker_on(stream: &StreamHandle) -> Result<EventHandle> {
        let context = stream.owning_context()?;
        let marker = EventHandle::create_binding(&context, EventFlags::default(), false)?;
        marker.record_marker(stream)?;
        Ok(marker)
    }

    /// Blocks until the work captured by the last `record` has completed.
    pub fn synchronize(&self) -> Result<()> {
        let known = self.known();
        if let Known::Complete = known {
            return Ok(());
        }
        // SAFETY: the event is alive while `self` is.
        unsafe { driver!(cuEventSynchronize(self.as_cu())) }?;
        if let Known::Ask(asked) = known {
            (**self).record().stamps.completed(&PROGRESS, asked);
        }
        Ok(())
    }

    /// Milliseconds between `self` (recorded first) and `end`; both need timing enabled.
    pub fn elapsed_ms(&self, end: &EventHandle) -> Result<f32> {
        if !self.flags().timing || !end.flags().timing {
            return Err(Error::BadFlags {
                what: "elapsed_ms needs two events created with timing enabled",
            });
        }
        let mut ms = 0.0;
        let (start, end) = (self.as_cu(), end.as_cu());
        if newer::cuEventElapsedTime_v2.available() {
            // SAFETY: both events are alive; `ms` is a valid out-pointer.
            unsafe { probed!(cuEventElapsedTime_v2(&mut ms, start, end)) }?;
        } else if let Some(elapsed) =
            // SAFETY: the signature of `cuEventElapsedTime` in every driver that exports it.
            unsafe {
                crate::driver::load::function::<
                    unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult,
                >(c"cuEventElapsedTime")
            }
        {
            // SAFETY: both events are alive; `ms` is a valid out-pointer.
            check("cuEventElapsedTime", unsafe {
                elapsed(&mut ms, start, end)
            })?;
        } else {
            // Neither the function of CUDA 12.8 nor its predecessor: name the one to upgrade to.
            newer::cuEventElapsedTime_v2.require()?;
        }
        Ok(ms)
    }
}

impl StreamHandle {
    /// Makes all work queued on this stream after this call wait until `event` completes
    /// (`cuStreamWaitEvent`), without blocking the host. Refused on a stream that other code is
    /// capturing into a graph.
    pub fn wait_event(&self, event: &EventHandle) -> Result<()> {
        self.refuse_if_captured()?;
        let raw_event = event.as_cu();
        self.run(|raw| {
            // SAFETY: the stream and the event are alive while their handles are.
            unsafe { driver!(cuStreamWaitEvent(raw, raw_event, 0)) }
        })
    }
}
