//! Adversarial programs against the registry's invariant, "every entry names a live
//! allocation" (entries are box addresses counted nowhere, `registry.rs`): a hand-written
//! `Resource` whose `registry()` changes its answer, deleters and record drops that look up,
//! re-register or panic, `close`, FFI round trips, owner chains raced by lookups with immediate
//! address reuse, and drops at thread exit. Run natively and under miri:
//!
//! `MIRIFLAGS=-Zmiri-strict-provenance cargo +nightly miri test -p handles-core --test registry_adversarial`

use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use handles_core::{DeleteError, Handle, LiveCount, Registry, Resource};

// ---------------------------------------------------------------------------------------------
// 1. A hand-written `Resource` whose (safe) `registry()` is not constant. Nothing in the docs of
//    `Resource::registry` or of `Handle::from_raw_owned` requires it to be, so the box keeps the
//    registry it was entered in and its drop removes the entry from that one.
// ---------------------------------------------------------------------------------------------

static FLAKY_ON: AtomicBool = AtomicBool::new(true);
static FLAKY_REGISTRY: Registry<Flaky> = Registry::new();
static FLAKY_LIVE: LiveCount = LiveCount::new();

pub struct Flaky {
    tag: u64,
}

impl Resource for Flaky {
    type Raw = u64;
    const NAME: &'static str = "Flaky";
    fn delete(_: u64, _: &Self) -> Result<(), DeleteError> {
        Ok(())
    }
    fn live() -> &'static LiveCount {
        &FLAKY_LIVE
    }
    fn registry() -> Option<&'static Registry<Self>> {
        FLAKY_ON.load(Ordering::SeqCst).then_some(&FLAKY_REGISTRY)
    }
}
// SAFETY: the raw value is a plain number that no C API uses.
unsafe impl handles_core::ThreadSafe for Flaky {}

/// Same layout as `Flaky`, no registry.
pub struct Other {
    tag: u64,
}

static OTHER_LIVE: LiveCount = LiveCount::new();

impl Resource for Other {
    type Raw = u64;
    const NAME: &'static str = "Other";
    fn delete(_: u64, _: &Self) -> Result<(), DeleteError> {
        Ok(())
    }
    fn live() -> &'static LiveCount {
        &OTHER_LIVE
    }
}

static FLAKY_SERIAL: StdMutex<()> = StdMutex::new(());

/// The registered box is freed (the spares are full, so it goes to the allocator) while
/// `registry()` says `None`: the entry must go with the box, or the next lookup would upgrade
/// freed memory (miri: use-after-free, before the box kept its registry).
#[test]
fn inconsistent_registry_lookup_touches_freed_box() {
    let _serial = FLAKY_SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    std::thread::spawn(|| {
        FLAKY_ON.store(true, Ordering::SeqCst);
        // SAFETY: a made-up raw value that nothing else deletes; `delete` does nothing.
        let registered = unsafe { Handle::from_raw_owned(11u64, Flaky { tag: 1 }) };
        assert!(registered.is_registered());
        // Fill this thread's spares of this size, so the next free goes to the allocator.
        let fillers: Vec<_> = (0..8)
            // SAFETY: as above.
            .map(|i| unsafe { Handle::from_raw_owned_unregistered(100 + i, Flaky { tag: 0 }) })
            .collect();
        drop(fillers);
        FLAKY_ON.store(false, Ordering::SeqCst);
        drop(registered); // `R::registry()` now says None; the box still unregisters
        FLAKY_ON.store(true, Ordering::SeqCst);
        assert!(
            FLAKY_REGISTRY.is_empty(),
            "the freed box's entry went with it"
        );
        assert!(FLAKY_REGISTRY.lookup(11).is_none());
    })
    .join()
    .unwrap();
}

/// The same, with the freed block reused (through this thread's spares) by a box of another
/// type of the same layout: a stale entry would make the lookup return a `Handle<Flaky>` over
/// the `Other` box.
#[test]
fn inconsistent_registry_type_confusion_through_spares() {
    let _serial = FLAKY_SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    std::thread::spawn(|| {
        FLAKY_ON.store(true, Ordering::SeqCst);
        // SAFETY: a made-up raw value that nothing else deletes; `delete` does nothing.
        let registered = unsafe { Handle::from_raw_owned(7u64, Flaky { tag: 0xF1A7 }) };
        FLAKY_ON.store(false, Ordering::SeqCst);
        drop(registered);
        FLAKY_ON.store(true, Ordering::SeqCst);
        // SAFETY: a made-up raw value that nothing else deletes; `delete` does nothing.
        let other = unsafe { Handle::from_raw_owned(7u64, Other { tag: 0x07E2 }) };
        let found = FLAKY_REGISTRY.lookup(7);
        if let Some(found) = &found {
            println!(
                "Handle<Flaky> from lookup: tag {:#x} (Other's is {:#x}), strong of Other = {}",
                found.record().tag,
                other.record().tag,
                other.strong_count()
            );
        }
        assert!(
            found.is_none(),
            "lookup returned a Handle<Flaky> over an Other box"
        );
        drop(other);
    })
    .join()
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// 2. Consistent registry (as the derive generates): re-entrancy and odd paths.
// ---------------------------------------------------------------------------------------------

static NODE_REGISTRY: Registry<Node> = Registry::new();
static NODE_LIVE: LiveCount = LiveCount::new();
static DELETES: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Plain,
    /// the deleter looks up its own raw value and another registered one
    LookupInDeleter,
    /// the deleter re-registers its own raw value (the driver reused it)
    ReRegisterInDeleter,
    /// the deleter fails (the report hook panics)
    Fail,
    /// the deleter panics
    Panic,
}

pub struct Node {
    mode: Mode,
    parent: Option<Handle<Node>>,
    on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

static REREGISTERED: StdMutex<Option<Handle<Node>>> = StdMutex::new(None);

impl Resource for Node {
    type Raw = u64;
    const NAME: &'static str = "Node";
    fn delete(raw: u64, node: &Self) -> Result<(), DeleteError> {
        DELETES.fetch_add(1, Ordering::SeqCst);
        match node.mode {
            Mode::Plain => Ok(()),
            Mode::LookupInDeleter => {
                assert!(
                    NODE_REGISTRY.lookup(raw).is_none(),
                    "own raw found while deleting"
                );
                drop(NODE_REGISTRY.lookup(raw + 1)); // might be the last handle of another
                Ok(())
            }
            Mode::ReRegisterInDeleter => {
                let new = node_new(raw, Mode::Plain, None);
                *REREGISTERED.lock().unwrap() = Some(new);
                Ok(())
            }
            Mode::Fail => Err(DeleteError::new("failed on purpose")),
            Mode::Panic => panic!("deleter panics on purpose"),
        }
    }
    fn live() -> &'static LiveCount {
        &NODE_LIVE
    }
    fn registry() -> Option<&'static Registry<Self>> {
        Some(&NODE_REGISTRY)
    }
}
// SAFETY: plain numbers.
unsafe impl handles_core::ThreadSafe for Node {}

fn node_new(raw: u64, mode: Mode, parent: Option<Handle<Node>>) -> Handle<Node> {
    // SAFETY: made-up raw values that nothing else deletes; `delete` only counts.
    unsafe {
        Handle::from_raw_owned(
            raw,
            Node {
                mode,
                parent,
                on_drop: None,
            },
        )
    }
}

static NODE_SERIAL: StdMutex<()> = StdMutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let g = NODE_SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        NODE_REGISTRY.is_empty(),
        "left over: {}",
        NODE_REGISTRY.len()
    );
    g
}

#[test]
fn deleter_looks_up_and_drops_another_registered_handle() {
    let _s = serial();
    let a = node_new(1000, Mode::LookupInDeleter, None);
    let b = node_new(1001, Mode::Plain, None);
    let b_weak = b.downgrade();
    drop(b); // now only a's deleter's lookup can revive it: it is gone
    assert!(b_weak.upgrade().is_none());
    let c = node_new(1001, Mode::Plain, None);
    drop(a); // deleter does lookup(1001) -> c's clone, drops it (not last)
    assert!(NODE_REGISTRY.lookup(1001).unwrap().ptr_eq(&c));
    drop(c);
    assert!(NODE_REGISTRY.is_empty());
}

#[test]
fn deleter_reregisters_its_raw_value() {
    let _s = serial();
    for _ in 0..3 {
        let a = node_new(2000, Mode::ReRegisterInDeleter, None);
        drop(a);
        let new = REREGISTERED.lock().unwrap().take().unwrap();
        let found = NODE_REGISTRY.lookup(2000).expect("the new entry stays");
        assert!(found.ptr_eq(&new));
        drop((found, new));
        assert!(NODE_REGISTRY.is_empty());
        assert!(NODE_REGISTRY.lookup(2000).is_none());
    }
}

#[test]
fn failing_deleter_with_panicking_report_hook_and_panicking_deleter() {
    let _s = serial();
    handles_core::set_report_hook(|_| panic!("hook panics"));
    for mode in [Mode::Fail, Mode::Panic] {
        let a = node_new(3000, mode, None);
        let clone = NODE_REGISTRY.lookup(3000).unwrap();
        drop(a);
        drop(clone);
        assert!(NODE_REGISTRY.lookup(3000).is_none());
        assert!(NODE_REGISTRY.is_empty());
        let b = node_new(3000, mode, None);
        assert!(b.close().is_err());
        assert!(NODE_REGISTRY.is_empty());
    }
    handles_core::reset_report_hook();
}

#[test]
fn record_drop_panics_after_unregister() {
    let _s = serial();
    // SAFETY: as in `node_new`.
    let a = unsafe {
        Handle::from_raw_owned(
            4000u64,
            Node {
                mode: Mode::Plain,
                parent: None,
                on_drop: Some(Box::new(|| {
                    assert!(NODE_REGISTRY.lookup(4000).is_none());
                    panic!("record drop panics")
                })),
            },
        )
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(a)));
    println!("record drop panic propagated: {}", r.is_err());
    assert!(NODE_REGISTRY.lookup(4000).is_none());
    assert!(NODE_REGISTRY.is_empty());
}

#[test]
fn record_drop_drops_a_registered_handle_and_looks_up() {
    let _s = serial();
    static SLOT: StdMutex<Option<Handle<Node>>> = StdMutex::new(None);
    *SLOT.lock().unwrap() = Some(node_new(4101, Mode::Plain, None));
    let slot = &SLOT;
    // SAFETY: as in `node_new`.
    let a = unsafe {
        Handle::from_raw_owned(
            4100u64,
            Node {
                mode: Mode::Plain,
                parent: None,
                on_drop: Some(Box::new(move || {
                    assert!(NODE_REGISTRY.lookup(4100).is_none());
                    drop(slot.lock().unwrap().take()); // last handle of 4101, nested release
                    assert!(NODE_REGISTRY.lookup(4101).is_none());
                })),
            },
        )
    };
    drop(a);
    assert!(NODE_REGISTRY.is_empty());
}

#[test]
fn close_into_ffi_from_borrowed() {
    let _s = serial();
    let a = node_new(5000, Mode::Plain, None);
    let ptr = a.clone().into_ffi();
    assert_eq!(a.strong_count(), 2);
    let a = match a.close() {
        Err(handles_core::CloseError::StillShared(a)) => a,
        other => panic!("{other:?}"),
    };
    // SAFETY: from into_ffi above, once.
    let back = unsafe { Handle::<Node>::from_ffi(ptr) };
    // SAFETY: raw stays valid while used.
    let borrowed = unsafe {
        Handle::from_raw_borrowed(
            5000u64,
            Node {
                mode: Mode::Plain,
                parent: None,
                on_drop: None,
            },
        )
    };
    assert!(borrowed.ptr_eq(&a) && borrowed.is_registered());
    drop((a, back));
    let deletes = DELETES.load(Ordering::SeqCst);
    borrowed.close().unwrap();
    assert_eq!(DELETES.load(Ordering::SeqCst), deletes + 1);
    assert!(NODE_REGISTRY.is_empty());
    assert!(NODE_REGISTRY.lookup(5000).is_none());
}

/// A chain of registered nodes, each owning its parent; the last drop parks each parent in the
/// iterative release while other threads look every raw value up, then reuse of those addresses
/// (the spares) for new registered boxes of other raw values.
#[test]
fn chain_drop_races_lookups_and_reuse() {
    let _s = serial();
    let n: u64 = if cfg!(miri) { 6 } else { 200 };
    let rounds = if cfg!(miri) { 3 } else { 50 };
    for round in 0..rounds {
        let base = 10_000 + round * 1000;
        let mut tip = node_new(base, Mode::Plain, None);
        for i in 1..n {
            tip = node_new(base + i, Mode::Plain, Some(tip));
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let lookers: Vec<_> = (0..2)
            .map(|t| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        for i in 0..n {
                            if let Some(found) = NODE_REGISTRY.lookup(base + i) {
                                assert_eq!(found.raw(), base + i);
                                // dropping a found handle may be the last: nested unregister
                                if (i + t) % 3 == 0 {
                                    drop(found);
                                } else {
                                    let _ = found.record().parent.as_ref().map(|p| p.raw());
                                }
                            }
                        }
                        if cfg!(miri) {
                            break;
                        }
                    }
                })
            })
            .collect();
        drop(tip);
        // reuse the freed blocks (this thread's spares) for other registered boxes
        let reuse: Vec<_> = (0..n)
            .map(|i| node_new(base + 500 + i, Mode::Plain, None))
            .collect();
        stop.store(true, Ordering::SeqCst);
        for l in lookers {
            l.join().unwrap();
        }
        for i in 0..n {
            assert!(NODE_REGISTRY.lookup(base + i).is_none());
        }
        drop(reuse);
        assert!(
            NODE_REGISTRY.is_empty(),
            "round {round}: {}",
            NODE_REGISTRY.len()
        );
    }
}

thread_local! {
    static HELD: std::cell::RefCell<Option<Handle<Node>>> = const { std::cell::RefCell::new(None) };
}

/// A registered handle dropped by a thread-local destructor at thread exit (possibly after the
/// thread's spares went), raced by lookups on the main thread.
#[test]
fn thread_exit_drop_races_lookup() {
    let _s = serial();
    let rounds = if cfg!(miri) { 3 } else { 200 };
    for r in 0..rounds {
        let raw = 90_000 + r;
        let t = std::thread::spawn(move || {
            let h = node_new(raw, Mode::Plain, None);
            HELD.with(|held| *held.borrow_mut() = Some(h));
        });
        for _ in 0..20 {
            if let Some(found) = NODE_REGISTRY.lookup(raw) {
                assert_eq!(found.raw(), raw);
            }
        }
        t.join().unwrap();
        assert!(NODE_REGISTRY.lookup(raw).is_none());
    }
    assert!(NODE_REGISTRY.is_empty());
}
