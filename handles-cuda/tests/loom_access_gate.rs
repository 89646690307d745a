//! Model check of the access gate (`order/access_gate.rs`): a revocation of peer access never
//! lands between a use's check and the queueing of its work, a use is refused (not blocked)
//! while a revocation runs, and two revocations never run at once. Run with
//! `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test loom_access_gate
//! --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/order/access_gate.rs"]
#[allow(dead_code)]
mod protocol;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use protocol::AccessGate;

#[test]
fn a_revocation_never_lands_between_a_check_and_its_queueing() {
    loom::model(|| {
        let gate = Arc::new(AccessGate::new());
        // The peer access the driver holds: true until the revocation.
        let access = Arc::new(AtomicBool::new(true));
        let user = {
            let (gate, access) = (gate.clone(), access.clone());
            loom::thread::spawn(move || {
                if gate.enter() {
                    let checked = access.load(Ordering::SeqCst);
                    // ... the work is queued here, still inside the use ...
                    let at_queue = access.load(Ordering::SeqCst);
                    gate.leave();
                    assert_eq!(checked, at_queue, "access changed between check and queue");
                }
            })
        };
        let revoker = {
            let (gate, access) = (gate.clone(), access.clone());
            loom::thread::spawn(move || gate.exclusive(|| access.store(false, Ordering::SeqCst)))
        };
        user.join().unwrap();
        revoker.join().unwrap();
        assert!(!access.load(Ordering::SeqCst));
    });
}

#[test]
fn two_revocations_never_run_at_once() {
    loom::model(|| {
        let gate = Arc::new(AccessGate::new());
        let running = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (gate, running) = (gate.clone(), running.clone());
                loom::thread::spawn(move || {
                    gate.exclusive(|| {
                        assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0);
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        // Afterwards uses enter again.
        assert!(gate.enter());
        gate.leave();
    });
}

/// Host views (`memory/host_view.rs`): once a view is open, no use is in flight and none can
/// enter until it closes; a use that entered first is complete (left) before the view opens.
#[test]
fn no_use_is_in_flight_while_a_host_view_is_open() {
    loom::model(|| {
        let gate = Arc::new(AccessGate::new());
        // Uses between enter and leave: the device work a view must never overlap.
        let in_use = Arc::new(AtomicUsize::new(0));
        let user = {
            let (gate, in_use) = (gate.clone(), in_use.clone());
            loom::thread::spawn(move || {
                if gate.enter() {
                    in_use.fetch_add(1, Ordering::SeqCst);
                    in_use.fetch_sub(1, Ordering::SeqCst);
                    gate.leave();
                }
            })
        };
        let viewer = {
            let (gate, in_use) = (gate.clone(), in_use.clone());
            loom::thread::spawn(move || {
                gate.open_view(true).unwrap();
                assert_eq!(in_use.load(Ordering::SeqCst), 0, "a use overlaps the view");
                assert!(!gate.enter(), "a use entered while the view is open");
                gate.close_view(true);
            })
        };
        user.join().unwrap();
        viewer.join().unwrap();
        assert!(gate.enter());
        gate.leave();
    });
}

/// A mutable view and a shared one never overlap, whichever comes first (two shared views
/// coexist: checked at the end, in one thread).
#[test]
fn a_mutable_host_view_excludes_every_other() {
    loom::model(|| {
        let gate = Arc::new(AccessGate::new());
        let writers = Arc::new(AtomicUsize::new(0));
        let readers = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = [true, false]
            .into_iter()
            .map(|mutable| {
                let (gate, writers, readers) = (gate.clone(), writers.clone(), readers.clone());
                loom::thread::spawn(move || {
                    if gate.open_view(mutable).is_ok() {
                        let (mine, other) = if mutable {
                            (&writers, &readers)
                        } else {
                            (&readers, &writers)
                        };
                        mine.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(other.load(Ordering::SeqCst), 0);
                        if mutable {
                            assert_eq!(writers.load(Ordering::SeqCst), 1);
                        }
                        mine.fetch_sub(1, Ordering::SeqCst);
                        gate.close_view(mutable);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(gate.enter());
        gate.leave();
        gate.open_view(false).unwrap();
        gate.open_view(false).unwrap();
        assert_eq!(gate.open_view(true), Err(false));
        assert!(!gate.enter());
        gate.close_view(false);
        gate.close_view(false);
    });
}
