//! The waiter's incoming list and the count of threads waiting to hand watches over
//! (`exec/completion_waiter.rs`): safe programs on the strict simulator. A completion made on
//! one thread and then (ordered by a channel) re-recorded by another thread on an idle stream
//! must not resolve on that later record, while other threads keep the incoming list, the
//! waiter's moves and the hand-overs busy; and `clear_notifiers` leaves nothing kept.

mod simulator;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use handles_cuda::exec::EventFlags;
use handles_cuda::{ContextHandle, EventHandle};
use handles_tests::polling::poll_for;
use handles_tests::{Failures, gate, stream};
use simulator::{in_scenario, strict_clean};

// ---------------------------------------------------------------------------------------------
// R1: completed() on thread A, then a record on an idle stream by thread B (after a channel
// message sent once completed() returned): the future stays pending until the awaited record
// completes, with noise threads adding watches and handing them over meanwhile.

#[test]
fn r1_rerecord_after_completed_on_another_thread_does_not_resolve_early() {
    strict_clean(
        "r1_rerecord_after_completed_on_another_thread_does_not_resolve_early",
        "1",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r1_rerecord_after_completed_on_another_thread_does_not_resolve_early() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Noise: watches added, resolved by the waiter, and handed over by records of their events.
    let noise: Vec<_> = (0..3)
        .map(|i| {
            let (context, stop) = (context.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let streams = [stream(&context), stream(&context)];
                let mut made = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
                    event.record(&streams[made % 2]).unwrap();
                    let mut futures = Vec::new();
                    for _ in 0..4 {
                        futures.push(event.completed().unwrap());
                    }
                    if (made + i).is_multiple_of(2) {
                        // A record of a watched event: its watches are handed over.
                        event.record(&streams[(made + 1) % 2]).unwrap();
                    }
                    for mut future in futures {
                        assert!(poll_for(&mut future, Duration::from_secs(20)), "noise hang");
                    }
                    made += 1;
                }
                for s in &streams {
                    s.synchronize().unwrap();
                }
                made
            })
        })
        .collect();
    let (to_recorder, recorder_in) = mpsc::channel::<EventHandle>();
    let (to_watcher, watcher_in) = mpsc::channel::<()>();
    let recorder = {
        let context = context.clone();
        std::thread::spawn(move || {
            let idle = stream(&context);
            for event in recorder_in {
                event.record(&idle).unwrap();
                idle.synchronize().unwrap();
                to_watcher.send(()).unwrap();
            }
        })
    };
    let busy = stream(&context);
    let mut early = 0;
    let rounds = 150;
    for round in 0..rounds {
        let open = gate(&busy);
        let event = EventHandle::create(&context, EventFlags::default()).unwrap();
        event.record(&busy).unwrap();
        let mut future = event.completed().unwrap();
        if round % 3 == 0 {
            // Sometimes polled first: a waker registered, the watch moved into the polled list.
            assert!(!poll_for(&mut future, Duration::from_micros(30)));
        }
        to_recorder.send(event.clone()).unwrap();
        watcher_in.recv().unwrap();
        // The later record has completed; the awaited one is behind the gate.
        if poll_for(&mut future, Duration::from_millis(1)) {
            early += 1;
        }
        open.store(true, Ordering::SeqCst);
        assert!(
            poll_for(&mut future, Duration::from_secs(20)),
            "never resolved"
        );
        busy.synchronize().unwrap();
    }
    drop(to_recorder);
    recorder.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let made: usize = noise.into_iter().map(|t| t.join().unwrap()).sum();
    println!("R1: {early} of {rounds} rounds resolved on the later record; noise made {made}");
    assert_eq!(
        early, 0,
        "a completion resolved on a record made after it returned"
    );
    handles_cuda::exec::clear_notifiers();
    failures.assert_none();
}
