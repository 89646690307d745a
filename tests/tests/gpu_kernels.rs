//! GPU tests of libraries, kernels, launches and graphs. They need a CUDA GPU and are ignored by
//! default (run them with `--include-ignored`); `on_the_simulator` runs them all again on the
//! simulated driver, which knows the test kernels. None of them returns early.

use handles_cuda::{
    ContextHandle, DeviceBuffer, DevicePtrHandle, Error, KernelHandle, LaunchConfig, LaunchProblem,
    LibraryHandle, MemoryPoolHandle, PoolProps, StreamHandle,
    code::{Buffer, Elements, KernelAttribute, LaunchOptions, ProgramHandle, check},
    graph::{CaptureMode, GraphHandle},
    memory::AllocKind,
};
use handles_tests::kernels::{PTX, TestKernels, read_words, words};
use handles_tests::{Failures, serial, stream};

mod simulator;

/// Asserts that `$result` is an error matching `$pattern` (a variant of `Error`).
macro_rules! refused {
    ($result:expr, $pattern:pat) => {
        match $result {
            Err($pattern) => {}
            other => panic!("expected {}, got {other:?}", stringify!($pattern)),
        }
    };
}

/// An error of a kernel's own bounds check (the test kernels' checks return `InvalidArgument`).
fn invalid(result: handles_cuda::Result<()>, needle: &str) {
    match result {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains(needle), "{needle:?} not in {message:?}")
        }
        other => panic!("expected an InvalidArgument error about {needle:?}, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_fills_a_buffer_and_is_registered_with_its_attributes() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    assert_eq!(kernels.library.kernel_count().unwrap(), 5);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 1024 * 4, &stream).unwrap();
    kernels
        .fill
        .launch(
            &stream,
            &LaunchConfig::linear(1024, 128),
            (&buffer, 7, 1024),
        )
        .unwrap();
    kernels
        .add
        .launch(
            &stream,
            &LaunchConfig::linear(1000, 256),
            (&buffer, 5, 1000),
        )
        .unwrap();
    let values = read_words(&buffer, &stream);
    assert!(
        values[..1000].iter().all(|&v| v == 12),
        "{:?}",
        &values[..8]
    );
    assert!(values[1000..].iter().all(|&v| v == 7));

    // One raw kernel, one registered handle.
    let again = KernelHandle::get(&kernels.library, "fill_u32").unwrap();
    assert!(again.ptr_eq(kernels.fill.kernel()));
    let found = KernelHandle::lookup(again.as_cu()).expect("the kernel is registered");
    assert!(found.ptr_eq(&again));
    assert_eq!(found.name(), "fill_u32");
    assert_eq!(found.param_sizes().as_deref(), Some(&[8, 4, 4][..]));
    // An unknown name names itself and, from the PTX, the kernels there are.
    let unknown = KernelHandle::get(&kernels.library, "no_such_kernel").unwrap_err();
    match &unknown {
        Error::KernelNotFound { name, known } => {
            assert_eq!(name, "no_such_kernel");
            assert_eq!(
                known,
                &["fill_u32", "add_u32", "copy_u32", "add_one", "spin"]
            );
        }
        other => panic!("expected KernelNotFound, got {other:?}"),
    }
    assert!(unknown.to_string().contains("extern \"C\""), "{unknown}");

    let threads = again
        .attribute(KernelAttribute::MaxThreadsPerBlock, 0)
        .unwrap();
    assert!((1..=1024).contains(&threads), "{threads}");
    assert!(again.attribute(KernelAttribute::NumRegs, 0).unwrap() >= 0);
    again
        .set_attribute(KernelAttribute::MaxDynamicSharedSizeBytes, 65536, 0)
        .unwrap();
    assert_eq!(
        again
            .attribute(KernelAttribute::MaxDynamicSharedSizeBytes, 0)
            .unwrap(),
        65536
    );
    // The launch check follows the new limit.
    let mut config = LaunchConfig::linear(32, 32);
    config.shared_mem_bytes = 65536;
    kernels
        .fill
        .launch(&stream, &config, (&buffer, 1, 32))
        .unwrap();
    stream.synchronize().unwrap();
    failures.assert_none();
}

/// The README's first kernel example (`add_one` from the checked-in PTX, declared with a
/// ready-made check and no closure): an out-of-bounds launch is refused with a variant that
/// names the kernel and the parameter, on a stream and in a capture, and nothing runs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_readme_kernel_refuses_an_out_of_bounds_launch() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = StreamHandle::new(&context).unwrap();
    let library = LibraryHandle::load_ptx(PTX).unwrap();
    let kernel = KernelHandle::get(&library, "add_one").unwrap();
    // SAFETY: add_one(data, n) adds 1 to data[i] for i < n only: what `per_thread(1, [0])`
    // covers.
    let add_one =
        unsafe { kernel.checked::<(Elements<u32>, u32)>(check::per_thread(1, [0])) }.unwrap();
    let data = DeviceBuffer::<u32>::zeroed(4096, &stream).unwrap();
    let config = LaunchConfig::for_elements(data.len(), 256).unwrap();
    add_one.launch(&stream, &config, (&data, 4096)).unwrap();
    refused!(
        add_one.launch(&stream, &config, (&data, 4097)),
        Error::OutOfBounds {
            param: 0,
            needed: 4097,
            len: 4096,
            ..
        }
    );
    let refusal = add_one
        .launch(&stream, &config, (&data, u32::MAX))
        .unwrap_err();
    assert_eq!(
        refusal,
        Error::OutOfBounds {
            kernel: "add_one".into(),
            param: 0,
            needed: u64::from(u32::MAX),
            len: 4096
        }
    );
    // A view of the first half holds 2048 elements.
    let half = data.slice(0..2048).unwrap();
    refused!(
        add_one.launch(&stream, &config, (&half, 2049)),
        Error::OutOfBounds {
            needed: 2049,
            len: 2048,
            ..
        }
    );
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        refused!(
            capture.launch(&add_one, &config, (&data, 5000)),
            Error::OutOfBounds { len: 4096, .. }
        );
        capture.launch(&add_one, &config, (&data, 4096))
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(
        data.to_vec(&stream).unwrap(),
        vec![2; 4096],
        "only in-bounds launches ran"
    );
    drop((exec, graph));
    failures.assert_none();
}

/// Each ready-made rule refuses what it does not cover, with the values involved; a rule that
/// names a parameter for what it is not is refused when the kernel is declared; rules compose,
/// and hand-written parts get the kernel's name in their refusals.
#[test]
#[ignore = "needs a CUDA GPU"]
fn ready_made_checks_refuse_what_they_do_not_cover() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let library = LibraryHandle::load_ptx(PTX).unwrap();
    let fill = KernelHandle::get(&library, "fill_u32").unwrap();
    type Fill = (Elements<u32>, u32, u32);
    // Declarations that name parameters for what they are not.
    let bad = |check: check::Check<Fill>| {
        // SAFETY: refused before any launch (the declarations below are all wrong).
        unsafe { fill.checked::<Fill>(check) }.map(drop)
    };
    refused!(
        bad(check::per_thread(0, [0])),
        Error::BadCheck { param: 0, .. }
    );
    refused!(
        bad(check::per_thread(2, [1])),
        Error::BadCheck { param: 1, .. }
    );
    refused!(
        bad(check::per_thread(2, [3])),
        Error::BadCheck { param: 3, .. }
    );
    // SAFETY: refused before any launch: a `Buffer` has no element count.
    let untyped = unsafe { fill.checked::<(Buffer, u32, u32)>(check::per_thread(2, [0])) };
    match untyped.map(drop) {
        Err(Error::BadCheck {
            kernel, param: 0, ..
        }) => assert_eq!(kernel, "fill_u32"),
        other => panic!("expected BadCheck, got {other:?}"),
    }
    // SAFETY: fill_u32(dst, value, n) writes dst[i] for i < n only (per_thread(2, [0])); the
    // other rules only refuse more launches (one element per block, per thread, and shared
    // memory the kernel does not use).
    let strict = unsafe {
        fill.checked::<Fill>(
            check::per_thread(2, [0])
                .and(check::per_block([0]))
                .and(check::elements_per_thread(1, [0]))
                .and(check::shared_per_thread(4)),
        )
    }
    .unwrap();
    let buffer = DeviceBuffer::<u32>::zeroed(1000, &stream).unwrap();
    // 1024 threads over 1000 elements: elements_per_thread refuses (the kernel itself is fine).
    refused!(
        strict.launch(
            &stream,
            &LaunchConfig::for_elements(1000, 256)
                .unwrap()
                .with_shared_mem(1024),
            (&buffer, 7, 1000)
        ),
        Error::OutOfBounds {
            param: 0,
            needed: 1024,
            len: 1000,
            ..
        }
    );
    // 250 blocks of 4 threads: 250 blocks fit, 1000 threads fit; shared memory of 16 bytes
    // per block is 4 per thread.
    let four = LaunchConfig::for_elements(1000, 4).unwrap();
    match strict.launch(&stream, &four, (&buffer, 7, 1000)) {
        Err(Error::SharedOutOfBounds {
            kernel,
            needed: 16,
            bytes: 0,
        }) => assert_eq!(kernel, "fill_u32"),
        other => panic!("expected SharedOutOfBounds, got {other:?}"),
    }
    strict
        .launch(&stream, &four.with_shared_mem(16), (&buffer, 7, 1000))
        .unwrap();
    assert_eq!(buffer.to_vec(&stream).unwrap(), vec![7; 1000]);
    // Count::Threads: a kernel with no guard touches one element per thread.
    // SAFETY: fill_u32 writes dst[i] for i < n, and i < the launch's threads: covered by a
    // buffer of at least as many elements as threads.
    let per_thread =
        unsafe { fill.checked::<Fill>(check::per_thread(check::Count::Threads, [0])) }.unwrap();
    refused!(
        per_thread.launch(
            &stream,
            &LaunchConfig::for_elements(1001, 1).unwrap(),
            (&buffer, 1, 5)
        ),
        Error::OutOfBounds {
            needed: 1001,
            len: 1000,
            ..
        }
    );
    // A hand-written part: its refusal gets the kernel's name.
    // SAFETY: the custom part keeps n within dst, and fill_u32 writes dst[i] for i < n only.
    let custom = unsafe {
        fill.checked::<Fill>(check::custom(
            |(dst, _, n): &(&DeviceBuffer<u32>, u32, u32), _| {
                if (*n as usize) <= dst.len() {
                    Ok(())
                } else {
                    Err(check::out_of_bounds(0, u64::from(*n), dst.len()))
                }
            },
        ))
    }
    .unwrap();
    assert_eq!(
        custom
            .launch(
                &stream,
                &LaunchConfig::linear(2000, 256),
                (&buffer, 1, 2000)
            )
            .unwrap_err(),
        Error::OutOfBounds {
            kernel: "fill_u32".into(),
            param: 0,
            needed: 2000,
            len: 1000
        }
    );
    custom
        .launch(
            &stream,
            &LaunchConfig::linear(1000, 256),
            (&buffer, 3, 1000),
        )
        .unwrap();
    assert_eq!(buffer.to_vec(&stream).unwrap(), vec![3; 1000]);
    failures.assert_none();
}

/// `LaunchConfig` from a `usize` count, with a checked conversion, and a shared-memory setter.
#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_configs_come_from_element_counts() {
    let config = LaunchConfig::for_elements(1000, 256).unwrap();
    assert_eq!((config.grid, config.block), ([4, 1, 1], [256, 1, 1]));
    assert_eq!(LaunchConfig::for_elements(0, 32).unwrap().grid, [1, 1, 1]);
    refused!(
        LaunchConfig::for_elements(usize::MAX, 1024),
        Error::BadLaunch {
            what: LaunchProblem::TooManyElements { block: 1024, .. }
        }
    );
    refused!(
        LaunchConfig::for_elements(1 << 31, 1),
        Error::BadLaunch {
            what: LaunchProblem::TooManyElements { .. }
        }
    );
    refused!(
        LaunchConfig::for_elements(10, 0),
        Error::BadLaunch {
            what: LaunchProblem::Block { threads: 0, .. }
        }
    );
    refused!(
        LaunchConfig::for_elements(10, 2048),
        Error::BadLaunch {
            what: LaunchProblem::Block { threads: 2048, .. }
        }
    );
    assert_eq!(config.with_shared_mem(4096).shared_mem_bytes, 4096);
    assert_eq!(
        config.with_shared_mem(usize::MAX).shared_mem_bytes,
        u32::MAX
    );
    // A launch with more shared memory than the kernel may have is refused before the driver.
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = StreamHandle::new(&context).unwrap();
    let kernels = TestKernels::load().unwrap();
    let buffer = DevicePtrHandle::alloc(&context, 64).unwrap();
    refused!(
        kernels.fill.launch(
            &stream,
            &LaunchConfig::linear(16, 16).with_shared_mem(usize::MAX),
            (&buffer, 0, 16)
        ),
        Error::BadLaunch {
            what: LaunchProblem::SharedMemory {
                bytes: u32::MAX,
                ..
            }
        }
    );
    stream.synchronize().unwrap();
}

/// Inside a capture's closure, work on a stream other than the capture's is refused with a
/// typed error instead of running at once outside the graph; the capture's own work, and
/// allocations and frees on outer streams, go ahead; other threads are not affected.
#[test]
#[ignore = "needs a CUDA GPU"]
fn outer_stream_work_inside_a_capture_is_refused() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let data = DevicePtrHandle::alloc_async(256 * 4, &stream).unwrap();
    data.memset_async(0, 256 * 4, &stream).unwrap();
    stream.synchronize().unwrap();
    let config = LaunchConfig::linear(256, 128);
    // Thread-local: the other thread below is then outside the driver's own capture rules too,
    // and what is refused here is this crate's refusal (it does not depend on the mode).
    let graph = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        refused!(
            kernels.add_one.launch(&stream, &config, (&data, 256)),
            Error::OutsideCapture
        );
        refused!(data.memset_async(0, 4, &stream), Error::OutsideCapture);
        refused!(stream.launch_host(|| {}), Error::OutsideCapture);
        // Another thread's work is its own.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let other = handles_tests::stream(&context);
                    let mine = DevicePtrHandle::alloc_async(64, &other).unwrap();
                    mine.memset_async(0, 64, &other).unwrap();
                    other.synchronize().unwrap();
                })
                .join()
                .unwrap();
        });
        capture.launch(&kernels.add_one, &config, (&data, 256))
    })
    .unwrap();
    // An allocation on the outer stream is not work of the graph, and goes ahead: the driver
    // refuses it while this thread captures outside relaxed mode (measured on the H200 and an
    // H100, driver 580: a "potentially unsafe" call, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    // which invalidates the capture), so the crate makes it in relaxed mode; the capture goes on.
    let ended = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        let scratch = DevicePtrHandle::alloc_async(64, &stream)?;
        drop(scratch);
        capture.launch(&kernels.add_one, &config, (&data, 256))
    });
    assert!(ended.is_ok(), "the capture ended: {:?}", ended.err());
    drop(ended);
    // Nothing of the refused work ran, and the closure's end lifts the refusal.
    assert_eq!(read_words(&data, &stream), vec![0; 256]);
    kernels
        .add_one
        .launch(&stream, &config, (&data, 256))
        .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(read_words(&data, &stream), vec![3; 256]);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_launches_are_refused_before_the_driver() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let buffer = DevicePtrHandle::alloc(&context, 64 * 4).unwrap();
    // New memory holds whatever it held before: zero it, so that any launch that ran shows.
    buffer.memset_async(0, 64 * 4, &stream).unwrap();
    let fill =
        |config: LaunchConfig, n: u32| kernels.fill.launch(&stream, &config, (&buffer, 1, n));
    let mut config = LaunchConfig::linear(64, 64);
    config.grid[1] = 0;
    refused!(
        fill(config, 64),
        Error::BadLaunch {
            what: LaunchProblem::Grid {
                axis: 'y',
                blocks: 0,
                ..
            }
        }
    );
    let mut config = LaunchConfig::linear(64, 64);
    config.block = [2048, 1, 1];
    refused!(
        fill(config, 64),
        Error::BadLaunch {
            what: LaunchProblem::Block {
                axis: 'x',
                threads: 2048,
                limit: 1024
            }
        }
    );
    let mut config = LaunchConfig::linear(64, 64);
    config.block = [32, 32, 2];
    refused!(
        fill(config, 64),
        Error::BadLaunch {
            what: LaunchProblem::ThreadsPerBlock { threads: 2048, .. }
        }
    );
    let mut config = LaunchConfig::linear(64, 64);
    config.shared_mem_bytes = 1 << 30;
    refused!(
        fill(config, 64),
        Error::BadLaunch {
            what: LaunchProblem::SharedMemory {
                bytes: 0x4000_0000,
                ..
            }
        }
    );
    // The kernel's own bounds check: 65 elements do not fit in 64.
    invalid(fill(LaunchConfig::linear(65, 64), 65), "do not fit");
    // Clusters must divide the grid and stay portable.
    let options = LaunchOptions {
        cluster: Some([3, 1, 1]),
        ..LaunchOptions::default()
    };
    refused!(
        kernels.fill.launch_ex(
            &stream,
            &LaunchConfig::linear(64, 16),
            &options,
            (&buffer, 1, 64),
        ),
        Error::BadLaunch {
            what: LaunchProblem::ClusterDivide {
                axis: 'x',
                size: 3,
                blocks: 4
            }
        }
    );
    // A parameter list that does not match the kernel's.
    // SAFETY: never launched: the mismatch is refused before a value is returned.
    let typed = unsafe { kernels.fill.kernel().typed::<(u32,)>(|_, _| Ok(())) };
    match typed.map(drop) {
        Err(Error::ParamMismatch {
            expected, found, ..
        }) => assert_eq!((expected, found), (vec![8, 4, 4], vec![4])),
        other => panic!("expected a ParamMismatch, got {other:?}"),
    }
    // Images that would make the driver read past them.
    refused!(
        LibraryHandle::load_data(b"\x7fELF\x02\x01\x01").map(drop),
        Error::BadImage { .. }
    );
    // Bad PTX: with lazy loading the driver may accept the image and report the error when a
    // kernel is first looked up; either way it is an error, never a crash.
    let broken = LibraryHandle::load_ptx(".version 7.0\n.target sm_52\nthis is not ptx")
        .and_then(|library| KernelHandle::get(&library, "fill_u32").map(drop))
        .unwrap_err();
    assert!(matches!(broken, Error::Driver { .. }), "{broken}");
    stream.synchronize().unwrap();
    let values = read_words(&buffer, &stream);
    assert!(values.iter().all(|&v| v == 0), "no refused launch ran");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_on_another_stream_is_ordered_before_the_free() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let (home, other) = (stream(&context), stream(&context));
    let kernels = TestKernels::load().unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    for round in 0..20u32 {
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096 * 4, &home).unwrap();
        // Keep `other` busy, so that an unordered free would overtake the kernels.
        kernels
            .spin
            .launch(&other, &LaunchConfig::linear(1, 1), (200_000,))
            .unwrap();
        kernels
            .fill
            .launch(
                &other,
                &LaunchConfig::linear(4096, 256),
                (&buffer, round, 4096),
            )
            .unwrap();
        drop(buffer);
        // The next allocation may get the same memory: it must not see the fill land later.
        let next = DevicePtrHandle::alloc_from_pool(&pool, 4096 * 4, &home).unwrap();
        next.memset_async(0, 4096 * 4, &home).unwrap();
        other.synchronize().unwrap();
        let values = read_words(&next, &home);
        assert!(
            values.iter().all(|&v| v == 0),
            "round {round}: the fill overtook the free"
        );
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_view_passes_part_of_a_buffer_and_keeps_the_buffer() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 16 * 4, &stream).unwrap();
    buffer.memset_async(0, 16 * 4, &stream).unwrap();
    let view = buffer.view(4 * 4, 8 * 4).unwrap();
    assert_eq!(view.kind(), AllocKind::View);
    assert_eq!(view.as_cu(), buffer.as_cu() + 16);
    assert!(
        buffer.view(15 * 4, 8).is_err(),
        "a view must lie inside its buffer"
    );
    invalid(
        kernels
            .fill
            .launch(&stream, &LaunchConfig::linear(9, 32), (&view, 3, 9)),
        "do not fit",
    );
    drop(buffer);
    kernels
        .fill
        .launch(&stream, &LaunchConfig::linear(8, 32), (&view, 3, 8))
        .unwrap();
    let mut bytes = vec![0u8; 8 * 4];
    view.copy_to_host(&mut bytes, &stream).unwrap();
    assert_eq!(words(&bytes), vec![3; 8]);
    // The view's uses order the whole buffer's free: it is freed only after the view drops.
    let whole = view.view(0, 4).unwrap();
    drop(view);
    assert_eq!(whole.size(), 4);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_library_dropped_while_its_kernel_runs_is_unloaded_after_it() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let buffer = DevicePtrHandle::alloc(&context, 256 * 4).unwrap();
    {
        let kernels = TestKernels::load().unwrap();
        kernels
            .spin
            .launch(&stream, &LaunchConfig::linear(1, 1), (20_000_000,))
            .unwrap();
        kernels
            .fill
            .launch(&stream, &LaunchConfig::linear(256, 256), (&buffer, 9, 256))
            .unwrap();
        // The last handles of the kernels and the library drop here, kernels still queued.
    }
    assert!(stream.query().unwrap(), "the unload waited for the kernels");
    assert_eq!(read_words(&buffer, &stream), vec![9; 256]);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_graph_keeps_what_it_uses_alive() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let out = DevicePtrHandle::alloc_from_pool(&pool, 512 * 4, &stream).unwrap();
    let exec = {
        let kernels = TestKernels::load().unwrap();
        let scratch = DevicePtrHandle::alloc_from_pool(&pool, 512 * 4, &stream).unwrap();
        stream.synchronize().unwrap();
        let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
            capture.memset(&scratch, 0, 0, 512 * 4)?;
            capture.launch(
                &kernels.fill,
                &LaunchConfig::linear(512, 128),
                (&scratch, 40, 512),
            )?;
            capture.launch(
                &kernels.add,
                &LaunchConfig::linear(512, 128),
                (&scratch, 2, 512),
            )?;
            capture.launch(
                &kernels.copy,
                &LaunchConfig::linear(512, 128),
                (&out, &scratch, 512),
            )
        })
        .unwrap();
        assert!(
            graph.attachment_count() >= 5,
            "{}",
            graph.attachment_count()
        );
        graph.instantiate().unwrap()
        // The graph, the kernels, their library and the scratch buffer drop here.
    };
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    assert_eq!(read_words(&out, &stream), vec![42; 512]);
    drop(exec);
    stream.synchronize().unwrap();
    // A capture whose closure fails leaves no graph and no capturing stream behind.
    let failed = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        capture.memset(&out, 0, 1, 8)?;
        capture.memset(&out, 512 * 4, 1, 8)
    });
    assert!(failed.is_err());
    // A capture whose closure panics is ended as the panic passes (a stream must not stay
    // capturing), and the next capture works.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
            capture.memset(&out, 0, 1, 8)?;
            panic!("the capture closure panicked")
        })
    }));
    assert!(panicked.is_err());
    let again = GraphHandle::capture(&context, CaptureMode::ThreadLocal, |capture| {
        capture.memset(&out, 0, 1, 8)
    });
    assert!(again.is_ok());
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_executable_graph_alone_replays_a_thousand_times() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let out = DevicePtrHandle::alloc_from_pool(&pool, 1000 * 4, &stream).unwrap();
    let exec = {
        let kernels = TestKernels::load().unwrap();
        let counter = DevicePtrHandle::alloc_from_pool(&pool, 1000 * 4, &stream).unwrap();
        counter.memset_async(0, 1000 * 4, &stream).unwrap();
        stream.synchronize().unwrap();
        let config = LaunchConfig::linear(1000, 256);
        let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
            capture.launch(&kernels.add_one, &config, (&counter, 1000))?;
            capture.launch(&kernels.copy, &config, (&out, &counter, 1000))
        })
        .unwrap();
        graph.instantiate().unwrap()
        // Every handle but the executable graph (and the output) drops here: the counter
        // buffer, the kernels, their library, the graph and the pool handle below.
    };
    drop(pool);
    for _ in 0..1000 {
        exec.launch(&stream).unwrap();
    }
    assert_eq!(read_words(&out, &stream), vec![1000; 1000]);
    drop(exec);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn explicit_graph_nodes_run_in_order_and_update_swaps_what_they_keep() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let build = |value: u32, out: &DevicePtrHandle| {
        let graph = GraphHandle::create(&context).unwrap();
        let scratch = DevicePtrHandle::alloc_from_pool(&pool, 256 * 4, &stream).unwrap();
        let cleared = graph.add_memset_node(&[], &scratch, 0, 0, 256 * 4).unwrap();
        let filled = graph
            .add_kernel_node(
                &[cleared],
                &kernels.fill,
                &LaunchConfig::linear(256, 64),
                (&scratch, value, 256),
            )
            .unwrap();
        graph
            .add_copy_node(&[filled], &scratch, 0, out, 0, 256 * 4)
            .unwrap();
        stream.synchronize().unwrap();
        graph
    };
    let (first_out, second_out) = (
        DevicePtrHandle::alloc_from_pool(&pool, 256 * 4, &stream).unwrap(),
        DevicePtrHandle::alloc_from_pool(&pool, 256 * 4, &stream).unwrap(),
    );
    let first = build(11, &first_out);
    let exec = first.instantiate().unwrap();
    drop(first);
    exec.launch(&stream).unwrap();
    assert_eq!(read_words(&first_out, &stream), vec![11; 256]);

    let second = build(22, &second_out);
    exec.update(&second).unwrap();
    drop(second);
    exec.launch(&stream).unwrap();
    assert_eq!(read_words(&second_out, &stream), vec![22; 256]);
    assert_eq!(
        exec.attachment_count(),
        5,
        "kernel, scratch twice, scratch, out"
    );

    // Another topology is refused, and the executable graph keeps working as before.
    let other = GraphHandle::create(&context).unwrap();
    other.add_empty_node(&[]).unwrap();
    assert!(exec.update(&other).is_err());
    exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    // A node of another graph is never a dependency.
    let node = other.add_empty_node(&[]).unwrap();
    let third = GraphHandle::create(&context).unwrap();
    refused!(
        third.add_empty_node(&[node]).map(drop),
        Error::ForeignNode { .. }
    );
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_ex_takes_clusters_and_priorities() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let buffer = DevicePtrHandle::alloc(&context, 1024 * 4).unwrap();
    let options = LaunchOptions {
        cluster: Some([2, 1, 1]),
        priority: Some(0),
        ..LaunchOptions::default()
    };
    kernels
        .fill
        .launch_ex(
            &stream,
            &LaunchConfig::linear(1024, 128),
            &options,
            (&buffer, 4, 1024),
        )
        .unwrap();
    assert_eq!(read_words(&buffer, &stream), vec![4; 1024]);
    assert!(PTX.contains(".entry spin"));
}

#[test]
#[ignore = "needs two CUDA GPUs"]
fn two_gpus_a_kernel_is_refused_memory_its_device_cannot_reach() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let far_pool = MemoryPoolHandle::create(&PoolProps::device(1)).unwrap();
    let far_stream = self::stream(&ContextHandle::primary(1).unwrap());
    let far = DevicePtrHandle::alloc_from_pool(&far_pool, 64 * 4, &far_stream).unwrap();
    let far_sync = DevicePtrHandle::alloc(&ContextHandle::primary(1).unwrap(), 64 * 4).unwrap();
    let config = LaunchConfig::linear(64, 64);
    // Used first on their own device, where their reach is fixed and kept in their records
    // (a view's too): the checks from device 0 below are made all the same.
    let far_view = far.view(0, 32 * 4).unwrap();
    kernels
        .fill
        .launch(&far_stream, &config, (&far, 2, 64))
        .unwrap();
    kernels
        .fill
        .launch(&far_stream, &config, (&far_sync, 2, 64))
        .unwrap();
    let half = LaunchConfig::linear(32, 32);
    kernels
        .fill
        .launch(&far_stream, &half, (&far_view, 2, 32))
        .unwrap();
    far_stream.synchronize().unwrap();
    refused!(
        kernels.fill.launch(&stream, &half, (&far_view, 1, 32)),
        Error::Unreachable {
            device: 0,
            owner: Some(1),
            pool: true
        }
    );
    refused!(
        kernels.fill.launch(&stream, &config, (&far, 1, 64)),
        Error::Unreachable {
            device: 0,
            owner: Some(1),
            pool: true
        }
    );
    refused!(
        kernels.fill.launch(&stream, &config, (&far_sync, 1, 64)),
        Error::Unreachable {
            device: 0,
            owner: Some(1),
            pool: false
        }
    );
    // Once device 0 may access the pool, the launch runs.
    far_pool.set_peer_access(0, true).unwrap();
    kernels
        .fill
        .launch(&stream, &config, (&far, 6, 64))
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(read_words(&far, &far_stream), vec![6; 64]);
}

const SQUARE: &str = r#"
extern "C" __global__ void square_u32(unsigned int *data, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = data[i] * data[i];
}
"#;

#[test]
#[ignore = "needs a CUDA GPU and NVRTC"]
fn nvrtc_compiles_a_kernel_that_runs_and_reports_its_log() {
    let _serial = serial();
    let failures = Failures::watch();
    let (major, _) = handles_cuda::code::nvrtc_version().unwrap();
    assert!(major >= 12, "NVRTC {major}");
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let program = ProgramHandle::new(SQUARE, "square.cu").unwrap();
    program.compile(&["--gpu-architecture=compute_90"]).unwrap();
    let library = LibraryHandle::load_data(&program.ptx().unwrap()).unwrap();
    drop(program);
    let kernel = KernelHandle::get(&library, "square_u32").unwrap();
    // SAFETY: `square_u32(data, n)` touches `n` 32-bit elements, which the check bounds.
    let square = unsafe {
        kernel.typed::<(Buffer, u32)>(|args: &(&DevicePtrHandle, u32), _| {
            if args.1 as usize * 4 <= args.0.size() {
                Ok(())
            } else {
                Err(Error::InvalidArgument("too many elements".into()))
            }
        })
    }
    .unwrap();
    let buffer = DevicePtrHandle::alloc(&context, 300 * 4).unwrap();
    let input: Vec<u8> = (0..300u32).flat_map(|v| v.to_ne_bytes()).collect();
    buffer.copy_from_host(&input, &stream).unwrap();
    square
        .launch(&stream, &LaunchConfig::linear(300, 128), (&buffer, 300))
        .unwrap();
    let expected: Vec<u32> = (0..300u32).map(|v| v * v).collect();
    assert_eq!(read_words(&buffer, &stream), expected);
    // The same program compiled for NVRTC's default architecture loads too.
    let program = ProgramHandle::new(SQUARE, "square.cu").unwrap();
    program.compile(&[]).unwrap();
    let ptx = program.ptx().unwrap();
    assert!(ptx.ends_with(&[0]) && ptx.windows(10).any(|w| w == b"square_u32"));
    LibraryHandle::load_data(&ptx).unwrap();
    // A compile error carries the compiler's log.
    let broken = ProgramHandle::new("__global__ void f() { undeclared(); }", "broken.cu").unwrap();
    match broken.compile(&[]) {
        Err(Error::Nvrtc { call, log, .. }) => {
            assert_eq!(call, "nvrtcCompileProgram");
            assert!(log.contains("undeclared"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    failures.assert_none();
}

/// NVRTC compiles for one GPU's architecture (a cubin: machine code), which loads and runs.
#[test]
#[ignore = "needs a CUDA GPU and NVRTC"]
fn nvrtc_cubin_runs_natively() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let program = ProgramHandle::new(SQUARE, "square.cu").unwrap();
    program.compile(&["--gpu-architecture=sm_90"]).unwrap();
    let library = LibraryHandle::load_data(&program.cubin().unwrap()).unwrap();
    drop(program);
    let kernel = KernelHandle::get(&library, "square_u32").unwrap();
    // SAFETY: `square_u32(data, n)` touches `n` 32-bit elements; 300 fit in the buffer.
    let square = unsafe { kernel.typed::<(Buffer, u32)>(|_, _| Ok(())) }.unwrap();
    let buffer = DevicePtrHandle::alloc(&context, 300 * 4).unwrap();
    let input: Vec<u8> = (0..300u32).flat_map(|v| v.to_ne_bytes()).collect();
    buffer.copy_from_host(&input, &stream).unwrap();
    square
        .launch(&stream, &LaunchConfig::linear(300, 128), (&buffer, 300))
        .unwrap();
    let expected: Vec<u32> = (0..300u32).map(|v| v * v).collect();
    assert_eq!(read_words(&buffer, &stream), expected);
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[(
    "nvrtc_cubin_runs_natively",
    "a cubin is machine code (SASS) for one GPU architecture; the simulator runs PTX, and \
     refuses a cubin with CUDA_ERROR_INVALID_IMAGE (cuda-sim/tests/interpreter.rs)",
)];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_kernels",
        filters: &[],
        skips: &["two_gpus"],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
    simulator::SuiteRun {
        label: "gpu_kernels, 2 devices",
        filters: &["two_gpus"],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 2,
        env: &[],
    }
    .run();
}
