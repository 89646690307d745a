//! An event's completion as a `Future`, for any executor and without a thread that spins
//! while nothing is due.
//!
//! [`EventHandle::completed`] hands the event to the waiter thread (`completion_waiter.rs`),
//! which polls it for its first moments and wakes the task as soon as the record completes;
//! a completion not resolved by then, or of an event that can be recorded without notice
//! (by a graph's record node, or another process), goes to a notifier stream whose host
//! function wakes the task once the event's record completes (`completion_notifier.rs`). An
//! event already complete resolves at once, with no driver call but a query.
//!
//! Dropping the future early is safe: the waiter lets go of it, and a host function still
//! runs later and finds no waker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use crate::error::{Error, Result};
use crate::exec::completion_notifier::{hand_over, let_go};
use crate::exec::completion_protocol::Shared;
use crate::exec::completion_waiter::{settle, watch};
use crate::exec::context::ContextHandle;
use crate::exec::event::EventHandle;

pub use crate::exec::completion_notifier::NOTIFIERS_PER_CONTEXT;

/// A future that resolves when the record of an event that was the most recent when
/// [`EventHandle::completed`] was called has completed. Its output is `Ok(())`; the error of
/// the driver calls that set it up is returned by `completed` itself.
///
/// It may keep the awaited event until it resolves: resolving or dropping it may destroy that
/// event, so, like a handle, it is not to be dropped or polled inside a host function (see
/// [`StreamHandle::launch_host`](crate::StreamHandle::launch_host)).
#[must_use = "a future does nothing unless awaited"]
pub struct Completion {
    shared: Arc<Shared>,
    /// The raw context whose notifier table may keep the awaited event, until this completion
    /// lets go of it; 0 when nothing is kept.
    kept_in: usize,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("done", &self.shared.is_done())
            .finish()
    }
}

impl Future for Completion {
    type Output = ();

    fn poll(self: Pin<&mut Self>, task: &mut TaskContext<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.shared.ready_or_register(task.waker()) {
            this.let_go();
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Completion {
    /// Lets go of the awaited event in the notifier table once the host function has run.
    fn let_go(&mut self) {
        if self.kept_in != 0 && self.shared.passed() {
            let_go(std::mem::replace(&mut self.kept_in, 0), &self.shared);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // The host function may still run; it finds no waker. If it has run, the event goes
        // now; if not, the table lets go of it later.
        self.shared.forget_waker();
        self.let_go();
    }
}

impl EventHandle {
    /// A future that resolves once the event's most recent record (at the time of this call)
    /// has completed, or at once if it has (or the event was never recorded). A thread of this
    /// crate polls the event for up to 200 µs, so a short wait wakes the task as soon as the
    /// record completes (a parked executor thread's wake-up still comes on top: about 1.8× a
    /// blocking [`EventHandle::synchronize`] on a GPU); a longer one is woken by a host
    /// function on a notifier stream of the event's context, and nothing polls it meanwhile.
    /// Works with any executor; dropping the future early is safe.
    ///
    /// A record of the event that another thread makes while this call runs is not ordered
    /// with it: the future may await that record instead (whichever the driver holds when the
    /// watch begins). Records made after the call returns are never awaited.
    pub fn completed(&self) -> Result<Completion> {
        if self.query()? {
            return Ok(Completion {
                shared: Arc::new(Shared::new(true)),
                kept_in: 0,
            });
        }
        let shared = Arc::new(Shared::new(false));
        let context = match self.context() {
            Some(context) => context.clone(),
            None => ContextHandle::current()?.ok_or(Error::NoCurrentContext {
                what: "an event made without a context handle needs a current context to be \
                       awaited",
            })?,
        };
        if !watch(self, &context, &shared) {
            hand_over(self, &context, &shared)?;
        }
        Ok(Completion {
            shared,
            kept_in: context.as_cu() as usize,
        })
    }
}

/// Destroys the notifier streams of every context, after waiting for their pending
/// completions (so this blocks until the awaited events complete), and releases the contexts
/// they kept and the awaited events; returns how many streams there were. Completions the
/// waiter thread polls are handed to notifiers first, so nothing is kept afterwards. For
/// programs and tests that check for leaks at exit; later completions make new ones.
pub fn clear_notifiers() -> usize {
    settle();
    crate::exec::completion_notifier::clear()
}
