//! Whether a completion's first poll spins before it parks its task: the credit that recent
//! completions earned (see `completion.rs`). A poll that saw its completion resolve while it
//! spun, or a watch the waiter thread resolved within the spin's span, earns one; a spin that
//! ended with nothing resolved spends one. With no credit left no poll spins, so a program
//! whose completions all take long burns at most [`FULL`] spins before it stops spinning, and
//! starts again once completions resolve within the span. Only a heuristic: every order of
//! these updates is correct, which is why they are relaxed. On its own so that
//! `tests/loom_spin_credit.rs` can model-check that the credit stays within `0..=FULL`.

#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicU32, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicU32, Ordering};

/// The most credit there is, and where it starts.
pub(crate) const FULL: u32 = 8;

/// The credit of spinning polls.
#[derive(Debug)]
pub(crate) struct SpinCredit(AtomicU32);

impl SpinCredit {
    /// Full credit.
    #[cfg(not(handles_cuda_loom))]
    pub(crate) const fn new() -> Self {
        SpinCredit(AtomicU32::new(FULL))
    }

    /// Full credit (loom's atomics have no `const` constructor).
    #[cfg(handles_cuda_loom)]
    pub(crate) fn new() -> Self {
        SpinCredit(AtomicU32::new(FULL))
    }

    /// Whether a poll spins now.
    pub(crate) fn spins(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }

    /// A completion resolved within the spin's span: one more, up to [`FULL`].
    pub(crate) fn earn(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |credit| {
                (credit < FULL).then_some(credit + 1)
            });
    }

    /// A spin ended with nothing resolved: one less, down to 0.
    pub(crate) fn spend(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |credit| {
                credit.checked_sub(1)
            });
    }

    /// The credit now.
    #[cfg(any(test, handles_cuda_loom))]
    pub(crate) fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(handles_cuda_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_credit_stays_within_its_bounds_and_recovers() {
        let credit = SpinCredit::new();
        for _ in 0..3 {
            credit.earn();
        }
        assert_eq!(credit.get(), FULL);
        for _ in 0..FULL {
            assert!(credit.spins());
            credit.spend();
        }
        assert!(!credit.spins());
        credit.spend();
        assert_eq!(credit.get(), 0);
        credit.earn();
        assert!(credit.spins());
    }
}
