//! Device code: NVRTC programs, libraries, kernels, typed launches.
//!
//! # Guide
//!
//! | to | use |
//! |---|---|
//! | compile CUDA C++ and load it, in one call | [`LibraryHandle::from_cuda_source`] (for a [`Device`](crate::exec::Device)) |
//! | compile CUDA C++ at run time, step by step | [`ProgramHandle::new`], [`ProgramHandle::compile_for`] (the device's architecture) or [`ProgramHandle::compile`] (your options), `ptx` |
//! | load PTX, a cubin or a fatbin | [`LibraryHandle::load_ptx`], [`LibraryHandle::load_data`], [`LibraryHandle::load_file`] |
//! | find a kernel | [`KernelHandle::get`]; a name it lacks is [`Error::KernelNotFound`](crate::Error::KernelNotFound) (declare kernels `extern "C"`, or their names are mangled) |
//! | launch it | [`KernelHandle::checked`] with ready-made bounds rules ([`check`]), or [`KernelHandle::typed`] with a hand-written [`BoundsCheck`]: the one `unsafe` promise; then [`TypedKernel::launch`] with a [`LaunchConfig`] ([`LaunchConfig::for_elements`], [`LaunchConfig::with_shared_mem`]) |
//! | pass memory | [`Elements<T>`] for a [`crate::DeviceBuffer<T>`] (bounds in elements), [`Buffer`] for bytes; scalars as themselves |
//! | let a graph's kernel set a conditional node's condition | [`Conditional`] for a [`ConditionalHandle`] (kernel nodes of its graph only) |
//! | cooperative or programmatic dependent launches, clusters, priorities | [`TypedKernel::launch_ex`] with [`LaunchOptions`] (see [`launch_attributes`]) |
//! | ask about occupancy | [`KernelHandle::max_active_blocks_per_sm`], [`KernelHandle::potential_block_size`], [`KernelHandle::available_dynamic_shared`], [`KernelHandle::max_active_clusters`] |
//! | pass a TMA descriptor | [`TensorMap::tiled`] from a [`crate::DeviceBuffer<T>`] and a [`TiledTensor`]; the kernel takes a `const __grid_constant__ CUtensorMap` |
//! | pass an im2col TMA descriptor (convolutions) | [`TensorMap::im2col`] from a [`crate::DeviceBuffer<T>`] and an [`Im2colTensor`] (corners, channels per pixel, pixels per column, [`Interleave`]) |
//!
//! ```no_run
//! use handles_cuda::prelude::*;
//!
//! # fn main() -> handles_cuda::Result<()> {
//! let context = ContextHandle::primary(0)?;
//! let stream = StreamHandle::new(&context)?;
//! let library = LibraryHandle::from_cuda_source(
//!     r#"extern "C" __global__ void scale(float *xs, unsigned n, float by) {
//!            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//!            if (i < n) xs[i] *= by;
//!        }"#,
//!     &Device::new(0)?,
//! )?;
//! // SAFETY: scale(xs, n, by) touches xs[i] for i < n only, which `per_thread(1, [0])`
//! // (parameter 1 is n, parameter 0 holds at least n elements) covers.
//! let scale = unsafe {
//!     KernelHandle::get(&library, "scale")?
//!         .checked::<(Elements<f32>, u32, f32)>(check::per_thread(1, [0]))?
//! };
//! let xs = DeviceBuffer::from_slice(&vec![1.0f32; 1024], &stream)?;
//! scale.launch(&stream, &LaunchConfig::for_elements(xs.len(), 256)?, (&xs, 1024, 2.0))?;
//! assert!(xs.to_vec(&stream)?.iter().all(|&x| x == 2.0));
//! // n past the buffer: refused before the driver, naming the kernel and the parameter.
//! let refused = scale.launch(&stream, &LaunchConfig::for_elements(2048, 256)?, (&xs, 2048, 2.0));
//! assert!(matches!(refused, Err(Error::OutOfBounds { param: 0, needed: 2048, len: 1024, .. })));
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! - **Libraries, kernels, launches.** `Library` (context-independent `cuLibraryLoadData`; the
//!   image's size headers are checked first, since the driver takes no length) → `Kernel` (no
//!   deleter: it goes with its library; registered, one handle per raw kernel). The one unsafe
//!   promise is `KernelHandle::typed` or `checked`: parameter types (checked against
//!   `cuKernelGetParamInfo`, counted by `cuKernelGetParamCount` or from the image, PTX or
//!   cubin, so that no call fails) and a bounds check under which the kernel stays in its buffers; a refused
//!   launch names the kernel (`OutOfBounds`). A launch checks the
//!   configuration against the kernel's limits on the stream's device (cached per device), then
//!   reports each `Buffer` argument as used on the stream (the ordering rule above) and notes the
//!   context in the library, whose unload synchronises every noted context first
//!   (`contexts_used.rs`; one relaxed load per repeated use). Synchronous and pinned-host
//!   allocations use the same context tracking: `cuMemFree` does not wait for streams. Work that
//!   was queued before a failed context restore is still reported (`Queued::then`).

pub mod check;
pub(crate) mod conditional;
pub(crate) mod config;
pub(crate) mod image;
pub(crate) mod kernel;
pub(crate) mod launch;
pub mod launch_attributes;
pub(crate) mod library;
pub(crate) mod occupancy;
pub(crate) mod params;
pub(crate) mod program;
pub(crate) mod tensor_map;
pub(crate) mod tensor_map_im2col;
pub(crate) mod tensor_map_rules;

pub use self::check::BoundsCheck;
pub use self::conditional::{Conditional, ConditionalHandle};
pub use self::config::LaunchConfig;
pub use self::kernel::{Kernel, KernelAttribute, KernelBox, KernelHandle, KernelWeak};
pub use self::launch::{LaunchOptions, ProgrammaticEvent, TypedKernel};
pub use self::library::{Library, LibraryBox, LibraryHandle, LibraryWeak};
pub use self::occupancy::{OccupancyFlags, PotentialBlockSize, SharedPerBlock};
pub use self::params::{Buffer, KernelParam, KernelParams};
pub use self::program::{Program, ProgramBox, ProgramHandle, ProgramWeak, nvrtc_version};
pub use self::tensor_map::{TensorDescription, TensorElement, TensorMap, TiledTensor};
pub use self::tensor_map_im2col::Im2colTensor;
pub use self::tensor_map_rules::{Interleave, L2Promotion, OobFill, Swizzle};
pub use crate::memory::Elements;
