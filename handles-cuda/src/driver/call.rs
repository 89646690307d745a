//! The driver-call layer: every driver function is called through [`driver!`], whose status
//! becomes a `Result` that names the call; values come back through [`out`]; deleters map the
//! status of a driver that has shut down with [`deleter_status`].

use std::ffi::CStr;

use cudarc::driver::sys::{self, CUresult};

use crate::error::{Error, Result};

/// Calls the driver function `sys::$function` and turns its status into a `Result` that names
/// the call: `driver!(cuMemFree_v2(raw))` reports a failure as `cuMemFree failed: …`. The name
/// is the function's, without a `_v2` suffix (which versions the ABI, not the API); the form
/// `driver!(cuName_v2(…) as "cuName_v2")` names the call explicitly.
///
/// The expansion calls the `unsafe fn` without an `unsafe` block of its own, so every use sits
/// in the caller's `unsafe` block, under the `// SAFETY:` comment that justifies the call:
///
/// ```text
/// // SAFETY: the handle owns `raw`, and this deleter runs once.
/// unsafe { driver!(cuStreamDestroy_v2(raw)) }
/// ```
macro_rules! driver {
    ($function:ident ( $($argument:expr),* $(,)? )) => {
        $crate::driver::call::check(
            const { $crate::driver::call::api_name(stringify!($function)) },
            $crate::driver::sys::$function($($argument),*),
        )
    };
    ($function:ident ( $($argument:expr),* $(,)? ) as $name:literal) => {
        $crate::driver::call::check($name, $crate::driver::sys::$function($($argument),*))
    };
}
pub(crate) use driver;

/// The API name of the driver symbol `symbol`: the symbol without a `_v2` suffix.
pub(crate) const fn api_name(symbol: &'static str) -> &'static str {
    match symbol.as_bytes() {
        [stem @ .., b'_', b'v', b'2'] => match std::str::from_utf8(stem) {
            Ok(name) => name,
            Err(_) => symbol,
        },
        _ => symbol,
    }
}

/// A value a driver call returns through an out-pointer, and the placeholder it starts as.
pub(crate) trait OutValue: Copy {
    /// The placeholder: null, or zero.
    const EMPTY: Self;
}

impl<T> OutValue for *mut T {
    const EMPTY: Self = std::ptr::null_mut();
}

macro_rules! zero_out_value {
    ($($type:ty),*) => {$(
        impl OutValue for $type {
            const EMPTY: Self = 0;
        }
    )*};
}
zero_out_value!(i32, u64, usize);

/// Runs a driver call that returns one value through an out-pointer, and returns that value:
/// `out(|raw| unsafe { driver!(cuStreamCreate(raw, flags)) })`.
#[inline]
pub(crate) fn out<T: OutValue>(call: impl FnOnce(&mut T) -> Result<()>) -> Result<T> {
    let mut value = T::EMPTY;
    call(&mut value)?;
    Ok(value)
}

/// Turns a status into a `Result`, naming the call that returned it.
#[inline]
pub(crate) fn check(call: &'static str, code: CUresult) -> Result<()> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(driver_error(call, code))
    }
}

#[cold]
pub(crate) fn driver_error(call: &'static str, code: CUresult) -> Error {
    Error::Driver {
        call,
        code,
        name: error_name(code),
    }
}

fn error_name(code: CUresult) -> &'static str {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: only reached after a driver call returned, so the library is loaded; the driver
    // writes a pointer to a static string or leaves `name` null.
    let status = unsafe { sys::cuGetErrorName(code, &mut name) };
    if status != CUresult::CUDA_SUCCESS || name.is_null() {
        return "CUDA_ERROR_UNKNOWN_STATUS";
    }
    // SAFETY: the driver returns a NUL-terminated string with static lifetime.
    unsafe { CStr::from_ptr(name) }
        .to_str()
        .unwrap_or("CUDA_ERROR_UNKNOWN_STATUS")
}

/// Runs a driver call that exports a POSIX file descriptor through an `int` out-pointer
/// (`cuMemPoolExportToShareableHandle`, `cuMemExportToShareableHandle`) and returns the
/// descriptor, owned.
pub(crate) fn out_fd(
    export: impl FnOnce(*mut std::ffi::c_void) -> Result<()>,
) -> Result<std::os::fd::OwnedFd> {
    let mut fd: std::ffi::c_int = -1;
    export((&mut fd as *mut std::ffi::c_int).cast())?;
    // SAFETY: the driver returned a fresh descriptor, which nothing else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// The status of a query (`cuStreamQuery`, `cuEventQuery`) as "has the work completed":
/// `CUDA_ERROR_NOT_READY` is `false`, any other error is an error.
#[inline]
pub(crate) fn completed(call: &'static str, code: CUresult) -> Result<bool> {
    match code {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        status => Err(driver_error(call, status)),
    }
}

/// Maps the status of a deleter's driver call. `CUDA_ERROR_DEINITIALIZED` means the driver has
/// already shut down at process exit and released everything itself: that is not a failure
/// worth reporting (a query then answers `T::default()`).
#[inline]
pub(crate) fn deleter_status<T: Default>(result: Result<T>) -> Result<T> {
    match result {
        Err(error) if error.is_deinitialized() => Ok(T::default()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::api_name;

    #[test]
    fn api_names_drop_only_a_v2_suffix() {
        assert_eq!(api_name("cuMemFree_v2"), "cuMemFree");
        assert_eq!(api_name("cuStreamDestroy_v2"), "cuStreamDestroy");
        assert_eq!(api_name("cuMemFreeAsync"), "cuMemFreeAsync");
        assert_eq!(api_name("cuCtxPushCurrent_v2x"), "cuCtxPushCurrent_v2x");
        assert_eq!(api_name("_v2"), "");
    }
}
