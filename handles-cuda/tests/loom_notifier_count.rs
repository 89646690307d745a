//! Model check of a notifier stream's count (`exec/notifier_count.rs`): while the host function
//! of the completion that holds the stream runs, two hand-overs look for an idle stream. At
//! most one of them takes it, and only after the host function has let go, seeing everything
//! it did before (a loom cell that the host function writes and the taker reads: a read not
//! ordered after the write is reported as a race). Run with
//! `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test loom_notifier_count
//! --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/exec/notifier_count.rs"]
#[allow(dead_code)]
mod notifier_count;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use notifier_count::NotifierCount;

/// The stream's state that a host function leaves behind (the woken task, in the library).
struct Stream {
    count: NotifierCount,
    woken: UnsafeCell<u32>,
}

// SAFETY: `woken` is written by the holder of the count only (the host function, then a
// taker); loom checks that those accesses are ordered.
unsafe impl Sync for Stream {}

impl Stream {
    /// A stream taken by the completion it was made for.
    fn taken() -> Arc<Stream> {
        Arc::new(Stream {
            count: NotifierCount::taken(),
            woken: UnsafeCell::new(0),
        })
    }
}

/// Two hand-overs looking for an idle stream at once: each that takes `stream` runs `then` on
/// it and lets go; returns once both have finished.
fn two_hand_overs(stream: &Arc<Stream>, then: fn(&Stream)) {
    let hand_overs: Vec<_> = (0..2)
        .map(|_| {
            let stream = stream.clone();
            loom::thread::spawn(move || {
                if stream.count.take_if_idle() {
                    then(&stream);
                    stream.count.let_go();
                }
            })
        })
        .collect();
    for hand_over in hand_overs {
        hand_over.join().unwrap();
    }
}

#[test]
fn an_idle_stream_is_taken_once_and_after_its_host_function() {
    loom::model(|| {
        let stream = Stream::taken();
        let host_function = {
            let stream = stream.clone();
            loom::thread::spawn(move || {
                // SAFETY: the host function holds the count: no taker touches the cell yet.
                stream.woken.with_mut(|woken| unsafe { *woken = 1 });
                stream.count.let_go();
            })
        };
        two_hand_overs(&stream, |stream| {
            // SAFETY: taken: the host function let go before, and no other taker holds it (the
            // count is 1 again until this one lets go).
            let woken = stream.woken.with(|woken| unsafe { *woken });
            assert_eq!(woken, 1, "taken before the host function's work is seen");
        });
        host_function.join().unwrap();
        assert!(stream.count.idle(), "a count is left held");
    });
}

#[test]
fn two_hand_overs_never_hold_one_stream_at_once() {
    loom::model(|| {
        let stream = Stream::taken();
        stream.count.let_go();
        two_hand_overs(&stream, |stream| {
            // SAFETY: held: a second holder would make loom report a race here.
            stream.woken.with_mut(|woken| unsafe { *woken += 1 })
        });
        assert!(stream.count.idle());
    });
}
