//! The edges of the C interface that every layer meets: writing through the caller's
//! out-pointers, reading its in-pointers, and the driver release the simulator plays.
//!
//! # Safety
//!
//! The callers are C callers of the CUDA driver API: a non-null pointer they pass follows
//! that API's contract (valid for the read or write of its type).

use crate::base::errors::INVALID_VALUE;
use crate::base::types::CuResult;

/// Writes `value` through an out-pointer, rejecting null.
pub(crate) fn put<T>(ptr: *mut T, value: T) -> Result<(), CuResult> {
    if ptr.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null out-pointer from the caller, valid for a write of `T` by the API's
    // contract.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Reads an in-pointer, rejecting null.
pub(crate) fn get<T: Copy>(ptr: *const T) -> Result<T, CuResult> {
    if ptr.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null in-pointer from the caller, valid for a read of `T` by the API's
    // contract.
    Ok(unsafe { ptr.read_unaligned() })
}

/// The driver version the simulator plays: `CUDA_SIM_DRIVER_VERSION`, else 13000.
pub fn simulated_version() -> i32 {
    std::env::var("CUDA_SIM_DRIVER_VERSION")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(13000)
}
