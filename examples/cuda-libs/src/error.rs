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
    /// A buffer smaller than the call reads or writes through it.
    #[error("invalid argument: {what} needs {needs} bytes; the buffer has {has}")]
    TooSmall {
        /// The argument and its shape, in words (`"A (4x8 f32)"`).
        what: String,
        /// The bytes the call touches.
        needs: usize,
        /// The buffer's size in bytes.
        has: usize,
    },
    /// A dimension, count or shape larger than the library's interface can pass (an `i32`)
    /// or than the address space holds.
    #[error("invalid argument: {what} of {value} is too large")]
    TooLarge {
        /// What it is, in words (`"dimension"`, `"world size"`, `"element count"`).
        what: &'static str,
        /// The value asked for.
        value: usize,
    },
    /// An output buffer that overlaps an input.
    #[error("invalid argument: {output} overlaps an input")]
    Overlap {
        /// The output, by its name in the call.
        output: &'static str,
    },
    /// Lists that must match one to one (a stream per distinct device, a send and a receive
    /// buffer per communicator) do not, or are empty.
    #[error("invalid argument: {what}")]
    Mismatched {
        /// The rule, in words.
        what: &'static str,
    },
    /// The same communicator twice in one group call, which would wait for itself.
    #[error("invalid argument: a communicator is listed more than once")]
    DuplicateComm,
    /// A rank that is not below the world size.
    #[error("invalid argument: rank {rank} is not below the world size {world_size}")]
    BadRank {
        /// The rank asked for.
        rank: usize,
        /// The number of ranks.
        world_size: usize,
    },
    /// A stream or context whose device this crate cannot tell (a stream not made by
    /// `StreamHandle::create`, a context reference of unknown device).
    #[error(
        "invalid argument: the {what}'s device is unknown; use a stream made by StreamHandle::create"
    )]
    UnknownDevice {
        /// `"stream"` or `"context"`.
        what: &'static str,
    },
    /// An argument rejected for a reason no other variant names (the examples' command lines).
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
