//! Attacks on the rules of handles-cuda with safe calls only, each a scenario on the simulated
//! driver: panics inside nested context scopes, cudarc drops that bind their own context,
//! default-stream tokens in a context another library released, graph event nodes and graph
//! launches across contexts and devices, racing current-pool replacements, recycled-handle
//! races, and every probed function on older drivers. Four of them found defects, fixed since
//! (graph record nodes, cudarc drops, released current contexts, graph reach on the graph's own
//! device); the others document attacks that did not get through.

mod simulator;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cudarc::driver::CudaContext;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, LaunchConfig, MemoryPoolHandle, PoolProps,
    StreamFlags, StreamHandle,
    exec::{EventFlags, EventRecycler, GreenContextHandle, StreamRecycler},
    graph::{CaptureMode, GraphHandle},
};
use handles_tests::kernels::TestKernels;
use simulator::{assert_clean, in_scenario, run_scenario};

fn non_blocking(context: &ContextHandle) -> StreamHandle {
    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
}

fn clean(name: &str, env: &[(&str, &str)]) {
    assert_clean(name, &run_scenario(name, &[], env));
}

fn current_raw() -> handles_cuda::driver::sys::CUcontext {
    ContextHandle::current()
        .unwrap()
        .map_or(std::ptr::null_mut(), |c| c.as_cu())
}

// ---------------------------------------------------------------------------------------------
// Claim 1: nested runs with panics restore every level; the green context can be dropped after.

#[test]
fn nested_panicking_runs_restore_each_level() {
    clean(
        "nested_panicking_runs_restore_each_level",
        &[("CUDA_SIM_STRICT", "1")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_nested_panicking_runs_restore_each_level() {
    in_scenario();
    let primary = ContextHandle::primary(0).unwrap();
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let green2 = GreenContextHandle::create(0, 16).unwrap();
    let green2_context = green2.context().unwrap();
    primary
        .run(|| {
            green_context.run(|| {
                let unwound = catch_unwind(AssertUnwindSafe(|| {
                    let _ = green2_context.run(|| -> handles_cuda::Result<()> {
                        // Same context again (the fast path) inside, then panic.
                        let _ = green2_context
                            .run(|| -> handles_cuda::Result<()> { panic!("innermost") });
                        Ok(())
                    });
                }));
                assert!(unwound.is_err());
                assert_eq!(
                    current_raw(),
                    green_context.as_cu(),
                    "middle level restored"
                );
                Ok::<_, Error>(())
            })?;
            assert_eq!(current_raw(), primary.as_cu(), "outer level restored");
            Ok::<_, Error>(())
        })
        .unwrap();
    assert!(current_raw().is_null());
    drop((green_context, green, green2_context, green2));
    let stream = non_blocking(&primary);
    let event = EventHandle::create(&primary, EventFlags::default()).unwrap();
    // With no context current, the event's primary context is left current (the thread's
    // primary cache keeps it) until the cache is cleared.
    assert_eq!(current_raw(), primary.as_cu());
    event.record(&stream).unwrap();
    stream.synchronize().unwrap();
    handles_cuda::exec::clear_primary_cache();
    assert!(current_raw().is_null());
    assert!(EventHandle::create_in_current(EventFlags::default()).is_err());
}

// Claim 1 (a deleter run inside `run`): dropping a wrapped cudarc slice must not change the
// caller's current context (cudarc's free binds cudarc's context and leaves it bound).

#[test]
fn dropping_a_cudarc_slice_keeps_the_callers_context() {
    clean("dropping_a_cudarc_slice_keeps_the_callers_context", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_dropping_a_cudarc_slice_keeps_the_callers_context() {
    in_scenario();
    let cudarc_context = CudaContext::new(0).unwrap();
    let cudarc_stream = cudarc_context.new_stream().unwrap();
    let slice = cudarc_stream.alloc_zeros::<u8>(256).unwrap();
    let buffer = DevicePtrHandle::from_cudarc_slice(slice).unwrap();
    drop(cudarc_stream);
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let expected = green_context.as_cu();
    let seen = green_context
        .run(|| {
            drop(buffer);
            Ok::<_, Error>(current_raw_unchecked())
        })
        .unwrap();
    drop((green_context, green, cudarc_context));
    assert_eq!(
        seen, expected,
        "after dropping the slice's handle inside the green context's run, another context \
         is current"
    );
}

fn current_raw_unchecked() -> handles_cuda::driver::sys::CUcontext {
    let mut raw = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let status = unsafe { handles_cuda::driver::sys::cuCtxGetCurrent(&mut raw) };
    assert_eq!(status, handles_cuda::driver::sys::CUresult::CUDA_SUCCESS);
    raw
}

// Claim 1 / tokens: a released primary context left current by cudarc; an unbound token
// then runs a driver call in it (require_current_context checks only for null).

#[test]
fn unbound_token_in_a_released_primary_context() {
    clean("unbound_token_in_a_released_primary_context", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_unbound_token_in_a_released_primary_context() {
    in_scenario();
    // cudarc retains and binds the primary context, and on drop releases it but leaves it
    // current. No handle of this crate holds a retain.
    drop(CudaContext::new(0).unwrap());
    let synced = StreamHandle::legacy().synchronize();
    let queried = StreamHandle::per_thread().query();
    // A live context is needed for these; a refusal is the sound answer.
    assert!(
        synced.is_err() && queried.is_err(),
        "{synced:?} {queried:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Claim 2: old drivers, every probed API; errors are NotSupported, never a panic.

fn old_driver_body() {
    let version = handles_cuda::driver::driver_version().unwrap();
    let primary = ContextHandle::primary(0).unwrap();
    let unsupported = |result: &handles_cuda::Result<()>| {
        matches!(result, Err(Error::NotSupported { .. })) || result.is_ok()
    };
    // Green contexts.
    match GreenContextHandle::create(0, 16) {
        Ok(green) => {
            assert!(version >= 12040);
            let context = green.context().unwrap();
            let stream = green.create_stream(0);
            match &stream {
                Ok(_) => assert!(version >= 12050),
                Err(e) => assert!(matches!(e, Error::NotSupported { .. }), "{e:?}"),
            }
            let s2 = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap();
            let event = EventHandle::create(&context, EventFlags::default()).unwrap();
            event.record(&s2).unwrap();
            s2.synchronize().unwrap();
            let _ = green.clone().close();
            drop((stream, s2, event, context, green));
        }
        Err(e) => {
            assert!(version < 12040, "{e:?}");
            assert!(matches!(e, Error::NotSupported { .. }), "{e:?}");
        }
    }
    // Libraries and kernels.
    let kernels = TestKernels::load();
    match &kernels {
        Ok(kernels) => {
            let count = kernels.library.kernel_count();
            assert!(count.is_ok() == (version >= 12040), "{version}: {count:?}");
            let count = count.map(drop);
            assert!(unsupported(&count), "{count:?}");
            let stream = non_blocking(&primary);
            let buffer = DevicePtrHandle::alloc_async(4096, &stream).unwrap();
            kernels
                .fill
                .launch(
                    &stream,
                    &LaunchConfig::linear(1024, 128),
                    (&buffer, 1, 1024),
                )
                .unwrap();
            stream.synchronize().unwrap();
        }
        Err(e) => panic!("{version}: kernels do not load: {e:?}"),
    }
    // Events.
    let a = EventHandle::create(&primary, EventFlags::timing()).unwrap();
    let b = EventHandle::create(&primary, EventFlags::timing()).unwrap();
    let stream = non_blocking(&primary);
    a.record(&stream).unwrap();
    b.record(&stream).unwrap();
    stream.synchronize().unwrap();
    let elapsed = a.elapsed_ms(&b).map(drop);
    assert!(unsupported(&elapsed), "{elapsed:?}");
    let recycled = EventRecycler::new(&primary, EventFlags::default())
        .unwrap()
        .acquire()
        .unwrap();
    recycled.record(&stream).unwrap();
    drop((recycled, kernels));
    handles_cuda::exec::clear_recycled_events();
}

#[test]
fn old_driver_12030_every_probed_api() {
    clean(
        "old_driver_12030_every_probed_api",
        &[("CUDA_SIM_DRIVER_VERSION", "12030")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_old_driver_12030_every_probed_api() {
    in_scenario();
    old_driver_body();
}

#[test]
fn old_driver_12040_every_probed_api() {
    clean(
        "old_driver_12040_every_probed_api",
        &[("CUDA_SIM_DRIVER_VERSION", "12040")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_old_driver_12040_every_probed_api() {
    in_scenario();
    old_driver_body();
}

#[test]
fn old_driver_12070_every_probed_api() {
    clean(
        "old_driver_12070_every_probed_api",
        &[("CUDA_SIM_DRIVER_VERSION", "12070")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_old_driver_12070_every_probed_api() {
    in_scenario();
    old_driver_body();
}

// ---------------------------------------------------------------------------------------------
// Claim 3: two threads replacing the current pool while a third allocates.

#[test]
fn two_setters_and_an_allocator_race_on_the_current_pool() {
    clean(
        "two_setters_and_an_allocator_race_on_the_current_pool",
        &[("CUDA_SIM_STRICT", "1")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_two_setters_and_an_allocator_race_on_the_current_pool() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let done = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..200 {
                    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
                    let previous = pool.set_device_current(0).unwrap();
                    drop(pool);
                    // Put the previous one back at times: it may be destroyed concurrently.
                    drop(previous);
                    let _ = MemoryPoolHandle::device_current(0).unwrap();
                }
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        let stream = non_blocking(&context);
        while done.load(Ordering::Relaxed) < 2 {
            let buffer = DevicePtrHandle::alloc_async(256, &stream).unwrap();
            buffer.memset_async(1, 256, &stream).unwrap();
        }
        stream.synchronize().unwrap();
    });
    let default = MemoryPoolHandle::device_default(0).unwrap();
    drop(default.set_device_current(0).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Claim 5: recycled green-context event on tokens of another context.

#[test]
fn a_recycled_green_event_is_refused_on_primary_tokens() {
    clean("a_recycled_green_event_is_refused_on_primary_tokens", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_recycled_green_event_is_refused_on_primary_tokens() {
    in_scenario();
    let primary = ContextHandle::primary(0).unwrap();
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let recycler = EventRecycler::new(&green_context, EventFlags::default()).unwrap();
    let event = recycler.acquire().unwrap();
    for token in [StreamHandle::legacy(), StreamHandle::per_thread()] {
        let refused = primary.run(|| event.record(&token));
        assert!(refused.is_err(), "{refused:?}");
    }
    let bound = StreamHandle::legacy_in(&primary).unwrap();
    let refused = green_context.run(|| event.record(&bound));
    assert!(refused.is_err(), "{refused:?}");
    let refused = event.record(&non_blocking(&primary));
    assert!(refused.is_err(), "{refused:?}");
    // And in its own context, through the green context's token under `run`.
    green_context
        .run(|| event.record(&StreamHandle::legacy()))
        .unwrap();
    event.synchronize().unwrap();
    drop((event, recycler));
    handles_cuda::exec::clear_recycled_events();
    drop((green_context, green));
}

// Claim 5 through a graph: an event-record node of another context's event.

#[test]
fn a_graph_event_node_of_another_context_is_refused() {
    clean("a_graph_event_node_of_another_context_is_refused", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a_graph_event_node_of_another_context_is_refused() {
    in_scenario();
    let primary = ContextHandle::primary(0).unwrap();
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let event = EventHandle::create(&primary, EventFlags::default()).unwrap();
    let graph = GraphHandle::create(&green_context).unwrap();
    let added = graph.add_event_record_node(&[], &event);
    let launched = added.and_then(|_| {
        let exec = graph.instantiate()?;
        let stream = non_blocking(&green_context);
        exec.launch(&stream)?;
        stream.synchronize()
    });
    drop((graph, event, green_context, green));
    assert!(
        launched.is_err(),
        "a primary-context event was recorded by a graph in a green context"
    );
}

// ---------------------------------------------------------------------------------------------
// Claim 6: a weak handle raced across threads never reaches a recycled stream's next owner.

#[test]
fn recycled_stream_weak_upgrades_race_across_threads() {
    clean("recycled_stream_weak_upgrades_race_across_threads", &[]);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_recycled_stream_weak_upgrades_race_across_threads() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let recycler = StreamRecycler::new(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    // The weak handles carry the iteration that made them: reaching the stream of the owner of
    // that same iteration is legitimate, reaching a later owner's stream is the defect.
    let (send, receive) = std::sync::mpsc::channel::<(usize, handles_cuda::exec::StreamWeak)>();
    let owner: std::sync::Mutex<Option<(usize, usize)>> = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        let owner = &owner;
        scope.spawn(move || {
            while let Ok((made_in, weak)) = receive.recv() {
                for _ in 0..50 {
                    if let Some(strong) = weak.upgrade() {
                        let raw = strong.as_cu() as usize;
                        let current = *owner.lock().unwrap();
                        assert!(
                            !matches!(current, Some((i, owned)) if owned == raw && i != made_in),
                            "an old weak handle reached the next owner's stream"
                        );
                        drop(strong);
                    }
                }
            }
        });
        for i in 0..300 {
            let stream = recycler.acquire().unwrap();
            *owner.lock().unwrap() = Some((i, stream.as_cu() as usize));
            if i % 2 == 0 {
                send.send((i, stream.downgrade())).unwrap();
            }
            stream.synchronize().unwrap();
            *owner.lock().unwrap() = None;
            drop(stream);
        }
        drop(send);
    });
    handles_cuda::exec::clear_recycled_streams();
}

// ---------------------------------------------------------------------------------------------
// Claim 7: a graph captured in device 1's context, with device 0's pool memory, launched on a
// device-0 stream after device 1's access was revoked: the buffer check asks about the launch
// stream's device, but the kernel node runs in device 1's context.

#[test]
fn two_gpus_far_graph_relaunched_on_a_home_stream_after_revoke() {
    clean(
        "two_gpus_far_graph_relaunched_on_a_home_stream_after_revoke",
        &[("CUDA_SIM_DEVICES", "2")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_two_gpus_far_graph_relaunched_on_a_home_stream_after_revoke() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let far = ContextHandle::primary(1).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let home = non_blocking(&ContextHandle::primary(0).unwrap());
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
    home.synchronize().unwrap();
    pool.set_peer_access(1, true).unwrap();
    let graph = GraphHandle::capture(&far, CaptureMode::Relaxed, |capture| {
        capture.launch(
            &kernels.fill,
            &LaunchConfig::linear(1024, 128),
            (&buffer, 3, 1024),
        )
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    pool.set_peer_access(1, false).unwrap();
    // The graph's kernel node belongs to device 1's context.
    let relaunch = exec.launch(&home);
    home.synchronize().unwrap();
    drop((exec, graph, buffer));
    home.synchronize().unwrap();
    assert!(
        relaunch.is_err(),
        "a graph of device 1's context, using device 0's pool memory, was launched after \
         device 1's access was revoked"
    );
}

// Claim 7 (the known TOCTOU): a revocation racing another thread's launches on device 1.
// The simulator does not check pool peer access on kernel touches, so only a count is shown:
// launches accepted by the check that started before the revocation returned and whose
// check overlapped it.

#[test]
fn two_gpus_revoke_races_far_launches() {
    clean(
        "two_gpus_revoke_races_far_launches",
        &[("CUDA_SIM_DEVICES", "2")],
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_two_gpus_revoke_races_far_launches() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let far = ContextHandle::primary(1).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let home = non_blocking(&ContextHandle::primary(0).unwrap());
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
    home.synchronize().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let far_stream = non_blocking(&far);
            while !stop.load(Ordering::Relaxed) {
                let _ = kernels.fill.launch(
                    &far_stream,
                    &LaunchConfig::linear(1024, 128),
                    (&buffer, 5, 1024),
                );
            }
            far_stream.synchronize().unwrap();
        });
        for _ in 0..200 {
            pool.set_peer_access(1, true).unwrap();
            pool.set_peer_access(1, false).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    drop(buffer);
    home.synchronize().unwrap();
}
