//! Safe call sequences that once broke the runtime's promise (no double delete, no leak, no
//! use-after-free, no abort, no hang), one test each. Every test holds `serial()`: the report
//! hook, live counts and the allocation counter are process-wide.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use handles_core::{CacheSlot, RawValue, Resource, ResourceHandle, ThreadSafe, WeakCache};
use handles_tests::{
    Behaviour, LINKS_DELETED, Link, LinkHandle, NodeHandle, fresh_id, link_chain,
    on_a_2_mib_thread, serial,
};

/// Counts the bytes this test binary has allocated and not freed.
struct CountingAllocator;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the counter is only statistics.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded from this function's contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded from this function's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `f` on its own thread and fails the test if it has not finished after `seconds`: a
/// deadlock or an endless wait shows up as a failure, not as a hung test run.
fn finishes_within<T: Send + 'static>(
    seconds: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(f());
    });
    finished
        .recv_timeout(Duration::from_secs(seconds))
        .unwrap_or_else(|_| panic!("{what}: still blocked after {seconds} s"))
}

/// Iteration counts: the real ones natively, fewer under miri, which is about 1000× slower.
const fn scaled(native: usize, under_miri: usize) -> usize {
    if cfg!(miri) { under_miri } else { native }
}

// ---------------------------------------------------------------------------------------------
// 1. `close()` on a registered type removes its registry entry.

fn forget_registered(_: u64, _: &Registered) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u64, delete = forget_registered, registry)]
struct Registered {}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl ThreadSafe for Registered {}

fn registered_len() -> usize {
    Registered::registry()
        .expect("declared with a registry")
        .len()
}

fn create_and_close(cycles: usize) {
    for _ in 0..cycles {
        // SAFETY: a fresh id that nothing else owns; the deleter does nothing.
        let handle = unsafe { RegisteredHandle::from_raw(fresh_id(), Registered {}) };
        handle.close().expect("the only handle closes cleanly");
    }
}

#[test]
fn close_removes_the_registry_entry_and_memory_stays_flat() {
    let _serial = serial();
    let cycles = scaled(100_000, 200);
    let before = registered_len();
    create_and_close(cycles);
    assert_eq!(
        registered_len(),
        before,
        "close left registry entries behind"
    );
    let after_first = LIVE_BYTES.load(Ordering::Relaxed);
    create_and_close(cycles);
    let after_second = LIVE_BYTES.load(Ordering::Relaxed);
    assert_eq!(registered_len(), before);
    let growth = after_second.saturating_sub(after_first);
    assert!(
        growth < 64 * 1024,
        "memory grew by {growth} bytes between {cycles} and {} close cycles",
        2 * cycles
    );
}

// ---------------------------------------------------------------------------------------------
// 2. A with-owner value is dropped after the record.

static DROP_ORDER: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

struct Logs(&'static str);

impl Drop for Logs {
    fn drop(&mut self) {
        DROP_ORDER.lock().unwrap().push(self.0);
    }
}

/// A record whose `Drop` reads memory the with-owner value owns, as the docs allow.
struct ReadsOwner {
    owned: *const u64,
    _log: Logs,
}

impl Drop for ReadsOwner {
    fn drop(&mut self) {
        // SAFETY: the with-owner value (an `Arc<u64>` this points into) is dropped after the
        // record, which is exactly the order under test; miri reports a use-after-free
        // otherwise.
        let value = unsafe { self.owned.read() };
        assert_eq!(value, 0x5eed);
    }
}

// SAFETY: the pointer is read only in `Drop`, on whichever thread drops the last handle, while
// the `Arc` allocation it points into is still alive.
unsafe impl Send for ReadsOwner {}
// SAFETY: as above; nothing mutates through the pointer.
unsafe impl Sync for ReadsOwner {}

#[derive(ResourceHandle)]
#[handle(raw = u64)]
struct Viewed {
    reader: ReadsOwner,
}

#[test]
fn with_owner_value_is_dropped_after_the_record() {
    let _serial = serial();
    DROP_ORDER.lock().unwrap().clear();
    // An `Arc`, not a `Box`: moving a `Box` asserts unique access to its contents, which would
    // invalidate the record's pointer under miri's aliasing model before anything is dropped.
    let owner = (Arc::new(0x5eed_u64), Logs("owner value"));
    let record = Viewed {
        reader: ReadsOwner {
            owned: Arc::as_ptr(&owner.0),
            _log: Logs("record"),
        },
    };
    // SAFETY: a stand-in raw value; the owner keeps everything the record points to alive.
    let handle = unsafe { ViewedHandle::from_raw_with_owner(fresh_id(), record, owner) };
    drop(handle);
    assert_eq!(*DROP_ORDER.lock().unwrap(), ["record", "owner value"]);
}

// ---------------------------------------------------------------------------------------------
// 3. Replacing the report hook drops the old hook outside the hook lock.

#[test]
fn replacing_the_hook_never_deadlocks_on_a_failure_its_drop_causes() {
    let _serial = serial();
    for reset in [false, true] {
        // The old hook holds the last handle of a resource whose deleter fails: dropping the
        // hook deletes it, and the failure is reported, which reads the hook.
        let doomed = NodeHandle::create_with(None, Behaviour::Fail);
        let reports = Arc::new(AtomicUsize::new(0));
        handles_core::set_report_hook(move |_| {
            let _kept_alive_by_the_hook = &doomed;
        });
        let seen = reports.clone();
        finishes_within(30, "replacing the report hook", move || {
            if reset {
                handles_core::reset_report_hook();
            } else {
                handles_core::set_report_hook(move |_| {
                    seen.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        if !reset {
            assert_eq!(
                reports.load(Ordering::SeqCst),
                1,
                "the new hook gets the failure"
            );
        }
        handles_core::reset_report_hook();
    }
}

// ---------------------------------------------------------------------------------------------
// 4. No panic escapes a handle's `Drop`: not from formatting the error, not from dropping the
// error or a panic payload.

/// An error whose `Display` panics.
#[derive(Debug)]
struct DisplayPanics;

impl fmt::Display for DisplayPanics {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        panic!("Display of the deleter's error panicked")
    }
}

impl std::error::Error for DisplayPanics {}

/// An error or panic payload whose `Drop` panics.
#[derive(Debug)]
struct DropPanics;

impl Drop for DropPanics {
    fn drop(&mut self) {
        panic!("Drop of the deleter's error or payload panicked")
    }
}

impl fmt::Display for DropPanics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an error that panics when dropped")
    }
}

impl std::error::Error for DropPanics {}

#[derive(Clone, Copy, Debug)]
/// Which user code panics inside the handle's `Drop`.
enum Hostile {
    DisplayOfError,
    DropOfError,
    DropOfPayload,
}

fn delete_hostile(
    _: u64,
    record: &HostileRecord,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    match record.how {
        Hostile::DisplayOfError => Err(Box::new(DisplayPanics)),
        Hostile::DropOfError => Err(Box::new(DropPanics)),
        Hostile::DropOfPayload => std::panic::panic_any(DropPanics),
    }
}

#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_hostile, registry)]
struct HostileRecord {
    how: Hostile,
}

// SAFETY: a plain id; the deleter touches no thread-bound state.
unsafe impl ThreadSafe for HostileRecord {}

#[test]
fn no_panic_escapes_drop_from_the_error_or_the_payload() {
    let _serial = serial();
    handles_core::reset_report_hook(); // the default hook formats the error
    let live_before = HostileRecordHandle::live_count().expect("live-count is on in the tests");
    for how in [
        Hostile::DisplayOfError,
        Hostile::DropOfError,
        Hostile::DropOfPayload,
    ] {
        let id = fresh_id();
        // SAFETY: a fresh id; `delete_hostile` misbehaves on purpose but deletes nothing real.
        let handle = unsafe { HostileRecordHandle::from_raw(id, HostileRecord { how }) };
        let dropped = catch_unwind(AssertUnwindSafe(|| drop(handle)));
        assert!(
            dropped.is_ok(),
            "{how:?}: a panic escaped the handle's Drop"
        );
        assert!(
            HostileRecordHandle::lookup(id).is_none(),
            "{how:?}: the registry entry survived"
        );
        assert_eq!(
            HostileRecordHandle::live_count(),
            Some(live_before),
            "{how:?}: the live count was skipped"
        );
    }
}

#[test]
fn no_panic_escapes_drop_while_the_thread_is_already_unwinding() {
    let _serial = serial();
    handles_core::reset_report_hook();
    // If anything escaped, the second panic during unwinding would abort the whole test binary.
    let outcome = thread::spawn(|| {
        let _dropped_while_unwinding = [
            Hostile::DisplayOfError,
            Hostile::DropOfError,
            Hostile::DropOfPayload,
        ]
        .map(|how| {
            // SAFETY: a fresh id; the deleter deletes nothing real.
            unsafe { HostileRecordHandle::from_raw(fresh_id(), HostileRecord { how }) }
        });
        panic!("unwinding with hostile handles on the stack");
    })
    .join();
    assert!(outcome.is_err(), "the thread's own panic is the only one");
}

// ---------------------------------------------------------------------------------------------
// 5. The weak cache recovers when a key's `Clone` panics mid-insert.

/// Clones until the counter reaches 1, then panics once.
#[derive(PartialEq, Eq, Hash, Debug)]
struct FragileKey(u32);

static CLONES_BEFORE_PANIC: AtomicI64 = AtomicI64::new(0);

impl Clone for FragileKey {
    fn clone(&self) -> Self {
        if CLONES_BEFORE_PANIC.fetch_sub(1, Ordering::SeqCst) == 1 {
            panic!("FragileKey::clone panicked");
        }
        FragileKey(self.0)
    }
}

fn forget_cached(_: u64, _: &Cached) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u64, delete = forget_cached)]
struct Cached {
    _slot: CacheSlot<FragileKey, CachedHandle>,
}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl ThreadSafe for Cached {}

static FRAGILE_CACHE: WeakCache<FragileKey, CachedHandle> = WeakCache::new();

fn get_or_create(key: u32) -> CachedHandle {
    FRAGILE_CACHE
        .get_or_try_insert_with(FragileKey(key), |slot| {
            // SAFETY: a fresh id that nothing else owns.
            Ok::<_, std::io::Error>(unsafe {
                CachedHandle::from_raw(fresh_id(), Cached { _slot: slot })
            })
        })
        .unwrap()
}

#[test]
fn weak_cache_recovers_when_a_key_clone_panics() {
    let _serial = serial();
    for panic_on_clone in 1..=4 {
        let key = 100 + panic_on_clone as u32;
        CLONES_BEFORE_PANIC.store(panic_on_clone, Ordering::SeqCst);
        let first = catch_unwind(|| get_or_create(key));
        CLONES_BEFORE_PANIC.store(0, Ordering::SeqCst);
        drop(first);
        let again = finishes_within(30, "a later get_or_create of the same key", move || {
            get_or_create(key)
        });
        assert!(FRAGILE_CACHE.get(&FragileKey(key)).is_some());
        drop(again);
        assert!(
            FRAGILE_CACHE.get(&FragileKey(key)).is_none(),
            "the entry is gone with its handle"
        );
    }
    assert!(FRAGILE_CACHE.is_empty(), "no placeholder left behind");
}

// ---------------------------------------------------------------------------------------------
// 6. An owner chain of any depth drops without overflowing the stack.

#[test]
fn a_million_deep_owner_chain_drops_on_a_2_mib_thread() {
    let _serial = serial();
    let depth = scaled(1_000_000, 2_000);
    let deleted_before = LINKS_DELETED.load(Ordering::Relaxed);
    let live_before = LinkHandle::live_count();
    on_a_2_mib_thread(
        "the chain dropped without overflowing the stack",
        move || drop(link_chain(depth, 0)),
    );
    assert_eq!(
        LINKS_DELETED.load(Ordering::Relaxed) - deleted_before,
        depth as u64
    );
    assert_eq!(LinkHandle::live_count(), live_before);
}

#[test]
fn a_million_deep_chain_of_with_owner_values_drops_on_a_2_mib_thread() {
    let _serial = serial();
    let depth = scaled(1_000_000, 2_000);
    let live_before = LinkHandle::live_count();
    thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            // Each handle keeps the previous one alive as its with-owner value.
            let mut tail: Option<LinkHandle> = None;
            for id in 0..depth as u64 {
                let record = Link { parent: None };
                // SAFETY: stand-in ids; with-owner handles delete nothing.
                tail = Some(unsafe { LinkHandle::from_raw_with_owner(id, record, tail) });
            }
            drop(tail);
        })
        .unwrap()
        .join()
        .expect("the chain of owner values dropped without overflowing the stack");
    assert_eq!(LinkHandle::live_count(), live_before);
}

thread_local! {
    static KEPT_CHAIN: std::cell::RefCell<Option<LinkHandle>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn a_deep_chain_dropped_by_a_thread_local_destructor_at_thread_exit() {
    let _serial = serial();
    let depth = scaled(1_000_000, 2_000);
    let deleted_before = LINKS_DELETED.load(Ordering::Relaxed);
    thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            // The chain's thread-local is destroyed at thread exit, after this thread has
            // already released (and parked) other chains.
            KEPT_CHAIN.with(|kept| *kept.borrow_mut() = link_chain(depth, 0));
            drop(link_chain(3, 0));
        })
        .unwrap()
        .join()
        .expect("the thread exited without overflowing its stack");
    assert_eq!(
        LINKS_DELETED.load(Ordering::Relaxed) - deleted_before,
        depth as u64 + 3
    );
}

#[test]
fn a_deep_chain_released_during_another_release_is_deleted_in_dependency_order() {
    let _serial = serial();
    // A node that owns both a chain and, through its parent, more nodes: the release of the
    // parked owners must still delete every dependent before its owner.
    let root = NodeHandle::create(None);
    let mut tail = root.clone();
    for _ in 0..scaled(2_000, 100) {
        tail = NodeHandle::create(Some(tail));
    }
    let root_id = root.id();
    drop(root);
    let last_id = tail.id();
    drop(tail);
    let events = handles_tests::events_for(&[root_id, last_id]);
    assert_eq!(
        events,
        [
            handles_tests::Event::DeleteNode(last_id),
            handles_tests::Event::DeleteNode(root_id)
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// 7. The registry never returns a handle for another raw value.

/// A raw value wider than a pointer: `to_intptr` truncates it, so two resources share an
/// `isize`, but never an `Eq` key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct WideId(u128);

// SAFETY: `Eq` and `Hash` are derived from the full 128-bit value, so they are exact.
unsafe impl RawValue for WideId {
    fn to_intptr(self) -> isize {
        self.0 as isize
    }
}

fn forget_wide(_: WideId, _: &Wide) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = WideId, delete = forget_wide, registry)]
struct Wide {}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl ThreadSafe for Wide {}

#[test]
fn registry_lookup_returns_only_the_raw_value_asked_for() {
    let _serial = serial();
    let (a, b) = (WideId(7), WideId(7 + (1 << 64)));
    assert_eq!(a.to_intptr(), b.to_intptr(), "the integers collide");
    // SAFETY: stand-in ids that nothing else owns; the deleter does nothing.
    let first = unsafe { WideHandle::from_raw(a, Wide {}) };
    // SAFETY: as above.
    let second = unsafe { WideHandle::from_raw(b, Wide {}) };
    assert_eq!(WideHandle::lookup(a).map(|h| h.as_raw()), Some(a));
    assert_eq!(WideHandle::lookup(b).map(|h| h.as_raw()), Some(b));
    // SAFETY: `a` stays valid: `first` owns it for the whole test.
    let borrowed = unsafe { WideHandle::from_raw_borrowed(a, Wide {}) };
    assert!(
        borrowed.ptr_eq(&first),
        "the canonical handle of `a`, not of `b`"
    );
    drop((first, borrowed));
    assert!(WideHandle::lookup(a).is_none());
    assert!(WideHandle::lookup(b).is_some());
    drop(second);
}

// ---------------------------------------------------------------------------------------------
// `Debug` prints the raw value as the C API shows it.

#[test]
fn debug_prints_integers_in_decimal_and_pointers_in_hex() {
    let _serial = serial();
    let node = NodeHandle::create(None);
    let text = format!("{node:?}");
    assert!(text.contains(&format!("raw: {}", node.id())), "{text}");
    #[derive(ResourceHandle)]
    #[handle(raw = *mut u8)]
    struct Pointer {}
    // SAFETY: never dereferenced; a borrowed handle deletes nothing.
    let pointer = unsafe {
        PointerHandle::from_raw_borrowed(std::ptr::without_provenance_mut(0x1f0), Pointer {})
    };
    assert!(format!("{pointer:?}").contains("raw: 0x1f0"), "{pointer:?}");
}
