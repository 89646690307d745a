//! The lock-free half of `contexts_used.rs`: a set of keyed values with a one-load fast path
//! for the key noted last. On its own so that `tests/loom_contexts_used.rs` can model-check it
//! with loom's atomics and mutex.
//!
//! The claim: a key whose `note` returned `Ok` is in the set for whoever locks the set after
//! the noting thread's next synchronising operation (the release that precedes the final drop,
//! in the library). A `note` that skips the lock has read `last == key`, which was stored after
//! the key's value was pushed under the lock, by a thread that then released the lock; the
//! final reader's lock is ordered after every handle's release, and so after that push.

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
        let mut values = self
            .values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !values.iter().any(|(known, _)| *known == key) {
            values.push((key, make()?));
        }
        // Stored after the push, under the lock: a reader of `last == key` may skip the lock.
        self.last.store(key, Ordering::Relaxed);
        Ok(())
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
