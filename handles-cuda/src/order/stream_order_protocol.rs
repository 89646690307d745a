//! The lock-free half of the ordering rule for frees: a mirror of the deallocation stream's raw
//! value, read after each use and written before the free moves (see `stream_order.rs`). On
//! its own so that `tests/loom_stream_order.rs` can model-check it with loom's atomics.

// A cfg of its own, not `loom`: under `--cfg loom` handles-core switches to loom's primitives,
// which cannot initialise the statics this crate declares.
#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// The raw value of the stream a free will be queued on; 0 when that stream is a
/// default-stream token, whose identity needs the locked path.
pub(crate) struct HomeMirror(AtomicUsize);

impl HomeMirror {
    pub(crate) fn new(raw: usize) -> Self {
        HomeMirror(AtomicUsize::new(raw))
    }

    /// Whether work just queued on the real stream `raw` went to home. Must be called after the
    /// work was queued: `SeqCst` orders this load after it, against [`Self::set_home`].
    #[inline]
    pub(crate) fn is_home(&self, raw: usize) -> bool {
        raw != 0 && self.0.load(Ordering::SeqCst) == raw
    }

    /// The mirrored raw stream (0 for a default-stream token), for the free, which runs when no
    /// other handle can race it.
    pub(crate) fn raw(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Publishes a new home. Must be called before the marker on the old home is recorded.
    pub(crate) fn set_home(&self, raw: usize) {
        self.0.store(raw, Ordering::SeqCst);
    }
}
