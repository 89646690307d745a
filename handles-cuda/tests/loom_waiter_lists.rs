//! Model check of the waiter's two lists (`completion_waiter.rs`): `watch` counts and
//! pushes under `INCOMING`; the waiter and a record's hand-over take `WATCHES`, then `INCOMING`,
//! and move the incoming watches into `WATCHES`. A record that comes after `completed()` has
//! returned (ordered by a flag the caller sets) must hand the watch over before the event's
//! record changes: the waiter never polls a watch while the event's most recent record is not
//! the one awaited. Run with `RUSTFLAGS="--cfg handles_cuda_loom"
//! CARGO_TARGET_DIR=target/loom-cuda cargo test -p handles-cuda --test loom_waiter_lists --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/exec/record_count.rs"]
#[allow(dead_code)]
mod record_count;

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use record_count::RecordCount;

struct State {
    records: RecordCount,
    /// The event's most recent record (bumped by `cuEventRecord`).
    generation: AtomicUsize,
    watches: Mutex<Vec<usize>>,
    incoming: Mutex<Vec<usize>>,
    /// Set by the caller once `completed()` has returned.
    returned: AtomicBool,
}

/// `hand_over_where` for one event: WATCHES, then INCOMING appended, every watch handed over
/// (its stream wait names the record now current: it must be the awaited one).
fn hand_over(state: &State) {
    let mut watches = state.watches.lock().unwrap();
    let mut incoming = state.incoming.lock().unwrap();
    watches.append(&mut incoming);
    drop(incoming);
    for awaited in watches.drain(..) {
        assert_eq!(
            state.generation.load(Ordering::SeqCst),
            awaited,
            "a watch handed over after its event was recorded again"
        );
        state.records.unwatch();
    }
}

fn model(waiter_hands_over: bool) {
    loom::model(move || {
        let state = Arc::new(State {
            records: RecordCount::new(false),
            generation: AtomicUsize::new(0),
            watches: Mutex::new(Vec::new()),
            incoming: Mutex::new(Vec::new()),
            returned: AtomicBool::new(false),
        });
        // `completed()`: the watch, under INCOMING; then the call returns.
        let caller = {
            let state = state.clone();
            loom::thread::spawn(move || {
                {
                    let mut incoming = state.incoming.lock().unwrap();
                    if state.records.watch() {
                        incoming.push(state.generation.load(Ordering::SeqCst));
                    }
                }
                state.returned.store(true, Ordering::Release);
            })
        };
        // The waiter: one round (moves INCOMING, polls; maybe hands the watch over).
        let waiter = {
            let state = state.clone();
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    let mut watches = state.watches.lock().unwrap();
                    watches.append(&mut state.incoming.lock().unwrap());
                    let now = state.generation.load(Ordering::SeqCst);
                    for &awaited in watches.iter() {
                        assert_eq!(now, awaited, "the waiter polls a later record");
                    }
                    if waiter_hands_over {
                        for _ in watches.drain(..) {
                            state.records.unwatch();
                        }
                    }
                }
            })
        };
        // A record ordered after `completed()` returned: `before_record`, then cuEventRecord.
        if state.returned.load(Ordering::Acquire) {
            if state.records.watched() {
                hand_over(&state);
            }
            state.generation.fetch_add(1, Ordering::SeqCst);
        }
        caller.join().unwrap();
        waiter.join().unwrap();
    });
}

#[test]
fn record_after_completed_hands_the_incoming_watch_over() {
    model(false);
}

#[test]
fn record_after_completed_with_the_waiter_handing_over() {
    model(true);
}
