//! loom models of the registry (`registry.rs`), whose entries are box addresses counted
//! nowhere: a lookup racing the last drop of the registered handle, `close`, and a parked drop
//! (the iterative release's); a new box of a reused raw value racing the old box's drop; and
//! the freed box's address reused at once (the spares) while a lookup runs. Run with:
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p handles-core --test loom_registry --release`
//!
//! Each model checks that the deleter and the record's drop run exactly once, that a handle a
//! lookup returns never sees its record dropped or its deleter run, and that the registry is
//! left with no entry of a box that is gone (miri, which runs the registry tests of
//! `tests/tests/runtime.rs`, checks that no upgrade touches a freed allocation).
#![cfg(loom)]

mod loom_support;

use loom::thread;
use loom_support::{Counters, Guard};

use handles_core::{CloseError, DeleteError, Handle, LiveCount, Registry, Resource};

/// A registered resource, declared by hand: the derive's registry is a `const` static, which
/// loom's (per-execution) primitives cannot be.
struct Node {
    counters: &'static Counters,
    /// Gives the record drop glue, so the last drop goes through the iterative release.
    _guard: Guard,
}

loom::lazy_static! {
    static ref REGISTRY: Registry<Node> = Registry::new();
}

static LIVE: LiveCount = LiveCount::new();

impl Resource for Node {
    type Raw = u64;
    const NAME: &'static str = "Node";

    fn delete(_: u64, node: &Self) -> Result<(), DeleteError> {
        node.counters.delete();
        Ok(())
    }

    fn live() -> &'static LiveCount {
        &LIVE
    }

    fn registry() -> Option<&'static Registry<Self>> {
        Some(&REGISTRY)
    }
}

// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Node {}

fn make(raw: u64) -> (Handle<Node>, &'static Counters) {
    let counters: &'static Counters = Counters::leaked();
    let record = Node {
        counters,
        _guard: Guard(counters),
    };
    // SAFETY: a made-up raw value that nothing else deletes; `delete` only counts.
    (unsafe { Handle::from_raw_owned(raw, record) }, counters)
}

/// Asserts the record is still alive: a handle in hand must never see it dropped.
fn alive(handle: &Handle<Node>) {
    let counters = handle.record().counters;
    counters.assert_alive();
}

fn exactly_once(counters: &Counters) {
    counters.assert_exactly_once();
}

#[test]
fn a_lookup_races_the_last_drop() {
    loom::model(|| {
        let (handle, counters) = make(7);
        let thread = thread::spawn(|| {
            if let Some(found) = REGISTRY.lookup(7) {
                alive(&found);
                drop(found);
            }
        });
        drop(handle);
        thread.join().unwrap();
        exactly_once(counters);
        assert!(REGISTRY.lookup(7).is_none());
        assert!(REGISTRY.is_empty());
    });
}

#[test]
fn a_lookup_races_close() {
    loom::model(|| {
        let (handle, counters) = make(7);
        let thread = thread::spawn(|| {
            let found = REGISTRY.lookup(7);
            if let Some(found) = &found {
                alive(found);
            }
            found
        });
        match handle.close() {
            Ok(()) => {
                if let Some(found) = thread.join().unwrap() {
                    panic!("a lookup succeeded after close: {found:?}");
                }
            }
            // The lookup's handle is the other strong one; it drops last.
            Err(CloseError::StillShared(handle)) => {
                drop(handle);
                drop(thread.join().unwrap());
            }
            Err(other) => panic!("close failed: {other}"),
        }
        exactly_once(counters);
        assert!(REGISTRY.is_empty());
    });
}

/// The raw value is reused as soon as the old deleter ran (the driver may hand it out again),
/// so a new box registers it while the old box, on another thread, is still to unregister. The
/// old box must remove only its own entry: the new one stays, and is found.
#[test]
fn a_reused_raw_value_races_the_old_drop() {
    loom::model(|| {
        let (old, old_counters) = make(7);
        let thread = thread::spawn(move || drop(old));
        // Wait for the old deleter, as the driver would before handing the value out again.
        while !old_counters.has_been_deleted() {
            thread::yield_now();
        }
        let (new, new_counters) = make(7);
        thread.join().unwrap();
        exactly_once(old_counters);
        let found = REGISTRY.lookup(7).expect("the new box's entry stays");
        assert!(found.ptr_eq(&new));
        alive(&found);
        drop(found);
        drop(new);
        exactly_once(new_counters);
        assert!(REGISTRY.is_empty());
    });
}

/// A registered box whose last strong handle is dropped inside another box's drop: the
/// iterative release parks it (strong 0, its entry still in the registry) and drops it after
/// the outer box, while another thread looks its raw value up.
#[test]
fn a_lookup_races_a_parked_box() {
    loom::model(|| {
        let (parked, parked_counters) = make(7);
        let holder_counters: &'static Counters = Counters::leaked();
        let record = Node {
            counters: holder_counters,
            _guard: Guard(holder_counters),
        };
        // SAFETY: a made-up raw value that nothing deletes (a with-owner handle deletes
        // nothing); its owner value holds the registered box's only handle.
        let holder = unsafe { Handle::<Node>::from_raw_with_owner(9, record, parked) };
        let thread = thread::spawn(|| {
            if let Some(found) = REGISTRY.lookup(7) {
                alive(&found);
                drop(found);
            }
        });
        drop(holder);
        thread.join().unwrap();
        exactly_once(parked_counters);
        assert!(REGISTRY.lookup(7).is_none());
        assert!(REGISTRY.is_empty());
    });
}

/// The dropping thread reuses the freed box at once (its spares) for a new box of the same
/// raw value, while another thread looks the raw value up: a found handle is always the live
/// one, the old box's unregister never removes the new entry.
#[test]
fn address_reuse_races_a_lookup() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static REUSED: AtomicUsize = AtomicUsize::new(0);
    loom::model(|| {
        let (old, old_counters) = make(7);
        let old_addr = old.record() as *const Node as usize;
        let thread = thread::spawn(|| {
            if let Some(found) = REGISTRY.lookup(7) {
                alive(&found);
                drop(found);
            }
        });
        drop(old);
        let (new, new_counters) = make(7);
        let reused = new.record() as *const Node as usize == old_addr;
        thread.join().unwrap();
        if reused {
            REUSED.fetch_add(1, Ordering::SeqCst);
        }
        exactly_once(old_counters);
        let found = REGISTRY.lookup(7).expect("the new entry stays");
        assert!(found.ptr_eq(&new));
        drop(found);
        drop(new);
        exactly_once(new_counters);
        assert!(REGISTRY.is_empty());
    });
    let reused = REUSED.load(Ordering::SeqCst);
    println!("executions with the old address reused: {reused}");
    assert!(
        reused > 0,
        "the spare was never reused: the model is weaker than meant"
    );
}
