//! Captures and the crate's context synchronisations keep out of each other's way: driver 580
//! invalidates a capture on any `cuCtxSynchronize` made while it runs, from any thread, in any
//! capture mode (`cuda-sim/probes/capture_side_calls.py`). One atomic word counts both, the
//! captures in its upper half and the synchronisations in its lower half, and every change is a
//! read-modify-write of that word, so the two never miss each other: a synchronisation of a
//! release (`ContextsUsed::release_after_all`) is counted only while no capture is (otherwise
//! it backs off, and the release is handed to the disposal thread, which tries again once no
//! capture runs); a capture counts itself, then waits until the synchronisations counted before
//! it have ended. On its own so that `tests/loom_capture_sync.rs` can model-check that a
//! capture and a synchronisation never run at once.

#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// One capture, in the word's upper half.
const CAPTURE: usize = 1 << (usize::BITS / 2);
/// The synchronisations' half of the word.
const SYNCS: usize = CAPTURE - 1;

/// The counts of running captures and synchronisations, in one word.
#[derive(Debug)]
pub(crate) struct CaptureSync(AtomicUsize);

impl CaptureSync {
    /// No capture, no synchronisation.
    #[cfg(not(handles_cuda_loom))]
    pub(crate) const fn new() -> Self {
        CaptureSync(AtomicUsize::new(0))
    }

    /// No capture, no synchronisation (loom's atomics have no `const` constructor).
    #[cfg(handles_cuda_loom)]
    pub(crate) fn new() -> Self {
        CaptureSync(AtomicUsize::new(0))
    }

    /// A capture is about to begin: counted, then `wait` is called until the synchronisations
    /// counted before it have ended (acquire: their driver calls happened before), or until it
    /// answers `false` (then the capture goes ahead beside them, and may be invalidated: an
    /// error, never a hang on a synchronisation that waits for this thread). Call
    /// [`Self::end_capture`] once the capture has ended.
    pub(crate) fn begin_capture(&self, mut wait: impl FnMut() -> bool) {
        let mut word = self.0.fetch_add(CAPTURE, Ordering::Acquire) + CAPTURE;
        while word & SYNCS != 0 && wait() {
            word = self.0.load(Ordering::Acquire);
        }
    }

    /// A capture counted by [`Self::begin_capture`] has ended (release: its driver calls
    /// happened before a synchronisation that sees it gone).
    pub(crate) fn end_capture(&self) {
        self.0.fetch_sub(CAPTURE, Ordering::Release);
    }

    /// Whether a capture may run now, for a fast path's hint only (a relaxed load).
    #[inline]
    pub(crate) fn capture_possible(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= CAPTURE
    }

    /// Counts a synchronisation about to begin, if no capture runs: `true` when it may run
    /// (then call [`Self::end_sync`] after it), `false` when a capture runs (nothing counted).
    pub(crate) fn try_begin_sync(&self) -> bool {
        self.0
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |word| {
                (word < CAPTURE).then_some(word + 1)
            })
            .is_ok()
    }

    /// A synchronisation counted by [`Self::try_begin_sync`] has ended.
    pub(crate) fn end_sync(&self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(all(test, not(handles_cuda_loom)))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::CaptureSync;

    #[test]
    fn a_capture_backs_a_synchronisation_off_and_waits_for_one() {
        let sync = CaptureSync::new();
        assert!(!sync.capture_possible());
        assert!(sync.try_begin_sync());
        // A capture begun now waits for the synchronisation, on another thread.
        let waited = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let capture = scope.spawn(|| {
                sync.begin_capture(|| {
                    waited.store(true, Ordering::SeqCst);
                    std::thread::yield_now();
                    true
                });
                assert!(
                    !sync.try_begin_sync(),
                    "a synchronisation began during a capture"
                );
                sync.end_capture();
            });
            while !sync.capture_possible() && !capture.is_finished() {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            sync.end_sync();
            capture.join().unwrap();
        });
        assert!(waited.load(Ordering::SeqCst), "the capture did not wait");
        assert!(sync.try_begin_sync());
        sync.end_sync();
    }
}
