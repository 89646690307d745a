//! Interprocess pools: exporting a pool as a POSIX file descriptor, and importing one.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use cudarc::driver::sys;

use crate::driver::call::{driver, out, out_fd};
use crate::driver::current::in_context;
use crate::driver::load::ensure_loaded;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::ipc::fd_taking::take_fd;
use crate::memory::pool::{MemoryPool, MemoryPoolHandle, resident_device};

const POSIX_FILE_DESCRIPTOR: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

impl MemoryPoolHandle {
    /// Exports the pool as a POSIX file descriptor for another process to import. The pool
    /// must have been created with `ipc` set.
    pub fn export_posix_fd(&self) -> Result<OwnedFd> {
        if !self.ipc() {
            return Err(Error::NotExportable {
                what: "only pools created with `ipc` set can be exported",
            });
        }
        out_fd(|fd| {
            // SAFETY: the pool is alive; for POSIX descriptors the driver writes an `int` to
            // `fd`, which points to one.
            unsafe {
                driver!(cuMemPoolExportToShareableHandle(
                    fd,
                    self.as_cu(),
                    POSIX_FILE_DESCRIPTOR,
                    0
                ))
            }
        })
    }

    /// Imports a pool that another process exported with [`MemoryPoolHandle::export_posix_fd`],
    /// on device `ordinal` of this process (whose primary context the import keeps alive, and
    /// in which its pointers are imported). The descriptor is not consumed. The returned handle
    /// owns the imported pool.
    ///
    /// Its location is the one device the driver reports access from at the import (the device
    /// holding its memory). Where that is not one device (a host pool's memory, reached by no
    /// device until granted here), the location is unknown, and every device's use of its
    /// memory needs this process's grant ([`MemoryPoolHandle::set_peer_access`]), checked with
    /// the driver at each use.
    pub fn import_posix_fd(fd: BorrowedFd<'_>, ordinal: usize) -> Result<Self> {
        ensure_loaded()?;
        let context = ContextHandle::primary(ordinal)?;
        // The driver takes a POSIX descriptor's value in place of the pointer.
        let handle = fd.as_raw_fd() as usize as *mut std::ffi::c_void;
        in_context(context.as_cu(), || {
            // SAFETY: `raw` is a valid out-pointer; the driver duplicates what it needs of
            // the descriptor and does not close `fd`.
            let raw = out(|raw| unsafe {
                driver!(cuMemPoolImportFromShareableHandle(
                    raw,
                    handle,
                    POSIX_FILE_DESCRIPTOR,
                    0
                ))
            })?;
            let record = MemoryPool::owned(context.clone(), resident_device(raw), true);
            // SAFETY: the imported pool is ours to destroy with `cuMemPoolDestroy`.
            Ok(unsafe { MemoryPoolHandle::from_raw(raw, record) })
        })
    }

    /// Imports a pool that process `pid` exported with
    /// [`MemoryPoolHandle::export_posix_fd`] and whose descriptor number there is `fd`, with no
    /// socket between the processes: the descriptor is taken with [`take_fd`] (`pidfd_getfd`),
    /// imported on device `ordinal` as [`MemoryPoolHandle::import_posix_fd`] does, and closed
    /// again (the imported pool does not need it). The exporter must keep its descriptor open
    /// until this returns.
    ///
    /// # Errors
    ///
    /// [`Error::FdTake`] where the kernel or the permissions refuse the descriptor (see
    /// [`take_fd`] for who may take from whom); otherwise those of `import_posix_fd`.
    ///
    /// [`take_fd`]: crate::ipc::take_fd
    pub fn import_from_process(pid: u32, fd: i32, ordinal: usize) -> Result<Self> {
        ensure_loaded()?;
        let taken = take_fd(pid, fd)?;
        MemoryPoolHandle::import_posix_fd(taken.as_fd(), ordinal)
    }
}
