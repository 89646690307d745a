//! The exported library, kernel and launch functions (see `libraries`, `kernels`, `launch`).
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use crate::api::exports::stream_work;
use crate::base::abi::{get, put};
use crate::base::errors::{INVALID_CONTEXT, INVALID_VALUE};
use crate::base::types::*;
use crate::resources::libraries::FILE_NOT_FOUND;
use crate::resources::work::Op;
use crate::{Sim, with_sim};

/// The driver version that brought `cuKernelGetParamCount` (CUDA 13.2).
const PARAM_COUNT_VERSION: i32 = 13020;

/// The bytes of a NUL-terminated string argument (without the NUL), rejecting null.
pub(crate) fn c_bytes<'a>(text: *const c_char) -> Result<&'a [u8], CuResult> {
    if text.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null string argument is NUL-terminated by the API's contract, and lives
    // for the call.
    Ok(unsafe { CStr::from_ptr(text) }.to_bytes())
}

/// JIT and library options: the simulator compiles nothing, so they have no effect, but the
/// arrays must be there when a count says so.
pub(crate) fn check_options(
    count: c_uint,
    keys: *mut c_void,
    values: *mut *mut c_void,
) -> Result<(), CuResult> {
    if count > 0 && (keys.is_null() || values.is_null()) {
        return Err(INVALID_VALUE);
    }
    Ok(())
}

/// The current context, which a launch needs, and the device it runs on.
pub(crate) fn launch_context(sim: &mut Sim, what: &str) -> Result<(Raw, usize), CuResult> {
    let context = sim.require_current(what)?;
    Ok((context, sim.contexts[&context].device))
}

/// Resolves the launch stream, which must belong to the current context.
pub(crate) fn launch_target(
    sim: &mut Sim,
    stream: Raw,
    context: Raw,
    what: &str,
) -> Result<crate::resources::streams::Target, CuResult> {
    let target = sim.stream(stream, what)?;
    if target.context != context {
        sim.checker.violation(
            "wrong-context",
            format!(
                "{what} on stream {stream:#x} of context {:#x} with context {context:#x} current",
                target.context
            ),
        );
        return Err(INVALID_CONTEXT);
    }
    Ok(target)
}

export_fns! {
    fn cuLibraryLoadData(
        library: *mut Raw,
        code: *const c_void,
        jit_options: *mut c_uint,
        jit_values: *mut *mut c_void,
        jit_count: c_uint,
        library_options: *mut c_uint,
        library_values: *mut *mut c_void,
        library_count: c_uint
    ) {
        if library.is_null() {
            return Err(INVALID_VALUE);
        }
        check_options(jit_count, jit_options.cast(), jit_values)?;
        check_options(library_count, library_options.cast(), library_values)?;
        // PTX is NUL-terminated text; the driver takes it so.
        let code = c_bytes(code.cast())?;
        let raw = with_sim(|sim| sim.load_library(code))?;
        put(library, raw)
    }

    fn cuLibraryLoadFromFile(
        library: *mut Raw,
        file_name: *const c_char,
        jit_options: *mut c_uint,
        jit_values: *mut *mut c_void,
        jit_count: c_uint,
        library_options: *mut c_uint,
        library_values: *mut *mut c_void,
        library_count: c_uint
    ) {
        if library.is_null() {
            return Err(INVALID_VALUE);
        }
        check_options(jit_count, jit_options.cast(), jit_values)?;
        check_options(library_count, library_options.cast(), library_values)?;
        let name = std::str::from_utf8(c_bytes(file_name)?).map_err(|_| INVALID_VALUE)?;
        let code = std::fs::read(name).map_err(|_| FILE_NOT_FOUND)?;
        // A file holds the text without a NUL, or with one at the end.
        let text = code.split(|&b| b == 0).next().unwrap_or(&[]);
        let raw = with_sim(|sim| sim.load_library(text))?;
        put(library, raw)
    }

    fn cuLibraryUnload(library: Raw) {
        with_sim(|sim| sim.unload_library(library))
    }

    fn cuLibraryGetKernel(kernel: *mut Raw, library: Raw, name: *const c_char) {
        if kernel.is_null() {
            return Err(INVALID_VALUE);
        }
        let name = c_bytes(name)?;
        let raw = with_sim(|sim| sim.library_kernel(library, name))?;
        put(kernel, raw)
    }

    fn cuLibraryGetKernelCount(count: *mut c_uint, library: Raw) {
        let n = with_sim(|sim| Ok(sim.library(library)?.kernels.len()))?;
        put(count, n as c_uint)
    }

    fn cuLibraryEnumerateKernels(kernels: *mut Raw, count: c_uint, library: Raw) {
        let list = with_sim(|sim| Ok(sim.library(library)?.kernels.clone()))?;
        if kernels.is_null() || count as usize != list.len() {
            return Err(INVALID_VALUE);
        }
        for (i, raw) in list.into_iter().enumerate() {
            // SAFETY: `kernels` has room for `count` handles by the API's contract, and
            // `i < count`.
            put(unsafe { kernels.add(i) }, raw)?;
        }
        Ok(())
    }

    fn cuKernelGetLibrary(library: *mut Raw, kernel: Raw) {
        let raw = with_sim(|sim| Ok(sim.kernel(kernel)?.library))?;
        put(library, raw)
    }

    fn cuKernelGetName(name: *mut *const c_char, kernel: Raw) {
        // The name lives as long as the library, like the driver's.
        let pointer = with_sim(|sim| Ok(sim.kernel(kernel)?.name.as_ptr()))?;
        put(name, pointer)
    }

    fn cuKernelGetFunction(function: *mut Raw, kernel: Raw) {
        if function.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.kernel_function(kernel))?;
        put(function, raw)
    }

    fn cuKernelGetParamInfo(kernel: Raw, index: usize, offset: *mut usize, size: *mut usize) {
        let param = with_sim(|sim| {
            // The real driver (580) answers CUDA_ERROR_INVALID_CONTEXT without a current
            // context: it resolves the kernel in the current context first.
            sim.require_current("cuKernelGetParamInfo")?;
            sim.kernel(kernel)?
                .entry
                .params
                .get(index)
                .copied()
                .ok_or(INVALID_VALUE)
        })?;
        if !offset.is_null() {
            put(offset, param.offset)?;
        }
        if !size.is_null() {
            put(size, param.size)?;
        }
        Ok(())
    }

    /// CUDA 13.2. A driver the simulator plays older than that has no such function: it
    /// answers `CUDA_ERROR_NOT_SUPPORTED` then (a real one lacks the symbol).
    fn cuKernelGetParamCount(kernel: Raw, count: *mut usize) {
        if crate::base::abi::simulated_version() < PARAM_COUNT_VERSION {
            return Err(crate::base::errors::NOT_SUPPORTED);
        }
        let params = with_sim(|sim| {
            // Assumed to resolve the kernel in the current context, as cuKernelGetParamInfo
            // does on driver 580.
            sim.require_current("cuKernelGetParamCount")?;
            Ok(sim.kernel(kernel)?.entry.params.len())
        })?;
        put(count, params)
    }

    fn cuKernelGetAttribute(value: *mut c_int, attribute: c_uint, kernel: Raw, device: CuDevice) {
        let v = with_sim(|sim| {
            let ordinal = sim.device(device)?.ordinal;
            sim.kernel_attribute(kernel, attribute, ordinal)
        })?;
        put(value, v)
    }

    fn cuKernelSetAttribute(attribute: c_uint, value: c_int, kernel: Raw, device: CuDevice) {
        with_sim(|sim| {
            let ordinal = sim.device(device)?.ordinal;
            sim.set_kernel_attribute(kernel, attribute, value, ordinal)
        })
    }

    fn cuFuncGetAttribute(value: *mut c_int, attribute: c_uint, function: Raw) {
        let v = with_sim(|sim| {
            let callee = sim.callee(function)?;
            let device = sim.callee_device(callee, "cuFuncGetAttribute")?;
            sim.kernel_attribute(callee.kernel, attribute, device)
        })?;
        put(value, v)
    }

    fn cuFuncSetAttribute(function: Raw, attribute: c_uint, value: c_int) {
        with_sim(|sim| {
            let callee = sim.callee(function)?;
            let device = sim.callee_device(callee, "cuFuncSetAttribute")?;
            sim.set_kernel_attribute(callee.kernel, attribute, value, device)
        })
    }

    fn cuLaunchKernel(
        function: Raw,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared: c_uint,
        stream: Raw,
        params: *mut *mut c_void,
        extra: *mut *mut c_void
    ) {
        let op = with_sim(|sim| {
            let (context, device) = launch_context(sim, "cuLaunchKernel")?;
            launch_target(sim, stream, context, "cuLaunchKernel")?;
            let grid = [grid_x, grid_y, grid_z];
            let block = [block_x, block_y, block_z];
            let launch = sim.prepare_launch(function, grid, block, shared, params, extra, device)?;
            sim.check_launch_context(&launch, context)?;
            Ok(Op::Kernel(launch))
        })?;
        stream_work(Some(stream), "cuLaunchKernel", op)
    }

    fn cuLaunchKernelEx(
        config: *const LaunchConfig,
        function: Raw,
        params: *mut *mut c_void,
        extra: *mut *mut c_void
    ) {
        let config = get(config)?;
        if config.num_attrs > 0 && config.attrs.is_null() {
            return Err(INVALID_VALUE);
        }
        let attributes: Vec<LaunchAttribute> = (0..config.num_attrs as usize)
            // SAFETY: `attrs` holds `numAttrs` attributes by the API's contract.
            .map(|i| get(unsafe { config.attrs.add(i) }.cast_const()))
            .collect::<Result<_, _>>()?;
        let op = with_sim(|sim| {
            let (context, device) = launch_context(sim, "cuLaunchKernelEx")?;
            launch_target(sim, config.stream, context, "cuLaunchKernelEx")?;
            let launch = sim.prepare_launch(
                function,
                config.grid,
                config.block,
                config.shared,
                params,
                extra,
                device,
            )?;
            sim.check_launch_context(&launch, context)?;
            sim.check_launch_attributes(&launch, &attributes, device)?;
            let event = sim.check_dependent_attributes(&launch, &attributes, context)?;
            Ok((Op::Kernel(launch), event))
        })?;
        let (op, event) = op;
        stream_work(Some(config.stream), "cuLaunchKernelEx", op)?;
        match event {
            // Every block has triggered once the kernel has run.
            Some(event) => with_sim(|sim| sim.record_event(event, config.stream)),
            None => Ok(()),
        }
    }
}
