//! One error type for the four libraries.

/// What went wrong in a call of this crate.
#[derive(Debug, thiserror::Error)]
pub enum LibError {
    /// The library could not be loaded on this machine.
    #[error("{0} is not installed (its shared library could not be loaded)")]
    Missing(&'static str),
    /// A call of the library returned an error status.
    #[error("{call} failed: {status}")]
    Status {
        /// The function that failed.
        call: &'static str,
        /// Its status, as the library names it.
        status: String,
    },
    /// A handles-cuda call failed.
    #[error(transparent)]
    Cuda(#[from] handles_cuda::Error),
    /// An argument was rejected before any call.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// `Ok` for a library's success status, else the status named by its `Debug` form.
pub(crate) fn check<S: std::fmt::Debug + PartialEq>(
    call: &'static str,
    status: S,
    success: S,
) -> Result<(), LibError> {
    if status == success {
        Ok(())
    } else {
        Err(LibError::Status {
            call,
            status: format!("{status:?}"),
        })
    }
}

/// `Err(Missing)` unless `present`.
pub(crate) fn require(name: &'static str, present: bool) -> Result<(), LibError> {
    if present {
        Ok(())
    } else {
        Err(LibError::Missing(name))
    }
}
