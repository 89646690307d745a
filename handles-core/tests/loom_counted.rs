//! loom models of the handles' own reference counts (`counted.rs`): concurrent last drops,
//! a weak upgrade racing the last strong drop, a weak drop racing it (the one place where the
//! last strong reference frees the box by a load rather than a decrement), and `close` racing
//! a weak upgrade. Run with:
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p handles-core --test loom_counted --release`
//!
//! Under `--cfg loom` the counts are loom atomics, so loom explores every order of the
//! increments, decrements, the fences and the load. Each model checks that the deleter and the
//! record's drop run exactly once, and that no handle (an upgraded one included) ever sees its
//! record dropped.
#![cfg(loom)]

mod loom_support;

use loom::thread;
use loom_support::{Counters, Guard};

use handles_core::ResourceHandle;

fn delete_item(_: u64, item: &Item) -> Result<(), std::io::Error> {
    item.counters.delete();
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_item)]
struct Item {
    counters: &'static Counters,
    /// Gives the record drop glue, so the last drop goes through the iterative release.
    guard: Guard,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Item {}

fn make() -> (ItemHandle, &'static Counters) {
    let counters: &'static Counters = Counters::leaked();
    let record = Item {
        counters,
        guard: Guard(counters),
    };
    // SAFETY: a made-up raw value that nothing else deletes; `delete_item` only counts.
    (unsafe { ItemHandle::from_raw(7, record) }, counters)
}

/// Asserts the record is still alive: a handle in hand must never see it dropped.
fn alive(handle: &ItemHandle) {
    let counters = handle.counters();
    counters.assert_alive();
}

fn exactly_once(counters: &Counters) {
    counters.assert_exactly_once();
}

#[test]
fn two_last_drops_race() {
    loom::model(|| {
        let (handle, counters) = make();
        let other = handle.clone();
        let thread = thread::spawn(move || {
            alive(&other);
            drop(other);
        });
        alive(&handle);
        drop(handle);
        thread.join().unwrap();
        exactly_once(counters);
    });
}

#[test]
fn weak_upgrade_races_the_last_drop() {
    loom::model(|| {
        let (handle, counters) = make();
        let weak = handle.downgrade();
        let thread = thread::spawn(move || {
            if let Some(upgraded) = weak.upgrade() {
                alive(&upgraded);
                drop(upgraded);
            }
            drop(weak);
        });
        drop(handle);
        thread.join().unwrap();
        exactly_once(counters);
    });
}

#[test]
fn weak_drop_races_the_last_drop() {
    loom::model(|| {
        let (handle, counters) = make();
        let weak = handle.downgrade();
        let weak_too = weak.clone();
        let thread = thread::spawn(move || {
            drop(weak_too);
        });
        drop(handle);
        assert!(weak.upgrade().is_none());
        drop(weak);
        thread.join().unwrap();
        exactly_once(counters);
    });
}

#[test]
fn close_races_a_weak_upgrade() {
    loom::model(|| {
        let (handle, counters) = make();
        let weak = handle.downgrade();
        let thread = thread::spawn(move || {
            let upgraded = weak.upgrade();
            if let Some(upgraded) = &upgraded {
                alive(upgraded);
            }
            upgraded
        });
        match handle.close() {
            // Closed: the upgrade found no strong handle, or closed after it dropped.
            Ok(()) => {
                if let Some(upgraded) = thread.join().unwrap() {
                    panic!("an upgrade succeeded after close: {upgraded:?}");
                }
            }
            // Still shared: the upgraded handle is the other one; it drops last.
            Err(handles_core::CloseError::StillShared(handle)) => {
                drop(handle);
                drop(thread.join().unwrap());
            }
            Err(other) => panic!("close failed: {other}"),
        }
        exactly_once(counters);
    });
}

/// The unique drop (`Counted::release(true)`): the last handle finds itself the only reference
/// by two loads, while another thread upgrades a weak handle, uses the value and drops both the
/// upgraded handle and the weak one. Whichever the drop sees, the value outlives every use.
#[test]
fn a_weak_upgrade_and_drop_race_the_unique_drop() {
    loom::model(|| {
        let (handle, counters) = make();
        let weak = handle.downgrade();
        let thread = thread::spawn(move || {
            if let Some(upgraded) = weak.upgrade() {
                alive(&upgraded);
                drop(upgraded);
            }
            drop(weak);
        });
        drop(handle);
        thread.join().unwrap();
        exactly_once(counters);
    });
}

/// A clone dropped on another thread while the original drops: at most one of them can see
/// itself unique, and the value is dropped once, after both.
#[test]
fn a_clone_dropped_elsewhere_races_the_unique_drop() {
    loom::model(|| {
        let (handle, counters) = make();
        let clone = handle.clone();
        let thread = thread::spawn(move || {
            alive(&clone);
            drop(clone);
        });
        alive(&handle);
        drop(handle);
        thread.join().unwrap();
        exactly_once(counters);
    });
}

/// As `two_last_drops_race`, with a weak handle held throughout, so that neither drop can be
/// the unique one: both decrement, and the one that reaches 0 drops the value (the path a
/// handle that has weak handles takes).
#[test]
fn two_last_drops_race_with_a_weak_held() {
    loom::model(|| {
        let (handle, counters) = make();
        let weak = handle.downgrade();
        let other = handle.clone();
        let thread = thread::spawn(move || {
            alive(&other);
            drop(other);
        });
        alive(&handle);
        drop(handle);
        thread.join().unwrap();
        exactly_once(counters);
        assert!(weak.upgrade().is_none());
    });
}

/// The other strong handle (a clone, on another thread) makes a weak handle, drops itself and
/// upgrades the weak one, while the original drops. The unique drop must not take itself for
/// the only reference: read one after the other, the weak count (1, before the weak handle is
/// made) and the strong count (1, after the clone is gone) said so, and the weak handle then
/// upgraded to a dropped record (found by the review of this work); read together, in one word,
/// they cannot.
#[test]
fn a_clone_that_downgrades_and_drops_races_the_unique_drop() {
    loom::model(|| {
        let (handle, counters) = make();
        let clone = handle.clone();
        let thread = thread::spawn(move || {
            let weak = clone.downgrade();
            drop(clone);
            if let Some(upgraded) = weak.upgrade() {
                alive(&upgraded);
                drop(upgraded);
            }
            drop(weak);
        });
        drop(handle);
        thread.join().unwrap();
        exactly_once(counters);
    });
}
