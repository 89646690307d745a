//! Device code: images, libraries, kernels, launches, and NVRTC programs.
//!
//! - **Libraries, kernels, launches.** `Library` (context-independent `cuLibraryLoadData`; the
//!   image's size headers are checked first, since the driver takes no length) → `Kernel` (no
//!   deleter: it goes with its library; registered, one handle per raw kernel). The one unsafe
//!   promise is `KernelHandle::typed`: parameter types (checked against `cuKernelGetParamInfo`)
//!   and a bounds check under which the kernel stays in its buffers. A launch checks the
//!   configuration against the kernel's limits on the stream's device (cached per device), then
//!   reports each `Buffer` argument as used on the stream (the ordering rule above) and notes the
//!   context in the library, whose unload synchronises every noted context first
//!   (`contexts_used.rs`; one relaxed load per repeated use). Synchronous and pinned-host
//!   allocations use the same context tracking: `cuMemFree` does not wait for streams. Work that
//!   was queued before a failed context restore is still reported (`Queued::then`).

pub(crate) mod image;
pub(crate) mod kernel;
pub(crate) mod launch;
pub(crate) mod library;
pub(crate) mod params;
pub(crate) mod program;
