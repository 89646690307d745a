//! The part of the CUDA runtime (`libcudart.so.13`) that nvcc's host code calls: a `.cu` file
//! compiled by nvcc and linked into a program (candle-kernels' `libmoe.a`, say) registers its
//! fatbinary and kernels at start-up (`__cudaRegisterFatBinary`, `__cudaRegisterFunction`,
//! …) and launches with `kernel<<<grid, block, shared, stream>>>(…)`, which becomes
//! `__cudaPushCallConfiguration`, `__cudaPopCallConfiguration`, `__cudaGetKernel` and
//! `__cudaLaunchKernel` (`_ptsz` under `--default-stream per-thread`). NVIDIA's runtime talks to
//! the driver through private tables the simulator does not have, so the simulator answers
//! these itself (installed as `libcudart.so` and `libcudart.so.13`).
//!
//! A fatbinary is loaded lazily, as the runtime does: at a kernel's first launch (or
//! `cudaFuncSetAttribute`) in a context, its PTX for the highest architecture up to 9.0 is
//! loaded as a module of the current context (the primary context of device 0, retained and
//! made current, where no context is current). Machine code (`sm_XX` ELF) cannot run here: a
//! fatbinary with no PTX, or with compressed PTX (nvcc's default; build with `--no-compress`),
//! fails its launches with `cudaErrorNoKernelImageForDevice` after one line on standard error.
//! Modules are unloaded by `__cudaUnregisterFatBinary` at exit where their context still
//! lives; that runs after the simulator's report, which does not count them as leaks (they
//! are the runtime's, not the program's). Device variables (`__cudaRegisterVar`) are not
//! mapped to host symbols.
//!
//! # Safety
//!
//! Pointer arguments follow the runtime's contract with nvcc's generated code.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

use crate::base::types::{CuResult, Raw};

/// `cudaSuccess`.
const SUCCESS: u32 = 0;
/// `cudaErrorInvalidValue`.
const INVALID_VALUE: u32 = 1;
/// `cudaErrorMissingConfiguration`: a pop without a push.
const MISSING_CONFIGURATION: u32 = 52;
/// `cudaErrorInvalidDeviceFunction`: a host function that no fatbinary registered.
const INVALID_DEVICE_FUNCTION: u32 = 98;
/// `cudaErrorNoKernelImageForDevice`.
const NO_KERNEL_IMAGE: u32 = 209;
/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: Raw = 2;
/// The wrapper nvcc puts around each fatbinary (`__fatBinC_Wrapper_t`).
const WRAPPER_MAGIC: u32 = 0x466243b1;
/// The fatbinary's own magic.
const FATBIN_MAGIC: u32 = 0xba55ed50;
/// An entry of PTX text (the other kind, 2, is an ELF of machine code).
const ENTRY_PTX: u16 = 1;
/// An entry's flag for a compressed payload.
const ENTRY_COMPRESSED: u64 = 0x2000;

/// `dim3`, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

/// One registered fatbinary.
struct Binary {
    /// Its PTX, or why there is none.
    ptx: Result<CString, String>,
    /// Modules loaded from it: (context, module).
    modules: Vec<(Raw, Raw)>,
    /// The one line about a missing image has been printed.
    told: bool,
}

#[derive(Default)]
struct Runtime {
    /// By handle (`void **` given to nvcc's code: a leaked box holding the index).
    binaries: HashMap<usize, Binary>,
    /// Host stub address → (binary handle, kernel name).
    functions: HashMap<usize, (usize, CString)>,
}

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);

thread_local! {
    /// Launch configurations pushed by `<<<…>>>` and not yet popped.
    static CONFIGS: RefCell<Vec<(Dim3, Dim3, usize, Raw)>> = const { RefCell::new(Vec::new()) };
}

fn with_runtime<T>(f: impl FnOnce(&mut Runtime) -> T) -> T {
    let mut guard = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Runtime::default))
}

/// The runtime's code for the driver's `code` (the two agree where both have one).
fn runtime_code(code: CuResult) -> u32 {
    match code {
        0 | 1 | 2 | 3 | 4 | 100 | 101 | 200 | 201 | 209 | 300 | 400 | 500 | 700..=720 => code,
        _ => 999,
    }
}

/// The PTX of a fatbinary (`data`: its header), for the highest architecture up to 90.
///
/// # Safety
///
/// `data` points at a fatbinary nvcc made, readable for its header's size.
unsafe fn fatbin_ptx(data: *const u8) -> Result<CString, String> {
    // SAFETY: the header is 16 bytes, by the caller's contract.
    let header = unsafe { std::slice::from_raw_parts(data, 16) };
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    if u32_at(header, 0) != FATBIN_MAGIC {
        return Err("not a fatbinary".into());
    }
    let header_size = u16_at(header, 6) as usize;
    let body = u64_at(header, 8) as usize;
    // SAFETY: the fatbinary is `header_size + body` bytes, by the caller's contract.
    let all = unsafe { std::slice::from_raw_parts(data, header_size + body) };
    let mut best: Option<(u32, &[u8])> = None;
    let mut compressed = false;
    let mut at = header_size;
    while at + 64 <= all.len() {
        let entry = &all[at..];
        let (kind, size) = (u16_at(entry, 0), u32_at(entry, 4) as usize);
        let payload = u64_at(entry, 8) as usize;
        if size < 64 || at + size + payload > all.len() {
            break;
        }
        let arch = u32_at(entry, 28);
        if kind == ENTRY_PTX && arch <= 90 {
            if u64_at(entry, 40) & ENTRY_COMPRESSED != 0 {
                compressed = true;
            } else if best.is_none_or(|(a, _)| arch > a) {
                best = Some((arch, &entry[size..size + payload]));
            }
        }
        at += size + payload;
    }
    match best {
        Some((_, text)) => {
            let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
            CString::new(&text[..end]).map_err(|_| "unreadable PTX".into())
        }
        None if compressed => {
            Err("its PTX is compressed (build it with nvcc --no-compress)".into())
        }
        None => Err("it holds no PTX for compute_90 or lower, only machine code (add -gencode=arch=compute_90,code=compute_90)".into()),
    }
}

/// The current context, or device 0's primary context made current.
fn context() -> Result<Raw, CuResult> {
    let mut current: Raw = 0;
    // SAFETY: a valid out-pointer.
    let code = unsafe { crate::api::exports::cuCtxGetCurrent(&mut current) };
    if code == crate::base::errors::NOT_INITIALIZED {
        crate::init(0)?;
        return context();
    }
    if code != 0 {
        return Err(code);
    }
    if current != 0 {
        return Ok(current);
    }
    let mut primary: Raw = 0;
    // SAFETY: valid out-pointers; the retained context stays current for the process, as
    // the runtime's does.
    unsafe {
        let code = crate::api::exports::cuDevicePrimaryCtxRetain(&mut primary, 0);
        if code != 0 {
            return Err(code);
        }
        let code = crate::api::exports::cuCtxSetCurrent(primary);
        if code != 0 {
            return Err(code);
        }
    }
    Ok(primary)
}

/// The `CUfunction` for host stub `host` in the current context, its fatbinary loaded there
/// first if needed; an error is the runtime's.
fn function(host: usize) -> Result<Raw, u32> {
    let context = context().map_err(runtime_code)?;
    with_runtime(|rt| {
        let (handle, name) = rt
            .functions
            .get(&host)
            .ok_or(INVALID_DEVICE_FUNCTION)?
            .clone();
        let binary = rt
            .binaries
            .get_mut(&handle)
            .ok_or(INVALID_DEVICE_FUNCTION)?;
        binary.modules.retain(|&(_, module)| {
            crate::with_sim(|sim| Ok(sim.module_is_live(module))).unwrap_or(false)
        });
        let module = match binary.modules.iter().find(|&&(c, _)| c == context) {
            Some(&(_, module)) => module,
            None => {
                let ptx = match &binary.ptx {
                    Ok(ptx) => ptx,
                    Err(why) => {
                        if !std::mem::replace(&mut binary.told, true) {
                            eprintln!(
                                "cuda-sim: the CUDA runtime cannot load kernel {}: {why}",
                                name.to_string_lossy()
                            );
                        }
                        return Err(NO_KERNEL_IMAGE);
                    }
                };
                let module = crate::with_sim(|sim| {
                    sim.load_module_for(ptx.as_bytes(), "cudaLaunchKernel", true)
                })
                .map_err(runtime_code)?;
                binary.modules.push((context, module));
                module
            }
        };
        let mut function: Raw = 0;
        // SAFETY: a valid out-pointer and a NUL-terminated name.
        let code = unsafe {
            crate::api::modules::cuModuleGetFunction(&mut function, module, name.as_ptr())
        };
        if code != 0 {
            return Err(runtime_code(code));
        }
        Ok(function)
    })
}

macro_rules! runtime_fns {
    ($( $(#[$meta:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty $body:block )*) => {$(
        $(#[$meta])*
        #[cfg_attr(not(test), unsafe(no_mangle))]
        #[allow(clippy::missing_safety_doc, non_snake_case)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body
    )*};
}

runtime_fns! {
    /// Registers the fatbinary behind nvcc's wrapper; the handle is given back to each
    /// registration of its kernels.
    fn __cudaRegisterFatBinary(wrapper: *mut c_void) -> *mut *mut c_void {
        let ptx = if wrapper.is_null() {
            Err("no fatbinary".to_string())
        } else {
            // SAFETY: nvcc's wrapper: magic, version, then the fatbinary's address.
            let (magic, data) = unsafe {
                (wrapper.cast::<u32>().read(), wrapper.cast::<*const u8>().add(1).read())
            };
            if magic != WRAPPER_MAGIC || data.is_null() {
                Err("not nvcc's fatbinary wrapper".to_string())
            } else {
                // SAFETY: the fatbinary nvcc embedded.
                unsafe { fatbin_ptx(data) }
            }
        };
        let handle = Box::into_raw(Box::new(std::ptr::null_mut::<c_void>()));
        with_runtime(|rt| {
            rt.binaries.insert(handle as usize, Binary { ptx, modules: Vec::new(), told: false })
        });
        handle
    }

    /// The end of a fatbinary's registrations: nothing to do (loading is lazy).
    fn __cudaRegisterFatBinaryEnd(handle: *mut *mut c_void) -> () {
        let _ = handle;
    }

    /// Forgets a fatbinary at exit, unloading its modules from the contexts still alive.
    fn __cudaUnregisterFatBinary(handle: *mut *mut c_void) -> () {
        let Some(binary) = with_runtime(|rt| {
            rt.functions.retain(|_, (h, _)| *h != handle as usize);
            rt.binaries.remove(&(handle as usize))
        }) else {
            return;
        };
        for (_, module) in binary.modules {
            let _ = crate::with_sim(|sim| {
                if sim.module_is_live(module) {
                    sim.unload_module(module)?;
                }
                Ok(())
            });
        }
        // SAFETY: the box `__cudaRegisterFatBinary` leaked, given back once.
        drop(unsafe { Box::from_raw(handle) });
    }

    /// Ties host stub `host` to kernel `name` of the fatbinary `handle`.
    fn __cudaRegisterFunction(
        handle: *mut *mut c_void,
        host: *const c_char,
        device: *mut c_char,
        name: *const c_char,
        thread_limit: c_int,
        tid: *mut c_void,
        bid: *mut c_void,
        block: *mut Dim3,
        grid: *mut Dim3,
        size: *mut c_int
    ) -> () {
        let _ = (device, thread_limit, tid, bid, block, grid, size);
        if name.is_null() {
            return;
        }
        // SAFETY: nvcc passes the kernel's NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_owned();
        with_runtime(|rt| rt.functions.insert(host as usize, (handle as usize, name)));
    }

    /// A device variable: not mapped (`cudaMemcpyToSymbol` is not offered).
    fn __cudaRegisterVar(
        handle: *mut *mut c_void,
        host: *mut c_char,
        device: *mut c_char,
        name: *const c_char,
        ext: c_int,
        size: usize,
        constant: c_int,
        global: c_int
    ) -> () {
        let _ = (handle, host, device, name, ext, size, constant, global);
    }

    /// `<<<grid, block, shared, stream>>>`: the configuration of the launch that follows.
    fn __cudaPushCallConfiguration(grid: Dim3, block: Dim3, shared: usize, stream: *mut c_void) -> c_uint {
        CONFIGS.with(|c| c.borrow_mut().push((grid, block, shared, stream as Raw)));
        SUCCESS
    }

    fn __cudaPopCallConfiguration(grid: *mut Dim3, block: *mut Dim3, shared: *mut usize, stream: *mut c_void) -> c_uint {
        let Some((g, b, s, st)) = CONFIGS.with(|c| c.borrow_mut().pop()) else {
            return MISSING_CONFIGURATION;
        };
        if grid.is_null() || block.is_null() || shared.is_null() || stream.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: nvcc's out-pointers for the launch's configuration.
        unsafe {
            grid.write(g);
            block.write(b);
            shared.write(s);
            stream.cast::<Raw>().write(st);
        }
        SUCCESS
    }

    /// The kernel handle of host stub `host`: the stub's address itself.
    fn __cudaGetKernel(kernel: *mut *const c_void, host: *const c_void) -> c_uint {
        if kernel.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: a valid out-pointer.
        unsafe { kernel.write(host) };
        if with_runtime(|rt| rt.functions.contains_key(&(host as usize))) {
            SUCCESS
        } else {
            INVALID_DEVICE_FUNCTION
        }
    }

    fn __cudaLaunchKernel(kernel: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) -> c_uint {
        launch(kernel as usize, grid, block, args, shared, stream as Raw)
    }

    /// The same, with stream 0 meaning the calling thread's default stream.
    fn __cudaLaunchKernel_ptsz(kernel: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) -> c_uint {
        let stream = if stream.is_null() { STREAM_PER_THREAD } else { stream as Raw };
        launch(kernel as usize, grid, block, args, shared, stream)
    }

    fn cudaLaunchKernel(kernel: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) -> c_uint {
        launch(kernel as usize, grid, block, args, shared, stream as Raw)
    }

    fn cudaLaunchKernel_ptsz(kernel: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) -> c_uint {
        let stream = if stream.is_null() { STREAM_PER_THREAD } else { stream as Raw };
        launch(kernel as usize, grid, block, args, shared, stream)
    }

    /// Sets an attribute of the kernel of host stub `host` in the current context (the
    /// runtime's numbering of function attributes is the driver's).
    fn cudaFuncSetAttribute(host: *const c_void, attribute: c_int, value: c_int) -> c_uint {
        let function = match function(host as usize) {
            Ok(f) => f,
            Err(code) => return code,
        };
        // SAFETY: a live function handle.
        let code = unsafe {
            crate::api::exports_kernels::cuFuncSetAttribute(function, attribute as c_uint, value)
        };
        runtime_code(code)
    }

    /// The device of the current context (device 0 where none is current).
    fn cudaGetDevice(device: *mut c_int) -> c_uint {
        if device.is_null() {
            return INVALID_VALUE;
        }
        let mut d: c_int = 0;
        // SAFETY: a valid out-pointer.
        let code = unsafe { crate::api::exports::cuCtxGetDevice(&mut d) };
        // SAFETY: a valid out-pointer.
        unsafe { device.write(if code == 0 { d } else { 0 }) };
        SUCCESS
    }
}

/// Launches the kernel of host stub `host`. A failure is also said on standard error, once
/// per kernel and code: nvcc's `<<<…>>>` drops the status, and a program that does not ask
/// `cudaGetLastError` would never learn of it.
fn launch(
    host: usize,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: Raw,
) -> c_uint {
    let code = launch_quietly(host, grid, block, args, shared, stream);
    if code != SUCCESS {
        static TOLD: Mutex<Vec<(usize, u32)>> = Mutex::new(Vec::new());
        let mut told = TOLD.lock().unwrap_or_else(|e| e.into_inner());
        if !told.contains(&(host, code)) {
            told.push((host, code));
            let name = with_runtime(|rt| rt.functions.get(&host).map(|(_, n)| n.clone()));
            let name = name.map_or("an unregistered kernel".into(), |n| {
                n.to_string_lossy().into_owned()
            });
            eprintln!(
                "cuda-sim: the CUDA runtime's launch of {name} (grid {grid:?}, block {block:?}, {shared} bytes of shared memory) failed with error {code}"
            );
        }
    }
    code
}

fn launch_quietly(
    host: usize,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: Raw,
) -> c_uint {
    let function = match function(host) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let Ok(shared) = c_uint::try_from(shared) else {
        return INVALID_VALUE;
    };
    // SAFETY: the kernel's arguments as nvcc's stub laid them out.
    let code = unsafe {
        crate::api::exports_kernels::cuLaunchKernel(
            function,
            grid.x,
            grid.y,
            grid.z,
            block.x,
            block.y,
            block.z,
            shared,
            stream,
            args,
            std::ptr::null_mut(),
        )
    };
    runtime_code(code)
}
