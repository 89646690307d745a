//! Model check of stream-address generations (`exec/stream_generation.rs`): a stream created at
//! the address of a stream being destroyed on another thread never reads the generation that
//! the destroyed stream's markers were keyed with. The driver's create and destroy are modelled
//! as a free list under a lock (the driver's own). Run with
//! `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test loom_stream_generation
//! --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/exec/stream_generation.rs"]
#[allow(dead_code)]
mod generation;

use generation::Generations;
use loom::sync::{Arc, Mutex};

const OLD: usize = 0x7f00_0000_1000;
const FRESH: usize = 0x7f00_0000_2000;

#[test]
fn a_reused_address_never_reads_the_retired_generation() {
    loom::model(|| {
        let generations = Arc::new(Generations::new());
        // The driver's free addresses.
        let free = Arc::new(Mutex::new(Vec::<usize>::new()));
        // A use of the old stream, before its handle dropped: its marker's key.
        let marked = generations.of(OLD);

        let destroyer = {
            let (generations, free) = (generations.clone(), free.clone());
            loom::thread::spawn(move || {
                // The deleter: retire, then `cuStreamDestroy` frees the address.
                generations.retire(OLD);
                free.lock().unwrap().push(OLD);
            })
        };
        let creator = {
            let (generations, free) = (generations.clone(), free.clone());
            loom::thread::spawn(move || {
                // `cuStreamCreate`: a freed address if there is one, else a fresh one; then a
                // use of the new stream reads its key.
                let raw = free.lock().unwrap().pop().unwrap_or(FRESH);
                (raw, generations.of(raw))
            })
        };
        destroyer.join().unwrap();
        let (raw, generation) = creator.join().unwrap();
        if raw == OLD {
            assert_ne!(
                generation, marked,
                "a new stream at a retired address matched the old stream's markers"
            );
        }
    });
}
