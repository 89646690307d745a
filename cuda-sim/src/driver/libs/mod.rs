//! The simulated libraries: cuBLAS (`blas.rs`, its matrix products in `gemm.rs`), cuBLASLt
//! (`blas_lt.rs`, the same products), cuRAND
//! (`rand.rs`) and the CUDA runtime's kernel registration and launch (`runtime.rs`), compiled into the same `libcuda.so` (so they share the driver's memory, streams
//! and clocks) and installed under their names as links to it (`libcublas.so`,
//! `libcublas.so.13`, `libcublasLt.so`, `libcublasLt.so.13`, `libcurand.so`, `libcurand.so.10`,
//! `libcudart.so`, `libcudart.so.13`).
//! Their handles are resources (`resources/library_handles.rs`); each computing call is one
//! stream operation (`Op::Library`) whose footprint is checked like a kernel's. The top
//! layer: it imports from every folder below, and nothing imports it.

use std::sync::Arc;

use crate::api::faults::Statuses;
use crate::base::errors::{DEINITIALIZED, NOT_INITIALIZED};
use crate::base::types::{CuResult, Raw};
use crate::resources::work::{LibraryWork, Op};

/// Like `export_fns!`, for a library answering in its own status codes (`$statuses`): every
/// function counts its call, applies `CUDA_SIM_FAIL` (whose status is then taken as the
/// library's code, given as a number), and turns a panic into the library's internal error.
macro_rules! library_fns {
    ($statuses:expr; $( $(#[$meta:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {$(
        $(#[$meta])*
        #[cfg_attr(not(test), unsafe(no_mangle))]
        #[allow(clippy::missing_safety_doc, non_snake_case)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
            crate::api::faults::call_as(stringify!($name), &$statuses, || -> Result<(), u32> {
                $body
            })
        }
    )*};
}

pub(crate) mod blas;
pub(crate) mod blas_lt;
pub(crate) mod gemm;
pub(crate) mod rand;
pub(crate) mod runtime;

/// A library's answers to the simulator's errors.
pub struct Codes {
    pub statuses: Statuses,
    /// A call before `cuInit` (and that cannot start the driver) or after shutdown.
    pub not_initialized: CuResult,
    /// Work that failed to run (an out-of-bounds range, a destroyed stream).
    pub execution_failed: CuResult,
    /// A bad argument.
    pub invalid_value: CuResult,
}

impl Codes {
    /// The library's status for the driver's `code`, from work issued on a stream.
    pub fn status_of_work(&self, code: CuResult) -> CuResult {
        match code {
            DEINITIALIZED | NOT_INITIALIZED => self.not_initialized,
            _ => self.execution_failed,
        }
    }

    /// The library's status for the driver's `code`, from a handle's lookup.
    pub fn status_of_lookup(&self, code: CuResult) -> CuResult {
        let _ = code;
        self.not_initialized
    }
}

/// Starts the driver as the CUDA runtime under cuBLAS and cuRAND does (`cuInit(0)`).
fn start(codes: &Codes) -> Result<(), CuResult> {
    crate::init(0).map_err(|_| codes.not_initialized)
}

/// Runs `f` on the simulator, with the driver's errors as `codes`' lookup errors.
fn with_sim<T>(
    codes: &Codes,
    f: impl FnOnce(&mut crate::Sim) -> Result<T, CuResult>,
) -> Result<T, CuResult> {
    crate::with_sim(f).map_err(|code| codes.status_of_lookup(code))
}

/// Issues `work` on `stream` (0: the default stream of the current context) as one stream
/// operation, with `call`'s name in the messages.
fn issue(
    codes: &Codes,
    call: &str,
    stream: Raw,
    work: impl LibraryWork + 'static,
) -> Result<(), CuResult> {
    crate::api::exports::stream_work(Some(stream), call, Op::Library(Arc::new(work)))
        .map_err(|code| codes.status_of_work(code))
}

/// Writes `value` through an out-pointer, rejecting null with `invalid`.
fn put<T>(ptr: *mut T, value: T, invalid: CuResult) -> Result<(), CuResult> {
    crate::base::abi::put(ptr, value).map_err(|_| invalid)
}
