//! Safe call sequences of handles-cuda that once caused undefined behaviour on the device, run
//! on the simulated driver, whose checker reports what a GPU would only show when a race goes
//! badly: unordered frees, uses after free, destroys in dead contexts.
//!
//! Each `scenario_*` test is one program; it is `#[ignore]`d and runs only as a child process
//! on the simulator, started by the parent test of the same name without the prefix, which
//! then checks the child's status and the simulator's report.

mod simulator;

use cuda_sim::{Report, SimCommand};
use handles_cuda::driver::sys;
use std::os::fd::AsFd;

use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, MemoryPoolHandle, PoolProps, StreamFlags,
    StreamHandle,
    exec::EventFlags,
    ipc::{IpcEventHandle, IpcPointer},
    memory::PoolLocation,
};
use handles_tests::cuda_live_counts;
use simulator::{Scratch, assert_clean, in_scenario, run_with_report, say, tail};

/// Runs `scenario_<name>` on the simulator, with `fail` injected.
fn run_scenario(name: &str, fail: &[(&str, u64, &str)]) -> Report {
    simulator::run_scenario(name, fail, &[])
}

/// [`run_scenario`] with extra environment variables (`CUDA_SIM_DEVICES`, …).
fn run_scenario_with(name: &str, fail: &[(&str, u64, &str)], env: &[(&str, &str)]) -> Report {
    simulator::run_scenario(name, fail, env)
}

fn non_blocking(context: &ContextHandle) -> StreamHandle {
    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
}

/// Orders the work queued on `later` from now on after the work queued on `earlier` so far:
/// the bytes are the caller's to order (DESIGN.md), so these programs order them and race
/// only for the frees, which are the library's.
fn order_after(context: &ContextHandle, later: &StreamHandle, earlier: &StreamHandle) {
    let event = EventHandle::create(context, EventFlags::default()).unwrap();
    event.record(earlier).unwrap();
    later.wait_event(&event).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Defect 1: a free ordered after work on another stream.

#[test]
fn buffer_used_on_two_streams_then_dropped() {
    let report = run_scenario("buffer_used_on_two_streams_then_dropped", &[]);
    assert_clean("buffer_used_on_two_streams_then_dropped", &report);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_buffer_used_on_two_streams_then_dropped() {
    in_scenario();
    let start = cuda_live_counts();
    {
        let context = ContextHandle::primary(0).unwrap();
        let (home, other) = (non_blocking(&context), non_blocking(&context));
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 1 << 16, &home).unwrap();
        buffer.memset_async(1, 1 << 16, &home).unwrap();
        // Work on another stream: the free on `home` must wait for it.
        order_after(&context, &other, &home);
        buffer.memset_async(2, 1 << 16, &other).unwrap();
        buffer.memset_at_async(4096, 3, 4096, &other).unwrap();
        drop(buffer);
        home.synchronize().unwrap();
        other.synchronize().unwrap();
    }
    handles_cuda::exec::clear_primary_cache();
    assert_eq!(cuda_live_counts(), start);
}

// Found while adding kernels: synchronous and pinned-host allocations used on a stream were
// freed by the host with no wait for that stream.

#[test]
fn synchronous_and_pinned_allocations_used_on_streams_then_dropped() {
    let name = "synchronous_and_pinned_allocations_used_on_streams_then_dropped";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_synchronous_and_pinned_allocations_used_on_streams_then_dropped() {
    in_scenario();
    let start = cuda_live_counts();
    {
        let context = ContextHandle::primary(0).unwrap();
        let (first, second) = (non_blocking(&context), non_blocking(&context));
        let device = DevicePtrHandle::alloc(&context, 1 << 16).unwrap();
        let pinned = DevicePtrHandle::alloc_host(&context, 1 << 16).unwrap();
        device.memset_async(1, 1 << 16, &first).unwrap();
        pinned.memset_async(2, 4096, &first).unwrap();
        order_after(&context, &second, &first);
        device
            .copy_to_async(0, &pinned, 0, 1 << 16, &second)
            .unwrap();
        let kernels = handles_tests::kernels::TestKernels::load().unwrap();
        let view = device.view(0, 1024).unwrap();
        kernels
            .fill
            .launch(
                &second,
                &handles_cuda::LaunchConfig::linear(256, 256),
                (&view, 5, 256),
            )
            .unwrap();
        // The host frees both while the streams may still run.
        drop((device, pinned, view));
        first.synchronize().unwrap();
        second.synchronize().unwrap();
    }
    handles_cuda::exec::clear_primary_cache();
    assert_eq!(cuda_live_counts(), start);
}

// Found in review: cudarc can capture the per-thread default stream (its `per_thread_stream`
// is the same stream), which this crate never lent: work queued there through handles was
// captured without its buffer being kept.

#[test]
fn work_on_a_stream_captured_by_cudarc_is_refused() {
    let name = "work_on_a_stream_captured_by_cudarc_is_refused";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_work_on_a_stream_captured_by_cudarc_is_refused() {
    in_scenario();
    let start = cuda_live_counts();
    {
        let context = ContextHandle::primary(0).unwrap();
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let home = non_blocking(&context);
        let keep = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
        let cudarc = cudarc::driver::CudaContext::new(0).unwrap();
        let per_thread = cudarc.per_thread_stream();
        per_thread
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        let refused = context.run(|| keep.memset_async(7, 4096, &StreamHandle::per_thread()));
        assert!(
            refused.is_err(),
            "work on a captured stream must be refused"
        );
        let allocated =
            context.run(|| DevicePtrHandle::alloc_async(4096, &StreamHandle::per_thread()));
        assert!(
            allocated.is_err(),
            "an allocation on a captured stream must be refused"
        );
        let graph = per_thread
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .unwrap();
        drop(keep);
        if let Some(graph) = graph {
            graph.launch().unwrap();
            per_thread.synchronize().unwrap();
        }
        home.synchronize().unwrap();
    }
    handles_cuda::exec::clear_primary_cache();
    assert_eq!(cuda_live_counts(), start);
}

#[test]
fn deallocation_stream_moved_after_work_on_the_old_one() {
    let name = "deallocation_stream_moved_after_work_on_the_old_one";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_deallocation_stream_moved_after_work_on_the_old_one() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let (first, second, third) = (
        non_blocking(&context),
        non_blocking(&context),
        non_blocking(&context),
    );
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 1 << 16, &first).unwrap();
    buffer.memset_async(1, 1 << 16, &first).unwrap();
    buffer.set_deallocation_stream(&second).unwrap();
    order_after(&context, &third, &first);
    buffer.memset_async(2, 1 << 16, &third).unwrap();
    buffer.set_deallocation_stream(&third).unwrap();
    assert!(buffer.deallocation_stream().unwrap().ptr_eq(&third));
    // A copy between two buffers on yet another stream orders both frees after it.
    let other = DevicePtrHandle::alloc_from_pool(&pool, 1 << 16, &second).unwrap();
    order_after(&context, &first, &third);
    buffer.copy_to_async(0, &other, 0, 1 << 16, &first).unwrap();
    drop(buffer);
    drop(other);
    context.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Defect 4: a per-thread default stream as the deallocation stream, freed on another thread.

#[test]
fn per_thread_stream_allocation_freed_on_another_thread() {
    let name = "per_thread_stream_allocation_freed_on_another_thread";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_per_thread_stream_allocation_freed_on_another_thread() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let allocator_context = context.clone();
    let buffer = std::thread::spawn(move || {
        // SAFETY: the context is alive (held by `allocator_context`) for this thread's work.
        let status = unsafe { sys::cuCtxSetCurrent(allocator_context.as_cu()) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
        let per_thread = StreamHandle::per_thread();
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 1 << 16, &per_thread).unwrap();
        buffer.memset_async(7, 1 << 16, &per_thread).unwrap();
        buffer
    })
    .join()
    .unwrap();
    // The last handle drops on this thread, whose per-thread stream knows nothing of the
    // allocating thread's work.
    drop(buffer);
    context.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Defect 5: a borrowed context where ownership is needed.

#[test]
fn foreign_current_context_is_refused_and_a_current_primary_is_retained() {
    let name = "foreign_current_context_is_refused_and_a_current_primary_is_retained";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_foreign_current_context_is_refused_and_a_current_primary_is_retained() {
    in_scenario();
    handles_cuda::driver::ensure_loaded().unwrap();
    // A context another library made, current on this thread.
    let mut foreign = std::ptr::null_mut();
    // SAFETY: the driver is loaded; no creation parameters; device 0 exists.
    let status = unsafe { sys::cuCtxCreate_v4(&mut foreign, std::ptr::null_mut(), 0, 0) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    let refused = EventHandle::create_in_current(EventFlags::default());
    assert!(
        refused.is_err(),
        "an event would outlive a context it cannot keep alive"
    );
    let refused = DevicePtrHandle::alloc_async(64, &StreamHandle::legacy());
    assert!(
        refused.is_err(),
        "a free would run in a context it cannot keep alive"
    );
    // SAFETY: our own context, which nothing of ours refers to.
    let destroyed = unsafe { sys::cuCtxDestroy_v2(foreign) };
    assert_eq!(destroyed, sys::CUresult::CUDA_SUCCESS);

    // A primary context made current by someone else's retain is retained by the handles.
    let mut primary = std::ptr::null_mut();
    // SAFETY: device 0 exists; released below.
    unsafe {
        assert_eq!(
            sys::cuDevicePrimaryCtxRetain(&mut primary, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuCtxSetCurrent(primary), sys::CUresult::CUDA_SUCCESS);
    }
    let event = EventHandle::create_in_current(EventFlags::default()).unwrap();
    let buffer = DevicePtrHandle::alloc_async(64, &StreamHandle::legacy()).unwrap();
    // The other library lets go of its retain first.
    // SAFETY: releases the retain taken above.
    unsafe {
        assert_eq!(
            sys::cuDevicePrimaryCtxRelease_v2(0),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuCtxSetCurrent(std::ptr::null_mut()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    handles_cuda::exec::clear_primary_cache();
    // The event and the buffer still hold the primary context: destroying and freeing in it
    // is valid.
    drop(event);
    drop(buffer);
}

// Found in review: `ContextHandle::current()` is safe and returned a non-owning reference to a
// context no handle manages, with no lifetime. Every constructor that keeps its context
// (events, streams, the legacy stream bound to a context, synchronous and pinned allocations,
// graphs and captures, IPC events, and the two recyclers, whose caches outlive the caller)
// stored it as is: an object made in it was destroyed after the context, or a cached one
// handed out in a new context that reused the raw value. Now `current()` returns a handle that
// keeps the context alive or refuses, and the constructors resolve any non-owning reference.

#[test]
fn a_foreign_current_context_is_refused_and_a_primary_one_is_kept_alive() {
    let name = "a_foreign_current_context_is_refused_and_a_primary_one_is_kept_alive";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_foreign_current_context_is_refused_and_a_primary_one_is_kept_alive() {
    in_scenario();
    handles_cuda::driver::ensure_loaded().unwrap();
    let mut foreign = std::ptr::null_mut();
    // SAFETY: the driver is loaded; no creation parameters; device 0 exists.
    let status = unsafe { sys::cuCtxCreate_v4(&mut foreign, std::ptr::null_mut(), 0, 0) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    assert!(
        ContextHandle::current().is_err(),
        "no handle can keep another library's context alive"
    );
    let (mut flags, mut active) = (0, 0);
    // SAFETY: device 0 exists; both are valid out-pointers.
    let asked = unsafe { sys::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active) };
    assert_eq!(asked, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(active, 0, "refusing created no primary context");
    // SAFETY: our own context, which nothing of ours refers to.
    let destroyed = unsafe { sys::cuCtxDestroy_v2(foreign) };
    assert_eq!(destroyed, sys::CUresult::CUDA_SUCCESS);

    // A primary context someone else retained and made current: `current()` retains it, so
    // what is made in it, through every constructor that keeps its context, outlives the other
    // library's release.
    let mut primary = std::ptr::null_mut();
    handles_cuda::exec::clear_primary_cache();
    // SAFETY: device 0 exists; released below.
    unsafe {
        assert_eq!(
            sys::cuDevicePrimaryCtxRetain(&mut primary, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuCtxSetCurrent(primary), sys::CUresult::CUDA_SUCCESS);
    }
    let current = ContextHandle::current().unwrap().unwrap();
    assert_eq!(current.as_cu(), primary);
    assert_ne!(current.ownership(), handles_core::Ownership::Borrowed);
    let flags = StreamFlags { non_blocking: true };
    let event = EventHandle::create(&current, EventFlags::default()).unwrap();
    let stream = StreamHandle::create(&current, flags, 0).unwrap();
    let legacy = StreamHandle::legacy_in(&current).unwrap();
    let buffer = DevicePtrHandle::alloc(&current, 64).unwrap();
    let host = DevicePtrHandle::alloc_host(&current, 64).unwrap();
    let graph = handles_cuda::graph::GraphHandle::create(&current).unwrap();
    let captured = handles_cuda::graph::GraphHandle::capture(
        &current,
        handles_cuda::graph::CaptureMode::Global,
        |_| Ok(()),
    )
    .unwrap();
    let events = handles_cuda::exec::EventRecycler::new(&current, EventFlags::default()).unwrap();
    drop(events.acquire().unwrap());
    let streams = handles_cuda::exec::StreamRecycler::new(&current, flags, 0).unwrap();
    drop(streams.acquire().unwrap());
    drop(current);
    // SAFETY: releases the retain taken above.
    unsafe {
        assert_eq!(
            sys::cuDevicePrimaryCtxRelease_v2(0),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuCtxSetCurrent(std::ptr::null_mut()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    handles_cuda::exec::clear_primary_cache();
    drop((events, streams));
    // Destroyed in the primary context they keep alive (the simulator reports any destroy in a
    // dead context).
    drop((event, stream, legacy, buffer, host, graph, captured));
    assert_eq!(handles_cuda::exec::clear_recycled_events(), 1);
    assert_eq!(handles_cuda::exec::clear_recycled_streams(), 1);
}

// Found in review: an event recorded into another library's capture becomes a captured event,
// and a wait on it pulls any stream, including one this crate created and never lent, into
// that capture, where allocations and frees would become graph nodes.

#[test]
fn records_and_waits_on_a_stream_captured_by_cudarc_are_refused() {
    let name = "records_and_waits_on_a_stream_captured_by_cudarc_are_refused";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_records_and_waits_on_a_stream_captured_by_cudarc_are_refused() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let home = non_blocking(&context);
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    let cudarc = cudarc::driver::CudaContext::new(0).unwrap();
    let per_thread = cudarc.per_thread_stream();
    per_thread
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    let captured = context.run(|| event.record(&StreamHandle::per_thread()));
    assert!(captured.is_err(), "a record into the capture is refused");
    let waited = context.run(|| StreamHandle::per_thread().wait_event(&event));
    assert!(waited.is_err(), "a wait in the capture is refused");
    // The event never became a captured event, so waiting on it leaves `home` outside.
    home.wait_event(&event).unwrap();
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: `home` is alive; `status` is a valid out-pointer.
    let checked = unsafe { sys::cuStreamIsCapturing(home.as_cu(), &mut status) };
    assert_eq!(checked, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        status,
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    );
    let graph = per_thread
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .unwrap();
    drop(graph);
    home.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Defect 6: one primary-context handle per device, whatever thread retained it.

#[test]
fn primary_context_registry_entry_survives_one_thread_letting_go() {
    let name = "primary_context_registry_entry_survives_one_thread_letting_go";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_primary_context_registry_entry_survives_one_thread_letting_go() {
    in_scenario();
    let mine = ContextHandle::primary(0).unwrap();
    let raw = mine.as_cu() as usize;
    std::thread::spawn(move || {
        let theirs = ContextHandle::primary(0).unwrap();
        assert_eq!(theirs.as_cu() as usize, raw);
        drop(theirs);
        handles_cuda::exec::clear_primary_cache();
    })
    .join()
    .unwrap();
    let found = ContextHandle::lookup(mine.as_cu()).expect("still registered");
    assert!(
        found.ptr_eq(&mine),
        "one handle per device, shared by threads"
    );
}

// ---------------------------------------------------------------------------------------------
// Defect 12: a copy never returns while the driver may still use the borrowed host memory.

#[test]
fn copy_after_a_failed_synchronize_never_starts() {
    let name = "copy_after_a_failed_synchronize_never_starts";
    let report = run_scenario(
        name,
        &[("cuStreamSynchronize", 1, "CUDA_ERROR_LAUNCH_FAILED")],
    );
    assert_clean(name, &report);
    for copy in [
        "cuMemcpyAsync",
        "cuMemcpy",
        "cuMemcpyDtoHAsync_v2",
        "cuMemcpyDtoH_v2",
    ] {
        assert_eq!(
            report.calls.get(copy).copied().unwrap_or(0),
            0,
            "{copy} was queued although the stream could not be waited for"
        );
    }
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_copy_after_a_failed_synchronize_never_starts() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
    let mut host = vec![0u8; 4096];
    let copied = buffer.copy_to_host(&mut host, &stream);
    assert!(copied.is_err(), "the injected failure is returned");
    drop(host); // the borrow ends here; nothing may still write to it
    drop(buffer);
    context.synchronize().unwrap();
}

/// A host copy whose last wait (for the legacy stream, which its transfer may still be queued
/// on) fails returns the error, and the allocation's free still follows the copy.
#[test]
fn a_failed_wait_after_a_host_copy_still_orders_the_free() {
    let name = "a_failed_wait_after_a_host_copy_still_orders_the_free";
    let report = run_scenario(
        name,
        &[(
            "cuStreamSynchronize",
            2,
            "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
        )],
    );
    assert_clean(name, &report);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_failed_wait_after_a_host_copy_still_orders_the_free() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let buffer = DevicePtrHandle::alloc_async(4096, &stream).unwrap();
    let copied = buffer.copy_from_host(&[3u8; 4096], &stream);
    assert!(copied.is_err(), "the injected failure is returned");
    drop(buffer);
    context.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Defect 2: the size in an IPC payload is checked against what the driver mapped.

fn ipc_pool(device: usize) -> MemoryPoolHandle {
    MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(device)
    })
    .unwrap()
}

#[test]
fn forged_ipc_size_is_refused() {
    let name = "forged_ipc_size_is_refused";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_forged_ipc_size_is_refused() {
    in_scenario();
    let start = cuda_live_counts();
    {
        let context = ContextHandle::primary(0).unwrap();
        let stream = non_blocking(&context);
        let pool = ipc_pool(0);
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
        let honest = buffer.export_ipc().unwrap();
        let forged = IpcPointer {
            size: 1 << 20,
            ..honest
        };
        let imported_pool =
            MemoryPoolHandle::import_posix_fd(pool.export_posix_fd().unwrap().as_fd(), 0).unwrap();
        let refused = DevicePtrHandle::import_ipc(&imported_pool, &forged, &stream);
        assert!(
            matches!(refused, Err(Error::BadIpcPayload { .. })),
            "a payload claiming more than was mapped must be refused: {refused:?}"
        );
        // The honest payload still imports, with its true size.
        let imported = DevicePtrHandle::import_ipc(&imported_pool, &honest, &stream).unwrap();
        assert_eq!(imported.size(), 4096);
        drop(imported);
        drop(buffer);
        stream.synchronize().unwrap();
    }
    handles_cuda::exec::clear_primary_cache();
    assert_eq!(cuda_live_counts(), start);
}

// ---------------------------------------------------------------------------------------------
// Defect 7: imports and host pools on the device the caller names.

#[test]
fn pool_import_on_the_second_device_uses_that_device() {
    let name = "pool_import_on_the_second_device_uses_that_device";
    assert_clean(
        name,
        &run_scenario_with(name, &[], &[("CUDA_SIM_DEVICES", "2")]),
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_pool_import_on_the_second_device_uses_that_device() {
    in_scenario();
    let pool = ipc_pool(1);
    let imported =
        MemoryPoolHandle::import_posix_fd(pool.export_posix_fd().unwrap().as_fd(), 1).unwrap();
    assert_eq!(imported.context().as_ref().unwrap().device(), Some(1));
    let host = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        device: 1,
        ..PoolProps::device(1)
    })
    .unwrap();
    assert_eq!(host.context().as_ref().unwrap().device(), Some(1));
    drop((imported, host, pool));
}

// ---------------------------------------------------------------------------------------------
// Defect 9: an old driver gets an error or a fallback, never a panic.

#[test]
fn old_drivers_get_errors_or_fallbacks() {
    let name = "elapsed_time_falls_back_before_cuda_12_8";
    let report = run_scenario_with(name, &[], &[("CUDA_SIM_DRIVER_VERSION", "12040")]);
    assert_clean(name, &report);
    assert!(report.calls.contains_key("cuEventElapsedTime"));
    assert!(!report.calls.contains_key("cuEventElapsedTime_v2"));
    let name = "a_driver_older_than_cuda_12_is_refused";
    let report = run_scenario_with(name, &[], &[("CUDA_SIM_DRIVER_VERSION", "11080")]);
    assert_clean(name, &report);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_elapsed_time_falls_back_before_cuda_12_8() {
    in_scenario();
    assert_eq!(handles_cuda::driver::driver_version().unwrap(), 12040);
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let (start, end) = (
        EventHandle::create(&context, EventFlags::timing()).unwrap(),
        EventHandle::create(&context, EventFlags::timing()).unwrap(),
    );
    start.record(&stream).unwrap();
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    assert!(start.elapsed_ms(&end).unwrap() >= 0.0);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_driver_older_than_cuda_12_is_refused() {
    in_scenario();
    match handles_cuda::driver::ensure_loaded() {
        Err(Error::DriverTooOld { version: 11080, .. }) => {}
        other => panic!("expected DriverTooOld, got {other:?}"),
    }
    assert!(ContextHandle::primary(0).is_err());
}

// ---------------------------------------------------------------------------------------------
// Defect 10: `to_cudarc` leaves the caller's current context as it was.

#[test]
fn to_cudarc_restores_the_current_context() {
    let name = "to_cudarc_restores_the_current_context";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_to_cudarc_restores_the_current_context() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    assert!(ContextHandle::current().unwrap().is_none());
    let cudarc = context.to_cudarc().unwrap();
    assert_eq!(cudarc.cu_ctx(), context.as_cu());
    assert!(
        ContextHandle::current().unwrap().is_none(),
        "no hidden thread state: nothing was current before"
    );
}

// ---------------------------------------------------------------------------------------------
// Defect 11: IPC events keep their flags; a failed pointer export is returned as it is.

#[test]
fn ipc_event_import_keeps_blocking_sync() {
    let name = "ipc_event_import_keeps_blocking_sync";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_ipc_event_import_keeps_blocking_sync() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let flags = EventFlags {
        timing: false,
        blocking_sync: true,
        interprocess: true,
    };
    let event = EventHandle::create(&context, flags).unwrap();
    let sent = event.export_ipc().unwrap().to_bytes();
    let token = IpcEventHandle::from_bytes(&sent).unwrap();
    let imported = EventHandle::import_ipc(&context, &token).unwrap();
    assert_eq!(imported.flags(), flags);
}

#[test]
fn failed_pointer_export_is_returned_without_side_effects() {
    let name = "failed_pointer_export_is_returned_without_side_effects";
    let report = run_scenario(
        name,
        &[("cuMemPoolExportPointer", 1, "CUDA_ERROR_INVALID_VALUE")],
    );
    assert_clean(name, &report);
    assert_eq!(
        report.calls.get("cuMemPoolExportToShareableHandle"),
        Some(&1),
        "the pool's handle is exported once, at creation, and never as a side effect"
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_failed_pointer_export_is_returned_without_side_effects() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pool = ipc_pool(0);
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
    let failed = buffer.export_ipc();
    assert!(
        matches!(&failed, Err(error) if error.code() == Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE)),
        "{failed:?}"
    );
    assert!(buffer.export_ipc().is_ok(), "the next export works");
}

// ---------------------------------------------------------------------------------------------
// The tour example, whole, on the simulator in strict mode: any violation aborts it.

#[test]
fn tour_example_runs_on_the_simulator_without_violations() {
    let exe = std::env::current_exe().expect("the test binary's path");
    // From `cargo test`: <target>/<profile>/deps/<test> and <target>/<profile>/examples/tour;
    // from a folder of collected binaries (scripts/gpu-collect.sh): side by side.
    let deps = exe.parent().expect("the test binary's folder");
    let tour = [
        deps.parent()
            .map(|profile| profile.join("examples").join("tour")),
        Some(deps.join("tour")),
    ]
    .into_iter()
    .flatten()
    .find(|path| path.exists())
    .unwrap_or_else(|| deps.join("tour"));
    assert!(
        tour.exists(),
        "{} is missing: `cargo test` builds the examples",
        tour.display()
    );
    let scratch = Scratch::new("tour");
    let mut command = cuda_sim::command(&tour);
    command.sim_strict();
    let (output, report) = run_with_report(&mut command, &scratch.join("report-%p.json"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    say(format!(
        "tour on the simulator (strict):\n{}",
        tail(&stdout, 40)
    ));
    assert!(
        output.status.success() && stdout.contains("done"),
        "the tour failed on the simulator: {:?}\n{}",
        output.status,
        tail(&String::from_utf8_lossy(&output.stderr), 30)
    );
    // The report path has `%p`: the tour's own report is the one with the tour's pid, which
    // `run_with_report` cannot know; the strict mode already aborted on any violation.
    drop(report);
}

// ---------------------------------------------------------------------------------------------
// A use on another stream that cannot be marked never turns into an unordered free.

#[test]
fn an_unmarkable_use_leaks_rather_than_frees_unordered() {
    let name = "an_unmarkable_use_leaks_rather_than_frees_unordered";
    let report = run_scenario(
        name,
        &[
            ("cuEventRecord", 1, "CUDA_ERROR_LAUNCH_FAILED"),
            ("cuStreamSynchronize", 1, "CUDA_ERROR_LAUNCH_FAILED"),
        ],
    );
    assert!(
        report.of_kind("unordered-free").is_empty() && report.of_kind("use-after-free").is_empty(),
        "{:#?}",
        report.violations
    );
    say(format!(
        "leaks by design: {:?}",
        report.leaks_without_primary()
    ));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_an_unmarkable_use_leaks_rather_than_frees_unordered() {
    in_scenario();
    let failures = handles_tests::Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let (home, other) = (non_blocking(&context), non_blocking(&context));
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
    let marked = buffer.memset_async(1, 4096, &other);
    assert!(marked.is_err(), "the marker's failure is returned");
    drop(buffer);
    let seen = failures.seen();
    assert!(
        seen.iter()
            .any(|line| line.contains("leaked rather than freed")),
        "the refused free is reported: {seen:?}"
    );
}

#[test]
fn a_copy_whose_source_cannot_be_marked_still_orders_the_destination() {
    let name = "a_copy_whose_source_cannot_be_marked_still_orders_the_destination";
    let report = run_scenario(
        name,
        &[
            ("cuEventCreate", 1, "CUDA_ERROR_OUT_OF_MEMORY"),
            ("cuStreamSynchronize", 1, "CUDA_ERROR_LAUNCH_FAILED"),
        ],
    );
    assert!(
        report.of_kind("unordered-free").is_empty(),
        "{:#?}",
        report.violations
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_copy_whose_source_cannot_be_marked_still_orders_the_destination() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let (home, other) = (non_blocking(&context), non_blocking(&context));
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let source = DevicePtrHandle::alloc_from_pool(&pool, 256, &home).unwrap();
    let target = DevicePtrHandle::alloc_from_pool(&pool, 256, &home).unwrap();
    assert!(source.copy_to_async(0, &target, 0, 256, &other).is_err());
    drop(target);
    drop(source);
}

#[test]
fn an_unbound_default_stream_with_no_current_context_is_refused() {
    let name = "an_unbound_default_stream_with_no_current_context_is_refused";
    assert_clean(name, &run_scenario(name, &[]));
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_an_unbound_default_stream_with_no_current_context_is_refused() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let buffer =
        DevicePtrHandle::alloc_async(256, &StreamHandle::legacy_in(&context).unwrap()).unwrap();
    let mut host = [0u8; 16];
    assert!(
        buffer
            .memset_async(1, 256, &StreamHandle::legacy())
            .is_err()
    );
    assert!(
        buffer
            .copy_to_host(&mut host, &StreamHandle::per_thread())
            .is_err()
    );
    drop(buffer);
}

// ---------------------------------------------------------------------------------------------
// Host views wait for their memory's own work: a pinned buffer's view waits for the marker of
// the stream that used it, not for every stream of its context (found by the serving
// benchmark: two whole-context synchronisations per request, every worker waiting on all
// the others).

#[test]
fn a_pinned_host_view_waits_for_its_own_streams_only() {
    let name = "a_pinned_host_view_waits_for_its_own_streams_only";
    let report = run_scenario(name, &[]);
    assert_clean(name, &report);
    let calls = |call: &str| report.calls.get(call).copied().unwrap_or(0);
    assert_eq!(
        calls("cuCtxSynchronize"),
        0,
        "a view and a free of pinned memory used on one stream synchronise no context"
    );
    assert!(calls("cuEventSynchronize") >= 2, "{:?}", report.calls);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_pinned_host_view_waits_for_its_own_streams_only() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let (mine, other) = (non_blocking(&context), non_blocking(&context));
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let unrelated = DevicePtrHandle::alloc_async(1 << 20, &other).unwrap();
    pinned.memset_async(7, 4096, &mine).unwrap();
    // Work on another stream that the view has no reason to wait for.
    unrelated.memset_async(1, 1 << 20, &other).unwrap();
    {
        let view = pinned.host_view().unwrap();
        assert!(
            view.iter().all(|&byte| byte == 7),
            "the view sees the memset"
        );
    }
    pinned.memset_async(9, 4096, &mine).unwrap();
    assert!(pinned.host_view().unwrap().iter().all(|&byte| byte == 9));
    other.synchronize().unwrap();
    drop((pinned, unrelated));
}

// ---------------------------------------------------------------------------------------------
// A recycled event whose last record the host saw complete goes back ready: the next acquire
// hands it out again with no `cuEventQuery` (found by the serving benchmark: one query per
// request, for an event that had just been waited for; about 1.4 µs on driver 580).

#[test]
fn a_recycled_event_seen_complete_is_reused_without_a_query() {
    let name = "a_recycled_event_seen_complete_is_reused_without_a_query";
    let report = run_scenario(name, &[]);
    assert_clean(name, &report);
    let calls = |call: &str| report.calls.get(call).copied().unwrap_or(0);
    // One event for all twenty requests, and the scenario's own queries only: ten that said
    // "done", none by the acquires.
    assert_eq!(calls("cuEventCreate"), 1, "{:?}", report.calls);
    assert_eq!(calls("cuEventQuery"), 10, "{:?}", report.calls);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_recycled_event_seen_complete_is_reused_without_a_query() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let recycler = handles_cuda::exec::EventRecycler::new(&context, EventFlags::default()).unwrap();
    // Nothing here reaches the event through `Deref` (its raw value included): that would
    // make its release ask the driver.
    // Waited for, then dropped.
    for _ in 0..10 {
        let event = recycler.acquire().unwrap();
        event.record(&stream).unwrap();
        event.synchronize().unwrap();
    }
    // Queried until done, then dropped.
    for _ in 0..10 {
        let event = recycler.acquire().unwrap();
        event.record(&stream).unwrap();
        while !event.query().unwrap() {
            std::thread::yield_now();
        }
    }
    drop(recycler);
    handles_cuda::exec::clear_recycled_events();
}
