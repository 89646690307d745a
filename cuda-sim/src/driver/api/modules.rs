//! Modules (`cuModuleLoadData`, `cuModuleLoadDataEx`, `cuModuleLoad`, `cuModuleGetFunction`,
//! `cuModuleGetGlobal_v2`, `cuModuleUnload`): a module is a library loaded into the current
//! context. Each module owns one library (see `libraries`), loaded when the module is and
//! unloaded with it; `cuModuleGetFunction` hands out the kernel's `CUfunction` for the
//! module's context (the same handle `cuKernelGetFunction` gives there). Unloading buries the
//! module, its library, kernels and functions, so a later use is a destroyed handle.
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{CStr, c_char, c_uint, c_void};

use crate::api::exports_kernels::{c_bytes, check_options};
use crate::base::abi::put;
use crate::base::errors::INVALID_VALUE;
use crate::base::types::*;
use crate::resources::kernels::Function;
use crate::resources::libraries::FILE_NOT_FOUND;
use crate::{Kind, Sim, with_sim};

/// `CU_MODULE_LAZY_LOADING`: the default since CUDA 12.2.
pub const MODULE_LAZY_LOADING: u32 = 2;

/// A loaded module.
#[derive(Debug)]
pub struct Module {
    pub raw: Raw,
    /// The library it owns.
    pub library: Raw,
    /// The context it was loaded into.
    pub context: Raw,
    /// Loaded by the CUDA runtime (`libs/runtime.rs`) for a registered fatbinary: the
    /// runtime's own, unloaded at its teardown (after the report), so never a leak.
    pub runtime: bool,
}

impl Sim {
    /// A live module, or the error (and violation) for an unloaded one.
    pub fn module(&mut self, raw: Raw) -> Result<&Module, CuResult> {
        if !self.extra.modules.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::Module, false));
        }
        Ok(&self.extra.modules[&raw])
    }

    /// Whether `raw` is a loaded module (no violation either way).
    pub fn module_is_live(&self, raw: Raw) -> bool {
        self.extra.modules.contains_key(&raw)
    }

    /// Loads PTX text (without its NUL) into the current context.
    pub fn load_module(&mut self, code: &[u8], what: &str) -> Result<Raw, CuResult> {
        self.load_module_for(code, what, false)
    }

    /// Loads PTX text into the current context, for the program or (`runtime`) for the
    /// CUDA runtime.
    pub fn load_module_for(
        &mut self,
        code: &[u8],
        what: &str,
        runtime: bool,
    ) -> Result<Raw, CuResult> {
        let context = self.require_current(what)?;
        let library = self.load_library(code)?;
        let raw = self.new_raw(Kind::Module);
        self.extra.modules.insert(
            raw,
            Module {
                raw,
                library,
                context,
                runtime,
            },
        );
        Ok(raw)
    }

    pub fn unload_module(&mut self, raw: Raw) -> Result<(), CuResult> {
        let Some(module) = self.extra.modules.remove(&raw) else {
            return Err(self.dead_handle(raw, Kind::Module, true));
        };
        self.unload_library(module.library)?;
        self.bury(raw, Kind::Module);
        Ok(())
    }

    /// `cuModuleGetFunction`: the function of kernel `name` in the module's context.
    pub fn module_function(&mut self, raw: Raw, name: &[u8]) -> Result<Raw, CuResult> {
        let (library, context) = {
            let module = self.module(raw)?;
            (module.library, module.context)
        };
        self.context(context)?;
        let kernel = self.library_kernel(library, name)?;
        if let Some(&function) = self.kernels[&kernel].functions.get(&context) {
            return Ok(function);
        }
        let function = self.new_raw(Kind::Function);
        self.functions.insert(
            function,
            Function {
                raw: function,
                kernel,
                context,
            },
        );
        self.kernel(kernel)?.functions.insert(context, function);
        Ok(function)
    }

    /// The address and size of the module variable (`.global`/`.const`) `name` of `library`:
    /// the one place `cuModuleGetGlobal_v2`, `cuLibraryGetGlobal` and `cuLibraryGetManaged`
    /// go through (a managed variable is not modelled: `NOT_FOUND` for those names).
    pub fn module_global(&mut self, library: Raw, name: &CStr) -> Result<(u64, u64), CuResult> {
        self.library(library)?;
        if name.is_empty() {
            return Err(INVALID_VALUE);
        }
        self.library_global(library, name.to_bytes())
    }
}

/// Writes a variable's address and size through the optional out-pointers.
fn put_global(ptr: *mut CuDevicePtr, size: *mut usize, found: (u64, u64)) -> Result<(), CuResult> {
    if !ptr.is_null() {
        put(ptr, found.0)?;
    }
    if !size.is_null() {
        put(size, found.1 as usize)?;
    }
    Ok(())
}

fn c_str<'a>(name: *const c_char) -> Result<&'a CStr, CuResult> {
    if name.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null string argument is NUL-terminated by the API's contract.
    Ok(unsafe { CStr::from_ptr(name) })
}

export_fns! {
    fn cuModuleLoadData(module: *mut Raw, image: *const c_void) {
        if module.is_null() {
            return Err(INVALID_VALUE);
        }
        let code = c_bytes(image.cast())?;
        let raw = with_sim(|sim| sim.load_module(code, "cuModuleLoadData"))?;
        put(module, raw)
    }

    fn cuModuleLoadDataEx(module: *mut Raw, image: *const c_void, count: c_uint, options: *mut c_uint, values: *mut *mut c_void) {
        if module.is_null() {
            return Err(INVALID_VALUE);
        }
        check_options(count, options.cast(), values)?;
        let code = c_bytes(image.cast())?;
        let raw = with_sim(|sim| sim.load_module(code, "cuModuleLoadDataEx"))?;
        put(module, raw)
    }

    fn cuModuleLoad(module: *mut Raw, file_name: *const c_char) {
        if module.is_null() {
            return Err(INVALID_VALUE);
        }
        let name = std::str::from_utf8(c_bytes(file_name)?).map_err(|_| INVALID_VALUE)?;
        // The context is checked first, as the driver does.
        with_sim(|sim| sim.require_current("cuModuleLoad").map(|_| ()))?;
        let code = std::fs::read(name).map_err(|_| FILE_NOT_FOUND)?;
        let text = code.split(|&b| b == 0).next().unwrap_or(&[]);
        let raw = with_sim(|sim| sim.load_module(text, "cuModuleLoad"))?;
        put(module, raw)
    }

    fn cuModuleUnload(module: Raw) {
        with_sim(|sim| sim.unload_module(module))
    }

    fn cuModuleGetFunction(function: *mut Raw, module: Raw, name: *const c_char) {
        if function.is_null() {
            return Err(INVALID_VALUE);
        }
        let name = c_bytes(name)?;
        let raw = with_sim(|sim| sim.module_function(module, name))?;
        put(function, raw)
    }

    fn cuModuleGetFunctionCount(count: *mut c_uint, module: Raw) {
        let n = with_sim(|sim| {
            let library = sim.module(module)?.library;
            Ok(sim.library(library)?.kernels.len())
        })?;
        put(count, n as c_uint)
    }

    fn cuModuleGetGlobal_v2(ptr: *mut CuDevicePtr, size: *mut usize, module: Raw, name: *const c_char) {
        let name = c_str(name)?;
        let found = with_sim(|sim| {
            let library = sim.module(module)?.library;
            sim.module_global(library, name)
        })?;
        put_global(ptr, size, found)
    }

    fn cuModuleGetLoadingMode(mode: *mut c_uint) {
        with_sim(|_| Ok(()))?;
        put(mode, MODULE_LAZY_LOADING)
    }

    fn cuLibraryGetGlobal(ptr: *mut CuDevicePtr, size: *mut usize, library: Raw, name: *const c_char) {
        let name = c_str(name)?;
        let found = with_sim(|sim| {
            // The variable lives in the current context (the driver loads it there).
            sim.require_current("cuLibraryGetGlobal")?;
            sim.module_global(library, name)
        })?;
        put_global(ptr, size, found)
    }

    fn cuLibraryGetManaged(ptr: *mut CuDevicePtr, size: *mut usize, library: Raw, name: *const c_char) {
        let name = c_str(name)?;
        let found = with_sim(|sim| sim.module_global(library, name))?;
        put_global(ptr, size, found)
    }
}
