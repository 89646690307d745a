//! The synchronisation primitives the runtime uses, switchable to loom's model-checked versions
//! with `RUSTFLAGS="--cfg loom"`. Only the cache and registry paths lock; handles themselves
//! count references with atomics of their own (`counted.rs`, also switched to loom's).

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks `mutex`, ignoring poisoning: every critical section in this crate leaves its map in a
/// consistent state before it can panic, so a poisoned lock carries no broken invariant.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
