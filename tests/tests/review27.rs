//! The notifier streams' idle count (`exec/notifier_count.rs`) under a waker that panics: a
//! scenario on the strict simulator (and on a GPU, `HANDLES_SIM_SCENARIO=gpu`).

mod simulator;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use handles_cuda::exec::EventFlags;
use handles_cuda::{ContextHandle, EventHandle};
use handles_tests::polling::{Counter, poll_once};
use handles_tests::{gate, stream};
use simulator::{in_scenario, strict_clean};

/// A waker whose wake panics (safe code may hand any waker to a future).
struct Panicky(AtomicUsize);
impl Wake for Panicky {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("review27: a waker that panics");
    }
}

/// `rounds` completions one after another on one stream, each pending when made (handed to a
/// notifier) and each resolved before the next is made; returns how many notifier streams the
/// table held at the end.
fn sequential_completions(rounds: usize, waker: &Waker) -> usize {
    let context = ContextHandle::primary(0).unwrap();
    let busy = stream(&context);
    handles_cuda::exec::clear_notifiers();
    for _ in 0..rounds {
        let open = gate(&busy);
        let event = EventHandle::create(&context, EventFlags::default()).unwrap();
        event.record(&busy).unwrap();
        let mut future = event.completed().unwrap();
        assert!(!poll_once(&mut future, waker), "pending behind the gate");
        // Past the waiter's 200 µs of polling: handed to a notifier stream.
        std::thread::sleep(Duration::from_millis(5));
        open.store(true, Ordering::SeqCst);
        let start = Instant::now();
        while !poll_once(&mut future, waker) {
            assert!(start.elapsed() < Duration::from_secs(20), "never resolved");
            std::thread::sleep(Duration::from_micros(200));
        }
        busy.synchronize().unwrap();
        // The notifier's host function has returned (or unwound) by now.
        std::thread::sleep(Duration::from_millis(10));
    }
    handles_cuda::exec::clear_notifiers()
}

// ---------------------------------------------------------------------------------------------
// N1: a waker that panics in the notifier's host function must not leave the stream counted
// busy for good (never taken again, never retired, never pruned): sequential completions then
// each made a new notifier stream. The count is let go of by a guard that unwinding drops.

#[test]
fn n1_panicking_waker_leaves_notifier_stream_counted() {
    strict_clean("n1_panicking_waker_leaves_notifier_stream_counted", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_n1_panicking_waker_leaves_notifier_stream_counted() {
    in_scenario();
    let rounds = 40;
    let counter = Arc::new(Counter(AtomicUsize::new(0)));
    let plain = sequential_completions(rounds, &Waker::from(Arc::clone(&counter)));
    let panicky = Arc::new(Panicky(AtomicUsize::new(0)));
    let panicking = sequential_completions(rounds, &Waker::from(Arc::clone(&panicky)));
    println!(
        "notifier streams after {rounds} sequential completions: {plain} with a plain waker \
         ({} wakes), {panicking} with a panicking waker ({} wakes)",
        counter.0.load(Ordering::SeqCst),
        panicky.0.load(Ordering::SeqCst),
    );
    assert!(plain <= 2, "{plain} notifier streams with a plain waker");
    // A panic's report takes a while, so a few streams may still be running their host
    // functions when the next completion looks; those let go later, and idle streams beyond
    // NOTIFIERS_PER_CONTEXT are let go of. A stream counted busy for good is never let go of:
    // 40 rounds would leave 40.
    assert!(
        panicking <= handles_cuda::exec::NOTIFIERS_PER_CONTEXT + 2,
        "{panicking} notifier streams after {rounds} sequential completions whose wakers \
         panicked: each stream stays counted busy"
    );
}
