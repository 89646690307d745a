//! Device (and pinned host) allocations: from a pool on a stream, from the device's current
//! pool, synchronous, pinned host, references, with-owner wrappers and IPC imports.
//!
//! Stream-ordered memory is freed on its deallocation stream after every other stream it was
//! used on (the ordering rule in `stream_order.rs`). Only the safe methods here report their
//! streams: work queued through the raw pointer (`as_cu`) is the caller's to order, as every
//! use of a raw pointer is.

use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use handles_core::{CacheSlot, ResourceHandle};

use crate::driver::call::{deleter_status, driver, out};
use crate::driver::current::{KeepCurrent, in_context, in_context_of};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::disposal::{retry_after_refusal, retry_refused_memory};
use crate::exec::stream::StreamHandle;
use crate::memory::fixed_reach::FixedReach;
use crate::memory::host_access::HostAccess;
use crate::memory::pool::{MemoryPoolHandle, PoolLocation};
use crate::memory::vmm::MappingHandle;
use crate::order::contexts_used::ContextsUsed;
use crate::order::stream_order::StreamOrder;
use crate::sync::lock;

/// How an allocation was made, which fixes how it is freed. An asynchronous allocation is
/// never freed synchronously, nor the other way round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocKind {
    /// `cuMemAllocFromPoolAsync` or `cuMemAllocAsync`: freed with `cuMemFreeAsync` on the
    /// deallocation stream.
    StreamOrdered,
    /// Imported from another process's pool: freed with `cuMemFreeAsync` on the deallocation
    /// stream.
    IpcImport,
    /// `cuMemAlloc`: freed with `cuMemFree` in its context.
    Synchronous,
    /// `cuMemHostAlloc` (pinned host memory): freed with `cuMemFreeHost` in its context.
    PinnedHost,
    /// `cuMemAllocManaged` (managed memory, reachable from the host and every device): freed
    /// with `cuMemFree` in its context.
    Managed,
    /// Memory this handle does not own (a reference or a with-owner wrapper): never freed
    /// through it.
    Unowned,
    /// Part of another allocation ([`DevicePtrHandle::view`]): never freed through it; it keeps
    /// the whole allocation alive, and its uses count as uses of the whole.
    View,
    /// Mapped virtual memory ([`crate::memory::MappingHandle::device_ptr`], a
    /// [`crate::memory::GrowableBuffer`] slice): never freed through it; it keeps its mappings alive,
    /// and their unmap waits for its uses.
    Mapped,
    /// Graph-owned memory (`GraphHandle::add_mem_alloc_node`): allocated and freed by the
    /// graph's own nodes at every launch; usable only by nodes of that graph.
    GraphOwned,
}

/// An allocation: a device pointer (or, for pinned host memory, the host address).
///
/// Ownership: the allocation functions here own the memory and free it when the last clone
/// drops, on its deallocation stream for stream-ordered kinds, after every other stream the
/// safe methods used it on. `from_raw_borrowed` references and with-owner wrappers free
/// nothing. Keeps alive: the pool it came from, the context of synchronous and host
/// allocations, and its deallocation stream (with that stream's context).
#[derive(ResourceHandle)]
#[handle(raw = CUdeviceptr, accessor = as_cu, delete = free_allocation)]
pub struct DevicePtr {
    /// The pool the memory came from (or was imported through).
    #[owner]
    pub pool: Option<MemoryPoolHandle>,
    /// The context of synchronous and pinned-host allocations.
    #[owner]
    pub context: Option<ContextHandle>,
    /// The size in bytes.
    #[handle(copy)]
    pub size: usize,
    /// How the memory is freed, and what the free waits for.
    pub(crate) release: Release,
    /// The IPC import cache entry, released after the free. Boxed: it holds the 64-byte export
    /// data, which every other allocation's record would carry (and copy) for nothing.
    import_slot: Option<Box<CacheSlot<[u8; 64], DevicePtrHandle>>>,
    /// What reach checks have found fixed for the allocation's life (`memory/reach.rs`).
    pub(crate) fixed_reach: FixedReach,
}
// SAFETY: the CUDA driver API lets device pointers be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for DevicePtr {}

impl DevicePtr {
    /// The record of memory a handle does not own, for references and with-owner wrappers
    /// (`from_raw_borrowed`, `from_raw_with_owner`): `size` bytes, freed never.
    pub fn reference(size: usize) -> DevicePtr {
        DevicePtr::released_by(size, Release::Nothing)
    }

    /// A record of `size` bytes with no pool or context of its own, released by `release`.
    fn released_by(size: usize, release: Release) -> DevicePtr {
        DevicePtr {
            pool: None,
            context: None,
            size,
            release,
            import_slot: None,
            fixed_reach: FixedReach::default(),
        }
    }
}

/// The real cases of freeing an allocation.
pub(crate) enum Release {
    /// References and with-owner wrappers free nothing.
    Nothing,
    /// `cuMemFreeAsync` on the deallocation stream, ordered after every other use.
    StreamOrdered {
        order: StreamOrder,
        /// Imported from another process rather than allocated here.
        imported: bool,
        /// Memory of a host pool allocated here: its host views' gate and the contexts of its
        /// uses (`memory/host_view.rs`).
        host: Option<Arc<HostAccess>>,
    },
    /// `cuMemFree` in the owning context, once every context the memory was used in through
    /// a stream has finished its work.
    Synchronous(ContextsUsed),
    /// `cuMemFreeHost` in the owning context, after the same wait (for the contexts its host
    /// views wait for too).
    PinnedHost(Arc<HostAccess>),
    /// `cuMemFree` of managed memory in the owning context, after the same wait.
    Managed(Arc<HostAccess>),
    /// Memory another library frees (a cudarc slice, kept here): see [`ForeignFree`].
    Foreign(ForeignFree),
    /// Part of the allocation `parent`, which the view keeps alive; frees nothing.
    View(DevicePtrHandle),
    /// Mapped virtual memory spanning these mappings, which it keeps alive; frees nothing.
    Mapped(Vec<MappingHandle>),
    /// Memory of an allocation node of graph `graph` (by id): the graph's free node frees it
    /// at every launch, this handle never; refused by every use outside that graph.
    GraphOwned {
        /// The id of the graph whose allocation node made it.
        graph: u64,
    },
}

/// Memory that another library owns and frees on its own stream when its owner value drops (a
/// cudarc slice). The safe methods still report every stream they use, and the handle's
/// deleter makes the owner's stream ("home") wait for all of them before it drops the owner
/// value, so the other library's free is ordered after that work too. If home cannot be
/// ordered, the deleter leaks the owner value rather than let it be freed unordered, and
/// returns the error, which the report hook receives like any failed release.
pub(crate) struct ForeignFree {
    order: StreamOrder,
    /// Dropped with the caller's context restored: cudarc's slice binds its own.
    owner: std::sync::Mutex<Option<Owner>>,
}

/// Another library's value that owns memory, dropped with the caller's context restored.
pub(crate) type Owner = KeepCurrent<Box<dyn std::any::Any + Send + Sync>>;

impl ForeignFree {
    pub(crate) fn new(order: StreamOrder, owner: Box<dyn std::any::Any + Send + Sync>) -> Self {
        ForeignFree {
            order,
            owner: std::sync::Mutex::new(Some(KeepCurrent::new(owner))),
        }
    }

    /// Orders home after every use, then drops the owner value in home's context (the other
    /// library frees the memory): at once, or, when home is another thread's per-thread stream
    /// and a capture runs, on the disposal thread once none runs
    /// ([`StreamOrder::order_home_after_uses`]). If home cannot be ordered, the owner value is
    /// leaked (never dropped, so the other library never frees the memory) and the error
    /// returned.
    fn release(&self, raw: CUdeviceptr) -> Result<()> {
        let owner = OwnerRelease {
            owner: lock(&self.owner).take(),
            context: self.order.home().context().clone(),
        };
        self.order
            .order_home_after_uses(raw as isize, move || owner.release())
    }

    /// The stream the other library frees the memory on.
    pub(crate) fn home(&self) -> StreamHandle {
        self.order.home()
    }
}

impl Drop for ForeignFree {
    /// The owner value of a record whose release never ran, dropped as a release would.
    fn drop(&mut self) {
        if let Some(owner) = lock(&self.owner).take() {
            drop_owner_in(owner, self.order.home().context().clone());
        }
    }
}

/// Drops `owner` with home's `context` current: cudarc 0.19's slice frees on its stream without
/// binding its context, so on a thread with no context current, or another one, its free would
/// fail (a silent leak) or run in the wrong context (found by the safe-API fuzzer, open finding
/// N3). The caller's context is current again afterwards.
pub(crate) fn drop_owner_in(owner: Owner, context: Option<ContextHandle>) {
    match context {
        // If the context cannot be made current, the closure (and the owner in it) is dropped
        // unrun, as before this scope existed.
        Some(context) => {
            let _ = in_context(context.as_cu(), move || {
                drop(owner);
                Ok::<(), Error>(())
            });
        }
        None => drop(owner),
    }
}

/// The owner value on its way to its free: [`OwnerRelease::release`] drops it in home's
/// context; dropped unreleased (home could not be ordered), it leaks the value, never dropped,
/// so the other library never frees memory that work may still use.
struct OwnerRelease {
    owner: Option<Owner>,
    context: Option<ContextHandle>,
}

impl OwnerRelease {
    fn release(mut self) {
        if let Some(owner) = self.owner.take() {
            drop_owner_in(owner, self.context.take());
        }
    }
}

impl Drop for OwnerRelease {
    fn drop(&mut self) {
        std::mem::forget(self.owner.take());
    }
}

/// Where stream-ordered memory came from.
pub(crate) enum Origin {
    /// Allocated by this process; with the host access of host-pool memory.
    Allocated(Option<Arc<HostAccess>>),
    /// Imported from another process; the import cache's entry, unless the cache is bypassed.
    Imported(Option<CacheSlot<[u8; 64], DevicePtrHandle>>),
}

fn free_allocation(raw: CUdeviceptr, allocation: &DevicePtr) -> Result<()> {
    let status = match &allocation.release {
        Release::Nothing => Ok(()),
        // An owned pool's destruction waits for this free, which its note makes possible.
        // Memory whose free is not queued, or cannot be waited for, stays allocated in its
        // pool for good: the pool is kept too (never destroyed), a leak reported with this one.
        // A free handed to the disposal thread (a capture runs: `StreamOrder::free`) keeps
        // the pool until it is done.
        Release::StreamOrdered { order, .. } => match &allocation.pool {
            Some(pool) if pool.is_owning() => order
                .free(raw, || pool.clone())
                .and_then(|()| pool.record().frees_on.note_free(order))
                .inspect_err(|_| {
                    pool.record().frees_on.forget();
                    std::mem::forget(pool.clone());
                }),
            _ => order.free(raw, || allocation.pool.clone()),
        },
        Release::Foreign(foreign) => foreign.release(raw),
        Release::View(_) | Release::Mapped(_) | Release::GraphOwned { .. } => Ok(()),
        Release::Synchronous(used) => used.release_after_all(
            "DevicePtr",
            raw as isize,
            in_owning_context(allocation, move || {
                // SAFETY: the handle owned `raw`, allocated by `cuMemAlloc` in this context,
                // and is gone; every context it was used in has finished that work; this
                // release runs once.
                unsafe { driver!(cuMemFree_v2(raw)) }
            }),
        ),
        Release::Managed(host) => host.release_after_uses(
            "DevicePtr",
            raw as isize,
            in_owning_context(allocation, move || {
                // SAFETY: the handle owned `raw`, allocated by `cuMemAllocManaged` in this
                // context, and is gone; every stream and context it was used in has finished
                // that work; this release runs once.
                unsafe { driver!(cuMemFree_v2(raw)) }
            }),
        ),
        Release::PinnedHost(host) => host.release_after_uses(
            "DevicePtr",
            raw as isize,
            in_owning_context(allocation, move || {
                // SAFETY: the handle owned the host allocation at `raw`, made by
                // `cuMemHostAlloc` in this context, and is gone; every stream and context it
                // was used in has finished that work; this release runs once.
                unsafe { driver!(cuMemFreeHost(raw as usize as *mut std::ffi::c_void)) }
            }),
        ),
    };
    deleter_status(status)
}

/// `free` (a host-side free) made in the allocation's owning context, which the returned
/// release keeps alive, once the wait for the memory's uses succeeded: it may run later, on
/// the disposal thread, once no capture runs (`ContextsUsed::release_after_all`), after the
/// record is gone.
fn in_owning_context(
    allocation: &DevicePtr,
    free: impl FnOnce() -> Result<()> + Send + 'static,
) -> impl FnOnce(Result<()>) -> Result<()> + Send + 'static {
    let owner = allocation.context.clone();
    // A failed wait leaks the memory (`free` is not run) and returns the error.
    move |waited| {
        waited?;
        in_context_of(owner.as_ref().map(ContextHandle::as_cu), free)
    }
}

pub(crate) fn check_size(size: usize) -> Result<()> {
    if size == 0 {
        return Err(Error::ZeroSize {
            what: "an allocation needs a size of at least one byte",
        });
    }
    Ok(())
}

impl DevicePtrHandle {
    /// Allocates `size` bytes from `pool`, ordered on `stream`. The pointer keeps the pool
    /// alive and is freed on `stream` (changeable with [`Self::set_deallocation_stream`]).
    ///
    /// Memory the driver refuses while pools dropped earlier still wait for their frees is
    /// asked for again as they are destroyed (for at most 2 s): their memory is the device's
    /// again only then.
    pub fn alloc_from_pool(
        pool: &MemoryPoolHandle,
        size: usize,
        stream: &StreamHandle,
    ) -> Result<Self> {
        Self::alloc_from_pool_or_retry(pool, size, stream, true)
    }

    /// [`Self::alloc_from_pool`]; with `retry`, a refusal for memory is retried (out of line).
    #[inline(always)]
    fn alloc_from_pool_or_retry(
        pool: &MemoryPoolHandle,
        size: usize,
        stream: &StreamHandle,
        retry: bool,
    ) -> Result<Self> {
        check_size(size)?;
        stream.refuse_foreign_capture()?;
        let mut order = StreamOrder::new(stream.bound()?)?;
        // Host-pool memory can be viewed from the host: its allocation, queued on `stream`, is
        // its first use, noted before it is queued.
        let host = match pool.location() {
            Some(PoolLocation::Host | PoolLocation::HostNuma(_)) => {
                let host = if pool.ipc() {
                    HostAccess::pinned_exportable()
                } else {
                    HostAccess::pinned()
                };
                host.note_context(&order.home().owning_context()?)?;
                Some(Arc::new(host))
            }
            _ => None,
        };
        let mut raw = 0;
        // On an outer stream inside a capture's closure (allowed), too.
        let relaxed = crate::driver::capture::relaxed_while_capturing();
        let allocated = order.home_while_creating().queue(|raw_stream| {
            // SAFETY: the pool and the stream are alive; `raw` is a valid out-pointer.
            unsafe {
                driver!(cuMemAllocFromPoolAsync(
                    &mut raw,
                    size,
                    pool.as_cu(),
                    raw_stream
                ))
            }
        });
        drop(relaxed);
        // Written out rather than through a closure: the record's parts are moved once.
        if !allocated.queued {
            let refused = allocated.status.err().unwrap_or(Error::NothingMade {
                what: "the allocation made no pointer",
            });
            if retry {
                return retry_after_refusal(refused, || {
                    Self::alloc_from_pool_or_retry(pool, size, stream, false)
                });
            }
            return Err(refused);
        }
        let handle = Self::stream_ordered(
            raw,
            size,
            Some(pool.clone()),
            order,
            Origin::Allocated(host),
        );
        // The allocation succeeded but restoring the caller's context failed: the handle is
        // dropped (freeing the memory), and the error returned.
        allocated.status?;
        Ok(handle)
    }

    /// Allocates `size` bytes from the current pool of `stream`'s device, ordered on `stream`.
    pub fn alloc_async(size: usize, stream: &StreamHandle) -> Result<Self> {
        check_size(size)?;
        // Allocated from that pool by name, so that the pointer keeps it alive (the handle
        // that manages it, resolved under the current-pool lock, or a reference to a pool the
        // driver keeps).
        let pool = MemoryPoolHandle::device_current(stream.device_ordinal()?)?;
        Self::alloc_from_pool(&pool, size, stream)
    }

    /// Wraps fresh stream-ordered memory; both origins are freed with `cuMemFreeAsync` on the
    /// home stream of `order`.
    #[inline]
    pub(crate) fn stream_ordered(
        raw: CUdeviceptr,
        size: usize,
        pool: Option<MemoryPoolHandle>,
        order: StreamOrder,
        origin: Origin,
    ) -> Self {
        let (imported, import_slot, host) = match origin {
            Origin::Allocated(host) => (false, None, host),
            Origin::Imported(slot) => (true, slot.map(Box::new), None),
        };
        let record = DevicePtr {
            pool,
            context: None,
            size,
            release: Release::StreamOrdered {
                order,
                imported,
                host,
            },
            import_slot,
            fixed_reach: FixedReach::default(),
        };
        // SAFETY: fresh memory (or an import the cache guarantees is the only one of its
        // export data) owned by nobody else, of `size` bytes; freed with cuMemFreeAsync on the
        // home stream of `order`, which keeps that stream alive.
        unsafe { DevicePtrHandle::from_raw(raw, record) }
    }

    /// Allocates `size` bytes with `cuMemAlloc` in `context`, freed synchronously, after
    /// every stream the safe methods used it on. A refusal for memory is retried as for
    /// [`Self::alloc_from_pool`].
    pub fn alloc(context: &ContextHandle, size: usize) -> Result<Self> {
        check_size(size)?;
        let context = &context.keep_alive()?;
        in_context(context.as_cu(), || {
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            let raw =
                retry_refused_memory(|| out(|raw| unsafe { driver!(cuMemAlloc_v2(raw, size)) }))?;
            let release = Release::Synchronous(ContextsUsed::new());
            Ok(Self::context_bound(raw, size, context, release))
        })
    }

    /// Allocates `size` bytes of pinned host memory in `context` (`cuMemHostAlloc`). The
    /// raw value is the host address. Freed after every stream the safe methods used it on.
    pub fn alloc_host(context: &ContextHandle, size: usize) -> Result<Self> {
        check_size(size)?;
        let context = &context.keep_alive()?;
        in_context(context.as_cu(), || {
            // SAFETY: the context is current; `host` is a valid out-pointer.
            let host = out(|host| unsafe { driver!(cuMemHostAlloc(host, size, 0)) })?;
            let release = Release::PinnedHost(Arc::new(HostAccess::pinned()));
            Ok(Self::context_bound(
                host as usize as CUdeviceptr,
                size,
                context,
                release,
            ))
        })
    }

    pub(crate) fn context_bound(
        raw: CUdeviceptr,
        size: usize,
        context: &ContextHandle,
        release: Release,
    ) -> Self {
        let record = DevicePtr {
            pool: None,
            context: Some(context.clone()),
            size,
            release,
            import_slot: None,
            fixed_reach: FixedReach::default(),
        };
        // SAFETY: fresh memory of `size` bytes owned by nobody else, freed according to
        // `release` in `context`, which the record keeps alive.
        unsafe { DevicePtrHandle::from_raw(raw, record) }
    }

    /// The record of memory this handle does not own: [`DevicePtr::reference`].
    #[deprecated(note = "use `DevicePtr::reference`, the form every record type has")]
    pub fn unowned_record(size: usize) -> DevicePtr {
        DevicePtr::reference(size)
    }

    /// How the memory is freed (and whether this handle frees it at all).
    pub fn kind(&self) -> AllocKind {
        match self.record().release {
            Release::View(_) => return AllocKind::View,
            Release::Mapped(_) => return AllocKind::Mapped,
            Release::GraphOwned { .. } => return AllocKind::GraphOwned,
            _ => {}
        }
        if !self.is_owning() {
            return AllocKind::Unowned;
        }
        match &self.record().release {
            Release::Nothing
            | Release::Foreign(_)
            | Release::View(_)
            | Release::Mapped(_)
            | Release::GraphOwned { .. } => AllocKind::Unowned,
            Release::StreamOrdered {
                imported: false, ..
            } => AllocKind::StreamOrdered,
            Release::StreamOrdered { imported: true, .. } => AllocKind::IpcImport,
            Release::Synchronous(_) => AllocKind::Synchronous,
            Release::PinnedHost(_) => AllocKind::PinnedHost,
            Release::Managed(_) => AllocKind::Managed,
        }
    }

    /// A pointer into mapped virtual memory spanning `mappings`, which it keeps alive.
    pub(crate) fn mapped(start: CUdeviceptr, size: usize, mappings: Vec<MappingHandle>) -> Self {
        let record = DevicePtr::released_by(size, Release::Mapped(mappings));
        // SAFETY: `[start, start + size)` lies in the mappings, which the record keeps mapped
        // for as long as the handle lives; the handle frees nothing.
        unsafe { DevicePtrHandle::from_raw_borrowed(start, record) }
    }

    /// The handle of graph-owned memory: `size` bytes at `start`, made by an allocation node
    /// of graph `graph`; it frees nothing.
    pub(crate) fn graph_owned(start: CUdeviceptr, size: usize, graph: u64) -> Self {
        let record = DevicePtr::released_by(size, Release::GraphOwned { graph });
        // SAFETY: the handle frees nothing, and every use outside graph `graph`'s nodes is
        // refused (`check_accessible_from`), so the address is only ever used by nodes the
        // driver orders between the allocation and the free node.
        unsafe { DevicePtrHandle::from_raw_borrowed(start, record) }
    }

    /// The graph whose allocation node made this memory (through views), if it is graph-owned.
    pub(crate) fn graph_owner(&self) -> Option<u64> {
        match &self.ordering_root().record().release {
            Release::GraphOwned { graph } => Some(*graph),
            _ => None,
        }
    }

    /// A view of `len` bytes from byte `offset`: a handle whose address is that byte, whose
    /// size is `len`, that keeps this allocation alive, and whose uses on streams count as
    /// uses of this allocation (so its free is ordered after them). Views pass parts of a
    /// buffer to kernels and copies; they free nothing themselves.
    pub fn view(&self, offset: usize, len: usize) -> Result<DevicePtrHandle> {
        let start = self.range(offset, len)?;
        let record = DevicePtr::released_by(len, Release::View(self.clone()));
        // SAFETY: `[start, start + len)` lies inside this allocation, which the record's
        // `parent` keeps alive for as long as the view lives; the view frees nothing.
        Ok(unsafe { DevicePtrHandle::from_raw_borrowed(start, record) })
    }

    /// The handle whose record keeps this memory's ordering: the allocation a view is part of
    /// (through views of views), else this handle. A view's uses, reach and ordering are its
    /// root's, so code that reports each buffer once reports roots.
    pub(crate) fn ordering_root(&self) -> &DevicePtrHandle {
        match &self.record().release {
            Release::View(parent) => parent.ordering_root(),
            _ => self,
        }
    }

    /// The record of memory another library frees on `home` when `owner` drops.
    pub(crate) fn foreign_record(
        size: usize,
        home: StreamHandle,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<DevicePtr> {
        let foreign = ForeignFree::new(StreamOrder::new(home)?, owner);
        Ok(DevicePtr::released_by(size, Release::Foreign(foreign)))
    }

    /// Reports that work using this memory was queued on `stream` by this thread, for code
    /// that queues work through the raw pointer (another CUDA library's call, a raw launch):
    /// the free is then ordered after that work, as after the safe methods' own work. Call it
    /// after the work was queued. Safe: it only adds ordering.
    ///
    /// A default-stream token bound to no context ([`StreamHandle::legacy`],
    /// [`StreamHandle::per_thread`]) names the stream of the context current on this thread
    /// now, which must be the context the work was queued in. With no context current it names
    /// no stream: the report is refused with [`Error::NoCurrentContext`] (the per-thread token
    /// in a green context, which has none, with [`Error::WrongContext`]), and this memory's
    /// ordering, views and free are as they were.
    #[inline]
    pub fn record_use(&self, stream: &StreamHandle) -> Result<()> {
        stream.refuse_if_unresolved()?;
        self.report_use(stream, true)
    }

    /// [`Self::record_use`] for work queued while this memory's reach guard for `stream`
    /// ([`Self::check_accessible_on`]) was held, as the safe methods queue theirs: the guard
    /// covers the work for host views (its drop records the stream's marker after the work,
    /// or its entry noted the context), so only the frees' ordering is reported here and the
    /// marker is not recorded a second time.
    #[inline]
    pub(crate) fn record_guarded_use(&self, stream: &StreamHandle) -> Result<()> {
        self.report_use(stream, false)
    }

    /// The one home of a use's report: the free's ordering, and with `host_views` the host
    /// views' marker of memory with host access.
    #[inline]
    fn report_use(&self, stream: &StreamHandle, host_views: bool) -> Result<()> {
        match &self.record().release {
            Release::StreamOrdered { order, host, .. } if self.is_owning() => {
                let ordered = order.record_use(stream);
                // Host-pool memory: its views wait for the work too.
                match host {
                    Some(host) if host_views => ordered.and(host.record_use(stream)),
                    _ => ordered,
                }
            }
            Release::Synchronous(used) if self.is_owning() => used.note_stream(stream),
            Release::PinnedHost(host) | Release::Managed(host) if self.is_owning() => {
                match host_views {
                    true => host.record_use(stream),
                    false => Ok(()),
                }
            }
            Release::Foreign(foreign) => foreign.order.record_use(stream),
            Release::View(parent) => parent.report_use(stream, host_views),
            Release::Mapped(mappings) => {
                // Every mapping is noted, whatever happens to another.
                let mut status = Ok(());
                for mapping in mappings {
                    status = status.and(mapping.record_use(stream));
                }
                status
            }
            _ => Ok(()),
        }
    }

    /// Whether [`DevicePtrHandle::record_use`] only notes the stream's context (synchronous and
    /// mapped allocations): noting it again for a stream of the same context adds nothing.
    pub(crate) fn use_is_context_note(&self) -> bool {
        self.is_owning()
            && matches!(
                self.record().release,
                Release::Synchronous(_) | Release::Mapped(_)
            )
    }

    /// The stream a stream-ordered free of this crate will be queued on. `None` for memory
    /// another library frees (a wrapped cudarc slice): its stream is that library's, which it
    /// may capture at any time, and only the `unsafe` stream conversions hand such a stream out.
    pub fn deallocation_stream(&self) -> Option<StreamHandle> {
        if self.is_foreign_free() {
            return None;
        }
        self.async_free_order().map(StreamOrder::home)
    }

    /// Whether another library frees this memory (through a view too).
    fn is_foreign_free(&self) -> bool {
        match &self.record().release {
            Release::Foreign(_) => true,
            Release::View(parent) => parent.is_foreign_free(),
            _ => false,
        }
    }

    /// The ordering of memory freed with `cuMemFreeAsync` (owned or another library's).
    fn async_free_order(&self) -> Option<&StreamOrder> {
        match &self.record().release {
            Release::StreamOrdered { order, .. } if self.is_owning() => Some(order),
            Release::Foreign(foreign) => Some(&foreign.order),
            Release::View(parent) => parent.async_free_order(),
            _ => None,
        }
    }

    /// Moves the free to `stream`, ordered after everything already queued on the current
    /// deallocation stream and on every other stream the memory was used on. A default-stream
    /// token is bound to the context current now. Only for owned stream-ordered memory.
    pub fn set_deallocation_stream(&self, stream: &StreamHandle) -> Result<()> {
        let Some(order) = self
            .async_free_order()
            .filter(|_| matches!(self.kind(), AllocKind::StreamOrdered | AllocKind::IpcImport))
        else {
            return Err(Error::NotStreamOrdered);
        };
        let stream = stream.bound()?;
        order.move_home(stream)
    }

    /// The device address of `len` bytes from `offset`, if they lie within the allocation.
    pub(crate) fn range(&self, offset: usize, len: usize) -> Result<CUdeviceptr> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => Ok(self.as_cu() + offset as CUdeviceptr),
            _ => Err(Error::OutOfRange {
                offset,
                len,
                size: self.size(),
            }),
        }
    }
}
