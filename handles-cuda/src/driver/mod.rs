//! The driver itself: loading it, its version, its devices, and the raw API.
//!
//! # Guide
//!
//! | to | use |
//! |---|---|
//! | find out whether a driver is there | [`is_available`]; every call returns [`Error::DriverNotFound`](crate::Error::DriverNotFound) otherwise |
//! | count devices, read the version | [`device_count`], [`driver_version`] (at least [`MIN_DRIVER_VERSION`]) |
//! | know which newer functions this driver has | [`newer_functions`]; a missing one is [`Error::NotSupported`](crate::Error::NotSupported), never a panic |
//! | call the driver directly | [`sys`], with raw values from the handles (`as_raw`) |
//!
//! The library is loaded on first use, not at start-up: a program without a driver starts and
//! gets `Err`.
//!
//! # How it works
//!
//! Knows no handle type.
//!
//! - **Driver loading.** cudarc panics on a missing library or symbol, so every entry point first
//!   calls `ensure_loaded()`: once, it checks the library, `cuInit`, and a driver of at least CUDA
//!   12.0 (`Error::DriverNotFound` / `DriverTooOld`). Newer functions are listed in the
//!   capability table and called through `probed!` (`Error::NotSupported` without them;
//!   `cuEventElapsedTime_v2` falls back to `cuEventElapsedTime`).

pub(crate) mod call;
pub(crate) mod capture;
pub(crate) mod capture_sync;
pub(crate) mod current;
pub(crate) mod load;

pub use self::load::{
    MIN_DRIVER_VERSION, device_count, driver_version, ensure_loaded, is_available, mem_get_info,
    newer_functions,
};
/// The raw driver API, as used by this crate: cudarc's bindings, documented by cudarc
/// (`cudarc::driver::sys`), and not listed again in these docs.
#[doc(no_inline)]
pub use cudarc::driver::sys;
