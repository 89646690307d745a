//! Host functions (`StreamHandle::launch_host`, graph host nodes) and event completions as
//! futures (`EventHandle::completed`), on a GPU; `on_the_simulator` runs them all again on the
//! simulated driver, which runs host functions on threads of their own, as the driver does,
//! and reports any CUDA call made from one. None of them returns early.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use handles_cuda::exec::EventFlags;
use handles_cuda::graph::GraphHandle;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, EventHandle, MemoryPoolHandle, PoolProps, StreamFlags,
    StreamHandle,
};
use handles_tests::{Failures, Gate, raw_pool_answers, serial, stream};

mod simulator;

/// A busy stretch of work on `stream`: host functions queued after it really wait for it.
fn busy(context: &ContextHandle, stream: &StreamHandle) -> DevicePtrHandle {
    let size = 64 << 20;
    let buffer = DevicePtrHandle::alloc(context, size).unwrap();
    for value in 0..4 {
        buffer.memset_async(value, size, stream).unwrap();
    }
    buffer
}

/// Waits up to 10 s for `done`; panics with `what` otherwise (a hang is a failure, not a skip).
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn host_functions_run_in_stream_order_after_the_work_before_them() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let order = Arc::new(Mutex::new(Vec::new()));
    let _busy = busy(&context, &stream);
    for i in 0..100 {
        let order = Arc::clone(&order);
        stream
            .launch_host(move || order.lock().unwrap().push(i))
            .unwrap();
    }
    // The last one must see the first 99 already done: work after a host function waits.
    stream.synchronize().unwrap();
    assert_eq!(*order.lock().unwrap(), (0..100).collect::<Vec<_>>());
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panicking_host_function_is_reported_and_the_stream_goes_on() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let after = Arc::new(AtomicUsize::new(0));
    stream
        .launch_host(|| panic!("a host function panicked on purpose"))
        .unwrap();
    let seen = Arc::clone(&after);
    stream
        .launch_host(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let buffer = DevicePtrHandle::alloc(&context, 4096).unwrap();
    buffer.memset_async(7, 4096, &stream).unwrap();
    let mut host = [0u8; 4096];
    buffer.copy_to_host(&mut host, &stream).unwrap();
    assert!(host.iter().all(|&b| b == 7), "work after the panic ran");
    assert_eq!(
        after.load(Ordering::SeqCst),
        1,
        "the next host function ran"
    );
    let seen = failures.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with("host function") && seen[0].contains("panicked on purpose"),
        "{seen:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_handles_are_released_after_the_host_function_off_the_driver_thread() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let before = DevicePtrHandle::live_count().unwrap();
    let buffer = busy(&context, &stream);
    let ran = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&ran);
    // The closure holds the last handle of the buffer: it is freed after the host function,
    // not inside it (a CUDA call there is a violation on the simulator, strict mode).
    stream
        .launch_host(move || {
            assert!(buffer.size() > 0);
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    wait_until("the captured buffer is released", || {
        DevicePtrHandle::live_count().unwrap() == before
    });
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graph_host_node_runs_at_every_launch_and_outlives_every_handle() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let count = Arc::new(AtomicUsize::new(0));
    let graph = GraphHandle::create(&context).unwrap();
    let seen = Arc::clone(&count);
    let first = graph
        .add_host_node(&[], move || {
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let seen = Arc::clone(&count);
    graph
        .add_host_node(&[first], move || {
            seen.fetch_add(1000, Ordering::SeqCst);
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    let _busy = busy(&context, &stream);
    for _ in 0..100 {
        exec.launch(&stream).unwrap();
    }
    // Every handle goes while the launches may still run: the closures stay until they end.
    drop(exec);
    stream.synchronize().unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 100 * 1001);
    assert_eq!(Arc::strong_count(&count), 1, "the closures were released");
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panicking_graph_host_node_is_reported_at_each_launch() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let graph = GraphHandle::create(&context).unwrap();
    graph
        .add_host_node(&[], || panic!("a host node panicked on purpose"))
        .unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    let seen = failures.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.iter().all(|line| line.starts_with("graph host node")),
        "{seen:?}"
    );
}

/// The smallest executor: polls on this thread, parks between polls, counts its wake-ups.
struct Parker {
    thread: std::thread::Thread,
    wakes: AtomicUsize,
}

impl Wake for Parker {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn block_on<F: Future>(future: F) -> (F::Output, usize) {
    let parker = Arc::new(Parker {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(Arc::clone(&parker));
    let mut task = TaskContext::from_waker(&waker);
    let mut future = pin!(future);
    let start = Instant::now();
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut task) {
            return (output, parker.wakes.load(Ordering::SeqCst));
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the future never resolved"
        );
        std::thread::park_timeout(Duration::from_secs(1));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_completion_wakes_a_minimal_executor() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    // Never recorded: complete at once.
    let (_, wakes) = block_on(event.completed().unwrap());
    assert_eq!(wakes, 0);
    let buffer = busy(&context, &stream);
    event.record(&stream).unwrap();
    let future = event.completed().unwrap();
    let ((), _) = block_on(future);
    assert!(
        event.query().unwrap(),
        "resolved only once the record completed"
    );
    // A future dropped before its event completes is harmless.
    buffer.memset_async(1, buffer.size(), &stream).unwrap();
    event.record(&stream).unwrap();
    drop(event.completed().unwrap());
    stream.synchronize().unwrap();
    handles_cuda::exec::clear_notifiers();
    failures.assert_none();
}

/// More completions pending at once than a context keeps busy notifier streams for: those
/// beyond wait at the waiter, which polls them, so no other thread's driver calls wait for
/// the GPU meanwhile (on driver 580 `cuStreamCreate` blocks once about 30 streams have a host
/// function waiting behind a pending event, and holds back other calls); each still resolves
/// only after its record, and the context is left with no more notifier streams than the
/// limit.
#[test]
#[ignore = "needs a CUDA GPU"]
fn many_pending_completions_keep_few_notifier_streams() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let held = stream(&context);
    handles_cuda::exec::clear_notifiers();
    let open = Arc::new(AtomicUsize::new(0));
    let gate = Arc::clone(&open);
    held.launch_host(move || {
        while gate.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    })
    .unwrap();
    let pending: Vec<_> = (0..64)
        .map(|_| {
            let event = EventHandle::create(&context, EventFlags::default()).unwrap();
            event.record(&held).unwrap();
            let completion = event.completed().unwrap();
            (event, completion)
        })
        .collect();
    // Well past the waiter's first moments: the first ones went to notifiers, the rest wait.
    std::thread::sleep(Duration::from_millis(20));
    let started = Instant::now();
    let other = stream(&context);
    let buffer = DevicePtrHandle::alloc(&context, 4096).unwrap();
    buffer.memset_async(7, 4096, &other).unwrap();
    other.synchronize().unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "a stream made and a memset done took {took:?} while 64 completions were pending"
    );
    // Those waiting for room are polled now and then, not in a loop: the waiter (and any
    // thread started from it) uses a small part of the time they wait.
    let (before, _) = worker_cpu_time();
    std::thread::sleep(Duration::from_millis(400));
    let (after, by_thread) = worker_cpu_time();
    assert!(
        after - before < Duration::from_millis(100),
        "the waiter used {:?} of CPU in 400 ms while 64 completions were pending: {by_thread:?}",
        after - before
    );
    assert!(
        pending.iter().all(|(event, _)| !event.query().unwrap()),
        "the gate holds every record back"
    );
    open.store(1, Ordering::SeqCst);
    for (event, completion) in pending {
        block_on(completion);
        assert!(
            event.query().unwrap(),
            "resolved only once the record completed"
        );
    }
    held.synchronize().unwrap();
    let streams = handles_cuda::exec::clear_notifiers();
    assert!(
        streams <= handles_cuda::exec::BUSY_NOTIFIERS_PER_CONTEXT,
        "{streams} notifier streams for 64 completions pending at once"
    );
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn awaited_events_are_let_go_once_their_completions_resolve() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    handles_cuda::exec::clear_notifiers();
    let before = EventHandle::live_count().unwrap();
    for _ in 0..50 {
        // The record waits behind a host function that waits for `open`, so the completion
        // is surely pending when it is made.
        let open = Arc::new(AtomicUsize::new(0));
        let gate = Arc::clone(&open);
        stream
            .launch_host(move || {
                while gate.load(Ordering::SeqCst) == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            })
            .unwrap();
        let event = EventHandle::create(&context, EventFlags::default()).unwrap();
        event.record(&stream).unwrap();
        let future = event.completed().unwrap();
        // The program's handle is gone before the record completes: the table keeps it.
        drop(event);
        open.store(1, Ordering::SeqCst);
        let ((), _) = block_on(future);
    }
    // A completion lets go of its event when it resolves.
    assert_eq!(
        EventHandle::live_count().unwrap(),
        before,
        "awaited events kept after their completions resolved"
    );
    // Completions dropped before their host functions ran: their events stay until the
    // table looks again (or `clear_notifiers`), never before the host function ran.
    let gated = |stream: &StreamHandle| {
        let gate = Arc::new(AtomicUsize::new(0));
        let open = Arc::clone(&gate);
        stream
            .launch_host(move || {
                while open.load(Ordering::SeqCst) == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            })
            .unwrap();
        gate
    };
    // Interprocess events (which other processes may record) go to a notifier at once, not
    // to the waiter thread, which lets go of a dropped completion's event at once.
    let dropped_early = |count: usize| {
        for _ in 0..count {
            let flags = EventFlags {
                interprocess: true,
                ..EventFlags::default()
            };
            let event = EventHandle::create(&context, flags).unwrap();
            event.record(&stream).unwrap();
            drop(event.completed().unwrap());
        }
    };
    let gate = gated(&stream);
    dropped_early(10);
    assert_eq!(EventHandle::live_count().unwrap() - before, 10);
    gate.store(1, Ordering::SeqCst);
    stream.synchronize().unwrap();
    handles_cuda::exec::clear_notifiers();
    assert_eq!(EventHandle::live_count().unwrap(), before);
    // Dropped early, one after another, each host function run before the next completion:
    // the table lets go of the finished ones whenever it has grown enough, so it stays
    // bounded (100 kept without that).
    for _ in 0..100 {
        let gate = gated(&stream);
        dropped_early(1);
        gate.store(1, Ordering::SeqCst);
        stream.synchronize().unwrap();
    }
    let kept = EventHandle::live_count().unwrap() - before;
    assert!(kept < 64, "{kept} events of finished completions kept");
    handles_cuda::exec::clear_notifiers();
    assert_eq!(
        EventHandle::live_count().unwrap(),
        before,
        "clear_notifiers lets go of every awaited event"
    );
    failures.assert_none();
}

/// CPU time of this process's tokio worker threads and of handles-cuda's waiter thread (with
/// any thread the driver starts from it: its CPU time is the waiter's doing), in all and by
/// thread.
fn worker_cpu_time() -> (Duration, Vec<(String, Duration)>) {
    handles_tests::threads_cpu_time(&["tokio-runtime", "handles-waiter"])
}

/// CPU time of this process (user + system), for the no-spinning check.
fn cpu_time() -> Duration {
    // SAFETY: `getrusage` fills the struct it is given; RUSAGE_SELF is valid.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tokio_awaits_ten_thousand_event_completions_on_eight_streams_without_spinning() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let streams: Vec<_> = (0..8).map(|_| stream(&context)).collect();
    let buffers: Vec<_> = streams
        .iter()
        .map(|_| DevicePtrHandle::alloc(&context, 64 << 10).unwrap())
        .collect();
    // Ten waves of 1000 completions (125 per stream). Each wave starts with a kernel that
    // spins for a while on every stream (longer than queueing the wave takes), so the tasks spend the measured time waiting for the
    // GPU: a thread that spun would show as about a core of CPU time. A wave stays well below a
    // stream's queue depth, beyond which queueing more work would block the host.
    let on_simulator = std::env::var_os("CUDA_SIM_STRICT").is_some();
    // The simulator runs kernels on the CPU at launch: a short spin there.
    let spin = if on_simulator { 1_000 } else { 400_000_000 };
    let kernels = handles_tests::kernels::TestKernels::load().unwrap();
    // Named here: the default name changed between tokio releases ("tokio-rt-worker" now), and
    // a worker the count does not find would hide a spinning one.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name("tokio-runtime-worker")
        .build()
        .unwrap();
    let _enter = runtime.enter();
    // One spinning kernel alone, for the time a wave's kernels hold their streams back.
    let spun_from = Instant::now();
    kernels
        .spin
        .launch(
            &streams[0],
            &handles_cuda::LaunchConfig::linear(1, 1),
            (spin,),
        )
        .unwrap();
    streams[0].synchronize().unwrap();
    let one_spin = spun_from.elapsed();
    let mut completed = 0;
    let mut queueing = Duration::ZERO;
    let mut first_wave = Duration::ZERO;
    // Where queueing spends its time, by step.
    let mut phases = [
        ("memset", Duration::ZERO),
        ("create", Duration::ZERO),
        ("record", Duration::ZERO),
        ("completed", Duration::ZERO),
        ("spawn", Duration::ZERO),
    ];
    let (start, cpu_start) = (Instant::now(), cpu_time());
    for wave in 0..10 {
        let queued_from = Instant::now();
        for stream in &streams {
            kernels
                .spin
                .launch(stream, &handles_cuda::LaunchConfig::linear(1, 1), (spin,))
                .unwrap();
        }
        let mut tasks = Vec::new();
        for round in 0..125 {
            for (stream, buffer) in streams.iter().zip(&buffers) {
                let at = Instant::now();
                buffer
                    .memset_async((wave * 125 + round) as u8, buffer.size(), stream)
                    .unwrap();
                let set = Instant::now();
                let event = EventHandle::create(&context, EventFlags::default()).unwrap();
                let made = Instant::now();
                event.record(stream).unwrap();
                let recorded = Instant::now();
                let completion = event.completed().unwrap();
                let awaited = Instant::now();
                tasks.push(tokio::spawn(async move {
                    completion.await;
                    event.query().unwrap()
                }));
                for (phase, took) in phases.iter_mut().zip([
                    set - at,
                    made - set,
                    recorded - made,
                    awaited - recorded,
                    awaited.elapsed(),
                ]) {
                    phase.1 += took;
                }
            }
        }
        queueing += queued_from.elapsed();
        if wave == 0 {
            first_wave = queued_from.elapsed();
        }
        completed += runtime.block_on(async {
            let mut completed = 0;
            for task in tasks {
                completed += usize::from(task.await.unwrap());
            }
            completed
        });
    }
    let (wall, cpu) = (start.elapsed(), cpu_time() - cpu_start);
    // The threads that await: tokio's workers, and the waiter thread that polls events at
    // first. Queueing (this thread) and the driver's own threads are not the futures' cost.
    let (workers, by_thread) = worker_cpu_time();
    assert_eq!(
        by_thread
            .iter()
            .filter(|(name, _)| name.starts_with("tokio-runtime"))
            .count(),
        4,
        "the count finds tokio's four workers: {by_thread:?}"
    );
    println!(
        "10000 completions on 8 streams: {wall:.2?} wall; the 4 tokio workers and the waiter used {workers:.2?} \
         of CPU ({:.1}% of one core; by thread {by_thread:?}), the whole process {cpu:.2?}; \
         queueing the waves took {queueing:.2?} (the first {first_wave:.2?}; by step {phases:?}); one spinning kernel alone took {one_spin:.2?}",
        workers.as_secs_f64() / wall.as_secs_f64() * 100.0
    );
    assert_eq!(
        completed, 10_000,
        "every event had completed when its future resolved"
    );
    if on_simulator {
        // The simulated driver does the streams' work (and runs each host function on a
        // thread of its own) on the CPU, so its CPU time says nothing about spinning.
        println!("on the simulator: the CPU bound is checked on a GPU only");
    } else {
        assert!(
            wall >= Duration::from_secs(1),
            "the spinning kernels held the work back"
        );
        // Queueing a wave takes less time than its spinning kernels: a queueing thread that
        // waits for the waiter's lock (each completion until the last watch expired) took the
        // whole wall time on an H100.
        assert!(
            queueing < wall / 2,
            "queueing the completions took {queueing:?} of {wall:?}"
        );
        // One spinning worker would use about the whole wall time.
        assert!(
            workers < wall / 4,
            "tokio's workers and the waiter used {workers:?} of CPU in {wall:?}: something spins"
        );
    }
    drop(_enter);
    drop(runtime);
    for stream in &streams {
        stream.synchronize().unwrap();
    }
    handles_cuda::exec::clear_notifiers();
    failures.assert_none();
}

/// The pool `raw`, whose handle is gone, with a free of its memory held back by `gate`: its
/// destruction does not finish while the gate is closed (the raw pool still answers), and
/// finishes once the gate opens.
fn assert_destroyed_only_after(gate: Gate, raw: cudarc::driver::sys::CUmemoryPool) {
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !handles_cuda::exec::flush_disposals(Duration::from_millis(50)),
        "the pool's destruction finished while a free of its memory was still queued"
    );
    assert!(
        raw_pool_answers(raw),
        "the pool is gone while its free is queued"
    );
    drop(gate);
    assert!(
        handles_cuda::exec::flush_disposals(Duration::from_secs(10)),
        "the pool was not destroyed after its free ran"
    );
}

/// A pool is destroyed only after the frees of its memory ran, and its last handle's drop does
/// not wait for them: dropped while a free waits behind a host function, the drop returns at
/// once, the pool still answers the driver, and the disposal thread destroys it once the host
/// function let the free run. Driver 580 crashes (a divide error or
/// a segmentation fault in libcuda) or hangs when a pool is destroyed with frees still queued
/// while other threads use pools (`cuda-sim/probes/pool_destroy_pending.py`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pool_is_destroyed_only_after_the_frees_of_its_memory_ran() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let gate = Gate::hold(&stream);
    // Allocated and freed behind the gate: the free is queued, not run.
    drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &stream).unwrap());
    let started = Instant::now();
    drop(pool);
    let dropping = started.elapsed();
    assert!(
        dropping < Duration::from_millis(200),
        "dropping the pool waited {dropping:?} for its queued free"
    );
    assert_destroyed_only_after(gate, raw);
    failures.assert_none();
}

/// Dropping a pool's last handle inside a capture, with its memory's free still queued on a
/// stream that is not captured, neither breaks the capture nor leaks the pool: its
/// destruction waits for nothing but that free, off the capturing thread.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pool_dropped_during_a_capture_breaks_nothing() {
    use handles_cuda::graph::CaptureMode;
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let target = DevicePtrHandle::alloc_async(1024, &stream).unwrap();
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let gate = Gate::hold(&stream);
        drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &stream).unwrap());
        let mut pool = Some(pool);
        let graph = GraphHandle::capture(&context, mode, |capture| {
            capture.memset(&target, 0, 7, 1024)?;
            drop(pool.take());
            capture.memset(&target, 0, 9, 1024)
        });
        drop(gate);
        let graph = graph.unwrap_or_else(|error| panic!("{mode:?}: the capture failed: {error}"));
        let exec = graph.instantiate().unwrap();
        exec.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        assert!(handles_cuda::exec::flush_disposals(Duration::from_secs(10)));
    }
    failures.assert_none();
}

/// Frees queued on default-stream tokens are marked as they are queued, on the same token: a
/// pool freed on this thread's per-thread stream behind a gate stays alive until the gate
/// opens. And a capture of a blocking stream that other code begins after a legacy-stream free
/// is neither touched nor waited for (legacy work while it runs would join and invalidate it):
/// the pool goes while it runs, and the capture ends well.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pool_freed_on_default_streams_waits_for_them_and_for_no_capture() {
    use cudarc::driver::sys;
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    // A per-thread stream's free, queued behind a gate.
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    let per_thread = StreamHandle::per_thread();
    let gate = context
        .run(|| {
            let gate = Gate::hold(&per_thread);
            drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &per_thread)?);
            Ok::<_, handles_cuda::Error>(gate)
        })
        .unwrap();
    drop(pool);
    assert_destroyed_only_after(gate, raw);
    // A legacy-stream free, and a capture of a blocking stream by other code.
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let legacy = StreamHandle::legacy_in(&context).unwrap();
    drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &legacy).unwrap());
    legacy.synchronize().unwrap();
    let blocking = StreamHandle::create(
        &context,
        StreamFlags {
            non_blocking: false,
        },
        0,
    )
    .unwrap();
    let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: a live stream this test owns; the capture is ended below.
    let began = unsafe { sys::cuStreamBeginCapture_v2(blocking.as_cu(), relaxed) };
    assert_eq!(began, sys::CUresult::CUDA_SUCCESS);
    drop(pool);
    let destroyed = handles_cuda::exec::flush_disposals(Duration::from_secs(10));
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: as above; `status` is a valid out-pointer.
    let asked = unsafe { sys::cuStreamIsCapturing(blocking.as_cu(), &mut status) };
    let mut graph = std::ptr::null_mut();
    // SAFETY: the capture begun above, on this thread.
    let ended = unsafe { sys::cuStreamEndCapture(blocking.as_cu(), &mut graph) };
    if !graph.is_null() {
        // SAFETY: the graph the capture made, owned by this test.
        unsafe { sys::cuGraphDestroy(graph) };
    }
    assert_eq!(asked, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(
        status,
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
        "the pool's destruction invalidated the capture"
    );
    assert_eq!(ended, sys::CUresult::CUDA_SUCCESS, "the capture failed");
    assert!(destroyed, "the pool's destruction waited for the capture");
    failures.assert_none();
}

/// A pool whose memory a device used (a host pool's memory is remote to every device) is
/// destroyed once its frees ran, and neither its last drop nor its destruction waits for other
/// work in the device's context: an unrelated stream held back for three seconds delays
/// neither, and the access granted to the device goes with the pool.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pool_used_from_a_device_waits_for_nothing_but_its_frees() {
    use handles_cuda::memory::PoolLocation;
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let (used, unrelated) = (stream(&context), stream(&context));
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ..PoolProps::device(0)
    })
    .unwrap();
    pool.set_peer_access(0, true).unwrap();
    let memory = DevicePtrHandle::alloc_from_pool(&pool, 4096, &used).unwrap();
    memory.memset_async(7, 4096, &used).unwrap();
    drop(memory);
    let gate = Gate::hold(&unrelated);
    let open = Arc::clone(&gate.0);
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        open.store(true, Ordering::SeqCst);
    });
    let started = Instant::now();
    drop(pool);
    let dropping = started.elapsed();
    used.synchronize().unwrap();
    let destroyed = handles_cuda::exec::flush_disposals(Duration::from_secs(2));
    let destroying = started.elapsed();
    drop(gate);
    opener.join().unwrap();
    unrelated.synchronize().unwrap();
    assert!(
        dropping < Duration::from_millis(500),
        "dropping the pool waited {dropping:?}"
    );
    assert!(
        destroyed && destroying < Duration::from_millis(2500),
        "the pool's destruction waited for unrelated work ({destroying:?})"
    );
    failures.assert_none();
}

/// A long-lived pool does not keep every stream its memory was freed on: of 100 streams that
/// each free one allocation and go, it keeps fewer than 16 (those noted since its last look at
/// which ones ran everything), and it still waits for a free queued on a stream that is gone.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_long_lived_pool_lets_go_of_the_streams_its_frees_ran_on() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let live = || StreamHandle::live_count().expect("the tests build handles-core with live-count");
    let before = live();
    for _ in 0..100 {
        let stream = stream(&context);
        let memory = DevicePtrHandle::alloc_from_pool(&pool, 256, &stream).unwrap();
        memory.memset_async(1, 256, &stream).unwrap();
        drop(memory);
        stream.synchronize().unwrap();
    }
    let kept = live() - before;
    assert!(
        kept < 16,
        "the pool keeps {kept} of the 100 streams it was freed on"
    );
    let last = stream(&context);
    let gate = Gate::hold(&last);
    drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &last).unwrap());
    drop(last);
    let raw = pool.as_cu();
    drop(pool);
    assert_destroyed_only_after(gate, raw);
    assert_eq!(live(), before, "streams are left alive");
    failures.assert_none();
}

/// A free on a stream another owner lends (a borrowed handle) is marked as it is queued: the
/// pool keeps nothing of the stream, so its owner may destroy it (busy, its free held back)
/// before the pool goes, and the pool still waits for that free.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pool_does_not_keep_a_borrowed_stream_its_memory_was_freed_on() {
    use cudarc::driver::sys;
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let raw_stream = context
        .run(|| {
            let mut raw = std::ptr::null_mut();
            // SAFETY: a context is current; `raw` is a valid out-pointer.
            let created = unsafe { sys::cuStreamCreate(&mut raw, 1) };
            assert_eq!(created, sys::CUresult::CUDA_SUCCESS);
            Ok::<_, handles_cuda::Error>(raw)
        })
        .unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let raw = pool.as_cu();
    // SAFETY: the stream lives until it is destroyed below, after this handle is gone.
    let borrowed = unsafe {
        StreamHandle::from_raw_borrowed(raw_stream, handles_cuda::exec::Stream { context: None })
    };
    let gate = Gate::hold(&borrowed);
    drop(DevicePtrHandle::alloc_from_pool(&pool, 256, &borrowed).unwrap());
    drop(borrowed);
    // The owner destroys its stream, held back and busy (the driver lets its work finish).
    // SAFETY: the stream created above; no handle of it is left.
    let destroyed = unsafe { sys::cuStreamDestroy_v2(raw_stream) };
    assert_eq!(destroyed, sys::CUresult::CUDA_SUCCESS);
    drop(pool);
    assert_destroyed_only_after(gate, raw);
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_host",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
