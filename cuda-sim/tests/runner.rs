//! The `cuda-sim` runner: `cuda-sim run [OPTIONS] -- PROGRAM ARGS…` runs a program and its
//! children on the simulator, prints one summary line, and exits with the program's status
//! or 3 after violations. The last test runs `cargo test` of a crate outside this workspace
//! that depends only on cudarc (`fixtures/cudarc-app`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudarc::driver::sys;

mod common;
use common::*;

fn runner() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cuda-sim"));
    command.arg("run");
    command
}

/// `cuda-sim run [options] -- <this test binary> <scenario>`.
fn run_scenario(options: &[&str], scenario: &str) -> Output {
    runner()
        .args(options)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            scenario,
            "--exact",
            "--include-ignored",
            "--test-threads",
            "1",
        ])
        .env(MARKER, scenario)
        .output()
        .expect("run cuda-sim")
}

fn summary(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    stderr
        .lines()
        .rev()
        .find(|line| line.starts_with("cuda-sim: ") && line.contains(" violations, leaks: "))
        .unwrap_or_else(|| panic!("no summary line in:\n{stderr}"))
        .to_string()
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_clean() {
    child();
    setup();
    let stream = new_stream();
    let mut ptr = 0;
    // SAFETY: valid out-pointer; live stream.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 1024, stream));
        ok(sys::cuMemsetD8Async(ptr, 1, 1024, stream));
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuStreamSynchronize(stream));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_unordered_and_leaky() {
    child();
    setup();
    let (a, b) = (new_stream(), new_stream());
    let mut ptr = 0;
    // SAFETY: valid out-pointer; live streams. The free is deliberately unordered.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 1024, a));
        ok(sys::cuMemsetD8Async(ptr, 1, 1024, a));
        ok(sys::cuMemFreeAsync(ptr, b));
        ok(sys::cuCtxSynchronize());
    }
    destroy_stream(a);
    // `b` is leaked.
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_two_devices() {
    child();
    let mut count = 0;
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        ok(sys::cuInit(0));
        ok(sys::cuDeviceGetCount(&mut count));
        let mut total = 0;
        ok(sys::cuDeviceTotalMem_v2(&mut total, 1));
        assert_eq!(total, 256 << 20);
    }
    assert_eq!(count, 2);
}

#[test]
fn a_clean_program_exits_with_its_status() {
    let output = run_scenario(&[], "scenario_clean");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        summary(&output),
        "cuda-sim: 0 violations, leaks: none, 1 processes"
    );
}

#[test]
fn violations_exit_with_3_and_leaks_are_listed() {
    let report = std::env::temp_dir().join(format!("cuda-sim-runner-{}.json", std::process::id()));
    let output = run_scenario(
        &["--report", report.to_str().unwrap()],
        "scenario_unordered_and_leaky",
    );
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert_eq!(
        summary(&output),
        "cuda-sim: 1 violations, leaks: stream 1, 1 processes"
    );
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let _ = std::fs::remove_file(&report);
    assert_eq!(merged["processes"], 1);
    assert_eq!(merged["violations"][0]["kind"], "unordered-free");
    assert_eq!(merged["leaks"]["stream"], 1);
}

#[test]
fn strict_aborts_at_the_first_violation() {
    let output = run_scenario(&["--strict"], "scenario_unordered_and_leaky");
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("violation unordered-free"), "{stderr}");
}

#[test]
fn options_set_devices_and_memory() {
    let output = run_scenario(
        &["--devices", "2", "--memory", &(256u64 << 20).to_string()],
        "scenario_two_devices",
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn the_program_status_and_child_processes_are_kept() {
    let exe = std::env::current_exe().unwrap();
    let one = format!(
        "{} scenario_clean --exact --include-ignored --test-threads 1",
        exe.display()
    );
    let output = runner()
        .args(["--", "sh", "-c", &format!("{one} && {one} && exit 7")])
        .env(MARKER, "scenario_clean")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(7), "{output:?}");
    assert_eq!(
        summary(&output),
        "cuda-sim: 0 violations, leaks: none, 2 processes"
    );
    let output = runner().args(["--", "true"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        summary(&output),
        "cuda-sim: 0 violations, leaks: none, 0 processes"
    );
    let output = runner().arg("--devices").output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "a bad command line is an error"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `cuda-sim run -- cargo test` in a crate made in a temporary directory, outside this
/// workspace, that depends only on cudarc: every test passes, with no violation and no leak.
#[test]
fn cargo_test_of_a_cudarc_crate_outside_the_workspace() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("cuda-sim-cudarc-app-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&manifest.join("fixtures/cudarc-app"), &dir);
    // The build is kept in the workspace's target directory, so that later runs reuse it.
    let target: PathBuf = cuda_sim::library_dir().parent().unwrap().join("cudarc-app");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = runner()
        .arg("--")
        .arg(cargo)
        .args(["test", "--offline", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cuda-sim");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}\n{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 11 passed"), "{stdout}");
    let summary = summary(&output);
    assert!(
        summary.starts_with("cuda-sim: 0 violations, leaks: none, "),
        "{summary}"
    );
}
