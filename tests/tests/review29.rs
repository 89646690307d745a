//! Review of 1b7ee8e (W7 and W8 found defects, fixed since): the waiter hands a watch to a notifier only while its context has fewer
//! than `BUSY_NOTIFIERS_PER_CONTEXT` busy notifier streams, and otherwise keeps polling it (a
//! quarter of its age apart, at most 5 ms), parking between polls; a first poll within 20 µs
//! spins on the shared state while the spin credit lasts. Scenarios on the strict simulator,
//! each in a child process of its own (fresh waiter, fresh credit).

mod simulator;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use handles_cuda::exec::{BUSY_NOTIFIERS_PER_CONTEXT, EventFlags};
use handles_cuda::{ContextHandle, EventHandle};
use handles_tests::polling::{
    Counter, fill_room, open_and_drain, pending, poll_for, poll_once, waiter_cpu,
};
use handles_tests::{Failures, gate, serial, stream};
use simulator::{in_scenario, strict_clean};

// ---------------------------------------------------------------------------------------------
// W1: 64 completions pending at once: 16 on notifiers, 48 waiting for room. None resolves
// before its record; all resolve soon after the gate opens; at most 16 streams; nothing kept.

#[test]
fn w1_waiting_watches_resolve_after_their_records_only() {
    let _serial = serial();
    strict_clean("w1_waiting_watches_resolve_after_their_records_only", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w1_waiting_watches_resolve_after_their_records_only() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    handles_cuda::exec::clear_notifiers();
    let before = EventHandle::live_count().unwrap();
    let open = gate(&held);
    let mut made = pending(&context, &held, 64, Duration::from_millis(40));
    let waker = Waker::from(Arc::new(Counter(AtomicUsize::new(0))));
    for (event, completion) in &mut made {
        assert!(!poll_once(completion, &waker), "resolved behind the gate");
        assert!(!event.query().unwrap());
    }
    let opened = Instant::now();
    open.store(true, Ordering::SeqCst);
    let mut slowest = Duration::ZERO;
    for (event, mut completion) in made {
        assert!(poll_for(&mut completion, Duration::from_secs(5)), "never");
        assert!(event.query().unwrap(), "resolved before its record");
        slowest = slowest.max(opened.elapsed());
    }
    println!("W1: all 64 resolved {slowest:?} after the gate opened");
    held.synchronize().unwrap();
    let streams = handles_cuda::exec::clear_notifiers();
    println!("W1: {streams} notifier streams");
    assert!(streams <= BUSY_NOTIFIERS_PER_CONTEXT, "{streams} streams");
    assert_eq!(EventHandle::live_count().unwrap(), before);
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// W2: a watch waiting for room, its event recorded again on an idle stream (which completes at
// once): the future must await the first record (behind the gate), so it stays pending.
// Several rounds, the re-record coming at various ages of the watch (before and after 200 µs,
// and long after, when it is polled 5 ms apart), sometimes from another thread.

#[test]
fn w2_rerecord_of_a_waiting_watch_does_not_resolve_early() {
    let _serial = serial();
    strict_clean("w2_rerecord_of_a_waiting_watch_does_not_resolve_early", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w2_rerecord_of_a_waiting_watch_does_not_resolve_early() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    let idle = stream(&context);
    let open = gate(&held);
    let fillers = fill_room(&context, &held);
    let ages = [0u64, 50, 150, 250, 400, 1_000, 3_000, 12_000, 30_000];
    let mut early = 0;
    for (round, age) in ages.iter().cycle().take(27).enumerate() {
        let busy = stream(&context);
        let inner = gate(&busy);
        let event = EventHandle::create(&context, EventFlags::default()).unwrap();
        event.record(&busy).unwrap();
        let mut completion = event.completed().unwrap();
        if round % 2 == 0 {
            let waker = Waker::from(Arc::new(Counter(AtomicUsize::new(0))));
            assert!(!poll_once(&mut completion, &waker));
        }
        std::thread::sleep(Duration::from_micros(*age));
        if round % 3 == 0 {
            let (event, idle) = (event.clone(), idle.clone());
            std::thread::spawn(move || {
                event.record(&idle).unwrap();
                idle.synchronize().unwrap();
            })
            .join()
            .unwrap();
        } else {
            event.record(&idle).unwrap();
            idle.synchronize().unwrap();
        }
        if poll_for(&mut completion, Duration::from_millis(12)) {
            early += 1;
        }
        inner.store(true, Ordering::SeqCst);
        assert!(poll_for(&mut completion, Duration::from_secs(5)), "never");
        busy.synchronize().unwrap();
    }
    open_and_drain(&open, fillers, &held);
    println!("W2: {early} early of 27");
    assert_eq!(early, 0, "a completion resolved on a later record");
    handles_cuda::exec::clear_notifiers();
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// W3: a task that polled once and registered its waker is woken (not polled again) when the
// record of a watch that waits for room completes: no lost wake-up, and within a bound
// (5 ms gap at most, plus slack for the simulator).

#[test]
fn w3_waiting_watch_wakes_its_task() {
    let _serial = serial();
    strict_clean("w3_waiting_watch_wakes_its_task", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w3_waiting_watch_wakes_its_task() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    let open = gate(&held);
    let fillers = fill_room(&context, &held);
    let mut worst = Duration::ZERO;
    for wait_ms in [1u64, 3, 10, 30, 80] {
        let busy = stream(&context);
        let inner = gate(&busy);
        let event = EventHandle::create(&context, EventFlags::default()).unwrap();
        event.record(&busy).unwrap();
        let mut completion = event.completed().unwrap();
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&counter));
        assert!(!poll_once(&mut completion, &waker));
        std::thread::sleep(Duration::from_millis(wait_ms));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        let opened = Instant::now();
        inner.store(true, Ordering::SeqCst);
        while counter.0.load(Ordering::SeqCst) == 0 {
            assert!(
                opened.elapsed() < Duration::from_secs(2),
                "never woken (waited {wait_ms} ms first)"
            );
            std::thread::yield_now();
        }
        let took = opened.elapsed();
        worst = worst.max(took);
        assert!(poll_once(&mut completion, &waker));
        assert!(event.query().unwrap());
        busy.synchronize().unwrap();
    }
    println!("W3: worst wake-up {worst:?} after the record could complete");
    assert!(worst < Duration::from_millis(50), "woken {worst:?} late");
    open_and_drain(&open, fillers, &held);
    handles_cuda::exec::clear_notifiers();
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// W4: futures dropped while their watches wait for room: their events are let go of soon
// (within a few of the 5 ms gaps), and nothing is kept after clear_notifiers.

#[test]
fn w4_dropped_waiting_futures_let_their_events_go() {
    let _serial = serial();
    strict_clean("w4_dropped_waiting_futures_let_their_events_go", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w4_dropped_waiting_futures_let_their_events_go() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    handles_cuda::exec::clear_notifiers();
    let base = EventHandle::live_count().unwrap();
    let open = gate(&held);
    let fillers = fill_room(&context, &held);
    let waiting = pending(&context, &held, 32, Duration::from_millis(40));
    let with_fillers = EventHandle::live_count().unwrap();
    assert_eq!(with_fillers - base, BUSY_NOTIFIERS_PER_CONTEXT + 32);
    let dropped_at = Instant::now();
    drop(waiting);
    while EventHandle::live_count().unwrap() - base > BUSY_NOTIFIERS_PER_CONTEXT {
        assert!(
            dropped_at.elapsed() < Duration::from_millis(500),
            "dropped completions' events kept: {} live",
            EventHandle::live_count().unwrap() - base
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let let_go = dropped_at.elapsed();
    // At most one 5 ms gap, and slack for the simulator.
    assert!(
        let_go < Duration::from_millis(50),
        "let go {let_go:?} after the drop"
    );
    open_and_drain(&open, fillers, &held);
    handles_cuda::exec::clear_notifiers();
    assert_eq!(EventHandle::live_count().unwrap(), base);
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// W5: clear_notifiers while watches wait for room (the gate opened by another thread
// meanwhile): it hands them over, waits, and leaves nothing; every future has resolved after
// its record; and dropped ones too.

#[test]
fn w5_clear_notifiers_with_waiting_watches_leaves_nothing() {
    let _serial = serial();
    strict_clean(
        "w5_clear_notifiers_with_waiting_watches_leaves_nothing",
        "1",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w5_clear_notifiers_with_waiting_watches_leaves_nothing() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    handles_cuda::exec::clear_notifiers();
    let base = EventHandle::live_count().unwrap();
    let open = gate(&held);
    let mut made = pending(&context, &held, 40, Duration::from_millis(20));
    // Some dropped, some dropped with their event handle too.
    let dropped: Vec<_> = made.drain(30..).collect();
    drop(dropped);
    let opener = {
        let open = Arc::clone(&open);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            open.store(true, Ordering::SeqCst);
        })
    };
    let streams = handles_cuda::exec::clear_notifiers();
    opener.join().unwrap();
    println!("W5: clear_notifiers found {streams} streams");
    for (event, completion) in &mut made {
        assert!(poll_for(completion, Duration::from_secs(2)), "never");
        assert!(event.query().unwrap());
    }
    drop(made);
    held.synchronize().unwrap();
    handles_cuda::exec::clear_notifiers();
    assert_eq!(EventHandle::live_count().unwrap(), base, "events kept");
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// W6: many threads making completions (some pending behind gates beyond the room, some done
// at once, some re-recorded, some dropped) while another thread calls clear_notifiers: no
// deadlock, no early resolution, nothing kept.

#[test]
fn w6_concurrent_rerecords_drops_and_clears() {
    let _serial = serial();
    strict_clean("w6_concurrent_rerecords_drops_and_clears", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w6_concurrent_rerecords_drops_and_clears() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let base = EventHandle::live_count().unwrap();
    let held = stream(&context);
    let open = gate(&held);
    // The room is full for the whole scenario.
    let fillers = fill_room(&context, &held);
    let stop = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let (context, stop, early) = (context.clone(), Arc::clone(&stop), Arc::clone(&early));
            std::thread::spawn(move || {
                let idle = stream(&context);
                let mut rounds = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let busy = stream(&context);
                    let inner = gate(&busy);
                    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
                    event.record(&busy).unwrap();
                    let mut futures: Vec<_> = (0..3).map(|_| event.completed().unwrap()).collect();
                    std::thread::sleep(Duration::from_micros(
                        ((rounds * 37 + t * 101) % 900) as u64,
                    ));
                    match (rounds + t) % 3 {
                        0 => {
                            event.record(&idle).unwrap();
                            idle.synchronize().unwrap();
                        }
                        1 => drop(futures.pop()),
                        _ => {}
                    }
                    for future in &mut futures {
                        if poll_for(future, Duration::from_micros(300)) {
                            early.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    inner.store(true, Ordering::SeqCst);
                    for mut future in futures {
                        assert!(poll_for(&mut future, Duration::from_secs(5)), "hang");
                    }
                    busy.synchronize().unwrap();
                    rounds += 1;
                }
                idle.synchronize().unwrap();
                rounds
            })
        })
        .collect();
    // clear_notifiers while the fillers' notifiers are held: it takes their streams out of the
    // table at once and then blocks until the gate opens, at the end.
    let clearer = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(100));
        handles_cuda::exec::clear_notifiers()
    });
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, Ordering::SeqCst);
    let rounds: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    open.store(true, Ordering::SeqCst);
    let cleared = clearer.join().unwrap();
    println!("W6: the concurrent clear_notifiers found {cleared} streams");
    for (_, mut completion) in fillers {
        assert!(poll_for(&mut completion, Duration::from_secs(5)));
    }
    held.synchronize().unwrap();
    println!(
        "W6: {rounds} rounds, {} early",
        early.load(Ordering::SeqCst)
    );
    assert_eq!(early.load(Ordering::SeqCst), 0);
    handles_cuda::exec::clear_notifiers();
    assert_eq!(EventHandle::live_count().unwrap(), base, "events kept");
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// W7 (a defect of 1b7ee8e, fixed since): the waiter's CPU time while many watches wait for
// room for a long time (the program waits for a long kernel, as the tokio test's waves do).
// 1b7ee8e polled every waiting watch every 5 ms (N x 200 queries and room checks a second,
// with no bound on N), and spun rather than parked whenever the next watch was due within
// 50 us, which with many staggered watches was nearly always: on the simulator 7-52% of a
// core at 1000, 50-62% at 6000. Now the waiting watches are polled at most 50,000 times a
// second in all, on a grid that makes watches of about one age fall due together, and a
// context found full is not asked again in the same round. The bound is the one the GPU tokio
// test puts on its workers and the waiter together (a quarter of the wall time).

fn waiter_share_with(n: usize, window: Duration) -> f64 {
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    let open = gate(&held);
    let made = pending(&context, &held, n, Duration::from_millis(50));
    let (from, cpu_from) = (Instant::now(), waiter_cpu());
    std::thread::sleep(window);
    let share = (waiter_cpu() - cpu_from).as_secs_f64() / from.elapsed().as_secs_f64();
    open_and_drain(&open, made, &held);
    handles_cuda::exec::clear_notifiers();
    share
}

#[test]
fn w7_waiter_cpu_while_watches_wait_for_room() {
    let _serial = serial();
    strict_clean("w7_waiter_cpu_while_watches_wait_for_room", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w7_waiter_cpu_while_watches_wait_for_room() {
    in_scenario();
    let failures = Failures::watch();
    let mut shares = Vec::new();
    for n in [1000, 6000] {
        let share = waiter_share_with(n, Duration::from_millis(400));
        println!(
            "W7: {n} pending completions: the waiter used {:.1}% of a core",
            share * 100.0
        );
        shares.push((n, share));
    }
    failures.assert_none();
    let (n, share) = *shares.last().unwrap();
    assert!(
        share < 0.25,
        "the waiter used {:.1}% of a core while {n} completions waited for a long record: {shares:?}",
        share * 100.0
    );
}

// ---------------------------------------------------------------------------------------------
// W8 (a defect of 1b7ee8e, fixed since: a dropped watch is let go of, not handed over, and the
// waiter notices a dropped watch at every round, due or not): futures dropped while their
// watches wait for room (a timeout around
// `completed()`, say), their events recorded again at once (an event pool): the record's
// hand-over (`Room::Beyond`) gives each dropped watch a notifier stream of its own, for a
// completion nothing awaits, past BUSY_NOTIFIERS_PER_CONTEXT; the table keeps each event
// until it prunes or is cleared. A dropped watch could simply be let go of.

#[test]
fn w8_rerecord_after_drop_makes_notifiers_for_nothing() {
    let _serial = serial();
    strict_clean("w8_rerecord_after_drop_makes_notifiers_for_nothing", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_w8_rerecord_after_drop_makes_notifiers_for_nothing() {
    in_scenario();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    handles_cuda::exec::clear_notifiers();
    let open = gate(&held);
    let fillers = fill_room(&context, &held);
    // 32 completions waiting for room, old enough to be polled 5 ms apart.
    let waiting = pending(&context, &held, 32, Duration::from_millis(40));
    let events: Vec<EventHandle> = waiting
        .into_iter()
        .map(|(event, completion)| {
            // Timed out: the future goes, the event is used again at once.
            drop(completion);
            event.record(&held).unwrap();
            event
        })
        .collect();
    open_and_drain(&open, fillers, &held);
    drop(events);
    let streams = handles_cuda::exec::clear_notifiers();
    failures.assert_none();
    assert!(
        streams <= BUSY_NOTIFIERS_PER_CONTEXT,
        "{streams} notifier streams: the records of 32 events whose completions were dropped \
         handed their watches to notifiers (one stream each) though nothing awaited them"
    );
}
