//! Lazy, checked loading of the driver library.
//!
//! cudarc loads `libcuda` on the first call to any of its functions and panics if the library
//! is missing, and panics again on the first call of a function the library does not export.
//! Every entry point of this crate calls [`ensure_loaded`] first: it checks once, lazily, that
//! the library loads, that `cuInit` succeeds and that the driver is at least
//! [`MIN_DRIVER_VERSION`], and otherwise returns an error. Importing the crate never touches
//! the driver.
//!
//! **The capability table.** Every driver function this crate calls that is newer than the
//! floor is listed once in [`newer`], with the CUDA version that brought it. Such a function
//! is called only through [`probed!`], which first asks the table: on a driver that is older,
//! or that does not export the symbol, the call is `Err(Error::NotSupported { .. })` (or a
//! fallback, where one exists), never cudarc's panic on a missing symbol. A unit test below
//! rejects any other call of a listed function, and the simulator's table test hides each
//! symbol in turn.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

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
#[inline]
pub fn driver_version() -> Result<i32> {
    // Once loaded, one load and no clone of the stored result (an error's clone is not free).
    match LOADED.get() {
        Some(Ok(version)) => Ok(*version),
        _ => LOADED.get_or_init(load).clone(),
    }
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
    // the library stays loaded for the whole process.
    unsafe { lookup(name) }
}

/// `name` in the driver library cudarc loaded (it never unloads it).
///
/// # Safety
///
/// As for [`function`]: `F` is the symbol's exact type.
#[cfg(feature = "dynamic-loading")]
unsafe fn lookup<F: Copy>(name: &std::ffi::CStr) -> Option<F> {
    // SAFETY: the caller vouches for `F`; `culib` is the library cudarc keeps loaded.
    unsafe {
        sys::culib()
            .get::<F>(name.to_bytes_with_nul())
            .ok()
            .map(|symbol| *symbol)
    }
}

/// `name` among the symbols of the process, which links the driver (`dynamic-linking`).
///
/// # Safety
///
/// As for [`function`]: `F` is the symbol's exact type, a function pointer (pointer-sized).
#[cfg(not(feature = "dynamic-loading"))]
unsafe fn lookup<F: Copy>(name: &std::ffi::CStr) -> Option<F> {
    // SAFETY: `dlsym` with a NUL-terminated name only looks the symbol up.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if symbol.is_null() || std::mem::size_of::<F>() != std::mem::size_of::<*mut libc::c_void>() {
        return None;
    }
    // SAFETY: a non-null symbol address, and `F` is a function pointer of the symbol's exact
    // type by the caller's contract (checked to be pointer-sized above).
    Some(unsafe { std::mem::transmute_copy::<*mut libc::c_void, F>(&symbol) })
}

/// Whether the driver library can be loaded: probed without calling it.
#[cfg(feature = "dynamic-loading")]
fn driver_present() -> bool {
    // SAFETY: only probes whether the library can be opened; calls nothing in it.
    unsafe { sys::is_culib_present() }
}

/// With `dynamic-linking` the program does not start without the driver.
#[cfg(not(feature = "dynamic-loading"))]
fn driver_present() -> bool {
    true
}

/// Whether the driver library could be loaded and initialised.
pub fn is_available() -> bool {
    ensure_loaded().is_ok()
}

#[cold]
fn load() -> Result<i32> {
    if !driver_present() {
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
        return Err(Error::NoSuchDevice { ordinal, count });
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
    Err(Error::DriverAnomaly {
        call: "cuCtxGetDevice",
        what: format!("device {device}, which is not among this machine's devices"),
    })
}

/// Free and total memory of the current context's device, in bytes.
pub fn mem_get_info() -> Result<(usize, usize)> {
    ensure_loaded()?;
    let (mut free, mut total) = (0, 0);
    // SAFETY: the driver is loaded; both out-pointers are valid.
    unsafe { driver!(cuMemGetInfo_v2(&mut free, &mut total)) }?;
    Ok((free, total))
}

/// One driver function newer than [`MIN_DRIVER_VERSION`], and the version that brought it.
pub(crate) struct Capability {
    /// The exported symbol, as cudarc's bindings name it.
    pub(crate) symbol: &'static str,
    /// The symbol with its NUL, for the lookup.
    symbol_nul: &'static str,
    /// The CUDA version that introduced it (1000 × major + 10 × minor).
    pub(crate) needs: i32,
    /// 0 until probed, then 1 (callable) or 2 (not).
    probed: AtomicU8,
}

impl Capability {
    const fn new(symbol: &'static str, symbol_nul: &'static str, needs: i32) -> Capability {
        Capability {
            symbol,
            symbol_nul,
            needs,
            probed: AtomicU8::new(0),
        }
    }

    /// Whether the loaded driver is new enough and exports the function; asked of the driver
    /// once, then one relaxed load (the answer never changes, so a race probes twice at worst).
    #[inline]
    pub(crate) fn available(&self) -> bool {
        match self.probed.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => self.probe_now(),
        }
    }

    #[cold]
    fn probe_now(&self) -> bool {
        let available = driver_version().is_ok_and(|version| version >= self.needs)
            && std::ffi::CStr::from_bytes_with_nul(self.symbol_nul.as_bytes())
                .is_ok_and(has_function);
        self.probed
            .store(if available { 1 } else { 2 }, Ordering::Relaxed);
        available
    }

    /// The function, looked up by name, if the driver has it: for functions that cudarc's
    /// bindings of the chosen CUDA version do not declare, which `probed!` cannot call.
    ///
    /// # Safety
    ///
    /// `F` must be the function's exact C signature (an `unsafe extern "C" fn` type).
    pub(crate) unsafe fn function<F: Copy>(&self) -> Option<F> {
        if !self.available() {
            return None;
        }
        let name = std::ffi::CStr::from_bytes_with_nul(self.symbol_nul.as_bytes()).ok()?;
        // SAFETY: the caller vouches for `F`.
        unsafe { function(name) }
    }

    /// `Ok` if the function can be called; else the error that names it and its version (or
    /// the driver's own error, when there is no driver).
    #[inline]
    pub(crate) fn require(&self) -> Result<()> {
        if self.available() {
            return Ok(());
        }
        ensure_loaded()?;
        Err(Error::NotSupported {
            function: self.symbol,
            needs: self.needs,
        })
    }
}

macro_rules! capabilities {
    ($($(#[$only:meta])* $symbol:ident = $needs:literal,)*) => {
        /// The driver functions newer than CUDA 12.0 that this crate calls, each with the
        /// version that brought it.
        #[allow(non_upper_case_globals)]
        pub(crate) mod newer {
            use super::Capability;
            $(
                #[doc = concat!("`", stringify!($symbol), "`")]
                $(#[$only])*
                pub(crate) static $symbol: Capability =
                    Capability::new(stringify!($symbol), concat!(stringify!($symbol), "\0"), $needs);
            )*
        }

        /// Every entry of [`newer`], for the tests that walk the table.
        pub(crate) static CAPABILITIES: &[&Capability] = &[$($(#[$only])* &newer::$symbol),*];
    };
}

capabilities! {
    cuCtxFromGreenCtx = 12040,
    cuDevResourceGenerateDesc = 12040,
    cuDevSmResourceSplitByCount = 12040,
    cuDeviceGetDevResource = 12040,
    cuEventElapsedTime_v2 = 12080,
    // Conditional nodes: the handle (12.3) and the generic node call (`_v2`, with edge data,
    // 12.3), through which they are added.
    cuGraphAddNode_v2 = 12030,
    cuGraphConditionalHandleCreate = 12030,
    cuGreenCtxCreate = 12040,
    cuGreenCtxDestroy = 12040,
    cuGreenCtxStreamCreate = 12050,
    cuKernelGetParamInfo = 12040,
    // Not in cudarc's bindings before CUDA 13.2: looked up by name (`Capability::function`).
    cuKernelGetParamCount = 13020,
    cuLibraryGetKernelCount = 12040,
    // Batched copies: the bindings of CUDA 12.8 and 12.9 declare the first form (with a
    // `failIdx` out-parameter); those of 13.0 on declare only `_v2`, without it, which drivers
    // of 13.0 and newer export.
    #[cfg(any(feature = "cuda-12080", feature = "cuda-12090"))]
    cuMemcpyBatchAsync = 12080,
    #[cfg(not(any(feature = "cuda-12080", feature = "cuda-12090")))]
    cuMemcpyBatchAsync_v2 = 13000,
    cuMemAdvise_v2 = 12020,
    cuMemPrefetchAsync_v2 = 12020,
}

/// Arguments of CUDA 12.0 functions that only newer drivers accept, each with the version that
/// brought it: on an older driver the call is refused with [`Error::NotSupported`] naming it,
/// and nothing is called.
pub(crate) mod newer_uses {
    /// A memory pool of pinned host memory on no particular NUMA node (CUDA 12.6).
    pub(crate) const HOST_POOL: (&str, i32) = ("cuMemPoolCreate with a host location", 12060);
    /// A captured launch with programmatic stream serialization, which capture turns into a
    /// programmatic edge of the graph (CUDA 12.3).
    pub(crate) const CAPTURED_PROGRAMMATIC: (&str, i32) = (
        "cuLaunchKernelEx with programmatic serialization in a stream capture",
        12030,
    );
    /// A memory pool of pinned host memory on a NUMA node (CUDA 12.2).
    pub(crate) const HOST_NUMA_POOL: (&str, i32) =
        ("cuMemPoolCreate with a host NUMA location", 12020);
}

/// `Ok` if the driver is at least `use_.1`; else [`Error::NotSupported`] naming `use_.0`.
pub(crate) fn require_version(use_: (&'static str, i32)) -> Result<()> {
    if driver_version()? >= use_.1 {
        return Ok(());
    }
    Err(Error::NotSupported {
        function: use_.0,
        needs: use_.1,
    })
}

/// The driver functions newer than [`MIN_DRIVER_VERSION`] that this crate calls, each with the
/// CUDA version that brought it (1000 × major + 10 × minor). On a driver that is older, or that
/// does not export one of them, every call that needs it returns [`Error::NotSupported`]
/// naming it (or uses a fallback: `elapsed_ms` falls back to `cuEventElapsedTime`, a
/// kernel's parameter sizes are then unknown (without `cuKernelGetParamInfo`) or counted from
/// its image (without `cuKernelGetParamCount`), and `StreamHandle::copy_batch` queues one
/// `cuMemcpyAsync` per copy).
pub fn newer_functions() -> impl Iterator<Item = (&'static str, i32)> {
    CAPABILITIES
        .iter()
        .map(|capability| (capability.symbol, capability.needs))
}

/// Calls a driver function of the capability table ([`newer`]) after its probe: like
/// `driver!`, but `Err(Error::NotSupported { .. })` without calling anything on a driver that
/// lacks it. `probed!(status cuName(…))` returns the raw status instead, for calls whose
/// statuses mean more than success or failure. As with `driver!`, the call sits in the
/// caller's `unsafe` block.
macro_rules! probed {
    (status $function:ident ( $($argument:expr),* $(,)? )) => {
        match $crate::driver::load::newer::$function.require() {
            Ok(()) => Ok($crate::driver::sys::$function($($argument),*)),
            Err(error) => Err(error),
        }
    };
    ($function:ident ( $($argument:expr),* $(,)? )) => {
        match $crate::driver::load::newer::$function.require() {
            Ok(()) => $crate::driver::call::driver!($function($($argument),*)),
            Err(error) => Err(error),
        }
    };
}
pub(crate) use probed;

#[cfg(test)]
mod tests {
    use super::CAPABILITIES;

    /// `(path under src/, text)` of each of the crate's source files.
    type Source = (&'static str, &'static str);

    /// Embeds the named files of `src/` when the test is compiled, so that the test binary
    /// needs no source tree at run time. `every_module_file_is_embedded` keeps the list
    /// complete.
    macro_rules! sources {
        ($($path:literal),* $(,)?) => {
            &[$(($path, include_str!(concat!("../", $path)))),*]
        };
    }

    /// Every source file of the crate. A new module's file goes here (the test below names it).
    const SOURCES: &[Source] = sources![
        "lib.rs",
        "prelude.rs",
        "code/check.rs",
        "code/conditional.rs",
        "code/config.rs",
        "code/image.rs",
        "code/kernel.rs",
        "code/launch.rs",
        "code/launch_attributes.rs",
        "code/library.rs",
        "code/mod.rs",
        "code/occupancy.rs",
        "code/params.rs",
        "code/program.rs",
        "code/tensor_map.rs",
        "code/tensor_map_im2col.rs",
        "code/tensor_map_rules.rs",
        "driver/call.rs",
        "driver/capture.rs",
        "driver/capture_sync.rs",
        "driver/current.rs",
        "driver/load.rs",
        "driver/mod.rs",
        "error.rs",
        "exec/completion.rs",
        "exec/completion_notifier.rs",
        "exec/completion_protocol.rs",
        "exec/completion_waiter.rs",
        "exec/context.rs",
        "exec/device.rs",
        "exec/disposal.rs",
        "exec/event.rs",
        "exec/event_recycler.rs",
        "exec/green.rs",
        "exec/host.rs",
        "exec/mod.rs",
        "exec/notifier_count.rs",
        "exec/record_count.rs",
        "exec/spin_credit.rs",
        "exec/stream.rs",
        "exec/stream_generation.rs",
        "exec/stream_progress.rs",
        "exec/stream_recycler.rs",
        "graph/book.rs",
        "graph/capture.rs",
        "graph/child.rs",
        "graph/conditional.rs",
        "graph/exec.rs",
        "graph/host.rs",
        "graph/launch_plan.rs",
        "graph/memory_nodes.rs",
        "graph/mod.rs",
        "graph/node_update.rs",
        "graph/nodes.rs",
        "interop.rs",
        "ipc/event.rs",
        "ipc/fd_passing.rs",
        "ipc/fd_taking.rs",
        "ipc/mod.rs",
        "ipc/pointer.rs",
        "ipc/pool.rs",
        "ipc/token.rs",
        "memory/batch.rs",
        "memory/copy.rs",
        "memory/device_ptr.rs",
        "memory/fixed_reach.rs",
        "memory/growable.rs",
        "memory/host_access.rs",
        "memory/host_view.rs",
        "memory/managed.rs",
        "memory/mod.rs",
        "memory/pool.rs",
        "memory/pool_tuning.rs",
        "memory/reach.rs",
        "memory/remote.rs",
        "memory/typed.rs",
        "memory/vmm.rs",
        "order/access_gate.rs",
        "order/contexts_used.rs",
        "order/contexts_used_protocol.rs",
        "order/markers.rs",
        "order/mod.rs",
        "order/stream_order.rs",
        "order/stream_order_protocol.rs",
        "sync.rs",
    ];

    /// Every call of a listed function goes through `probed!`: no `driver!(cuName(` and no
    /// `sys::cuName(` for a name in the table anywhere in the crate's sources.
    #[test]
    fn listed_functions_are_called_only_through_the_probe() {
        let mut offenders = Vec::new();
        for &(path, text) in SOURCES {
            for capability in CAPABILITIES {
                for form in ["driver!(", "sys::"] {
                    let needle = format!("{form}{}(", capability.symbol);
                    if text.contains(&needle) {
                        offenders.push(format!("src/{path}: {needle}"));
                    }
                }
            }
        }
        assert!(offenders.is_empty(), "unprobed calls: {offenders:#?}");
    }

    /// The file a `mod name;` declaration in `parent` (a path under `src/`) loads, in both
    /// forms (`name.rs`, `name/mod.rs`), as the compiler looks for it.
    fn module_files(parent: &str, name: &str) -> [String; 2] {
        let dir = if parent == "lib.rs" {
            String::new()
        } else if let Some(dir) = parent.strip_suffix("/mod.rs") {
            format!("{dir}/")
        } else {
            format!("{}/", parent.trim_end_matches(".rs"))
        };
        [format!("{dir}{name}.rs"), format!("{dir}{name}/mod.rs")]
    }

    /// Each module the embedded sources declare (`mod name;`, from `lib.rs` down) is itself
    /// embedded, and each embedded file is a declared module: a module file added to the
    /// crate but not to [`SOURCES`] fails this test, which names it.
    #[test]
    fn every_module_file_is_embedded() {
        let embedded: std::collections::BTreeSet<&str> =
            SOURCES.iter().map(|&(path, _)| path).collect();
        let mut declared = std::collections::BTreeSet::from(["lib.rs".to_string()]);
        let mut missing = Vec::new();
        for &(path, text) in SOURCES {
            for line in text.lines() {
                let line = line.trim();
                let item = match line.strip_prefix("pub") {
                    Some(rest) if rest.starts_with('(') => rest
                        .split_once(')')
                        .map_or(rest, |(_, after)| after)
                        .trim_start(),
                    Some(rest) => rest.trim_start(),
                    None => line,
                };
                let Some(name) = item
                    .strip_prefix("mod ")
                    .and_then(|rest| rest.strip_suffix(';'))
                else {
                    continue;
                };
                let files = module_files(path, name.trim());
                match files.iter().find(|file| embedded.contains(file.as_str())) {
                    Some(file) => {
                        declared.insert(file.clone());
                    }
                    None => missing.push(format!("src/{} (declared in src/{path})", files[0])),
                }
            }
        }
        assert!(
            missing.is_empty(),
            "add these files to SOURCES in src/driver/load.rs: {missing:#?}"
        );
        let stale: Vec<&&str> = embedded
            .iter()
            .filter(|path| !declared.contains(**path))
            .collect();
        assert!(stale.is_empty(), "embedded but not a module: {stale:?}");
    }

    #[test]
    fn every_listed_function_is_newer_than_the_floor() {
        for capability in CAPABILITIES {
            assert!(
                capability.needs > super::MIN_DRIVER_VERSION,
                "{}",
                capability.symbol
            );
        }
    }
}
