//! RAII handles to CUDA driver resources, declared with `handles_core`'s derive.
//!
//! Every resource is a shared handle: clones are cheap, the resource is destroyed exactly once
//! when the last clone drops, and a handle keeps alive what its resource depends on (a stream
//! its context, a pointer its pool and deallocation stream), so the application may drop
//! things in any order. Safe calls cannot free memory a stream may still use, touch memory
//! outside an allocation, or run in a destroyed context.
//!
//! # Where things are
//!
//! The root holds the types nearly every program names; everything else lives in the module for
//! its folder, each with a guide that starts from what you want to do. A first program imports
//! everything it needs with `use handles_cuda::prelude::*;` ([`prelude`]).
//!
//! | module | for | main types |
//! |---|---|---|
//! | [`memory`] | allocating, copying, pools, virtual memory | [`DeviceBuffer`], [`DevicePtrHandle`], [`MemoryPoolHandle`], [`memory::MappingHandle`] |
//! | [`exec`] | devices, contexts, streams, events, recyclers, green contexts | [`exec::Device`], [`ContextHandle`], [`StreamHandle`], [`EventHandle`], [`exec::EventRecycler`] |
//! | [`code`] | NVRTC, libraries, kernels, bounds checks, typed launches | [`code::ProgramHandle`], [`LibraryHandle`], [`KernelHandle`], [`code::Elements`], [`code::check`] |
//! | [`graph`] | captured and hand-built graphs, replays | [`graph::GraphHandle`], [`graph::GraphExecHandle`], [`graph::Capture`] |
//! | [`ipc`] | pools, buffers and events shared between processes | [`ipc::IpcPointer`], [`ipc::send_fd`], [`ipc::take_fd`] |
//! | [`interop`] | handing objects to and from cudarc | `from_cudarc`, `to_cudarc` |
//! | [`driver`] | loading the driver, versions, the raw API | [`driver::device_count`], `driver::sys` (cudarc's bindings, not listed here) |
//!
//! Errors are one enum, [`Error`], whose variants carry their values (`OutOfRange { offset, len,
//! size }`, `NotSupported { function, needs }`, ...), so callers match rather than parse text.
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
//! | [`graph::GraphHandle`] | a graph | its context, what its nodes reference |
//! | [`graph::GraphExecHandle`] | an executable graph | its context, what its nodes reference |
//! | [`code::ProgramHandle`] | an NVRTC program | — |
//! | [`memory::PhysicalAllocationHandle`] | physical memory (`cuMemCreate`) | — |
//! | [`memory::AddressReservationHandle`] | a virtual address range | — |
//! | [`memory::MappingHandle`] | a mapping of physical memory into a range | its allocation and its reservation |
//! | [`exec::GreenContextHandle`] | a green context (a share of the SMs) | — (its streams keep it) |
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
//!
//! # Features
//!
//! - `dynamic-loading` (default) or `dynamic-linking`: how cudarc finds `libcuda`, exactly one.
//!   Loaded on first use, a program without a driver starts and gets `Err`; linked, the build
//!   needs the libraries (under `CUDA_PATH`).
//! - `cuda-12080`, `cuda-12090`, `cuda-13000` (default), `cuda-13010`: the CUDA headers cudarc's
//!   bindings are generated from. This is the newest API the crate can call, not the oldest driver
//!   it runs on: any driver of CUDA 12.0 or newer loads, and a function it lacks is
//!   [`Error::NotSupported`] (see [`driver::newer_functions`]). Bindings from 13.2 on are not offered
//!   yet (their `CUmemLocation` is a union this crate does not fill), nor older than 12.8 (not
//!   built or tested here).
//! - `live-count`: per-type counts of live handles, for leak tests.
//! - `tracing`: a `tracing` event for every handle created and destroyed.
#![deny(missing_docs)]

// cudarc takes exactly one linking mode, and this crate's driver probing follows the same
// choice: without one of the two, a downstream build would get cudarc's run-time loading
// (through its fallback feature) with this crate's link-time probing, which misses functions.
#[cfg(not(any(feature = "dynamic-loading", feature = "dynamic-linking")))]
compile_error!(
    "handles-cuda needs exactly one of its features `dynamic-loading` (the default) or \
     `dynamic-linking`; with `default-features = false`, add one of them"
);
#[cfg(all(feature = "dynamic-loading", feature = "dynamic-linking"))]
compile_error!(
    "handles-cuda's features `dynamic-loading` and `dynamic-linking` exclude each other: \
     choose one"
);

pub mod code;
pub mod driver;
pub mod exec;
pub mod graph;
pub mod interop;
pub mod ipc;
pub mod memory;
pub mod prelude;

mod error;
mod order;
mod sync;

pub use code::{KernelHandle, LaunchConfig, LibraryHandle};
pub use error::{Error, GraphRule, LaunchProblem, Result, TensorMapProblem};
pub use exec::{ContextHandle, EventHandle, StreamFlags, StreamHandle};
pub use memory::{DeviceBuffer, DevicePtrHandle, MemoryPoolHandle, Pod, PoolProps, Zeroable};
