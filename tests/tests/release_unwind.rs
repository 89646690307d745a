//! A record whose `Drop` panics, at each depth of an iterative release: the panic reaches the
//! caller, every box is still deleted once, and the thread's release works as before (a deep
//! chain still drops on a small stack, and no pointer to a list on an unwound frame is left
//! behind, which miri would report).
//!
//! The boxes whose record panicked are not freed, by design (`Last`'s `Drop` never frees under
//! a value that is half dropped), so miri runs this file with `-Zmiri-ignore-leaks`
//! (`.ci/run`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};

use handles_core::{ResourceHandle, ThreadSafe};
use handles_tests::{LINKS_DELETED, LinkHandle, link_chain, on_a_2_mib_thread, serial};

const fn scaled(native: usize, under_miri: usize) -> usize {
    if cfg!(miri) { under_miri } else { native }
}

static NODES_DELETED: AtomicU64 = AtomicU64::new(0);

/// A record field whose `Drop` panics when armed: user code that unwinds out of a release.
struct Bomb(bool);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 {
            panic!("a record's field panicked in its drop, on purpose")
        }
    }
}

fn delete_node(_: u64, _: &Node) -> Result<(), std::io::Error> {
    NODES_DELETED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A node owning up to two nodes and a chain of links, with a bomb that drops before its owners
/// are released and one that drops after (fields drop in declaration order): when the first
/// panics, the owners are released while the thread unwinds.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_node)]
struct Node {
    early: Bomb,
    #[owner]
    parent: Option<NodeHandle>,
    #[owner]
    second: Option<NodeHandle>,
    #[owner]
    links: Option<LinkHandle>,
    late: Bomb,
}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl ThreadSafe for Node {}

static NEXT_NODE_ID: AtomicU64 = AtomicU64::new(1);

fn make(record: Node) -> NodeHandle {
    let id = NEXT_NODE_ID.fetch_add(1, Ordering::Relaxed);
    // SAFETY: a fresh stand-in id that nothing else owns; the deleter only counts.
    unsafe { NodeHandle::from_raw(id, record) }
}

/// A node over a chain of `links`, whose late bomb is armed as told.
fn node(parent: Option<NodeHandle>, links: usize, armed: bool) -> NodeHandle {
    let first_link = NEXT_NODE_ID.fetch_add(1, Ordering::Relaxed) * 10_000_000;
    make(Node {
        early: Bomb(false),
        parent,
        second: None,
        links: link_chain(links, first_link),
        late: Bomb(armed),
    })
}

/// A node of two owners, whose early bomb is armed as told.
fn pair(first: Option<NodeHandle>, second: Option<NodeHandle>, armed: bool) -> NodeHandle {
    make(Node {
        early: Bomb(armed),
        parent: first,
        second,
        links: None,
        late: Bomb(false),
    })
}

fn bomb() -> NodeHandle {
    pair(None, None, true)
}

fn nodes_deleted() -> u64 {
    NODES_DELETED.load(Ordering::Relaxed)
}

#[test]
fn a_record_that_panics_in_its_drop_leaves_the_release_usable_at_every_depth() {
    let _serial = serial();
    let depth = scaled(1_000_000, 2_000);
    let (links_before, nodes_before) = (LINKS_DELETED.load(Ordering::Relaxed), nodes_deleted());
    on_a_2_mib_thread(
        "every release completed or unwound without overflowing the stack",
        move || {
            // The outermost last drop panics, after its owners (a deep chain) were released.
            let outermost = node(None, depth, true);
            assert!(catch_unwind(AssertUnwindSafe(|| drop(outermost))).is_err());
            // The first nested one panics, with a deep chain parked on its list, which is
            // dropped as it unwinds; then the outermost unwinds too.
            let nested = node(None, depth, true);
            let child = node(Some(nested), 0, false);
            assert!(catch_unwind(AssertUnwindSafe(|| drop(child))).is_err());
            // A drop deeper still panics while it is dropped from the list: the chain below it
            // is still released.
            let deep = node(None, depth, true);
            let middle = node(Some(deep), 0, false);
            let top = node(Some(middle), 0, false);
            assert!(catch_unwind(AssertUnwindSafe(|| drop(top))).is_err());
            // The thread's release is as new: a deep chain still drops on this small stack.
            drop(link_chain(depth, 90_000_000));
        },
    );
    assert_eq!(
        LINKS_DELETED.load(Ordering::Relaxed) - links_before,
        4 * depth as u64,
        "every link was deleted"
    );
    assert_eq!(
        nodes_deleted() - nodes_before,
        6,
        "every node was deleted, those whose record panicked included"
    );
}

/// Drops `handle` and expects its first panic back, with `deleted` more pairs deleted.
fn drop_expecting_a_panic(handle: NodeHandle, deleted: u64) {
    let before = nodes_deleted();
    assert!(catch_unwind(AssertUnwindSafe(|| drop(handle))).is_err());
    assert_eq!(nodes_deleted() - before, deleted);
}

/// Records that panic while another record's drop is unwinding: the owners the unwinding drop
/// glue releases are caught, never a second panic that aborts the process (found in review:
/// with the outermost drop keeping no list, the first nested one ran in place there).
#[test]
fn a_second_panic_while_a_release_unwinds_is_caught() {
    let _serial = serial();
    // The outermost record panics, then its owner's record too.
    drop_expecting_a_panic(pair(Some(bomb()), None, true), 2);
    // Two owners of one record panic: the second is released while the first unwinds.
    drop_expecting_a_panic(pair(Some(bomb()), Some(bomb()), false), 3);
    // A with-owner handle whose record and owner value both panic.
    let id = NEXT_NODE_ID.fetch_add(1, Ordering::Relaxed);
    let record = Node {
        early: Bomb(true),
        parent: None,
        second: None,
        links: None,
        late: Bomb(false),
    };
    // SAFETY: a stand-in id; a with-owner handle deletes nothing.
    let with_owner = unsafe { NodeHandle::from_raw_with_owner(id, record, Bomb(true)) };
    assert!(catch_unwind(AssertUnwindSafe(|| drop(with_owner))).is_err());
    // Boxes left on a list when it unwinds, whose owners panic as they are dropped.
    let first = pair(
        Some(pair(Some(bomb()), Some(bomb()), false)),
        Some(pair(None, Some(bomb()), false)),
        false,
    );
    drop_expecting_a_panic(pair(Some(first), None, false), 7);
}

/// A handle whose record panics in its drop, dropped by an unrelated unwind (a panic in the
/// scope that holds it): the outermost last drop runs while the thread unwinds, so the
/// record's panic is caught there instead of aborting the process with "panic in a destructor
/// during cleanup" (F2: the outermost drop dropped the box in place without looking; this
/// test's process aborted before the fix). The box is still deleted, and the unrelated panic
/// is the one that reaches the caller.
#[test]
fn a_panicking_record_dropped_by_an_unrelated_unwind_does_not_abort() {
    let _serial = serial();
    let before = nodes_deleted();
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let _held = bomb();
        std::panic::panic_any("an unrelated panic");
    }));
    let payload = unwound.expect_err("the unrelated panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"an unrelated panic"));
    assert_eq!(
        nodes_deleted() - before,
        1,
        "the panicking record's box was deleted"
    );
    // The same with an owner chain below it: the owners are released while unwinding too.
    let before = nodes_deleted();
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let _held = pair(Some(bomb()), Some(node(None, 3, true)), true);
        std::panic::panic_any("an unrelated panic");
    }));
    assert!(unwound.is_err());
    assert_eq!(nodes_deleted() - before, 3, "every node was deleted once");
}

/// A chain of three records, each owning the one before, the outer and the inner one panicking
/// in their drop: the outer record's panic unwinds through its drop glue, which releases the
/// middle record (caught, the first nested drop), whose release parks the inner one; the inner
/// one is dropped from the list while the thread still unwinds, and its panic is caught there
/// too (found by the safe-API fuzzer, open finding N4: the list's loop dropped it plainly, and
/// the process aborted with "panic in a destructor during cleanup").
#[test]
fn a_record_parked_while_the_thread_unwinds_is_dropped_without_aborting() {
    let _serial = serial();
    let chain = pair(Some(pair(Some(bomb()), None, false)), None, true);
    drop_expecting_a_panic(chain, 3);
}

/// For each leaf id, the handle its deleter releases (the leaf made before it).
static NEXT_LEAF: std::sync::Mutex<Vec<Option<LeafHandle>>> = std::sync::Mutex::new(Vec::new());

fn delete_leaf(raw: u64, _: &Leaf) -> Result<(), std::io::Error> {
    // The deleter releases the next box of the chain: a release started inside a release.
    let mut next = NEXT_LEAF
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let released = next.get_mut(raw as usize).and_then(Option::take);
    drop(next);
    drop(released);
    Ok(())
}

/// A resource whose record has no drop glue: only its deleter can release another handle.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_leaf)]
struct Leaf {}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl ThreadSafe for Leaf {}

/// A chain of deleters, each dropping the last handle of the next box, for records with no drop
/// glue: constant stack (found in review: such boxes were dropped in place with no bookkeeping,
/// so each link recursed a few frames deeper).
#[test]
fn a_chain_of_deleters_without_drop_glue_drops_on_a_small_stack() {
    let _serial = serial();
    let depth = scaled(1_000_000, 2_000);
    on_a_2_mib_thread(
        "the chain of deleters dropped without overflowing the stack",
        move || {
            let mut previous: Option<LeafHandle> = None;
            for id in 0..depth as u64 {
                // SAFETY: stand-in ids that nothing else owns.
                let handle = unsafe { LeafHandle::from_raw(id, Leaf {}) };
                let mut next = NEXT_LEAF
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                next.push(previous.take());
                drop(next);
                previous = Some(handle);
            }
            drop(previous);
        },
    );
    let next = NEXT_LEAF
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    assert!(next.iter().all(Option::is_none), "every leaf was released");
    assert_eq!(LeafHandle::live_count(), Some(0));
}
