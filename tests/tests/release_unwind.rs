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
use std::thread;

use handles_core::{ResourceHandle, ThreadSafe};
use handles_tests::{LINKS_DELETED, LinkHandle, link_chain};

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

/// A node owning another node and a chain of links, whose drop may panic after its owners were
/// released (fields drop in declaration order).
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_node)]
struct Node {
    #[owner]
    parent: Option<NodeHandle>,
    #[owner]
    links: Option<LinkHandle>,
    bomb: Bomb,
}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl ThreadSafe for Node {}

fn node(id: u64, parent: Option<NodeHandle>, links: usize, armed: bool) -> NodeHandle {
    let record = Node {
        parent,
        links: link_chain(links, id * 10_000_000),
        bomb: Bomb(armed),
    };
    // SAFETY: stand-in ids that nothing else owns; the deleter only counts.
    unsafe { NodeHandle::from_raw(id, record) }
}

#[test]
fn a_record_that_panics_in_its_drop_leaves_the_release_usable_at_every_depth() {
    let depth = scaled(1_000_000, 2_000);
    thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            // The outermost last drop panics, after its owners (a deep chain) were released.
            let outermost = node(1, None, depth, true);
            assert!(catch_unwind(AssertUnwindSafe(|| drop(outermost))).is_err());
            // The first nested one panics, with a deep chain parked on its list, which is
            // dropped as it unwinds; then the outermost unwinds too.
            let nested = node(2, None, depth, true);
            let child = node(3, Some(nested), 0, false);
            assert!(catch_unwind(AssertUnwindSafe(|| drop(child))).is_err());
            // A drop deeper still panics while it is dropped from the list: the chain below it
            // is still released.
            let deep = node(4, None, depth, true);
            let middle = node(5, Some(deep), 0, false);
            let top = node(6, Some(middle), 0, false);
            assert!(catch_unwind(AssertUnwindSafe(|| drop(top))).is_err());
            // The thread's release is as new: a deep chain still drops on this small stack.
            drop(link_chain(depth, 90_000_000));
        })
        .unwrap()
        .join()
        .expect("every release completed or unwound without overflowing the stack");
    assert_eq!(
        LINKS_DELETED.load(Ordering::Relaxed),
        4 * depth as u64,
        "every link was deleted"
    );
    assert_eq!(
        NODES_DELETED.load(Ordering::Relaxed),
        6,
        "every node was deleted, those whose record panicked included"
    );
}
