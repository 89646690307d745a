//! Adversarial review of host views after commit 3c54182 (views and host frees of pinned,
//! managed and host-pool memory wait for a marker event per stream used, not for every context).
//!
//! Each program runs as a child on the strict simulator (any violation, a `data-race` of a
//! host access through a view above all, aborts it) and must finish clean, with no leak. The
//! bytes device work touches are ordered among themselves by the programs (DESIGN.md: the
//! device side is the caller's); only the host side (views, frees) is the library's.

mod simulator;

use std::sync::mpsc;
use std::time::Duration;

use cuda_sim::Report;
use handles_cuda::exec::{EventFlags, GreenContextHandle, StreamRecycler};
use handles_cuda::graph::{CaptureMode, GraphHandle};
use handles_cuda::memory::{Attach, BatchCopy, PoolLocation};
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, LaunchConfig, MemoryPoolHandle, PoolProps,
    StreamFlags, StreamHandle,
};
use handles_tests::kernels::TestKernels;
use simulator::{assert_clean, in_scenario, run_scenario};

/// Runs `scenario_{name}` in a child on the strict simulator and expects a clean report. New
/// streams take the address of the stream destroyed last, as on driver 580, whose work may
/// still be pending (`CUDA_SIM_REUSE_STREAMS`).
fn clean(name: &str, devices: &str) -> Report {
    let env = [
        ("CUDA_SIM_STRICT", "1"),
        ("CUDA_SIM_DEVICES", devices),
        ("CUDA_SIM_REUSE_STREAMS", "1"),
    ];
    let report = run_scenario(name, &[], &env);
    assert_clean(name, &report);
    report
}

fn non_blocking(context: &ContextHandle) -> StreamHandle {
    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
}

/// Orders what `later` runs from now on after what `earlier` queued so far (device-side
/// ordering is the caller's).
fn order_after(context: &ContextHandle, later: &StreamHandle, earlier: &StreamHandle) {
    let event = EventHandle::create(context, EventFlags::default()).unwrap();
    event.record(earlier).unwrap();
    later.wait_event(&event).unwrap();
}

/// Holds `stream` back until the returned sender is used (or dropped): work queued behind it
/// stays pending on the simulator, as on a busy GPU.
fn hold(stream: &StreamHandle) -> mpsc::Sender<()> {
    let (release, wait) = mpsc::channel::<()>();
    let wait = std::sync::Mutex::new(wait);
    stream
        .launch_host(move || {
            let _ = wait.lock().unwrap().recv();
        })
        .unwrap();
    release
}

/// Releases a held stream from another thread after `after`.
fn release_later(release: mpsc::Sender<()>, after: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let _ = release.send(());
    })
}

fn words(bytes: &[u8]) -> Vec<u32> {
    handles_tests::kernels::words(bytes)
}

// ---------------------------------------------------------------------------------------------
// A1: uses of one pinned allocation on many streams, through views of parts of it (kernels,
// memsets, device copies in and out), then host views of the whole.

#[test]
fn a1_pinned_used_on_many_streams_through_parts_then_viewed() {
    clean(
        "a1_pinned_used_on_many_streams_through_parts_then_viewed",
        "1",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a1_pinned_used_on_many_streams_through_parts_then_viewed() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let streams: Vec<StreamHandle> = (0..4).map(|_| non_blocking(&context)).collect();
    let pinned = DevicePtrHandle::alloc_host(&context, 4 * 1024).unwrap();
    let src = DevicePtrHandle::alloc(&context, 1024).unwrap();
    let sink = DevicePtrHandle::alloc(&context, 1024).unwrap();
    src.memset_async(0x11, 1024, &streams[3]).unwrap();
    order_after(&context, &streams[2], &streams[3]);
    for round in 0..4u32 {
        let parts: Vec<DevicePtrHandle> = (0..4)
            .map(|i| pinned.view(i * 1024, 1024).unwrap())
            .collect();
        let release = hold(&streams[round as usize % 4]);
        kernels
            .fill
            .launch(
                &streams[0],
                &LaunchConfig::linear(256, 64),
                (&parts[0], round + 1, 256),
            )
            .unwrap();
        parts[1]
            .memset_async(round as u8 + 2, 1024, &streams[1])
            .unwrap();
        // Device -> part 2 on stream 2.
        src.copy_to_async(0, &parts[2], 0, 1024, &streams[2])
            .unwrap();
        // Part 3 is written, read by a copy to the device and written by a kernel, in order
        // on stream 3.
        parts[3].memset_async(0x33, 1024, &streams[3]).unwrap();
        parts[3]
            .copy_to_async(0, &sink, 0, 1024, &streams[3])
            .unwrap();
        kernels
            .add
            .launch(
                &streams[3],
                &LaunchConfig::linear(256, 64),
                (&parts[3], 1, 256),
            )
            .unwrap();
        drop(parts);
        let waiter = release_later(release, Duration::from_millis(20));
        {
            let view = pinned.host_view().unwrap();
            let w = words(&view);
            assert!(w[..256].iter().all(|&x| x == round + 1));
            assert!(view[1024..2048].iter().all(|&b| b == round as u8 + 2));
            assert!(view[2048..3072].iter().all(|&b| b == 0x11));
            assert!(w[768..].iter().all(|&x| x == 0x3333_3334));
        }
        {
            let mut view = pinned.host_view_mut().unwrap();
            view.fill(0x34);
        }
        waiter.join().unwrap();
    }
    for stream in &streams {
        stream.synchronize().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// A2: the stream a use was queued on is dropped (destroyed, its work pending) before the view.

#[test]
fn a2_stream_dropped_after_use_before_the_view() {
    clean("a2_stream_dropped_after_use_before_the_view", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a2_stream_dropped_after_use_before_the_view() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    for round in 0..3u32 {
        let stream = non_blocking(&context);
        let release = hold(&stream);
        kernels
            .fill
            .launch(
                &stream,
                &LaunchConfig::linear(1024, 64),
                (&pinned, round + 7, 1024),
            )
            .unwrap();
        let waiter = release_later(release, Duration::from_millis(50));
        drop(stream);
        // Another stream, made after the first is gone, uses the memory too.
        let next = non_blocking(&context);
        {
            let view = pinned.host_view().unwrap();
            assert!(words(&view).iter().all(|&x| x == round + 7));
        }
        waiter.join().unwrap();
        pinned.memset_async(0, 4096, &next).unwrap();
        assert!(pinned.host_view().unwrap().iter().all(|&b| b == 0));
    }
    // The host free after a dropped, held stream.
    let stream = non_blocking(&context);
    let release = hold(&stream);
    pinned.memset_async(5, 4096, &stream).unwrap();
    let waiter = release_later(release, Duration::from_millis(50));
    drop(stream);
    drop(pinned);
    waiter.join().unwrap();
}

// ---------------------------------------------------------------------------------------------
// A3: a recycled stream, used on the memory, handed to another owner (who uses it for other
// work and holds it back), then the view.

#[test]
fn a3_recycled_stream_handed_to_another_owner() {
    clean("a3_recycled_stream_handed_to_another_owner", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a3_recycled_stream_handed_to_another_owner() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let recycler = StreamRecycler::new(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let other = DevicePtrHandle::alloc(&context, 4096).unwrap();
    for round in 0..4u8 {
        let first = recycler.acquire().unwrap();
        pinned.memset_async(round, 4096, &first).unwrap();
        first.synchronize().unwrap();
        drop(first);
        let second = recycler.acquire().unwrap();
        let release = hold(&second);
        other.memset_async(round, 4096, &second).unwrap();
        let waiter = release_later(release, Duration::from_millis(20));
        assert!(pinned.host_view().unwrap().iter().all(|&b| b == round));
        waiter.join().unwrap();
        second.synchronize().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// A4: uses from several threads on their own streams while other threads open views (shared
// and mutable) and read or write through them.

#[test]
fn a4_uses_and_views_race_across_threads() {
    clean("a4_uses_and_views_race_across_threads", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a4_uses_and_views_race_across_threads() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let managed = DevicePtrHandle::alloc_managed(&context, 4096, Attach::Global).unwrap();
    std::thread::scope(|scope| {
        for t in 0..2u32 {
            let (kernels, context, pinned, managed) = (&kernels, &context, &pinned, &managed);
            scope.spawn(move || {
                let stream = non_blocking(context);
                for i in 0..60u32 {
                    // Each thread writes its own half; refused while a view is open.
                    let half = pinned.view(t as usize * 2048, 2048).unwrap();
                    let m = managed.view(t as usize * 2048, 2048).unwrap();
                    let r = if i % 2 == 0 {
                        kernels.fill.launch(
                            &stream,
                            &LaunchConfig::linear(512, 64),
                            (&half, i, 512),
                        )
                    } else {
                        half.memset_async(i as u8, 2048, &stream)
                    };
                    match r {
                        Ok(()) | Err(Error::HostAccessActive { .. }) => {}
                        Err(other) => panic!("use: {other:?}"),
                    }
                    match m.memset_async(i as u8, 2048, &stream) {
                        Ok(()) | Err(Error::HostAccessActive { .. }) => {}
                        Err(other) => panic!("use: {other:?}"),
                    }
                    if i % 7 == 0 {
                        stream.synchronize().unwrap();
                    }
                }
                stream.synchronize().unwrap();
            });
        }
        for v in 0..2 {
            let (pinned, managed) = (&pinned, &managed);
            scope.spawn(move || {
                let mut sum = 0u64;
                for _ in 0..80 {
                    if v == 0 {
                        if let Ok(view) = pinned.host_view() {
                            sum += view.iter().map(|&b| b as u64).sum::<u64>();
                        }
                        if let Ok(view) = managed.host_view() {
                            sum += view.iter().map(|&b| b as u64).sum::<u64>();
                        }
                    } else {
                        if let Ok(mut view) = pinned.host_view_mut() {
                            view.fill(0xEE);
                        }
                        if let Ok(mut view) = managed.host_view_mut() {
                            view.fill(0xEE);
                        }
                    }
                    std::thread::yield_now();
                }
                std::hint::black_box(sum);
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// A5: copies between two host-accessible buffers (pinned -> managed -> pinned), on different
// streams ordered by events; views of both sides, a mutable one written.

#[test]
fn a5_copies_between_host_accessible_buffers() {
    clean("a5_copies_between_host_accessible_buffers", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a5_copies_between_host_accessible_buffers() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let (a, b, c) = (
        non_blocking(&context),
        non_blocking(&context),
        non_blocking(&context),
    );
    let p1 = DevicePtrHandle::alloc_host(&context, 8192).unwrap();
    let m = DevicePtrHandle::alloc_managed(&context, 8192, Attach::Global).unwrap();
    let p2 = DevicePtrHandle::alloc_host(&context, 8192).unwrap();
    for round in 1..4u8 {
        let release = hold(&a);
        p1.memset_async(round, 8192, &a).unwrap();
        order_after(&context, &b, &a);
        p1.copy_to_async(0, &m, 0, 8192, &b).unwrap();
        order_after(&context, &c, &b);
        m.copy_to_async(0, &p2, 0, 8192, &c).unwrap();
        // Batch copies too: p2 -> p1 second half, on c.
        c.copy_batch(&[BatchCopy::bytes(&p2, 0, &p1, 4096, 16)])
            .unwrap();
        let waiter = release_later(release, Duration::from_millis(30));
        // A view of the destination of the last copy, then a mutable one of the source.
        assert!(p2.host_view().unwrap().iter().all(|&b| b == round));
        {
            let mut view = p1.host_view_mut().unwrap();
            assert!(view.iter().all(|&b| b == round));
            view.fill(0xFF);
        }
        assert!(m.host_view().unwrap().iter().all(|&b| b == round));
        waiter.join().unwrap();
    }
    drop((p1, m, p2));
}

// ---------------------------------------------------------------------------------------------
// A6: graphs: a capture writing pinned memory, launched on a stream, on the legacy and the
// per-thread tokens and on a green context's stream; a built graph whose kernel node is
// updated to the pinned buffer; each followed by a view.

#[test]
fn a6_graph_launches_then_views() {
    clean("a6_graph_launches_then_views", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a6_graph_launches_then_views() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        capture.launch(
            &kernels.add_one,
            &LaunchConfig::linear(1024, 64),
            (&pinned, 1024),
        )
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    pinned.memset_async(0, 4096, &stream).unwrap();
    let green = GreenContextHandle::create(0, 16).ok();
    let green_stream = green.as_ref().map(|green| green.create_stream(0).unwrap());
    for round in 0..4u32 {
        let release = hold(&stream);
        match round {
            0 => exec.launch(&stream).unwrap(),
            1 => context
                .run(|| exec.launch(&StreamHandle::per_thread()))
                .unwrap(),
            2 => exec
                .launch(&StreamHandle::legacy_in(&context).unwrap())
                .unwrap(),
            _ => match &green_stream {
                Some(green_stream) => match exec.launch(green_stream) {
                    Ok(()) => {}
                    Err(error) => {
                        eprintln!("a graph launch on a green context's stream: {error:?}");
                        exec.launch(&stream).unwrap()
                    }
                },
                None => exec.launch(&stream).unwrap(),
            },
        }
        let expected = round + 1;
        let waiter = release_later(release, Duration::from_millis(20));
        let view = pinned.host_view().unwrap();
        assert!(words(&view).iter().all(|&x| x == expected), "round {round}");
        drop(view);
        waiter.join().unwrap();
    }
    // A built graph, its node updated to the pinned buffer after instantiation.
    let scratch = DevicePtrHandle::alloc(&context, 4096).unwrap();
    let built = GraphHandle::create(&context).unwrap();
    let node = built
        .add_kernel_node(
            &[],
            &kernels.fill,
            &LaunchConfig::linear(1024, 64),
            (&scratch, 1, 1024),
        )
        .unwrap();
    let exec = built.instantiate().unwrap();
    exec.set_kernel_node_params(
        node,
        &kernels.fill,
        &LaunchConfig::linear(1024, 64),
        (&pinned, 42, 1024),
    )
    .unwrap();
    let release = hold(&stream);
    exec.launch(&stream).unwrap();
    let waiter = release_later(release, Duration::from_millis(20));
    assert!(words(&pinned.host_view().unwrap()).iter().all(|&x| x == 42));
    waiter.join().unwrap();
    stream.synchronize().unwrap();
    drop((exec, built, graph));
}

// ---------------------------------------------------------------------------------------------
// A7: the per-thread default stream of another thread, and the legacy stream, used on the
// memory (no marker: their contexts are noted), then a view on the main thread.

#[test]
fn a7_per_thread_and_legacy_tokens_across_threads() {
    clean("a7_per_thread_and_legacy_tokens_across_threads", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a7_per_thread_and_legacy_tokens_across_threads() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    for round in 0..3u32 {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                context
                    .run(|| {
                        kernels.fill.launch(
                            &StreamHandle::per_thread(),
                            &LaunchConfig::linear(1024, 64),
                            (&pinned, round + 1, 1024),
                        )
                    })
                    .unwrap();
            });
        });
        assert!(
            words(&pinned.host_view().unwrap())
                .iter()
                .all(|&x| x == round + 1)
        );
        context
            .run(|| pinned.memset_async(round as u8, 4096, &StreamHandle::legacy()))
            .unwrap();
        assert!(
            pinned
                .host_view()
                .unwrap()
                .iter()
                .all(|&b| b == round as u8)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A8: managed memory: prefetch, attach, kernel, prefetch to the host, on different streams
// (ordered), then views; advise while a view is open.

#[test]
fn a8_managed_prefetch_attach_then_views() {
    clean("a8_managed_prefetch_attach_then_views", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a8_managed_prefetch_attach_then_views() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let (a, b) = (non_blocking(&context), non_blocking(&context));
    let managed = DevicePtrHandle::alloc_managed(&context, 4096, Attach::Global).unwrap();
    for round in 0..3u32 {
        managed.prefetch(PoolLocation::Device(0), &a).unwrap();
        managed.attach(&a, Attach::Global).unwrap();
        order_after(&context, &b, &a);
        let release = hold(&b);
        kernels
            .fill
            .launch(
                &b,
                &LaunchConfig::linear(1024, 64),
                (&managed, round + 3, 1024),
            )
            .unwrap();
        managed.prefetch(PoolLocation::Host, &b).unwrap();
        let waiter = release_later(release, Duration::from_millis(20));
        {
            let view = managed.host_view().unwrap();
            managed
                .advise(handles_cuda::memory::Advice::SetReadMostly)
                .unwrap();
            assert!(words(&view).iter().all(|&x| x == round + 3));
        }
        waiter.join().unwrap();
        order_after(&context, &a, &b);
    }
}

// ---------------------------------------------------------------------------------------------
// A9: an AccessGuard of the public `check_accessible_on`, held by another thread and dropped
// there while this thread opens a view (which waits for it); a guard kept across a stream's
// drop.

#[test]
fn a9_public_access_guard_dropped_on_another_thread() {
    clean("a9_public_access_guard_dropped_on_another_thread", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a9_public_access_guard_dropped_on_another_thread() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let stream = non_blocking(&context);
    pinned.memset_async(1, 4096, &stream).unwrap();
    let guard = pinned.check_accessible_on(&stream).unwrap();
    drop(stream);
    let (send, receive) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        let guard: handles_cuda::memory::AccessGuard = receive.recv().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        drop(guard);
    });
    send.send(guard).unwrap();
    assert!(pinned.host_view().unwrap().iter().all(|&b| b == 1));
    holder.join().unwrap();
}

// ---------------------------------------------------------------------------------------------
// A10: a panic inside a capture's closure after it captured work on the memory; work on an
// outer stream inside the closure; then views.

#[test]
fn a10_panics_and_outer_uses_inside_a_capture_closure() {
    clean("a10_panics_and_outer_uses_inside_a_capture_closure", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a10_panics_and_outer_uses_inside_a_capture_closure() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    pinned.memset_async(4, 4096, &stream).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        GraphHandle::capture(&context, CaptureMode::Relaxed, |capture| {
            capture.memset(&pinned, 0, 9, 4096)?;
            panic!("inside the closure");
        })
    }));
    assert!(panicked.is_err());
    let mut outer = Vec::new();
    let made = GraphHandle::capture(&context, CaptureMode::Relaxed, |capture| {
        capture.memset(&pinned, 0, 6, 4096)?;
        // Work on an outer stream from the closure's thread.
        outer.push(format!("{:?}", pinned.memset_async(8, 4096, &stream)));
        let mut bytes = [0u8; 16];
        outer.push(format!("{:?}", pinned.copy_to_host(&mut bytes, &stream)));
        outer.push(format!("{:?}", pinned.copy_from_host(&bytes, &stream)));
        Ok(())
    })
    .unwrap();
    let view = pinned.host_view().unwrap();
    let first = view[0];
    assert!(view.iter().all(|&b| b == first), "outer uses: {outer:?}");
    drop(view);
    let exec = made.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    assert!(pinned.host_view().unwrap().iter().all(|&b| b == 6));
    drop((exec, made));
}

// ---------------------------------------------------------------------------------------------
// A11: a stream of another device's context (2 devices) and of a green context.

#[test]
fn a11_streams_of_other_contexts() {
    clean("a11_streams_of_other_contexts", "2");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a11_streams_of_other_contexts() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let other = ContextHandle::primary(1).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let managed = DevicePtrHandle::alloc_managed(&context, 4096, Attach::Global).unwrap();
    let on_other = non_blocking(&other);
    let green = GreenContextHandle::create(0, 16).unwrap();
    let on_green = green.create_stream(0).unwrap();
    for round in 0..3u32 {
        let release = hold(&on_other);
        let r1 = kernels.fill.launch(
            &on_other,
            &LaunchConfig::linear(1024, 64),
            (&pinned, round + 1, 1024),
        );
        let r2 = managed.memset_async(round as u8 + 1, 4096, &on_other);
        let waiter = release_later(release, Duration::from_millis(20));
        if r1.is_ok() {
            assert!(
                words(&pinned.host_view().unwrap())
                    .iter()
                    .all(|&x| x == round + 1)
            );
        }
        if r2.is_ok() {
            assert!(
                managed
                    .host_view()
                    .unwrap()
                    .iter()
                    .all(|&b| b == round as u8 + 1)
            );
        }
        waiter.join().unwrap();
        let release = hold(&on_green);
        pinned.memset_async(round as u8, 4096, &on_green).unwrap();
        let waiter = release_later(release, Duration::from_millis(20));
        assert!(
            pinned
                .host_view()
                .unwrap()
                .iter()
                .all(|&b| b == round as u8)
        );
        waiter.join().unwrap();
    }
    on_other.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// A12: memory of a host pool (pinned, viewable): a use while a view of it is open must be
// refused (`HostAccessActive`), as it is for `alloc_host` memory.

// Found by this review: a host pool's memory took the remote-pool path of `reach` and never
// entered its host-access gate, so uses went ahead while a view was open and changed its bytes.
#[test]
fn a12_host_pool_memory_refuses_uses_while_a_view_is_open() {
    clean(
        "a12_host_pool_memory_refuses_uses_while_a_view_is_open",
        "1",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a12_host_pool_memory_refuses_uses_while_a_view_is_open() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ..PoolProps::device(0)
    })
    .unwrap();
    pool.set_peer_access(0, true).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
    buffer.memset_async(5, 4096, &stream).unwrap();
    let view = buffer.host_view().unwrap();
    let before = view[0];
    let memset = buffer.memset_async(9, 4096, &stream);
    let launch = kernels.fill.launch(
        &stream,
        &LaunchConfig::linear(1024, 64),
        (&buffer, 0x0707_0707, 1024),
    );
    // With the sim, the work runs at once: a `&[u8]` whose bytes changed under it.
    let after = view[0];
    drop(view);
    stream.synchronize().unwrap();
    assert!(
        matches!(memset, Err(Error::HostAccessActive { .. }))
            && matches!(launch, Err(Error::HostAccessActive { .. })),
        "uses of host-pool memory while a view is open: memset {memset:?}, launch {launch:?}; \
         the shared view read {before} then {after}"
    );
    drop((buffer, pool, stream));
}

// ---------------------------------------------------------------------------------------------
// A13: device memory copied into a managed view (`copy_to_host` with the view's slice as the
// destination) and a managed view's slice copied to the device, then the view changed.

#[test]
fn a13_managed_view_slices_as_host_copy_operands() {
    clean("a13_managed_view_slices_as_host_copy_operands", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a13_managed_view_slices_as_host_copy_operands() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let device = DevicePtrHandle::alloc(&context, 4096).unwrap();
    let managed = DevicePtrHandle::alloc_managed(&context, 4096, Attach::Global).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    device.memset_async(3, 4096, &stream).unwrap();
    {
        let mut view = managed.host_view_mut().unwrap();
        device.copy_to_host(&mut view[..], &stream).unwrap();
        assert!(view.iter().all(|&b| b == 3));
        view.fill(4);
        device.copy_from_host(&view[..], &stream).unwrap();
        view.fill(5);
    }
    {
        let mut view = pinned.host_view_mut().unwrap();
        device.copy_to_host(&mut view[..], &stream).unwrap();
        assert!(view.iter().all(|&b| b == 4));
        view.fill(6);
        managed.copy_from_host(&view[..], &stream).unwrap();
        view.fill(7);
    }
    assert!(managed.host_view().unwrap().iter().all(|&b| b == 6));
}

// ---------------------------------------------------------------------------------------------
// A14: fault injection into the markers' calls: each `cuEventCreate`, `cuEventRecord`,
// `cuEventSynchronize`, `cuStreamWaitEvent` and `cuCtxSynchronize` the program makes is failed
// in turn; every step may fail, but no view may be lent over unfinished work (strict: a
// `data-race` aborts the child).

/// The calls swept, with the status they fail with.
const SWEPT: [&str; 5] = [
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuStreamWaitEvent",
    "cuCtxSynchronize",
];

#[test]
fn a14_failed_marker_calls_never_lend_a_racy_view() {
    let name = "a14_failed_marker_calls_never_lend_a_racy_view";
    let env = [("CUDA_SIM_STRICT", "1"), ("CUDA_SIM_DEVICES", "1")];
    let report = run_scenario(name, &[], &env);
    assert_clean(name, &report);
    let mut runs = 0;
    for call in SWEPT {
        let count = report.calls.get(call).copied().unwrap_or(0);
        for n in 1..=count {
            let faulted = run_scenario(name, &[(call, n, "CUDA_ERROR_UNKNOWN")], &env);
            assert!(
                faulted.violations.is_empty(),
                "{call} #{n} failed: {}",
                simulator::describe_violations(&faulted, 10)
            );
            runs += 1;
        }
    }
    eprintln!("a14: {runs} faulted runs, calls {:?}", report.calls);
}

/// [`order_after`], falling back to a host wait for `earlier` when a call fails (the device-side
/// ordering is the program's, and must hold whatever is injected).
fn try_order_after(context: &ContextHandle, later: &StreamHandle, earlier: &StreamHandle) {
    let ordered = EventHandle::create(context, EventFlags::default()).and_then(|event| {
        event
            .record(earlier)
            .and_then(|()| later.wait_event(&event))
    });
    if ordered.is_err() {
        earlier.synchronize().unwrap();
    }
}

fn read_all(bytes: &[u8]) -> u64 {
    bytes.iter().map(|&b| b as u64).sum()
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a14_failed_marker_calls_never_lend_a_racy_view() {
    in_scenario();
    let Ok(kernels) = TestKernels::load() else {
        return;
    };
    let Ok(context) = ContextHandle::primary(0) else {
        return;
    };
    let Ok(a) = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0) else {
        return;
    };
    let Ok(b) = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0) else {
        return;
    };
    let Ok(pinned) = DevicePtrHandle::alloc_host(&context, 4096) else {
        return;
    };
    let Ok(managed) = DevicePtrHandle::alloc_managed(&context, 4096, Attach::Global) else {
        return;
    };
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        capture.memset(&pinned, 0, 0x5A, 1024)
    })
    .and_then(|graph| graph.instantiate());
    let mut seen = 0u64;
    for round in 0..2u32 {
        // Not held back (see the control below): the work runs at once and its pages are
        // guarded until the host synchronises, so a view lent too early is a data race.
        let waiter: Option<std::thread::JoinHandle<()>> = None;
        let _ = pinned.memset_async(round as u8, 4096, &a);
        let _ = kernels.fill.launch(
            &a,
            &LaunchConfig::linear(512, 64),
            (&pinned.view(0, 2048).unwrap(), round, 512),
        );
        let _ = pinned.copy_to_async(0, &managed, 0, 4096, &a);
        try_order_after(&context, &b, &a);
        if let Ok(exec) = &graph {
            let _ = exec.launch(&b);
        }
        if let Ok(view) = pinned.host_view() {
            seen += read_all(&view);
        }
        if let Ok(mut view) = managed.host_view_mut() {
            seen += read_all(&view);
            view.fill(1);
        }
        if let Some(waiter) = waiter {
            waiter.join().unwrap();
        }
        let _ = managed.memset_async(2, 4096, &b);
        let _ = pinned.view(2048, 2048).unwrap().memset_async(3, 2048, &b);
        try_order_after(&context, &a, &b);
        if let Ok(mut view) = pinned.host_view_mut() {
            seen += read_all(&view);
            view.fill(4);
        }
        if let Ok(view) = managed.host_view() {
            seen += read_all(&view);
        }
    }
    std::hint::black_box(seen);
    let _ = a.synchronize();
    let _ = b.synchronize();
    drop((graph, pinned, managed));
}

// ---------------------------------------------------------------------------------------------
// A15: built graphs: a memset node and a copy node (pinned -> managed) in a child graph, a host
// node holding the parent back; launched on a stream of another device's context and on one
// of the graph's own; views of both buffers after each launch.

#[test]
fn a15_child_graph_copy_and_memset_nodes_on_other_contexts() {
    clean(
        "a15_child_graph_copy_and_memset_nodes_on_other_contexts",
        "2",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a15_child_graph_copy_and_memset_nodes_on_other_contexts() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let other = ContextHandle::primary(1).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let managed = DevicePtrHandle::alloc_managed(&context, 4096, Attach::Global).unwrap();
    let child = GraphHandle::create(&context).unwrap();
    let set = child.add_memset_node(&[], &pinned, 0, 0x42, 4096).unwrap();
    child
        .add_copy_node(&[set], &pinned, 0, &managed, 0, 4096)
        .unwrap();
    let parent = GraphHandle::create(&context).unwrap();
    let gate = std::sync::Arc::new(std::sync::Mutex::new(()));
    let held = gate.clone();
    let host = parent
        .add_host_node(&[], move || {
            drop(held.lock().unwrap());
        })
        .unwrap();
    parent.add_child_graph_node(&[host], &child).unwrap();
    drop(child);
    let exec = parent.instantiate().unwrap();
    let streams = [non_blocking(&other), non_blocking(&context)];
    for (round, stream) in streams.iter().enumerate() {
        let closed = gate.lock().unwrap();
        let launched = exec.launch(stream);
        let opener = {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
            })
        };
        opener.join().unwrap();
        drop(closed);
        if let Err(error) = launched {
            eprintln!("round {round}: launch refused: {error:?}");
            continue;
        }
        assert!(pinned.host_view().unwrap().iter().all(|&b| b == 0x42));
        {
            let mut view = managed.host_view_mut().unwrap();
            assert!(view.iter().all(|&b| b == 0x42));
            view.fill(0);
        }
        pinned.host_view_mut().unwrap().fill(0);
    }
    for stream in &streams {
        stream.synchronize().unwrap();
    }
    drop((exec, parent));
}

// ---------------------------------------------------------------------------------------------
// A16: one pinned buffer used once on each of many streams (each dropped afterwards), with a
// held stream among them, then a view and the host free.

#[test]
fn a16_many_short_lived_streams_then_view_and_free() {
    let report = clean("a16_many_short_lived_streams_then_view_and_free", "1");
    eprintln!(
        "a16: cuEventSynchronize {:?}, cuEventCreate {:?}, cuCtxSynchronize {:?}",
        report.calls.get("cuEventSynchronize"),
        report.calls.get("cuEventCreate"),
        report.calls.get("cuCtxSynchronize")
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a16_many_short_lived_streams_then_view_and_free() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let pinned = DevicePtrHandle::alloc_host(&context, 64 * 64).unwrap();
    let mut waiter = None;
    for i in 0..64usize {
        let stream = non_blocking(&context);
        if i == 17 {
            let release = hold(&stream);
            waiter = Some(release_later(release, Duration::from_millis(40)));
        }
        pinned
            .view(i * 64, 64)
            .unwrap()
            .memset_async(i as u8, 64, &stream)
            .unwrap();
    }
    {
        let view = pinned.host_view().unwrap();
        for (i, chunk) in view.chunks(64).enumerate() {
            assert!(chunk.iter().all(|&b| b == i as u8));
        }
    }
    waiter.unwrap().join().unwrap();
    let stream = non_blocking(&context);
    let release = hold(&stream);
    pinned.memset_async(1, 64 * 64, &stream).unwrap();
    let waiter = release_later(release, Duration::from_millis(40));
    drop(pinned);
    waiter.join().unwrap();
}

// A17: the stream-ordered free's twin of A16. Device memory is used on a short-lived stream
// whose work is held back, the stream is dropped, and the next stream (the same address on
// driver 580) uses the memory too: the free on home must still wait for the first stream.

#[test]
fn a17_free_after_uses_on_a_dropped_stream_and_its_address_successor() {
    clean(
        "a17_free_after_uses_on_a_dropped_stream_and_its_address_successor",
        "1",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a17_free_after_uses_on_a_dropped_stream_and_its_address_successor() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let home = non_blocking(&context);
    let memory = DevicePtrHandle::alloc_async(1 << 16, &home).unwrap();
    memory.memset_async(0, 1 << 16, &home).unwrap();
    home.synchronize().unwrap();
    let first = non_blocking(&context);
    let first_raw = first.as_cu() as usize;
    let release = hold(&first);
    memory.memset_async(7, 1 << 16, &first).unwrap();
    drop(first);
    let second = non_blocking(&context);
    eprintln!(
        "a17: the second stream {} the first one's address",
        if second.as_cu() as usize == first_raw {
            "took"
        } else {
            "did not take"
        }
    );
    memory.memset_async(9, 1 << 10, &second).unwrap();
    second.synchronize().unwrap();
    let waiter = release_later(release, Duration::from_millis(40));
    // The free waits for the held memset on the first stream, not only for the second's.
    drop(memory);
    waiter.join().unwrap();
    home.synchronize().unwrap();
}

// A18: a recycled stream that used pinned and stream-ordered memory is taken back by its
// recycler (the memory's markers keep no reference to an owned stream), and the memory still
// waits for it.

#[test]
fn a18_a_stream_that_used_memory_is_still_recycled() {
    clean("a18_a_stream_that_used_memory_is_still_recycled", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_a18_a_stream_that_used_memory_is_still_recycled() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let recycler = StreamRecycler::new(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    let home = non_blocking(&context);
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let device = DevicePtrHandle::alloc_async(4096, &home).unwrap();
    home.synchronize().unwrap();
    let stream = recycler.acquire().unwrap();
    let raw = stream.as_cu() as usize;
    pinned.memset_async(3, 4096, &stream).unwrap();
    device.memset_async(4, 4096, &stream).unwrap();
    drop(stream);
    let again = recycler.acquire().unwrap();
    assert_eq!(
        again.as_cu() as usize,
        raw,
        "the recycler made a new stream: the used one was not taken back"
    );
    assert!(pinned.host_view().unwrap().iter().all(|&b| b == 3));
    drop(device);
    again.synchronize().unwrap();
    home.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Control: the checker sees a host read of pinned memory that pending work writes (through the
// raw address, bypassing the views), so the clean reports above are not vacuous.

#[test]
fn control_a_raw_read_of_pending_work_is_a_data_race() {
    let name = "control_a_raw_read_of_pending_work_is_a_data_race";
    let report = run_scenario(name, &[], &[("CUDA_SIM_DEVICES", "1")]);
    assert!(
        report.violations.iter().any(|v| v.kind == "data-race"),
        "{}",
        simulator::describe_violations(&report, 5)
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_control_a_raw_read_of_pending_work_is_a_data_race() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    // Not held back: the simulator runs the memset at once and guards its pages until the host
    // synchronises (work held behind a host function is not seen until it runs, so the
    // programs above also check the bytes their views read).
    pinned.memset_async(1, 4096, &stream).unwrap();
    // SAFETY: none; a deliberate race for the control (the bytes are plain `u8`).
    let byte = unsafe { std::ptr::read_volatile(pinned.as_cu() as usize as *const u8) };
    std::hint::black_box(byte);
    stream.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// S1–S3: stream order spares waits (`exec/stream_progress.rs`). A view of memory whose last use
// on a stream came before an event of that stream the host saw complete asks the driver
// nothing; one with work queued after that event still waits for it.

/// How many `cuEventSynchronize` and `cuEventQuery` calls a scenario made.
fn waits(report: &Report) -> u64 {
    ["cuEventSynchronize", "cuEventQuery"]
        .iter()
        .map(|name| report.calls.get(*name).copied().unwrap_or(0))
        .sum()
}

#[test]
fn s1_a_view_after_a_later_event_seen_complete_asks_the_driver_nothing() {
    let skipped = clean("s1_view_after_a_later_event", "1");
    let asked = clean("s1_view_without_a_later_event", "1");
    // The same work, then two views and the two frees, which wait for the same markers. The
    // first program synchronizes the event recorded after the copies: nothing else asks. The
    // second synchronizes the stream, which proves nothing to events: the first view asks for
    // the later marker (which then speaks for the earlier one) and so does its free (a marker
    // seen complete does not speak for itself). Without the stamps the first makes 5.
    assert_eq!(
        waits(&skipped),
        1,
        "only the event after the copies is waited for: {:?}",
        skipped.calls
    );
    assert_eq!(waits(&asked), 2, "{:?}", asked.calls);
}

/// Two pinned staging buffers, one copied to the device and back into the other on a stream,
/// an event recorded after the copies, `wait` (given the event and the stream), then a view of
/// each buffer: the views' markers are recorded on the stream before the event.
fn staged_then_viewed(wait: impl FnOnce(&EventHandle, &StreamHandle)) {
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let pinned_in = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let pinned_out = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let device = DevicePtrHandle::alloc(&context, 4096).unwrap();
    pinned_in.host_view_mut().unwrap().fill(7);
    pinned_in
        .copy_to_async(0, &device, 0, 4096, &stream)
        .unwrap();
    device
        .copy_to_async(0, &pinned_out, 0, 4096, &stream)
        .unwrap();
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    event.record(&stream).unwrap();
    wait(&event, &stream);
    assert!(pinned_out.host_view().unwrap().iter().all(|&b| b == 7));
    pinned_in.host_view_mut().unwrap().fill(8);
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_s1_view_after_a_later_event() {
    in_scenario();
    staged_then_viewed(|event, _| event.synchronize().unwrap());
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_s1_view_without_a_later_event() {
    in_scenario();
    staged_then_viewed(|_, stream| stream.synchronize().unwrap());
}

#[test]
fn s2_work_queued_after_the_event_seen_complete_is_still_waited_for() {
    clean("s2_work_after_the_event", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_s2_work_after_the_event() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let other = non_blocking(&context);
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let device = DevicePtrHandle::alloc(&context, 4096).unwrap();
    device.memset_async(5, 4096, &stream).unwrap();
    device.copy_to_async(0, &pinned, 0, 4096, &stream).unwrap();
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    // Held back, then a copy into the buffer on the same stream (its marker is recorded again,
    // after the event), and one on another stream: the view must wait for both.
    let release = hold(&stream);
    device.memset_async(6, 4096, &stream).unwrap();
    device.copy_to_async(0, &pinned, 0, 2048, &stream).unwrap();
    let release_other = hold(&other);
    order_after(&context, &other, &stream);
    device
        .copy_to_async(2048, &pinned, 2048, 2048, &other)
        .unwrap();
    let waiters = [
        release_later(release, Duration::from_millis(30)),
        release_later(release_other, Duration::from_millis(30)),
    ];
    // The event is seen complete again: it still proves nothing of the later records.
    event.synchronize().unwrap();
    assert!(event.query().unwrap());
    assert!(pinned.host_view().unwrap().iter().all(|&b| b == 6));
    for waiter in waiters {
        waiter.join().unwrap();
    }
}

#[test]
fn s3_an_event_recorded_again_elsewhere_proves_nothing_of_its_first_stream() {
    clean("s3_event_recorded_again", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_s3_event_recorded_again() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let stream = non_blocking(&context);
    let other = non_blocking(&context);
    let pinned = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let device = DevicePtrHandle::alloc(&context, 4096).unwrap();
    device.memset_async(9, 4096, &stream).unwrap();
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    // Held back: the buffer's marker on `stream` follows the event's first record.
    let release = hold(&stream);
    device.copy_to_async(0, &pinned, 0, 4096, &stream).unwrap();
    // The event recorded again on an idle stream, and seen complete there: it says nothing of
    // `stream`, so the view still waits for the held copy.
    event.record(&other).unwrap();
    event.synchronize().unwrap();
    let waiter = release_later(release, Duration::from_millis(30));
    assert!(pinned.host_view().unwrap().iter().all(|&b| b == 9));
    waiter.join().unwrap();
}

#[test]
fn s4_a_programmatic_event_recorded_elsewhere_proves_nothing_of_its_first_stream() {
    clean("s4_programmatic_event_elsewhere", "1");
    clean("s4_record_node_elsewhere", "1");
}

/// A held copy into pinned memory on `stream`, then an event recorded there after it: the
/// buffer's marker is stamped before the event's record. The stream is released 200 ms later
/// from another thread (so that a failure in between cannot leave it held). Returns the
/// buffer, the event and the releasing thread.
fn held_copy_then_event(
    context: &ContextHandle,
    stream: &StreamHandle,
) -> (DevicePtrHandle, EventHandle, std::thread::JoinHandle<()>) {
    let pinned = DevicePtrHandle::alloc_host(context, 4096).unwrap();
    let device = DevicePtrHandle::alloc(context, 4096).unwrap();
    device.memset_async(3, 4096, stream).unwrap();
    let release = hold(stream);
    device.copy_to_async(0, &pinned, 0, 4096, stream).unwrap();
    let event = EventHandle::create(context, EventFlags::default()).unwrap();
    event.record(stream).unwrap();
    (
        pinned,
        event,
        release_later(release, Duration::from_millis(200)),
    )
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_s4_programmatic_event_elsewhere() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let (stream, other) = (non_blocking(&context), non_blocking(&context));
    let (pinned, event, waiter) = held_copy_then_event(&context, &stream);
    // The launch on the idle stream records the event again (the driver's record, not
    // `EventHandle::record`): a wait for it then proves nothing of `stream`.
    let scratch = DevicePtrHandle::alloc(&context, 1024).unwrap();
    let options = handles_cuda::code::LaunchOptions {
        programmatic_event: Some(handles_cuda::code::ProgrammaticEvent {
            event: event.clone(),
            trigger_at_block_start: false,
        }),
        ..Default::default()
    };
    kernels
        .fill
        .launch_ex(
            &other,
            &LaunchConfig::linear(256, 64),
            &options,
            (&scratch, 1, 256),
        )
        .unwrap();
    // Returns once the record on `other` completed, while `stream` is still held.
    event.synchronize().unwrap();
    assert!(pinned.host_view().unwrap().iter().all(|&b| b == 3));
    waiter.join().unwrap();
    other.synchronize().unwrap();
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_s4_record_node_elsewhere() {
    in_scenario();
    let context = ContextHandle::primary(0).unwrap();
    let (stream, other) = (non_blocking(&context), non_blocking(&context));
    let (pinned, event, waiter) = held_copy_then_event(&context, &stream);
    // A graph's record node records the event on the idle stream: the same.
    let graph = GraphHandle::create(&context).unwrap();
    graph.add_event_record_node(&[], &event).unwrap();
    graph.instantiate().unwrap().launch(&other).unwrap();
    // Returns once the record on `other` completed, while `stream` is still held.
    event.synchronize().unwrap();
    assert!(pinned.host_view().unwrap().iter().all(|&b| b == 3));
    waiter.join().unwrap();
    other.synchronize().unwrap();
}
