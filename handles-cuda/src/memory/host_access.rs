//! The host-access state of one allocation of managed or pinned memory: the gate its uses
//! enter and its host views open (`order/access_gate.rs`), and the contexts its uses ran in.
//! Kept apart from the views (`host_view.rs`, where the soundness argument is) so that the
//! allocation record can hold it without importing them.

use cudarc::driver::sys;

use crate::driver::call::{driver, out};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::StreamHandle;
use crate::order::access_gate::AccessGate;
use crate::order::contexts_used::ContextsUsed;

/// The host-access state of one allocation: its gate and the contexts its work ran in.
pub(crate) struct HostAccess {
    gate: AccessGate,
    pub(crate) uses: ContextsUsed,
    /// For managed memory, the device it was allocated on (whose concurrent managed access
    /// decides whether views are allowed); `None` for pinned host memory.
    managed_on: Option<usize>,
    /// Whether another process can map and write the memory (an IPC-capable pool's): the
    /// gate orders only this process's uses, so such memory lends no host view.
    shared_with_processes: bool,
}

impl HostAccess {
    pub(crate) fn pinned() -> Self {
        HostAccess {
            gate: AccessGate::new(),
            uses: ContextsUsed::new(),
            managed_on: None,
            shared_with_processes: false,
        }
    }

    /// Pinned memory of a pool that exports it: its uses here are gated and noted as any
    /// pinned memory's, but it has no host views.
    pub(crate) fn pinned_exportable() -> Self {
        HostAccess {
            shared_with_processes: true,
            ..HostAccess::pinned()
        }
    }

    /// `Err(NotHostAccessible)` if another process can write the memory: a host view would be
    /// a slice that changes under its borrow (a shared mapping written elsewhere), which safe
    /// code must not lend.
    pub(crate) fn refuse_if_shared_with_processes(&self) -> Result<()> {
        if self.shared_with_processes {
            return Err(Error::NotHostAccessible {
                what: "memory of an IPC-capable pool can be written by another process at any \
                       time, so it has no host view; copy it to host memory instead",
            });
        }
        Ok(())
    }

    pub(crate) fn managed(device: usize) -> Self {
        HostAccess {
            managed_on: Some(device),
            ..HostAccess::pinned()
        }
    }

    /// Enters a use of the memory and notes the context its work runs in (`at`); the caller
    /// leaves with [`Self::leave`] once the work is queued.
    pub(crate) fn enter(&self, at: UseIn<'_>) -> Result<()> {
        if !self.gate.enter() {
            return Err(Error::HostAccessActive {
                mutable: self.gate.has_writer(),
            });
        }
        let noted = match at {
            UseIn::Stream(stream) => stream
                .owning_context()
                .and_then(|context| self.uses.note(context.as_cu(), || Ok(context.clone()))),
            UseIn::Context(context) => self.uses.note(context.as_cu(), || Ok(context.clone())),
        };
        if noted.is_err() {
            self.gate.leave();
        }
        noted
    }

    /// Leaves a use entered by [`Self::enter`].
    pub(crate) fn leave(&self) {
        self.gate.leave();
    }

    /// Opens a view: refuses a conflicting one, waits for uses in flight, then for every noted
    /// context (see the module docs).
    pub(crate) fn open(&self, mutable: bool) -> Result<Open<'_>> {
        if let Some(device) = self.managed_on {
            refuse_without_concurrent_access(device)?;
        }
        self.gate
            .open_view(mutable)
            .map_err(|mutable| Error::HostAccessActive { mutable })?;
        let open = Open {
            gate: &self.gate,
            mutable,
        };
        self.uses.wait_for_all()?;
        Ok(open)
    }
}

/// Where a use's work runs, to be noted: queued on a stream, or in a context (a graph's).
pub(crate) enum UseIn<'a> {
    Stream(&'a StreamHandle),
    Context(&'a ContextHandle),
}

fn refuse_without_concurrent_access(device: usize) -> Result<()> {
    let raw = crate::driver::load::device(device)?;
    let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS;
    // SAFETY: the driver is loaded and `raw` is a valid device; `value` is a valid out-pointer.
    let value = out(|value| unsafe { driver!(cuDeviceGetAttribute(value, attribute, raw)) })?;
    if value == 0 {
        return Err(Error::NotHostAccessible {
            what: "managed memory on a device without concurrent managed access has no host \
                   view: the host may not touch it while any kernel of the device runs",
        });
    }
    Ok(())
}

/// An open view of the gate, closed when dropped.
pub(crate) struct Open<'a> {
    gate: &'a AccessGate,
    mutable: bool,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.gate.close_view(self.mutable);
    }
}
