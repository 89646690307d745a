//! Lazy, checked loading of the driver library.
//!
//! cudarc loads `libcuda` on the first call to any of its functions and panics if the library
//! is missing, and panics again on the first call of a function the library does not export.
//! Every entry point of this crate calls [`ensure_loaded`] first: it checks once, lazily, that
//! the library loads, that `cuInit` succeeds and that the driver is at least
//! [`MIN_DRIVER_VERSION`], and otherwise returns an error. Functions newer than that minimum
//! are probed before their first use ([`has_function`]) and get a fallback or an error, never
//! a panic. Importing the crate never touches the driver.

use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::driver::call::{driver, out};
use crate::error::{Error, Result};

static LOADED: OnceLock<Result<i32>> = OnceLock::new();

/// The oldest driver this crate supports: CUDA 12.0 (driver 525), which has every function the
/// crate calls unconditionally (stream-ordered pools and their IPC among them). Newer functions
/// are probed; `cuEventElapsedTime_v2` (CUDA 12.8) falls back to `cuEventElapsedTime`.
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// Loads and initialises the driver on first use; afterwards one atomic load.
///
/// Returns [`Error::DriverNotFound`] on a machine without an NVIDIA driver, or the status of
/// `cuInit` if the driver is present but cannot initialise (no device, for example).
#[inline]
pub fn ensure_loaded() -> Result<()> {
    driver_version().map(drop)
}

/// The driver's version (1000 × major + 10 × minor), once the driver is loaded.
pub fn driver_version() -> Result<i32> {
    LOADED.get_or_init(load).clone()
}

/// Whether the loaded driver exports `name` (a NUL-terminated symbol name), checked without
/// resolving it through cudarc, which would panic on a missing symbol.
pub(crate) fn has_function(name: &std::ffi::CStr) -> bool {
    // SAFETY: `unsafe extern "C" fn()` is only looked up, never called.
    unsafe { function::<unsafe extern "C" fn()>(name) }.is_some()
}

/// The driver's function `name`, if the loaded library exports it, for functions that cudarc's
/// bindings of this CUDA version do not declare.
///
/// # Safety
///
/// `F` must be the function's exact C signature (an `unsafe extern "C" fn` type); calling the
/// returned pointer with another signature is undefined behaviour.
pub(crate) unsafe fn function<F: Copy>(name: &std::ffi::CStr) -> Option<F> {
    ensure_loaded().ok()?;
    // SAFETY: the library is loaded; the caller vouches that `F` is the symbol's type, and
    // the library stays loaded for the whole process (cudarc never unloads it).
    unsafe {
        sys::culib()
            .get::<F>(name.to_bytes_with_nul())
            .ok()
            .map(|symbol| *symbol)
    }
}

/// Whether the driver library could be loaded and initialised.
pub fn is_available() -> bool {
    ensure_loaded().is_ok()
}

#[cold]
fn load() -> Result<i32> {
    // SAFETY: only probes whether the library can be opened; calls nothing in it.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::DriverNotFound);
    }
    // SAFETY: the library is present, so cudarc can resolve `cuInit`.
    unsafe { driver!(cuInit(0)) }?;
    // SAFETY: the driver is initialised; `version` is a valid out-pointer.
    let version = out(|version| unsafe { driver!(cuDriverGetVersion(version)) })?;
    if version < MIN_DRIVER_VERSION {
        return Err(Error::DriverTooOld {
            version,
            needed: "handles-cuda needs CUDA 12.0 (driver 525) or newer",
        });
    }
    Ok(version)
}

/// The number of CUDA devices.
pub fn device_count() -> Result<usize> {
    ensure_loaded()?;
    // SAFETY: the driver is loaded; `count` is a valid out-pointer.
    let count = out(|count| unsafe { driver!(cuDeviceGetCount(count)) })?;
    Ok(count.max(0) as usize)
}

/// The driver's device id for an ordinal, rejecting ordinals out of range with a clear error.
pub(crate) fn device(ordinal: usize) -> Result<sys::CUdevice> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(Error::InvalidArgument(format!(
            "device ordinal {ordinal} is out of range: this machine has {count} CUDA device(s)"
        )));
    }
    // SAFETY: the driver is loaded and the ordinal is in range.
    out(|device| unsafe { driver!(cuDeviceGet(device, ordinal as i32)) })
}

/// The ordinal of the driver's device id `device`.
pub(crate) fn ordinal_of(device: sys::CUdevice) -> Result<usize> {
    for ordinal in 0..device_count()? {
        if self::device(ordinal)? == device {
            return Ok(ordinal);
        }
    }
    Err(Error::InvalidArgument(format!(
        "the driver's device {device} is not among this machine's devices"
    )))
}

/// Free and total memory of the current context's device, in bytes.
pub fn mem_get_info() -> Result<(usize, usize)> {
    ensure_loaded()?;
    let (mut free, mut total) = (0, 0);
    // SAFETY: the driver is loaded; both out-pointers are valid.
    unsafe { driver!(cuMemGetInfo_v2(&mut free, &mut total)) }?;
    Ok((free, total))
}
