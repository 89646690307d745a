//! Model check of the completion protocol (`exec/completion_protocol.rs`): a host function that
//! completes while a task polls never loses the wake-up, and a poll after completion is ready.
//! Run with `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test
//! loom_completion --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/exec/completion_protocol.rs"]
#[allow(dead_code)]
mod protocol;

use std::task::{Wake, Waker};

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use protocol::Shared;

struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_completion_during_a_poll_is_never_lost() {
    loom::model(|| {
        let shared = Arc::new(Shared::new(false));
        let wakes = std::sync::Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let host = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                if let Some(waker) = shared.complete() {
                    waker.wake_by_ref();
                }
            })
        };
        let ready = shared.ready_or_register(&waker);
        host.join().unwrap();
        // Pending only if the host function will have woken the task.
        assert!(ready || wakes.0.load(Ordering::SeqCst) == 1);
        // Once complete, every poll is ready.
        assert!(shared.ready_or_register(&waker));
    });
}

#[test]
fn a_dropped_future_keeps_no_waker() {
    loom::model(|| {
        let shared = Arc::new(Shared::new(false));
        let wakes = std::sync::Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let registered = shared.ready_or_register(&waker);
        let host = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                if let Some(waker) = shared.complete() {
                    waker.wake_by_ref();
                }
            })
        };
        shared.forget_waker();
        host.join().unwrap();
        assert!(!registered, "nothing completed before the first poll");
        // Whichever ran first, the shared state keeps no clone of the waker: only `wakes`
        // and `waker` here hold the executor's state.
        assert_eq!(std::sync::Arc::strong_count(&wakes), 2);
    });
}
