//! Sharing between processes: pointers, events, pools, and descriptor passing.
//!
//! - **IPC.** Imports go through a `WeakCache` keyed by the export bytes (nvbug 5570902: duplicate
//!   imports are not counted and the first free unmaps both); `set_import_cache_enabled` is
//!   `unsafe`. An import's size is checked against what the driver mapped. IPC pools export their
//!   handle once at creation, which driver 580 needs before any pointer export.
//!
//! Descriptors travel between processes with `send_fd`/`receive_fd` (a length-prefixed
//! payload and one `SCM_RIGHTS` descriptor per message, received close-on-exec).

pub(crate) mod event;
pub(crate) mod fd_passing;
pub(crate) mod pointer;
pub(crate) mod pool;
pub(crate) mod token;
