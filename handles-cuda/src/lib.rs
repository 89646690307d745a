//! RAII handles to CUDA driver resources, declared with `handles_core`'s derive.
//!
//! Every resource is a shared handle: clones are cheap, the resource is destroyed exactly once
//! when the last clone drops, and a handle keeps alive what its resource depends on (a stream
//! its context, a pointer its pool and deallocation stream), so the application may drop
//! things in any order.
//!
//! | handle | owns | keeps alive |
//! |---|---|---|
//! | [`ContextHandle`] | a primary-context retain | — |
//! | [`StreamHandle`] | a stream | its context |
//! | [`EventHandle`] | an event | its context |
//! | [`MemoryPoolHandle`] | a pool | its device's primary context |
//! | [`DevicePtrHandle`] | an allocation | its pool, its context, its deallocation stream |
//! | [`LibraryHandle`] | a loaded library of device code | the contexts its kernels ran in |
//! | [`KernelHandle`] | — (released with its library) | its library |
//! | [`GraphHandle`] | a graph | its context, what its nodes reference |
//! | [`GraphExecHandle`] | an executable graph | its context, what its nodes reference |
//! | [`ProgramHandle`] | an NVRTC program | — |
//! | [`PhysicalAllocationHandle`] | physical memory (`cuMemCreate`) | — |
//! | [`AddressReservationHandle`] | a virtual address range | — |
//! | [`MappingHandle`] | a mapping of physical memory into a range | its allocation and its reservation |
//! | [`GreenContextHandle`] | a green context (a share of the SMs) | — (its streams keep it) |
//!
//! No call needs a context bound to the thread first: each constructor and deleter makes the
//! context it needs current for the call and restores the caller's. The driver library is
//! loaded lazily; without it every entry point returns [`Error::DriverNotFound`].
//!
//! ```no_run
//! use handles_cuda::{ContextHandle, DevicePtrHandle, MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle};
//!
//! # fn main() -> handles_cuda::Result<()> {
//! let context = ContextHandle::primary(0)?;
//! let stream = StreamHandle::create(&context, StreamFlags::default(), 0)?;
//! let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
//! let buffer = DevicePtrHandle::alloc_from_pool(&pool, 1 << 20, &stream)?;
//! buffer.memset_async(0, 1 << 20, &stream)?;
//! drop((context, pool)); // the buffer keeps both alive
//! drop(buffer); // freed on `stream`, then the pool, then the context retain
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod context;
mod contexts_used;
mod contexts_used_protocol;
mod cudarc_interop;
mod device_ptr;
mod driver;
mod error;
mod event;
mod event_recycler;
mod fd_passing;
mod graph;
mod green;
mod image;
mod ipc;
mod kernel;
mod launch;
mod library;
mod lock;
mod pool;
mod pool_tuning;
mod program;
mod scope;
mod stream;
mod stream_order;
mod stream_order_protocol;
mod stream_recycler;
mod thread_cache;
mod vmm;

pub use context::{Context, ContextBox, ContextHandle, ContextWeak, clear_primary_cache};
pub use device_ptr::{AllocKind, DevicePtr, DevicePtrBox, DevicePtrHandle, DevicePtrWeak};
pub use driver::{
    MIN_DRIVER_VERSION, device_count, driver_version, ensure_loaded, is_available, mem_get_info,
};
pub use error::{Error, Result};
pub use event::{Event, EventBox, EventFlags, EventHandle, EventWeak};
pub use event_recycler::{EventRecycler, RecycledEvent, clear_recycled_events};
pub use fd_passing::{MAX_FD_PAYLOAD, receive_fd, send_fd};
pub use graph::{
    Capture, CaptureMode, Graph, GraphBox, GraphExec, GraphExecBox, GraphExecHandle, GraphExecWeak,
    GraphHandle, GraphNode, GraphWeak,
};
pub use green::{GreenContext, GreenContextBox, GreenContextHandle, GreenContextWeak};
pub use ipc::{
    IpcEventHandle, IpcPointer, cached_imports, import_cache_enabled, set_import_cache_enabled,
};
pub use kernel::{Kernel, KernelAttribute, KernelBox, KernelHandle, KernelWeak};
pub use launch::{
    BoundsCheck, Buffer, KernelParam, KernelParams, LaunchConfig, LaunchOptions, TypedKernel,
};
pub use library::{Library, LibraryBox, LibraryHandle, LibraryWeak};
pub use pool::{
    MemoryPool, MemoryPoolBox, MemoryPoolHandle, MemoryPoolWeak, PoolLocation, PoolProps,
};
pub use pool_tuning::{PoolUsage, ReusePolicy};
pub use program::{Program, ProgramBox, ProgramHandle, ProgramWeak, nvrtc_version};
pub use stream::{
    LEGACY_STREAM, PER_THREAD_STREAM, Stream, StreamBox, StreamFlags, StreamHandle, StreamWeak,
};
pub use stream_recycler::{RecycledStream, StreamRecycler, clear_recycled_streams};
pub use vmm::{
    AddressReservation, AddressReservationBox, AddressReservationHandle, AddressReservationWeak,
    FabricHandle, GrowableBuffer, Mapping, MappingBox, MappingHandle, MappingWeak,
    PhysicalAllocation, PhysicalAllocationBox, PhysicalAllocationHandle, PhysicalAllocationWeak,
    Sharing, granularity,
};

/// The raw driver API, as used by this crate (cudarc's bindings).
pub use cudarc::driver::sys;
