//! The last drop of a handle, made iterative so that an owner chain of any depth drops on any
//! stack.
//!
//! Dropping a box drops its record, whose owner handles may be the last ones of their boxes,
//! whose records hold more owners: done naively, a chain of n links recurses n frames deep
//! (a million-link list of nodes that own their parents overflows any thread's stack). Instead,
//! a thread-local says what runs. The first last drop on a thread (the outermost) only marks it
//! and drops its box in place: most teardowns release no other box (an event's context is still
//! held elsewhere), and then that mark is all the bookkeeping. The first last drop nested in it
//! keeps a list on its own stack frame and publishes a pointer to it; while it is published, a
//! handle that is about to release its box's last strong reference is parked on that list
//! rather than dropped in place, and the nested drop empties the list in a loop. At most two
//! last drops are in place on the stack at once, so the recursion depth is constant, and each
//! dependent is still torn down (deleter first) before the owners it parked.
//!
//! The thread-local is a plain pointer with no destructor, so it is there for as long as the
//! thread runs, including while other thread-locals' destructors drop handles at thread exit:
//! there is no state that can be gone, and no fallback that recurses.
//!
//! The fast path (a handle that is not the last) is the one decrement of the count, which also
//! tells the last reference that it is the last ([`crate::counted::Counted::release`]): what is
//! parked is a box no other reference can reach any more, never a reference that might still
//! be shared. Every last drop takes the bookkeeping, a few thread-local loads and stores: even
//! a record with no drop glue has a deleter, which is user code and may drop handles.
//!
//! If a record's `Drop` panics while the list is emptied, the list's remaining entries are
//! dropped as the frame unwinds, each under `catch_unwind`, and a last drop dropped in place
//! while the thread unwinds (an unrelated panic unwinds through the handle, or the outermost
//! record's drop panicked and its drop glue goes on) is caught the same way
//! ([`drop_in_place_here`]), so that a second panic cannot abort the process; the mark is put
//! back on every exit.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;

use crate::counted::{Counted, ErasedLast, Last};
use crate::error::drop_without_unwinding;

/// What a nested drop parks: the last reference to a box (of any type: this file needs nothing
/// of the box but its drop, so it does not depend on the handle's file), or a with-owner value.
enum Parked {
    Box(#[allow(dead_code)] ErasedLast),
    Value(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
}

/// The first nested drop's list of parked references.
type ParkedList = RefCell<Vec<Parked>>;

// A `Cell` of a raw pointer with a `const` initialiser and no destructor: reading it is a plain
// thread-local load, and it never goes away before the thread does.
#[cfg(not(loom))]
std::thread_local! {
    /// Null when no last drop runs on this thread; [`RUNNING`] while the outermost one runs
    /// alone; else the list of the first drop nested in it.
    static OUTERMOST: Cell<*const ParkedList> = const { Cell::new(std::ptr::null()) };
}

// loom runs its model threads on one OS thread, so the state must be loom's per-model-thread one.
#[cfg(loom)]
loom::thread_local! {
    static OUTERMOST: Cell<*const ParkedList> = Cell::new(std::ptr::null());
}

/// Drops one strong reference to a box, tearing down the box and, iteratively, everything it
/// was the last owner of. `unique_first` is a constant `false` for a derived type with a
/// registry, and otherwise whether the box itself is in no registry.
#[inline(always)]
pub(crate) fn release<B: 'static>(inner: Counted<B>, unique_first: bool) {
    // A reference that is not the last (the common case) tears nothing down: one decrement.
    // `unique_first` first looks for the only reference of any kind, which needs no
    // decrement (`Counted::release`).
    let Some(last) = inner.release(unique_first) else {
        return;
    };
    // Every last drop goes through the bookkeeping, a record without drop glue's too: its
    // deleter is user code, which may drop the last handle of another box (a chain of such
    // deleters recursed as deep as the chain while these boxes were dropped in place).
    release_last(last);
}

/// Drops a with-owner value (any value, which may hold the last handle of anything) the same
/// way.
pub(crate) fn release_value(value: Box<dyn Any + Send + Sync>) {
    release_last(value);
}

/// The last reference to a box, or a with-owner value: dropped in place by the outermost drop
/// and the first nested one (statically dispatched, the common case), parked as a [`Parked`]
/// by any deeper one.
trait Releasable: Sized {
    fn park(self) -> Parked;
}

impl<B: 'static> Releasable for Last<B> {
    #[inline(always)]
    fn park(self) -> Parked {
        Parked::Box(self.erase())
    }
}

impl Releasable for Box<dyn Any + Send + Sync> {
    #[inline(always)]
    fn park(self) -> Parked {
        Parked::Value(self)
    }
}

/// What [`OUTERMOST`] holds while an outermost last drop runs but no nested one has yet: not a
/// list (never dereferenced), only a mark that the next last drop is nested.
const RUNNING: *const ParkedList = std::ptr::dangling();

/// Out of line, so that the handle's drop (inlined at every use) stays a decrement and a
/// branch; the outermost case here is a thread-local load, two stores and the box's drop, and
/// the nested ones are further out of line.
#[inline(never)]
fn release_last<T: Releasable>(item: T) {
    let current = OUTERMOST.with(Cell::get);
    if current.is_null() {
        // The outermost last drop on this thread: dropped in place, with only a mark, so that
        // a last drop its teardown causes knows it is nested. Most teardowns cause none (an
        // event's context is still held elsewhere), and then no list is made at all.
        OUTERMOST.with(|outermost| outermost.set(RUNNING));
        let on_unwind = Clear;
        drop_in_place_here(item);
        std::mem::forget(on_unwind);
        OUTERMOST.with(|outermost| outermost.set(std::ptr::null()));
        return;
    }
    release_nested(current, item);
}

/// A last drop nested in another: the first one keeps the list, any deeper one is parked.
#[inline(never)]
fn release_nested<T: Releasable>(current: *const ParkedList, item: T) {
    if current == RUNNING {
        nested_first(item);
        return;
    }
    // SAFETY: `current` is what `OUTERMOST` held when the caller read it, on this thread, with
    // no code run since. A pointer other than null and `RUNNING` is published only by
    // `nested_first`, for the extent of its frame, on this thread, and replaced before that
    // frame ends (by `Unpublish` when it unwinds); this call runs inside that extent, on the
    // same thread. The list is borrowed only for this push and for each pop, which call no
    // user code.
    let list = unsafe { &*current };
    list.borrow_mut().push(item.park());
}

/// The first last drop nested in the outermost one: it publishes a list, on its own stack
/// frame, drops `item` in place (every last drop nested in that is parked on the list), then
/// empties the list in a loop. At most two last drops are therefore in place on a thread's
/// stack at once, the outermost and this one, whatever the depth of the chain.
#[inline(never)]
fn nested_first<T: Releasable>(item: T) {
    // Never dropped in place: an empty `Vec::new()` owns no buffer, and whoever makes the list
    // allocate (`drain`, or `Unpublish` on unwind) takes its buffer out and frees it, so the
    // common case (nothing parked) runs no drop glue for the list.
    let list: ManuallyDrop<ParkedList> = ManuallyDrop::new(RefCell::new(Vec::new()));
    OUTERMOST.with(|outermost| outermost.set(&*list));
    let on_unwind = Unpublish(&list);
    drop_in_place_here(item);
    if list.borrow().capacity() != 0 {
        drain(&list);
    }
    std::mem::forget(on_unwind);
    OUTERMOST.with(|outermost| outermost.set(RUNNING));
}

/// Drops a last reference in place, in the outermost last drop, the first nested one or the
/// loop that empties its list: the one home of "a release never aborts the process". While the thread unwinds (an unrelated
/// panic drops the handle, or a record's drop panicked and its drop glue goes on), a second
/// panic from a record's `Drop` would abort, so it is caught (and its payload dropped without
/// unwinding); otherwise a panic reaches the caller, as any `Drop`'s does.
#[inline(always)]
fn drop_in_place_here<T>(item: T) {
    if std::thread::panicking() {
        drop_while_unwinding(item);
    } else {
        drop(item);
    }
}

/// [`drop_in_place_here`] on an unwinding thread: out of line, off the common path.
#[cold]
#[inline(never)]
fn drop_while_unwinding<T>(item: T) {
    drop_without_unwinding(item);
}

/// Clears the thread's mark if the outermost drop unwinds (a record's `Drop` panicked);
/// forgotten on normal completion.
struct Clear;

impl Drop for Clear {
    fn drop(&mut self) {
        OUTERMOST.with(|outermost| outermost.set(std::ptr::null()));
    }
}

/// Drops what nested drops parked, in a loop until the list stays empty, then frees its buffer.
#[cold]
fn drain(list: &ParkedList) {
    loop {
        // The borrow ends before the drop: dropping may park more.
        let next = list.borrow_mut().pop();
        match next {
            // In place too: caught if the thread unwinds (the outermost record panicked, and
            // its drop glue released the box that parked this one).
            Some(next) => drop_in_place_here(next),
            None => break,
        }
    }
    drop(std::mem::take(&mut *list.borrow_mut()));
}

/// Unpublishes the list and drops its remaining entries if the first nested drop unwinds (a
/// record's `Drop` panicked); forgotten on normal completion. The mark goes back to
/// [`RUNNING`] (the outermost drop is still on the stack, unwinding too), and each entry is
/// dropped under `catch_unwind`, after the list is unpublished, so that each is then the first
/// nested drop of its own.
struct Unpublish<'a>(&'a ParkedList);

impl Drop for Unpublish<'_> {
    fn drop(&mut self) {
        OUTERMOST.with(|outermost| outermost.set(RUNNING));
        let remaining = std::mem::take(&mut *self.0.borrow_mut());
        for item in remaining.into_iter().rev() {
            drop_without_unwinding(item);
        }
    }
}
