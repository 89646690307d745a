//! The keyed weak cache: one canonical handle per key, and a create/drop race that must never
//! delete twice, hand out a dying handle, or re-create a key before its old resource is gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use handles_core::{CacheSlot, ResourceHandle, WeakCache};
use handles_tests::serial;

/// What the imported resources' creator and deleter did, per key.
static STATE: Mutex<Option<HashMap<u32, KeyState>>> = Mutex::new(None);

#[derive(Default, Debug)]
struct KeyState {
    /// Imports alive right now (created, not yet deleted).
    alive: u32,
    created: u64,
    deleted: u64,
}

fn with_state<T>(key: u32, f: impl FnOnce(&mut KeyState) -> T) -> T {
    let mut state = STATE.lock().unwrap();
    f(state
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_default())
}

static NEXT_RAW: AtomicU64 = AtomicU64::new(1);
static USE_AFTER_DELETE: AtomicBool = AtomicBool::new(false);

fn delete_import(_raw: u64, import: &Import) -> Result<(), std::io::Error> {
    import.deleted.store(true, Ordering::SeqCst);
    with_state(import.key, |state| {
        state.alive -= 1;
        state.deleted += 1;
    });
    // Widen the window between "last strong handle gone" and "slot released".
    thread::yield_now();
    Ok(())
}

/// Like an IPC import: importing the same key twice while one import lives would be a bug.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_import)]
struct Import {
    key: u32,
    deleted: Arc<AtomicBool>,
    slot: Option<CacheSlot<u32, ImportHandle>>,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Import {}

static CACHE: WeakCache<u32, ImportHandle> = WeakCache::new();

fn import(key: u32) -> ImportHandle {
    CACHE
        .get_or_try_insert_with(key, |slot| {
            let duplicate = with_state(key, |state| {
                state.alive += 1;
                state.created += 1;
                state.alive > 1
            });
            assert!(
                !duplicate,
                "key {key} imported while an import of it was alive"
            );
            let record = Import {
                key,
                deleted: Arc::new(AtomicBool::new(false)),
                slot: Some(slot),
            };
            let raw = NEXT_RAW.fetch_add(1, Ordering::Relaxed);
            // SAFETY: a fresh id standing for a resource; `delete_import` is its deleter.
            Ok::<_, std::io::Error>(unsafe { ImportHandle::from_raw(raw, record) })
        })
        .unwrap()
}

fn use_import(handle: &ImportHandle) {
    if handle.deleted().load(Ordering::SeqCst) {
        USE_AFTER_DELETE.store(true, Ordering::SeqCst);
    }
}

#[test]
fn concurrent_get_or_create_returns_one_canonical_handle() {
    let _serial = serial();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<ImportHandle> = thread::scope(|scope| {
        let joins: Vec<_> = (0..8)
            .map(|_| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    import(1)
                })
            })
            .collect();
        joins.into_iter().map(|join| join.join().unwrap()).collect()
    });
    assert!(handles.iter().all(|handle| handle.ptr_eq(&handles[0])));
    assert_eq!(with_state(1, |state| state.created), 1);
    drop(handles);
    assert_eq!(with_state(1, |state| (state.alive, state.deleted)), (0, 1));
    assert!(CACHE.get(&1).is_none());
}

#[test]
fn create_drop_race_from_eight_threads_never_double_deletes() {
    let _serial = serial();
    const KEYS: u32 = 3;
    // Miri interprets about a thousand times slower; it checks the protocol, not the odds.
    const ROUNDS: usize = if cfg!(miri) { 30 } else { 20_000 };
    let barrier = Arc::new(Barrier::new(8));
    thread::scope(|scope| {
        for thread in 0..8u32 {
            let barrier = barrier.clone();
            scope.spawn(move || {
                barrier.wait();
                for round in 0..ROUNDS {
                    let key = 100 + (thread + round as u32) % KEYS;
                    let handle = import(key);
                    use_import(&handle);
                    if round % 3 == 0 {
                        let again = import(key);
                        assert!(again.ptr_eq(&handle) || again != handle);
                        use_import(&again);
                    }
                    // Dropping here races with other threads importing the same key.
                }
            });
        }
    });
    assert!(
        !USE_AFTER_DELETE.load(Ordering::SeqCst),
        "a handle was used after deletion"
    );
    for key in 100..100 + KEYS {
        let (alive, created, deleted) =
            with_state(key, |state| (state.alive, state.created, state.deleted));
        assert_eq!(alive, 0, "key {key} leaked an import");
        assert_eq!(
            created, deleted,
            "key {key}: every import deleted exactly once"
        );
        assert!(created >= 1);
    }
    assert!(CACHE.is_empty(), "every entry removed after its deletion");
}

#[test]
fn a_failed_create_caches_nothing_and_a_retry_succeeds() {
    let _serial = serial();
    let failed: Result<ImportHandle, &str> =
        CACHE.get_or_try_insert_with(7, |_slot| Err("driver said no"));
    assert_eq!(failed.unwrap_err(), "driver said no");
    assert!(CACHE.get(&7).is_none());
    let handle = import(7);
    assert!(CACHE.get(&7).unwrap().ptr_eq(&handle));
}
