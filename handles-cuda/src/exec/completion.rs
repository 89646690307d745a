//! An event's completion as a `Future`, for any executor and without a thread that spins
//! while nothing is due.
//!
//! [`EventHandle::completed`] hands the event to the waiter thread (`completion_waiter.rs`),
//! which polls it for its first moments and wakes the task as soon as the record completes;
//! a completion not resolved by then, or of an event that can be recorded without notice
//! (by a graph's record node, or another process), goes to a notifier stream whose host
//! function wakes the task once the event's record completes (`completion_notifier.rs`), or,
//! while its context has `BUSY_NOTIFIERS_PER_CONTEXT` busy ones, stays with the waiter. An
//! event already complete resolves at once, with no driver call but a query.
//!
//! A first poll soon after `completed` spins on the shared state for up to [`SPIN_FOR`] while
//! the waiter polls the event (no driver call of its own), so a wait that short resolves
//! without parking the task; it spins only while recent completions earned the credit (see
//! `spin_credit.rs`), so a program whose waits are long stops spinning after a few.
//!
//! Dropping the future early is safe: the waiter lets go of it, and a host function still
//! runs later and finds no waker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::exec::completion_notifier::{Room, hand_over, let_go};
use crate::exec::completion_protocol::Shared;
use crate::exec::completion_waiter::{SPIN_CREDIT, SPIN_FOR, settle, watch};
use crate::exec::context::ContextHandle;
use crate::exec::event::EventHandle;

pub use crate::exec::completion_notifier::{BUSY_NOTIFIERS_PER_CONTEXT, NOTIFIERS_PER_CONTEXT};

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
    /// Until when the first poll may spin (the waiter polls the event); `None` once polled, or
    /// when the waiter does not poll it.
    spin_until: Option<Instant>,
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
        if let Some(until) = this.spin_until.take() {
            spin(&this.shared, until);
        }
        if this.shared.ready_or_register(task.waker()) {
            this.let_go();
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Spins until `shared` is done or `until` passes, if recent completions earned the credit;
/// earns or spends it by the outcome.
fn spin(shared: &Shared, until: Instant) {
    if !SPIN_CREDIT.spins() || shared.is_done() {
        return;
    }
    loop {
        // The clock is read once in 64 looks at the state (a look is a load).
        for _ in 0..64 {
            if shared.is_done() {
                SPIN_CREDIT.earn();
                return;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= until {
            SPIN_CREDIT.spend();
            return;
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
    /// crate polls the event for up to 200 µs, and the future's first poll, if it comes within
    /// 20 µs of this call, spins that long on what that thread finds (no driver call of its
    /// own) before it parks the task: a short wait resolves on the polling thread as a
    /// blocking [`EventHandle::synchronize`] would, and a wait up to 200 µs wakes the task as
    /// soon as the record completes. A longer one is woken by a host function on a notifier
    /// stream of the event's context, and nothing polls it meanwhile; beyond
    /// [`BUSY_NOTIFIERS_PER_CONTEXT`] completions pending at once in a context, the waiter
    /// polls the rest now and then instead (driver 580's `cuStreamCreate` blocks once about 30
    /// streams have a host function waiting behind a pending event). First polls stop
    /// spinning after a few spins that saw nothing complete, until completions come within
    /// 20 µs again. Works with any executor; dropping the future early is safe.
    ///
    /// A record of the event that another thread makes while this call runs is not ordered
    /// with it: the future may await that record instead (whichever the driver holds when the
    /// watch begins). Records made after the call returns are never awaited.
    pub fn completed(&self) -> Result<Completion> {
        if self.query()? {
            return Ok(Completion {
                shared: Arc::new(Shared::new(true)),
                kept_in: 0,
                spin_until: None,
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
        let since = Instant::now();
        let spin_until = if watch(self, &context, &shared, since) {
            Some(since + SPIN_FOR)
        } else {
            hand_over(self, &context, &shared, Room::Beyond)?;
            None
        };
        Ok(Completion {
            shared,
            kept_in: context.as_cu() as usize,
            spin_until,
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
