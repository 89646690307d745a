//! Review 23: the race of `review23_loom.rs` on real threads, for miri (`counted.rs`'s unique
//! drop against a clone that downgrades, drops itself, and upgrades its weak handle). Run with:
//!
//! `MIRIFLAGS="-Zmiri-preemption-rate=0.5 -Zmiri-many-seeds=0..32" cargo +nightly miri test -p handles-core --test review23_miri`
//!
//! Asserts the sound behaviour, so it fails while the bug exists.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use handles_core::ResourceHandle;

struct Counters {
    deleted: AtomicUsize,
    dropped: AtomicUsize,
}

fn delete_item(_: u64, item: &Item) -> Result<(), std::io::Error> {
    item.counters.deleted.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_item)]
struct Item {
    counters: &'static Counters,
    guard: Guard,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Item {}

struct Guard(&'static Counters);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn make() -> (ItemHandle, &'static Counters) {
    let counters: &'static Counters = Box::leak(Box::new(Counters {
        deleted: AtomicUsize::new(0),
        dropped: AtomicUsize::new(0),
    }));
    let record = Item {
        counters,
        guard: Guard(counters),
    };
    // SAFETY: a made-up raw value that nothing else deletes; `delete_item` only counts.
    (unsafe { ItemHandle::from_raw(7, record) }, counters)
}

#[test]
fn r23_a_clone_that_downgrades_and_drops_races_the_unique_drop() {
    for _ in 0..4 {
        let (handle, counters) = make();
        let clone = handle.clone();
        let thread = thread::spawn(move || {
            let weak = clone.downgrade();
            drop(clone);
            if let Some(upgraded) = weak.upgrade() {
                // A handle in hand must never see its resource deleted or its record dropped.
                assert_eq!(
                    (
                        upgraded.counters().deleted.load(Ordering::SeqCst),
                        upgraded.counters().dropped.load(Ordering::SeqCst)
                    ),
                    (0, 0),
                    "a weak handle upgraded to a handle whose resource was already deleted"
                );
                drop(upgraded);
            }
            drop(weak);
        });
        drop(handle);
        thread.join().unwrap();
        assert_eq!(counters.deleted.load(Ordering::SeqCst), 1);
        assert_eq!(counters.dropped.load(Ordering::SeqCst), 1);
    }
}
