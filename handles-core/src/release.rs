//! The last drop of a handle, made iterative so that an owner chain of any depth drops on any
//! stack.
//!
//! Dropping a box drops its record, whose owner handles may be the last ones of their boxes,
//! whose records hold more owners: done naively, a chain of n links recurses n frames deep
//! (a million-link list of nodes that own their parents overflows any thread's stack). Instead,
//! the first last-drop on a thread marks the thread as *releasing*; while it is, a handle that
//! is about to release its box's last strong reference is parked on a per-thread list rather than
//! dropped in place, and the outermost drop empties that list in a loop. The recursion depth is
//! therefore constant, and each dependent is still torn down (deleter first) before the owners it
//! parked are released.
//!
//! The fast path (a handle that is not the last) is one relaxed load of the strong count before
//! the usual decrement. A racing `Weak::upgrade` or drop on another thread can make the count
//! read here stale; both directions are harmless: a parked handle that is no longer the last
//! is merely decremented later, and a box that becomes the last one after the check is dropped
//! in place, which costs one extra frame, not unbounded depth.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::Resource;
use crate::handle::HandleBox;

/// A box of any resource type; dropping the `Arc` tears it down.
trait Parked {}

impl<R: Resource> Parked for HandleBox<R> {}

struct ReleaseState {
    /// Whether a last-drop is running on this thread (the outermost one drains `parked`).
    releasing: Cell<bool>,
    /// Last references parked by nested drops, released by the outermost one.
    parked: RefCell<Vec<Arc<dyn Parked>>>,
}

impl ReleaseState {
    const fn new() -> Self {
        ReleaseState {
            releasing: Cell::new(false),
            parked: RefCell::new(Vec::new()),
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static STATE: ReleaseState = const { ReleaseState::new() };
}

// loom runs its model threads on one OS thread, so the state must be loom's per-model-thread one.
#[cfg(loom)]
loom::thread_local! {
    static STATE: ReleaseState = ReleaseState::new();
}

/// Drops one strong reference to a box, tearing down the box and, iteratively, everything it
/// was the last owner of.
#[inline]
pub(crate) fn release<R: Resource>(inner: Arc<HandleBox<R>>) {
    if Arc::strong_count(&inner) != 1 {
        // Not the last reference (the common case): a plain decrement.
        drop(inner);
        return;
    }
    release_last(inner);
}

#[inline(never)]
fn release_last<R: Resource>(inner: Arc<HandleBox<R>>) {
    // Outside the closure so that, if the thread-local is already gone (a handle dropped by
    // another thread-local's destructor at thread exit), it is dropped in place instead.
    let mut inner = Some(inner);
    let outermost = STATE.try_with(|state| {
        if state.releasing.get() {
            let parked = inner.take().expect("taken once");
            state.parked.borrow_mut().push(parked);
            false
        } else {
            state.releasing.set(true);
            true
        }
    });
    match outermost {
        Ok(true) => {
            let _reset = ResetOnExit;
            drop(inner);
            while let Some(next) = pop_parked() {
                drop(next);
            }
        }
        // Parked: the outermost drop on this thread releases it.
        Ok(false) => {}
        // The thread is exiting and its state is gone: drop in place.
        Err(_) => drop(inner),
    }
}

fn pop_parked() -> Option<Arc<dyn Parked>> {
    STATE
        .try_with(|state| state.parked.borrow_mut().pop())
        .ok()
        .flatten()
}

/// Ends the releasing state, also when a record's `Drop` unwinds. Anything still parked then is
/// released by the next outermost drop on this thread, or with the thread-local at thread exit.
struct ResetOnExit;

impl Drop for ResetOnExit {
    fn drop(&mut self) {
        let _ = STATE.try_with(|state| state.releasing.set(false));
    }
}
