//! What reach checks of one allocation have found fixed for its life: the device from which a
//! check always passes holding nothing (`DevicePtrHandle::reach_is_fixed` in `reach.rs`), or
//! that no device's check ever does. Every check then starts with one load and one comparison.
//! On its own so that `tests/loom_fixed_reach.rs` can model-check it: each value stored is a
//! fact that never changes for the allocation, so a relaxed load sees either nothing yet or a
//! true fact, and the last of two racing stores is as true as the first.

#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// The answer kept for one allocation.
pub(crate) struct FixedReach(AtomicUsize);

/// What a [`FixedReach`] knows of one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Known {
    /// The check from this device is fixed.
    Fixed,
    /// It is not: fixed on another device, or on none.
    NotFixed,
    /// Not asked yet: work it out, then keep it (`keep_fixed`, `keep_never`).
    Unknown,
}

impl FixedReach {
    /// Not asked yet.
    const UNKNOWN: usize = usize::MAX;
    /// Never fixed, whatever the device.
    const NEVER: usize = usize::MAX - 1;

    /// Nothing known yet.
    pub(crate) fn new() -> Self {
        FixedReach(AtomicUsize::new(Self::UNKNOWN))
    }

    /// What is known of the check from device `ordinal`.
    #[inline]
    pub(crate) fn known(&self, ordinal: usize) -> Known {
        match self.0.load(Ordering::Relaxed) {
            known if known == ordinal => Known::Fixed,
            Self::UNKNOWN => Known::Unknown,
            _ => Known::NotFixed,
        }
    }

    /// Keeps that the check from device `ordinal` is fixed.
    pub(crate) fn keep_fixed(&self, ordinal: usize) {
        self.0.store(ordinal, Ordering::Relaxed);
    }

    /// Keeps that no device's check is ever fixed.
    pub(crate) fn keep_never(&self) {
        self.0.store(Self::NEVER, Ordering::Relaxed);
    }
}

impl Default for FixedReach {
    fn default() -> Self {
        Self::new()
    }
}
