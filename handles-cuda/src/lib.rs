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

mod code;
mod cudarc_interop;
mod driver;
mod error;
mod exec;
mod graph;
mod ipc;
mod memory;
mod order;
mod sync;

/// Plain-old-data element types of [`DeviceBuffer`] (`bytemuck`'s traits).
pub use bytemuck::{Pod, Zeroable};
pub use code::kernel::{Kernel, KernelAttribute, KernelBox, KernelHandle, KernelWeak};
pub use code::launch::{BoundsCheck, LaunchConfig, LaunchOptions, TypedKernel};
pub use code::library::{Library, LibraryBox, LibraryHandle, LibraryWeak};
pub use code::params::{Buffer, KernelParam, KernelParams};
pub use code::program::{Program, ProgramBox, ProgramHandle, ProgramWeak, nvrtc_version};
pub use driver::load::{
    MIN_DRIVER_VERSION, device_count, driver_version, ensure_loaded, is_available, mem_get_info,
    newer_functions,
};
pub use error::{Error, LaunchProblem, Result};
pub use exec::context::{Context, ContextBox, ContextHandle, ContextWeak, clear_primary_cache};
pub use exec::event::{Event, EventBox, EventFlags, EventHandle, EventWeak};
pub use exec::event_recycler::{EventRecycler, RecycledEvent, clear_recycled_events};
pub use exec::green::{GreenContext, GreenContextBox, GreenContextHandle, GreenContextWeak};
pub use exec::stream::{
    LEGACY_STREAM, PER_THREAD_STREAM, Stream, StreamBox, StreamFlags, StreamHandle, StreamWeak,
};
pub use exec::stream_recycler::{RecycledStream, StreamRecycler, clear_recycled_streams};
pub use graph::capture::{Capture, CaptureMode};
pub use graph::exec::{GraphExec, GraphExecBox, GraphExecHandle, GraphExecWeak};
pub use graph::nodes::{Graph, GraphBox, GraphHandle, GraphNode, GraphWeak};
pub use ipc::event::IpcEventHandle;
pub use ipc::fd_passing::{MAX_FD_PAYLOAD, receive_fd, send_fd};
pub use ipc::pointer::{
    IpcPointer, cached_imports, import_cache_enabled, set_import_cache_enabled,
};
pub use memory::device_ptr::{AllocKind, DevicePtr, DevicePtrBox, DevicePtrHandle, DevicePtrWeak};
pub use memory::growable::GrowableBuffer;
pub use memory::pool::{
    MemoryPool, MemoryPoolBox, MemoryPoolHandle, MemoryPoolWeak, PoolLocation, PoolProps,
};
pub use memory::pool_tuning::{PoolUsage, ReusePolicy};
pub use memory::reach::AccessGuard;
pub use memory::typed::{DeviceBuffer, Elements};
pub use memory::vmm::{
    AddressReservation, AddressReservationBox, AddressReservationHandle, AddressReservationWeak,
    FabricHandle, Mapping, MappingBox, MappingHandle, MappingWeak, PhysicalAllocation,
    PhysicalAllocationBox, PhysicalAllocationHandle, PhysicalAllocationWeak, Sharing, granularity,
};

/// The raw driver API, as used by this crate (cudarc's bindings).
pub use cudarc::driver::sys;
