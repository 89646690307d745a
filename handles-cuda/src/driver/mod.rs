//! The ground floor: loading the driver, calling it, the one context scope, and capture state.
//! Knows no handle type.
//!
//! - **Driver loading.** cudarc panics on a missing library or symbol, so every entry point first
//!   calls `ensure_loaded()`: once, it checks the library, `cuInit`, and a driver of at least CUDA
//!   12.0 (`Error::DriverNotFound` / `DriverTooOld`). Newer functions are listed in the
//!   capability table and called through `probed!` (`Error::NotSupported` without them;
//!   `cuEventElapsedTime_v2` falls back to `cuEventElapsedTime`).

pub(crate) mod call;
pub(crate) mod capture;
pub(crate) mod current;
pub(crate) mod load;
