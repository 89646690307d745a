//! The crate's error type: a driver status with its name, or a clear reason for bad input.

use cudarc::driver::sys::CUresult;

/// What went wrong in a call to this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No CUDA driver library (`libcuda.so`) could be loaded on this machine.
    #[error("no CUDA driver found: libcuda could not be loaded")]
    DriverNotFound,
    /// A driver call returned an error status.
    #[error("{call} failed: {name} ({code})", code = *.code as u32)]
    Driver {
        /// The driver function that failed.
        call: &'static str,
        /// The status it returned.
        code: CUresult,
        /// The status's name, as `cuGetErrorName` gives it.
        name: &'static str,
    },
    /// The driver is older than this crate, or than the function called, needs.
    #[error("the CUDA driver reports version {version}, which is too old: {needed}")]
    DriverTooOld {
        /// The version `cuDriverGetVersion` reported (1000 × major + 10 × minor).
        version: i32,
        /// What needs a newer driver, and which version.
        needed: &'static str,
    },
    /// The driver lacks a function newer than CUDA 12.0: it is older than the version that
    /// brought it, or does not export it. Nothing was called.
    #[error("{function} needs CUDA {}.{} or newer, which this driver is not", needs / 1000, needs % 1000 / 10)]
    NotSupported {
        /// The driver function that would have been called.
        function: &'static str,
        /// The CUDA version that brought it (1000 × major + 10 × minor).
        needs: i32,
    },
    /// An argument was rejected before any driver call.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No NVRTC library (`libnvrtc.so`) could be loaded on this machine.
    #[error("no NVRTC found: libnvrtc could not be loaded")]
    NvrtcNotFound,
    /// An NVRTC call failed; for a failed compilation, `log` is the compiler's log.
    #[error("{call} failed: {status}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Nvrtc {
        /// The NVRTC function that failed.
        call: &'static str,
        /// Its status, as `nvrtcGetErrorString` names it.
        status: String,
        /// The program's compilation log (empty when not a compilation).
        log: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The driver status, for `Error::Driver`.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            Error::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether this is the status the driver returns once it has shut down at process exit.
    pub fn is_deinitialized(&self) -> bool {
        self.code() == Some(CUresult::CUDA_ERROR_DEINITIALIZED)
    }
}
