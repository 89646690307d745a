//! NVRTC programs (`nvrtcProgram`): CUDA C++ source compiled at run time to PTX or a cubin,
//! declared with the same derive as the driver's resources, on a second library.
//!
//! NVRTC is loaded on first use, like the driver: without it every call is
//! [`Error::NvrtcNotFound`], never a panic. One program must not be used by two threads at once
//! (NVRTC is thread-safe across programs only), so each handle serialises its calls with a
//! lock of its own.

use std::ffi::{CStr, CString, c_char};
use std::sync::{Mutex, MutexGuard, OnceLock};

use cudarc::nvrtc::sys::{self as nvrtc, nvrtcProgram, nvrtcResult};
use handles_core::ResourceHandle;

use crate::error::{Error, Result};
use crate::exec::device::Device;
use crate::sync::lock;

/// A CUDA C++ program for the runtime compiler.
///
/// Ownership: [`ProgramHandle::new`] owns the program and destroys it
/// (`nvrtcDestroyProgram`) when the last clone drops. Keeps alive: nothing.
#[derive(ResourceHandle)]
#[handle(raw = nvrtcProgram, accessor = as_raw, delete = destroy_program)]
pub struct Program {
    /// The program's name, as given to the compiler (used in its messages).
    pub name: String,
    /// Serialises every NVRTC call on this program.
    calls: Mutex<()>,
}
// SAFETY: NVRTC lets a program be used and destroyed from any thread, one call at a time; the
// record's lock makes every call through a handle exclusive, and the deleter runs when no other
// handle is left.
unsafe impl handles_core::ThreadSafe for Program {}

fn destroy_program(raw: nvrtcProgram, _: &Program) -> Result<()> {
    let mut raw = raw;
    // SAFETY: the handle owns `raw`, this deleter runs once, and no other call can be running
    // on it (no handle is left to make one).
    status("nvrtcDestroyProgram", unsafe {
        nvrtc::nvrtcDestroyProgram(&mut raw)
    })
}

/// Loads NVRTC on first use; afterwards one atomic load.
fn ensure_nvrtc() -> Result<()> {
    static LOADED: OnceLock<bool> = OnceLock::new();
    if *LOADED.get_or_init(nvrtc_present) {
        Ok(())
    } else {
        Err(Error::NvrtcNotFound)
    }
}

#[cfg(feature = "dynamic-loading")]
fn nvrtc_present() -> bool {
    // SAFETY: only probes whether the library can be opened; calls nothing in it.
    unsafe { nvrtc::is_culib_present() }
}

/// With `dynamic-linking` the program does not start without NVRTC.
#[cfg(not(feature = "dynamic-loading"))]
fn nvrtc_present() -> bool {
    true
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded; both out-pointers are valid.
    status("nvrtcVersion", unsafe {
        nvrtc::nvrtcVersion(&mut major, &mut minor)
    })?;
    Ok((major, minor))
}

/// The architectures the loaded NVRTC compiles for (`75` for `sm_75`, …), ascending.
fn supported_architectures() -> Result<Vec<u32>> {
    ensure_nvrtc()?;
    let mut count = 0;
    // SAFETY: NVRTC is loaded; `count` is a valid out-pointer.
    status("nvrtcGetNumSupportedArchs", unsafe {
        nvrtc::nvrtcGetNumSupportedArchs(&mut count)
    })?;
    let mut archs = vec![0; usize::try_from(count).unwrap_or(0)];
    if !archs.is_empty() {
        // SAFETY: NVRTC is loaded; `archs` has room for the `count` entries it reported.
        status("nvrtcGetSupportedArchs", unsafe {
            nvrtc::nvrtcGetSupportedArchs(archs.as_mut_ptr())
        })?;
    }
    Ok(archs
        .into_iter()
        .filter_map(|arch| u32::try_from(arch).ok())
        .collect())
}

fn status(call: &'static str, result: nvrtcResult) -> Result<()> {
    if result == nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: NVRTC is loaded (a status came from it); the string is static and NUL-terminated.
    let name = unsafe { CStr::from_ptr(nvrtc::nvrtcGetErrorString(result)) };
    Err(Error::Nvrtc {
        call,
        status: name.to_string_lossy().into_owned(),
        log: String::new(),
    })
}

fn c_string(what: &str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::InteriorNul {
        what: what.to_owned(),
    })
}

impl ProgramHandle {
    /// A program of `source`, named `name` (`nvrtcCreateProgram`, no headers).
    pub fn new(source: &str, name: &str) -> Result<Self> {
        ensure_nvrtc()?;
        let (c_source, c_name) = (c_string("source", source)?, c_string("name", name)?);
        let mut raw: nvrtcProgram = std::ptr::null_mut();
        // SAFETY: NVRTC is loaded; both strings are NUL-terminated and outlive the call; no
        // headers; `raw` is a valid out-pointer.
        status("nvrtcCreateProgram", unsafe {
            nvrtc::nvrtcCreateProgram(
                &mut raw,
                c_source.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        let record = Program {
            name: name.to_owned(),
            calls: Mutex::new(()),
        };
        // SAFETY: a fresh program owned by nobody else; `destroy_program` destroys it once.
        Ok(unsafe { ProgramHandle::from_raw(raw, record) })
    }

    fn exclusive(&self) -> MutexGuard<'_, ()> {
        lock(&self.record().calls)
    }

    /// Compiles the program for `device`: PTX for the newest virtual architecture NVRTC
    /// supports up to the device's compute capability ([`Self::gpu_architecture`]), which
    /// the driver compiles for the device when it loads it. A failed compilation is an
    /// [`Error::Nvrtc`] whose `log` is the compiler's log.
    pub fn compile_for(&self, device: &Device) -> Result<()> {
        self.compile(&[&Self::gpu_architecture(device)?])
    }

    /// The option that compiles for `device`: `--gpu-architecture=compute_XY`, with `XY` the
    /// device's compute capability, or the newest architecture the loaded NVRTC supports below
    /// it ([`Error::ArchitectureUnsupported`] if it supports none that old).
    pub fn gpu_architecture(device: &Device) -> Result<String> {
        let (major, minor) = device.compute_capability()?;
        let wanted = major * 10 + minor;
        let supported = supported_architectures()?;
        let arch = if supported.is_empty() {
            wanted
        } else {
            match supported
                .iter()
                .copied()
                .filter(|&arch| arch <= wanted)
                .max()
            {
                Some(arch) => arch,
                None => {
                    return Err(Error::ArchitectureUnsupported {
                        device: (major, minor),
                        nvrtc: nvrtc_version()?,
                        oldest: supported.iter().copied().min().unwrap_or(0),
                    });
                }
            }
        };
        Ok(format!("--gpu-architecture=compute_{arch}"))
    }

    /// Compiles the program with `options` (such as `--gpu-architecture=sm_90`). A failed
    /// compilation is an [`Error::Nvrtc`] whose `log` is the compiler's log.
    ///
    /// Without a `--gpu-architecture` option, NVRTC compiles PTX for its own default virtual
    /// architecture (the oldest it supports: `compute_75` for NVRTC 13), which any newer
    /// device runs, though without the newer instructions; [`Self::compile_for`] picks the
    /// device's.
    pub fn compile(&self, options: &[&str]) -> Result<()> {
        let options = options
            .iter()
            .map(|option| c_string("option", option))
            .collect::<Result<Vec<_>>>()?;
        let pointers: Vec<*const c_char> = options.iter().map(|option| option.as_ptr()).collect();
        let count = i32::try_from(pointers.len()).map_err(|_| Error::TooMany {
            count: pointers.len(),
            what: "compiler options",
            max: i32::MAX as usize,
        })?;
        let _exclusive = self.exclusive();
        // SAFETY: the program is alive and no other call runs on it (the lock); `pointers`
        // holds `count` NUL-terminated strings that outlive the call.
        let compiled = status("nvrtcCompileProgram", unsafe {
            nvrtc::nvrtcCompileProgram(self.as_raw(), count, pointers.as_ptr())
        });
        match compiled {
            Err(Error::Nvrtc { call, status, .. }) => Err(Error::Nvrtc {
                call,
                status,
                log: self.log_locked().unwrap_or_default(),
            }),
            other => other,
        }
    }

    /// The compiler's log of the last compilation.
    pub fn log(&self) -> Result<String> {
        let _exclusive = self.exclusive();
        self.log_locked()
    }

    fn log_locked(&self) -> Result<String> {
        let bytes = self.output(Output::Log)?;
        let text = CStr::from_bytes_until_nul(&bytes).map_or_else(
            |_| String::from_utf8_lossy(&bytes).into_owned(),
            |text| text.to_string_lossy().into_owned(),
        );
        Ok(text)
    }

    /// The compiled PTX, NUL-terminated, ready for [`crate::LibraryHandle::load_data`].
    pub fn ptx(&self) -> Result<Vec<u8>> {
        let _exclusive = self.exclusive();
        self.output(Output::Ptx)
    }

    /// The compiled cubin (compiled for a real architecture, `sm_XX`), ready for
    /// [`crate::LibraryHandle::load_data`].
    pub fn cubin(&self) -> Result<Vec<u8>> {
        let _exclusive = self.exclusive();
        self.output(Output::Cubin)
    }

    /// One of the program's outputs: its size, then its bytes into a buffer of that size. The
    /// caller holds the program's lock.
    fn output(&self, which: Output) -> Result<Vec<u8>> {
        let raw = self.as_raw();
        let mut len = 0usize;
        // SAFETY: the program is alive and the caller holds its lock; `len` is a valid
        // out-pointer.
        let sized = unsafe {
            match which {
                Output::Log => nvrtc::nvrtcGetProgramLogSize(raw, &mut len),
                Output::Ptx => nvrtc::nvrtcGetPTXSize(raw, &mut len),
                Output::Cubin => nvrtc::nvrtcGetCUBINSize(raw, &mut len),
            }
        };
        status(which.call(), sized)?;
        let mut bytes = vec![0u8; len];
        if len > 0 {
            let buffer = bytes.as_mut_ptr().cast::<c_char>();
            // SAFETY: as above; `buffer` holds the `len` bytes NVRTC just reported.
            let filled = unsafe {
                match which {
                    Output::Log => nvrtc::nvrtcGetProgramLog(raw, buffer),
                    Output::Ptx => nvrtc::nvrtcGetPTX(raw, buffer),
                    Output::Cubin => nvrtc::nvrtcGetCUBIN(raw, buffer),
                }
            };
            status(which.call(), filled)?;
        }
        Ok(bytes)
    }
}

/// The outputs of a program.
#[derive(Clone, Copy)]
enum Output {
    Log,
    Ptx,
    Cubin,
}

impl Output {
    fn call(self) -> &'static str {
        match self {
            Output::Log => "nvrtcGetProgramLog",
            Output::Ptx => "nvrtcGetPTX",
            Output::Cubin => "nvrtcGetCUBIN",
        }
    }
}
