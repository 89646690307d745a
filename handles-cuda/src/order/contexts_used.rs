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

use crate::driver::call::driver;
use crate::driver::capture::in_relaxed_capture_mode;
use crate::driver::current::in_context;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
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

/// Blocks until `context` has finished all its work (`cuCtxSynchronize`, in relaxed capture
/// mode).
fn synchronize_context(context: &ContextHandle) -> Result<()> {
    in_relaxed_capture_mode(|| {
        // SAFETY: the context is alive (the handle holds it) and current for the call.
        in_context(context.as_cu(), || unsafe { driver!(cuCtxSynchronize()) })
    })
}
