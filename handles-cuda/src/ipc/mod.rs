//! Sharing with other processes: memory pools, pointers, events, and descriptor passing.
//!
//! # Guide
//!
//! | to | use |
//! |---|---|
//! | share a pool | create it with `PoolProps { ipc: true, .. }`, [`MemoryPoolHandle::export_posix_fd`](crate::MemoryPoolHandle::export_posix_fd), send the descriptor with [`send_fd`]; the other side [`receive_fd`] and [`MemoryPoolHandle::import_posix_fd`](crate::MemoryPoolHandle::import_posix_fd) |
//! | share a buffer of that pool | [`DevicePtrHandle::export_ipc`](crate::DevicePtrHandle::export_ipc) gives an [`IpcPointer`] (bytes to send); [`DevicePtrHandle::import_ipc`](crate::DevicePtrHandle::import_ipc) maps it |
//! | take a pool's descriptor from a process whose pid and descriptor number you know, with no socket | [`MemoryPoolHandle::import_from_process`](crate::MemoryPoolHandle::import_from_process), or [`take_fd`] for any descriptor (`pidfd_getfd`, Linux 5.6+); the exporter may name its taker with [`allow_fd_taking_by`] |
//! | order work across processes | an interprocess [`EventHandle`](crate::EventHandle): `export_ipc` gives an [`IpcEventHandle`] |
//!
//! Imports are cached by their export bytes, so a second import of the same buffer is the same
//! mapping (the driver would otherwise unmap both on the first free). Every import's size is checked
//! against what the driver mapped, and bytes from another process are parsed, never trusted.
//!
//! # How it works
//!
//! - **IPC.** Imports go through a `WeakCache` keyed by the export bytes (nvbug 5570902: duplicate
//!   imports are not counted and the first free unmaps both); `set_import_cache_enabled` is
//!   `unsafe`. An import's size is checked against what the driver mapped. IPC pools export their
//!   handle once at creation, which driver 580 needs before any pointer export.
//!
//! Descriptors travel between processes with `send_fd`/`receive_fd` (a length-prefixed
//! payload and one `SCM_RIGHTS` descriptor per message, received close-on-exec), or are taken
//! with `take_fd` (`pidfd_open` + `pidfd_getfd`): the kernel grants that to whoever may
//! ptrace-attach to the exporter (`take_fd`'s docs have the table of who may take from whom), and
//! a refusal is `Error::FdTake` with its errno.

pub(crate) mod event;
pub(crate) mod fd_passing;
pub(crate) mod fd_taking;
pub(crate) mod pointer;
pub(crate) mod pool;
pub(crate) mod token;

pub use self::event::IpcEventHandle;
pub use self::fd_passing::{MAX_FD_PAYLOAD, receive_fd, send_fd};
pub use self::fd_taking::{allow_fd_taking_by, disallow_fd_taking, take_fd};
pub use self::pointer::{
    IpcPointer, cached_imports, import_cache_enabled, set_import_cache_enabled,
};
