//! Libraries (`cuLibraryLoadData`, `cuLibraryLoadFromFile`): context-independent modules of
//! PTX text. Loading parses and decodes the PTX (the `cuda-sim-ptx` interpreter), makes one
//! `CUkernel` per entry, handed out by name, and allocates the module's `.global` and
//! `.const` variables with their initial values (one copy per library, shared by every
//! context, in device 0's memory); unloading destroys the library, its kernels, their
//! per-context functions (each leaves a tombstone, so a later use is a destroyed handle) and
//! its variables.

use std::ffi::CString;
use std::sync::Arc;

use cuda_sim_ptx::{LoadError, Module};

use crate::base::errors::{INVALID_VALUE, NOT_FOUND, NOT_SUPPORTED};
use crate::base::types::{CuResult, Raw};
use crate::resources::kernels::Kernel;
use crate::resources::memory::{AllocKind, rounded};
use crate::{Kind, Sim};

/// `CUDA_ERROR_INVALID_IMAGE`: the data is not a module the driver can load.
pub const INVALID_IMAGE: CuResult = 200;
/// `CUDA_ERROR_FILE_NOT_FOUND`.
pub const FILE_NOT_FOUND: CuResult = 301;

/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`: PTX of an ISA newer than the driver knows.
pub const UNSUPPORTED_PTX_VERSION: CuResult = 222;

/// The newest PTX ISA a driver of `version` (`cuDriverGetVersion`'s number) loads, as the CUDA
/// releases pair them: 11.x with 7.x, 12.0-12.5 with 8.0-8.5, 12.6 with 8.5, 12.8 with 8.7,
/// 12.9 with 8.8, 13.x with 9.x; a driver newer than 13.x loads every ISA the interpreter reads.
pub fn newest_ptx_isa(version: i32) -> (u32, u32) {
    let (major, minor) = (version / 1000, (version % 1000 / 10) as u32);
    match major {
        ..=10 => (6, 5),
        11 => (7, minor),
        12 => match minor {
            0..=5 => (8, minor),
            6 | 7 => (8, 5),
            8 => (8, 7),
            _ => (8, 8),
        },
        13 => (9, minor),
        _ => (u32::MAX, u32::MAX),
    }
}

/// A loaded library.
#[derive(Debug)]
pub struct Library {
    pub raw: Raw,
    /// Its kernels, in the order of the PTX entries.
    pub kernels: Vec<Raw>,
    /// The decoded module the kernels run from.
    pub module: Arc<Module>,
    /// The address of each of the module's variables (`Module::globals`, in order).
    pub globals: Vec<u64>,
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
        let module = match Module::parse(text) {
            Ok(module) => Arc::new(module),
            Err(LoadError::Invalid(_)) => return Err(INVALID_IMAGE),
            Err(LoadError::NotSupported(what)) => {
                let (call, seq) = crate::base::calls::current_call();
                eprintln!(
                    "cuda-sim: {call} (call #{seq}): the PTX uses {what}, which the simulator does not support"
                );
                return Err(NOT_SUPPORTED);
            }
        };
        let newest = newest_ptx_isa(crate::base::abi::simulated_version());
        if module.version > newest {
            let (call, seq) = crate::base::calls::current_call();
            eprintln!(
                "cuda-sim: {call} (call #{seq}): PTX ISA {}.{} is newer than the {}.{} that the driver played ({}) accepts",
                module.version.0,
                module.version.1,
                newest.0,
                newest.1,
                crate::base::abi::simulated_version()
            );
            return Err(UNSUPPORTED_PTX_VERSION);
        }
        let raw = self.new_raw(Kind::Library);
        let globals = self.allocate_module_variables(&module)?;
        let devices = self.devices.len();
        let mut kernels = Vec::with_capacity(module.entries.len());
        for (index, entry) in module.entries.iter().enumerate() {
            let kernel = self.new_raw(Kind::Kernel);
            let name = CString::new(entry.name.clone()).map_err(|_| INVALID_IMAGE)?;
            let sizes = [
                module.shared_static_bytes(index),
                module.const_bytes(),
                module.local_bytes(index),
            ];
            self.kernels.insert(
                kernel,
                Kernel::new(kernel, raw, name, (index, entry.clone(), sizes), devices),
            );
            kernels.push(kernel);
        }
        self.libraries.insert(
            raw,
            Library {
                raw,
                kernels,
                module,
                globals,
            },
        );
        Ok(raw)
    }

    /// Allocates each module variable in device 0's memory, initialised.
    fn allocate_module_variables(&mut self, module: &Module) -> Result<Vec<u64>, CuResult> {
        let mut addresses = Vec::with_capacity(module.globals.len());
        for variable in &module.globals {
            let size = variable.size.max(1);
            let block = rounded(size).ok_or(crate::base::errors::OUT_OF_MEMORY)?;
            let budget = self.budget(Some(0));
            let arena = &mut self.devices[0].sync_arena;
            let allocated = arena.alloc(block, budget);
            let (offset, _) = match allocated {
                Ok(found) => found,
                Err(error) => {
                    for &addr in &addresses {
                        self.free_module_variable(addr);
                    }
                    return Err(error);
                }
            };
            let addr = arena.base as u64 + offset;
            // SAFETY: the block was just handed out by the arena: `size` writable bytes at
            // `addr` that nothing else uses; `init` has `variable.size` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    variable.init.as_ptr(),
                    addr as usize as *mut u8,
                    variable.init.len().min(size as usize),
                )
            };
            self.record_alloc(addr, size, block, AllocKind::Global, None, 0, None, None);
            addresses.push(addr);
        }
        Ok(addresses)
    }

    /// Frees a module variable (at unload): it leaves a tombstone like any allocation.
    fn free_module_variable(&mut self, addr: u64) {
        let operation = self.checker.host_op();
        if let Some(alloc) = self.remove_alloc(addr, operation) {
            self.release_block(&alloc);
        }
    }

    /// The address and size of the module variable `name` of `library`
    /// (`cuModuleGetGlobal`, `cuLibraryGetGlobal`).
    pub fn library_global(&mut self, raw: Raw, name: &[u8]) -> Result<(u64, u64), CuResult> {
        let library = self.library(raw)?;
        let index = library
            .module
            .globals
            .iter()
            .position(|g| g.name.as_bytes() == name)
            .ok_or(NOT_FOUND)?;
        Ok((library.globals[index], library.module.globals[index].size))
    }

    pub fn unload_library(&mut self, raw: Raw) -> Result<(), CuResult> {
        let Some(library) = self.libraries.remove(&raw) else {
            return Err(self.dead_handle(raw, Kind::Library, true));
        };
        for &addr in &library.globals {
            self.free_module_variable(addr);
        }
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
