//! Review of the pool-destruction markers: a pool is destroyed on the disposal thread only once
//! markers after its memory's frees completed; a free on a default-stream token is marked as it
//! is queued; remote uses are not waited for; noted streams are pruned. Each test tries to make the pool go while a free of its memory is still queued
//! (held back behind a host function), to break a capture, to leak, or to hang.
//! `on_the_simulator` runs them on the simulated driver (2 devices).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use handles_cuda::graph::{CaptureMode, GraphHandle};
use handles_cuda::memory::PoolLocation;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
};
use handles_tests::{Failures, Gate, raw_pool_answers, serial, stream};

mod simulator;

fn live_streams() -> usize {
    StreamHandle::live_count().expect("live-count")
}

/// The pools' destruction must not have finished, and each raw pool must still answer.
fn assert_pending(raws: &[sys::CUmemoryPool], what: &str) {
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !handles_cuda::exec::flush_disposals(Duration::from_millis(50)),
        "{what}: the pool's destruction finished while a free of its memory was still queued"
    );
    for &raw in raws {
        assert!(
            raw_pool_answers(raw),
            "{what}: the pool is gone while its free is queued"
        );
    }
}

fn assert_destroyed(what: &str) {
    assert!(
        handles_cuda::exec::flush_disposals(Duration::from_secs(10)),
        "{what}: the pool was not destroyed after its frees ran"
    );
}

fn blocking(context: &ContextHandle) -> StreamHandle {
    StreamHandle::create(
        context,
        StreamFlags {
            non_blocking: false,
        },
        0,
    )
    .unwrap()
}

/// Frees queued on the per-thread streams of several threads (threads that have ended since),
/// each held back: the pool waits for every one (the legacy marker follows them all).
#[test]
#[ignore = "needs a CUDA GPU"]
fn per_thread_frees_of_several_threads_all_hold_the_pool() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let mut gates: Vec<Gate> = (0..4)
        .map(|_| {
            let (pool, context) = (pool.clone(), context.clone());
            std::thread::spawn(move || {
                context
                    .run(|| {
                        let per_thread = StreamHandle::per_thread();
                        let gate = Gate::hold(&per_thread);
                        drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &per_thread)?);
                        Ok::<_, handles_cuda::Error>(gate)
                    })
                    .unwrap()
            })
            .join()
            .unwrap()
        })
        .collect();
    drop(pool);
    while gates.len() > 1 {
        assert_pending(&[raw], &format!("{} per-thread streams held", gates.len()));
        drop(gates.remove(0));
    }
    assert_pending(&[raw], "the last per-thread stream held");
    drop(gates);
    assert_destroyed("per-thread frees");
    failures.assert_none();
}

/// The free moved to another stream with `set_deallocation_stream`, that stream held back and
/// dropped: the pool waits for the free there.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_free_moved_to_a_held_stream_holds_the_pool() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let before = live_streams();
    let (first, second) = (stream(&context), stream(&context));
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &first).unwrap();
    memory.memset_async(1, 256, &first).unwrap();
    let gate = Gate::hold(&second);
    memory.set_deallocation_stream(&second).unwrap();
    drop(memory);
    drop(second);
    drop(first);
    drop(pool);
    assert_pending(&[raw], "a free moved to a held stream");
    drop(gate);
    assert_destroyed("a moved free");
    assert_eq!(live_streams(), before, "streams left alive");
    failures.assert_none();
}

/// The free moved to the legacy token (bound to the context) while the legacy stream is held.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_free_moved_to_the_held_legacy_stream_holds_the_pool() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let first = stream(&context);
    let legacy = StreamHandle::legacy_in(&context).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &first).unwrap();
    let gate = Gate::hold(&legacy);
    memory.set_deallocation_stream(&legacy).unwrap();
    drop(memory);
    drop(pool);
    assert_pending(&[raw], "a free moved to the held legacy stream");
    drop(gate);
    assert_destroyed("a free moved to the legacy stream");
    failures.assert_none();
}

/// The free moved to another thread's per-thread stream from that thread, which holds it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_free_moved_to_a_held_per_thread_stream_holds_the_pool() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let first = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &first).unwrap();
    memory.memset_async(3, 256, &first).unwrap();
    let gate = {
        let context = context.clone();
        std::thread::spawn(move || {
            context
                .run(|| {
                    let per_thread = StreamHandle::per_thread();
                    let gate = Gate::hold(&per_thread);
                    memory.set_deallocation_stream(&per_thread)?;
                    drop(memory);
                    Ok::<_, handles_cuda::Error>(gate)
                })
                .unwrap()
        })
        .join()
        .unwrap()
    };
    drop(pool);
    assert_pending(&[raw], "a free moved to a held per-thread stream");
    drop(gate);
    assert_destroyed("a free moved to a per-thread stream");
    failures.assert_none();
}

/// A free on a blocking stream's implicit follower: memory freed on the legacy token while a
/// *blocking* stream (not the legacy stream itself) is held: the legacy free waits behind it,
/// and so must the pool.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_legacy_free_behind_a_held_blocking_stream_holds_the_pool() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = blocking(&context);
    let legacy = StreamHandle::legacy_in(&context).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &legacy).unwrap();
    legacy.synchronize().unwrap();
    let gate = Gate::hold(&held);
    drop(memory);
    drop(held);
    drop(pool);
    assert_pending(&[raw], "a legacy free behind a held blocking stream");
    drop(gate);
    assert_destroyed("a legacy free");
    failures.assert_none();
}

/// An IPC-imported pool (this process's own export): an imported pointer's free held back
/// keeps the imported pool.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_imported_pool_waits_for_its_imported_pointers_free() {
    use std::os::fd::AsFd;
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let (owner, held) = (stream(&context), stream(&context));
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })
    .unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &owner).unwrap();
    buffer.memset_async(7, 4096, &owner).unwrap();
    owner.synchronize().unwrap();
    let pointer = buffer.export_ipc().unwrap();
    let fd = pool.export_posix_fd().unwrap();
    let imported_pool = MemoryPoolHandle::import_posix_fd(fd.as_fd(), 0).unwrap();
    let raw = imported_pool.as_cu();
    let gate = Gate::hold(&held);
    let imported = DevicePtrHandle::import_ipc(&imported_pool, &pointer, &held).unwrap();
    imported.memset_async(9, 4096, &held).unwrap();
    drop(imported);
    drop(imported_pool);
    // Only the disposal queue is asked: driver 580 answers an import's attribute questions with
    // CUDA_ERROR_INVALID_VALUE when the exporter is this process (an H100,
    // `cuda-sim/probes/capture_side_calls.py`), so the raw import cannot be asked whether it is
    // still alive.
    let _ = raw;
    assert_pending(&[], "an imported pool");
    drop(gate);
    assert_destroyed("an imported pool");
    drop(buffer);
    drop(pool);
    assert_destroyed("the exporting pool");
    failures.assert_none();
}

/// A host pool used from device 0 with access granted, its free held: the pool waits, and the
/// access is revoked only with it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_pool_with_granted_access_waits_for_its_free() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let (used, held) = (stream(&context), stream(&context));
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ..PoolProps::device(0)
    })
    .unwrap();
    let raw = pool.as_cu();
    pool.set_peer_access(0, true).unwrap();
    let memory = DevicePtrHandle::alloc_from_pool(&pool, 4096, &used).unwrap();
    let gate = Gate::hold(&held);
    // Used on the held stream (a remote use of host memory), freed on `used`.
    memory.memset_async(5, 4096, &held).unwrap();
    drop(memory);
    drop(pool);
    assert_pending(&[raw], "a host pool");
    drop(gate);
    assert_destroyed("a host pool");
    failures.assert_none();
}

/// A pool made device-current, allocated from with `alloc_async` on a held stream, then
/// replaced: the replaced pool's destruction waits for the free.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_replaced_device_current_pool_waits_for_its_free() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let previous = pool.set_device_current(0).unwrap();
    drop(pool);
    let gate = Gate::hold(&held);
    drop(DevicePtrHandle::alloc_async(256, &held).unwrap());
    let ours = previous.set_device_current(0).unwrap();
    assert_eq!(ours.as_cu(), raw);
    drop(ours);
    assert_pending(&[raw], "a replaced current pool");
    drop(gate);
    assert_destroyed("a replaced current pool");
    failures.assert_none();
}

/// Pruning lets go of idle streams only: three held streams (freed on, then dropped) among 60
/// that free and go keep the pool; no stream stays alive once it is destroyed.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pruning_keeps_the_held_streams_among_many() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let before = live_streams();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let mut gates = Vec::new();
    for i in 0..60 {
        let s = stream(&context);
        if i % 20 == 7 {
            gates.push(Gate::hold(&s));
            drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &s).unwrap());
        } else {
            let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &s).unwrap();
            memory.memset_async(1, 256, &s).unwrap();
            drop(memory);
            s.synchronize().unwrap();
        }
    }
    let kept = live_streams() - before;
    assert!(kept < 20, "the pool keeps {kept} streams");
    drop(pool);
    while !gates.is_empty() {
        assert_pending(&[raw], &format!("{} held streams left", gates.len()));
        drop(gates.remove(0));
    }
    assert_destroyed("pruning");
    assert_eq!(live_streams(), before, "streams left alive");
    failures.assert_none();
}

/// A stream that was idle when judged, then held and freed on again: its note must come back.
/// Thread A frees on its own stream S again and again (idle each time), B makes the set reach
/// its pruning sizes with fresh streams; finally A holds S and frees on it once more.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_stream_pruned_while_idle_is_noted_again_when_freed_on() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let before = live_streams();
    for round in 0..6 {
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let raw = pool.as_cu();
        let own = stream(&context);
        // S noted, idle, and the fast path's key.
        let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &own).unwrap();
        drop(memory);
        own.synchronize().unwrap();
        // Others reach 16, 32: S is judged idle and let go.
        for _ in 0..(15 + round * 4) {
            let s = stream(&context);
            drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &s).unwrap());
            s.synchronize().unwrap();
        }
        let gate = Gate::hold(&own);
        drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &own).unwrap());
        drop(own);
        drop(pool);
        assert_pending(&[raw], &format!("round {round}"));
        drop(gate);
        assert_destroyed("pruning round");
    }
    assert_eq!(live_streams(), before, "streams left alive");
    failures.assert_none();
}

/// Many threads free on many streams (some held), concurrently with pruning; pools dropped by
/// other threads meanwhile. No held free may be lost. Eight streams are held in all: with 24
/// held, this test hung on an H100 (driver 580) until killed, its threads waiting in futexes,
/// as driver 580 blocks `cuStreamCreate` once about 30 streams have a host function waiting
/// (RELIABILITY.md, the completion rows).
#[test]
#[ignore = "needs a CUDA GPU"]
fn racing_frees_and_pruning_lose_no_held_free() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let before = live_streams();
    let shared = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = shared.as_cu();
    let gates = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (shared, context, gates) = (shared.clone(), context.clone(), gates.clone());
            std::thread::spawn(move || {
                let own = stream(&context);
                for i in 0..80 {
                    // A stream of its own, reused (the fast path), and fresh ones.
                    let s = if i % 2 == 0 {
                        own.clone()
                    } else {
                        stream(&context)
                    };
                    if i % 40 == 5 + t {
                        gates.lock().unwrap().push(Gate::hold(&s));
                    }
                    let memory = DevicePtrHandle::alloc_from_pool(&shared, 256, &s).unwrap();
                    memory.memset_async(i as u8, 256, &s).unwrap();
                    drop(memory);
                    if i % 10 == 3 {
                        // Another pool, dropped at once, freed on the same stream.
                        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
                        drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &s).unwrap());
                        drop(pool);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    drop(shared);
    assert_pending(&[raw], "the shared pool");
    drop(std::mem::take(&mut *gates.lock().unwrap()));
    assert_destroyed("racing");
    assert_eq!(live_streams(), before, "streams left alive");
    failures.assert_none();
}

/// Another thread captures its per-thread stream (other code, relaxed mode) while a pool whose
/// memory was freed (and marked) on the legacy stream before goes: the pool goes without
/// waiting for the capture, which goes on and succeeds.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_foreign_capture_of_a_per_thread_stream_is_not_broken() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let legacy = StreamHandle::legacy_in(&context).unwrap();
    drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &legacy).unwrap());
    legacy.synchronize().unwrap();
    let (began_tx, began_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let capturer = {
        let context = context.clone();
        std::thread::spawn(move || {
            context
                .run(|| {
                    let per_thread = StreamHandle::per_thread().as_cu();
                    let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
                    // SAFETY: this thread's per-thread stream, a context current.
                    let began = unsafe { sys::cuStreamBeginCapture_v2(per_thread, relaxed) };
                    began_tx.send(began).unwrap();
                    end_rx.recv().unwrap();
                    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                    // SAFETY: as above.
                    let asked = unsafe { sys::cuStreamIsCapturing(per_thread, &mut status) };
                    let mut graph = std::ptr::null_mut();
                    // SAFETY: the capture begun above.
                    let ended = unsafe { sys::cuStreamEndCapture(per_thread, &mut graph) };
                    if !graph.is_null() {
                        // SAFETY: the capture's graph, ours.
                        unsafe { sys::cuGraphDestroy(graph) };
                    }
                    Ok::<_, handles_cuda::Error>((asked, status, ended))
                })
                .unwrap()
        })
    };
    assert_eq!(began_rx.recv().unwrap(), sys::CUresult::CUDA_SUCCESS);
    drop(pool);
    assert_destroyed("during the per-thread capture");
    end_tx.send(()).unwrap();
    let (asked, status, ended) = capturer.join().unwrap();
    assert_eq!(asked, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        status,
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
        "the pool's destruction invalidated the per-thread capture"
    );
    assert_eq!(ended, sys::CUresult::CUDA_SUCCESS, "the capture failed");
    failures.assert_none();
}

/// Other code begins and ends captures of a blocking stream over and over while pools whose
/// memory was freed on the legacy stream are dropped: the disposal thread asks
/// `cuStreamIsCapturing` and then records on the legacy stream, two calls apart. No capture
/// may be invalidated, and no pool leaked.
#[test]
#[ignore = "needs a CUDA GPU"]
fn captures_beginning_while_pools_go_are_not_invalidated() {
    capture_race(false);
}

/// The same race with the capture on the capturing thread's per-thread stream (which cudarc's
/// safe `per_thread_stream().begin_capture(..)` can do without any loan from this crate).
#[test]
#[ignore = "needs a CUDA GPU"]
fn per_thread_captures_beginning_while_pools_go_are_not_invalidated() {
    capture_race(true);
}

fn capture_race(per_thread: bool) {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let legacy = StreamHandle::legacy_in(&context).unwrap();
    let target = blocking(&context);
    let quiet = Arc::new(Mutex::new(()));
    let stop = Arc::new(AtomicBool::new(false));
    let broken = Arc::new(AtomicUsize::new(0));
    let cycles = Arc::new(AtomicUsize::new(0));
    let capturer = {
        let (context, quiet, stop, broken, cycles) = (
            context.clone(),
            quiet.clone(),
            stop.clone(),
            broken.clone(),
            cycles.clone(),
        );
        let raw_target = target.as_cu() as usize;
        std::thread::spawn(move || {
            context
                .run(|| {
                    let target = match per_thread {
                        true => StreamHandle::per_thread().as_cu(),
                        false => raw_target as sys::CUstream,
                    };
                    let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
                    while !stop.load(Ordering::SeqCst) {
                        let _quiet = quiet.lock().unwrap();
                        // SAFETY: a live stream the test owns; the capture ends below.
                        let began = unsafe { sys::cuStreamBeginCapture_v2(target, relaxed) };
                        assert_eq!(began, sys::CUresult::CUDA_SUCCESS);
                        std::thread::yield_now();
                        let mut graph = std::ptr::null_mut();
                        // SAFETY: the capture begun above.
                        let ended = unsafe { sys::cuStreamEndCapture(target, &mut graph) };
                        if !graph.is_null() {
                            // SAFETY: the capture's graph.
                            unsafe { sys::cuGraphDestroy(graph) };
                        }
                        if ended != sys::CUresult::CUDA_SUCCESS
                            && broken.fetch_add(1, Ordering::SeqCst) < 3
                        {
                            eprintln!("capture ended with {ended:?}");
                        }
                        let n = cycles.fetch_add(1, Ordering::SeqCst);
                        drop(_quiet);
                        // A gap of varying length, so that the pool's two calls sometimes
                        // straddle the next begin.
                        let spin = Instant::now();
                        let gap = Duration::from_nanos((n * 7919 % 4000) as u64);
                        while spin.elapsed() < gap {
                            std::hint::spin_loop();
                        }
                    }
                    Ok::<_, handles_cuda::Error>(())
                })
                .unwrap()
        })
    };
    let mut leaked = 0;
    let rounds: usize = std::env::var("REVIEW_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5000);
    for _ in 0..rounds {
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        {
            // No capture while the legacy stream is used directly.
            let _quiet = quiet.lock().unwrap();
            drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &legacy).unwrap());
        }
        drop(pool);
        if !handles_cuda::exec::flush_disposals(Duration::from_secs(5)) {
            leaked += 1;
        }
    }
    stop.store(true, Ordering::SeqCst);
    capturer.join().unwrap();
    let broken = broken.load(Ordering::SeqCst);
    let seen = failures.seen();
    println!(
        "{rounds} pools, {} captures, {broken} invalidated, {leaked} not destroyed in time, \
         {} release failures reported (first: {:?})",
        cycles.load(Ordering::SeqCst),
        seen.len(),
        seen.first()
    );
    assert_eq!(
        broken,
        0,
        "captures invalidated by pool destructions (of {})",
        cycles.load(Ordering::SeqCst)
    );
    assert_eq!(leaked, 0);
    failures.assert_none();
}

/// Pruning inside a `GraphHandle::capture` closure (global mode): a free that makes the noted
/// set reach 16 asks every noted stream; the capture must go on.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pruning_inside_a_capture_closure_breaks_nothing() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let before = live_streams();
    let work = stream(&context);
    let target = DevicePtrHandle::alloc_async(1024, &work).unwrap();
    work.synchronize().unwrap();
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        for _ in 0..15 {
            let s = stream(&context);
            drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &s).unwrap());
            s.synchronize().unwrap();
        }
        let last = stream(&context);
        let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &last).unwrap();
        drop(last);
        let mut memory = Some(memory);
        let mut pool = Some(pool);
        let graph = GraphHandle::capture(&context, mode, |capture| {
            capture.memset(&target, 0, 7, 1024)?;
            drop(memory.take());
            drop(pool.take());
            capture.memset(&target, 0, 9, 1024)
        });
        let graph = graph.unwrap_or_else(|error| panic!("{mode:?}: the capture failed: {error}"));
        let exec = graph.instantiate().unwrap();
        exec.launch(&work).unwrap();
        work.synchronize().unwrap();
        drop(exec);
        drop(graph);
        assert_destroyed("pruning in a capture");
    }
    drop(target);
    work.synchronize().unwrap();
    drop(work);
    assert!(handles_cuda::exec::flush_disposals(Duration::from_secs(10)));
    assert_eq!(live_streams(), before, "streams left alive");
    failures.assert_none();
}

/// A pool whose memory was freed on the legacy stream, dropped inside a capture by this crate
/// (its private streams are non-blocking): the legacy marker is recorded meanwhile, and the
/// capture must succeed.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_legacy_freed_pool_dropped_inside_a_capture_breaks_nothing() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let work = stream(&context);
    let legacy = StreamHandle::legacy_in(&context).unwrap();
    let target = DevicePtrHandle::alloc_async(1024, &work).unwrap();
    work.synchronize().unwrap();
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let gate = Gate::hold(&legacy);
        drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &legacy).unwrap());
        let raw = pool.as_cu();
        let mut pool = Some(pool);
        let graph = GraphHandle::capture(&context, mode, |capture| {
            capture.memset(&target, 0, 7, 1024)?;
            drop(pool.take());
            std::thread::sleep(Duration::from_millis(50));
            capture.memset(&target, 0, 9, 1024)
        });
        assert_pending(&[raw], "a legacy-freed pool dropped in a capture");
        drop(gate);
        let graph = graph.unwrap_or_else(|error| panic!("{mode:?}: the capture failed: {error}"));
        let exec = graph.instantiate().unwrap();
        exec.launch(&work).unwrap();
        work.synchronize().unwrap();
        assert_destroyed("a legacy-freed pool");
    }
    failures.assert_none();
}

/// Device 0's pool, used from device 1 (granted access) on a held stream of device 1, freed on
/// device 0: the free waits for the use, the pool for the free, and the access goes last.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_gpus_a_pool_used_from_another_device_on_a_held_stream_waits() {
    let _serial = serial();
    let failures = Failures::watch();
    let (zero, one) = (
        ContextHandle::primary(0).unwrap(),
        ContextHandle::primary(1).unwrap(),
    );
    let home = stream(&zero);
    let remote = stream(&one);
    let remote_legacy = StreamHandle::legacy_in(&one).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    pool.set_peer_access(1, true).unwrap();
    let a = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
    let b = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
    home.synchronize().unwrap();
    let gate = Gate::hold(&remote);
    let legacy_gate = Gate::hold(&remote_legacy);
    a.memset_async(1, 4096, &remote).unwrap();
    b.memset_async(2, 4096, &remote_legacy).unwrap();
    drop((a, b));
    drop(remote);
    drop(pool);
    assert_pending(&[raw], "a remote use on a held stream");
    drop(gate);
    assert_pending(&[raw], "a remote use on the held legacy stream of device 1");
    drop(legacy_gate);
    assert_destroyed("a pool used from device 1");
    failures.assert_none();
}

/// A pool freed on the legacy streams of two devices' contexts (peer access), one held.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_gpus_a_free_on_another_devices_legacy_stream_holds_the_pool() {
    let _serial = serial();
    let failures = Failures::watch();
    let (zero, one) = (
        ContextHandle::primary(0).unwrap(),
        ContextHandle::primary(1).unwrap(),
    );
    let home = stream(&zero);
    let legacy_one = StreamHandle::legacy_in(&one).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    pool.set_peer_access(1, true).unwrap();
    let memory = DevicePtrHandle::alloc_from_pool(&pool, 4096, &home).unwrap();
    home.synchronize().unwrap();
    let gate = Gate::hold(&legacy_one);
    memory.set_deallocation_stream(&legacy_one).unwrap();
    drop(memory);
    drop(pool);
    assert_pending(&[raw], "a free on device 1's held legacy stream");
    drop(gate);
    assert_destroyed("a free on device 1's legacy stream");
    failures.assert_none();
}

/// A dropped pool whose free is held back still holds its memory (the driver gives it back
/// when the pool is destroyed, which waits for the free): an allocation the driver refuses for
/// memory meanwhile is asked again as the pool goes, and succeeds once the free ran (without
/// the retry it failed, out of memory). With nothing queued that could give memory back, a
/// refusal is returned at once.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_allocation_refused_for_a_dropped_pools_memory_waits_for_the_pool() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    assert!(handles_cuda::exec::flush_disposals(Duration::from_secs(10)));
    let (free, _) = context.run(handles_cuda::driver::mem_get_info).unwrap();
    // More than half of what is free: two such allocations cannot be held at once.
    let size = free / 10 * 6;
    let (held, other) = (stream(&context), stream(&context));
    let first = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let second = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let memory = DevicePtrHandle::alloc_from_pool(&first, size, &held).unwrap();
    // Nothing queued could give memory back: refused at once.
    let asked = Instant::now();
    let refused = DevicePtrHandle::alloc_from_pool(&second, size, &other)
        .expect_err("two allocations of more than half the free memory");
    assert_eq!(
        refused.code(),
        Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        "{refused}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "a refusal with nothing queued returned only after {:?}",
        asked.elapsed()
    );
    let gate = Gate::hold(&held);
    drop(memory);
    drop(first);
    let opened = Arc::new(Mutex::new(None));
    let opener = {
        let opened = Arc::clone(&opened);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            *opened.lock().unwrap() = Some(Instant::now());
            drop(gate);
        })
    };
    let memory = DevicePtrHandle::alloc_from_pool(&second, size, &other);
    let got = Instant::now();
    opener.join().unwrap();
    let memory = memory.expect("the dropped pool's memory, once its free ran");
    let opened = opened.lock().unwrap().expect("the gate was opened");
    assert!(
        got > opened,
        "the memory came before the dropped pool's free could run"
    );
    drop(memory);
    drop(second);
    other.synchronize().unwrap();
    assert!(handles_cuda::exec::flush_disposals(Duration::from_secs(10)));
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "review_pool_markers",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 2,
        env: &[],
    }
    .run();
}
