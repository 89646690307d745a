//! Sharing between processes: pool allocations (here, with the import cache that works around
//! the driver's unreferenced duplicate imports), events (`ipc/event.rs`) and pools
//! (`ipc/pool.rs`, as POSIX file descriptors).
//!
//! The driver does not count imports of one allocation (nvbug 5570902): a second
//! `cuMemPoolImportPointer` of the same export data returns the same pointer, and the first
//! `cuMemFreeAsync` unmaps it for both. Pinned host memory fails a second import with
//! `CUDA_ERROR_ALREADY_MAPPED`. So each process keeps at most one live import per export
//! data: a [`WeakCache`] keyed by the export bytes hands every importer the same handle, and a
//! re-import waits until the previous import's free has been queued (see `handles-core`'s
//! cache protocol).

use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::{self, CUdeviceptr};
use handles_core::{CacheSlot, WeakCache};

use crate::driver::call::{driver, out};
use crate::driver::current::in_context_of;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::StreamHandle;
use crate::ipc::token::{self, TOKEN};
use crate::memory::device_ptr::{AllocKind, DevicePtrHandle, Origin};
use crate::memory::pool::MemoryPoolHandle;
use crate::order::stream_order::StreamOrder;

/// What another process needs to import one pool allocation: the driver's 64-byte export
/// data and the allocation's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcPointer {
    /// `CUmemPoolPtrExportData`.
    pub export_data: [u8; TOKEN],
    /// The allocation's size in bytes.
    pub size: u64,
}

impl IpcPointer {
    /// The serialized length: 64 bytes of export data and a little-endian `u64` size.
    pub const LEN: usize = 72;

    /// Serializes for sending to another process.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        token::join(&self.export_data, &self.size.to_le_bytes())
    }

    /// Parses bytes from another process. Only the length and a non-zero size are checked
    /// here; the driver rejects export data that names no live allocation at import.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (export_data, tail) = token::split(bytes, Self::LEN, "an IPC pointer payload")?;
        let mut size = [0; 8];
        size.copy_from_slice(tail);
        let size = u64::from_le_bytes(size);
        if size == 0 {
            return Err(Error::BadIpcPayload {
                reason: "an IPC pointer payload with size 0 names no allocation".into(),
            });
        }
        Ok(IpcPointer { export_data, size })
    }
}

static IMPORTS: WeakCache<[u8; TOKEN], DevicePtrHandle> = WeakCache::new();
static CACHE_ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the IPC import cache on (the default) or off.
///
/// With the cache off, every import calls the driver, so two imports of one allocation get
/// two handles to the same pointer, and freeing either unmaps both on drivers with nvbug
/// 5570902: the other handle's safe methods then touch unmapped memory.
///
/// # Safety
///
/// While the cache is off, the program must not import the same export data twice in this
/// process while a handle from an earlier import of it is alive (or while its free may still be
/// queued), unless the driver is known to count imports. Turning the cache on has no
/// precondition.
pub unsafe fn set_import_cache_enabled(enabled: bool) {
    CACHE_ENABLED.store(enabled, Ordering::SeqCst);
}

/// Whether the IPC import cache is on.
pub fn import_cache_enabled() -> bool {
    CACHE_ENABLED.load(Ordering::SeqCst)
}

/// The number of export datas with a live (or being created or freed) cached import.
pub fn cached_imports() -> usize {
    IMPORTS.len()
}

impl DevicePtrHandle {
    /// The payload another process passes to [`DevicePtrHandle::import_ipc`]. The pointer
    /// must come from an IPC-capable pool.
    pub fn export_ipc(&self) -> Result<IpcPointer> {
        let exportable = self.pool().as_ref().is_some_and(|pool| pool.ipc());
        if !exportable || self.kind() != AllocKind::StreamOrdered {
            return Err(Error::NotExportable {
                what: "only allocations from a pool created with `ipc` set can be exported",
            });
        }
        // SAFETY: all-zero is a valid value of this plain byte struct.
        let mut data: sys::CUmemPoolPtrExportData = unsafe { std::mem::zeroed() };
        let raw = self.as_cu();
        // The driver validates the pointer against the current context.
        let export = || {
            // SAFETY: the allocation is alive; `data` is a valid out-pointer.
            unsafe { driver!(cuMemPoolExportPointer(&mut data, raw)) }
        };
        let pool = self.pool().as_ref().expect("checked above");
        // IPC pools made by `MemoryPoolHandle::create` had their shareable handle exported once
        // at creation, which driver 580 requires before it exports any pointer; every error is
        // returned as the driver gave it.
        in_context_of(pool.context().as_ref().map(ContextHandle::as_cu), export)?;
        Ok(IpcPointer {
            export_data: data.reserved,
            size: self.size() as u64,
        })
    }

    /// Imports an allocation exported by another process, through `pool` (the exporter's pool,
    /// imported with [`MemoryPoolHandle::import_posix_fd`]). The import is freed on `stream`.
    ///
    /// With the cache on (the default), importing the same allocation again while an import
    /// lives returns that same handle, so the memory is unmapped exactly once, after the last
    /// handle drops. A payload that names no live allocation returns the driver's error.
    pub fn import_ipc(
        pool: &MemoryPoolHandle,
        pointer: &IpcPointer,
        stream: &StreamHandle,
    ) -> Result<Self> {
        let size = usize::try_from(pointer.size).map_err(|_| Error::BadIpcPayload {
            reason: "IPC pointer size does not fit in usize".into(),
        })?;
        if size == 0 {
            return Err(Error::BadIpcPayload {
                reason: "IPC pointer of size 0".into(),
            });
        }
        if !import_cache_enabled() {
            return import_uncached(pool, pointer, size, stream, None);
        }
        IMPORTS.get_or_try_insert_with(pointer.export_data, |slot| {
            import_uncached(pool, pointer, size, stream, Some(slot))
        })
    }
}

fn import_uncached(
    pool: &MemoryPoolHandle,
    pointer: &IpcPointer,
    size: usize,
    stream: &StreamHandle,
    slot: Option<CacheSlot<[u8; TOKEN], DevicePtrHandle>>,
) -> Result<DevicePtrHandle> {
    let order = StreamOrder::new(stream.bound()?)?;
    let mut data = sys::CUmemPoolPtrExportData {
        reserved: pointer.export_data,
    };
    let mut import = || {
        // SAFETY: the pool is alive; `data` and `raw` are valid for the call. The driver
        // validates the export data and returns an error for data it does not recognise.
        out(|raw| unsafe { driver!(cuMemPoolImportPointer(raw, pool.as_cu(), &mut data)) })
    };
    // Freed like any import, on its stream, by the handle's deleter (also when the caller's
    // context cannot be restored after the import).
    let origin = Origin::Imported(slot);
    let wrap = |raw| DevicePtrHandle::stream_ordered(raw, size, Some(pool.clone()), order, origin);
    let imported = in_context_of(pool.context().as_ref().map(ContextHandle::as_cu), || {
        import().map(wrap)
    })?;
    let raw = imported.as_cu();
    // The payload's size is only a claim: bounds checks of the safe methods trust the handle's
    // size, so it must not exceed what the driver mapped. (Dropping `imported` on a mismatch
    // frees the import again.)
    let (base, mapped) = mapped_range(pool, raw)?;
    // Driver 580 reports a range start of 0 for an import of pinned host memory (through the
    // pointer attributes); the size is what the bounds checks rely on.
    if (base != raw && base != 0) || mapped < size {
        return Err(Error::BadIpcPayload {
            reason: format!(
                "the IPC payload claims {size} bytes, but the driver mapped {mapped} bytes at \
                 {base:#x} for the import at {raw:#x}"
            ),
        });
    }
    Ok(imported)
}

/// The base and size of the allocation that contains `raw`, as the driver knows it, asked
/// with calls that succeed (a failing call is an error in the user's compute-sanitizer run):
/// `cuMemGetAddressRange` for device memory; for an import of pinned host memory, which it
/// answers with `CUDA_ERROR_NOT_FOUND` on driver 580, the pointer's range attributes.
fn mapped_range(pool: &MemoryPoolHandle, raw: CUdeviceptr) -> Result<(CUdeviceptr, usize)> {
    use sys::CUpointer_attribute::{
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
    };
    in_context_of(pool.context().as_ref().map(ContextHandle::as_cu), || {
        let attribute = |attribute, out: *mut std::ffi::c_void| {
            // SAFETY: `out` points to a value of the attribute's type (a 32-bit memory type, a
            // 64-bit address or a `size_t`); `raw` was just mapped by the driver.
            unsafe { driver!(cuPointerGetAttribute(out, attribute, raw)) }
        };
        let mut kind = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        attribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (&raw mut kind).cast())?;
        let (mut base, mut size) = (0, 0);
        if kind != sys::CUmemorytype::CU_MEMORYTYPE_HOST {
            // SAFETY: both out-pointers are valid; `raw` was just mapped by the driver.
            match unsafe { driver!(cuMemGetAddressRange_v2(&mut base, &mut size, raw)) } {
                Ok(()) => return Ok((base, size)),
                // A driver that calls host memory device memory: asked as host memory below.
                Err(error) if error.code() == Some(sys::CUresult::CUDA_ERROR_NOT_FOUND) => {}
                Err(error) => return Err(error),
            }
        }
        attribute(
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            (&raw mut base).cast(),
        )?;
        attribute(CU_POINTER_ATTRIBUTE_RANGE_SIZE, (&raw mut size).cast())?;
        Ok((base, size))
    })
}
