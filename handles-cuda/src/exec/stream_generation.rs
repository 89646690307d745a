//! Generations of stream addresses. `cuStreamDestroy` returns while queued work may still run,
//! and driver 580 hands the destroyed stream's address to the next stream it creates (seen on
//! the H200). Work is identified by stream address in `order/markers.rs`, so the address alone
//! would confuse the two streams: the deleter of an owned stream retires its address here
//! *before* destroying it, and a key read afterwards carries the next generation.
//!
//! Addresses share [`SLOTS`] counters by hash: retiring one address also moves the addresses
//! that share its slot, which only makes their next use take a fresh marker (a spare event,
//! never a missed wait). On its own so that `tests/loom_stream_generation.rs` can model-check
//! the protocol with loom's atomics.

#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// How many generation counters the addresses share.
pub(crate) const SLOTS: usize = 256;

/// A generation counter per slot of stream addresses.
pub(crate) struct Generations([AtomicU64; SLOTS]);

impl Generations {
    /// All generations at 0.
    #[cfg(not(handles_cuda_loom))]
    pub(crate) const fn new() -> Self {
        Generations([const { AtomicU64::new(0) }; SLOTS])
    }

    /// All generations at 0 (loom's atomics are not `const`).
    #[cfg(handles_cuda_loom)]
    pub(crate) fn new() -> Self {
        Generations(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    fn slot(&self, raw: usize) -> &AtomicU64 {
        // Streams are heap objects at least 16-byte aligned: the low bits carry nothing.
        &self.0[(raw >> 4) % SLOTS]
    }

    /// The generation of the stream at `raw` now. A stream created at an address retired
    /// before (the driver's create returns after our retire, through the driver's own
    /// synchronisation) reads a later generation than any use of the retired stream did:
    /// `SeqCst`, against [`Self::retire`].
    #[inline]
    pub(crate) fn of(&self, raw: usize) -> u64 {
        self.slot(raw).load(Ordering::SeqCst)
    }

    /// Retires the address `raw` of a stream about to be destroyed. Must be called before the
    /// driver can hand the address out again, that is before `cuStreamDestroy`.
    pub(crate) fn retire(&self, raw: usize) {
        self.slot(raw).fetch_add(1, Ordering::SeqCst);
    }
}

/// The process's generations of stream addresses.
#[cfg(not(handles_cuda_loom))]
pub(crate) static GENERATIONS: Generations = Generations::new();

/// Under loom the crate is only compiled beside the model, never run, and loom's atomics
/// cannot live in a `static` initialiser: made on first use.
#[cfg(handles_cuda_loom)]
pub(crate) static GENERATIONS: std::sync::LazyLock<Generations> =
    std::sync::LazyLock::new(Generations::new);
