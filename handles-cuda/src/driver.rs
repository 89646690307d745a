//! Lazy, checked loading of the driver library.
//!
//! cudarc loads `libcuda` on the first call to any of its functions and panics if the library
//! is missing. Every entry point of this crate calls [`ensure_loaded`] first: it checks once,
//! lazily, that the library loads and that `cuInit` succeeds, and otherwise returns an error.
//! Importing the crate never touches the driver.

use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{Error, Result, check};

static LOADED: OnceLock<Result<()>> = OnceLock::new();

/// Loads and initialises the driver on first use; afterwards one atomic load.
///
/// Returns [`Error::DriverNotFound`] on a machine without an NVIDIA driver, or the status of
/// `cuInit` if the driver is present but cannot initialise (no device, for example).
#[inline]
pub fn ensure_loaded() -> Result<()> {
    LOADED.get_or_init(load).clone()
}

/// Whether the driver library could be loaded and initialised.
pub fn is_available() -> bool {
    ensure_loaded().is_ok()
}

#[cold]
fn load() -> Result<()> {
    // SAFETY: only probes whether the library can be opened; calls nothing in it.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::DriverNotFound);
    }
    // SAFETY: the library is present, so cudarc can resolve `cuInit`.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// The number of CUDA devices.
pub fn device_count() -> Result<usize> {
    ensure_loaded()?;
    let mut count = 0;
    // SAFETY: the driver is loaded; `count` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&mut count)
    })?;
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
    let mut device = 0;
    // SAFETY: the driver is loaded and the ordinal is in range.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut device, ordinal as i32)
    })?;
    Ok(device)
}

/// Free and total memory of the current context's device, in bytes.
pub fn mem_get_info() -> Result<(usize, usize)> {
    ensure_loaded()?;
    let (mut free, mut total) = (0, 0);
    // SAFETY: the driver is loaded; both out-pointers are valid.
    check("cuMemGetInfo", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
}
