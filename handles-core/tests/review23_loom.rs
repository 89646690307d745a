//! Review 23: a loom model of the unique drop (`Counted::release(true)`) that the models in
//! `loom_counted.rs` do not cover: the *other* strong handle (a clone, on another thread)
//! makes a weak handle, drops itself, and upgrades the weak one later. The last drop reads the
//! weak count (1: the weak handle is not made yet), then the strong count (1: the clone is
//! already gone), and takes itself for the only reference of any kind although a weak handle
//! now exists; that weak handle then upgrades to a handle whose record is dropped. Run with:
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p handles-core --test review23_loom --release`
//!
//! The test asserts the sound behaviour, so it fails while the bug exists.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

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
    loom::model(|| {
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
    });
}
