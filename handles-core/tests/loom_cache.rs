//! loom models of the concurrent parts of the runtime: the keyed weak cache's get-or-create,
//! last drop with removal and deletion, re-creation under the same key, and `close` racing
//! clone and drop. Run with:
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p handles-core --test loom_cache --release`
//!
//! loom explores every interleaving of the cache's mutex and condition variable and of the
//! handles' reference counts (loom atomics under `--cfg loom`; `loom_counted.rs` models them
//! on their own).
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use handles_core::{CacheSlot, CloseError, ResourceHandle, WeakCache};

/// Per-model counters: live resources and deletions, as loom atomics so that loom sees them.
struct Counters {
    live: AtomicUsize,
    created: AtomicUsize,
    deleted: AtomicUsize,
    /// Deletions that found another live resource under the same key.
    violations: AtomicUsize,
    /// Touched just before each racing action: announcing each action on a shared loom atomic
    /// makes the actions conflict in loom's eyes also where they touch no shared count, so it
    /// explores them in every order.
    steps: AtomicUsize,
}

impl Counters {
    fn announce(&self) {
        self.steps.fetch_add(1, Ordering::SeqCst);
    }
}

fn delete_item(_: u64, item: &Item) -> Result<(), std::io::Error> {
    // A panic here would be caught and reported by the runtime, so count the violation instead.
    if item.counters.live.fetch_sub(1, Ordering::SeqCst) != 1 {
        item.counters.violations.fetch_add(1, Ordering::SeqCst);
    }
    item.counters.deleted.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_item)]
struct Item {
    counters: &'static Counters,
    slot: Option<CacheSlot<u8, ItemHandle>>,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Item {}

fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

fn get(cache: &'static WeakCache<u8, ItemHandle>, counters: &'static Counters) -> ItemHandle {
    cache
        .get_or_try_insert_with(0, |slot| {
            let before = counters.live.fetch_add(1, Ordering::SeqCst);
            assert_eq!(before, 0, "re-created while the previous one was alive");
            let raw = counters.created.fetch_add(1, Ordering::SeqCst) as u64;
            let record = Item {
                counters,
                slot: Some(slot),
            };
            // SAFETY: a stand-in id per creation; `delete_item` is its deleter.
            Ok::<_, ()>(unsafe { ItemHandle::from_raw(raw, record) })
        })
        .unwrap()
}

fn counters() -> &'static Counters {
    leak(Counters {
        live: AtomicUsize::new(0),
        created: AtomicUsize::new(0),
        deleted: AtomicUsize::new(0),
        violations: AtomicUsize::new(0),
        steps: AtomicUsize::new(0),
    })
}

#[test]
fn concurrent_get_or_create_shares_one_handle() {
    loom::model(|| {
        let cache = leak(WeakCache::new());
        let counters = counters();
        let other = thread::spawn(move || {
            counters.announce();
            get(cache, counters)
        });
        counters.announce();
        let mine = get(cache, counters);
        let theirs = other.join().unwrap();
        assert!(
            mine.ptr_eq(&theirs),
            "both threads got the one canonical handle"
        );
        assert_eq!(counters.created.load(Ordering::SeqCst), 1);
        drop((mine, theirs));
        assert_eq!(counters.deleted.load(Ordering::SeqCst), 1);
        assert!(cache.is_empty());
        assert_eq!(counters.violations.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn last_drop_races_recreation_under_the_same_key() {
    loom::model(|| {
        let cache = leak(WeakCache::new());
        let counters = counters();
        let first = get(cache, counters);
        // One thread drops the last handle (delete, then remove the entry) while another asks
        // for the key: it must either share the live handle or create only after deletion.
        let dropper = thread::spawn(move || {
            counters.announce();
            drop(first);
        });
        counters.announce();
        let again = get(cache, counters);
        dropper.join().unwrap();
        let created = counters.created.load(Ordering::SeqCst);
        assert!(created == 1 || created == 2);
        assert_eq!(counters.live.load(Ordering::SeqCst), 1);
        drop(again);
        assert_eq!(
            counters.deleted.load(Ordering::SeqCst),
            created,
            "each deleted once"
        );
        assert!(cache.is_empty());
        assert_eq!(counters.violations.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn close_races_clone_and_drop() {
    loom::model(|| {
        let cache = leak(WeakCache::new());
        let counters = counters();
        let handle = get(cache, counters);
        let shared = handle.clone();
        let other = thread::spawn(move || {
            counters.announce();
            let extra = shared.clone();
            counters.announce();
            drop(shared);
            counters.announce();
            drop(extra);
        });
        counters.announce();
        match handle.close() {
            Ok(()) => {}
            Err(CloseError::StillShared(handle)) => drop(handle),
            Err(CloseError::Deleter(error)) => panic!("deleter failed: {error}"),
        }
        other.join().unwrap();
        assert_eq!(
            counters.deleted.load(Ordering::SeqCst),
            1,
            "deleted exactly once"
        );
        assert_eq!(counters.live.load(Ordering::SeqCst), 0);
        assert!(cache.is_empty());
        assert_eq!(counters.violations.load(Ordering::SeqCst), 0);
    });
}
