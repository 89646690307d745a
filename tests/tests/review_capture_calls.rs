//! Calls the crate makes on streams outside a capture while the capture's closure runs: driver
//! 580 refuses a free, an allocation, a query or a wait there (and invalidates the capture)
//! unless the calling thread is in relaxed capture mode (an H100:
//! `cuda-sim/probes/capture_side_calls.py`). Each test makes one such call inside a closure of
//! every capture mode; the capture must succeed and nothing may be reported or leaked.
//! `on_the_simulator` runs them on the simulated driver, which refuses those calls as the H100
//! did.

mod simulator;

use handles_cuda::code::LaunchConfig;
use handles_cuda::exec::StreamRecycler;
use handles_cuda::graph::{Capture, CaptureMode, GraphHandle};
use handles_cuda::{ContextHandle, DevicePtrHandle, StreamFlags, StreamHandle};
use handles_tests::{Failures, serial, stream};

const MODES: [CaptureMode; 3] = [
    CaptureMode::Global,
    CaptureMode::ThreadLocal,
    CaptureMode::Relaxed,
];

/// Captures two memsets of a buffer around `between`, in every mode, launches the graph, and
/// checks that the capture succeeded and nothing was reported.
fn around(
    what: &str,
    mut between: impl FnMut(&ContextHandle, &StreamHandle) -> handles_cuda::Result<()>,
) {
    around_each(
        what,
        |_| (),
        |(), context, outer| between(context, outer),
        |(), _| {},
    );
}

/// [`around`] with a state made before each mode's capture (`setup`), handed to `between`
/// inside the closure and to `check` once that mode's graph ran and the queued releases are
/// done.
fn around_each<S>(
    what: &str,
    mut setup: impl FnMut(&ContextHandle) -> S,
    mut between: impl FnMut(&mut S, &ContextHandle, &StreamHandle) -> handles_cuda::Result<()>,
    mut check: impl FnMut(S, CaptureMode),
) {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let outer = stream(&context);
    let target = DevicePtrHandle::alloc_async(1024, &outer).unwrap();
    outer.synchronize().unwrap();
    for mode in MODES {
        let mut state = setup(&context);
        let graph = GraphHandle::capture(&context, mode, |capture: &Capture| {
            capture.memset(&target, 0, 7, 1024)?;
            between(&mut state, &context, &outer)?;
            capture.memset(&target, 0, 9, 1024)
        })
        .unwrap_or_else(|error| panic!("{what}, {mode:?}: the capture failed: {error}"));
        let exec = graph.instantiate().unwrap();
        exec.launch(&outer).unwrap();
        outer.synchronize().unwrap();
        assert!(handles_cuda::exec::flush_disposals(
            std::time::Duration::from_secs(10)
        ));
        check(state, mode);
    }
    drop(target);
    outer.synchronize().unwrap();
    assert!(handles_cuda::exec::flush_disposals(
        std::time::Duration::from_secs(10)
    ));
    failures.assert_none();
}

/// Memory allocated from a pool on an outer stream inside the closure, and freed there.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_allocation_on_an_outer_stream_inside_a_capture_breaks_nothing() {
    around("an outer allocation", |_, outer| {
        // Work queued on the outer stream is refused there (it would be left out of the
        // graph); the allocation and the free are not.
        drop(DevicePtrHandle::alloc_async(256, outer)?);
        Ok(())
    });
}

/// Pinned host memory used on an outer stream before the capture, dropped inside the closure:
/// its release waits for that use.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_memory_dropped_inside_a_capture_breaks_nothing() {
    let context = ContextHandle::primary(0).unwrap();
    let work = stream(&context);
    let mut pinned: Vec<_> = (0..3)
        .map(|_| {
            let host = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
            host.memset_async(3, 4096, &work).unwrap();
            Some(host)
        })
        .collect();
    let mut next = pinned.iter_mut();
    around("pinned memory dropped", |_, _| {
        drop(next.next().and_then(Option::take));
        Ok(())
    });
    work.synchronize().unwrap();
}

/// Pinned host memory a launched graph used (which notes the graph's context, not a stream),
/// dropped inside the closure: its release waits for that context after the capture.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_memory_a_graph_used_dropped_inside_a_capture_breaks_nothing() {
    let context = ContextHandle::primary(0).unwrap();
    let work = stream(&context);
    let mut pinned: Vec<_> = (0..3)
        .map(|_| {
            let host = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
            let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
                capture.memset(&host, 0, 3, 4096)
            })
            .unwrap();
            graph.instantiate().unwrap().launch(&work).unwrap();
            Some(host)
        })
        .collect();
    let mut next = pinned.iter_mut();
    around("pinned memory a graph used dropped", |_, _| {
        drop(next.next().and_then(Option::take));
        Ok(())
    });
    work.synchronize().unwrap();
}

/// Synchronous device memory used on an outer stream before the capture, dropped inside the
/// closure: its release synchronises the context it was used in, which would invalidate the
/// capture, so it runs on the disposal thread once the capture has ended.
#[test]
#[ignore = "needs a CUDA GPU"]
fn synchronous_memory_dropped_inside_a_capture_breaks_nothing() {
    let context = ContextHandle::primary(0).unwrap();
    let work = stream(&context);
    let (free_before, _) = context.mem_get_info().unwrap();
    let mut buffers: Vec<_> = (0..3)
        .map(|_| {
            let buffer = DevicePtrHandle::alloc(&context, 64 << 20).unwrap();
            buffer.memset_async(3, 64 << 20, &work).unwrap();
            Some(buffer)
        })
        .collect();
    let mut next = buffers.iter_mut();
    around("synchronous memory dropped", |_, _| {
        drop(next.next().and_then(Option::take));
        Ok(())
    });
    // `around` flushed the disposal thread: every buffer is back.
    let (free_after, _) = context.mem_get_info().unwrap();
    assert!(
        free_after + (32 << 20) >= free_before,
        "the buffers were not freed: {free_before} bytes free before, {free_after} after"
    );
}

/// Memory refused inside the closure while memory dropped there waits for the capture to end
/// (its free synchronises a context): the refusal is returned at once, rather than after
/// waiting for a release that only the end of this very capture lets run.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_refusal_for_memory_inside_a_capture_is_returned_at_once() {
    struct Refusal {
        size: usize,
        big: Option<DevicePtrHandle>,
        waited: Option<(
            std::time::Duration,
            Option<handles_cuda::driver::sys::CUresult>,
        )>,
    }
    around_each(
        "a refusal for memory",
        |context| {
            let (free, _) = context.mem_get_info().unwrap();
            // More than half of what is free: the second is refused while the first is held.
            let size = free / 10 * 6;
            Refusal {
                size,
                big: Some(DevicePtrHandle::alloc(context, size).unwrap()),
                waited: None,
            }
        },
        |refusal, _, outer| {
            drop(refusal.big.take());
            let asked = std::time::Instant::now();
            let refused = DevicePtrHandle::alloc_async(refusal.size, outer).map(drop);
            refusal.waited = Some((
                asked.elapsed(),
                refused.err().and_then(|error| error.code()),
            ));
            Ok(())
        },
        |refusal, mode| {
            let (waited, code) = refusal.waited.expect("the closure ran");
            assert_eq!(
                code,
                Some(handles_cuda::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY),
                "{mode:?}: the second allocation"
            );
            assert!(
                waited < std::time::Duration::from_millis(500),
                "{mode:?}: the refusal came after {waited:?}"
            );
        },
    );
}

/// A library whose kernel ran on an outer stream, unloaded inside the closure: its unload
/// waits for that context too, after the capture.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_library_unloaded_inside_a_capture_breaks_nothing() {
    let context = ContextHandle::primary(0).unwrap();
    let work = stream(&context);
    let buffer = DevicePtrHandle::alloc_async(4096, &work).unwrap();
    let mut libraries: Vec<_> = (0..3)
        .map(|_| {
            let kernels = handles_tests::kernels::TestKernels::load().unwrap();
            kernels
                .fill
                .launch(&work, &LaunchConfig::linear(1024, 256), (&buffer, 5, 1024))
                .unwrap();
            Some(kernels)
        })
        .collect();
    let mut next = libraries.iter_mut();
    around("a library unloaded", |_, _| {
        drop(next.next().and_then(Option::take));
        Ok(())
    });
    assert_eq!(
        handles_tests::kernels::read_words(&buffer, &work),
        vec![5; 1024]
    );
}

/// A recycled stream acquired inside the closure (its cached stream is asked whether its work
/// ran).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recycled_stream_acquired_inside_a_capture_breaks_nothing() {
    let context = ContextHandle::primary(0).unwrap();
    let recycler = StreamRecycler::new(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    drop(recycler.acquire().unwrap());
    around("a recycled stream", |_, _| {
        let recycled = recycler.acquire()?;
        drop(recycled);
        Ok(())
    });
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "review_capture_calls",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
