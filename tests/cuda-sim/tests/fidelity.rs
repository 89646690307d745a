//! The simulator behaves as driver 580 was measured to behave (driver-facts and the probes in
//! `tests/cuda-sim/probes/`): capture error codes, the implicit synchronisation of
//! `cuMemFree`/`cuMemFreeHost`, destroyed green contexts that stay current, and peer access
//! to pools checked on every touch.

use std::process::Command;

use cuda_sim::SimCommand;
use cudarc::driver::sys::{self, CUresult};

mod common;
use common::*;

/// `probes/capture_codes.py` prints the same codes under the simulator as on an H200 with
/// driver 580 (`probes/capture_codes.h200.txt`), line by line.
#[test]
fn capture_codes_match_the_h200() {
    let probes = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("probes");
    let report = std::env::temp_dir().join(format!("cuda-sim-probe-{}.json", std::process::id()));
    // The simulator by path: a Python whose environment resets the library path still loads
    // it (and its report is written).
    let output = cuda_sim::command("python3")
        .arg(probes.join("capture_codes.py"))
        .arg(cuda_sim::library_dir().join("libcuda.so"))
        .sim_report(&report)
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "the probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let simulated = String::from_utf8(output.stdout).unwrap();
    let measured = std::fs::read_to_string(probes.join("capture_codes.h200.txt")).unwrap();
    let differences: Vec<String> = measured
        .lines()
        .zip(simulated.lines())
        .filter(|(m, s)| m != s)
        .map(|(m, s)| format!("H200: {m}\n sim: {s}"))
        .collect();
    assert!(
        differences.is_empty() && measured.lines().count() == simulated.lines().count(),
        "the simulator differs from the H200:\n{}",
        differences.join("\n")
    );
    let report = cuda_sim::Report::read(&report).unwrap();
    let _ = std::fs::remove_file(
        std::env::temp_dir().join(format!("cuda-sim-probe-{}.json", std::process::id())),
    );
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// A kernel queued on a non-blocking stream uses a `cuMemAlloc` buffer and a pinned host
/// buffer; `cuMemFree` and `cuMemFreeHost` without a synchronisation are not violations,
/// because driver 580 waits for all work on the device first.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_synchronous_frees_wait_for_the_device() {
    child();
    setup();
    let library = load();
    let fill = kernel(library, c"fill_u32");
    let stream = new_stream();
    let (mut device, mut unused, mut host) = (0, 0, std::ptr::null_mut());
    let n: u32 = 1024;
    // SAFETY: valid out-pointers; the kernel writes `n` u32 into `device`; the copy reads
    // 4 KiB of pinned memory.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut device, 4 * n as usize));
        ok(sys::cuMemAlloc_v2(&mut unused, 256));
        ok(sys::cuMemHostAlloc(&mut host, 4096, 0));
        let mut value = 7u32;
        let mut count = n;
        let mut params = [
            (&mut device as *mut u64).cast::<std::ffi::c_void>(),
            (&mut value as *mut u32).cast(),
            (&mut count as *mut u32).cast(),
        ];
        ok(sys::cuLaunchKernel(
            fill.cast(),
            4,
            1,
            1,
            256,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ));
        ok(sys::cuMemcpyHtoDAsync_v2(device, host, 4096, stream));
        // Neither free synchronises with `stream` explicitly.
        ok(sys::cuMemFree_v2(unused));
        ok(sys::cuMemFreeHost(host));
        ok(sys::cuMemFree_v2(device));
        ok(sys::cuLibraryUnload(library));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn synchronous_frees_wait_for_the_device() {
    let report = report_of("scenario_synchronous_frees_wait_for_the_device");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(
        report.leaks_without_primary().is_empty(),
        "{:?}",
        report.leaks
    );
}

/// The same queue, but the free is stream-ordered on another stream: still unordered.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_async_free_on_another_stream_is_still_unordered() {
    child();
    setup();
    let (a, b) = (new_stream(), new_stream());
    let mut ptr = 0;
    // SAFETY: valid out-pointer and live streams.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 4096, a));
        ok(sys::cuMemsetD8Async(ptr, 1, 4096, a));
        ok(sys::cuMemFreeAsync(ptr, b));
        ok(sys::cuStreamSynchronize(b));
        ok(sys::cuStreamSynchronize(a));
    }
    destroy_stream(a);
    destroy_stream(b);
    teardown();
}

#[test]
fn async_free_on_another_stream_is_still_unordered() {
    let report = report_of("scenario_async_free_on_another_stream_is_still_unordered");
    assert_eq!(kinds(&report), ["unordered-free"]);
}

/// A green context destroyed while current stays current, as on driver 580; setting it
/// current again is accepted but reported, and so is work in it.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_destroyed_green_context_stays_current() {
    child();
    let primary = setup();
    let (green, context) = green_context();
    // SAFETY: plain driver calls on our own handles; the destroyed context is only looked up.
    unsafe {
        ok(sys::cuCtxSetCurrent(context));
        ok(sys::cuGreenCtxDestroy(green));
        let mut current = std::ptr::null_mut();
        ok(sys::cuCtxGetCurrent(&mut current));
        assert_eq!(current, context, "driver 580 keeps it current");
        println!("after destroy");
        let mut stream = std::ptr::null_mut();
        assert_eq!(
            sys::cuStreamCreate(&mut stream, 1),
            CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
        );
        println!("after stream");
        ok(sys::cuCtxSetCurrent(primary));
        // Accepted, as the driver accepts it.
        ok(sys::cuCtxSetCurrent(context));
        ok(sys::cuCtxSetCurrent(primary));
    }
    teardown();
}

#[test]
fn destroyed_green_context_stays_current() {
    let report = report_of("scenario_destroyed_green_context_stays_current");
    // The destroy itself is not reported (no stream was alive); the stream creation in it and
    // the second `cuCtxSetCurrent` are.
    let found: Vec<(&str, &str)> = report
        .violations
        .iter()
        .map(|v| (v.kind.as_str(), v.call.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("destroyed-handle", "cuStreamCreate"),
            ("destroyed-handle", "cuCtxSetCurrent")
        ],
        "{:?}",
        report.violations
    );
}

/// Device 1's work touching device 0's default pool: a violation until device 1 is granted
/// access, then none.
fn peer_touch(granted: bool) {
    child();
    let mut contexts = [std::ptr::null_mut(); 2];
    // SAFETY: plain driver calls with valid out-pointers; the kernel writes 64 u32 of the
    // 256-byte allocation.
    unsafe {
        ok(sys::cuInit(0));
        for (device, context) in contexts.iter_mut().enumerate() {
            ok(sys::cuDevicePrimaryCtxRetain(context, device as i32));
        }
        ok(sys::cuCtxSetCurrent(contexts[0]));
        let own = new_stream();
        let mut ptr = 0;
        ok(sys::cuMemAllocAsync(&mut ptr, 256, own));
        ok(sys::cuStreamSynchronize(own));
        if granted {
            let mut pool = std::ptr::null_mut();
            ok(sys::cuDeviceGetDefaultMemPool(&mut pool, 0));
            let desc = sys::CUmemAccessDesc {
                location: sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: 1,
                },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            ok(sys::cuMemPoolSetAccess(pool, &desc, 1));
        }
        ok(sys::cuCtxSetCurrent(contexts[1]));
        let library = load();
        let fill = kernel(library, c"fill_u32");
        let peer = new_stream();
        let (mut value, mut count) = (3u32, 64u32);
        let mut params = [
            (&mut ptr as *mut u64).cast::<std::ffi::c_void>(),
            (&mut value as *mut u32).cast(),
            (&mut count as *mut u32).cast(),
        ];
        let launched = sys::cuLaunchKernel(
            fill.cast(),
            1,
            1,
            1,
            64,
            1,
            1,
            0,
            peer,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        );
        let memset = sys::cuMemsetD8Async(ptr, 1, 16, peer);
        if granted {
            ok(launched);
            ok(memset);
        } else {
            assert_ne!(launched, CUresult::CUDA_SUCCESS);
            assert_ne!(memset, CUresult::CUDA_SUCCESS);
        }
        ok(sys::cuStreamSynchronize(peer));
        destroy_stream(peer);
        ok(sys::cuLibraryUnload(library));
        ok(sys::cuCtxSetCurrent(contexts[0]));
        ok(sys::cuMemFreeAsync(ptr, own));
        ok(sys::cuStreamSynchronize(own));
        destroy_stream(own);
        ok(sys::cuCtxSetCurrent(std::ptr::null_mut()));
        for device in 0..2 {
            ok(sys::cuDevicePrimaryCtxRelease_v2(device));
        }
    }
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_peer_touch_without_access() {
    peer_touch(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_peer_touch_with_access() {
    peer_touch(true);
}

fn two_devices(command: &mut Command) {
    command.sim_devices(2);
}

#[test]
fn peer_touches_need_pool_access() {
    let report = report_with("scenario_peer_touch_without_access", two_devices);
    assert_eq!(
        kinds(&report),
        ["no-access", "no-access"],
        "{:?}",
        report.violations
    );
    assert_eq!(report.violations[0].call, "cuLaunchKernel");
    assert_eq!(report.violations[1].call, "cuMemsetD8Async");
    let report = report_with("scenario_peer_touch_with_access", two_devices);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(
        report.leaks_without_primary().is_empty(),
        "{:?}",
        report.leaks
    );
}
