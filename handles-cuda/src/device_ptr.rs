//! Device (and pinned host) allocations: from a pool on a stream, from the device's current
//! pool, synchronous, pinned host, references, with-owner wrappers and IPC imports.

use std::sync::{Mutex, MutexGuard};

use cudarc::driver::sys::{self, CUdeviceptr};
use handles_core::{CacheSlot, ResourceHandle};

use crate::context::ContextHandle;
use crate::error::{Error, Result, check, deleter_status, driver_error};
use crate::pool::MemoryPoolHandle;
use crate::scope::{in_context_of, in_context_or_undo};
use crate::stream::StreamHandle;

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
}

/// An allocation: a device pointer (or, for pinned host memory, the host address).
///
/// Ownership: the allocation functions here own the memory and free it when the last clone
/// drops, on its deallocation stream for stream-ordered kinds. `from_raw_borrowed` references
/// and with-owner wrappers free nothing. Keeps alive: the pool it came from, the context of
/// synchronous and host allocations, and its deallocation stream (with that stream's context).
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
    pub size: usize,
    /// How the memory is freed.
    pub kind: AllocKind,
    /// Where a stream-ordered free is queued; replaceable after allocation.
    dealloc_stream: Mutex<Option<StreamHandle>>,
    /// The IPC import cache entry, released after the free.
    import_slot: Option<CacheSlot<[u8; 64], DevicePtrHandle>>,
}
// SAFETY: the CUDA driver API lets device pointers be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for DevicePtr {}

/// Where stream-ordered memory came from.
pub(crate) enum Origin {
    /// Allocated by this process.
    Allocated,
    /// Imported from another process; the import cache's entry, unless the cache is bypassed.
    Imported(Option<CacheSlot<[u8; 64], DevicePtrHandle>>),
}

fn lock(stream: &Mutex<Option<StreamHandle>>) -> MutexGuard<'_, Option<StreamHandle>> {
    stream
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn free_allocation(raw: CUdeviceptr, allocation: &DevicePtr) -> Result<()> {
    let status = match allocation.kind {
        AllocKind::StreamOrdered | AllocKind::IpcImport => {
            let stream = lock(&allocation.dealloc_stream);
            let Some(stream) = stream.as_ref() else {
                return Err(Error::InvalidArgument(
                    "stream-ordered allocation without a deallocation stream: leaked".into(),
                ));
            };
            stream.run(|raw_stream| {
                // SAFETY: the handle owns `raw`; the stream (and its context) are alive.
                check("cuMemFreeAsync", unsafe {
                    sys::cuMemFreeAsync(raw, raw_stream)
                })
            })
        }
        AllocKind::Synchronous => with_owning_context(allocation, || {
            // SAFETY: the handle owns `raw`, allocated by `cuMemAlloc` in this context.
            check("cuMemFree", unsafe { sys::cuMemFree_v2(raw) })
        }),
        AllocKind::PinnedHost => with_owning_context(allocation, || {
            // SAFETY: the handle owns the host allocation at `raw`, made by `cuMemHostAlloc`.
            check("cuMemFreeHost", unsafe {
                sys::cuMemFreeHost(raw as usize as *mut std::ffi::c_void)
            })
        }),
    };
    deleter_status(status)
}

fn with_owning_context(allocation: &DevicePtr, call: impl FnOnce() -> Result<()>) -> Result<()> {
    in_context_of(allocation.context.as_ref(), call)
}

/// Makes a stream usable for a free at any later time on any thread: a default-stream token
/// without a context is bound to the context current now (the token alone would mean
/// whichever context is current when the free runs).
pub(crate) fn bind_stream(stream: &StreamHandle) -> Result<StreamHandle> {
    if !stream.is_default_token() || stream.context().is_some() {
        return Ok(stream.clone());
    }
    let Some(context) = ContextHandle::current()? else {
        return Err(driver_error(
            "binding a default stream",
            sys::CUresult::CUDA_ERROR_INVALID_CONTEXT,
        ));
    };
    let record = crate::stream::Stream {
        context: Some(context),
    };
    // SAFETY: default-stream tokens are always valid and never destroyed.
    Ok(unsafe { StreamHandle::from_raw_with_owner(stream.as_cu(), record, ()) })
}

fn check_size(size: usize) -> Result<()> {
    if size == 0 {
        return Err(Error::InvalidArgument(
            "an allocation needs a size of at least one byte".into(),
        ));
    }
    Ok(())
}

impl DevicePtrHandle {
    /// Allocates `size` bytes from `pool`, ordered on `stream`. The pointer keeps the pool
    /// alive and is freed on `stream` (changeable with [`Self::set_deallocation_stream`]).
    pub fn alloc_from_pool(
        pool: &MemoryPoolHandle,
        size: usize,
        stream: &StreamHandle,
    ) -> Result<Self> {
        check_size(size)?;
        let stream = bind_stream(stream)?;
        let mut raw = 0;
        stream.run(|raw_stream| {
            // SAFETY: the pool and the stream are alive; `raw` is a valid out-pointer.
            check("cuMemAllocFromPoolAsync", unsafe {
                sys::cuMemAllocFromPoolAsync(&mut raw, size, pool.as_cu(), raw_stream)
            })
        })?;
        Ok(Self::stream_ordered(
            raw,
            size,
            Some(pool.clone()),
            stream,
            Origin::Allocated,
        ))
    }

    /// Allocates `size` bytes from the current pool of `stream`'s device, ordered on `stream`.
    pub fn alloc_async(size: usize, stream: &StreamHandle) -> Result<Self> {
        check_size(size)?;
        let stream = bind_stream(stream)?;
        let mut raw = 0;
        stream.run(|raw_stream| {
            // SAFETY: the stream is alive; `raw` is a valid out-pointer.
            check("cuMemAllocAsync", unsafe {
                sys::cuMemAllocAsync(&mut raw, size, raw_stream)
            })
        })?;
        Ok(Self::stream_ordered(
            raw,
            size,
            None,
            stream,
            Origin::Allocated,
        ))
    }

    /// Wraps fresh stream-ordered memory; both origins are freed with `cuMemFreeAsync`.
    pub(crate) fn stream_ordered(
        raw: CUdeviceptr,
        size: usize,
        pool: Option<MemoryPoolHandle>,
        stream: StreamHandle,
        origin: Origin,
    ) -> Self {
        let (kind, import_slot) = match origin {
            Origin::Allocated => (AllocKind::StreamOrdered, None),
            Origin::Imported(slot) => (AllocKind::IpcImport, slot),
        };
        let record = DevicePtr {
            pool,
            context: None,
            size,
            kind,
            dealloc_stream: Mutex::new(Some(stream)),
            import_slot,
        };
        // SAFETY: fresh memory (or an import the cache guarantees is the only one of its
        // export data) owned by nobody else; freed with cuMemFreeAsync on `stream`.
        unsafe { DevicePtrHandle::from_raw(raw, record) }
    }

    /// Allocates `size` bytes with `cuMemAlloc` in `context`, freed synchronously.
    pub fn alloc(context: &ContextHandle, size: usize) -> Result<Self> {
        check_size(size)?;
        let raw = in_context_or_undo(
            context.as_cu(),
            || {
                let mut raw = 0;
                // SAFETY: the context is current; `raw` is a valid out-pointer.
                check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut raw, size) })?;
                Ok(raw)
            },
            |raw| {
                // SAFETY: undoing our own allocation; nothing else has seen it.
                let _ = unsafe { sys::cuMemFree_v2(raw) };
            },
        )?;
        Ok(Self::context_bound(
            raw,
            size,
            context,
            AllocKind::Synchronous,
        ))
    }

    /// Allocates `size` bytes of pinned host memory in `context` (`cuMemHostAlloc`). The
    /// raw value is the host address.
    pub fn alloc_host(context: &ContextHandle, size: usize) -> Result<Self> {
        check_size(size)?;
        let raw = in_context_or_undo(
            context.as_cu(),
            || {
                let mut host = std::ptr::null_mut();
                // SAFETY: the context is current; `host` is a valid out-pointer.
                check("cuMemHostAlloc", unsafe {
                    sys::cuMemHostAlloc(&mut host, size, 0)
                })?;
                Ok(host as usize as CUdeviceptr)
            },
            |raw| {
                // SAFETY: undoing our own allocation; nothing else has seen it.
                let _ = unsafe { sys::cuMemFreeHost(raw as usize as *mut std::ffi::c_void) };
            },
        )?;
        Ok(Self::context_bound(
            raw,
            size,
            context,
            AllocKind::PinnedHost,
        ))
    }

    fn context_bound(
        raw: CUdeviceptr,
        size: usize,
        context: &ContextHandle,
        kind: AllocKind,
    ) -> Self {
        let record = DevicePtr {
            pool: None,
            context: Some(context.clone()),
            size,
            kind,
            dealloc_stream: Mutex::new(None),
            import_slot: None,
        };
        // SAFETY: fresh memory owned by nobody else, freed according to `kind`.
        unsafe { DevicePtrHandle::from_raw(raw, record) }
    }

    /// A record for references and with-owner wrappers, which free nothing.
    pub fn unowned_record(size: usize) -> DevicePtr {
        DevicePtr {
            pool: None,
            context: None,
            size,
            kind: AllocKind::Synchronous,
            dealloc_stream: Mutex::new(None),
            import_slot: None,
        }
    }

    /// The stream a stream-ordered free will be queued on.
    pub fn deallocation_stream(&self) -> Option<StreamHandle> {
        lock(self.dealloc_stream()).clone()
    }

    /// Replaces the stream the free will be queued on. A default-stream token is bound to the
    /// context current now. Only for stream-ordered kinds.
    pub fn set_deallocation_stream(&self, stream: &StreamHandle) -> Result<()> {
        if !matches!(self.kind(), AllocKind::StreamOrdered | AllocKind::IpcImport)
            || !self.is_owning()
        {
            return Err(Error::InvalidArgument(
                "only owned stream-ordered allocations have a deallocation stream".into(),
            ));
        }
        let bound = bind_stream(stream)?;
        *lock(self.dealloc_stream()) = Some(bound);
        Ok(())
    }

    /// Fills the first `len` bytes with `value`, ordered on `stream`.
    pub fn memset_async(&self, value: u8, len: usize, stream: &StreamHandle) -> Result<()> {
        self.check_range(len)?;
        let raw = self.as_cu();
        stream.run(|raw_stream| {
            // SAFETY: `len` is within the allocation, which is alive while `self` is.
            check("cuMemsetD8Async", unsafe {
                sys::cuMemsetD8Async(raw, value, len, raw_stream)
            })
        })
    }

    /// Copies `src` into the start of the allocation, ordered on `stream`, and waits for it.
    pub fn copy_from_host(&self, src: &[u8], stream: &StreamHandle) -> Result<()> {
        self.check_range(src.len())?;
        let raw = self.as_cu();
        stream.run_bound(|raw_stream| {
            // SAFETY: the range is within the allocation; `src` outlives the copy because we
            // synchronise before returning.
            // Unified addressing: the same call copies into device or pinned host memory.
            check("cuMemcpyAsync", unsafe {
                sys::cuMemcpyAsync(raw, src.as_ptr() as CUdeviceptr, src.len(), raw_stream)
            })
        })?;
        stream.synchronize()
    }

    /// Copies the start of the allocation into `dst`, ordered on `stream`, and waits for it.
    pub fn copy_to_host(&self, dst: &mut [u8], stream: &StreamHandle) -> Result<()> {
        self.check_range(dst.len())?;
        let raw = self.as_cu();
        stream.run_bound(|raw_stream| {
            // SAFETY: the range is within the allocation; `dst` outlives the copy because we
            // synchronise before returning.
            check("cuMemcpyAsync", unsafe {
                sys::cuMemcpyAsync(dst.as_mut_ptr() as CUdeviceptr, raw, dst.len(), raw_stream)
            })
        })?;
        stream.synchronize()
    }

    fn check_range(&self, len: usize) -> Result<()> {
        if len > *self.size() {
            return Err(Error::InvalidArgument(format!(
                "{len} bytes do not fit in an allocation of {} bytes",
                self.size()
            )));
        }
        Ok(())
    }
}
