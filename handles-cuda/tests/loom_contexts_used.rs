//! Model check of the lock-free half of `contexts_used.rs` (the noted set behind library
//! unloads, host frees and unmaps): whatever the interleaving of threads noting keys, some
//! through the fast path that skips the lock, the last drop of the resource finds every key
//! that any thread noted. Run with `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p
//! handles-cuda --test loom_contexts_used --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/order/contexts_used_protocol.rs"]
#[allow(dead_code)]
mod protocol;

use loom::sync::Arc;
use protocol::NotedSet;

/// A resource whose release must wait for every context its uses ran in: the last drop checks
/// that every key the threads noted is in the set.
struct Resource {
    set: NotedSet<usize>,
    expected: &'static [usize],
}

impl Drop for Resource {
    fn drop(&mut self) {
        for key in self.expected {
            assert!(
                self.set.contains(*key),
                "key {key} noted but not found at release"
            );
        }
    }
}

fn note(resource: &Resource, key: usize) {
    let noted: Result<(), ()> = resource.set.note(key, || Ok(key * 10));
    assert!(noted.is_ok());
}

#[test]
fn every_noted_key_is_seen_by_the_last_drop() {
    loom::model(|| {
        let resource = Arc::new(Resource {
            set: NotedSet::new(),
            expected: &[1, 2],
        });
        let first = {
            let resource = resource.clone();
            loom::thread::spawn(move || {
                note(&resource, 1);
                note(&resource, 2);
            })
        };
        let second = {
            let resource = resource.clone();
            loom::thread::spawn(move || {
                // Often skips the lock: the other thread may have just noted this key.
                note(&resource, 2);
                note(&resource, 1);
            })
        };
        drop(resource);
        first.join().unwrap();
        second.join().unwrap();
    });
}

#[test]
fn a_failed_make_leaves_the_key_unnoted_and_a_later_note_adds_it() {
    loom::model(|| {
        let set = Arc::new(NotedSet::<usize>::new());
        let failing = {
            let set = set.clone();
            loom::thread::spawn(move || {
                // Fails unless the other thread noted the key first (then nothing is made).
                let noted: Result<(), &str> = set.note(7, || Err("cannot own it"));
                assert!(noted.is_err() || set.contains(7));
            })
        };
        let succeeding = {
            let set = set.clone();
            loom::thread::spawn(move || {
                let noted: Result<(), ()> = set.note(7, || Ok(70));
                assert!(noted.is_ok());
            })
        };
        failing.join().unwrap();
        succeeding.join().unwrap();
        assert!(set.contains(7));
    });
}
