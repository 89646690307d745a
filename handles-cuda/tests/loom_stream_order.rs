//! Model check of the lock-free half of the ordering rule for frees (`stream_order.rs`): a use
//! on the deallocation stream that skips the lock, racing a move of the free to another stream,
//! is always covered by the marker the move records. Run with
//! `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test loom_stream_order
//! --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/order/stream_order_protocol.rs"]
#[allow(dead_code)]
mod protocol;

use loom::sync::{Arc, Mutex};
use protocol::HomeMirror;

const OLD_HOME: usize = 1;
const NEW_HOME: usize = 2;

/// What the free's ordering knows: the current home and, per marker, how much of the old
/// home's queue it covers.
struct State {
    home: usize,
    covered_by_markers: Vec<usize>,
}

#[test]
fn a_use_racing_a_move_is_always_covered_by_a_marker() {
    loom::model(|| {
        let mirror = Arc::new(HomeMirror::new(OLD_HOME));
        // Work queued on the old home stream, in submission order.
        let old_home_queue = Arc::new(Mutex::new(0usize));
        let state = Arc::new(Mutex::new(State {
            home: OLD_HOME,
            covered_by_markers: Vec::new(),
        }));

        let user = {
            let (mirror, queue, state) = (mirror.clone(), old_home_queue.clone(), state.clone());
            loom::thread::spawn(move || {
                // `memset_async` on the old home: queue the work, then report the use.
                *queue.lock().unwrap() += 1;
                if !mirror.is_home(OLD_HOME) {
                    let mut state = state.lock().unwrap();
                    if state.home != OLD_HOME {
                        // A marker recorded on the old home now covers the work just queued.
                        let covered = *queue.lock().unwrap();
                        state.covered_by_markers.push(covered);
                    }
                }
            })
        };
        let mover = {
            let (mirror, queue, state) = (mirror.clone(), old_home_queue.clone(), state.clone());
            loom::thread::spawn(move || {
                // `set_deallocation_stream(new)`: publish, then mark the old home.
                let mut state = state.lock().unwrap();
                mirror.set_home(NEW_HOME);
                let covered = *queue.lock().unwrap();
                state.covered_by_markers.push(covered);
                state.home = NEW_HOME;
            })
        };
        user.join().unwrap();
        mover.join().unwrap();

        // The free waits for every marker: together they must cover all work on the old home.
        let queued = *old_home_queue.lock().unwrap();
        let covered = state
            .lock()
            .unwrap()
            .covered_by_markers
            .iter()
            .copied()
            .max();
        assert_eq!(
            covered,
            Some(queued),
            "a use on the old home escaped the markers"
        );
    });
}
