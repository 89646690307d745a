//! Uses in flight against an exclusive change: the protocol that orders a revocation of peer
//! access after every use of a pool's memory whose check has passed. A use *enters* before its
//! check and *leaves* once its work is queued; entering never blocks, and is refused while a
//! change runs. A change waits for the changes before it, then until no use is in flight, and
//! runs with new uses refused. So no use can pass its check before a revocation and be queued
//! after it. On its own so that `tests/loom_access_gate.rs` can model-check it with loom.
//!
//! The same gate lends host-accessible memory to the host (`memory/host_view.rs`): a *view* is
//! an exclusive side that lasts as long as the view, not a closure. Opening one never waits for
//! another view (a conflicting view is refused at once), marks the gate so that new uses are
//! refused, and then waits until no use is in flight. Shared views count as readers and may
//! coexist; a mutable view excludes every other view. A gate serves either revocations or
//! views, never both.

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
    /// Shared views open (or opening).
    readers: usize,
    /// A mutable view open (or opening).
    writer: bool,
}

impl AccessGate {
    pub(crate) fn new() -> Self {
        AccessGate {
            state: Mutex::new(State {
                in_flight: 0,
                changing: false,
                readers: 0,
                writer: false,
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

    /// Enters a use; `false` (and nothing entered) while a change runs or a view is open (or
    /// opening). Never blocks.
    pub(crate) fn enter(&self) -> bool {
        let mut state = self.state();
        if state.changing || state.readers != 0 || state.writer {
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

    /// Opens a view (`mutable` or shared): refused at once, with whether the view in the way is
    /// mutable, if a mutable view is open or a mutable one is asked for while any view is open.
    /// Otherwise new uses are refused from now on, and this returns once no use is in flight.
    /// Every `Ok` is closed by [`Self::close_view`] with the same `mutable`.
    pub(crate) fn open_view(&self, mutable: bool) -> Result<(), bool> {
        let mut state = self.state();
        if state.writer {
            return Err(true);
        }
        if mutable && state.readers != 0 {
            return Err(false);
        }
        if mutable {
            state.writer = true;
        } else {
            state.readers += 1;
        }
        while state.in_flight != 0 {
            state = self.wait(state);
        }
        Ok(())
    }

    /// Whether a mutable view is open (or opening), to say why a use was refused.
    pub(crate) fn has_writer(&self) -> bool {
        self.state().writer
    }

    /// Closes a view that [`Self::open_view`] opened; uses enter again once no view is open.
    pub(crate) fn close_view(&self, mutable: bool) {
        let mut state = self.state();
        if mutable {
            state.writer = false;
        } else {
            state.readers -= 1;
        }
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
