//! Model check of the handshake between captures and context synchronisations
//! (`driver/capture_sync.rs`): a capture and a synchronisation never run at once, whichever
//! thread counts itself first, and a synchronisation that backs off leaves no count behind.
//! Run with `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test
//! loom_capture_sync --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/driver/capture_sync.rs"]
#[allow(dead_code)]
mod capture_sync;

use capture_sync::CaptureSync;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};

/// The state a capture writes and a synchronisation reads: loom reports a data race if the
/// two ever run at once (synchronisations may overlap each other: they only read).
struct Shared {
    sync: CaptureSync,
    driver: UnsafeCell<u32>,
    synced: AtomicUsize,
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared {
        sync: CaptureSync::new(),
        driver: UnsafeCell::new(0),
        synced: AtomicUsize::new(0),
    })
}

fn capture(shared: &Shared) {
    shared.sync.begin_capture(|| {
        loom::thread::yield_now();
        true
    });
    // SAFETY (model): exclusive while the capture runs, which the handshake is to guarantee.
    shared.driver.with_mut(|driver| unsafe { *driver += 1 });
    shared.sync.end_capture();
}

/// A synchronisation; `true` if it ran, `false` if it backed off.
fn synchronise(shared: &Shared) -> bool {
    if !shared.sync.try_begin_sync() {
        return false;
    }
    // SAFETY (model): no capture writes while the synchronisation runs.
    let seen = shared.driver.with(|driver| unsafe { *driver });
    assert!(seen <= 1);
    shared.synced.fetch_add(1, Ordering::Relaxed);
    shared.sync.end_sync();
    true
}

#[test]
fn a_capture_and_a_synchronisation_never_overlap() {
    loom::model(|| {
        let shared = shared();
        let other = Arc::clone(&shared);
        let syncer = loom::thread::spawn(move || synchronise(&other));
        capture(&shared);
        let synced = syncer.join().unwrap();
        // SAFETY (model): every other thread has been joined; nothing else touches the cell.
        assert_eq!(shared.driver.with(|driver| unsafe { *driver }), 1);
        assert_eq!(shared.synced.load(Ordering::Relaxed), usize::from(synced));
        // Nothing is left counted: a capture and a synchronisation both go ahead now.
        assert!(!shared.sync.capture_possible());
        assert!(synchronise(&shared));
    });
}

#[test]
fn two_synchronisations_and_a_capture_never_overlap() {
    loom::model(|| {
        let shared = shared();
        let syncers: Vec<_> = (0..2)
            .map(|_| {
                let other = Arc::clone(&shared);
                loom::thread::spawn(move || synchronise(&other))
            })
            .collect();
        capture(&shared);
        let ran = syncers
            .into_iter()
            .map(|syncer| usize::from(syncer.join().unwrap()))
            .sum::<usize>();
        // SAFETY (model): every other thread has been joined; nothing else touches the cell.
        assert_eq!(shared.driver.with(|driver| unsafe { *driver }), 1);
        assert_eq!(shared.synced.load(Ordering::Relaxed), ran);
        // A backed-off synchronisation goes ahead once the capture has ended.
        assert!(synchronise(&shared));
    });
}
