//! 8 threads × 100k clone / drop / upgrade on shared handles, checked against live counts and
//! the deletion log.

use std::sync::{Arc, Barrier};
use std::thread;

use handles_tests::{Event, LeafHandle, NodeHandle, events_for, serial};

#[test]
fn eight_threads_clone_drop_upgrade_against_live_counts() {
    let _serial = serial();
    const THREADS: usize = 8;
    const OPS: usize = 100_000;
    let start_nodes = NodeHandle::live_count().unwrap();
    let start_leaves = LeafHandle::live_count().unwrap();

    let root = NodeHandle::create(None);
    let shared: Vec<NodeHandle> = (0..4)
        .map(|_| NodeHandle::create(Some(root.clone())))
        .collect();
    let ids: Vec<u64> = std::iter::once(root.id())
        .chain(shared.iter().map(|n| n.id()))
        .collect();
    let barrier = Arc::new(Barrier::new(THREADS));
    let mut leaf_ids = Vec::new();
    thread::scope(|scope| {
        let joins: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (barrier, shared) = (barrier.clone(), shared.clone());
                scope.spawn(move || {
                    barrier.wait();
                    let mut leaves = Vec::new();
                    let mut held = Vec::with_capacity(64);
                    for op in 0..OPS {
                        let node = &shared[(thread + op) % shared.len()];
                        match op % 4 {
                            0 => held.push(node.clone()),
                            1 => held.push(node.downgrade().upgrade().expect("alive")),
                            2 => drop(held.pop()),
                            _ => {
                                if op % 10_000 == 3 {
                                    leaves.push(LeafHandle::create(node.clone(), "stress"));
                                }
                            }
                        }
                        if held.len() > 60 {
                            held.clear();
                        }
                    }
                    leaves.iter().map(|leaf| leaf.as_raw()).collect::<Vec<_>>()
                })
            })
            .collect();
        for join in joins {
            leaf_ids.extend(join.join().unwrap());
        }
    });
    assert!(
        ids.iter().all(|id| events_for(&[*id]).is_empty()),
        "nothing deleted early"
    );
    assert_eq!(
        events_for(&leaf_ids).len(),
        leaf_ids.len(),
        "every leaf deleted once"
    );
    assert_eq!(root.strong_count(), 1 + shared.len());
    assert!(shared.iter().all(|node| node.strong_count() == 1));
    assert_eq!(NodeHandle::live_count(), Some(start_nodes + 5));
    drop(shared);
    drop(root);
    assert_eq!(NodeHandle::live_count(), Some(start_nodes));
    assert_eq!(LeafHandle::live_count(), Some(start_leaves));
    let deletions = events_for(&ids);
    assert_eq!(deletions.len(), ids.len());
    assert_eq!(
        deletions.last(),
        Some(&Event::DeleteNode(ids[0])),
        "root deleted last"
    );
}
