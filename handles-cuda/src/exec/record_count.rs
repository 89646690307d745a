//! Whether a completion's waiter thread polls an event, and whether anything records the event
//! without notice: the state a record checks before it is made (see
//! `completion_waiter.rs`). On its own so that `tests/loom_record_count.rs` can model-check
//! the hand-off with loom: a watch added while a record node is being added is either refused
//! or handed over by it, never left to poll a record that is not the awaited one.

#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

/// How many watches poll an event, and whether it may be recorded other than through
/// `EventHandle::record` (a graph's record node, another process).
#[derive(Debug)]
pub(crate) struct RecordCount {
    watched: AtomicUsize,
    uncounted: AtomicBool,
}

impl RecordCount {
    /// The state of a new event; `uncounted` for one that other processes may record.
    pub(crate) fn new(uncounted: bool) -> Self {
        RecordCount {
            watched: AtomicUsize::new(0),
            uncounted: AtomicBool::new(uncounted),
        }
    }

    /// A waiter begins to poll the event, unless it may be recorded without notice. Called
    /// under the waiter's lock, which the hand-over after [`RecordCount::set_uncounted`] takes
    /// too: of the two, at least one sees the other's write (each writes, then a
    /// sequentially consistent fence, then reads), so either this refuses or the hand-over
    /// finds the watch.
    pub(crate) fn watch(&self) -> bool {
        // Release: a record that sees the count also sees the hand-over installed before it.
        self.watched.fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.uncounted.load(Ordering::Relaxed) {
            self.unwatch();
            return false;
        }
        true
    }

    /// A waiter stops polling the event.
    pub(crate) fn unwatch(&self) {
        self.watched.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether any waiter polls the event.
    pub(crate) fn watched(&self) -> bool {
        self.watched.load(Ordering::SeqCst) != 0
    }

    /// Whether the event may be recorded other than through `EventHandle::record`.
    pub(crate) fn uncounted(&self) -> bool {
        self.uncounted.load(Ordering::Acquire)
    }

    /// From now on the event may be recorded without notice; returns whether watches are
    /// pending, which the caller then hands over before any such record can be made.
    pub(crate) fn set_uncounted(&self) -> bool {
        self.uncounted.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.watched()
    }
}
