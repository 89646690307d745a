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
//! the usual decrement; a last drop of a box whose record has no drop glue and that keeps no
//! with-owner value (so its teardown cannot drop another handle) skips the bookkeeping too, and
//! otherwise the bookkeeping is a few plain thread-local loads and stores. A racing
//! `Weak::upgrade` or drop on another thread can make the count read here stale; both directions are harmless: a parked handle that is no longer the last
//! is merely decremented later, and a box that becomes the last one after the check is dropped
//! in place, which costs one extra frame, not unbounded depth.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::Resource;
use crate::handle::HandleBox;

/// A box of any resource type; dropping the `Arc` tears it down.
trait ParkedBox {}

impl<R: Resource> ParkedBox for HandleBox<R> {}

/// What a nested drop parks: the last reference to a box, or a with-owner value.
enum Parked {
    Box(#[allow(dead_code)] Arc<dyn ParkedBox>),
    Value(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
}

// `RELEASING` and `PARKED_LEN` are `Cell`s of plain integers with `const` initialisers and no
// destructor: reading them is a plain thread-local load, with no lazy-initialisation check.
// The parked list itself, which has a destructor, is touched only when something is parked.
#[cfg(not(loom))]
std::thread_local! {
    /// Whether a last-drop is running on this thread (the outermost one drains the list).
    static RELEASING: Cell<bool> = const { Cell::new(false) };
    /// How many boxes are parked, so that the outermost drop skips an empty list for free.
    static PARKED_LEN: Cell<usize> = const { Cell::new(0) };
    /// Last references parked by nested drops, released by the outermost one.
    static PARKED: RefCell<Vec<Parked>> = const { RefCell::new(Vec::new()) };
}

// loom runs its model threads on one OS thread, so the state must be loom's per-model-thread one.
#[cfg(loom)]
loom::thread_local! {
    static RELEASING: Cell<bool> = Cell::new(false);
    static PARKED_LEN: Cell<usize> = Cell::new(0);
    static PARKED: RefCell<Vec<Parked>> = RefCell::new(Vec::new());
}

/// Drops one strong reference to a box, tearing down the box and, iteratively, everything it
/// was the last owner of.
#[inline(always)]
pub(crate) fn release<R: Resource>(inner: Arc<HandleBox<R>>) {
    // A box whose record has no drop glue (known at compile time) cannot drop another handle
    // here (a with-owner value goes through `release_value` by itself), and a reference that is
    // not the last (the common case) tears nothing down: a plain drop, with no bookkeeping.
    if !core::mem::needs_drop::<R>() || Arc::strong_count(&inner) != 1 {
        drop(inner);
        return;
    }
    release_last(inner);
}

#[inline(never)]
fn release_last<R: Resource>(inner: Arc<HandleBox<R>>) {
    match RELEASING.try_with(|releasing| releasing.replace(true)) {
        // Nested in another teardown on this thread: the outermost drop releases it.
        Ok(true) => park(Parked::Box(inner)),
        Ok(false) => {
            let _reset = ResetOnExit;
            drop(inner);
            drain();
        }
        // The thread is exiting and its state is gone: drop in place.
        Err(_) => drop(inner),
    }
}

/// Drops a with-owner value (any value, which may hold the last handle of anything) the same
/// way.
pub(crate) fn release_value(value: Box<dyn Any + Send + Sync>) {
    match RELEASING.try_with(|releasing| releasing.replace(true)) {
        Ok(true) => park(Parked::Value(value)),
        Ok(false) => {
            let _reset = ResetOnExit;
            drop(value);
            drain();
        }
        Err(_) => drop(value),
    }
}

/// Parks a last reference for the outermost drop of this thread; drops it in place if the
/// thread's list is already gone (thread exit).
#[cold]
#[inline(never)]
fn park(inner: Parked) {
    let mut inner = Some(inner);
    let parked = PARKED.try_with(|parked| {
        parked.borrow_mut().push(inner.take().expect("taken once"));
        let _ = PARKED_LEN.try_with(|len| len.set(len.get() + 1));
    });
    if parked.is_err() {
        drop(inner);
    }
}

/// Releases every parked reference, including those parked while releasing them.
#[inline(always)]
fn drain() {
    if PARKED_LEN.try_with(Cell::get).unwrap_or(0) > 0 {
        drain_parked();
    }
}

#[cold]
#[inline(never)]
fn drain_parked() {
    while PARKED_LEN.try_with(Cell::get).unwrap_or(0) > 0 {
        // The borrow ends before the drop: dropping may park more.
        let next = PARKED
            .try_with(|parked| parked.borrow_mut().pop())
            .ok()
            .flatten();
        let _ = PARKED_LEN.try_with(|len| len.set(len.get().saturating_sub(1)));
        match next {
            Some(next) => drop(next),
            None => break,
        }
    }
}

/// Ends the releasing state, also when a record's `Drop` unwinds. Anything still parked then is
/// released by the next outermost drop on this thread, or with the thread-local at thread exit.
struct ResetOnExit;

impl Drop for ResetOnExit {
    fn drop(&mut self) {
        let _ = RELEASING.try_with(|releasing| releasing.set(false));
    }
}
