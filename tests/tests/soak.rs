//! A soak: mixed create/drop of every handle kind, kernel launches and graph launches across 8
//! threads and 4 streams for a minute
//! (`HANDLES_SOAK_SECS` overrides), then driver free memory and live counts must return to
//! their starting figures and no deleter may have failed. Needs a CUDA GPU.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use handles_cuda::{
    ContextHandle, DevicePtrHandle, EventHandle, LaunchConfig, MemoryPoolHandle, PoolProps,
    StreamFlags, StreamHandle,
    exec::EventFlags,
    graph::{CaptureMode, GraphHandle},
};
use handles_tests::kernels::TestKernels;
use handles_tests::{Failures, cuda_live_counts};

mod simulator;

/// Free device memory once the driver has settled: work drained and the device's default
/// pool (used by `alloc_async`) trimmed.
fn settled_free_memory(context: &ContextHandle) -> usize {
    context.synchronize().unwrap();
    MemoryPoolHandle::device_current(0)
        .unwrap()
        .trim_to(0)
        .unwrap();
    context.mem_get_info().unwrap().0
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn soak_mixed_create_drop_eight_threads_four_streams() {
    let seconds: u64 = std::env::var("HANDLES_SOAK_SECS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(60);
    // A short first run lets the driver make its lazy per-thread and per-stream allocations,
    // so the measured run starts from a settled figure.
    let warm_up = run_mixed(1);
    println!("soak warm-up: {warm_up} operations");
    let (operations, free_before, free_after, start_live, end_live, failures) = {
        let context = ContextHandle::primary(0).unwrap();
        let free_before = settled_free_memory(&context);
        let start_live = cuda_live_counts();
        let watch = Failures::watch();
        let operations = run_mixed(seconds);
        let failures = watch.seen();
        drop(watch);
        let free_after = settled_free_memory(&context);
        let end_live = cuda_live_counts();
        (
            operations,
            free_before,
            free_after,
            start_live,
            end_live,
            failures,
        )
    };
    println!(
        "soak: {seconds} s, {operations} operations, free memory {free_before} -> {free_after} bytes, live counts {start_live:?} -> {end_live:?}, deleter failures {}",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(end_live, start_live, "live counts returned");
    assert!(
        free_after + (2 << 20) >= free_before,
        "device memory leaked"
    );
}

/// Runs the mixed workload for `seconds` and returns the number of operations.
fn run_mixed(seconds: u64) -> u64 {
    let context = ContextHandle::primary(0).unwrap();
    let operations = AtomicU64::new(0);
    {
        let streams: Vec<StreamHandle> = (0..4)
            .map(|_| StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap())
            .collect();
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let kernels = TestKernels::load().unwrap();
        // One executable graph, launched from every thread on every stream: the driver orders
        // its launches, and each launch reports the counter as used on its stream.
        let counter = DevicePtrHandle::alloc_from_pool(&pool, 256 * 4, &streams[0]).unwrap();
        counter.memset_async(0, 256 * 4, &streams[0]).unwrap();
        // The launches below come from every stream: the counter's bytes are ready first.
        streams[0].synchronize().unwrap();
        let graph = GraphHandle::capture(&context, CaptureMode::Relaxed, |capture| {
            capture.launch(
                &kernels.add_one,
                &LaunchConfig::linear(256, 256),
                (&counter, 256),
            )
        })
        .unwrap();
        let exec = graph.instantiate().unwrap();
        drop((graph, counter));
        let deadline = Instant::now() + Duration::from_secs(seconds);
        std::thread::scope(|scope| {
            for thread in 0..8usize {
                let (streams, pool, operations) = (&streams, &pool, &operations);
                let (kernels, exec) = (&kernels, &exec);
                scope.spawn(move || {
                    let context = ContextHandle::primary(0).unwrap();
                    // Each buffer with the stream that last wrote it.
                    let mut held: Vec<(DevicePtrHandle, usize)> = Vec::new();
                    let mut step = thread;
                    while Instant::now() < deadline {
                        step = step
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let on = (step >> 33) % 4;
                        let stream = &streams[on];
                        match (step >> 40) % 10 {
                            0..=2 => {
                                let size = 256 << ((step >> 20) % 12);
                                let buffer =
                                    DevicePtrHandle::alloc_from_pool(pool, size, stream).unwrap();
                                buffer.memset_async(thread as u8, size, stream).unwrap();
                                held.push((buffer, on));
                            }
                            3 => {
                                if let Some((buffer, _)) = held.pop() {
                                    buffer
                                        .set_deallocation_stream(&streams[(step >> 50) % 4])
                                        .unwrap();
                                }
                            }
                            4 => {
                                let event =
                                    EventHandle::create(&context, EventFlags::default()).unwrap();
                                event.record(stream).unwrap();
                            }
                            5 => drop(ContextHandle::primary(0).unwrap()),
                            6 => {
                                if step % 64 == 0 {
                                    let own =
                                        StreamHandle::create(&context, StreamFlags::default(), 0)
                                            .unwrap();
                                    let buffer = DevicePtrHandle::alloc_async(4096, &own).unwrap();
                                    drop(buffer);
                                    own.synchronize().unwrap();
                                }
                            }
                            7 => {
                                // A kernel over a buffer whose free may be on another stream.
                                // Its bytes are ordered by an event, as the caller's to order.
                                if let Some((buffer, last)) = held.last_mut() {
                                    if *last != on {
                                        let written =
                                            EventHandle::create(&context, EventFlags::default())
                                                .unwrap();
                                        written.record(&streams[*last]).unwrap();
                                        stream.wait_event(&written).unwrap();
                                        *last = on;
                                    }
                                    let n = (buffer.size() / 4) as u32;
                                    let config = LaunchConfig::linear(n, 128);
                                    kernels
                                        .fill
                                        .launch(stream, &config, (&*buffer, step as u32, n))
                                        .unwrap();
                                }
                            }
                            8 => exec.launch(stream).unwrap(),
                            _ => {
                                if held.len() > 32 {
                                    held.drain(..16);
                                }
                            }
                        }
                        operations.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(held);
                    handles_cuda::exec::clear_primary_cache();
                });
            }
        });
        for stream in &streams {
            stream.synchronize().unwrap();
        }
    }
    operations.load(Ordering::Relaxed)
}

/// Runs the soak on the simulated driver (cuda-sim) in a child process, for 3 seconds
/// (`HANDLES_SOAK_SECS`) so that CI stays fast. Any violation fails it: the checker sees
/// unordered frees that a real GPU run only shows when a race goes badly.
#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "soak",
        filters: &[],
        skips: &[],
        not_simulated: &[],
        devices: 1,
        env: &[("HANDLES_SOAK_SECS", "3")],
    }
    .run();
}
