//! The names a first program uses, for `use handles_cuda::prelude::*;`: contexts, streams,
//! events, memory, NVRTC, libraries, kernels and their checks, launches, graphs, devices and
//! the error type.
//!
//! ```no_run
//! use handles_cuda::prelude::*;
//!
//! # fn main() -> handles_cuda::Result<()> {
//! let context = ContextHandle::primary(0)?;
//! let stream = StreamHandle::new(&context)?;
//! let (start, end) = (
//!     EventHandle::create(&context, EventFlags::timing())?,
//!     EventHandle::create(&context, EventFlags::timing())?,
//! );
//! let xs = DeviceBuffer::<f32>::zeroed(1 << 20, &stream)?;
//! start.record(&stream)?;
//! xs.as_bytes().memset_async(0, xs.len() * 4, &stream)?;
//! end.record(&stream)?;
//! end.synchronize()?;
//! println!("{} ms", start.elapsed_ms(&end)?);
//! # Ok(()) }
//! ```

pub use crate::code::{
    Buffer, Elements, KernelHandle, LaunchConfig, LaunchOptions, LibraryHandle, ProgramHandle,
    TypedKernel, check,
};
pub use crate::error::{Error, LaunchProblem};
pub use crate::exec::{ContextHandle, Device, EventFlags, EventHandle, StreamFlags, StreamHandle};
pub use crate::graph::{CaptureMode, GraphExecHandle, GraphHandle};
pub use crate::memory::{DeviceBuffer, DevicePtrHandle, MemoryPoolHandle, Pod, PoolProps};
