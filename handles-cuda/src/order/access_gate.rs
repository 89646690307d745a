//! Uses in flight against an exclusive change: the protocol that orders a revocation of peer
//! access after every use of a pool's memory whose check has passed. A use *enters* before its
//! check and *leaves* once its work is queued; entering never blocks, and is refused while a
//! change runs. A change waits for the changes before it, then until no use is in flight, and
//! runs with new uses refused. So no use can pass its check before a revocation and be queued
//! after it. On its own so that `tests/loom_access_gate.rs` can model-check it with loom.

#[cfg(handles_cuda_loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(handles_cuda_loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

/// The gate: how many uses are in flight, and whether a change runs.
pub(crate) struct AccessGate {
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    in_flight: usize,
    changing: bool,
}

impl AccessGate {
    pub(crate) fn new() -> Self {
        AccessGate {
            state: Mutex::new(State {
                in_flight: 0,
                changing: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// Poisoning is ignored: every critical section below only updates two plain fields.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Enters a use; `false` (and nothing entered) while a change runs. Never blocks.
    pub(crate) fn enter(&self) -> bool {
        let mut state = self.state();
        if state.changing {
            return false;
        }
        state.in_flight += 1;
        true
    }

    /// Leaves a use that [`Self::enter`] entered.
    pub(crate) fn leave(&self) {
        let mut state = self.state();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            self.changed.notify_all();
        }
    }

    /// Runs `change` once no use is in flight, with new uses refused while it runs (also if
    /// it panics: the gate opens again as it unwinds).
    pub(crate) fn exclusive<T>(&self, change: impl FnOnce() -> T) -> T {
        let mut state = self.state();
        while state.changing {
            state = self.wait(state);
        }
        state.changing = true;
        while state.in_flight != 0 {
            state = self.wait(state);
        }
        drop(state);
        let _open = Open(self);
        change()
    }
}

/// Ends a change when dropped.
struct Open<'a>(&'a AccessGate);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.state().changing = false;
        self.0.changed.notify_all();
    }
}
