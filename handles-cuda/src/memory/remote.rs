//! Uses of a pool's memory from other devices, per pool, kept by the pool's raw value: every
//! handle of one pool (owned, and each reference to it) sees the same uses, so a revocation of
//! peer access through any of them waits for work queued through any other.
//!
//! A use begins before its reach check and ends once its work is queued (`AccessGuard`); it
//! notes the context its work runs in. A revocation waits for the uses in flight (refusing new
//! ones meanwhile, `order/access_gate.rs`), then for the noted contexts. The entry of an owned
//! pool goes with its deleter; that of a pool this program does not destroy (a device's default
//! pool) lives as long as the process, and a stale entry of a pool destroyed elsewhere can only
//! make a later revocation wait for more than it needs.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUmemoryPool;

use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::StreamHandle;
use crate::order::access_gate::AccessGate;
use crate::order::contexts_used::ContextsUsed;
use crate::sync::lock;

/// One pool's uses from other devices.
pub(crate) struct RemoteAccess {
    uses: ContextsUsed,
    gate: AccessGate,
    /// The devices (bit `ordinal`, for ordinals below 64) this process granted access to the
    /// pool through this crate and has not revoked since.
    granted: Mutex<u64>,
}

/// Per pool with remote uses or a revocation, by raw value (few: a linear scan).
static TABLE: Mutex<Vec<(usize, Arc<RemoteAccess>)>> = Mutex::new(Vec::new());

/// The entry of `pool`, made on first use.
pub(crate) fn of(pool: CUmemoryPool) -> Arc<RemoteAccess> {
    let mut table = lock(&TABLE);
    if let Some((_, entry)) = table.iter().find(|(raw, _)| *raw == pool as usize) {
        return entry.clone();
    }
    let entry = Arc::new(RemoteAccess {
        uses: ContextsUsed::new(),
        gate: AccessGate::new(),
        granted: Mutex::new(0),
    });
    table.push((pool as usize, entry.clone()));
    entry
}

/// Removes the entry of `pool` (destroyed now), returning it to be waited for.
pub(crate) fn forget(pool: CUmemoryPool) -> Option<Arc<RemoteAccess>> {
    let mut table = lock(&TABLE);
    let at = table.iter().position(|(raw, _)| *raw == pool as usize)?;
    Some(table.swap_remove(at).1)
}

impl RemoteAccess {
    /// Notes that device `ordinal`'s access was granted (`true`) or revoked (`false`).
    pub(crate) fn note_access(&self, ordinal: usize, enabled: bool) {
        let Some(bit) = 1u64.checked_shl(ordinal as u32) else {
            return;
        };
        let mut granted = lock(&self.granted);
        if enabled {
            *granted |= bit;
        } else {
            *granted &= !bit;
        }
    }

    /// The devices granted access through this crate, as ordinals.
    pub(crate) fn granted(&self) -> Vec<usize> {
        let bits = *lock(&self.granted);
        (0..64)
            .filter(|ordinal| bits & (1 << ordinal) != 0)
            .collect()
    }

    /// Begins a use, to be ended by [`Self::end`] once its work is queued; refused while a
    /// revocation runs.
    pub(crate) fn begin(&self) -> Result<()> {
        if self.gate.enter() {
            return Ok(());
        }
        Err(Error::Revoking)
    }

    /// Ends a use begun by [`Self::begin`].
    pub(crate) fn end(&self) {
        self.gate.leave();
    }

    /// Notes that the use's work is queued on `stream`.
    pub(crate) fn note_stream(&self, stream: &StreamHandle) -> Result<()> {
        self.uses.note_stream(stream)
    }

    /// Notes that the use's work runs in `context`.
    pub(crate) fn note_context(&self, context: &ContextHandle) -> Result<()> {
        self.uses.note(context.as_cu(), || Ok(context.clone()))
    }

    /// Runs `revoke` once every use that passed its check has been queued and every noted
    /// context's work has completed; uses that try to begin meanwhile are refused.
    pub(crate) fn revoking<T>(&self, revoke: impl FnOnce() -> Result<T>) -> Result<T> {
        self.gate.exclusive(|| {
            self.uses.wait_for_all()?;
            revoke()
        })
    }
}
