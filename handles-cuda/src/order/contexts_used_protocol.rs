//! The lock-free half of `contexts_used.rs`: a set of keyed values with a one-load fast path
//! for the key noted last. On its own so that `tests/loom_contexts_used.rs` can model-check it
//! with loom's atomics and mutex.
//!
//! The claim: a key whose `note` returned `Ok` is in the set for whoever locks the set after
//! the noting thread's next synchronising operation (the release that precedes the final drop,
//! in the library). A `note` that skips the lock has read `last == key`, which was stored after
//! the key's value was pushed under the lock, by a thread that then released the lock; the
//! final reader's lock is ordered after every handle's release, and so after that push.
//!
//! Pruning (`note_pruning`) removes values that `done` says need no later wait, with `last`
//! cleared first, under the lock. A `note` that skipped the lock read a key stored before the
//! clear; if what the note follows (a free queued on a stream, say) was issued after the value
//! was judged done, the clear happened before that issue, and so before the note's load, which
//! would then have read 0 (or a key stored later, under the lock, after the prune): so the
//! value's judgement saw it. The judgement's own call and the issue must be ordered by
//! something both take: in the library that is an assumption about the driver (two calls on
//! one stream, `cuStreamQuery` and `cuMemFreeAsync`, serialised by a lock inside it, which the
//! driver does not document); in the model, a mutex.

#[cfg(handles_cuda_loom)]
use loom::sync::Mutex;
#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::Mutex;
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// Values keyed by a non-zero `usize`, each noted once.
pub(crate) struct NotedSet<T> {
    /// The key noted last: a repeated `note` of it takes no lock.
    last: AtomicUsize,
    values: Mutex<Vec<(usize, T)>>,
}

impl<T> NotedSet<T> {
    pub(crate) fn new() -> Self {
        NotedSet {
            last: AtomicUsize::new(0),
            values: Mutex::new(Vec::new()),
        }
    }

    /// Notes `key`, making its value with `make` the first time; an error from `make` leaves
    /// the key unnoted.
    #[inline]
    pub(crate) fn note<E>(&self, key: usize, make: impl FnOnce() -> Result<T, E>) -> Result<(), E> {
        if self.last.load(Ordering::Relaxed) == key {
            return Ok(());
        }
        self.note_slow(key, make)
    }

    #[cold]
    fn note_slow<E>(&self, key: usize, make: impl FnOnce() -> Result<T, E>) -> Result<(), E> {
        let mut values = self.lock();
        if !values.iter().any(|(known, _)| *known == key) {
            values.push((key, make()?));
        }
        // Stored after the push, under the lock: a reader of `last == key` may skip the lock.
        self.last.store(key, Ordering::Relaxed);
        Ok(())
    }

    /// [`Self::note`] for a set that must stay small: before a new key makes the set reach a
    /// power of two of at least `from` values, the values `done` accepts are removed (see the
    /// module docs for why a concurrent note cannot be lost) and returned, for the caller to
    /// drop (the lock is let go by then: a value's drop may note again), so a set of keys that
    /// come and go costs amortised O(1) per note.
    #[inline]
    pub(crate) fn note_pruning<E>(
        &self,
        key: usize,
        make: impl FnOnce() -> Result<T, E>,
        from: usize,
        done: impl FnMut(&T) -> bool,
    ) -> Result<Vec<T>, E> {
        if self.is_last(key) {
            return Ok(Vec::new());
        }
        self.note_pruning_slow(key, make, from, done)
    }

    /// Whether `key` was the last key noted: then [`Self::note_pruning`] would do nothing, and
    /// a caller may skip it (and what it would prepare for it).
    #[inline(always)]
    pub(crate) fn is_last(&self, key: usize) -> bool {
        self.last.load(Ordering::Relaxed) == key
    }

    /// Returns what it pruned, to be dropped by the caller after the lock.
    #[cold]
    fn note_pruning_slow<E>(
        &self,
        key: usize,
        make: impl FnOnce() -> Result<T, E>,
        from: usize,
        mut done: impl FnMut(&T) -> bool,
    ) -> Result<Vec<T>, E> {
        let mut values = self.lock();
        let mut pruned = Vec::new();
        if !values.iter().any(|(known, _)| *known == key) {
            let value = make()?;
            let len = values.len() + 1;
            if len >= from && len.is_power_of_two() {
                // Cleared before any value is judged: see the module docs.
                self.last.store(0, Ordering::Relaxed);
                let (kept, gone): (Vec<_>, Vec<_>) =
                    values.drain(..).partition(|(_, value)| !done(value));
                *values = kept;
                pruned = gone.into_iter().map(|(_, value)| value).collect();
            }
            values.push((key, value));
        }
        // Stored after the push, under the lock: a reader of `last == key` may skip the lock.
        self.last.store(key, Ordering::Relaxed);
        Ok(pruned)
    }

    fn lock(&self) -> impl std::ops::DerefMut<Target = Vec<(usize, T)>> + '_ {
        self.values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `each` on every value, in the order they were noted, stopping at the first error.
    pub(crate) fn try_for_each<E>(
        &self,
        mut each: impl FnMut(&T) -> Result<(), E>,
    ) -> Result<(), E> {
        let values = self
            .values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        values.iter().try_for_each(|(_, value)| each(value))
    }

    /// Takes every noted value out, leaving the set empty.
    pub(crate) fn drain(&self) -> Vec<T> {
        let mut values = self
            .values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.last.store(0, Ordering::Relaxed);
        values.drain(..).map(|(_, value)| value).collect()
    }

    /// Whether `key` was noted.
    #[allow(dead_code)]
    pub(crate) fn contains(&self, key: usize) -> bool {
        let values = self
            .values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        values.iter().any(|(known, _)| *known == key)
    }
}
