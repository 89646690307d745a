//! A soak: mixed create/drop of every handle kind across 8 threads and 4 streams for a minute
//! (`HANDLES_SOAK_SECS` overrides), then driver free memory and live counts must return to
//! their starting figures and no deleter may have failed. Needs a CUDA GPU.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use handles_cuda::{
    ContextHandle, DevicePtrHandle, EventFlags, EventHandle, MemoryPoolHandle, PoolProps,
    StreamFlags, StreamHandle,
};

fn live() -> [usize; 5] {
    [
        ContextHandle::live_count().unwrap(),
        StreamHandle::live_count().unwrap(),
        EventHandle::live_count().unwrap(),
        MemoryPoolHandle::live_count().unwrap(),
        DevicePtrHandle::live_count().unwrap(),
    ]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn soak_mixed_create_drop_eight_threads_four_streams() {
    let seconds: u64 = std::env::var("HANDLES_SOAK_SECS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(60);
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = failures.clone();
    handles_core::set_report_hook(move |failure| {
        sink.lock().unwrap().push(format!("{} {:#x}: {}", failure.type_name, failure.raw, failure.error));
    });
    let start_live = live();
    let context = ContextHandle::primary(0).unwrap();
    context.synchronize().unwrap();
    let (free_before, _) = context.mem_get_info().unwrap();
    let operations = AtomicU64::new(0);
    {
        let streams: Vec<StreamHandle> = (0..4)
            .map(|_| StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap())
            .collect();
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(seconds);
        std::thread::scope(|scope| {
            for thread in 0..8usize {
                let (streams, pool, operations) = (&streams, &pool, &operations);
                scope.spawn(move || {
                    let context = ContextHandle::primary(0).unwrap();
                    let mut held: Vec<DevicePtrHandle> = Vec::new();
                    let mut step = thread;
                    while Instant::now() < deadline {
                        step = step.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let stream = &streams[(step >> 33) % 4];
                        match (step >> 40) % 8 {
                            0..=2 => {
                                let size = 256 << ((step >> 20) % 12);
                                let buffer = DevicePtrHandle::alloc_from_pool(pool, size, stream).unwrap();
                                buffer.memset_async(thread as u8, size, stream).unwrap();
                                held.push(buffer);
                            }
                            3 => {
                                if let Some(buffer) = held.pop() {
                                    buffer.set_deallocation_stream(&streams[(step >> 50) % 4]).unwrap();
                                }
                            }
                            4 => {
                                let event = EventHandle::create(&context, EventFlags::default()).unwrap();
                                event.record(stream).unwrap();
                            }
                            5 => drop(ContextHandle::primary(0).unwrap()),
                            6 => {
                                if step % 64 == 0 {
                                    let own = StreamHandle::create(&context, StreamFlags::default(), 0).unwrap();
                                    let buffer = DevicePtrHandle::alloc_async(4096, &own).unwrap();
                                    drop(buffer);
                                    own.synchronize().unwrap();
                                }
                            }
                            _ => {
                                if held.len() > 32 {
                                    held.drain(..16);
                                }
                            }
                        }
                        operations.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(held);
                    handles_cuda::clear_primary_cache();
                });
            }
        });
        for stream in &streams {
            stream.synchronize().unwrap();
        }
    }
    context.synchronize().unwrap();
    let (free_after, _) = context.mem_get_info().unwrap();
    drop(context);
    handles_cuda::clear_primary_cache();
    handles_core::reset_report_hook();
    let end_live = live();
    println!(
        "soak: {seconds} s, {} operations, free memory {free_before} -> {free_after} bytes, live counts {start_live:?} -> {end_live:?}, deleter failures {}",
        operations.load(Ordering::Relaxed),
        failures.lock().unwrap().len()
    );
    assert!(failures.lock().unwrap().is_empty(), "{:?}", failures.lock().unwrap());
    assert_eq!(end_live, start_live, "live counts returned");
    assert!(free_after + (2 << 20) >= free_before, "device memory leaked");
}
