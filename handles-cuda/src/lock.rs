//! The one way this crate takes its std mutexes.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, ignoring poisoning: every critical section in this crate leaves its data
/// consistent before anything in it can panic (pushes, removals and plain stores), so a lock
/// poisoned by a panicking thread carries no broken invariant, and refusing it would turn one
/// panic into a failure of every later drop that takes the lock.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
