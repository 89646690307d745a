//! Downstream tests of the runtime: ownership kinds, deletion order, close, weak handles, the
//! registry, the report hook and FFI transfer. Each checks a log written by the deleters.
//! Every test holds `serial()`: live counts and the report hook are process-wide.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use handles_core::{CloseError, DeleteFailure, Ownership, ResourceHandle};
use handles_tests::{
    Behaviour, Event, LeafHandle, Node, NodeHandle, Refused, events_for, fresh_id, serial,
};

#[test]
fn owned_handle_is_deleted_exactly_once_after_last_clone() {
    let _serial = serial();
    let node = NodeHandle::create(None);
    let id = node.id();
    let clones: Vec<_> = (0..5).map(|_| node.clone()).collect();
    assert_eq!(node.strong_count(), 6);
    drop(node);
    assert!(events_for(&[id]).is_empty(), "deleted while clones live");
    drop(clones);
    assert_eq!(events_for(&[id]), vec![Event::DeleteNode(id)]);
}

#[test]
fn dependents_are_deleted_before_their_owners() {
    let _serial = serial();
    let root = NodeHandle::create(None);
    let child = NodeHandle::create(Some(root.clone()));
    let leaf = LeafHandle::create(child.clone(), "leaf");
    let ids = [root.id(), child.id(), leaf.as_raw()];
    // The application drops the owners first; the leaf keeps the chain alive.
    drop(root);
    drop(child);
    assert!(events_for(&ids).is_empty());
    assert_eq!(leaf.label(), &"leaf");
    assert_eq!(leaf.node().parent().as_ref().map(|p| p.id()), Some(ids[0]));
    drop(leaf);
    assert_eq!(
        events_for(&ids),
        vec![
            Event::DeleteLeaf(ids[2]),
            Event::DeleteNode(ids[1]),
            Event::DeleteNode(ids[0])
        ]
    );
}

#[test]
fn borrowed_handle_never_deletes() {
    let _serial = serial();
    let id = fresh_id();
    let record = Node {
        parent: None,
        behaviour: Behaviour::Panic,
    };
    // SAFETY: the id is not a real resource; a borrowed handle never calls the deleter.
    let borrowed = unsafe { NodeHandle::from_raw_borrowed(id, record) };
    assert_eq!(borrowed.ownership(), Ownership::Borrowed);
    assert!(!borrowed.is_owning());
    let clone = borrowed.clone();
    drop(borrowed);
    drop(clone);
    assert!(events_for(&[id]).is_empty());
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn with_owner_handle_releases_owner_on_last_clone_only() {
    let _serial = serial();
    let dropped = Arc::new(AtomicBool::new(false));
    let id = fresh_id();
    let record = Node {
        parent: None,
        behaviour: Behaviour::Panic,
    };
    // SAFETY: the "resource" is kept valid by the owner value, and is never deleted.
    let handle = unsafe { NodeHandle::from_raw_with_owner(id, record, DropFlag(dropped.clone())) };
    assert_eq!(handle.ownership(), Ownership::WithOwner);
    let clone = handle.clone();
    drop(handle);
    assert!(!dropped.load(Ordering::SeqCst), "owner released too early");
    drop(clone);
    assert!(dropped.load(Ordering::SeqCst), "owner not released");
    assert!(events_for(&[id]).is_empty(), "with-owner handle deleted");
}

#[test]
fn close_hands_back_shared_handles_and_deletes_the_last() {
    let _serial = serial();
    let node = NodeHandle::create(None);
    let id = node.id();
    let other = node.clone();
    let node = match node.close() {
        Err(CloseError::StillShared(node)) => node,
        other => panic!("expected StillShared, got {other:?}"),
    };
    assert!(events_for(&[id]).is_empty());
    drop(other);
    node.close().expect("last handle closes cleanly");
    assert_eq!(events_for(&[id]), vec![Event::DeleteNode(id)]);
}

#[test]
fn close_returns_the_deleter_error_without_reporting_it() {
    let _serial = serial();
    let reports = Arc::new(std::sync::Mutex::new(0usize));
    let seen = reports.clone();
    handles_core::set_report_hook(move |_| *seen.lock().unwrap() += 1);
    let node = NodeHandle::create_with(None, Behaviour::Fail);
    let id = node.id();
    match node.close() {
        Err(CloseError::Deleter(error)) => {
            assert_eq!(error.downcast_ref::<Refused>().map(|r| r.0), Some(id));
        }
        other => panic!("expected a deleter error, got {other:?}"),
    }
    let panicking = NodeHandle::create_with(None, Behaviour::Panic);
    match panicking.close() {
        Err(CloseError::Deleter(error)) => assert!(error.is_panic()),
        other => panic!("expected a caught panic, got {other:?}"),
    }
    handles_core::reset_report_hook();
    assert_eq!(
        *reports.lock().unwrap(),
        0,
        "close must return errors, not report them"
    );
    assert_eq!(
        events_for(&[id]),
        vec![Event::DeleteNode(id)],
        "deleted once"
    );
}

#[test]
fn weak_handle_fails_to_upgrade_after_deletion() {
    let _serial = serial();
    let node = NodeHandle::create(None);
    let weak = node.downgrade();
    let upgraded = weak.upgrade().expect("upgrades while alive");
    assert_eq!(upgraded, node);
    drop(upgraded);
    drop(node);
    assert!(weak.upgrade().is_none());
}

/// Strong and weak handles of one box, cloned, upgraded and dropped on four threads at once
/// (the handles' own reference counts; miri runs this one for races and use after free): the
/// deleter runs exactly once, after the last strong handle, and never while an upgraded handle
/// is in use.
#[test]
fn strong_and_weak_handles_dropped_on_many_threads() {
    let _serial = serial();
    let rounds = if cfg!(miri) { 3 } else { 200 };
    for _ in 0..rounds {
        let node = NodeHandle::create(None);
        let id = node.id();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let strong = node.clone();
                let weak = node.downgrade();
                std::thread::spawn(move || {
                    if i % 2 == 0 {
                        drop(strong);
                        if let Some(upgraded) = weak.upgrade() {
                            assert!(events_for(&[id]).is_empty(), "deleted while upgraded");
                            drop(upgraded);
                        }
                    } else {
                        let again = weak.clone();
                        drop(weak);
                        assert!(again.upgrade().is_some(), "a strong handle is held here");
                        drop(strong);
                        drop(again);
                    }
                })
            })
            .collect();
        drop(node);
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(events_for(&[id]), vec![Event::DeleteNode(id)]);
    }
}

#[test]
fn report_hook_receives_failures_and_panics_from_drop() {
    let _serial = serial();
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = failures.clone();
    handles_core::set_report_hook(move |failure: &DeleteFailure<'_>| {
        sink.lock().unwrap().push((
            failure.type_name,
            failure.raw,
            failure.error.is_panic(),
            failure.error.to_string(),
        ));
    });
    let failing = NodeHandle::create_with(None, Behaviour::Fail);
    let panicking = NodeHandle::create_with(None, Behaviour::Panic);
    let (failing_id, panicking_id) = (failing.id(), panicking.id());
    drop(failing);
    drop(panicking);
    handles_core::reset_report_hook();
    let failures = failures.lock().unwrap();
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0].0, "Node");
    assert_eq!(failures[0].1, failing_id as isize);
    assert!(!failures[0].2);
    assert_eq!(failures[0].3, format!("refused to delete {failing_id}"));
    assert_eq!(failures[1].1, panicking_id as isize);
    assert!(failures[1].2, "a panic is reported as a panic");
}

#[test]
fn panicking_deleter_during_unwinding_does_not_abort() {
    let _serial = serial();
    handles_core::set_report_hook(|_| {});
    let result = std::panic::catch_unwind(|| {
        let _node = NodeHandle::create_with(None, Behaviour::Panic);
        panic!("unwinding through a handle whose deleter panics");
    });
    handles_core::reset_report_hook();
    assert!(result.is_err());
}

#[test]
fn a_panicking_hook_falls_back_to_stderr() {
    let _serial = serial();
    handles_core::set_report_hook(|_| panic!("the hook itself panics"));
    drop(NodeHandle::create_with(None, Behaviour::Fail));
    handles_core::reset_report_hook();
}

#[test]
fn registry_returns_the_canonical_handle_for_a_managed_raw_value() {
    let _serial = serial();
    let parent = NodeHandle::create(None);
    let node = NodeHandle::create(Some(parent.clone()));
    let id = node.id();
    let found = NodeHandle::lookup(id).expect("registered");
    assert!(found.ptr_eq(&node));
    let record = Node {
        parent: None,
        behaviour: Behaviour::Succeed,
    };
    // SAFETY: the id is managed by `node`, which outlives this borrow.
    let borrowed = unsafe { NodeHandle::from_raw_borrowed(id, record) };
    assert!(
        borrowed.is_owning(),
        "the canonical owning handle comes back"
    );
    assert_eq!(borrowed.parent().as_ref(), Some(&parent), "with its owners");
    drop((found, borrowed, node));
    assert!(
        NodeHandle::lookup(id).is_none(),
        "unregistered after deletion"
    );
}

/// The registry's entries are box addresses counted nowhere: a lookup upgrades one under the
/// registry's lock while another thread drops the last handle, whose box removes the entry
/// under that lock before its allocation goes back to the spares. Run by miri, which reports
/// an upgrade of a freed or reused allocation; each round checks that a found handle is live
/// and the deleter ran once.
#[test]
fn lookups_racing_last_drops_find_live_handles_or_none() {
    let _serial = serial();
    let rounds = if cfg!(miri) { 4 } else { 300 };
    for _ in 0..rounds {
        let node = NodeHandle::create(None);
        let id = node.id();
        assert!(node.is_registered());
        assert_eq!(
            node.weak_count(),
            0,
            "the registry's entry is not a weak handle"
        );
        let looking = std::thread::spawn(move || {
            for _ in 0..4 {
                if let Some(found) = NodeHandle::lookup(id) {
                    assert_eq!(found.id(), id);
                    assert!(found.is_owning());
                    assert!(
                        events_for(&[id]).is_empty(),
                        "a found handle is not deleted yet"
                    );
                }
            }
        });
        drop(node);
        looking.join().unwrap();
        assert_eq!(events_for(&[id]), vec![Event::DeleteNode(id)]);
        assert!(NodeHandle::lookup(id).is_none());
    }
}

#[test]
fn equality_and_hash_follow_the_raw_value() {
    let _serial = serial();
    use std::collections::HashSet;
    let node = NodeHandle::create(None);
    let record = Node {
        parent: None,
        behaviour: Behaviour::Succeed,
    };
    // SAFETY: `NodeHandle::from_raw_borrowed` would return the canonical handle, so build a
    // second box through the generic API to get two boxes with one raw value.
    let twin = NodeHandle::from_handle(unsafe {
        handles_core::Handle::<Node>::from_raw_with_owner(node.id(), record, ())
    });
    let debug = format!("{node:?}");
    assert!(debug.starts_with("Node {"), "{debug}");
    assert!(
        debug.contains("ownership: Owned") && debug.contains("strong: 1"),
        "{debug}"
    );
    assert!(!twin.ptr_eq(&node));
    assert_eq!(twin, node);
    let set: HashSet<_> = [node.clone(), twin].into_iter().collect();
    assert_eq!(set.len(), 1);
}

#[test]
fn ffi_round_trip_neither_leaks_nor_double_frees() {
    let _serial = serial();
    let node = NodeHandle::create(None);
    let id = node.id();
    let user_data = node.clone().into_ffi();
    assert_eq!(node.strong_count(), 2);
    // SAFETY: `user_data` came from `into_ffi` on a NodeHandle and is taken back once.
    let back = unsafe { NodeHandle::from_ffi(user_data) };
    assert!(back.ptr_eq(&node));
    drop((node, back));
    assert_eq!(events_for(&[id]), vec![Event::DeleteNode(id)]);
}

#[test]
fn live_counts_return_to_their_start() {
    let _serial = serial();
    let start = NodeHandle::live_count().expect("the tests build with live-count");
    let root = NodeHandle::create(None);
    let children: Vec<_> = (0..10)
        .map(|_| NodeHandle::create(Some(root.clone())))
        .collect();
    assert_eq!(NodeHandle::live_count(), Some(start + 11));
    drop(root);
    assert_eq!(NodeHandle::live_count(), Some(start + 11));
    drop(children);
    assert_eq!(NodeHandle::live_count(), Some(start));
}

#[test]
fn an_unregistered_owned_handle_is_not_found_by_lookup_and_deleted_once() {
    let _serial = serial();
    let id = fresh_id();
    let record = Node {
        parent: None,
        behaviour: Behaviour::Succeed,
    };
    // SAFETY: the id is fresh and `delete_node` is its deleter.
    let private = unsafe { handles_core::Handle::from_raw_owned_unregistered(id, record) };
    let private = NodeHandle::from_handle(private);
    assert!(private.is_owning());
    assert!(!private.is_registered());
    assert!(NodeHandle::lookup(id).is_none(), "not in the registry");
    drop(private);
    assert_eq!(events_for(&[id]), vec![Event::DeleteNode(id)]);
}
