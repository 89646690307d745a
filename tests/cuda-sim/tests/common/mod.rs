//! The harness the simulator's scenario files share: run a scenario in a child process (the
//! test binary re-executed with the simulator on its library path), read its report, and the
//! raw driver calls every scenario starts and ends with.
//!
//! Each test binary includes this module and uses part of it.
#![allow(dead_code)]

use std::process::{Command, Output};

use cuda_sim::{Report, SimCommand};
use cudarc::driver::sys::{self, CUresult};

/// Set in a child's environment; scenarios refuse to run without it.
pub const MARKER: &str = "CUDA_SIM_SCENARIO_CHILD";
/// The test kernels, NUL-terminated as the driver takes PTX.
pub const PTX: &str = concat!(include_str!("../../../kernels/test_kernels.ptx"), "\0");

/// Runs scenario `name` in a child under the simulator, with `setup` applied to the command.
pub fn run(name: &str, setup: impl FnOnce(&mut Command)) -> (Output, Option<Report>) {
    let report = std::env::temp_dir().join(format!(
        "cuda-sim-scenario-{}-{name}.json",
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
        .sim_report(&report);
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

/// Loads the test kernels as a context-independent library.
pub fn load() -> sys::CUlibrary {
    let mut library = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX; no options.
    unsafe {
        ok(sys::cuLibraryLoadData(
            &mut library,
            PTX.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        ))
    };
    library
}

/// A kernel of `library` by name.
pub fn kernel(library: sys::CUlibrary, name: &std::ffi::CStr) -> sys::CUkernel {
    let mut kernel = std::ptr::null_mut();
    // SAFETY: live library, NUL-terminated name.
    unsafe { ok(sys::cuLibraryGetKernel(&mut kernel, library, name.as_ptr())) };
    kernel
}
