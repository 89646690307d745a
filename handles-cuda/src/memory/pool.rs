//! CUDA memory pools: created from properties (optionally IPC-capable), the device's pools,
//! references, and pools imported from another process.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::{self, CUdeviceptr, CUmemoryPool};
use handles_core::ResourceHandle;

use crate::driver::call::{deleter_status, driver, out};
use crate::driver::capture::{RelaxedCaptureMode, RelaxedWhenNeeded, in_relaxed_capture_mode};
use crate::driver::current::in_context;
use crate::driver::load::{self, ensure_loaded};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::disposal::{Deferred, defer, retry_refused_memory};
use crate::exec::event::EventHandle;
use crate::exec::stream::StreamHandle;
use crate::memory::remote;
use crate::order::contexts_used::ContextsUsed;
use crate::order::contexts_used_protocol::NotedSet;
use crate::order::stream_order::StreamOrder;
use crate::sync::lock;

/// A CUDA memory pool.
///
/// Ownership: [`MemoryPoolHandle::create`] and [`MemoryPoolHandle::import_posix_fd`] own the
/// pool; before destroying it, the deleter revokes peer access with one `cuMemPoolSetAccess`
/// call per non-owning device (a driver that recycles pool handles would otherwise hand the
/// access to the next pool). [`MemoryPoolHandle::device_current`],
/// [`MemoryPoolHandle::device_default`] and `from_raw_borrowed` are references. Keeps alive:
/// the context it was created through, and (an owned pool) the streams its memory's frees
/// were queued on (those this crate owns; once it keeps 16, 32, 64 …, a newly noted one first
/// lets go of those whose work all ran), and markers recorded after frees on other streams
/// (default-stream tokens, borrowed streams) as they were queued. Pointers allocated through
/// this crate keep their pool alive. An owned pool is destroyed by the crate's disposal thread
/// once every marker after its frees completed (driver 580 crashes when a pool is destroyed
/// with frees still queued); the dropping thread does not wait for them, and other devices'
/// uses, ordered before the frees, need no wait of their own before their access is revoked.
/// A kept stream being captured is marked once the capture ended. Limit: memory that other
/// code allocates from the pool while it is a device's current pool (cudarc's `alloc`, any
/// `cuMemAllocAsync`) neither keeps the pool nor is waited for.
#[derive(ResourceHandle)]
#[handle(raw = CUmemoryPool, accessor = as_cu, delete = destroy_pool, registry)]
pub struct MemoryPool {
    /// The primary context of the device the pool was created on.
    #[owner]
    pub context: Option<ContextHandle>,
    /// Where the pool's memory lives, when known.
    #[handle(copy)]
    pub location: Option<PoolLocation>,
    /// Whether the pool can export its memory to other processes (POSIX file descriptor).
    #[handle(copy)]
    pub ipc: bool,
    /// The streams its memory's frees were queued on (noted as each free is queued): an owned
    /// pool is destroyed only after the frees there ran (see `destroy_pool`).
    pub(crate) frees_on: FreeStreams,
}

/// The streams a pool's memory's frees were queued on. Streams this crate owns and nobody else
/// can capture are kept (a marker event is recorded on each when the pool goes). A free on any
/// other stream is marked at once, by the freeing thread on the same stream: another thread's
/// per-thread stream cannot be named later, a borrowed stream may be destroyed by its owner,
/// and a later record on a stream other code can capture (or on the legacy stream, which joins
/// a blocking stream's capture) could join a capture begun meanwhile. If no marker can be made
/// there, a token's context is noted and its legacy stream marked when the pool goes (legacy
/// work waits for the blocking streams' earlier work, the per-thread streams' included), and
/// another stream is kept.
pub(crate) struct FreeStreams {
    streams: NotedSet<StreamHandle>,
    /// Markers recorded right after frees on streams the pool does not keep.
    markers: Mutex<Vec<EventHandle>>,
    tokens: ContextsUsed,
    /// Set for a pool kept forever: later frees note nothing.
    forgotten: AtomicBool,
}

impl FreeStreams {
    fn new() -> Self {
        FreeStreams {
            streams: NotedSet::new(),
            markers: Mutex::new(Vec::new()),
            tokens: ContextsUsed::new(),
            forgotten: AtomicBool::new(false),
        }
    }

    /// Lets go of the noted streams, for a pool kept forever (some of its memory was never
    /// freed): it is never destroyed, so nothing needs to be waited for.
    pub(crate) fn forget(&self) {
        // Set before the drain, which takes the set's lock: a note that locks after it sees
        // the flag, and one that locked before it is drained.
        self.forgotten.store(true, Ordering::Relaxed);
        let streams = self.streams.drain();
        let markers = std::mem::take(&mut *lock(&self.markers));
        // Dropped in relaxed capture mode, as a free's note drops what it prunes.
        let relaxed = RelaxedCaptureMode::enter();
        drop((streams, markers));
        self.tokens.clear();
        drop(relaxed);
    }

    /// Notes that a free of the pool's memory was just queued on `order`'s home: one relaxed
    /// load when it is the stream of the last note. A stream this crate owns and nobody else
    /// can capture is kept, to be marked when the pool goes; a new one first lets go of the
    /// kept streams whose work all ran, once in a while (so a long-lived pool does not keep
    /// every stream it was freed on). Any other stream (a token, a borrowed stream, one that
    /// may be captured elsewhere) is marked now, after the free, by the thread that queued it:
    /// later, its owner could have destroyed it, or begun a capture the marker would join.
    /// An error means the free could not be waited for: the pool must then never be destroyed.
    ///
    /// The driver calls this makes (streams asked and let go of, markers recorded) run in
    /// relaxed capture mode: the freeing thread may be inside a capture's closure, and an H100
    /// (driver 580) saw a global-mode capture invalidated when a note pruned there
    /// (`review_pool_markers.rs::pruning_inside_a_capture_closure_breaks_nothing`).
    #[inline(always)]
    pub(crate) fn note_free(&self, order: &StreamOrder) -> Result<()> {
        let raw = order.home_raw();
        // The stream noted last (a pool used from one stream): nothing to note or prune.
        if raw != 0 && self.streams.is_last(raw) {
            return Ok(());
        }
        self.note_free_new(order, raw)
    }

    /// [`Self::note_free`] of a stream other than the one noted last.
    #[inline(never)]
    fn note_free_new(&self, order: &StreamOrder, raw: usize) -> Result<()> {
        if raw == 0 {
            return self.mark_now(order.home());
        }
        let mut relaxed = RelaxedWhenNeeded::default();
        let noted = self.streams.note_pruning(
            raw,
            // Made under the set's lock, only for a stream not noted yet.
            || {
                if self.forgotten.load(Ordering::Relaxed) {
                    return Err(None);
                }
                let home = order.home();
                match home.is_owning() && !home.may_be_captured_elsewhere() {
                    true => Ok(home),
                    false => Err(Some(home)),
                }
            },
            PRUNE_FROM,
            // A stream is let go of only if the mode could be relaxed to ask it.
            |stream| relaxed.relax() && ran_everything(stream),
        );
        match noted {
            // Dropped while the mode is still relaxed (`relaxed` goes after).
            Ok(pruned) => drop(pruned),
            Err(Some(home)) => return self.mark_now(home),
            Err(None) => {}
        }
        Ok(())
    }

    /// A free just queued on `home`, a stream the pool does not keep: a marker recorded after
    /// it, kept with the others (those already completed are let go of once the pool keeps
    /// 16, 32, 64 … of them). Without one, a token's context is noted, and its legacy stream
    /// marked when the pool goes; a stream this crate owns is kept; on a borrowed stream,
    /// which its owner may destroy, the host waits for the free now, unless the record was
    /// refused because its owner began capturing it (a wait would invalidate that capture):
    /// then the error keeps the pool forever.
    #[cold]
    fn mark_now(&self, home: StreamHandle) -> Result<()> {
        // Left at the end, after the pruned markers' drops.
        let _relaxed = RelaxedCaptureMode::enter();
        let marker = match EventHandle::marker_on(&home) {
            Ok(marker) => marker,
            Err(_) if self.forgotten.load(Ordering::Relaxed) => return Ok(()),
            Err(_) if home.is_default_token() => return self.tokens.note_stream(&home),
            Err(_) if home.is_owning() => {
                let raw = home.as_cu() as usize;
                let Ok(()) = self
                    .streams
                    .note(raw, || Ok::<_, std::convert::Infallible>(home));
                return Ok(());
            }
            Err(error) if error.is_capture_refusal() => return Err(error),
            Err(_) => return home.synchronize(),
        };
        let pruned = {
            let mut markers = lock(&self.markers);
            // Read under the lock that `forget` takes after setting it.
            if self.forgotten.load(Ordering::Relaxed) {
                return Ok(());
            }
            let len = markers.len() + 1;
            let mut pruned = Vec::new();
            if len >= PRUNE_FROM && len.is_power_of_two() {
                let (running, ran) = std::mem::take(&mut *markers)
                    .into_iter()
                    .partition(|marker: &EventHandle| !matches!(marker.query(), Ok(true)));
                *markers = running;
                pruned = ran;
            }
            markers.push(marker);
            pruned
        };
        // Dropped after the lock.
        drop(pruned);
        Ok(())
    }
}

/// The number of noted streams (or token markers) from which a new one first lets go of those
/// whose work ran.
const PRUNE_FROM: usize = 16;

/// Whether every piece of work queued on `stream` so far has run. A stream being captured is
/// not asked (`cuStreamQuery` would invalidate the capture) and counts as busy, as does one
/// the driver cannot answer for.
fn ran_everything(stream: &StreamHandle) -> bool {
    matches!(stream.is_capturing(), Ok(false)) && matches!(stream.query(), Ok(true))
}

impl MemoryPool {
    /// The record of a pool this program does not own (for `MemoryPoolHandle::from_raw_borrowed`):
    /// where its memory lives, if known, and whether it is IPC-capable.
    pub fn reference(location: Option<PoolLocation>, ipc: bool) -> MemoryPool {
        MemoryPool {
            context: None,
            location,
            ipc,
            frees_on: FreeStreams::new(),
        }
    }

    /// A record for a pool kept alive by `context`.
    pub(crate) fn owned(context: ContextHandle, location: Option<PoolLocation>, ipc: bool) -> Self {
        MemoryPool {
            context: Some(context),
            ..MemoryPool::reference(location, ipc)
        }
    }
}
// SAFETY: the CUDA driver API lets memory pools be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for MemoryPool {}

/// Where a pool's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolLocation {
    /// Device memory of the device with this ordinal.
    Device(usize),
    /// Pinned host memory. An IPC-capable host pool is placed on the host NUMA node nearest
    /// to device 0, because the driver accepts exportable host pools only on a NUMA node.
    Host,
    /// Pinned host memory on this host NUMA node.
    HostNuma(i32),
}

/// Properties for [`MemoryPoolHandle::create`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolProps {
    /// Where the memory lives.
    pub location: PoolLocation,
    /// Make the pool exportable through a POSIX file descriptor.
    pub ipc: bool,
    /// The pool's maximum size in bytes; 0 lets the driver choose.
    pub max_size: usize,
    /// For host pools: the device whose primary context creates the pool (and is kept alive
    /// by it), and whose NUMA node an IPC host pool uses. Device pools use their own device.
    pub device: usize,
}

impl PoolProps {
    /// Device memory of `ordinal`, not exportable.
    pub fn device(ordinal: usize) -> Self {
        PoolProps {
            location: PoolLocation::Device(ordinal),
            ipc: false,
            max_size: 0,
            device: ordinal,
        }
    }
}

pub(crate) fn raw_location(location: PoolLocation) -> sys::CUmemLocation {
    match location {
        PoolLocation::Device(ordinal) => sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        },
        PoolLocation::Host => sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
        PoolLocation::HostNuma(node) => sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA,
            id: node,
        },
    }
}

/// The host NUMA node nearest to device `ordinal` (0 when the driver does not say).
fn host_numa_node(ordinal: usize) -> Result<i32> {
    let device = load::device(ordinal)?;
    let numa_id = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID;
    // SAFETY: the driver is loaded and `device` is valid; `node` is a valid out-pointer.
    let node = out(|node| unsafe { driver!(cuDeviceGetAttribute(node, numa_id, device)) })?;
    Ok(node.max(0))
}

fn access_of(pool: CUmemoryPool, device: usize) -> Result<sys::CUmemAccess_flags> {
    let mut location = raw_location(PoolLocation::Device(device));
    let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
    // SAFETY: the pool is alive; both pointers are valid for the call.
    unsafe { driver!(cuMemPoolGetAccess(&mut flags, pool, &mut location)) }?;
    Ok(flags)
}

/// The device whose memory an imported pool holds, as this process sees it: the one device
/// the driver reports read-write access from, before this process granted any. `None` when
/// that is not exactly one device (a host pool's memory, which no device reaches until this
/// process grants it) or when asking failed: a pool of unknown location is then treated as
/// another device's by every device, whose uses each ask the driver (`memory/reach.rs`).
pub(crate) fn resident_device(pool: CUmemoryPool) -> Option<PoolLocation> {
    let count = load::device_count().ok()?;
    let mut resident = None;
    for device in 0..count {
        if access_of(pool, device).ok()?
            == sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            && resident.replace(device).is_some()
        {
            return None;
        }
    }
    resident.map(PoolLocation::Device)
}

/// Whether the pool that served the stream-ordered memory at `address` grants device
/// `ordinal` read-write access (`CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE`, then
/// `cuMemPoolGetAccess`). Memory that no pool served (the driver reports none) is not granted.
pub(crate) fn pointer_pool_grants(address: CUdeviceptr, ordinal: usize) -> Result<bool> {
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer of the attribute's type (a pool handle); the
    // address is of live memory (the caller's handle keeps it).
    unsafe {
        driver!(cuPointerGetAttribute(
            (&raw mut pool).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            address
        ))
    }?;
    if pool.is_null() {
        return Ok(false);
    }
    Ok(access_of(pool, ordinal)? == sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
}

/// Revokes every peer device's access, one `cuMemPoolSetAccess` per device: the driver rejects
/// a list that includes the owning device, so one call for all devices changes nothing. A pool
/// whose location is unknown here (an import: the exporter's device owns it) is asked only
/// about the devices this process granted (`granted`), so that the owner, whose revocation the
/// driver refuses, is never named: no failing call, which compute-sanitizer would report.
fn revoke_peer_access(
    pool: CUmemoryPool,
    location: Option<PoolLocation>,
    granted: Vec<usize>,
) -> Result<usize> {
    let owner = owning_device(&location);
    let devices = match location {
        Some(_) => (0..load::device_count()?).collect(),
        None => granted,
    };
    let mut revoked = 0;
    let mut first_error = None;
    for device in devices {
        if Some(device) == owner {
            continue;
        }
        match access_of(pool, device) {
            Ok(sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE) => continue,
            Ok(_) => {}
            Err(error) => {
                first_error.get_or_insert(error);
                continue;
            }
        }
        let desc = sys::CUmemAccessDesc {
            location: raw_location(PoolLocation::Device(device)),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE,
        };
        // SAFETY: the pool is alive; `desc` is one valid descriptor.
        match unsafe { driver!(cuMemPoolSetAccess(pool, &desc, 1)) } {
            Ok(()) => revoked += 1,
            // An import's owner granted through this crate too: the driver rejects revoking
            // the owner, which is the one device that must keep access.
            Err(error)
                if owner.is_none()
                    && error.code() == Some(sys::CUresult::CUDA_ERROR_INVALID_DEVICE) => {}
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    first_error.map_or(Ok(revoked), Err)
}

/// The device whose memory the pool holds, which keeps its access.
fn owning_device(location: &Option<PoolLocation>) -> Option<usize> {
    match location {
        Some(PoolLocation::Device(ordinal)) => Some(*ordinal),
        _ => None,
    }
}

fn destroy_pool(raw: CUmemoryPool, pool: &MemoryPool) -> Result<()> {
    // Every pointer is gone and its free queued. Other devices' work on the memory needs no
    // wait of its own: every use is ordered before its memory's free (`record_use`), and the
    // access goes only once the frees ran. No use is in flight: each holds a pointer.
    let granted = remote::forget(raw).map_or_else(Vec::new, |remote| remote.granted());
    // The frees may not have run yet. Driver 580 crashes (a divide error or a segmentation
    // fault inside libcuda) or hangs when a pool is destroyed with frees of its memory still
    // queued while other threads create, use and destroy pools; destroyed after its frees ran,
    // it never did (an H100, driver 580.159.04: `cuda-sim/probes/pool_destroy_pending.py`),
    // and the driver stops counting a free's bytes as used when it is queued, not when it
    // runs, so it cannot tell. So the disposal thread destroys the pool once a marker recorded
    // after the frees on each of their streams completed: the dropping thread never waits,
    // and nothing but those streams' work is waited for.
    let mut unmarked = pool.frees_on.streams.drain();
    for context in pool.frees_on.tokens.take()? {
        unmarked.push(StreamHandle::legacy_in(&context)?);
    }
    defer(Box::new(PendingDestroy {
        raw: SendPool(raw),
        location: pool.location,
        granted,
        context: pool.context.clone(),
        unmarked,
        markers: std::mem::take(&mut *lock(&pool.frees_on.markers)),
    }));
    Ok(())
}

/// A pool handle that may cross threads (the driver lets pools be used from any thread).
struct SendPool(CUmemoryPool);
// SAFETY: a `CUmemoryPool` is an opaque driver handle usable from any thread.
unsafe impl Send for SendPool {}

/// An owned pool whose handle is gone, destroyed on the disposal thread once its memory's
/// queued frees ran.
struct PendingDestroy {
    raw: SendPool,
    location: Option<PoolLocation>,
    /// The devices this process granted access (an import's revocation asks only these).
    granted: Vec<usize>,
    /// Keeps the pool's context alive until the pool is destroyed.
    context: Option<ContextHandle>,
    /// Streams with frees queued and no marker yet, a token's context (whose free could not be
    /// marked at once) as its legacy stream; one being captured is marked once its capture
    /// ended (the frees were queued before it began: a free is never queued on a captured
    /// stream), and so is one whose record a capture refused.
    unmarked: Vec<StreamHandle>,
    /// Markers recorded after the frees.
    markers: Vec<EventHandle>,
}

impl PendingDestroy {
    /// One try: marks what can be marked, and destroys the pool if every marker completed.
    /// `Ok(false)` while frees may still be queued; an error leaks the pool.
    fn step(&mut self) -> Result<bool> {
        let mut i = 0;
        while i < self.unmarked.len() {
            let stream = &self.unmarked[i];
            // Asked first: a record on the legacy stream would invalidate the capture.
            let marked = match stream.is_capturing() {
                Ok(true) => Err(Error::Capturing),
                Ok(false) => EventHandle::marker_on(stream),
                Err(error) => Err(error),
            };
            match marked {
                Ok(marker) => self.markers.push(marker),
                // Tried again later: a capture other code began after the question refused
                // the record (the legacy stream's fallback). A stream this crate owns is
                // captured only through its lending functions, whose callers must not begin
                // one while the pool's destruction may record on it.
                Err(error) if error.is_capture_refusal() => {
                    i += 1;
                    continue;
                }
                // No marker: the host waits for the stream instead.
                Err(_) => stream.synchronize()?,
            }
            self.unmarked.swap_remove(i);
        }
        if !self.unmarked.is_empty() {
            return Ok(false);
        }
        for marker in &self.markers {
            if !marker.query()? {
                return Ok(false);
            }
        }
        self.markers.clear();
        match self.context.clone() {
            Some(context) => in_context(context.as_cu(), || self.destroy()),
            None => self.destroy(),
        }?;
        Ok(true)
    }

    /// Revokes peer access and destroys the pool; called once.
    fn destroy(&mut self) -> Result<()> {
        let granted = std::mem::take(&mut self.granted);
        let revoked =
            deleter_status(revoke_peer_access(self.raw.0, self.location, granted).map(drop));
        // SAFETY: the handle owned `raw` and is gone; every pointer allocated through this
        // crate kept the pool alive, so none is left, and every free of its memory ran (`step`);
        // memory other code allocated from it the driver keeps until freed (a destroyed pool's
        // resources go when its last allocation does); this is the one destruction (`step`
        // returns `true` after it, and is not called again).
        let destroyed = deleter_status(unsafe { driver!(cuMemPoolDestroy(self.raw.0)) });
        destroyed.and(revoked)
    }
}

impl Deferred for PendingDestroy {
    /// A destroyed pool's memory is the driver's again.
    fn gives_memory(&self) -> bool {
        true
    }

    fn try_release(&mut self) -> bool {
        // Relaxed: another thread's global-mode capture must neither refuse these calls nor be
        // invalidated by them.
        match in_relaxed_capture_mode(|| self.step()) {
            Ok(done) => done,
            // The driver shut down at exit and released everything itself.
            Err(error) if error.is_deinitialized() => true,
            Err(error) => {
                // The pool is leaked, and that is reported.
                handles_core::report_release_failure("MemoryPool", self.raw.0 as isize, error);
                true
            }
        }
    }
}

impl MemoryPoolHandle {
    /// Creates a pool from `props`. The pool keeps the device's primary context alive.
    pub fn create(props: &PoolProps) -> Result<Self> {
        let handle_type = if props.ipc {
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        } else {
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE
        };
        Self::create_with(props, handle_type)
    }

    fn create_with(props: &PoolProps, handle_type: sys::CUmemAllocationHandleType) -> Result<Self> {
        ensure_loaded()?;
        match props.location {
            PoolLocation::Device(_) => {}
            PoolLocation::Host if !props.ipc => load::require_version(load::newer_uses::HOST_POOL)?,
            // An IPC host pool is made on a NUMA node (below).
            PoolLocation::Host | PoolLocation::HostNuma(_) => {
                load::require_version(load::newer_uses::HOST_NUMA_POOL)?
            }
        }
        let context = match props.location {
            PoolLocation::Device(ordinal) => ContextHandle::primary(ordinal)?,
            PoolLocation::Host | PoolLocation::HostNuma(_) => ContextHandle::primary(props.device)?,
        };
        let location = match props.location {
            PoolLocation::Host if props.ipc => {
                PoolLocation::HostNuma(host_numa_node(props.device)?)
            }
            other => other,
        };
        // SAFETY: the props struct is plain data for which all-zero is the documented default.
        let mut raw_props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        raw_props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        raw_props.handleTypes = handle_type;
        raw_props.location = raw_location(location);
        raw_props.maxSize = props.max_size;
        // Refused for memory while dropped pools wait for their frees: asked again as they go.
        let pool = retry_refused_memory(|| {
            in_context(context.as_cu(), || {
                // SAFETY: `raw_props` is fully initialised; `raw` is a valid out-pointer.
                let raw = out(|raw| unsafe { driver!(cuMemPoolCreate(raw, &raw_props)) })?;
                let record = MemoryPool::owned(context.clone(), Some(location), props.ipc);
                // SAFETY: a fresh pool owned by nobody else; `destroy_pool` destroys it. Made
                // inside the context's scope, so that a failure to restore the caller's
                // context afterwards drops (destroys) it rather than leaking the raw pool.
                Ok(unsafe { MemoryPoolHandle::from_raw(raw, record) })
            })
        })?;
        if props.ipc {
            // Driver 580 refuses to export a pointer of a pool whose shareable handle was never
            // exported: export it once now, so `export_ipc` never has to guess at an error.
            drop(pool.export_posix_fd()?);
        }
        Ok(pool)
    }

    /// A reference to device `ordinal`'s default pool (`cuDeviceGetDefaultMemPool`).
    pub fn device_default(ordinal: usize) -> Result<Self> {
        Self::device_pool(ordinal, |device| {
            // SAFETY: `raw` is a valid out-pointer and `device` a valid device.
            out(|raw| unsafe { driver!(cuDeviceGetDefaultMemPool(raw, device)) })
        })
    }

    pub(crate) fn device_pool(
        ordinal: usize,
        get: impl FnOnce(sys::CUdevice) -> Result<CUmemoryPool>,
    ) -> Result<Self> {
        let raw = get(load::device(ordinal)?)?;
        let record = MemoryPool::reference(Some(PoolLocation::Device(ordinal)), false);
        // SAFETY: device pools live as long as the driver; the reference never destroys it.
        Ok(unsafe { MemoryPoolHandle::from_raw_borrowed(raw, record) })
    }

    /// Grants (`true`) or revokes (`false`) read-write access to this pool's memory from
    /// device `ordinal`.
    ///
    /// A revocation is ordered after the work that may use the memory from another device:
    /// it first waits for every context of another device in which the safe API queued work
    /// on this pool's memory (kernels, copies, graph launches). Work queued afterwards is
    /// checked again and refused, and an executable graph checks its buffers at each launch.
    ///
    /// The access of the device that holds the memory cannot be revoked (the driver refuses it
    /// with `CUDA_ERROR_INVALID_DEVICE`); it is refused here first, also for an imported pool,
    /// whose device is the one the driver reported access from at the import (its uses from
    /// there are not checked again).
    pub fn set_peer_access(&self, ordinal: usize, enabled: bool) -> Result<()> {
        load::device(ordinal)?;
        if !enabled {
            if self.owning_device() == Some(ordinal) {
                return Err(Error::InvalidArgument(format!(
                    "device {ordinal} holds this pool's memory: its access cannot be revoked"
                )));
            }
            return self.revoking(|| self.set_access(ordinal, false));
        }
        self.set_access(ordinal, true)
    }

    fn set_access(&self, ordinal: usize, enabled: bool) -> Result<()> {
        let desc = sys::CUmemAccessDesc {
            location: raw_location(PoolLocation::Device(ordinal)),
            flags: if enabled {
                sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            } else {
                sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE
            },
        };
        // SAFETY: the pool is alive; `desc` is one valid descriptor.
        unsafe { driver!(cuMemPoolSetAccess(self.as_cu(), &desc, 1)) }?;
        remote::of(self.as_cu()).note_access(ordinal, enabled);
        Ok(())
    }

    /// Revokes every peer device's access to this pool, with one `cuMemPoolSetAccess` per
    /// device that has access, and returns how many were revoked. The deleter of an owned pool
    /// does this before destroying it.
    pub fn revoke_peer_access(&self) -> Result<usize> {
        let remote = remote::of(self.as_cu());
        let granted = remote.granted();
        let revoked =
            self.revoking(|| revoke_peer_access(self.as_cu(), self.location(), granted.clone()))?;
        for device in granted {
            remote.note_access(device, false);
        }
        Ok(revoked)
    }

    /// Runs a revocation after the uses of this pool's memory from other devices (see
    /// `memory/remote.rs`).
    fn revoking<T>(&self, revoke: impl FnOnce() -> Result<T>) -> Result<T> {
        remote::of(self.as_cu()).revoking(revoke)
    }

    pub(crate) fn owning_device(&self) -> Option<usize> {
        owning_device(&self.location())
    }

    /// Whether device `ordinal` can read and write this pool's memory.
    pub fn peer_access(&self, ordinal: usize) -> Result<bool> {
        load::device(ordinal)?;
        Ok(access_of(self.as_cu(), ordinal)?
            == sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    }

    /// Bytes currently allocated from the pool (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`). Driver
    /// 580 stops counting an allocation when its free is queued, not when it runs, and a pool
    /// imported from another process does not answer (`CUDA_ERROR_INVALID_VALUE`).
    pub fn used_bytes(&self) -> Result<u64> {
        self.attribute(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    /// Bytes the pool currently reserves from the device (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`).
    pub fn reserved_bytes(&self) -> Result<u64> {
        self.attribute(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// Releases reserved memory back to the device, keeping at least `keep` bytes.
    pub fn trim_to(&self, keep: usize) -> Result<()> {
        // SAFETY: the pool is alive.
        unsafe { driver!(cuMemPoolTrimTo(self.as_cu(), keep)) }
    }

    /// A 64-bit attribute of the pool (`cuMemPoolGetAttribute`).
    pub(crate) fn attribute(&self, attribute: sys::CUmemPool_attribute) -> Result<u64> {
        // SAFETY: the pool is alive; these attributes are 64-bit values.
        out(|value: &mut u64| unsafe {
            driver!(cuMemPoolGetAttribute(
                self.as_cu(),
                attribute,
                (value as *mut u64).cast()
            ))
        })
    }
}
