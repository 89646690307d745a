//! The contexts some work ran in, so that a later host-side release can wait for all of it.
//!
//! Used where the release is not stream-ordered: a library's unload (its kernels may still
//! run), the host frees of synchronous and pinned-host allocations (`cuMemFree`,
//! `cuMemFreeHost`, which do not wait for streams). Each use notes its context, one relaxed
//! load when it is the same context as last time; the release synchronises every noted
//! context first. (A pool notes here the contexts of default-stream frees it could not mark,
//! and marks their legacy streams instead: `memory/pool.rs`.) If a use ran in a context that
//! no handle can own (so it could not be waited for), the release is refused and the resource
//! leaked: the only sound answer to work that may still run.

use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::CUcontext;

use crate::driver::call::{deleter_status, driver};
use crate::driver::capture::{ReleaseWaiting, in_relaxed_capture_mode, sync_unless_capturing};
use crate::driver::current::in_context;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::disposal::{Deferred, defer};
use crate::exec::stream::StreamHandle;
use crate::order::contexts_used_protocol::NotedSet;

/// The contexts that work using a resource ran in (see the module docs).
pub(crate) struct ContextsUsed {
    contexts: NotedSet<ContextHandle>,
    /// Set when a use could not be noted: the release is then refused.
    unwaitable: AtomicBool,
}

impl ContextsUsed {
    pub(crate) fn new() -> Self {
        ContextsUsed {
            contexts: NotedSet::new(),
            unwaitable: AtomicBool::new(false),
        }
    }

    /// Notes that work ran in `context`; `owning` makes a handle that keeps it alive, called
    /// only the first time.
    #[inline]
    pub(crate) fn note(
        &self,
        context: CUcontext,
        owning: impl FnOnce() -> Result<ContextHandle>,
    ) -> Result<()> {
        let noted = self.contexts.note(context as usize, owning);
        if noted.is_err() {
            self.unwaitable.store(true, Ordering::Relaxed);
        }
        noted
    }

    /// Notes the context of work queued on `stream` by this thread.
    #[inline]
    pub(crate) fn note_stream(&self, stream: &StreamHandle) -> Result<()> {
        match stream.context() {
            Some(context) => self.note(context.as_cu(), || Ok(context.clone())),
            None => self.note_unknown_context(stream),
        }
    }

    /// A stream whose context no handle here can own (a token while an unregistered
    /// context, such as a green context's, is current): the host waits for the stream now,
    /// so the use needs no later wait; only if that fails is the release refused.
    #[cold]
    fn note_unknown_context(&self, stream: &StreamHandle) -> Result<()> {
        match stream.owning_context() {
            Ok(context) => self.note(context.as_cu(), || Ok(context.clone())),
            Err(_) => stream.synchronize().inspect_err(|_| {
                self.unwaitable.store(true, Ordering::Relaxed);
            }),
        }
    }

    /// Blocks until every noted context has finished its work; an error means some use could
    /// not be waited for, and the release must not happen.
    pub(crate) fn wait_for_all(&self) -> Result<()> {
        self.refuse_if_unwaitable()?;
        self.contexts.try_for_each(synchronize_context)
    }

    /// Calls `release` with the outcome of the wait for every noted context: the one way a
    /// release waits for them. `release` frees the resource on `Ok` and, on `Err` (some work may
    /// still run, or a use could not be noted), leaks whatever must outlive that work and
    /// returns the error. While a `GraphHandle::capture` runs (on any thread), a context
    /// synchronisation would invalidate it (driver 580 invalidates a capture on any
    /// `cuCtxSynchronize`, relaxed mode or not: `cuda-sim/probes/capture_side_calls.py`), so
    /// the contexts are taken and the wait and `release` are handed to the disposal thread,
    /// which runs them once no capture runs; `Ok` then means handed over, and `release`'s error
    /// goes to the report hook under `what` and `raw`. No capture begins while the wait and
    /// the release run (`driver/capture_sync.rs`), unless it waited longer than a capture's
    /// patience: a wait the driver then refuses is tried again, there, once none runs.
    pub(crate) fn release_after_all(
        &self,
        what: &'static str,
        raw: isize,
        release: impl FnOnce(Result<()>) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        let mut pending = Some(release);
        // The release runs under the same count as the wait: no capture begins before it ends.
        let ran = sync_unless_capturing(|| {
            let waited = self.wait_for_all();
            if refused_for_a_capture(&waited) {
                return None;
            }
            Some(pending.take().map_or(Ok(()), |release| release(waited)))
        })
        .flatten();
        if let Some(result) = ran {
            return result;
        }
        let Some(release) = pending else {
            return Ok(());
        };
        match self.take() {
            Ok(contexts) => {
                defer(Box::new(AfterCaptures {
                    what,
                    raw,
                    contexts,
                    release: Some(Box::new(release)),
                    _waiting: ReleaseWaiting::new(),
                }));
                Ok(())
            }
            Err(error) => release(Err(error)),
        }
    }

    /// Takes the noted contexts out, for a release that waits for them later (elsewhere); an
    /// error means some use could not be noted, and the release must not happen.
    pub(crate) fn take(&self) -> Result<Vec<ContextHandle>> {
        self.refuse_if_unwaitable()?;
        Ok(self.contexts.drain())
    }

    /// Lets go of the noted contexts, for a release that will never happen.
    pub(crate) fn clear(&self) {
        drop(self.contexts.drain());
    }

    fn refuse_if_unwaitable(&self) -> Result<()> {
        if self.unwaitable.load(Ordering::Relaxed) {
            return Err(Error::Unordered {
                what: "work using this resource ran in a context that could not be waited for, \
                       so it is leaked rather than released while that work may still run",
            });
        }
        Ok(())
    }
}

/// Whether a wait failed only because a capture began while it ran (a capture waits for a
/// synchronisation under way only so long: `CaptureInProgress::begin`, and the driver refuses
/// the synchronisation): the wait is tried again once no capture runs, on the disposal thread,
/// rather than the release given up (found by review: the memory was leaked, reported).
fn refused_for_a_capture(waited: &Result<()>) -> bool {
    use cudarc::driver::sys::CUresult::{
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    };
    waited.as_ref().is_err_and(|error| {
        matches!(
            error.code(),
            Some(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED | CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        )
    })
}

/// Blocks until `context` has finished all its work (`cuCtxSynchronize`, in relaxed capture
/// mode).
fn synchronize_context(context: &ContextHandle) -> Result<()> {
    in_relaxed_capture_mode(|| {
        // SAFETY: the context is alive (the handle holds it) and current for the call.
        in_context(context.as_cu(), || unsafe { driver!(cuCtxSynchronize()) })
    })
}

/// A release: called with the outcome of the wait for its contexts (see
/// [`ContextsUsed::release_after_all`]).
type Release = Box<dyn FnOnce(Result<()>) -> Result<()> + Send>;

/// A release handed over by [`ContextsUsed::release_after_all`] while a capture ran: the wait
/// for its contexts and the release itself, run on the disposal thread once no capture runs.
struct AfterCaptures {
    what: &'static str,
    raw: isize,
    contexts: Vec<ContextHandle>,
    release: Option<Release>,
    /// Counted while it waits: captures about to begin let it go first.
    _waiting: ReleaseWaiting,
}

impl Deferred for AfterCaptures {
    /// Memory, mappings, modules and graphs freed once no capture runs.
    fn gives_memory(&self) -> bool {
        true
    }

    fn try_release(&mut self) -> bool {
        let release = &mut self.release;
        let contexts = &self.contexts;
        let Some(released) = sync_unless_capturing(|| {
            let waited = contexts.iter().try_for_each(synchronize_context);
            if refused_for_a_capture(&waited) {
                return None;
            }
            Some(release.take().map_or(Ok(()), |release| release(waited)))
        })
        .flatten() else {
            return false;
        };
        if let Err(error) = deleter_status(released) {
            handles_core::report_release_failure(self.what, self.raw, error);
        }
        true
    }
}

impl Drop for AfterCaptures {
    /// A release never run (the process exits first) is leaked with what it owns, never
    /// dropped: its parts must outlive the resource.
    fn drop(&mut self) {
        std::mem::forget(self.release.take());
    }
}

#[cfg(all(test, not(handles_cuda_loom)))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::ContextsUsed;
    use crate::driver::capture::CaptureInProgress;
    use crate::exec::disposal::flush_disposals;

    /// A release made while a capture runs is handed to the disposal thread and runs once the
    /// capture has ended; one made with no capture runs at once. (No context is noted, so no
    /// driver is called: the hand-over alone is checked, under miri too.)
    #[test]
    fn a_release_waits_for_the_captures_running() {
        let used = ContextsUsed::new();
        let released = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&released);
        let capture = CaptureInProgress::begin();
        used.release_after_all("test", 0, move |waited| {
            waited?;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !released.load(Ordering::SeqCst),
            "released while a capture ran"
        );
        drop(capture);
        assert!(flush_disposals(Duration::from_secs(10)));
        assert!(
            released.load(Ordering::SeqCst),
            "not released after the capture"
        );

        let now = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&now);
        used.release_after_all("test", 0, move |waited| {
            waited?;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        assert!(
            now.load(Ordering::SeqCst),
            "not released at once with no capture"
        );
    }
}
