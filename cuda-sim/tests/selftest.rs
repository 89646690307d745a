//! The simulator catches what it claims to catch. Each scenario drives raw
//! `cudarc::driver::sys` calls in a child process (this test binary, re-executed with the
//! simulator on its library path), and the parent test reads the child's report.
//!
//! Scenario functions are ignored: run alone, without the simulator, they would talk to a
//! real driver (or none), so they refuse to run unless the parent started them.

use std::path::PathBuf;

use cuda_sim::{Report, SimCommand};
use cudarc::driver::sys::{self, CUresult};

mod common;
use common::*;

fn alloc_on(stream: sys::CUstream, size: usize) -> sys::CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: valid out-pointer and live stream.
    unsafe { ok(sys::cuMemAllocAsync(&mut ptr, size, stream)) };
    ptr
}

/// Allocates and fills on `a`, then frees on `b`, ordered by an event when `ordered`.
fn free_on_another_stream(ordered: bool) {
    child();
    setup();
    let (a, b) = (new_stream(), new_stream());
    let ptr = alloc_on(a, 4096);
    let mut event = std::ptr::null_mut();
    // SAFETY: live streams, event and allocation.
    unsafe {
        ok(sys::cuMemsetD8Async(ptr, 7, 4096, a));
        ok(sys::cuEventCreate(&mut event, 2));
        if ordered {
            ok(sys::cuEventRecord(event, a));
            ok(sys::cuStreamWaitEvent(b, event, 0));
        }
        ok(sys::cuMemFreeAsync(ptr, b));
        ok(sys::cuStreamSynchronize(b));
        ok(sys::cuEventDestroy_v2(event));
    }
    destroy_stream(a);
    destroy_stream(b);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_unordered_free() {
    free_on_another_stream(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_ordered_free() {
    free_on_another_stream(true);
}

/// Frees on a stream, then uses the memory (`bad`) or reads it first (good), checking values.
fn use_and_free(bad: bool) {
    child();
    setup();
    let stream = new_stream();
    let ptr = alloc_on(stream, 256);
    let mut host = [0u8; 256];
    // SAFETY: live stream; `host` outlives the synchronised copy.
    unsafe {
        ok(sys::cuMemsetD8Async(ptr, 0x5a, 256, stream));
        if !bad {
            ok(sys::cuMemcpyDtoHAsync_v2(
                host.as_mut_ptr().cast(),
                ptr,
                256,
                stream,
            ));
            ok(sys::cuStreamSynchronize(stream));
            assert!(host.iter().all(|&b| b == 0x5a), "memset moved bytes");
        }
        ok(sys::cuMemFreeAsync(ptr, stream));
        if bad {
            assert_ne!(
                sys::cuMemsetD8Async(ptr, 1, 256, stream),
                CUresult::CUDA_SUCCESS
            );
        }
        ok(sys::cuStreamSynchronize(stream));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_use_after_free() {
    use_and_free(true);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_use_before_free() {
    use_and_free(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_destroyed_handle() {
    child();
    setup();
    let stream = new_stream();
    destroy_stream(stream);
    // SAFETY: deliberately uses a destroyed stream; the simulator only looks the value up.
    unsafe { assert_ne!(sys::cuStreamSynchronize(stream), CUresult::CUDA_SUCCESS) };
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_double_destroy() {
    child();
    setup();
    let mut event = std::ptr::null_mut();
    // SAFETY: deliberately destroys an event twice; the simulator only looks the value up.
    unsafe {
        ok(sys::cuEventCreate(&mut event, 0));
        ok(sys::cuEventDestroy_v2(event));
        assert_ne!(sys::cuEventDestroy_v2(event), CUresult::CUDA_SUCCESS);
    }
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_wrong_context() {
    child();
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        ok(sys::cuInit(0));
        let mut stream = std::ptr::null_mut();
        assert_eq!(
            sys::cuStreamCreate(&mut stream, 0),
            CUresult::CUDA_ERROR_INVALID_CONTEXT
        );
    }
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_right_context() {
    child();
    setup();
    let stream = new_stream();
    destroy_stream(stream);
    teardown();
}

/// Sets `len` bytes of a 256-byte allocation.
fn memset_bytes(len: usize) {
    child();
    setup();
    let mut ptr = 0;
    // SAFETY: a context is current; valid out-pointer; the memset's range is the test.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut ptr, 256));
        let status = sys::cuMemsetD8_v2(ptr, 1, len);
        assert_eq!(status == CUresult::CUDA_SUCCESS, len <= 256);
        ok(sys::cuMemFree_v2(ptr));
    }
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_out_of_bounds() {
    memset_bytes(512);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_in_bounds() {
    memset_bytes(256);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_leaks() {
    child();
    setup();
    let stream = new_stream();
    let _ = alloc_on(stream, 1024);
    let mut event = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    unsafe { ok(sys::cuEventCreate(&mut event, 0)) };
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_fail_second_stream_create() {
    child();
    setup();
    let first = new_stream();
    let mut second = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    unsafe {
        assert_eq!(
            sys::cuStreamCreate(&mut second, 0),
            CUresult::CUDA_ERROR_OUT_OF_MEMORY
        );
    }
    let third = new_stream();
    destroy_stream(first);
    destroy_stream(third);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_device_count() {
    child();
    let mut count = 0;
    // SAFETY: valid out-pointer.
    unsafe {
        ok(sys::cuInit(0));
        ok(sys::cuDeviceGetCount(&mut count));
    }
    let expected: i32 = std::env::var("EXPECTED_DEVICES").unwrap().parse().unwrap();
    assert_eq!(count, expected);
}

#[test]
fn each_violation_kind_is_reported() {
    let cases = [
        ("scenario_unordered_free", "unordered-free"),
        ("scenario_use_after_free", "use-after-free"),
        ("scenario_destroyed_handle", "destroyed-handle"),
        ("scenario_double_destroy", "double-destroy"),
        ("scenario_wrong_context", "wrong-context"),
        ("scenario_out_of_bounds", "out-of-bounds"),
    ];
    for (scenario, kind) in cases {
        let report = report_of(scenario);
        assert_eq!(kinds(&report), vec![kind], "{scenario}: {report:?}");
        assert!(report.calls["cuInit"] >= 1);
    }
}

#[test]
fn the_same_sequences_done_right_report_nothing() {
    for scenario in [
        "scenario_ordered_free",
        "scenario_use_before_free",
        "scenario_right_context",
        "scenario_in_bounds",
    ] {
        let (output, report) = run(scenario, |_| {});
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{scenario}: {stderr}");
        let report = report.unwrap_or_else(|| panic!("{scenario} wrote no report"));
        assert!(report.violations.is_empty(), "{scenario}: {report:?}");
        assert!(report.leaks.is_empty(), "{scenario}: {:?}", report.leaks);
        assert!(!stderr.contains("cuda-sim: violation"), "{stderr}");
    }
}

#[test]
fn leaks_are_counted_by_type() {
    let report = report_of("scenario_leaks");
    assert!(report.violations.is_empty(), "{report:?}");
    let expected: Vec<(String, u64)> = [
        ("allocation", 1),
        ("event", 1),
        ("primary_context", 1),
        ("stream", 1),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    assert_eq!(report.leaks.into_iter().collect::<Vec<_>>(), expected);
}

#[test]
fn fault_injection_fails_the_named_call() {
    let (output, report) = run("scenario_fail_second_stream_create", |command| {
        command.sim_fail(&[("cuStreamCreate", 2, "CUDA_ERROR_OUT_OF_MEMORY")]);
    });
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report.unwrap().calls["cuStreamCreate"], 3);
}

#[test]
fn device_count_comes_from_the_environment() {
    for devices in [1, 2, 4] {
        let (output, _) = run("scenario_device_count", |command| {
            command
                .sim_devices(devices)
                .env("EXPECTED_DEVICES", devices.to_string());
        });
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn strict_mode_aborts_on_the_first_violation() {
    let (output, report) = run("scenario_unordered_free", |command| {
        command.sim_strict();
    });
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cuda-sim: violation unordered-free"),
        "{stderr}"
    );
    // The abort runs no exit handler; the report of the violation is written just before.
    let report = report.expect("a strict abort writes the report of its violation");
    assert_eq!(kinds(&report), ["unordered-free"]);
    assert!(report.leaks.is_empty(), "leaks are not counted at an abort");
}

fn pattern() -> Vec<u8> {
    (0..65536).map(|i| (i * 13 % 251) as u8).collect()
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_ipc_exporter() {
    child();
    setup();
    let stream = new_stream();
    // SAFETY: all-zero is the documented default of the props struct; valid pointers.
    let (pool, ptr, fd, data) = unsafe {
        let mut props: sys::CUmemPoolProps = std::mem::zeroed();
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes =
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        props.location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        };
        let mut pool = std::ptr::null_mut();
        ok(sys::cuMemPoolCreate(&mut pool, &props));
        let mut ptr = 0;
        ok(sys::cuMemAllocFromPoolAsync(&mut ptr, 65536, pool, stream));
        let bytes = pattern();
        ok(sys::cuMemcpyHtoDAsync_v2(
            ptr,
            bytes.as_ptr().cast(),
            bytes.len(),
            stream,
        ));
        ok(sys::cuStreamSynchronize(stream));
        let mut data: sys::CUmemPoolPtrExportData = std::mem::zeroed();
        assert_eq!(
            sys::cuMemPoolExportPointer(&mut data, ptr),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "driver 580: no pointer export before the pool's handle was exported"
        );
        let mut fd: i32 = -1;
        ok(sys::cuMemPoolExportToShareableHandle(
            (&mut fd as *mut i32).cast(),
            pool,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        ));
        ok(sys::cuMemPoolExportPointer(&mut data, ptr));
        let flags = libc::fcntl(fd, libc::F_GETFD);
        assert_eq!(libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC), 0);
        (pool, ptr, fd, data)
    };
    let hex: String = data.reserved.iter().map(|b| format!("{b:02x}")).collect();
    let output = cuda_sim::command(std::env::current_exe().unwrap())
        .args([
            "scenario_ipc_importer",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env(MARKER, "importer")
        .env("IPC_FD", fd.to_string())
        .env("IPC_DATA", hex)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // SAFETY: our own allocation, pool and descriptor.
    unsafe {
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemPoolDestroy(pool));
        libc::close(fd);
    }
    destroy_stream(stream);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_ipc_importer() {
    child();
    setup();
    let stream = new_stream();
    let fd: usize = std::env::var("IPC_FD").unwrap().parse().unwrap();
    let hex = std::env::var("IPC_DATA").unwrap();
    let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64] };
    for (i, byte) in data.reserved.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    // SAFETY: the descriptor was inherited from the parent; valid pointers throughout.
    unsafe {
        let mut pool = std::ptr::null_mut();
        ok(sys::cuMemPoolImportFromShareableHandle(
            &mut pool,
            fd as *mut std::ffi::c_void,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        ));
        let (mut first, mut second) = (0, 0);
        ok(sys::cuMemPoolImportPointer(&mut first, pool, &mut data));
        ok(sys::cuMemPoolImportPointer(&mut second, pool, &mut data));
        assert_eq!(first, second, "nvbug 5570902: the same pointer twice");
        let mut back = vec![0u8; 65536];
        ok(sys::cuMemcpyDtoHAsync_v2(
            back.as_mut_ptr().cast(),
            first,
            back.len(),
            stream,
        ));
        ok(sys::cuStreamSynchronize(stream));
        assert!(back == pattern(), "the importer reads the exporter's bytes");
        ok(sys::cuMemFreeAsync(first, stream));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemPoolDestroy(pool));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn ipc_pool_memory_crosses_processes() {
    let report = report_of("scenario_ipc_exporter");
    assert!(report.violations.is_empty(), "{report:?}");
    assert!(report.leaks.is_empty(), "{:?}", report.leaks);
}

/// Keeps the report path helper honest: `%p` expands to the pid.
#[test]
fn report_paths_expand_the_pid() {
    let dir: PathBuf = std::env::temp_dir();
    let pattern = dir.join("cuda-sim-selftest-pid-%p.json");
    let mut command = cuda_sim::command(std::env::current_exe().unwrap());
    command
        .args(["scenario_right_context", "--exact", "--include-ignored"])
        .env(MARKER, "1")
        .sim_report(&pattern)
        .stdout(std::process::Stdio::piped());
    let child = command.spawn().unwrap();
    let pid = child.id();
    assert!(child.wait_with_output().unwrap().status.success());
    let path = dir.join(format!("cuda-sim-selftest-pid-{pid}.json"));
    let report = Report::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(report.violations.is_empty());
}
