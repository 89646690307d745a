//! What the loom models share: counters of a record's deleter runs and drops, a guard that
//! counts the drop, and the two checks every model makes.

use loom::sync::atomic::{AtomicUsize, Ordering};

/// How often a record's deleter ran and how often the record was dropped.
pub struct Counters {
    pub deleted: AtomicUsize,
    pub dropped: AtomicUsize,
}

impl Counters {
    /// Fresh counters, leaked so that records may hold them for the whole model.
    pub fn leaked() -> &'static Counters {
        Box::leak(Box::new(Counters {
            deleted: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
        }))
    }

    /// Counts one run of the deleter.
    pub fn delete(&self) {
        self.deleted.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether the deleter has run.
    #[allow(dead_code)] // one model file waits on it, the other does not
    pub fn has_been_deleted(&self) -> bool {
        self.deleted.load(Ordering::SeqCst) != 0
    }

    /// Asserts the record is still alive: a handle in hand must never see it deleted or dropped.
    pub fn assert_alive(&self) {
        assert_eq!(self.deleted.load(Ordering::SeqCst), 0);
        assert_eq!(self.dropped.load(Ordering::SeqCst), 0);
    }

    /// Asserts the deleter ran once and the record was dropped once.
    pub fn assert_exactly_once(&self) {
        assert_eq!(self.deleted.load(Ordering::SeqCst), 1);
        assert_eq!(self.dropped.load(Ordering::SeqCst), 1);
    }
}

/// A record field whose drop is counted; it also gives the record drop glue, so the last drop
/// goes through the iterative release.
pub struct Guard(pub &'static Counters);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}
