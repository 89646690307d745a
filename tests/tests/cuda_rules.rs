//! Reproducers of defects that sat where a rule of handles-cuda was written in more than one
//! place (D2–D4, D8–D10 of the layers issue; D1, D5, D11 are in `examples/cuda-libs`, D6 and
//! D7 in `capabilities.rs`). Each runs as a child on the simulated driver, whose checker
//! reports what a GPU would show only when a race goes badly.

mod simulator;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::CudaContext;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, MemoryPoolHandle, PoolProps, StreamFlags,
    StreamHandle,
    driver::sys,
    exec::{EventFlags, GreenContextHandle, StreamRecycler},
};
use handles_tests::Failures;
use handles_tests::kernels::TestKernels;
use simulator::{assert_clean, in_scenario, run_scenario};

fn non_blocking(context: &ContextHandle) -> StreamHandle {
    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
}

fn clean(name: &str, env: &[(&str, &str)]) {
    assert_clean(name, &run_scenario(name, &[], env));
}

// D2: the current pool is resolved under the lock that replaces it.

#[test]
fn alloc_async_never_uses_a_replaced_current_pool() {
    clean("alloc_async_never_uses_a_replaced_current_pool", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_alloc_async_never_uses_a_replaced_current_pool() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // The allocating threads stop also if this one panics (a pool the driver refuses),
            // so that a failure is reported instead of a hang.
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = Stop(&stop);
            for _ in 0..3000 {
                let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
                // The pool made current replaces (and, its last handle gone, destroys) the one
                // before; this handle drops at once, so only the table keeps it.
                drop(pool.set_device_current(0).unwrap());
            }
        });
        // Two allocating threads, so that a resolution is almost always under way when the
        // current pool is replaced.
        for _ in 0..2 {
            scope.spawn(|| {
                let stream = non_blocking(&context);
                let mut allocations = 0;
                while !stop.load(Ordering::Relaxed) {
                    let buffer = DevicePtrHandle::alloc_async(256, &stream).unwrap();
                    buffer.memset_async(1, 256, &stream).unwrap();
                    allocations += 1;
                    // The driver releases a destroyed pool only once its queued frees are
                    // done; a bounded queue keeps few replaced pools waiting for that (an
                    // unbounded run once saw `cuMemPoolCreate` fail, out of memory, on an
                    // H200).
                    if allocations % 128 == 0 {
                        stream.synchronize().unwrap();
                    }
                }
                stream.synchronize().unwrap();
                assert!(allocations > 0);
            });
        }
    });
    let default = MemoryPoolHandle::device_default(0).unwrap();
    drop(default.set_device_current(0).unwrap());
}

// D3: a panic inside `ContextHandle::run` restores the caller's context.

#[test]
fn a_panic_inside_run_restores_the_callers_context() {
    clean("a_panic_inside_run_restores_the_callers_context", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_panic_inside_run_restores_the_callers_context() {
    in_scenario();
    assert!(ContextHandle::current().unwrap().is_none());
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let _ = green_context.run(|| -> handles_cuda::Result<()> { panic!("inside run") });
    }));
    assert!(unwound.is_err());
    assert!(
        ContextHandle::current().unwrap().is_none(),
        "the caller had no context current, and has none after the panic"
    );
    // Also from a context that was current before.
    let primary = ContextHandle::primary(0).unwrap();
    primary
        .run(|| {
            let unwound = catch_unwind(AssertUnwindSafe(|| {
                let _ = green_context.run(|| -> handles_cuda::Result<()> { panic!("again") });
            }));
            assert!(unwound.is_err());
            let current = ContextHandle::current()?.expect("the primary context is current");
            assert_eq!(current.as_cu(), primary.as_cu());
            Ok::<_, Error>(())
        })
        .unwrap();
    drop((green_context, green));
    // Work after the green context is gone runs in a live context (the simulator reports a
    // call in a destroyed one).
    let stream = non_blocking(&primary);
    let event = EventHandle::create_in_current(EventFlags::default());
    assert!(event.is_err(), "no context is current: {event:?}");
    stream.synchronize().unwrap();
}

// D4: a wrapped cudarc slice that cannot be freed in order is leaked and reported.

#[test]
fn a_cudarc_slice_whose_free_cannot_be_ordered_is_reported() {
    let name = "a_cudarc_slice_whose_free_cannot_be_ordered_is_reported";
    // The slice is leaked on purpose; nothing else may be.
    let report = run_scenario(name, &[], &[]);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// The same program with the simulator's data-race check on: the memset on `other` follows
/// cudarc's `alloc_zeros` memset on its own stream, because wrapping the slice waits for the
/// work cudarc queued on it (`from_cudarc_slice`). Without that wait the simulator reports
/// the two memsets as a `data-race` (seen before the fix).
#[test]
fn a_wrapped_cudarc_slice_is_written_after_cudarcs_own_work_on_it() {
    let name = "a_cudarc_slice_whose_free_cannot_be_ordered_is_reported";
    let report = run_scenario(name, &[], &[("CUDA_SIM_CHECK_DATA_RACE", "1")]);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_cudarc_slice_whose_free_cannot_be_ordered_is_reported() {
    in_scenario();
    let failures = Failures::watch();
    let cudarc_context = CudaContext::new(0).unwrap();
    let cudarc_stream = cudarc_context.new_stream().unwrap();
    let context = ContextHandle::from_cudarc(&cudarc_context);
    let other = non_blocking(&context);
    let slice = cudarc_stream.alloc_zeros::<u8>(256).unwrap();
    let buffer = DevicePtrHandle::from_cudarc_slice(slice).unwrap();
    buffer.memset_async(7, 256, &other).unwrap();
    cudarc_stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    // cudarc's stream captures: its wait for the memset cannot be queued, so the slice is
    // leaked, and the leak must reach the report hook.
    drop(buffer);
    let seen = failures.seen();
    assert_eq!(seen.len(), 1, "one reported leak: {seen:?}");
    assert!(seen[0].starts_with("DevicePtr"), "{seen:?}");
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream is alive and capturing; `graph` is a valid out-pointer.
    let ended = unsafe { sys::cuStreamEndCapture(cudarc_stream.cu_stream(), &mut graph) };
    assert_eq!(ended, sys::CUresult::CUDA_SUCCESS);
    if !graph.is_null() {
        // SAFETY: the graph the capture made, destroyed once.
        let destroyed = unsafe { sys::cuGraphDestroy(graph) };
        assert_eq!(destroyed, sys::CUresult::CUDA_SUCCESS);
    }
    other.synchronize().unwrap();
}

// D8: an event is recorded only on a stream of its context, default-stream tokens included.

#[test]
fn an_event_is_refused_on_a_token_of_another_context() {
    clean("an_event_is_refused_on_a_token_of_another_context", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_an_event_is_refused_on_a_token_of_another_context() {
    in_scenario();
    let primary = ContextHandle::primary(0).unwrap();
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let event = EventHandle::create(&primary, EventFlags::default()).unwrap();
    let refused = green_context.run(|| event.record(&StreamHandle::legacy()));
    assert!(
        matches!(refused, Err(Error::WrongContext { .. })),
        "{refused:?}"
    );
    // A green context has no per-thread stream (driver 580 answers CUDA_ERROR_INVALID_HANDLE,
    // and so does the simulator): refused with a typed error before the driver is asked.
    let refused = green_context.run(|| event.record(&StreamHandle::per_thread()));
    assert!(
        matches!(refused, Err(Error::WrongContext { .. })),
        "{refused:?}"
    );
    for token in [StreamHandle::legacy(), StreamHandle::per_thread()] {
        // In its own context the same token is fine.
        primary.run(|| event.record(&token)).unwrap();
    }
    let recycled = handles_cuda::exec::EventRecycler::new(&primary, EventFlags::default())
        .unwrap()
        .acquire()
        .unwrap();
    let refused = green_context.run(|| recycled.record(&StreamHandle::legacy()));
    assert!(refused.is_err(), "{refused:?}");
    event.synchronize().unwrap();
    drop((recycled, event, green_context, green));
    handles_cuda::exec::clear_recycled_events();
}

// D9: a recycled stream is never handed out while an old owner's weak handle exists.

#[test]
fn a_recycled_stream_is_not_reachable_through_an_old_weak_handle() {
    clean(
        "a_recycled_stream_is_not_reachable_through_an_old_weak_handle",
        &[],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_recycled_stream_is_not_reachable_through_an_old_weak_handle() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let recycler = StreamRecycler::new(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    let first = recycler.acquire().unwrap();
    let kept = first.downgrade();
    let raw = first.as_cu();
    drop(first);
    let second = recycler.acquire().unwrap();
    if let Some(upgraded) = kept.upgrade() {
        assert_ne!(
            upgraded.as_cu(),
            second.as_cu(),
            "the old owner's weak handle reaches the next owner's stream"
        );
    }
    // Without a weak handle, the stream is recycled as before.
    drop(kept);
    let raw_second = second.as_cu();
    drop(second);
    let third = recycler.acquire().unwrap();
    assert_eq!(third.as_cu(), raw_second, "an unshared stream is reused");
    let _ = raw;
    drop(third);
    handles_cuda::exec::clear_recycled_streams();
}

// D10: revoking a device's access to a pool is ordered after that device's work, and graphs
// check their buffers at every launch.

#[test]
fn two_gpus_revoking_peer_access_waits_for_work_and_graphs_recheck() {
    clean(
        "two_gpus_revoking_peer_access_waits_for_work_and_graphs_recheck",
        &[("CUDA_SIM_DEVICES", "2")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_two_gpus_revoking_peer_access_waits_for_work_and_graphs_recheck() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let far = ContextHandle::primary(1).unwrap();
    let far_stream = non_blocking(&far);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let home = non_blocking(&ContextHandle::primary(0).unwrap());
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
    home.synchronize().unwrap();
    pool.set_peer_access(1, true).unwrap();
    // A graph on device 1 that uses the pool's memory.
    let graph = handles_cuda::graph::GraphHandle::capture(
        &far,
        handles_cuda::graph::CaptureMode::Relaxed,
        |capture| {
            capture.launch(
                &kernels.fill,
                &handles_cuda::LaunchConfig::linear(1024, 128),
                (&buffer, 3, 1024),
            )
        },
    )
    .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&far_stream).unwrap();
    // Work queued on device 1, then the revocation: it waits for that work first.
    kernels
        .fill
        .launch(
            &far_stream,
            &handles_cuda::LaunchConfig::linear(1024, 128),
            (&buffer, 5, 1024),
        )
        .unwrap();
    pool.set_peer_access(1, false).unwrap();
    assert!(
        far_stream.query().unwrap(),
        "the revocation returned only after device 1's work on the pool"
    );
    // Afterwards the graph and direct work are refused, not faulted.
    let relaunch = exec.launch(&far_stream);
    assert!(
        matches!(relaunch, Err(Error::Unreachable { pool: true, .. })),
        "{relaunch:?}"
    );
    let direct = buffer.memset_async(0, 4096, &far_stream);
    assert!(direct.is_err(), "{direct:?}");
    far_stream.synchronize().unwrap();
    drop((exec, graph, buffer));
    home.synchronize().unwrap();
}

// D10, across threads: a use that passed its reach check holds off a revocation until its work
// is queued, and a use that begins while a revocation waits is refused.

#[test]
fn two_gpus_a_revocation_waits_for_a_use_between_check_and_queue() {
    clean(
        "two_gpus_a_revocation_waits_for_a_use_between_check_and_queue",
        &[("CUDA_SIM_DEVICES", "2")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_two_gpus_a_revocation_waits_for_a_use_between_check_and_queue() {
    in_scenario();
    // An owned pool, and then the device's default pool, whose handles are separate
    // references: the use through one must hold off the revocation through another.
    for owned in [true, false] {
        let pool = if owned {
            MemoryPoolHandle::create(&PoolProps::device(0)).unwrap()
        } else {
            MemoryPoolHandle::device_default(0).unwrap()
        };
        revocation_waits_for_a_use(&pool, &|| {
            if owned {
                pool.clone()
            } else {
                MemoryPoolHandle::device_default(0).unwrap()
            }
        });
    }
}

fn revocation_waits_for_a_use(
    pool: &MemoryPoolHandle,
    revoker_pool: &dyn Fn() -> MemoryPoolHandle,
) {
    let far_stream = non_blocking(&ContextHandle::primary(1).unwrap());
    let home = non_blocking(&ContextHandle::primary(0).unwrap());
    let buffer = DevicePtrHandle::alloc_from_pool(pool, 4096, &home).unwrap();
    home.synchronize().unwrap();
    pool.set_peer_access(1, true).unwrap();
    // What a library does before queueing its own kernel on device 1.
    let guard = buffer.check_accessible_on(&far_stream).unwrap();
    assert!(
        guard.is_held(),
        "memory of another device's pool holds a use"
    );
    let revoked = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (other, revoked) = (revoker_pool(), &revoked);
        let revoker = scope.spawn(move || {
            other.set_peer_access(1, false).unwrap();
            revoked.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !revoked.load(Ordering::SeqCst),
            "the revocation waits while a checked use is not yet queued"
        );
        assert!(pool.peer_access(1).unwrap(), "device 1 still has access");
        // A second use beginning now is refused rather than racing the revocation.
        let refused = buffer.check_accessible_on(&far_stream);
        assert!(refused.is_err(), "{refused:?}");
        drop(guard);
        revoker.join().unwrap();
    });
    assert!(revoked.load(Ordering::SeqCst));
    assert!(!pool.peer_access(1).unwrap());
    let after = buffer.memset_async(0, 4096, &far_stream);
    assert!(after.is_err(), "{after:?}");
    drop(buffer);
    home.synchronize().unwrap();
}

// Host functions must not call CUDA: the simulator reports a call made from one.

#[test]
fn a_host_function_that_calls_cuda_is_a_violation() {
    let name = "a_host_function_that_calls_cuda_is_a_violation";
    let report = run_scenario(name, &[], &[]);
    // Every call the closure made is one (the first, making the context current, fails, and
    // naming its error is a call too); nothing else is.
    assert!(!report.violations.is_empty());
    assert!(
        report
            .violations
            .iter()
            .all(|v| v.kind == "call-from-host-function"),
        "{:?}",
        report.violations
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_host_function_that_calls_cuda_is_a_violation() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let (sent, received) = std::sync::mpsc::channel();
    let inside = context.clone();
    stream
        .launch_host(move || {
            let made = EventHandle::create(&inside, EventFlags::default()).map(|_| ());
            let _ = sent.send(made);
        })
        .unwrap();
    stream.synchronize().unwrap();
    let made = received.recv().unwrap();
    assert!(
        matches!(made, Err(Error::Driver { code, .. }) if code == sys::CUresult::CUDA_ERROR_NOT_PERMITTED),
        "{made:?}"
    );
}
