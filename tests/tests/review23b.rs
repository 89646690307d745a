//! A second adversarial review of parity II and the completion table: event completions raced
//! against `clear_notifiers` from many threads, a green context dropped under pending
//! completions, captured cooperative grids reaching a small green context by update, nested
//! child graphs and default-stream tokens. Ignored by default (they need a GPU);
//! `on_the_simulator` re-runs them on the strict simulator.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use handles_cuda::code::{Elements, LaunchOptions, OccupancyFlags, ProgramHandle, TypedKernel};
use handles_cuda::exec::{Device, EventFlags, GreenContextHandle};
use handles_cuda::graph::{CaptureMode, GraphHandle};
use handles_cuda::{
    ContextHandle, DeviceBuffer, DevicePtrHandle, Error, EventHandle, KernelHandle, LaunchConfig,
    LaunchProblem, LibraryHandle, StreamHandle,
};
use handles_tests::{Failures, gate, serial, stream};

mod simulator;

const SOURCE: &str = r#"
extern "C" __global__ void scale(float *xs, unsigned n, float f) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) xs[i] *= f;
}
"#;

type Scale = (Elements<f32>, u32, f32);

fn scale_kernel() -> TypedKernel<Scale> {
    let program = ProgramHandle::new(SOURCE, "review23b.cu").unwrap();
    if let Err(error) = program.compile(&["--gpu-architecture=compute_90"]) {
        panic!("{error}\n{}", program.log().unwrap_or_default());
    }
    let library = LibraryHandle::load_data(&program.ptx().unwrap()).unwrap();
    let kernel = KernelHandle::get(&library, "scale").unwrap();
    // SAFETY: every launch passes a buffer of at least `n` elements.
    unsafe { kernel.typed::<Scale>(|_, _| Ok(())) }.unwrap()
}

struct Parker(AtomicUsize);
impl Wake for Parker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Parker(AtomicUsize::new(0))));
    let mut task = TaskContext::from_waker(&waker);
    let mut future = pin!(future);
    let start = Instant::now();
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut task) {
            return output;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never resolved");
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn completions_race_clear_notifiers_from_many_threads() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    handles_cuda::exec::clear_notifiers();
    let before = EventHandle::live_count().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let clearer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                handles_cuda::exec::clear_notifiers();
                n += 1;
                std::thread::yield_now();
            }
            n
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let context = context.clone();
            std::thread::spawn(move || {
                let stream = stream(&context);
                let buffer = DevicePtrHandle::alloc(&context, 1 << 16).unwrap();
                let waker = Waker::from(Arc::new(Parker(AtomicUsize::new(0))));
                let mut kept = Vec::new();
                for i in 0..150usize {
                    buffer
                        .memset_async(i as u8, buffer.size(), &stream)
                        .unwrap();
                    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
                    event.record(&stream).unwrap();
                    let mut completion = Box::pin(event.completed().unwrap());
                    drop(event);
                    match (i + t) % 4 {
                        0 => drop(completion),
                        1 => block_on(completion.as_mut()),
                        2 => {
                            let mut task = TaskContext::from_waker(&waker);
                            let _ = completion.as_mut().poll(&mut task);
                            kept.push(completion);
                        }
                        _ => {
                            block_on(completion.as_mut());
                            // Polled again after Ready.
                            let mut task = TaskContext::from_waker(&waker);
                            assert!(completion.as_mut().poll(&mut task).is_ready());
                            assert!(completion.as_mut().poll(&mut task).is_ready());
                        }
                    }
                    if kept.len() > 10 {
                        drop(kept.remove(0));
                    }
                }
                stream.synchronize().unwrap();
                drop(kept);
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let clears = clearer.join().unwrap();
    println!("{clears} clears raced");
    handles_cuda::exec::clear_notifiers();
    assert_eq!(
        EventHandle::live_count().unwrap(),
        before,
        "events left after the last clear"
    );
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_green_context_completion_outlives_every_user_handle() {
    let _serial = serial();
    let failures = Failures::watch();
    handles_cuda::exec::clear_notifiers();
    let before = EventHandle::live_count().unwrap();
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_context = green.context().unwrap();
    let green_stream = green.create_stream(0).unwrap();
    let open = gate(&green_stream);
    let event = EventHandle::create(&green_context, EventFlags::default()).unwrap();
    event.record(&green_stream).unwrap();
    let early = event.completed().unwrap();
    let late = event.completed().unwrap();
    let mut pending = Box::pin(event.completed().unwrap());
    let waker = Waker::from(Arc::new(Parker(AtomicUsize::new(0))));
    assert!(
        pending
            .as_mut()
            .poll(&mut TaskContext::from_waker(&waker))
            .is_pending()
    );
    drop(early);
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        open.store(true, Ordering::SeqCst);
    });
    // Dropping the handles may wait for the stream's work: the gate opens from another thread.
    drop((event, green_stream, green_context, green));
    opener.join().unwrap();
    block_on(late);
    block_on(pending.as_mut());
    assert!(
        pending
            .as_mut()
            .poll(&mut TaskContext::from_waker(&waker))
            .is_ready()
    );
    drop(pending);
    handles_cuda::exec::clear_notifiers();
    assert_eq!(EventHandle::live_count().unwrap(), before);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn completions_dropped_after_clear_notifiers_and_a_new_table() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    handles_cuda::exec::clear_notifiers();
    let before = EventHandle::live_count().unwrap();
    let open = gate(&stream);
    let event = EventHandle::create(&context, EventFlags::default()).unwrap();
    event.record(&stream).unwrap();
    let first = event.completed().unwrap();
    open.store(true, Ordering::SeqCst);
    stream.synchronize().unwrap();
    // Cleared while `first` is alive (its host function ran), then a new table entry.
    handles_cuda::exec::clear_notifiers();
    let open = gate(&stream);
    event.record(&stream).unwrap();
    let second = event.completed().unwrap();
    drop(first);
    open.store(true, Ordering::SeqCst);
    block_on(second);
    drop(event);
    stream.synchronize().unwrap();
    handles_cuda::exec::clear_notifiers();
    assert_eq!(EventHandle::live_count().unwrap(), before);
    failures.assert_none();
}

/// A graph with one captured launch of `scale` over a full-device grid, cooperative or not.
fn one_launch(
    context: &ContextHandle,
    kernel: &TypedKernel<Scale>,
    xs: &DeviceBuffer<f32>,
    config: &LaunchConfig,
    cooperative: bool,
) -> GraphHandle {
    let options = LaunchOptions {
        cooperative,
        ..LaunchOptions::default()
    };
    let n = xs.len() as u32;
    GraphHandle::capture(context, CaptureMode::ThreadLocal, |capture| {
        capture.launch_ex(kernel, config, &options, (xs, n, 2.0))
    })
    .unwrap()
}

fn full_grid(kernel: &TypedKernel<Scale>, context: &ContextHandle) -> (LaunchConfig, u32) {
    let per_sm = kernel
        .kernel()
        .max_active_blocks_per_sm(context, 256, 0, OccupancyFlags::Default)
        .unwrap();
    let sms = Device::new(0)
        .unwrap()
        .properties()
        .unwrap()
        .multiprocessor_count;
    let blocks = per_sm * sms;
    (
        LaunchConfig {
            grid: [blocks, 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
        },
        blocks * 256,
    )
}

fn expect_cooperative_refusal(what: &str, result: handles_cuda::Result<()>) {
    match result {
        Err(Error::BadLaunch {
            what: LaunchProblem::CooperativeGraph { .. },
        }) => {}
        other => panic!("{what}: expected a CooperativeGraph refusal, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cooperative_graphs_by_update_and_nested_children_on_a_small_green_context() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernel = scale_kernel();
    let (config, n) = full_grid(&kernel, &context);
    let xs = DeviceBuffer::from_slice(&vec![1.0f32; n as usize], &stream).unwrap();
    let plain = one_launch(&context, &kernel, &xs, &config, false);
    let cooperative = one_launch(&context, &kernel, &xs, &config, true);
    let green = GreenContextHandle::create(0, 16).unwrap();
    let green_stream = green.create_stream(0).unwrap();
    // Non-cooperative exec, updated to the cooperative graph.
    let exec = plain.instantiate().unwrap();
    exec.launch(&green_stream).unwrap();
    match exec.update(&cooperative) {
        Ok(()) => expect_cooperative_refusal("after update", exec.launch(&green_stream)),
        Err(error) => println!("update to cooperative refused: {error}"),
    }
    // And back: the need goes with the cooperative node.
    exec.update(&plain).unwrap();
    exec.launch(&green_stream).unwrap();
    // Nested children: grandparent -> parent -> cooperative.
    let parent = GraphHandle::create(&context).unwrap();
    parent.add_child_graph_node(&[], &cooperative).unwrap();
    let grandparent = GraphHandle::create(&context).unwrap();
    grandparent.add_child_graph_node(&[], &parent).unwrap();
    let grand_exec = grandparent.instantiate().unwrap();
    expect_cooperative_refusal("grandchild", grand_exec.launch(&green_stream));
    // An exec of a plain grandparent updated to the cooperative one.
    let plain_parent = GraphHandle::create(&context).unwrap();
    plain_parent.add_child_graph_node(&[], &plain).unwrap();
    let plain_grand = GraphHandle::create(&context).unwrap();
    plain_grand
        .add_child_graph_node(&[], &plain_parent)
        .unwrap();
    let exec2 = plain_grand.instantiate().unwrap();
    match exec2.update(&grandparent) {
        Ok(()) => {
            expect_cooperative_refusal("grandchild after update", exec2.launch(&green_stream))
        }
        Err(error) => println!("update of grandparent refused: {error}"),
    }
    // The per-thread default stream and a stream of the green context made by legacy_in.
    let green_context = green.context().unwrap();
    let coop_exec = cooperative.instantiate().unwrap();
    green_context.bind_to_thread().unwrap();
    let per_thread = coop_exec.launch(&StreamHandle::per_thread());
    let legacy_in = StreamHandle::legacy_in(&green_context).map(|s| coop_exec.launch(&s));
    ContextHandle::unbind_thread().unwrap();
    // A green context has no per-thread default stream (driver 580 answers
    // CUDA_ERROR_INVALID_HANDLE for it): refused before the driver, with a typed error.
    assert!(
        matches!(per_thread, Err(Error::WrongContext { .. })),
        "per-thread default stream in a green context: {per_thread:?}"
    );
    match legacy_in {
        Ok(result) => expect_cooperative_refusal("legacy_in(green)", result),
        Err(error) => println!("legacy_in(green) refused: {error}"),
    }
    // From another thread with the green context current via run().
    let on_run = green_context.run(|| coop_exec.launch(&StreamHandle::legacy()));
    expect_cooperative_refusal("run(legacy)", on_run);
    green_stream.synchronize().unwrap();
    // Buffers dropped before the graph launch that uses them: the graph keeps them.
    drop(xs);
    coop_exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    drop((
        exec,
        exec2,
        grand_exec,
        coop_exec,
        green_stream,
        green_context,
        green,
    ));
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "review23b",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
