//! The host-access state of one allocation of managed or pinned memory: the gate its uses
//! enter and its host views open (`order/access_gate.rs`), a marker event on each stream its
//! uses were queued on (`order/markers.rs`), and the contexts of the uses no marker covers
//! (a graph's, or a use whose marker could not be recorded). A view, and the host free, wait
//! for the markers and those contexts: for the memory's own work, not for everything else
//! its contexts run.
//! Kept apart from the views (`host_view.rs`, where the soundness argument is) so that the
//! allocation record can hold it without importing them.

use std::sync::Mutex;

use cudarc::driver::sys;

use crate::driver::call::{driver, out};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::StreamHandle;
use crate::order::access_gate::AccessGate;
use crate::order::contexts_used::ContextsUsed;
use crate::order::markers::{Markers, StreamKey};
use crate::sync::lock;

/// The host-access state of one allocation: its gate, the markers of the streams its work was
/// queued on, and the contexts of the work no marker covers.
pub(crate) struct HostAccess {
    gate: AccessGate,
    markers: Mutex<Markers>,
    uses: ContextsUsed,
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
            markers: Mutex::new(Markers::default()),
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

    /// Enters a use of the memory: for work on a stream (`at`, with its key on this thread),
    /// makes the stream's marker if it has none (so that leaving only records it); for work
    /// in a context (a graph's), notes the context. The caller leaves with [`Self::leave`]
    /// once the work is queued, naming the stream it was queued on, whose marker then covers
    /// it.
    pub(crate) fn enter(&self, at: UseIn<'_>, key: Option<StreamKey>) -> Result<()> {
        if !self.gate.enter() {
            return Err(Error::HostAccessActive {
                mutable: self.gate.has_writer(),
            });
        }
        let noted = match (at, key) {
            (UseIn::Stream(stream), Some(key)) => lock(&self.markers).ensure(key, stream),
            // A default-stream token's work (or work inside a capture's closure): its context,
            // which must be one a handle can own, noted before the work is queued.
            (UseIn::Stream(stream), None) => stream
                .owning_context()
                .and_then(|context| self.uses.note(context.as_cu(), || Ok(context.clone()))),
            (UseIn::Context(context), _) => self.uses.note(context.as_cu(), || Ok(context.clone())),
        };
        if noted.is_err() {
            self.gate.leave();
        }
        noted
    }

    /// Leaves a use entered by [`Self::enter`]. `queued`: the real stream its work was queued
    /// on, with the work's [`StreamKey`], whose marker (made at `enter`) is recorded after it
    /// ([`Self::cover`]): a record only, with no context switch, as befits a drop (unless the
    /// marker was pruned meanwhile: see `Markers::ensure`).
    pub(crate) fn leave(&self, queued: Option<(&StreamHandle, StreamKey)>) {
        if let Some((stream, key)) = queued {
            // A failed record falls back to the stream's context (`cover`); a drop has no one
            // to return its error to.
            let _ = self.cover(stream, Ok(key));
        }
        self.gate.leave();
    }

    /// Reports work this thread queued on `stream` through the raw pointer (after queueing
    /// it): covered as a safe method's use is (a default-stream token's by its context).
    pub(crate) fn record_use(&self, stream: &StreamHandle) -> Result<()> {
        if stream.is_default_token() {
            return self.uses.note_stream(stream);
        }
        self.cover(stream, StreamKey::of(stream))
    }

    /// Work in `context` (a host pool's allocation, queued before any marker can exist):
    /// views and the free wait for the whole context.
    pub(crate) fn note_context(&self, context: &ContextHandle) -> Result<()> {
        self.uses.note(context.as_cu(), || Ok(context.clone()))
    }

    /// Covers work queued on the real stream `stream` (`key`): the stream's marker is
    /// recorded after it. If it cannot be, the stream's context is noted instead, so that
    /// views and the free wait for all of it (if even that fails, they are refused:
    /// `ContextsUsed`), and the marker's error is returned.
    fn cover(&self, stream: &StreamHandle, key: Result<StreamKey>) -> Result<()> {
        let marked = key.and_then(|key| lock(&self.markers).mark(key, stream));
        if let Err(error) = marked {
            // The work is queued: covered by its context instead, and the error reported.
            self.uses.note_stream(stream)?;
            return Err(error);
        }
        Ok(())
    }

    /// Blocks until every use's work has completed: each stream's marker, then each noted
    /// context. An error means some use could not be waited for (no view, no free).
    pub(crate) fn wait_for_uses(&self) -> Result<()> {
        lock(&self.markers).host_waits()?;
        self.uses.wait_for_all()
    }

    /// Calls `release` (the memory's free) with the outcome of the wait for every use's work:
    /// each stream's marker here, then each noted context as `ContextsUsed::release_after_all`
    /// does (on the disposal thread while a capture runs).
    pub(crate) fn release_after_uses(
        &self,
        what: &'static str,
        raw: isize,
        release: impl FnOnce(Result<()>) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        if let Err(error) = lock(&self.markers).host_waits() {
            return release(Err(error));
        }
        self.uses.release_after_all(what, raw, release)
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
        self.wait_for_uses()?;
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
