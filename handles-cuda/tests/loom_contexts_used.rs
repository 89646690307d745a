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

/// Pruning never loses a free: one thread issues a free on stream 1 (a mutex stands for the
/// driver's lock) and then notes the stream; another notes stream 2, which reaches the pruning
/// size and lets go of stream 1 if everything issued on it so far ran (here: always, as seen
/// at that moment). Whatever the interleaving, stream 1 is still noted at the end, or it was
/// judged after the free was issued.
#[test]
fn pruning_never_lets_go_of_a_stream_before_a_free_noted_on_it() {
    loom::model(|| {
        let set = Arc::new(NotedSet::<usize>::new());
        let issued = Arc::new(loom::sync::Mutex::new(0usize));
        let judged = Arc::new(loom::sync::Mutex::new(None::<usize>));
        // Stream 1's earlier free was noted: `last == 1`, the fast path's key.
        let noted: Result<(), ()> = set.note(1, || Ok(10));
        assert!(noted.is_ok());
        let judge = {
            let (issued, judged) = (issued.clone(), judged.clone());
            move |value: &usize| {
                if *value != 10 {
                    return false;
                }
                let seen = *issued.lock().unwrap();
                *judged.lock().unwrap() = Some(seen);
                true
            }
        };
        let freer = {
            let (set, issued, judge) = (set.clone(), issued.clone(), judge.clone());
            loom::thread::spawn(move || {
                *issued.lock().unwrap() += 1;
                let noted: Result<Vec<usize>, ()> = set.note_pruning(1, || Ok(10), 2, judge);
                assert!(noted.is_ok());
            })
        };
        let pruner = {
            let set = set.clone();
            loom::thread::spawn(move || {
                let noted: Result<Vec<usize>, ()> = set.note_pruning(2, || Ok(20), 2, judge);
                assert!(noted.is_ok());
            })
        };
        freer.join().unwrap();
        pruner.join().unwrap();
        let judged = *judged.lock().unwrap();
        assert!(
            set.contains(1) || judged == Some(1),
            "stream 1 was let go of on a judgement made before its free was issued ({judged:?})"
        );
        assert!(set.contains(2));
    });
}
