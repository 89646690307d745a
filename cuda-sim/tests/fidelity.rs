//! The simulator behaves as driver 580 was measured to behave (driver-facts and the probes in
//! `cuda-sim/probes/`): capture error codes, the implicit synchronisation of
//! `cuMemFree`/`cuMemFreeHost`, destroyed green contexts that stay current, peer access to
//! pools checked on every touch, stream waits bound to the record they name, and graph launches
//! that need no current context.

use std::process::Command;

use cuda_sim::SimCommand;
use cudarc::driver::sys::{self, CUresult};

mod common;
use common::*;

/// The probes and their output on a GPU (an H200 or an H100, driver 580), embedded with the
/// probes' ctypes helpers: the test binary needs no source tree at run time.
const DRIVER_HELPERS: &str = include_str!("../probes/driver.py");
const CAPTURE_PROBE: &str = include_str!("../probes/capture_codes.py");
const CAPTURE_CODES_H200: &str = include_str!("../probes/capture_codes.h200.txt");
const RERECORD_PROBE: &str = include_str!("../probes/event_rerecord.py");
const RERECORD_H200: &str = include_str!("../probes/event_rerecord.h200.txt");
const GRAPH_CONTEXT_PROBE: &str = include_str!("../probes/graph_launch_context.py");
const GRAPH_CONTEXT_H100: &str = include_str!("../probes/graph_launch_context.h100.txt");
const SIDE_CALLS_PROBE: &str = include_str!("../probes/capture_side_calls.py");
const SIDE_CALLS_H100: &str = include_str!("../probes/capture_side_calls.h100.txt");

/// Runs `probe` under the simulator (written with its helpers to a directory of its own) and
/// checks that it prints what it printed on `card` with driver 580, line by line, with no
/// violation.
fn probe_matches_the_gpu(name: &str, probe: &str, measured: &str, card: &str) {
    let dir = std::env::temp_dir().join(format!("cuda-sim-probe-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("driver.py"), DRIVER_HELPERS).unwrap();
    std::fs::write(dir.join("probe.py"), probe).unwrap();
    let report = dir.join("report.json");
    // The simulator by path: a Python whose environment resets the library path still loads
    // it (and its report is written).
    let output = cuda_sim::command("python3")
        .arg(dir.join("probe.py"))
        .arg(cuda_sim::library_dir().join("libcuda.so"))
        .sim_report(&report)
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "the {name} probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let simulated = String::from_utf8(output.stdout).unwrap();
    let differences: Vec<String> = measured
        .lines()
        .zip(simulated.lines())
        .filter(|(m, s)| m != s)
        .map(|(m, s)| format!("{card}: {m}\n  sim: {s}"))
        .collect();
    assert!(
        differences.is_empty() && measured.lines().count() == simulated.lines().count(),
        "the simulator differs from the {card}:\n{}",
        differences.join("\n")
    );
    let report = cuda_sim::Report::read(&report).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// `probes/capture_codes.py` prints the same codes under the simulator as on an H200 with
/// driver 580 (`probes/capture_codes.h200.txt`).
#[test]
fn capture_codes_match_the_h200() {
    probe_matches_the_gpu("capture", CAPTURE_PROBE, CAPTURE_CODES_H200, "H200");
}

/// `probes/event_rerecord.py`: a stream wait keeps waiting for the record it named while a
/// later record of the event has completed (and `cuEventQuery` says complete), as on driver
/// 580 (`probes/event_rerecord.h200.txt`).
#[test]
fn a_stream_wait_is_bound_to_the_record_it_names() {
    probe_matches_the_gpu("rerecord", RERECORD_PROBE, RERECORD_H200, "H200");
}

/// `probes/graph_launch_context.py`: a graph launched on a stream with no context current, or
/// another context current, runs in the stream's context, as on driver 580
/// (`probes/graph_launch_context.h100.txt`), which `GraphExecHandle::launch` relies on.
#[test]
fn a_graph_launch_needs_no_current_context() {
    probe_matches_the_gpu(
        "graph_context",
        GRAPH_CONTEXT_PROBE,
        GRAPH_CONTEXT_H100,
        "H100",
    );
}

/// `probes/capture_side_calls.py`: which calls on a stream outside a capture (queries, waits,
/// stream-ordered allocations and frees, context synchronisation) a global- or thread-local-
/// mode capture refuses and is invalidated by, made by the capturing thread or another,
/// relaxed or not, as on an H100 with driver 580 (`probes/capture_side_calls.h100.txt`), and
/// an imported pool's release threshold in the exporting process.
#[test]
fn calls_beside_a_capture_are_refused_as_on_the_gpu() {
    probe_matches_the_gpu("side_calls", SIDE_CALLS_PROBE, SIDE_CALLS_H100, "H100");
}

/// Opened by the scenario below once it has looked.
static GATE_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn gate(_: *mut std::ffi::c_void) {
    while !GATE_OPEN.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

extern "C" fn nothing(_: *mut std::ffi::c_void) {}

/// The probe's program with one more step that only the simulator can run: it looks at its
/// queued waits again whenever a host function returns, and runs host functions at once, each
/// on a thread of its own (driver 580 runs them one at a time, so there the second would wait
/// for the gate). A host function that returns on a fourth stream, after a later record of the
/// event has run, must not release the wait for the held-back record.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_a_returning_host_function_leaves_a_wait_for_its_record() {
    child();
    setup();
    let [held, waiting, idle, other] = [(); 4].map(|_| new_stream());
    let (mut awaited, mut marker) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: plain driver calls on this program's own streams and events; the host functions
    // take no data.
    unsafe {
        ok(sys::cuEventCreate(&mut awaited, 0));
        ok(sys::cuEventCreate(&mut marker, 0));
        ok(sys::cuLaunchHostFunc(
            held,
            Some(gate),
            std::ptr::null_mut(),
        ));
        ok(sys::cuEventRecord(awaited, held));
        ok(sys::cuStreamWaitEvent(waiting, awaited, 0));
        ok(sys::cuEventRecord(marker, waiting));
        ok(sys::cuEventRecord(awaited, idle));
        ok(sys::cuStreamSynchronize(idle));
        ok(sys::cuLaunchHostFunc(
            other,
            Some(nothing),
            std::ptr::null_mut(),
        ));
        ok(sys::cuStreamSynchronize(other));
        assert_eq!(sys::cuEventQuery(awaited), CUresult::CUDA_SUCCESS);
        let wait = sys::cuEventQuery(marker);
        GATE_OPEN.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            wait,
            CUresult::CUDA_ERROR_NOT_READY,
            "a later record of the event released the wait for the held-back one"
        );
        ok(sys::cuStreamSynchronize(held));
        ok(sys::cuStreamSynchronize(waiting));
        ok(sys::cuEventDestroy_v2(awaited));
        ok(sys::cuEventDestroy_v2(marker));
    }
    for stream in [held, waiting, idle, other] {
        destroy_stream(stream);
    }
    teardown();
}

#[test]
fn a_returning_host_function_leaves_a_wait_for_its_record() {
    assert_clean(&report_of(
        "scenario_a_returning_host_function_leaves_a_wait_for_its_record",
    ));
}

/// Opened by the scenario below once it has seen its legacy-stream marker pending.
static PER_THREAD_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn per_thread_gate(_: *mut std::ffi::c_void) {
    let start = std::time::Instant::now();
    while !PER_THREAD_OPEN.load(std::sync::atomic::Ordering::SeqCst)
        && start.elapsed() < std::time::Duration::from_secs(20)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The legacy stream as the driver documents it: its work waits for the earlier work of the
/// context's blocking streams, the per-thread default stream among them, and not for a
/// non-blocking stream's; while a blocking stream captures, `cuStreamIsCapturing` of the
/// legacy stream answers `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` and the capture goes on.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_the_legacy_stream_follows_the_blocking_streams() {
    child();
    setup();
    let per_thread = 0x2 as sys::CUstream;
    let other = new_stream();
    let mut blocking = std::ptr::null_mut();
    let (mut marker, mut free_running) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mut graph = std::ptr::null_mut();
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: plain driver calls on this program's own streams, events and graph; the host
    // function takes no data.
    unsafe {
        ok(sys::cuStreamCreate(&mut blocking, 0));
        ok(sys::cuEventCreate(&mut marker, 0));
        ok(sys::cuEventCreate(&mut free_running, 0));
        ok(sys::cuLaunchHostFunc(
            per_thread,
            Some(per_thread_gate),
            std::ptr::null_mut(),
        ));
        ok(sys::cuEventRecord(marker, LEGACY));
        ok(sys::cuEventRecord(free_running, other));
        ok(sys::cuStreamSynchronize(other));
        let held = sys::cuEventQuery(marker);
        let free = sys::cuEventQuery(free_running);
        PER_THREAD_OPEN.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            held,
            CUresult::CUDA_ERROR_NOT_READY,
            "legacy work overtook a per-thread stream's"
        );
        assert_eq!(
            free,
            CUresult::CUDA_SUCCESS,
            "a non-blocking stream waited for one"
        );
        ok(sys::cuEventSynchronize(marker));
        let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        ok(sys::cuStreamBeginCapture_v2(blocking, relaxed));
        assert_eq!(
            sys::cuStreamIsCapturing(LEGACY, &mut status),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        );
        ok(sys::cuStreamIsCapturing(blocking, &mut status));
        assert_eq!(
            status,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        );
        ok(sys::cuStreamEndCapture(blocking, &mut graph));
        ok(sys::cuGraphDestroy(graph));
        ok(sys::cuStreamIsCapturing(LEGACY, &mut status));
        assert_eq!(
            status,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        );
        ok(sys::cuEventDestroy_v2(marker));
        ok(sys::cuEventDestroy_v2(free_running));
    }
    destroy_stream(blocking);
    destroy_stream(other);
    teardown();
}

#[test]
fn the_legacy_stream_follows_the_blocking_streams() {
    assert_clean(&report_of(
        "scenario_the_legacy_stream_follows_the_blocking_streams",
    ));
}

/// Opened by the scenario below once its copies returned.
static HELD_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set by [`held`] if it gave up waiting for [`HELD_OPEN`].
static HELD_GAVE_UP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Holds its stream until [`HELD_OPEN`], for at most 20 s.
extern "C" fn held(_: *mut std::ffi::c_void) {
    let start = std::time::Instant::now();
    while !HELD_OPEN.load(std::sync::atomic::Ordering::SeqCst) {
        if start.elapsed() > std::time::Duration::from_secs(20) {
            HELD_GAVE_UP.store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Synchronous copies run on the legacy stream, which does not follow non-blocking streams:
/// they return while such a stream is held by a host function (on a GPU they would not wait
/// for it either, and a program whose host function waits for the copy would hang here).
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_synchronous_copies_do_not_wait_for_a_non_blocking_stream() {
    child();
    setup();
    let stream = new_stream();
    let data = vec![5u8; 4096];
    let mut back = vec![0u8; 4096];
    let mut buf = 0;
    // SAFETY: plain driver calls on this program's own stream and allocation; `data` and
    // `back` hold 4096 bytes, as does `buf`.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut buf, 4096));
        ok(sys::cuLaunchHostFunc(
            stream,
            Some(held),
            std::ptr::null_mut(),
        ));
        ok(sys::cuMemcpyHtoD_v2(buf, data.as_ptr().cast(), 4096));
        ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), buf, 4096));
        let waited = HELD_GAVE_UP.load(std::sync::atomic::Ordering::SeqCst);
        HELD_OPEN.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(
            !waited,
            "the synchronous copies waited for a non-blocking stream"
        );
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemFree_v2(buf));
    }
    assert_eq!(back, data);
    destroy_stream(stream);
    teardown();
}

#[test]
fn synchronous_copies_do_not_wait_for_a_non_blocking_stream() {
    assert_clean(&report_of(
        "scenario_synchronous_copies_do_not_wait_for_a_non_blocking_stream",
    ));
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
        ok(launch_kernel(fill, 4, 256, stream, (device, 7u32, n)));
        ok(sys::cuMemcpyHtoDAsync_v2(device, host, 4096, stream));
        // Neither free synchronises with `stream` explicitly.
        ok(sys::cuMemFree_v2(unused));
        ok(sys::cuMemFreeHost(host));
        ok(sys::cuMemFree_v2(device));
    }
    unload(library);
    destroy_stream(stream);
    teardown();
}

#[test]
fn synchronous_frees_wait_for_the_device() {
    let report = report_of("scenario_synchronous_frees_wait_for_the_device");
    assert_clean(&report);
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
            set_device_access(pool, 1, true);
        }
        ok(sys::cuCtxSetCurrent(contexts[1]));
        let library = load();
        let fill = kernel(library, c"fill_u32");
        let peer = new_stream();
        let launched = launch_kernel(fill, 1, 64, peer, (ptr, 3u32, 64));
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
        unload(library);
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
    assert_clean(&report);
}

/// Set by the graph's host node of `scenario_a_graph_on_a_green_stream_runs_in_its_context`
/// when it returns.
static HOST_NODE_RETURNED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A host node that holds its graph back for 300 ms, so that what follows it is still queued
/// when the program synchronises.
unsafe extern "C" fn slow_host_node(_: *mut std::ffi::c_void) {
    std::thread::sleep(std::time::Duration::from_millis(300));
    HOST_NODE_RETURNED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// S1: a graph of the primary context, launched on a green context's stream, runs in the
/// primary context: `cuCtxSynchronize` of the primary context waits for it, as on the H200
/// (driver-facts, "Graph nodes run in their graph's context": a host view of host-pool memory
/// waited 3.0 s for the graph's memset, a revocation of the pool's access 3.0 s). The graph's
/// memset is queued behind a slow host node; after the synchronize its bytes are there, the
/// device's access can be revoked, and the memory freed on a stream of the primary context:
/// no `no-access`, no unordered free.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_a_graph_on_a_green_stream_runs_in_its_context() {
    child();
    let primary = setup();
    let (green, _) = green_context();
    let own = new_stream();
    // SAFETY: plain driver calls on our own handles with valid pointers; the host pool's
    // memory is pinned host memory, which the host reads once the device work is complete.
    unsafe {
        let pool = host_pool(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE);
        let mut ptr = 0;
        ok(sys::cuMemAllocFromPoolAsync(&mut ptr, 4096, pool, own));
        ok(sys::cuStreamSynchronize(own));
        let graph = new_graph();
        let host = sys::CUDA_HOST_NODE_PARAMS {
            fn_: Some(slow_host_node),
            userData: std::ptr::null_mut(),
        };
        let mut first = std::ptr::null_mut();
        ok(sys::cuGraphAddHostNode(
            &mut first,
            graph,
            std::ptr::null(),
            0,
            &host,
        ));
        let memset = sys::CUDA_MEMSET_NODE_PARAMS {
            dst: ptr,
            pitch: 0,
            value: 0xab,
            elementSize: 1,
            width: 4096,
            height: 1,
        };
        let mut second = std::ptr::null_mut();
        ok(sys::cuGraphAddMemsetNode(
            &mut second,
            graph,
            &first,
            1,
            &memset,
            primary,
        ));
        let exec = instantiate(graph);
        let mut green_stream = std::ptr::null_mut();
        ok(sys::cuGreenCtxStreamCreate(&mut green_stream, green, 1, 0));
        ok(sys::cuGraphLaunch(exec, green_stream));
        // The primary context is current: its synchronisation covers the graph.
        ok(sys::cuCtxSynchronize());
        assert!(
            HOST_NODE_RETURNED.load(std::sync::atomic::Ordering::SeqCst),
            "cuCtxSynchronize of the graph's context returned before the graph ran"
        );
        let bytes = std::slice::from_raw_parts(ptr as usize as *const u8, 4096);
        assert!(
            bytes.iter().all(|&b| b == 0xab),
            "the graph's memset is visible"
        );
        set_device_access(pool, 0, false);
        ok(sys::cuMemFreeAsync(ptr, own));
        ok(sys::cuStreamSynchronize(own));
        destroy_graph(exec, graph);
        destroy_stream(green_stream);
        ok(sys::cuMemPoolDestroy(pool));
        ok(sys::cuGreenCtxDestroy(green));
    }
    destroy_stream(own);
    teardown();
}

#[test]
fn a_graph_on_a_green_stream_runs_in_its_context() {
    let report = report_of("scenario_a_graph_on_a_green_stream_runs_in_its_context");
    assert_clean(&report);
}

/// S2: this process imports its own IPC host pool's allocation. The import succeeds, but a
/// memset through it fails with `CUDA_ERROR_INVALID_VALUE`, as on the H200 (driver-facts);
/// copies into it are refused the same way (not measured), copies out of it are not. A
/// kernel's store through it is a `no-access` violation (a load is fine): what the GPU does
/// then was not measured, and the driver refuses the memset.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_a_same_process_import_of_a_host_pool_refuses_device_writes() {
    child();
    setup();
    let stream = new_stream();
    let library = load();
    let fill = kernel(library, c"fill_u32");
    let copy = kernel(library, c"copy_u32");
    // SAFETY: plain driver calls on our own handles with valid pointers; the descriptor is
    // our own, closed at the end.
    unsafe {
        let pool =
            host_pool(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        let mut ptr = 0;
        ok(sys::cuMemAllocFromPoolAsync(&mut ptr, 4096, pool, stream));
        ok(sys::cuMemsetD8Async(ptr, 7, 4096, stream));
        let mut fd: i32 = -1;
        ok(sys::cuMemPoolExportToShareableHandle(
            (&mut fd as *mut i32).cast(),
            pool,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        ));
        let mut data: sys::CUmemPoolPtrExportData = std::mem::zeroed();
        ok(sys::cuMemPoolExportPointer(&mut data, ptr));
        let mut imported_pool = std::ptr::null_mut();
        ok(sys::cuMemPoolImportFromShareableHandle(
            &mut imported_pool,
            fd as usize as *mut std::ffi::c_void,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        ));
        set_device_access(imported_pool, 0, true);
        let mut import = 0;
        ok(sys::cuMemPoolImportPointer(
            &mut import,
            imported_pool,
            &mut data,
        ));
        ok(sys::cuStreamSynchronize(stream));
        // Device writes through the import: refused.
        assert_eq!(
            sys::cuMemsetD8Async(import, 1, 4096, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "driver 580 refuses the memset"
        );
        let host = [3u8; 64];
        assert_eq!(
            sys::cuMemcpyHtoDAsync_v2(import + 64, host.as_ptr().cast(), 64, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            sys::cuMemcpyDtoDAsync_v2(import, ptr + 1024, 64, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        // Reads through it, and writes through the exporter's own pointer: accepted.
        let mut back = [0u8; 64];
        ok(sys::cuMemcpyDtoHAsync_v2(
            back.as_mut_ptr().cast(),
            import,
            64,
            stream,
        ));
        ok(sys::cuMemsetD8Async(ptr + 2048, 9, 16, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert_eq!(back, [7u8; 64], "nothing was written through the import");
        // A kernel reads through the import; one that writes through it is stopped.
        let mut scratch = 0;
        ok(sys::cuMemAllocAsync(&mut scratch, 256, stream));
        ok(launch_kernel(copy, 1, 64, stream, (scratch, import, 64)));
        assert_eq!(
            launch_kernel(fill, 1, 64, stream, (import, 5u32, 64)),
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        );
        ok(sys::cuMemFreeAsync(scratch, stream));
        ok(sys::cuMemFreeAsync(import, stream));
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemPoolDestroy(imported_pool));
        ok(sys::cuMemPoolDestroy(pool));
        unload(library);
        libc::close(fd);
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn a_same_process_import_of_a_host_pool_refuses_device_writes() {
    let report = report_of("scenario_a_same_process_import_of_a_host_pool_refuses_device_writes");
    // Only the kernel's store is a violation; the refused memset and copies are the driver's
    // own answers.
    assert_eq!(kinds(&report), ["no-access"], "{:?}", report.violations);
    assert_eq!(report.violations[0].call, "cuLaunchKernel");
    assert_message_contains(&report, 0, "import of its own IPC host pool");
    assert_no_leaks(&report);
}

/// review23b: with a green context's context current, the per-thread default stream does
/// not exist: `cuStreamIsCapturing(CU_STREAM_PER_THREAD)` answers
/// `CUDA_ERROR_INVALID_HANDLE`, as driver 580 did on the H200 (`review23b.rs` and
/// `cuda_rules.rs` D8), and so does every other call on that token here. The null and legacy
/// tokens are the green context's default stream; in the primary context the per-thread
/// stream is there.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_no_per_thread_stream_in_a_green_context() {
    child();
    let primary = setup();
    let (green, context) = green_context();
    let per_thread = 2usize as sys::CUstream;
    let legacy = 1usize as sys::CUstream;
    // SAFETY: plain driver calls with valid out-pointers; the tokens are the driver's.
    unsafe {
        ok(sys::cuCtxSetCurrent(context));
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        assert_eq!(
            sys::cuStreamIsCapturing(per_thread, &mut status),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(
            sys::cuStreamSynchronize(per_thread),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        for token in [std::ptr::null_mut(), legacy] {
            ok(sys::cuStreamIsCapturing(token, &mut status));
            assert_eq!(
                status,
                sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
            );
        }
        ok(sys::cuCtxSetCurrent(primary));
        status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        ok(sys::cuStreamIsCapturing(per_thread, &mut status));
        assert_eq!(
            status,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        );
        ok(sys::cuGreenCtxDestroy(green));
    }
    teardown();
}

#[test]
fn no_per_thread_stream_in_a_green_context() {
    let report = report_of("scenario_no_per_thread_stream_in_a_green_context");
    assert_clean(&report);
}

/// Measured on the H200 (driver 580): a zero-byte `cuMemAllocAsync` and
/// `cuMemAllocFromPoolAsync` succeed with pointer 0, `cuMemFreeAsync` of that 0 succeeds,
/// and only the synchronous `cuMemAlloc(0)` is `CUDA_ERROR_INVALID_VALUE`. A real allocation
/// made afterwards is not confused with the null one.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_zero_byte_stream_ordered_allocations() {
    child();
    setup();
    let stream = new_stream();
    // SAFETY: plain driver calls on our own handles with valid pointers.
    unsafe {
        let mut ptr = 0xdead_beef;
        ok(sys::cuMemAllocAsync(&mut ptr, 0, stream));
        assert_eq!(ptr, 0);
        let pool = host_pool(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE);
        let mut from_pool = 0xdead_beef;
        ok(sys::cuMemAllocFromPoolAsync(
            &mut from_pool,
            0,
            pool,
            stream,
        ));
        assert_eq!(from_pool, 0);
        let mut real = 0;
        ok(sys::cuMemAllocAsync(&mut real, 256, stream));
        assert_ne!(real, 0);
        ok(sys::cuMemsetD8Async(real, 7, 256, stream));
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuMemFreeAsync(from_pool, stream));
        // Freeing the null pointer again is no double free.
        ok(sys::cuMemFreeAsync(0, stream));
        ok(sys::cuMemFreeAsync(real, stream));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemPoolDestroy(pool));
        let mut sync = 0;
        assert_eq!(
            sys::cuMemAlloc_v2(&mut sync, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn zero_byte_stream_ordered_allocations() {
    let report = report_of("scenario_zero_byte_stream_ordered_allocations");
    assert_clean(&report);
    assert!(report.notes.is_empty(), "{:?}", report.notes);
}

/// The smallest module of PTX ISA `version`, NUL-terminated.
fn module_of_isa(version: &str) -> String {
    format!(
        ".version {version}\n.target sm_90\n.address_size 64\n\n.visible .entry nothing()\n{{\n    ret;\n}}\n\0"
    )
}

/// A driver loads PTX up to the ISA of its release and answers
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` for newer PTX, as driver 580 (CUDA 13.0) refused
/// modules that NVRTC and nvcc 13.5 wrote. `ISA_CASES` (played driver, ISA, loads) set by
/// the parent: the child loads each and checks the answer.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_ptx_newer_than_the_driver_is_refused() {
    child();
    setup();
    let cases = std::env::var("ISA_CASES").expect("the parent sets the cases");
    for case in cases.split(',') {
        let (version, loads) = case.split_once('=').expect("ISA=loads");
        match load_ptx(&module_of_isa(version)) {
            Ok(library) if loads == "yes" => unload(library),
            Err(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION) if loads == "no" => {}
            other => panic!("ISA {version}: {other:?}, expected to load: {loads}"),
        }
    }
    teardown();
}

#[test]
fn ptx_newer_than_the_driver_is_refused() {
    for (driver, cases) in [
        ("13000", "9.0=yes,9.1=no,9.5=no,8.8=yes,7.0=yes"),
        ("13050", "9.5=yes,9.6=no"),
        ("12080", "8.7=yes,8.8=no,9.0=no"),
        ("12060", "8.5=yes,8.6=no"),
    ] {
        let report = report_with("scenario_ptx_newer_than_the_driver_is_refused", |c| {
            c.env("CUDA_SIM_DRIVER_VERSION", driver)
                .env("ISA_CASES", cases);
        });
        assert_clean(&report);
    }
}

/// Creates a timing event.
fn timing_event() -> sys::CUevent {
    let mut event = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; flags 0 (timing on).
    ok(unsafe { sys::cuEventCreate(&mut event, 0) });
    event
}

/// Milliseconds from `start` to `end`.
fn elapsed(start: sys::CUevent, end: sys::CUevent) -> f32 {
    let mut ms = 0.0;
    // SAFETY: a valid out-pointer and two live events recorded and completed.
    ok(unsafe { sys::cuEventElapsedTime_v2(&mut ms, start, end) });
    ms
}

/// Logical time: two kernels on one stream take twice as long as the same two kernels on two
/// unordered streams, a stream's start can come before another's end, and a memset lasts its
/// model (1 µs plus its bytes at 50 GB/s). The child asserts; the parent checks it is clean.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_unordered_streams_overlap_in_logical_time() {
    child();
    setup();
    let library = load();
    let fill = kernel(library, c"fill_u32");
    let (a, b) = (new_stream(), new_stream());
    let n: u32 = 1024;
    let (mut first, mut second) = (0, 0);
    let events: Vec<sys::CUevent> = (0..9).map(|_| timing_event()).collect();
    // SAFETY: valid out-pointers, live streams and events; each kernel writes `n` u32 into a
    // buffer of `4 n` bytes; every buffer's users are ordered before the frees by the
    // synchronisations.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut first, 4 * n as usize));
        ok(sys::cuMemAlloc_v2(&mut second, 4 * n as usize));
        // One stream: the two kernels one after the other.
        ok(sys::cuEventRecord(events[0], a));
        ok(launch_kernel(fill, 4, 256, a, (first, 1u32, n)));
        ok(launch_kernel(fill, 4, 256, a, (second, 2u32, n)));
        ok(sys::cuEventRecord(events[1], a));
        ok(sys::cuStreamSynchronize(a));
        // Two streams forked from `a` and joined back: the kernels overlap.
        ok(sys::cuEventRecord(events[2], a));
        ok(sys::cuStreamWaitEvent(b, events[2], 0));
        ok(launch_kernel(fill, 4, 256, a, (first, 3u32, n)));
        ok(sys::cuEventRecord(events[3], a));
        ok(sys::cuEventRecord(events[4], b));
        ok(launch_kernel(fill, 4, 256, b, (second, 4u32, n)));
        ok(sys::cuEventRecord(events[5], b));
        ok(sys::cuStreamWaitEvent(a, events[5], 0));
        ok(sys::cuEventRecord(events[6], a));
        ok(sys::cuStreamSynchronize(a));
        // A memset of 1 MiB alone on `b`.
        let mut big = 0;
        ok(sys::cuMemAlloc_v2(&mut big, 1 << 20));
        ok(sys::cuEventRecord(events[7], b));
        ok(sys::cuMemsetD8Async(big, 0, 1 << 20, b));
        ok(sys::cuEventRecord(events[8], b));
        ok(sys::cuStreamSynchronize(b));
        let memset = elapsed(events[7], events[8]);
        let expected = (1_000.0 + (1u64 << 20) as f64 / 50.0) / 1e6;
        assert!(
            (f64::from(memset) - expected).abs() < 1e-6,
            "memset {memset} ms"
        );
        ok(sys::cuMemFree_v2(big));
        ok(sys::cuMemFree_v2(first));
        ok(sys::cuMemFree_v2(second));
    }
    let serial = elapsed(events[0], events[1]);
    let parallel = elapsed(events[2], events[6]);
    assert!(serial > 0.0, "serial {serial} ms");
    assert!(
        (serial - 2.0 * parallel).abs() <= 1e-4 * serial,
        "serial {serial} ms, parallel {parallel} ms"
    );
    // `b` started its kernel before `a`'s kernel ended.
    assert!(elapsed(events[4], events[3]) > 0.0);
    for event in events {
        // SAFETY: a live event, destroyed once.
        ok(unsafe { sys::cuEventDestroy_v2(event) });
    }
    unload(library);
    destroy_stream(a);
    destroy_stream(b);
    teardown();
}

#[test]
fn unordered_streams_overlap_in_logical_time() {
    let report = report_of("scenario_unordered_streams_overlap_in_logical_time");
    assert_clean(&report);
}
