//! Reach: memory is used only from a device that can reach it. Every safe method that queues
//! work on an allocation, every kernel launch and kernel node, and every graph launch checks
//! here first; a use of another device's pool memory notes its context in the pool, so that
//! revoking that device's access waits for the work (`MemoryPoolHandle::set_peer_access`).
//! Memory with host access passes its own gate here too, so that a host view waits for the
//! uses in flight and refuses new ones (`memory/host_view.rs`); plain device memory has no
//! gate and pays nothing.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::StreamHandle;
use crate::memory::device_ptr::{DevicePtrHandle, Release};
use crate::memory::fixed_reach::Known;
use crate::memory::host_access::UseIn;
use crate::memory::pool::{MemoryPoolHandle, PoolLocation};
use crate::memory::remote::{self, RemoteAccess};
use crate::order::markers::StreamKey;

/// A use of memory from another device's pool, from its reach check until its work is queued:
/// while it lives, a revocation of peer access to that pool waits (and a use that begins while
/// a revocation runs is refused). Hold it until the work that needs the access is queued, then
/// drop it. For memory with host access (managed, pinned, a host pool's) it likewise keeps a
/// host view from opening until the work is queued. For memory of the device's own pool it
/// holds nothing and costs nothing.
#[must_use = "the access is guaranteed only while the guard lives: queue the work first"]
pub struct AccessGuard {
    /// A use of another device's pool, or of a host pool (peer access granted per device).
    remote: Option<Arc<RemoteAccess>>,
    /// A use of memory with host access: the allocation (through a view, its parent's gate),
    /// and for work queued on a real stream, the stream and its key on the queueing thread
    /// (the stream's marker is recorded after the work when the guard drops).
    host: Option<(DevicePtrHandle, Option<(StreamHandle, StreamKey)>)>,
}

impl std::fmt::Debug for AccessGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessGuard")
            .field("held", &self.is_held())
            .finish()
    }
}

impl AccessGuard {
    /// No use held: the guard of memory whose reach is fixed.
    const NONE: AccessGuard = AccessGuard {
        remote: None,
        host: None,
    };

    /// Whether the guard holds a use (memory of another device's pool, of a host pool, or with
    /// host access).
    pub fn is_held(&self) -> bool {
        self.remote.is_some() || self.host.is_some()
    }
}

impl Drop for AccessGuard {
    // Inlined so that dropping a guard known to hold nothing (memory of fixed reach) costs
    // nothing on a launch's path.
    #[inline]
    fn drop(&mut self) {
        // The host gate first: its marker is recorded while the remote use still holds the
        // access the work needs.
        if let Some((memory, queued)) = self.host.take()
            && let Some(host) = memory.host_access()
        {
            host.leave(queued.as_ref().map(|(stream, key)| (stream, *key)));
        }
        if let Some(remote) = self.remote.take() {
            remote.end();
        }
    }
}

impl DevicePtrHandle {
    /// [`Self::check_accessible_from`] the device of `stream`'s work, for work about to be
    /// queued on `stream`. Memory of another device's pool also notes the stream, so that a
    /// later revocation of that device's access waits for the work, and the returned guard
    /// keeps a revocation from landing between this check and the queueing. A library that
    /// queues its own device code on the memory calls this first, with the stream it queues
    /// on, and drops the guard after queueing.
    #[inline]
    pub fn check_accessible_on(&self, stream: &StreamHandle) -> Result<AccessGuard> {
        let held = self.held_reach_on(stream, stream.device_ordinal()?)?;
        Ok(held.unwrap_or(AccessGuard::NONE))
    }

    /// [`Self::check_accessible_on`] where the device of `stream`'s work, `ordinal`, is known,
    /// with the guard only if it holds a use (a launch keeps a list of those).
    #[inline]
    pub(crate) fn held_reach_on(
        &self,
        stream: &StreamHandle,
        ordinal: usize,
    ) -> Result<Option<AccessGuard>> {
        if self.reach_is_fixed(ordinal) {
            return Ok(None);
        }
        let guard = self.reach(ordinal, UseIn::Stream(stream), |remote| {
            remote.note_stream(stream)
        })?;
        Ok(guard.is_held().then_some(guard))
    }

    /// [`Self::check_accessible_on`] for work that runs in `context`, on device `ordinal`,
    /// whatever stream queues it (a graph's nodes run in the graph's context).
    pub(crate) fn check_accessible_in(
        &self,
        context: &ContextHandle,
        ordinal: usize,
    ) -> Result<AccessGuard> {
        self.reach(ordinal, UseIn::Context(context), |remote| {
            remote.note_context(context)
        })
    }

    /// The one reach rule: begin a remote use (refused during a revocation), begin a use of
    /// memory with host access (refused while a host view is open) — both for host-pool
    /// memory, which is remote to every device and has views — then check, and note the
    /// remote use. An error drops the guard built so far, which ends what it began.
    #[inline]
    fn reach(
        &self,
        ordinal: usize,
        at: UseIn<'_>,
        note: impl FnOnce(&RemoteAccess) -> Result<()>,
    ) -> Result<AccessGuard> {
        if self.reach_is_fixed(ordinal) {
            return Ok(AccessGuard::NONE);
        }
        let mut guard = AccessGuard::NONE;
        if let Some(pool) = self.remote_pool(ordinal) {
            let remote = remote::of(pool.as_cu());
            remote.begin()?;
            guard.remote = Some(remote);
        }
        if let Some(host) = self.host_access() {
            // Work on a real stream is covered by the stream's marker, recorded when the guard
            // drops (no context switch there: a drop cannot report a failed restore); a
            // default-stream token's notes its context instead. Inside a capture's closure the
            // work becomes a graph node, not work on the stream: its context is noted, as
            // every launch of the graph notes its own.
            let in_closure = || {
                crate::driver::capture::foreign_capture_possible()
                    && crate::driver::capture::in_capture_closure()
            };
            let queued = match at {
                UseIn::Stream(stream) if !stream.is_default_token() && !in_closure() => {
                    Some((stream.clone(), StreamKey::of(stream)?))
                }
                _ => None,
            };
            host.enter(at, queued.as_ref().map(|(_, key)| *key))?;
            guard.host = Some((self.clone(), queued));
        }
        self.check_accessible_from(ordinal)?;
        if let Some(remote) = &guard.remote {
            note(remote)?;
        }
        Ok(guard)
    }

    /// Whether a reach check from device `ordinal` can only ever pass with no guard held:
    /// memory allocated here synchronously or from a pool (or a view of such memory), which no
    /// host view gates, no remote pool's grant reaches (its pool, if any, is located on
    /// `ordinal` itself) and which `ordinal` reaches now. All of that is fixed for the
    /// allocation's life: the answer is kept in the record (`fixed_reach.rs`), every check
    /// starts here, and an executable graph's launch plan leaves such buffers out of the
    /// checks made at every launch.
    #[inline]
    pub(crate) fn reach_is_fixed(&self, ordinal: usize) -> bool {
        match self.record().fixed_reach.known(ordinal) {
            Known::Fixed => true,
            Known::NotFixed => false,
            Known::Unknown => self.find_fixed_reach(ordinal),
        }
    }

    /// [`Self::reach_is_fixed`] worked out, and kept when it is true or true of no device.
    #[cold]
    fn find_fixed_reach(&self, ordinal: usize) -> bool {
        let release = &self.record().release;
        let kept = &self.record().fixed_reach;
        if let Release::View(parent) = release {
            // A view's checks are its parent's (reach, remote pool, host gate).
            let fixed = parent.reach_is_fixed(ordinal);
            if fixed {
                kept.keep_fixed(ordinal);
            }
            return fixed;
        }
        if !matches!(
            release,
            Release::Synchronous(_) | Release::StreamOrdered { host: None, .. }
        ) || self.host_access().is_some()
        {
            kept.keep_never();
            return false;
        }
        let fixed =
            self.remote_pool(ordinal).is_none() && self.check_accessible_from(ordinal).is_ok();
        if fixed {
            kept.keep_fixed(ordinal);
        }
        fixed
    }

    /// The pool of this memory (through views) if it lives on another device than `ordinal`.
    fn remote_pool(&self, ordinal: usize) -> Option<&MemoryPoolHandle> {
        if let Release::View(parent) = &self.record().release {
            return parent.remote_pool(ordinal);
        }
        let pool = self.pool().as_ref()?;
        match pool.location() {
            Some(PoolLocation::Device(device)) if device != ordinal => Some(pool),
            // Pinned memory of a host pool is reachable from a device only once granted, like
            // another device's pool, and a revocation must wait for its uses the same way. So
            // is memory of a pool whose location is not known (an import whose device the
            // driver did not name): no device is known to reach it for good.
            Some(PoolLocation::Host | PoolLocation::HostNuma(_)) | None => Some(pool),
            Some(PoolLocation::Device(_)) => None,
        }
    }

    /// Refuses to let a kernel on device `ordinal` use this memory when it lives on another
    /// device that `ordinal` cannot access: a pool allocation needs the pool's peer access
    /// for `ordinal`, and a synchronous allocation is refused (its peer access is a context
    /// setting this crate does not track), and memory of a host pool, or of a pool whose
    /// location is not known (an import), needs the pool's access for `ordinal` too. Other
    /// pinned host memory passes. A kernel touching inaccessible memory faults and poisons its
    /// context.
    ///
    /// Every safe method of this crate that queues work on this memory checks it; a library
    /// that hands the raw pointer to its own device code (cuBLAS, NCCL) calls it first with
    /// the device that code runs on.
    pub fn check_accessible_from(&self, ordinal: usize) -> Result<()> {
        match &self.record().release {
            Release::View(parent) => return parent.check_accessible_from(ordinal),
            // Mapped only while a launch of its graph runs between its allocation and free
            // nodes: no work outside that graph may touch it.
            Release::GraphOwned { .. } => {
                return Err(Error::GraphRule(crate::error::GraphRule::OutsideGraph));
            }
            Release::Mapped(mappings) => {
                return match mappings.iter().find(|m| !m.devices().contains(&ordinal)) {
                    Some(_) => Err(Error::Unreachable {
                        device: ordinal,
                        owner: None,
                        pool: false,
                    }),
                    None => Ok(()),
                };
            }
            _ => {}
        }
        if let Some(pool) = self.pool().as_ref() {
            return match pool.location() {
                Some(PoolLocation::Device(device)) if device != ordinal => {
                    granted_by_pool(pool.peer_access(ordinal)?, ordinal, Some(device))
                }
                // The driver makes a host pool's memory accessible from the host only:
                // each device needs `cuMemPoolSetAccess` (measured on the H200: a kernel on
                // it faulted with CUDA_ERROR_ILLEGAL_ADDRESS).
                Some(PoolLocation::Host | PoolLocation::HostNuma(_)) => {
                    granted_by_pool(pool.peer_access(ordinal)?, ordinal, None)
                }
                // Memory of a pool of unknown location: reached only where the driver says so.
                None => granted_by_pool(pool.peer_access(ordinal)?, ordinal, None),
                Some(PoolLocation::Device(_)) => Ok(()),
            };
        }
        match (
            &self.record().release,
            self.context().as_ref().and_then(|c| c.device()),
        ) {
            (Release::Synchronous(_), Some(device)) if device != ordinal => {
                Err(Error::Unreachable {
                    device: ordinal,
                    owner: Some(device),
                    pool: false,
                })
            }
            // Another library's stream-ordered memory (a cudarc slice): on another device than
            // its home stream's, the pool that served it (as the driver reports it) must grant
            // `ordinal` access (found by the safe-API fuzzer, open finding N6: it passed
            // unchecked).
            (Release::Foreign(foreign), _) => {
                let home = foreign.home();
                let device = home.device_ordinal()?;
                if device == ordinal {
                    return Ok(());
                }
                let context = home.owning_context()?;
                let granted = crate::driver::current::in_context(context.as_cu(), || {
                    crate::memory::pool::pointer_pool_grants(self.as_cu(), ordinal)
                })?;
                granted_by_pool(granted, ordinal, Some(device))
            }
            _ => Ok(()),
        }
    }
}

/// `Ok` if the pool holding the memory `granted` device `ordinal` access, else
/// `Error::Unreachable` naming the memory's device (`owner`, none for a host pool).
fn granted_by_pool(granted: bool, ordinal: usize, owner: Option<usize>) -> Result<()> {
    if granted {
        return Ok(());
    }
    Err(Error::Unreachable {
        device: ordinal,
        owner,
        pool: true,
    })
}
