//! The harness the simulator's scenario files share: run a scenario in a child process (the
//! test binary re-executed with the simulator on its library path), read its report, and the
//! raw driver calls every scenario starts and ends with.
//!
//! Each test binary includes this module and uses part of it.
#![allow(dead_code)]

use std::ffi::c_void;
use std::process::{Command, Output};

use cuda_sim::{Report, SimCommand};
use cudarc::driver::sys::{self, CUresult};

/// The legacy default stream (`CU_STREAM_LEGACY`).
pub const LEGACY: sys::CUstream = 0x1 as sys::CUstream;
/// Set in a child's environment; scenarios refuse to run without it.
pub const MARKER: &str = "CUDA_SIM_SCENARIO_CHILD";
/// The test kernels, NUL-terminated as the driver takes PTX.
pub const PTX: &str = concat!(
    include_str!("../../../tests/kernels/test_kernels.ptx"),
    "\0"
);

/// Runs scenario `name` in a child under the simulator, with `setup` applied to the command.
pub fn run(name: &str, setup: impl FnOnce(&mut Command)) -> (Output, Option<Report>) {
    // A number of its own per run: two tests of one binary may run the same scenario at once
    // (with different settings), and must not read each other's report.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let report = std::env::temp_dir().join(format!(
        "cuda-sim-scenario-{}-{run}-{name}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&report);
    let mut command = cuda_sim::command(std::env::current_exe().unwrap());
    command
        .args([
            name,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(MARKER, name)
        .sim_report(&report)
        // The opt-in checks are on for the simulator's own scenarios (a setup may turn one off).
        .sim_check_data_race(true)
        .sim_check_initcheck(true)
        .sim_check_synccheck(true)
        .sim_check_racecheck(true);
    setup(&mut command);
    let output = command.output().expect("run the child");
    let parsed = Report::read(&report).ok();
    let _ = std::fs::remove_file(&report);
    (output, parsed)
}

/// Runs a scenario that must succeed, with `setup` applied to the command, and returns its
/// report.
pub fn report_with(name: &str, setup: impl FnOnce(&mut Command)) -> Report {
    let (output, report) = run(name, setup);
    assert!(
        output.status.success(),
        "{name} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    report.unwrap_or_else(|| panic!("{name} wrote no report"))
}

/// Runs a scenario that must succeed and returns its report.
pub fn report_of(name: &str) -> Report {
    report_with(name, |_| {})
}

/// The kinds of the report's violations, in order.
pub fn kinds(report: &Report) -> Vec<&str> {
    report.violations.iter().map(|v| v.kind.as_str()).collect()
}

/// The calls of the report's violations, in order.
pub fn calls(report: &Report) -> Vec<&str> {
    report.violations.iter().map(|v| v.call.as_str()).collect()
}

/// Asserts that the report lists no leaks but the primary contexts' retains.
#[track_caller]
pub fn assert_no_leaks(report: &Report) {
    assert!(
        report.leaks_without_primary().is_empty(),
        "{:?}",
        report.leaks
    );
}

/// Asserts that the report lists no violations and no leaks but the primary contexts'
/// retains.
#[track_caller]
pub fn assert_clean(report: &Report) {
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_no_leaks(report);
}

/// Asserts that the message of the report's violation `index` contains `needle`.
#[track_caller]
pub fn assert_message_contains(report: &Report, index: usize, needle: &str) {
    let violation = &report.violations[index];
    assert!(
        violation.message.contains(needle),
        "{needle:?} not in {violation:?}"
    );
}

/// Refuses to run a scenario that a parent test did not start: alone, without the simulator,
/// it would talk to a real driver (or none).
pub fn child() {
    assert!(
        std::env::var_os(MARKER).is_some(),
        "this scenario runs under the simulator from a parent test in its file"
    );
}

#[track_caller]
pub fn ok(result: CUresult) {
    assert_eq!(result, CUresult::CUDA_SUCCESS);
}

/// cuInit, retain device 0's primary context and make it current.
pub fn setup() -> sys::CUcontext {
    let mut context = std::ptr::null_mut();
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        ok(sys::cuInit(0));
        ok(sys::cuDevicePrimaryCtxRetain(&mut context, 0));
        ok(sys::cuCtxSetCurrent(context));
    }
    context
}

/// Releases the retain of [`setup`].
pub fn teardown() {
    // SAFETY: releases the retain of `setup`.
    unsafe {
        ok(sys::cuCtxSetCurrent(std::ptr::null_mut()));
        ok(sys::cuDevicePrimaryCtxRelease_v2(0));
    }
}

/// A non-blocking stream in the current context.
pub fn new_stream() -> sys::CUstream {
    let mut stream = std::ptr::null_mut();
    // SAFETY: a context is current; valid out-pointer.
    unsafe { ok(sys::cuStreamCreate(&mut stream, 1)) };
    stream
}

pub fn destroy_stream(stream: sys::CUstream) {
    // SAFETY: our own stream.
    unsafe { ok(sys::cuStreamDestroy_v2(stream)) };
}

/// Loads NUL-terminated PTX `text` as a context-independent library, or the driver's answer.
pub fn load_ptx(text: &str) -> Result<sys::CUlibrary, CUresult> {
    assert!(
        text.ends_with('\0'),
        "PTX handed to the driver ends with a NUL"
    );
    let mut library = std::ptr::null_mut();
    // SAFETY: NUL-terminated text (checked above); no options; a valid out-pointer.
    let status = unsafe {
        sys::cuLibraryLoadData(
            &mut library,
            text.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    match status {
        CUresult::CUDA_SUCCESS => Ok(library),
        error => Err(error),
    }
}

/// Loads the test kernels as a context-independent library.
pub fn load() -> sys::CUlibrary {
    load_ptx(PTX).expect("load the test kernels")
}

pub fn unload(library: sys::CUlibrary) {
    // SAFETY: our own library.
    unsafe { ok(sys::cuLibraryUnload(library)) };
}

/// A kernel of `library` by name.
pub fn kernel(library: sys::CUlibrary, name: &std::ffi::CStr) -> sys::CUkernel {
    let mut kernel = std::ptr::null_mut();
    // SAFETY: live library, NUL-terminated name.
    unsafe { ok(sys::cuLibraryGetKernel(&mut kernel, library, name.as_ptr())) };
    kernel
}

/// Launches `f` with `blocks` × `threads` (along x) on `stream`, with `params` as
/// `kernelParams`; returns the status.
pub fn launch_1d(
    f: sys::CUfunction,
    blocks: u32,
    threads: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> CUresult {
    // SAFETY: `params` points at one argument per kernel parameter, of the right sizes.
    unsafe {
        sys::cuLaunchKernel(
            f,
            blocks,
            1,
            1,
            threads,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

/// Launches one of the test kernels whose parameters are `(ptr, x, n)` — `fill_u32` and
/// `add_u32` (`x`: a `u32` value) or `copy_u32` (`x`: the source pointer) — with
/// `blocks` × `threads` on `stream`; returns the status.
pub fn launch_kernel<X>(
    kernel: sys::CUkernel,
    blocks: u32,
    threads: u32,
    stream: sys::CUstream,
    (mut ptr, mut x, mut n): (sys::CUdeviceptr, X, u32),
) -> CUresult {
    let mut params = [
        (&mut ptr as *mut u64).cast::<c_void>(),
        (&mut x as *mut X).cast(),
        (&mut n as *mut u32).cast(),
    ];
    launch_1d(kernel.cast(), blocks, threads, stream, &mut params)
}

/// An empty graph.
pub fn new_graph() -> sys::CUgraph {
    let mut graph = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    unsafe { ok(sys::cuGraphCreate(&mut graph, 0)) };
    graph
}

/// `graph` instantiated without flags.
pub fn instantiate(graph: sys::CUgraph) -> sys::CUgraphExec {
    let mut exec = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the driver checks the graph handle.
    unsafe { ok(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)) };
    exec
}

/// Destroys `exec`, then the graph it was instantiated from.
pub fn destroy_graph(exec: sys::CUgraphExec, graph: sys::CUgraph) {
    // SAFETY: the caller's own exec and graph, each destroyed once.
    unsafe {
        ok(sys::cuGraphExecDestroy(exec));
        ok(sys::cuGraphDestroy(graph));
    }
}

/// Grants (or revokes) `device`'s access to `pool`.
///
/// # Safety
///
/// `pool` is alive.
#[track_caller]
pub unsafe fn set_device_access(pool: sys::CUmemoryPool, device: i32, granted: bool) {
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        flags: if granted {
            sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        } else {
            sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE
        },
    };
    // SAFETY: a live pool (the caller's contract) and one valid descriptor.
    unsafe { ok(sys::cuMemPoolSetAccess(pool, &desc, 1)) };
}

/// A host pool (host NUMA node 0) whose memory device 0 may touch.
///
/// # Safety
///
/// A context is current.
pub unsafe fn host_pool(handle_types: sys::CUmemAllocationHandleType) -> sys::CUmemoryPool {
    // SAFETY: all-zero is the documented default of the props struct; valid pointers.
    unsafe {
        let mut props: sys::CUmemPoolProps = std::mem::zeroed();
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = handle_types;
        props.location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA,
            id: 0,
        };
        let mut pool = std::ptr::null_mut();
        ok(sys::cuMemPoolCreate(&mut pool, &props));
        set_device_access(pool, 0, true);
        pool
    }
}

pub fn sm_count(resource: &sys::CUdevResource) -> u32 {
    // SAFETY: the simulator fills the SM member of the union for SM resources.
    unsafe { resource.__bindgen_anon_1.sm.smCount }
}

/// Splits the device's SMs, makes a green context of one group, and launches a kernel on a
/// stream of it, with its context current.
pub fn green_context() -> (sys::CUgreenCtx, sys::CUcontext) {
    // SAFETY: valid pointers throughout.
    unsafe {
        let mut all: sys::CUdevResource = std::mem::zeroed();
        ok(sys::cuDeviceGetDevResource(
            0,
            &mut all,
            sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
        ));
        assert_eq!(sm_count(&all), 132);
        let mut groups = 0;
        let mut remaining: sys::CUdevResource = std::mem::zeroed();
        ok(sys::cuDevSmResourceSplitByCount(
            std::ptr::null_mut(),
            &mut groups,
            &all,
            std::ptr::null_mut(),
            0,
            10,
        ));
        assert_eq!(groups, 8, "10 SMs round up to 16: 8 groups fit in 132");
        let mut result: [sys::CUdevResource; 2] = std::mem::zeroed();
        groups = 2;
        ok(sys::cuDevSmResourceSplitByCount(
            result.as_mut_ptr(),
            &mut groups,
            &all,
            &mut remaining,
            0,
            10,
        ));
        assert_eq!(groups, 2);
        assert_eq!(sm_count(&result[0]), 16);
        assert_eq!(sm_count(&result[1]), 16);
        assert_eq!(sm_count(&remaining), 100);
        let mut desc = std::ptr::null_mut();
        ok(sys::cuDevResourceGenerateDesc(
            &mut desc,
            result.as_mut_ptr(),
            1,
        ));
        let mut green = std::ptr::null_mut();
        assert_eq!(
            sys::cuGreenCtxCreate(&mut green, desc, 0, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "13.0 requires CU_GREEN_CTX_DEFAULT_STREAM"
        );
        ok(sys::cuGreenCtxCreate(
            &mut green,
            desc,
            0,
            sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
        ));
        let mut own: sys::CUdevResource = std::mem::zeroed();
        ok(sys::cuGreenCtxGetDevResource(
            green,
            &mut own,
            sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
        ));
        assert_eq!(sm_count(&own), 16);
        let mut context = std::ptr::null_mut();
        ok(sys::cuCtxFromGreenCtx(&mut context, green));
        (green, context)
    }
}

/// A planted bug, its twin, and the parent test that checks both. `$bug` and `$twin` run
/// `$body(false)` and `$body(true)` in a child under the simulator, then `$after` when given
/// (what the body leaves to do: `teardown()`); the parent test asserts that the bug reports
/// exactly one violation, of `$kind`, whose message contains each needle, leaks nothing, and
/// that the twin reports nothing.
#[allow(unused_macros)]
macro_rules! planted {
    ($test:ident, $bug:ident, $twin:ident, $body:ident, $kind:expr, [$($needle:expr),* $(,)?]
     $(, then $after:expr)? $(,)?) => {
        #[test]
        #[ignore = "runs under the simulator from a parent test in this file"]
        fn $bug() {
            child();
            $body(false);
            $($after;)?
        }

        #[test]
        #[ignore = "runs under the simulator from a parent test in this file"]
        fn $twin() {
            child();
            $body(true);
            $($after;)?
        }

        #[test]
        fn $test() {
            let report = report_of(stringify!($bug));
            assert_eq!(kinds(&report), [$kind], "{:?}", report.violations);
            for needle in [$($needle),*] {
                assert_message_contains(&report, 0, needle);
            }
            assert_no_leaks(&report);
            assert_clean(&report_of(stringify!($twin)));
        }
    };
}
