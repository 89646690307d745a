//! What the tests share: each test re-runs itself as a child process on the simulated driver
//! of `cuda-sim` (strict: the first violation aborts it), and stand-in raw values for the
//! libraries, which are not on the simulator.

use std::ptr::NonNull;

use cuda_sim::SimCommand;

/// Set in the child process: the test runs its body instead of starting a child.
const CHILD: &str = "HANDLES_CUDA_LIBS_CHILD";

/// Runs `body` on the simulator with `devices` devices, from the test named `name`: in the
/// test process this re-runs that test alone as a child, which runs `body`. The child must
/// succeed and leave no violation and no leak (but the primary-context retains that threads
/// keep in their caches).
pub fn on_simulator(name: &str, devices: usize, body: impl FnOnce()) {
    if std::env::var_os(CHILD).is_some() {
        body();
        println!("child: done");
        return;
    }
    let report = std::env::temp_dir().join(format!(
        "handles-cuda-libs-{name}-{}.json",
        std::process::id()
    ));
    let output = cuda_sim::command(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture"])
        .env(CHILD, "1")
        .sim_devices(devices)
        .sim_strict()
        .sim_report(&report)
        .output()
        .expect("run the child on the simulator");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("child: done"), "{stdout}");
    let parsed = cuda_sim::Report::read(&report).expect("the simulator's report");
    // Best effort: a stale report in the temporary directory is harmless.
    let _ = std::fs::remove_file(&report);
    assert!(parsed.violations.is_empty(), "{:?}", parsed.violations);
    assert!(
        parsed.leaks_without_primary().is_empty(),
        "{:?}",
        parsed.leaks
    );
}

/// A stand-in raw value for a library's handle, which nothing dereferences: the tests check
/// the records and the checks made before any library call, and never reach a library.
pub fn stand_in<T>() -> *mut T {
    NonNull::dangling().as_ptr()
}
