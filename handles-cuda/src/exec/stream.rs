//! CUDA streams: owned streams in a context, references, with-owner wrappers and the built-in
//! default streams.

use cudarc::driver::sys::{self, CUstream};
use handles_core::ResourceHandle;

use crate::driver::call::completed;
use crate::driver::call::{deleter_status, driver, out};
use crate::driver::capture::{foreign_capture_possible, in_capture_closure, is_capturing};
use crate::driver::current::{current_raw, device_of, in_context};
use crate::driver::load::ensure_loaded;
use crate::error::Result;
use crate::exec::context::ContextHandle;
use crate::exec::stream_generation::GENERATIONS;
use crate::exec::stream_progress::StreamId;

/// A CUDA stream.
///
/// Ownership: [`StreamHandle::create`] owns the stream and destroys it when the last clone
/// drops; references (`from_raw_borrowed`, [`StreamHandle::legacy`],
/// [`StreamHandle::per_thread`]) and with-owner wrappers destroy nothing. Keeps alive: its
/// context, when it has one, so the context outlives the stream.
#[derive(ResourceHandle)]
#[handle(raw = CUstream, accessor = as_cu, delete = destroy_stream, registry)]
pub struct Stream {
    /// The context the stream belongs to, when known.
    #[owner]
    pub context: Option<ContextHandle>,
}
// SAFETY: the CUDA driver API lets streams be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for Stream {}

fn destroy_stream(raw: CUstream, stream: &Stream) -> Result<()> {
    // The driver may give this address to the next stream while work queued here still runs:
    // markers keyed by it must not match that stream (`stream_generation.rs`).
    crate::exec::stream_generation::GENERATIONS.retire(raw as usize);
    // SAFETY: the handle owns `raw`, and this deleter runs once; its context is still alive.
    let destroyed = deleter_status(unsafe { driver!(cuStreamDestroy_v2(raw)) });
    if destroyed.is_err() {
        // The stream lives on in the driver: its context (a green context's, say) must not be
        // destroyed under it, so it is leaked with the stream.
        std::mem::forget(stream.context.clone());
    }
    destroyed
}

/// The raw value of the legacy default stream (`CU_STREAM_LEGACY`).
pub const LEGACY_STREAM: CUstream = 0x1 as CUstream;
/// The raw value of the per-thread default stream (`CU_STREAM_PER_THREAD`).
pub const PER_THREAD_STREAM: CUstream = 0x2 as CUstream;

/// Flags for [`StreamHandle::create`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamFlags {
    /// Do not synchronise with the legacy default stream (`CU_STREAM_NON_BLOCKING`).
    pub non_blocking: bool,
}

impl StreamHandle {
    /// Creates a stream in `context` with the default flags (it synchronises with the legacy
    /// default stream, as `cuStreamCreate`'s streams do) and priority 0: [`Self::create`]
    /// with `StreamFlags::default()` and `0`.
    pub fn new(context: &ContextHandle) -> Result<Self> {
        Self::create(context, StreamFlags::default(), 0)
    }

    /// Creates a stream in `context` with the given flags and priority (lower numbers are
    /// higher priority; the driver clamps out-of-range values). The context is made current
    /// only for the call, and the caller's context is restored.
    pub fn create(context: &ContextHandle, flags: StreamFlags, priority: i32) -> Result<Self> {
        Self::create_with(context, flags, priority, |raw, record| {
            // SAFETY: a fresh stream owned by nobody else; `destroy_stream` destroys it.
            unsafe { StreamHandle::from_raw(raw, record) }
        })
    }

    /// A stream like [`StreamHandle::create`] makes, but not in the registry: nothing that
    /// learns its raw value can look it up (a capture's private stream, a recycled stream).
    pub(crate) fn create_unregistered(
        context: &ContextHandle,
        flags: StreamFlags,
        priority: i32,
    ) -> Result<Self> {
        Self::create_with(context, flags, priority, |raw, record| {
            // SAFETY: a fresh stream owned by nobody else; `destroy_stream` destroys it.
            let handle = unsafe { handles_core::Handle::from_raw_owned_unregistered(raw, record) };
            StreamHandle::from_handle(handle)
        })
    }

    fn create_with(
        context: &ContextHandle,
        flags: StreamFlags,
        priority: i32,
        wrap: impl FnOnce(CUstream, Stream) -> StreamHandle,
    ) -> Result<Self> {
        let context = context.keep_alive()?.into_owned();
        let raw_context = context.as_cu();
        let raw_flags = if flags.non_blocking {
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32
        } else {
            sys::CUstream_flags::CU_STREAM_DEFAULT as u32
        };
        let record = Stream {
            context: Some(context),
        };
        in_context(raw_context, || {
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            out(|raw| unsafe { driver!(cuStreamCreateWithPriority(raw, raw_flags, priority)) })
                .map(|raw| wrap(raw, record))
        })
    }

    /// A reference to the legacy default stream. It resolves to whichever context is current
    /// when it is used; use [`StreamHandle::legacy_in`] to pin a context.
    pub fn legacy() -> Self {
        // SAFETY: the built-in stream token is always valid and never destroyed.
        unsafe { StreamHandle::from_raw_borrowed(LEGACY_STREAM, Stream { context: None }) }
    }

    /// A reference to the per-thread default stream of the thread that uses it.
    pub fn per_thread() -> Self {
        // SAFETY: the built-in stream token is always valid and never destroyed.
        unsafe { StreamHandle::from_raw_borrowed(PER_THREAD_STREAM, Stream { context: None }) }
    }

    /// The legacy default stream bound to `context`, which it keeps alive: work and frees on
    /// it run in that context whatever is current on the calling thread. A non-owning
    /// reference is resolved to a handle that keeps the context alive, or refused.
    pub fn legacy_in(context: &ContextHandle) -> Result<Self> {
        let record = Stream {
            context: Some(context.keep_alive()?.into_owned()),
        };
        // SAFETY: the built-in stream token is always valid and never destroyed.
        Ok(unsafe { StreamHandle::from_raw_borrowed(LEGACY_STREAM, record) })
    }

    /// Whether this is one of the built-in default-stream tokens (null, legacy, per-thread),
    /// whose meaning depends on the current context.
    pub fn is_default_token(&self) -> bool {
        let raw = self.as_cu();
        raw.is_null() || raw == LEGACY_STREAM || raw == PER_THREAD_STREAM
    }

    /// Whether all work queued on the stream has completed (`cuStreamQuery`), without
    /// blocking.
    pub fn query(&self) -> Result<bool> {
        self.run(|raw| {
            // SAFETY: the stream is alive while `self` is.
            completed("cuStreamQuery", unsafe { sys::cuStreamQuery(raw) })
        })
    }

    /// Blocks until all work queued on the stream has completed.
    pub fn synchronize(&self) -> Result<()> {
        self.run(|raw| {
            // SAFETY: the stream is alive while `self` is.
            unsafe { driver!(cuStreamSynchronize(raw)) }
        })
    }

    /// Refuses stream-ordered work on a stream that code outside this crate is capturing into
    /// a graph (cudarc can, on its own streams and on streams lent to it): the graph would
    /// reference memory that this crate does not know to keep alive, and an allocation or a
    /// free would become a graph node instead of happening. On a stream this crate created
    /// and never lent, two relaxed loads; otherwise one `cuStreamIsCapturing`.
    ///
    /// Also refuses the work inside a `GraphHandle::capture` closure on its thread
    /// ([`Error::OutsideCapture`](crate::error::Error::OutsideCapture)): it would run at once
    /// and be left out of the graph (the capture's own work queues on its private streams,
    /// without this check).
    #[inline]
    pub(crate) fn refuse_if_captured(&self) -> Result<()> {
        if !self.may_be_captured_elsewhere() && !foreign_capture_possible() {
            return Ok(());
        }
        if in_capture_closure() {
            return Err(crate::error::Error::OutsideCapture);
        }
        self.refuse_if_captured_now()
    }

    /// [`Self::refuse_if_captured`] for allocations, releases and the crate's own
    /// bookkeeping (a notifier's host function), which go ahead inside a capture's closure:
    /// a buffer allocated there is made for the graph's work, and one dropped there is freed
    /// as anywhere else, not leaked.
    #[inline]
    pub(crate) fn refuse_foreign_capture(&self) -> Result<()> {
        if !self.may_be_captured_elsewhere() && !foreign_capture_possible() {
            return Ok(());
        }
        self.refuse_if_captured_now()
    }

    /// Whether code outside this crate can capture this stream without lending it first: a
    /// stream this crate does not own (a wrapped cudarc stream, a reference) or the per-thread
    /// default stream (cudarc's `per_thread_stream` is the same stream). Streams this crate
    /// created can only be captured by others once lent (`to_cudarc`); the legacy stream
    /// cannot be captured at all.
    #[inline]
    pub(crate) fn may_be_captured_elsewhere(&self) -> bool {
        let raw = self.as_cu();
        if raw == PER_THREAD_STREAM {
            return true;
        }
        !self.is_owning() && !self.is_default_token()
    }

    /// The identity under which records on this stream are stamped (`exec/stream_progress.rs`):
    /// for a stream this crate owns while no other code can capture one; `None` otherwise, and
    /// records on it are not stamped. Its address's generation tells it from a later stream
    /// given the same address.
    #[inline]
    pub(crate) fn stamped_id(&self) -> Option<StreamId> {
        if !self.is_owning()
            || self.is_default_token()
            || self.may_be_captured_elsewhere()
            || foreign_capture_possible()
        {
            return None;
        }
        let raw = self.as_cu() as usize;
        Some(StreamId {
            raw,
            generation: GENERATIONS.of(raw),
        })
    }

    /// Whether the stream is being captured into a graph now (`cuStreamIsCapturing`; an
    /// invalidated capture counts, and the legacy stream counts while a blocking stream of its
    /// context captures).
    pub(crate) fn is_capturing(&self) -> Result<bool> {
        self.run(|raw| {
            // SAFETY: the stream is alive while `self` is.
            unsafe { is_capturing(raw) }
        })
    }

    #[cold]
    fn refuse_if_captured_now(&self) -> Result<()> {
        if self.is_capturing()? {
            return Err(crate::error::Error::Capturing);
        }
        Ok(())
    }

    /// Runs a stream-ordered driver call on this stream. A real stream carries its context,
    /// so the call needs no current context; a default-stream token means "the current
    /// context's", so a token bound to a context makes that context current for the call.
    #[inline(always)]
    pub(crate) fn run<T>(&self, call: impl FnOnce(CUstream) -> Result<T>) -> Result<T> {
        if !self.is_default_token() {
            return call(self.as_cu());
        }
        self.run_on_token(call)
    }

    /// [`Self::run`] on a default-stream token: out of line, off the common path.
    #[inline(never)]
    fn run_on_token<T>(&self, call: impl FnOnce(CUstream) -> Result<T>) -> Result<T> {
        let raw = self.as_cu();
        // The built-in tokens can be made without a driver; everything else came from one.
        ensure_loaded()?;
        match self.context() {
            Some(context) => in_context(context.as_cu(), || call(raw)),
            None => {
                let _current = require_current_context(raw)?;
                call(raw)
            }
        }
    }

    /// [`Self::run`] for work that is queued: also says whether the call itself succeeded,
    /// separately from a failure to restore the caller's context afterwards. Work that was
    /// queued must be reported as a use (or its allocation kept) whatever else failed.
    pub(crate) fn queue(&self, call: impl FnOnce(CUstream) -> Result<()>) -> Queued {
        let mut queued = false;
        let status = self.run(|raw| {
            let called = call(raw);
            queued = called.is_ok();
            called
        });
        Queued { queued, status }
    }

    /// [`Self::run_bound`] for work that is queued; see [`Self::queue`].
    #[inline]
    pub(crate) fn queue_bound(&self, call: impl FnOnce(CUstream) -> Result<()>) -> Queued {
        let mut queued = false;
        let status = self.run_bound(|raw| {
            let called = call(raw);
            queued = called.is_ok();
            called
        });
        Queued { queued, status }
    }

    /// Runs a driver call on this stream with the stream's context current. For calls that
    /// validate memory against the current context (host/device copies).
    #[inline]
    pub(crate) fn run_bound<T>(&self, call: impl FnOnce(CUstream) -> Result<T>) -> Result<T> {
        let raw = self.as_cu();
        match self.context() {
            Some(context) => in_context(context.as_cu(), || call(raw)),
            None if self.is_default_token() => {
                // The built-in tokens can be made without a driver.
                ensure_loaded()?;
                let _current = require_current_context(raw)?;
                call(raw)
            }
            // A borrowed stream runs in its own context, whatever is current.
            None => call(raw),
        }
    }
}

/// The outcome of queuing work on a stream: whether the driver accepted it, and the whole
/// call's status (which also fails when restoring the caller's context failed afterwards).
#[must_use]
pub(crate) struct Queued {
    pub(crate) queued: bool,
    pub(crate) status: Result<()>,
}

impl Queued {
    /// The status, after `then` ran if the work was queued (its error is reported too).
    #[inline]
    pub(crate) fn then(self, then: impl FnOnce() -> Result<()>) -> Result<()> {
        let after = if self.queued { then() } else { Ok(()) };
        self.status.and(after)
    }
}

/// A default-stream token bound to no context means "the current context's": with none
/// current, the driver call would be invalid, so it is refused before it is made. The current
/// context must also be one a handle keeps alive (the handle returned is held for the call): a
/// primary context another library released while leaving it current is refused, not used.
/// The per-thread token has no stream in a green context (driver 580 answers
/// `CUDA_ERROR_INVALID_HANDLE` for it there), so it is refused with a typed error first.
fn require_current_context(token: CUstream) -> Result<ContextHandle> {
    let context = ContextHandle::owning(current_for_token()?)?;
    refuse_green_per_thread(token, &context)?;
    Ok(context)
}

/// The context current on this thread, which a default-stream token bound to none names: with
/// none current, the token names no stream.
fn current_for_token() -> Result<sys::CUcontext> {
    let current = current_raw()?;
    if current.is_null() {
        return Err(crate::error::Error::NoCurrentContext {
            what: "a default-stream token bound to no context needs a current context; none is \
                   current on this thread (use `StreamHandle::legacy_in`)",
        });
    }
    Ok(current)
}

/// The one home of the rule that a green context has no per-thread default stream.
fn refuse_green_per_thread(token: CUstream, context: &ContextHandle) -> Result<()> {
    if token == PER_THREAD_STREAM && context.sm_count().is_some() {
        return Err(crate::error::Error::WrongContext {
            what: "a green context has no per-thread default stream; use one of its own \
                   streams, or `StreamHandle::legacy_in`",
        });
    }
    Ok(())
}

impl StreamHandle {
    /// This stream made usable at any later time on any thread, as a free's stream: a
    /// default-stream token without a context is bound to an owning handle of the context
    /// current now (the token alone would mean whichever context is current when the free
    /// runs, and a borrowed context could be destroyed before it does).
    #[inline]
    pub(crate) fn bound(&self) -> Result<StreamHandle> {
        if !self.is_default_token() || self.context().is_some() {
            return Ok(self.clone());
        }
        self.bound_to_current()
    }

    /// Refuses a default-stream token bound to no context that names no stream on this thread:
    /// none is current, or, for the per-thread token, a green context is (which has none). No
    /// work can have been queued on what such a token names, so a report of work on it is
    /// refused before anything is marked or waited for. (A token in a context that no handle
    /// can keep alive is not refused here: its report is handled as any marker that cannot be
    /// kept, and the driver is never called in that context.)
    #[inline]
    pub(crate) fn refuse_if_unresolved(&self) -> Result<()> {
        if !self.is_default_token() || self.context().is_some() {
            return Ok(());
        }
        self.refuse_naming_no_stream()
    }

    /// [`Self::refuse_if_unresolved`] for an unbound token.
    #[cold]
    fn refuse_naming_no_stream(&self) -> Result<()> {
        ensure_loaded()?;
        let current = current_for_token()?;
        // Asked of the handles that know the context: nothing is asked of a context that no
        // handle keeps alive.
        if self.as_cu() == PER_THREAD_STREAM
            && let Ok(context) = ContextHandle::owning(current)
        {
            refuse_green_per_thread(self.as_cu(), &context)?;
        }
        Ok(())
    }

    /// [`Self::bound`] for an unbound default-stream token.
    #[cold]
    fn bound_to_current(&self) -> Result<StreamHandle> {
        ensure_loaded()?;
        let context = require_current_context(self.as_cu())?;
        let record = Stream {
            context: Some(context),
        };
        // SAFETY: default-stream tokens are always valid and never destroyed.
        Ok(unsafe { StreamHandle::from_raw_with_owner(self.as_cu(), record, ()) })
    }

    /// The ordinal of the device this stream's work runs on: from its context's record when
    /// known, else asked of the driver in that context.
    #[inline]
    pub(crate) fn device_ordinal(&self) -> Result<usize> {
        if let Some(ordinal) = self.context().as_ref().and_then(ContextHandle::device) {
            return Ok(ordinal);
        }
        self.device_ordinal_asked()
    }

    /// [`Self::device_ordinal`] when the stream's record does not know it: off the common path.
    #[cold]
    #[inline(never)]
    fn device_ordinal_asked(&self) -> Result<usize> {
        let context = self.owning_context()?;
        if let Some(ordinal) = context.device() {
            return Ok(ordinal);
        }
        crate::driver::load::ordinal_of(device_of(context.as_cu())?)
    }

    /// An owning handle of the context this stream's work runs in: its own context handle, the
    /// current context for an unbound default-stream token, or the context the driver reports
    /// for a borrowed stream (`cuStreamGetCtx`), if a handle can own it.
    pub(crate) fn owning_context(&self) -> Result<ContextHandle> {
        if let Some(context) = self.context() {
            return Ok(context.clone());
        }
        ensure_loaded()?;
        if self.is_default_token() {
            return require_current_context(self.as_cu());
        }
        // SAFETY: the stream is alive while `self` is; `raw` is a valid out-pointer.
        let raw = out(|raw| unsafe { driver!(cuStreamGetCtx(self.as_cu(), raw)) })?;
        ContextHandle::owning(raw)
    }
}
