//! Model check of the waiter's watch against a record node added at the same time
//! (`exec/record_count.rs`): once the node's hand-over has run, no watch of the event is left
//! polling. The lock of the waiter's incoming watches (which the hand-over takes too) is modelled
//! by a loom mutex around the list of watches. Run with
//! `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test loom_record_count
//! --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/exec/record_count.rs"]
#[allow(dead_code)]
mod record_count;

use loom::sync::{Arc, Mutex};
use record_count::RecordCount;

#[test]
fn no_watch_is_left_polling_once_a_record_node_is_added() {
    loom::model(|| {
        let records = Arc::new(RecordCount::new(false));
        let watches = Arc::new(Mutex::new(Vec::<u32>::new()));
        let waiter = {
            let (records, watches) = (records.clone(), watches.clone());
            loom::thread::spawn(move || {
                // `completion_waiter::watch`: under the incoming list's lock, counted, then listed.
                let mut list = watches.lock().unwrap();
                if records.watch() {
                    list.push(1);
                }
            })
        };
        // `EventHandle::before_uncounted_records`: marked, then the watches handed over.
        if records.set_uncounted() {
            let mut list = watches.lock().unwrap();
            for _ in list.drain(..) {
                records.unwatch();
            }
        }
        waiter.join().unwrap();
        // Any record from here on (a launch of the graph) is one no watch polls.
        assert!(
            watches.lock().unwrap().is_empty(),
            "a watch is left polling an event that a graph now records"
        );
        assert!(!records.watched());
    });
}
