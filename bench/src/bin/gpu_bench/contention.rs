//! Whether a thread that polls a pending event with `cuEventQuery` (as the completion waiter
//! does for a watch's first 200 µs) slows other threads' driver calls, and by how much a pause
//! between its queries gives them back; what a completed event's query and synchronisation
//! cost; and what 1,000 notifier-like streams made while their event is pending cost
//! (`gpu_bench contention`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use handles_cuda::exec::EventFlags;
use handles_cuda::{ContextHandle, DevicePtrHandle, EventHandle, StreamFlags, StreamHandle};

use super::ok;

/// The queueing thread's work per completion in the tokio test, on raw calls: a 4 KiB memset,
/// an event made, recorded behind it and destroyed. Nanoseconds per round.
fn queue(rounds: usize, buffer: &DevicePtrHandle, working: &StreamHandle) -> f64 {
    let start = Instant::now();
    for _ in 0..rounds {
        let mut event = std::ptr::null_mut();
        // SAFETY: the context is current; valid out-pointer; the buffer holds 4 KiB and is
        // alive, as is the stream; the event is this loop's own, destroyed once.
        unsafe {
            ok(sys::cuMemsetD8Async(
                buffer.as_cu(),
                1,
                4096,
                working.as_cu(),
            ));
            ok(sys::cuEventCreate(&mut event, 2));
            ok(sys::cuEventRecord(event, working.as_cu()));
            ok(sys::cuEventDestroy_v2(event));
        }
    }
    start.elapsed().as_nanos() as f64 / rounds as f64
}

/// Polls `pending` until `stop`, pausing `gap` (spinning on the clock, no driver call) after
/// each query; returns the number of queries.
fn poll(pending: &EventHandle, gap: Duration, stop: &AtomicBool) -> u64 {
    let mut queries = 0u64;
    while !stop.load(Ordering::Acquire) {
        // SAFETY: the event is alive until the caller's scope ends.
        let status = unsafe { sys::cuEventQuery(pending.as_cu()) };
        assert_eq!(status, sys::CUresult::CUDA_ERROR_NOT_READY);
        queries += 1;
        if !gap.is_zero() {
            let until = Instant::now() + gap;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }
    queries
}

/// Nanoseconds per call of `call`, over `rounds` calls.
fn per_call(rounds: usize, mut call: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..rounds {
        call();
    }
    start.elapsed().as_nanos() as f64 / rounds as f64
}

pub(crate) fn report(context: &ContextHandle) {
    let held = StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap();
    let working = StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap();
    let buffer = DevicePtrHandle::alloc(context, 4096).unwrap();
    // The gate: `held` waits on the device for a pinned word to become 1 (a stream memory
    // operation, so no host function occupies the driver's host-function thread meanwhile).
    let mut word: *mut std::ffi::c_void = std::ptr::null_mut();
    let mut word_on_device: sys::CUdeviceptr = 0;
    // SAFETY: the context is current; valid out-pointers; the word is 4 bytes of pinned memory
    // mapped for the device, written 0 before the wait is queued and freed after `held` is
    // synchronised.
    unsafe {
        ok(sys::cuMemHostAlloc(
            &mut word, 4, 2, /* CU_MEMHOSTALLOC_DEVICEMAP */
        ));
        std::ptr::write_volatile(word.cast::<u32>(), 0);
        ok(sys::cuMemHostGetDevicePointer_v2(
            &mut word_on_device,
            word,
            0,
        ));
        ok(sys::cuStreamWaitValue32_v2(
            held.as_cu(),
            word_on_device,
            1,
            0, /* CU_STREAM_WAIT_VALUE_GEQ */
        ));
    }
    let pending = EventHandle::create(context, EventFlags::default()).unwrap();
    pending.record(&held).unwrap();
    let stop = AtomicBool::new(false);
    let gaps = [0u64, 500, 2_000, 8_000, 32_000];
    for round in 0..3 {
        let alone = queue(2000, &buffer, &working);
        let mut line =
            format!("contention round {round}: memset+create+record+destroy {alone:.0} ns alone");
        for gap in gaps {
            let queries = AtomicU64::new(0);
            let polled = std::thread::scope(|scope| {
                let poller = scope.spawn(|| {
                    queries.store(
                        poll(&pending, Duration::from_nanos(gap), &stop),
                        Ordering::Relaxed,
                    )
                });
                std::thread::sleep(Duration::from_millis(1));
                let polled = queue(2000, &buffer, &working);
                stop.store(true, Ordering::Release);
                poller.join().unwrap();
                polled
            });
            stop.store(false, Ordering::Release);
            line += &format!(
                "; {polled:.0} ns while another thread polls with {gap} ns between queries \
                 ({} queries)",
                queries.load(Ordering::Relaxed)
            );
        }
        println!("{line}");
    }
    // A pending event's query, from one thread alone.
    // SAFETY: the event is alive.
    let query_pending = per_call(20_000, || unsafe {
        assert_eq!(
            sys::cuEventQuery(pending.as_cu()),
            sys::CUresult::CUDA_ERROR_NOT_READY
        );
    });
    // A completed event: what a host view's wait for a marker costs when the marker's work is
    // done, by query and by synchronisation.
    let done = EventHandle::create(context, EventFlags::default()).unwrap();
    done.record(&working).unwrap();
    done.synchronize().unwrap();
    // SAFETY: the event is alive.
    let query_done = per_call(20_000, || unsafe { ok(sys::cuEventQuery(done.as_cu())) });
    // SAFETY: the event is alive.
    let synchronize_done = per_call(20_000, || unsafe {
        ok(sys::cuEventSynchronize(done.as_cu()))
    });
    println!(
        "one call: cuEventQuery {query_pending:.0} ns on a pending event, {query_done:.0} ns on \
         a completed one; cuEventSynchronize {synchronize_done:.0} ns on a completed one"
    );
    // What a wave of pending completions asks of the driver: (a) work queued behind the
    // gate on one stream (a memset, an event made and recorded, kept), and (b) a stream per
    // completion that waits for the pending event and then runs a host function. Each runs on
    // a thread of its own, watched: if it has not finished within two seconds, the steps done
    // and the call it is in are printed, and the gate opens.
    extern "C" fn nothing(_: *mut std::ffi::c_void) {}
    let gated = |label: &str, count: usize, step: &(dyn Fn(&AtomicUsize) + Sync)| {
        let done = AtomicUsize::new(0);
        let call = AtomicUsize::new(0);
        let start = Instant::now();
        std::thread::scope(|scope| {
            let worker = scope.spawn(|| {
                // SAFETY: the context is alive while `context` is.
                unsafe { ok(sys::cuCtxSetCurrent(context.as_cu())) };
                for _ in 0..count {
                    step(&call);
                    done.fetch_add(1, Ordering::Release);
                }
            });
            while !worker.is_finished() && start.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let made = start.elapsed();
            if worker.is_finished() {
                println!(
                    "{label}: {count} in {:.0} ns each while the gate held",
                    made.as_nanos() as f64 / count as f64
                );
            } else {
                println!(
                    "{label}: BLOCKED after {} of {count} (in call {} of the step) until the \
                     gate opened",
                    done.load(Ordering::Acquire),
                    call.load(Ordering::Acquire)
                );
            }
            // SAFETY: the word is alive until freed below; the device reads it.
            unsafe { std::ptr::write_volatile(word.cast::<u32>(), 1) };
            worker.join().unwrap();
        });
        held.synchronize().unwrap();
        // The gate closes again for the next probe.
        // SAFETY: as above; `held` has passed its wait, and a new one is queued.
        unsafe {
            std::ptr::write_volatile(word.cast::<u32>(), 0);
            ok(sys::cuStreamWaitValue32_v2(
                held.as_cu(),
                word_on_device,
                1,
                0,
            ));
        }
        pending.record(&held).unwrap();
        start.elapsed()
    };
    let events = std::sync::Mutex::new(Vec::new());
    gated(
        "memset+event create+record on the gated stream",
        3000,
        &|call| {
            let mut event = std::ptr::null_mut();
            // SAFETY: the context is current on the thread (set above); valid out-pointer; the
            // buffer and the stream are alive; the event is destroyed after the probe.
            unsafe {
                call.store(0, Ordering::Release);
                ok(sys::cuMemsetD8Async(buffer.as_cu(), 1, 4096, held.as_cu()));
                call.store(1, Ordering::Release);
                ok(sys::cuEventCreate(&mut event, 2));
                call.store(2, Ordering::Release);
                ok(sys::cuEventRecord(event, held.as_cu()));
            }
            events.lock().unwrap().push(event as usize);
        },
    );
    for event in events.into_inner().unwrap() {
        // SAFETY: each event made above, destroyed once.
        unsafe { ok(sys::cuEventDestroy_v2(event as sys::CUevent)) };
    }
    let streams = std::sync::Mutex::new(Vec::new());
    gated(
        "a stream, a wait for the pending event and a host function",
        2000,
        &|call| {
            let mut raw = std::ptr::null_mut();
            // SAFETY: the context is current; valid out-pointer; the stream and the event are
            // alive, and the host function takes no data.
            unsafe {
                call.store(0, Ordering::Release);
                ok(sys::cuStreamCreate(&mut raw, 1));
                call.store(1, Ordering::Release);
                ok(sys::cuStreamWaitEvent(raw, pending.as_cu(), 0));
                call.store(2, Ordering::Release);
                ok(sys::cuLaunchHostFunc(
                    raw,
                    Some(nothing),
                    std::ptr::null_mut(),
                ));
            }
            streams.lock().unwrap().push(raw as usize);
        },
    );
    let start = Instant::now();
    let streams = streams.into_inner().unwrap();
    let count = streams.len();
    for raw in streams {
        // SAFETY: the streams made above, each destroyed once.
        unsafe {
            ok(sys::cuStreamSynchronize(raw as sys::CUstream));
            ok(sys::cuStreamDestroy_v2(raw as sys::CUstream));
        }
    }
    println!(
        "{:.0} ns each to drain and destroy the streams",
        start.elapsed().as_nanos() as f64 / count as f64
    );
    // SAFETY: the gate's last wait is released first; nothing reads the word afterwards.
    unsafe {
        std::ptr::write_volatile(word.cast::<u32>(), 1);
        held.synchronize().unwrap();
        ok(sys::cuMemFreeHost(word));
    }
}
