//! The state a completion future shares with the host function that ends it, and the protocol
//! that loses no wake-up: the host function sets `done` and then takes the waker; a poll stores
//! its waker and then checks `done` again. Whichever order the two run in, either the poll sees
//! `done` or the host function finds the waker. On its own so that
//! `tests/loom_completion.rs` can model-check it with loom.

use std::task::Waker;

#[cfg(handles_cuda_loom)]
use loom::sync::atomic::{AtomicBool, Ordering};
#[cfg(handles_cuda_loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(handles_cuda_loom))]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(not(handles_cuda_loom))]
use std::sync::{Mutex, MutexGuard};

/// Whether the awaited work is complete, and the waker of the task waiting for it.
pub(crate) struct Shared {
    done: AtomicBool,
    waker: Mutex<Option<Waker>>,
    /// Set by the notifier's host function when it runs (the notifier has passed its wait on
    /// the event): apart from `done`, which the waiter thread may set first.
    passed: AtomicBool,
}

impl Shared {
    pub(crate) fn new(done: bool) -> Self {
        Shared {
            done: AtomicBool::new(done),
            waker: Mutex::new(None),
            passed: AtomicBool::new(false),
        }
    }

    /// The notifier's host function has run.
    pub(crate) fn mark_passed(&self) {
        self.passed.store(true, Ordering::Release);
    }

    /// Whether the notifier's host function has run.
    pub(crate) fn passed(&self) -> bool {
        self.passed.load(Ordering::Acquire)
    }

    /// Poisoning is ignored: the critical sections only move a waker in or out.
    fn waker(&self) -> MutexGuard<'_, Option<Waker>> {
        self.waker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The work is complete: marks it, then returns the waiting task's waker, if there is one,
    /// for the caller to wake by reference and then drop where dropping is allowed (the last
    /// reference to an executor's task may own anything, CUDA handles included, and this runs
    /// in a host function).
    pub(crate) fn complete(&self) -> Option<Waker> {
        self.done.store(true, Ordering::Release);
        self.waker().take()
    }

    /// `true` if complete; otherwise stores `waker` to be woken by [`Self::complete`].
    pub(crate) fn ready_or_register(&self, waker: &Waker) -> bool {
        if self.is_done() {
            return true;
        }
        // The waker a previous poll stored is dropped after the lock is released: its drop is
        // the executor's code, and may do anything (release a handle that waits for a stream
        // whose host function needs this lock).
        let previous = {
            let mut stored = self.waker();
            match stored.as_ref() {
                Some(stored) if stored.will_wake(waker) => None,
                _ => stored.replace(waker.clone()),
            }
        };
        drop(previous);
        // `complete` may have run between the check and the store, and found no waker.
        if self.is_done() {
            let stored = self.waker().take();
            drop(stored);
            return true;
        }
        false
    }

    /// The task no longer waits: its waker is dropped here, on the task's thread, not later on
    /// the driver's.
    pub(crate) fn forget_waker(&self) {
        let stored = self.waker().take();
        drop(stored);
    }
}
