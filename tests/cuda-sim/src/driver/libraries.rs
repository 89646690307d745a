//! Libraries (`cuLibraryLoadData`, `cuLibraryLoadFromFile`): context-independent modules of
//! PTX text. Loading parses the entries (see `ptx`) and makes one `CUkernel` per entry, handed
//! out by name; unloading destroys the library, its kernels and their per-context functions
//! (each leaves a tombstone, so a later use is a destroyed handle).

use std::ffi::CString;

use super::errors::{INVALID_VALUE, NOT_FOUND};
use super::kernels::Kernel;
use super::ptx;
use super::types::{CuResult, Raw};
use super::{Kind, Sim};

/// `CUDA_ERROR_INVALID_IMAGE`: the data is not a module the driver can load.
pub const INVALID_IMAGE: CuResult = 200;
/// `CUDA_ERROR_FILE_NOT_FOUND`.
pub const FILE_NOT_FOUND: CuResult = 301;

/// A loaded library.
#[derive(Debug)]
pub struct Library {
    pub raw: Raw,
    /// Its kernels, in the order of the PTX entries.
    pub kernels: Vec<Raw>,
}

impl Sim {
    /// A live library, or the error (and violation) for an unloaded one.
    pub fn library(&mut self, raw: Raw) -> Result<&mut Library, CuResult> {
        if !self.libraries.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::Library, false));
        }
        Ok(self.libraries.get_mut(&raw).expect("checked"))
    }

    /// Loads PTX text (without its NUL). Needs no current context: libraries are
    /// context-independent, and kernels are loaded into a context when first used there.
    pub fn load_library(&mut self, code: &[u8]) -> Result<Raw, CuResult> {
        let text = std::str::from_utf8(code).map_err(|_| INVALID_IMAGE)?;
        let entries = ptx::parse(text).ok_or(INVALID_IMAGE)?;
        let raw = self.new_raw(Kind::Library);
        let devices = self.devices.len();
        let mut kernels = Vec::with_capacity(entries.len());
        for entry in entries {
            let kernel = self.new_raw(Kind::Kernel);
            let name = CString::new(entry.name.clone()).map_err(|_| INVALID_IMAGE)?;
            self.kernels
                .insert(kernel, Kernel::new(kernel, raw, name, entry, devices));
            kernels.push(kernel);
        }
        self.libraries.insert(raw, Library { raw, kernels });
        Ok(raw)
    }

    pub fn unload_library(&mut self, raw: Raw) -> Result<(), CuResult> {
        let Some(library) = self.libraries.remove(&raw) else {
            return Err(self.dead_handle(raw, Kind::Library, true));
        };
        for kernel in library.kernels {
            if let Some(kernel) = self.kernels.remove(&kernel) {
                for function in kernel.functions.values() {
                    self.functions.remove(function);
                    self.bury(*function, Kind::Function);
                }
                self.bury(kernel.raw, Kind::Kernel);
            }
        }
        self.bury(raw, Kind::Library);
        Ok(())
    }

    /// `cuLibraryGetKernel`: the kernel named `name` (the same handle on every call).
    pub fn library_kernel(&mut self, raw: Raw, name: &[u8]) -> Result<Raw, CuResult> {
        let kernels = self.library(raw)?.kernels.clone();
        if name.is_empty() {
            return Err(INVALID_VALUE);
        }
        kernels
            .into_iter()
            .find(|k| self.kernels[k].name.as_bytes() == name)
            .ok_or(NOT_FOUND)
    }
}
