//! How many completions a notifier stream serves whose host functions have not passed their
//! wait (see `completion_notifier.rs`): a stream is idle at 0, and a hand-over takes an idle
//! one by moving it from 0 to 1 in one step. On its own so that `tests/loom_notifier_count.rs`
//! can model-check it with loom: two hand-overs never both take the same idle stream, and the
//! one that takes it sees everything the last host function on it did before it let go.

#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// The count of one notifier stream's completions still to pass their wait.
#[derive(Debug)]
pub(crate) struct NotifierCount(AtomicUsize);

impl NotifierCount {
    /// The count of a stream made for a completion: taken by it.
    pub(crate) fn taken() -> Self {
        NotifierCount(AtomicUsize::new(1))
    }

    /// Takes the stream if it is idle; `false` if a completion's host function is still to
    /// run on it. Acquire on success: pairs with [`NotifierCount::let_go`]'s release, so the
    /// taker comes after the last host function's work on the stream.
    pub(crate) fn take_if_idle(&self) -> bool {
        self.0
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether the stream is idle (no completion's host function still to run on it).
    pub(crate) fn idle(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    /// A completion taken with [`NotifierCount::take_if_idle`] or [`NotifierCount::taken`]
    /// lets go: its host function has passed the wait (the last thing it does), or nothing
    /// was queued for it.
    pub(crate) fn let_go(&self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// Lets go of a taken count when dropped: a host function holds one from its first statement,
/// so the count is let go of however it ends (a waker that panics unwinds through it).
pub(crate) struct LetGoOnDrop<'a>(pub(crate) &'a NotifierCount);

impl Drop for LetGoOnDrop<'_> {
    fn drop(&mut self) {
        self.0.let_go();
    }
}
