//! Reused handle boxes (`box_cache.rs`): a released box's allocation is reused by the next
//! handle of its type on the same thread, and the teardown it went through is exactly that of a
//! freed box: the deleter once, then the record once, then the with-owner value, dependents
//! before owners. Runs under miri in CI (the record is dropped in place by unsafe code).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use handles_core::{MAX_BOXES, Resource, ResourceHandle};
use handles_tests::{Event, LeafHandle, NodeHandle, events_for, fresh_id, serial};

/// Counts how many times each of its kind was dropped.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn delete_thing(_: u64, thing: &Thing) -> Result<(), std::io::Error> {
    thing.deleted.fetch_add(1, Ordering::SeqCst);
    if thing.panic_in_record_drop {
        // Make the record's own drop panic afterwards.
        thing.armed.store(1, Ordering::SeqCst);
    }
    Ok(())
}

/// A resource with no registry (so it has a box cache), whose record counts its drops.
#[derive(ResourceHandle)]
#[handle(raw = u64, accessor = id, delete = delete_thing)]
struct Thing {
    deleted: Arc<AtomicUsize>,
    dropped: Counted,
    panic_in_record_drop: bool,
    armed: PanicsWhenArmed,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Thing {}

/// Panics in `Drop` when armed (by the deleter), to test a record whose drop unwinds.
struct PanicsWhenArmed(Arc<AtomicUsize>);

impl std::ops::Deref for PanicsWhenArmed {
    type Target = AtomicUsize;
    fn deref(&self) -> &AtomicUsize {
        &self.0
    }
}

impl Drop for PanicsWhenArmed {
    fn drop(&mut self) {
        if self.0.load(Ordering::SeqCst) == 1 {
            panic!("record drop panicked");
        }
    }
}

struct Counters {
    deleted: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl Counters {
    fn new() -> Self {
        Counters {
            deleted: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn thing(&self, panic_in_record_drop: bool) -> ThingHandle {
        let record = Thing {
            deleted: self.deleted.clone(),
            dropped: Counted(self.dropped.clone()),
            panic_in_record_drop,
            armed: PanicsWhenArmed(Arc::new(AtomicUsize::new(0))),
        };
        // SAFETY: a fresh id that nothing else owns; `delete_thing` is its deleter.
        unsafe { ThingHandle::from_raw(fresh_id(), record) }
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.deleted.load(Ordering::SeqCst),
            self.dropped.load(Ordering::SeqCst),
        )
    }
}

/// The address of a handle's box, as `into_ffi` shows it; the handle is given back.
fn address(handle: ThingHandle) -> (usize, ThingHandle) {
    let pointer = handle.into_ffi();
    // SAFETY: `pointer` came from `into_ffi` of a `ThingHandle` on this thread, taken back once.
    (pointer as usize, unsafe { ThingHandle::from_ffi(pointer) })
}

fn retired_things() -> usize {
    Thing::box_cache()
        .expect("a type without a registry has a box cache")
        .with(|cache| cache.len())
}

fn clear_retired_things() {
    Thing::box_cache()
        .expect("a type without a registry has a box cache")
        .with(|cache| cache.clear());
}

#[test]
fn a_released_box_is_reused_after_exactly_one_teardown() {
    let _serial = serial();
    clear_retired_things();
    let counters = Counters::new();
    let (first, handle) = address(counters.thing(false));
    let clone = handle.clone();
    drop(handle);
    assert_eq!(counters.counts(), (0, 0), "torn down while a clone lives");
    drop(clone);
    assert_eq!(
        counters.counts(),
        (1, 1),
        "deleter and record drop, once each"
    );
    assert_eq!(retired_things(), 1);

    let (second, handle) = address(counters.thing(false));
    assert_eq!(second, first, "the retired allocation is reused");
    assert_eq!(retired_things(), 0);
    // The new box is a whole new resource: its own raw value, record and count.
    assert_eq!(handle.strong_count(), 1);
    assert_eq!(handle.weak_count(), 0);
    assert_eq!(counters.counts(), (1, 1));
    drop(handle);
    assert_eq!(counters.counts(), (2, 2));
    clear_retired_things();
}

#[test]
fn a_box_with_a_weak_handle_is_freed_not_reused() {
    let _serial = serial();
    clear_retired_things();
    let counters = Counters::new();
    let handle = counters.thing(false);
    let weak = handle.downgrade();
    drop(handle);
    assert_eq!(counters.counts(), (1, 1));
    assert!(weak.upgrade().is_none());
    assert_eq!(retired_things(), 0, "a weak handle still points at the box");
    drop(weak);
}

#[test]
fn dependents_are_still_torn_down_before_their_owners() {
    let _serial = serial();
    // Leaf has no registry, so it is retired in place; its node is not.
    let node = NodeHandle::create(None);
    let leaf = LeafHandle::create(node.clone(), "leaf");
    let ids = [node.id(), leaf.as_raw()];
    drop(node);
    drop(leaf);
    assert_eq!(
        events_for(&ids),
        vec![Event::DeleteLeaf(ids[1]), Event::DeleteNode(ids[0])]
    );
    // A chain of leaves and nodes, built again from reused boxes, tears down the same way.
    let node = NodeHandle::create(None);
    let leaf = LeafHandle::create(node.clone(), "again");
    let ids = [node.id(), leaf.as_raw()];
    drop(node);
    drop(leaf);
    assert_eq!(
        events_for(&ids),
        vec![Event::DeleteLeaf(ids[1]), Event::DeleteNode(ids[0])]
    );
}

#[test]
fn a_record_whose_drop_panics_is_dropped_once_and_the_box_not_reused() {
    let _serial = serial();
    clear_retired_things();
    let counters = Counters::new();
    let handle = counters.thing(true);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(handle)));
    assert!(outcome.is_err(), "the record's drop panicked");
    // The deleter ran once; the record's other fields were dropped once, on unwind.
    assert_eq!(counters.counts(), (1, 1));
    assert_eq!(retired_things(), 0, "a box whose teardown unwound is freed");
}

#[test]
fn the_list_is_bounded_and_freed_without_teardown() {
    let _serial = serial();
    clear_retired_things();
    let counters = Counters::new();
    let many: Vec<_> = (0..MAX_BOXES + 10).map(|_| counters.thing(false)).collect();
    drop(many);
    let n = MAX_BOXES + 10;
    assert_eq!(counters.counts(), (n, n));
    assert_eq!(retired_things(), MAX_BOXES);
    assert_eq!(clear_retired_things_counted(), MAX_BOXES);
    // Freeing retired boxes runs no deleter and drops no record again.
    assert_eq!(counters.counts(), (n, n));
}

fn clear_retired_things_counted() -> usize {
    Thing::box_cache().unwrap().with(|cache| cache.clear())
}

#[test]
fn a_box_released_on_another_thread_is_reused_there_and_freed_at_its_exit() {
    let _serial = serial();
    clear_retired_things();
    let counters = Counters::new();
    let handle = counters.thing(false);
    let counters = std::thread::spawn(move || {
        drop(handle);
        assert_eq!(retired_things(), 1, "kept by the releasing thread");
        let (first, again) = address(counters.thing(false));
        drop(again);
        let (second, again) = address(counters.thing(false));
        assert_eq!(first, second);
        drop(again);
        counters
        // The thread's list is freed when it exits.
    })
    .join()
    .unwrap();
    assert_eq!(counters.counts(), (3, 3));
    assert_eq!(retired_things(), 0, "nothing crossed back to this thread");
}

#[test]
fn a_registered_type_has_no_box_cache() {
    assert!(handles_tests::Node::box_cache().is_none());
    assert!(handles_tests::Leaf::box_cache().is_some());
}

#[test]
fn closing_a_handle_does_not_touch_the_list() {
    let _serial = serial();
    clear_retired_things();
    let counters = Counters::new();
    let handle = counters.thing(false);
    assert!(handle.close().is_ok());
    assert_eq!(counters.counts(), (1, 1));
    assert_eq!(retired_things(), 0);
}

#[test]
fn borrowed_and_with_owner_boxes_are_reused_too_and_delete_nothing() {
    let _serial = serial();
    clear_retired_things();
    let counters = Counters::new();
    let owner_drops = Arc::new(AtomicUsize::new(0));
    let record = || Thing {
        deleted: counters.deleted.clone(),
        dropped: Counted(counters.dropped.clone()),
        panic_in_record_drop: false,
        armed: PanicsWhenArmed(Arc::new(AtomicUsize::new(0))),
    };
    let id = fresh_id();
    // SAFETY: a stand-in value that is never deleted.
    let borrowed = unsafe { ThingHandle::from_raw_borrowed(id, record()) };
    drop(borrowed);
    assert_eq!(counters.counts(), (0, 1));
    assert_eq!(retired_things(), 1);
    // SAFETY: a stand-in value that is never deleted.
    let with_owner =
        unsafe { ThingHandle::from_raw_with_owner(id, record(), Counted(owner_drops.clone())) };
    assert_eq!(retired_things(), 0, "reused");
    drop(with_owner);
    assert_eq!(counters.counts(), (0, 2));
    assert_eq!(
        owner_drops.load(Ordering::SeqCst),
        1,
        "the owner value dropped once"
    );
    assert_eq!(retired_things(), 1);
    clear_retired_things();
}
