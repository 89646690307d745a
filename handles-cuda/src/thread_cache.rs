//! This thread's caches (cached primary contexts, the contexts `run` made current, recycled
//! events and streams): a `RefCell` in a `thread_local!`, reached only when it can be: not
//! while the thread is being torn down, and not re-entrantly from a drop inside a borrow.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Runs `f` on this thread's cache `key`; `None` (without running `f`, which is dropped) when
/// the cache is gone or already borrowed.
pub(crate) fn with<T, R>(
    key: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> Option<R> {
    key.try_with(|cell| cell.try_borrow_mut().ok().map(|mut cache| f(&mut cache)))
        .ok()
        .flatten()
}

/// Takes everything out of this thread's cache `key`, for the caller to drop outside the
/// borrow (dropping handles may call the driver and the report hook).
pub(crate) fn take<T: Default>(key: &'static LocalKey<RefCell<T>>) -> T {
    with(key, std::mem::take).unwrap_or_default()
}
