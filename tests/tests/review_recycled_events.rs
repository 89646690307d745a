//! Adversarial programs against the event recycler's promise once an event the host saw complete
//! goes back ready (`RecycledEvent::synchronize`, or a `query` that said done): an event handed
//! out again must be complete and unshared whatever safe calls came between, a record behind a
//! held stream, a clone or borrow through `Deref`, a move between threads, a failed wait or
//! record, default-stream tokens, a `Mutex`, a host function's closure. Each scenario runs in a
//! child on the strict simulator and ends by checking that the next acquire looks fresh.

mod simulator;

use cuda_sim::Report;
use handles_cuda::{
    ContextHandle, EventHandle, StreamHandle,
    exec::{EventFlags, EventRecycler, RecycledEvent},
};
use handles_tests::{Gate, stream};
use simulator::{in_scenario, say};

fn run(name: &str, fail: &[(&str, u64, &str)], env: &[(&str, &str)]) -> Report {
    let report = simulator::run_scenario(name, fail, env);
    let calls = |call: &str| report.calls.get(call).copied().unwrap_or(0);
    say(format!(
        "{name}: cuEventCreate={} cuEventQuery={} cuEventSynchronize={} cuEventRecord={} cuEventDestroy={}",
        calls("cuEventCreate"),
        calls("cuEventQuery"),
        calls("cuEventSynchronize"),
        calls("cuEventRecord"),
        calls("cuEventDestroy_v2") + calls("cuEventDestroy"),
    ));
    report
}

/// The raw event, read through Debug (not Deref: leaves the recycler's state alone).
fn raw(event: &RecycledEvent) -> String {
    let text = format!("{event:?}");
    let start = text.find("raw: ").unwrap();
    text[start..].split(',').next().unwrap().to_string()
}

/// The check of the promise: a just-acquired event is complete (a fresh event's state).
fn acquire_fresh(recycler: &EventRecycler, what: &str) -> RecycledEvent {
    let event = recycler.acquire().unwrap();
    assert!(
        event.query().unwrap(),
        "{what}: acquire handed out an event whose last record has not completed ({})",
        raw(&event)
    );
    event
}

/// An event acquired, recorded on `open` and waited for (so seen complete), with its raw name.
fn seen_complete(recycler: &EventRecycler, open: &StreamHandle) -> (RecycledEvent, String) {
    let event = recycler.acquire().unwrap();
    let first = raw(&event);
    event.record(open).unwrap();
    event.synchronize().unwrap();
    (event, first)
}

/// Every scenario's start: a context, an open stream, a stream held back (with its gate) and a
/// recycler.
fn setup() -> (
    ContextHandle,
    StreamHandle,
    StreamHandle,
    EventRecycler,
    Gate,
) {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let open = stream(&context);
    let held = stream(&context);
    let gate = Gate::hold(&held);
    let recycler = EventRecycler::new(&context, EventFlags::default()).unwrap();
    (context, open, held, recycler, gate)
}

/// Every scenario's end: the held stream let go and drained, then the last acquired event, the
/// recycler and the recycled events.
fn finish(gate: Gate, held: &StreamHandle, next: RecycledEvent, recycler: EventRecycler) {
    drop(gate);
    held.synchronize().unwrap();
    drop(next);
    drop(recycler);
    handles_cuda::exec::clear_recycled_events();
}

use simulator::clean_scenario as scenario;

/// No variable set unless a scenario names some.
const ENV: &[(&str, &str)] = &[];

// A1: seen complete, then recorded again behind a held stream, then dropped.
scenario!(
    a1_sync_then_rerecord_pending,
    scenario_a1_sync_then_rerecord_pending,
    {
        let (_c, open, held, recycler, gate) = setup();
        let (event, first) = seen_complete(&recycler, &open);
        event.record(&held).unwrap();
        assert!(!event.query().unwrap());
        drop(event);
        let next = acquire_fresh(&recycler, "A1");
        say(format!("A1 first {first} next {}", raw(&next)));
        assert_ne!(first, raw(&next));
        finish(gate, &held, next, recycler);
    }
);

// A2: a query that said done, then recorded again behind a held stream.
scenario!(
    a2_query_then_rerecord_pending,
    scenario_a2_query_then_rerecord_pending,
    {
        let (_c, open, held, recycler, gate) = setup();
        let event = recycler.acquire().unwrap();
        let first = raw(&event);
        event.record(&open).unwrap();
        assert!(event.query().unwrap());
        event.record(&held).unwrap();
        assert!(!event.query().unwrap());
        drop(event);
        let next = acquire_fresh(&recycler, "A2");
        assert_ne!(first, raw(&next));
        finish(gate, &held, next, recycler);
    }
);

// A3: seen complete, then Deref: a clone records behind the held stream after the drop.
scenario!(
    a3_sync_then_clone_records,
    scenario_a3_sync_then_clone_records,
    {
        let (_c, open, held, recycler, gate) = setup();
        let (event, first) = seen_complete(&recycler, &open);
        let clone: EventHandle = (*event).clone();
        event.synchronize().unwrap(); // Unknown must stay Unknown
        drop(event);
        clone.record(&held).unwrap();
        let next = acquire_fresh(&recycler, "A3");
        assert_ne!(first, raw(&next));
        drop(clone);
        finish(gate, &held, next, recycler);
    }
);

// A4: seen complete, then a Deref borrow records behind the held stream, then synchronize is
// not possible (it would block), so query(false), and drop.
scenario!(
    a4_sync_then_deref_record,
    scenario_a4_sync_then_deref_record,
    {
        let (_c, open, held, recycler, gate) = setup();
        let (event, _) = seen_complete(&recycler, &open);
        {
            let handle: &EventHandle = &event;
            handle.record(&held).unwrap();
        }
        // query through RecycledEvent again after the deref: still running
        assert!(!event.query().unwrap());
        drop(event);
        let next = acquire_fresh(&recycler, "A4");
        finish(gate, &held, next, recycler);
    }
);

// A5: moved to another thread between the record and the release; then back.
scenario!(a5_moved_threads, scenario_a5_moved_threads, {
    let (_c, open, held, recycler, gate) = setup();
    let event = recycler.acquire().unwrap();
    event.record(&open).unwrap();
    let (event, recycler2) = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                event.synchronize().unwrap();
                // recorded again on the other thread, behind the held stream
                event.record(&held).unwrap();
                (event, recycler.clone())
            })
            .join()
            .unwrap()
    });
    drop(event); // released on the main thread: pending
    let next = acquire_fresh(&recycler2, "A5 main");
    // and: recorded on main, synchronized on main, re-recorded on another thread, dropped there
    let e = recycler.acquire().unwrap();
    e.record(&open).unwrap();
    e.synchronize().unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            e.record(&held).unwrap();
            drop(e);
            let n = acquire_fresh(&recycler, "A5 other");
            drop(n);
            handles_cuda::exec::clear_recycled_events();
        });
    });
    drop(recycler2);
    finish(gate, &held, next, recycler);
});

// A6: synchronize fails (injected): the state must stay Followed (pending, queried).
scenario!(
    a6_sync_fails,
    scenario_a6_sync_fails,
    &[("cuEventSynchronize", 1, "CUDA_ERROR_LAUNCH_FAILED")],
    &[],
    {
        let (_c, _open, held, recycler, gate) = setup();
        let event = recycler.acquire().unwrap();
        let first = raw(&event);
        event.record(&held).unwrap();
        let result = event.synchronize();
        say(format!("A6 synchronize: {result:?}"));
        assert!(result.is_err());
        drop(event);
        let next = acquire_fresh(&recycler, "A6");
        assert_ne!(first, raw(&next));
        finish(gate, &held, next, recycler);
    }
);

// A7: seen complete, then a failed record (stream of another context), then dropped.
scenario!(
    a7_failed_record_after_sync,
    scenario_a7_failed_record_after_sync,
    &[],
    &[("CUDA_SIM_DEVICES", "2")],
    {
        let (_c, open, held, recycler, gate) = setup();
        let other = ContextHandle::primary(1).unwrap();
        let foreign = stream(&other);
        let (event, _) = seen_complete(&recycler, &open);
        let result = event.record(&foreign);
        say(format!("A7 record on another context's stream: {result:?}"));
        assert!(result.is_err());
        drop(event);
        let next = acquire_fresh(&recycler, "A7");
        finish(gate, &held, next, recycler);
    }
);

// A8: seen complete, then recorded on default-stream tokens held back behind a host function.
scenario!(a8_tokens_after_sync, scenario_a8_tokens_after_sync, {
    let (context, open, held, recycler, held_gate) = setup();
    for (name, token) in [
        ("legacy_in", StreamHandle::legacy_in(&context).unwrap()),
        ("per_thread", StreamHandle::per_thread()),
        ("legacy", StreamHandle::legacy()),
    ] {
        let gate = Gate::hold(&token);
        let (event, first) = seen_complete(&recycler, &open);
        let recorded = event.record(&token);
        say(format!("A8 {name}: record {recorded:?}"));
        drop(event);
        let next = acquire_fresh(&recycler, name);
        say(format!("A8 {name}: first {first} next {}", raw(&next)));
        drop(gate);
        token.synchronize().unwrap();
        drop(next);
    }
    let next = acquire_fresh(&recycler, "A8 last");
    finish(held_gate, &held, next, recycler);
});

// A9: wait_on after synchronize (a wait records nothing): reused, with no query.
scenario!(a9_wait_on_after_sync, scenario_a9_wait_on_after_sync, {
    let (_c, open, held, recycler, gate) = setup();
    let (event, first) = seen_complete(&recycler, &open);
    event.wait_on(&held).unwrap();
    drop(event);
    let next = acquire_fresh(&recycler, "A9");
    say(format!(
        "A9 first {first} next {} (same = reused)",
        raw(&next)
    ));
    finish(gate, &held, next, recycler);
});

// A10: shared through a Mutex (Sync wrapper): another thread records behind the held stream
// between this thread's synchronize and the drop.
scenario!(a10_mutex_shared, scenario_a10_mutex_shared, {
    let (_c, open, held, recycler, gate) = setup();
    let shared = std::sync::Mutex::new(recycler.acquire().unwrap());
    shared.lock().unwrap().record(&open).unwrap();
    shared.lock().unwrap().synchronize().unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| shared.lock().unwrap().record(&held).unwrap());
    });
    drop(shared.into_inner().unwrap());
    let next = acquire_fresh(&recycler, "A10");
    finish(gate, &held, next, recycler);
});

// A11: moved into a host function's closure after being seen complete (dropped on a thread
// of the crate), and recorded behind the gate before the move.
scenario!(a11_into_host_fn, scenario_a11_into_host_fn, {
    let (_c, open, held, recycler, gate) = setup();
    let (event, _) = seen_complete(&recycler, &open);
    event.record(&held).unwrap();
    let mut slot = Some(event);
    open.launch_host(move || {
        let _ = slot.take();
    })
    .unwrap();
    open.synchronize().unwrap();
    let next = acquire_fresh(&recycler, "A11");
    finish(gate, &held, next, recycler);
});
