//! The crate's std mutexes and this thread's caches: the one way each is taken.
//!
//! This thread's caches (cached primary contexts, the contexts `run` made current, recycled
//! events and streams) are a `RefCell` in a `thread_local!`, reached only when they can be:
//! not while the thread is being torn down, and not re-entrantly from a drop inside a borrow.

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard};
use std::thread::LocalKey;

/// Locks `mutex`, ignoring poisoning: every critical section in this crate leaves its data
/// consistent before anything in it can panic (pushes, removals and plain stores), so a lock
/// poisoned by a panicking thread carries no broken invariant, and refusing it would turn one
/// panic into a failure of every later drop that takes the lock.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` on this thread's cache `key`; `None` (without running `f`, which is dropped) when
/// the cache is gone or already borrowed.
pub(crate) fn with_cache<T, R>(
    key: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> Option<R> {
    key.try_with(|cell| cell.try_borrow_mut().ok().map(|mut cache| f(&mut cache)))
        .ok()
        .flatten()
}

/// Takes everything out of this thread's cache `key`, for the caller to drop outside the
/// borrow (dropping handles may call the driver and the report hook).
pub(crate) fn take_cache<T: Default>(key: &'static LocalKey<RefCell<T>>) -> T {
    with_cache(key, std::mem::take).unwrap_or_default()
}

/// Whether `handle` is the only handle to its resource, strong or weak, and in no registry:
/// nothing else can use the resource, look it up or upgrade to it again. A recycler hands a
/// resource to a new owner only in this state, the state of a fresh object.
pub(crate) fn is_sole_handle<R: handles_core::Resource>(handle: &handles_core::Handle<R>) -> bool {
    handle.strong_count() == 1 && handle.weak_count() == 0 && !handle.is_registered()
}
