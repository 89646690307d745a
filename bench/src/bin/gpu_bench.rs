//! Raw driver calls, handles-cuda and cudarc's safe layer, interleaved in one process, with
//! medians and ratios to raw. Run on a machine with a GPU:
//! `cargo run --release -p handles-bench --bin gpu_bench` (or `.gpu/gpu_bench` after
//! `scripts/gpu-collect.sh`). Prints a Markdown table; `gpu_bench core` prints only the rows
//! of the handle layer's own costs, `gpu_bench events` only the event create+drop rows, and
//! `gpu_bench calibrate` the raw calls behind each layer's launches and allocations.

use std::sync::Arc;

#[path = "gpu_bench/calibrate.rs"]
mod calibrate;
#[path = "gpu_bench/conditional.rs"]
mod conditional;
#[path = "gpu_bench/contention.rs"]
mod contention;

use cudarc::driver::{CudaContext, PushKernelArg, sys};
use handles_bench::{Measured, Variant, allowed_cpus, interleave, keep, pin_to};
use handles_cuda::{
    ContextHandle, DevicePtrHandle, EventHandle, KernelHandle, LaunchConfig, LibraryHandle,
    MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
    code::{Buffer, TypedKernel},
    exec::{EventFlags, EventRecycler, StreamRecycler},
    graph::{CaptureMode, GraphHandle},
    memory::{
        AddressReservationHandle, MappingHandle, PhysicalAllocationHandle, PoolLocation, Sharing,
    },
};

#[path = "gpu_bench/node_update.rs"]
mod node_update;
#[path = "gpu_bench/occupancy.rs"]
mod occupancy;

const ROUNDS: usize = 31;

fn ok(status: sys::CUresult) {
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
}

fn report(op: &str, measured: &Measured) {
    let raw = measured.medians[0];
    for (name, median) in measured.names.iter().zip(&measured.medians) {
        println!("| {op} | {name} | {median:.1} | {:.3} |", median / raw);
    }
}

fn events(context: &ContextHandle, cudarc_context: &Arc<CudaContext>) -> Measured {
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    let recycler = EventRecycler::new(context, EventFlags::default()).unwrap();
    interleave(
        &mut [
            Variant::new("raw cuEventCreate+cuEventDestroy", || {
                let mut event = std::ptr::null_mut();
                // SAFETY: the primary context is current on this thread.
                unsafe {
                    ok(sys::cuEventCreate(&mut event, flags));
                    ok(sys::cuEventDestroy_v2(keep(event)));
                }
            }),
            Variant::new("handles-cuda EventHandle::create+drop", || {
                drop(keep(
                    EventHandle::create(context, EventFlags::default()).unwrap(),
                ));
            }),
            Variant::new("cudarc new_event+drop", || {
                drop(keep(cudarc_context.new_event(None).unwrap()));
            }),
            Variant::new("handles-cuda EventRecycler acquire+drop", || {
                drop(keep(recycler.acquire().unwrap()));
            }),
            // The driver calls each library makes, without the library: what the driver
            // charges for the context checks in this sequence, apart from the code around them.
            Variant::new(
                "raw, cuCtxGetCurrent before the create (ours' calls)",
                || checked_pair(flags, false),
            ),
            Variant::new(
                "raw, cuCtxGetCurrent before each call (cudarc's calls)",
                || checked_pair(flags, true),
            ),
        ],
        ROUNDS,
        2000,
        || {},
    )
}

/// The raw event pair with `cuCtxGetCurrent` before the create, and with `again` before the
/// destroy too.
fn checked_pair(flags: u32, again: bool) {
    let (mut current, mut event) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the primary context is current on this thread; the event is destroyed once.
    unsafe {
        ok(sys::cuCtxGetCurrent(&mut current));
        ok(sys::cuEventCreate(&mut event, flags));
        if again {
            ok(sys::cuCtxGetCurrent(&mut current));
        }
        ok(sys::cuEventDestroy_v2(keep(event)));
    }
    keep(current);
}

/// Events that are recorded once each on `stream` before they go: the raw pair with a record
/// between, our handle, cudarc's, and the recycler (which settles released events by stream
/// order). The stream is drained between batches.
fn recorded_events(
    context: &ContextHandle,
    stream: &StreamHandle,
    cudarc_context: &Arc<CudaContext>,
    cudarc_stream: &Arc<cudarc::driver::CudaStream>,
) -> Measured {
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    let recycler = EventRecycler::new(context, EventFlags::default()).unwrap();
    let raw_stream = stream.as_cu();
    interleave(
        &mut [
            Variant::new("raw cuEventCreate+cuEventRecord+cuEventDestroy", || {
                let mut event = std::ptr::null_mut();
                // SAFETY: the primary context is current on this thread; the stream is alive.
                unsafe {
                    ok(sys::cuEventCreate(&mut event, flags));
                    ok(sys::cuEventRecord(event, raw_stream));
                    ok(sys::cuEventDestroy_v2(keep(event)));
                }
            }),
            Variant::new("handles-cuda EventHandle::create+record+drop", || {
                let event = EventHandle::create(context, EventFlags::default()).unwrap();
                event.record(stream).unwrap();
                drop(keep(event));
            }),
            Variant::new("cudarc new_event+record+drop", || {
                let event = cudarc_context.new_event(None).unwrap();
                event.record(cudarc_stream).unwrap();
                drop(keep(event));
            }),
            Variant::new("handles-cuda EventRecycler acquire+record+drop", || {
                let event = recycler.acquire().unwrap();
                event.record(stream).unwrap();
                drop(keep(event));
            }),
            Variant::new(
                "handles-cuda EventRecycler acquire+record+drop, reached (settled by a query each)",
                || {
                    let event = recycler.acquire().unwrap();
                    // Recorded through the `EventHandle`: the recycler cannot follow it.
                    (*event).record(stream).unwrap();
                    drop(keep(event));
                },
            ),
        ],
        ROUNDS,
        2000,
        || {
            stream.synchronize().unwrap();
            cudarc_stream.synchronize().unwrap();
        },
    )
}

/// Events per batch in [`event_batches`].
const BATCH: usize = 64;

/// Batches of events, the pattern recycling is for: make `BATCH` events, record each on
/// `stream`, wait for the stream, then release them all. Medians are per event.
fn event_batches(context: &ContextHandle, stream: &StreamHandle) -> Measured {
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    let recycler = EventRecycler::new(context, EventFlags::default()).unwrap();
    let raw_stream = stream.as_cu();
    let mut measured = interleave(
        &mut [
            Variant::new("raw create, record, synchronize, destroy", || {
                let mut events = [std::ptr::null_mut(); BATCH];
                // SAFETY: the primary context is current on this thread; the stream is alive;
                // each event is destroyed once.
                unsafe {
                    for event in &mut events {
                        ok(sys::cuEventCreate(event, flags));
                        ok(sys::cuEventRecord(*event, raw_stream));
                    }
                    ok(sys::cuStreamSynchronize(raw_stream));
                    for event in events {
                        ok(sys::cuEventDestroy_v2(keep(event)));
                    }
                }
            }),
            Variant::new(
                "handles-cuda EventHandle create, record, synchronize, drop",
                || {
                    let events: Vec<_> = (0..BATCH)
                        .map(|_| {
                            let event =
                                EventHandle::create(context, EventFlags::default()).unwrap();
                            event.record(stream).unwrap();
                            event
                        })
                        .collect();
                    stream.synchronize().unwrap();
                    drop(keep(events));
                },
            ),
            Variant::new(
                "handles-cuda EventRecycler acquire, record, synchronize, drop",
                || {
                    let events: Vec<_> = (0..BATCH)
                        .map(|_| {
                            let event = recycler.acquire().unwrap();
                            event.record(stream).unwrap();
                            event
                        })
                        .collect();
                    stream.synchronize().unwrap();
                    drop(keep(events));
                },
            ),
        ],
        ROUNDS,
        2000 / BATCH,
        || {},
    );
    for median in &mut measured.medians {
        *median /= BATCH as f64;
    }
    measured
}

fn pool_allocations(
    stream: &StreamHandle,
    pool: &MemoryPoolHandle,
    tracked: &Arc<cudarc::driver::CudaStream>,
    untracked: &Arc<cudarc::driver::CudaStream>,
) -> Measured {
    let (raw_stream, raw_pool) = (stream.as_cu(), pool.as_cu());
    interleave(
        &mut [
            Variant::new("raw cuMemAllocFromPoolAsync+cuMemFreeAsync", || {
                let mut ptr = 0;
                // SAFETY: pool and stream are alive; the pointer is freed once.
                unsafe {
                    ok(sys::cuMemAllocFromPoolAsync(
                        &mut ptr, 1024, raw_pool, raw_stream,
                    ));
                    ok(sys::cuMemFreeAsync(keep(ptr), raw_stream));
                }
            }),
            Variant::new("handles-cuda alloc_from_pool+drop", || {
                drop(keep(
                    DevicePtrHandle::alloc_from_pool(pool, 1024, stream).unwrap(),
                ));
            }),
            Variant::new("cudarc alloc (event tracking on)+drop", || {
                // SAFETY: the memory is never read.
                drop(keep(unsafe { tracked.alloc::<u8>(1024) }.unwrap()));
            }),
            Variant::new("cudarc alloc (event tracking off)+drop", || {
                // SAFETY: the memory is never read.
                drop(keep(unsafe { untracked.alloc::<u8>(1024) }.unwrap()));
            }),
        ],
        ROUNDS,
        1000,
        || {
            stream.synchronize().unwrap();
            tracked.synchronize().unwrap();
            untracked.synchronize().unwrap();
        },
    )
}

fn streams(context: &ContextHandle, cudarc_context: &Arc<CudaContext>) -> Measured {
    let recycler = StreamRecycler::new(context, StreamFlags { non_blocking: true }, 0).unwrap();
    interleave(
        &mut [
            Variant::new("raw cuStreamCreateWithPriority+cuStreamDestroy", || {
                let mut stream = std::ptr::null_mut();
                // SAFETY: the primary context is current on this thread.
                unsafe {
                    ok(sys::cuStreamCreateWithPriority(&mut stream, 1, 0));
                    ok(sys::cuStreamDestroy_v2(keep(stream)));
                }
            }),
            Variant::new("handles-cuda StreamHandle::create+drop", || {
                let flags = StreamFlags { non_blocking: true };
                drop(keep(StreamHandle::create(context, flags, 0).unwrap()));
            }),
            Variant::new("cudarc new_stream+drop", || {
                drop(keep(cudarc_context.new_stream().unwrap()));
            }),
            Variant::new("handles-cuda StreamRecycler acquire+drop (idle)", || {
                drop(keep(recycler.acquire().unwrap()));
            }),
        ],
        // cuStreamCreate's own time varies by a few percent between batches; more rounds make
        // the medians steadier.
        61,
        200,
        || {},
    )
}

fn context_lookup() -> Measured {
    let device = 0;
    interleave(
        &mut [
            Variant::new("raw cuDevicePrimaryCtxRetain+Release", || {
                let mut context = std::ptr::null_mut();
                // SAFETY: retain and release once each.
                unsafe {
                    ok(sys::cuDevicePrimaryCtxRetain(&mut context, device));
                    ok(sys::cuDevicePrimaryCtxRelease_v2(device));
                }
            }),
            Variant::new("handles-cuda ContextHandle::primary (cached)+drop", || {
                drop(keep(ContextHandle::primary(0).unwrap()));
            }),
            Variant::new("handles-cuda ContextHandle::with_primary (cached)", || {
                keep(ContextHandle::with_primary(0, |context| context.as_cu()).unwrap());
            }),
            Variant::new("cudarc CudaContext::new+drop", || {
                drop(keep(CudaContext::new(0).unwrap()));
            }),
        ],
        ROUNDS,
        20_000,
        || {},
    )
}

/// `measure` on a thread of its own, started for it, with `context` bound to it (as in the
/// scaling table's bound rows): the single-thread rows of the scaling table come from such a
/// thread, where the ratios have differed from the main thread's.
fn on_a_fresh_thread(
    context: &ContextHandle,
    cpu: Option<usize>,
    measure: impl FnOnce() -> Measured + Send,
) -> Measured {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Some(cpu) = cpu {
                    pin_to(cpu);
                }
                context.bind_to_thread().unwrap();
                let measured = measure();
                ContextHandle::unbind_thread().unwrap();
                measured
            })
            .join()
            .unwrap()
    })
}

/// Three CPUs of the allowed set, spread over it: the first, the middle and the last.
fn three_cpus() -> Vec<usize> {
    let cpus = allowed_cpus();
    let mut picked = vec![cpus[0], cpus[cpus.len() / 2], cpus[cpus.len() - 1]];
    picked.dedup();
    picked
}

/// The pieces an owning handle adds to a driver call, to show where the floor is.
fn floor_parts(context: &ContextHandle) -> Measured {
    interleave(
        &mut [
            Variant::new("Arc::new+drop (the handle's one allocation)", || {
                drop(keep(Arc::new(keep([0usize; 6]))));
            }),
            Variant::new("cuCtxGetCurrent (the context check)", || {
                let mut current = std::ptr::null_mut();
                // SAFETY: a valid out-pointer.
                unsafe { ok(sys::cuCtxGetCurrent(&mut current)) };
                keep(current);
            }),
            Variant::new("ContextHandle clone+drop (the owner reference)", || {
                drop(keep(context.clone()));
            }),
        ],
        ROUNDS,
        100_000,
        || {},
    )
}

fn clones(stream: &StreamHandle) -> Measured {
    let arc = Arc::new(stream.as_cu() as usize);
    interleave(
        &mut [
            Variant::new("Arc clone+drop", || drop(keep(arc.clone()))),
            Variant::new("StreamHandle clone+drop", || drop(keep(stream.clone()))),
        ],
        ROUNDS,
        1_000_000,
        || {},
    )
}

struct Plain {
    raw: sys::CUstream,
}

fn accessor(stream: &StreamHandle) -> Measured {
    let plain = Box::new(Plain {
        raw: stream.as_cu(),
    });
    interleave(
        &mut [
            Variant::new("field load through a Box", || {
                keep(keep(&plain).raw);
            }),
            Variant::new("StreamHandle::as_cu", || {
                keep(keep(stream).as_cu());
            }),
            Variant::new("accessor_probe (out of line, for the disassembly)", || {
                keep(handles_bench::accessor_probe(keep(stream)));
            }),
        ],
        ROUNDS,
        10_000_000,
        || {},
    )
}

/// The checked-in test kernels (`add_one(data, n)` is the one timed).
const PTX: &str = include_str!("../../../tests/kernels/test_kernels.ptx");
/// Elements `add_one` touches per launch: one block.
const ELEMENTS: u32 = 256;
/// Launches per timed batch; the stream is drained between batches, so the queue never fills.
const LAUNCHES: usize = 200;

/// `add_one(data, n)` from the test kernels, typed and bounds-checked; it keeps its library.
fn add_one() -> TypedKernel<(Buffer, u32)> {
    let library = LibraryHandle::load_ptx(PTX).unwrap();
    let kernel = KernelHandle::get(&library, "add_one").unwrap();
    // SAFETY: `(Buffer, u32)` is `add_one`'s parameter list, and `add_one(data, n)` touches
    // `n` 32-bit elements of `data`, which the check bounds by the buffer's size.
    unsafe {
        kernel.typed::<(Buffer, u32)>(|args: &(&DevicePtrHandle, u32), _| {
            if args.1 as usize * 4 <= args.0.size() {
                Ok(())
            } else {
                Err(handles_cuda::Error::InvalidArgument(
                    "too many elements".into(),
                ))
            }
        })
    }
    .unwrap()
}

/// A kernel launch: raw `cuLaunchKernel`, our typed launch (configuration and bounds checks,
/// the buffer's use reported on the stream), cudarc's launch builder (with its default event
/// tracking, and without).
fn launches(
    stream: &StreamHandle,
    tracked: &Arc<cudarc::driver::CudaStream>,
    untracked: &Arc<cudarc::driver::CudaStream>,
) -> Measured {
    let add_one = add_one();
    let kernel = add_one.kernel();
    // Stream-ordered memory on the launch's stream: the common case.
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, ELEMENTS as usize * 4, stream).unwrap();
    let config = LaunchConfig::linear(ELEMENTS, ELEMENTS);
    let cudarc_function = |on: &Arc<cudarc::driver::CudaStream>| {
        on.context()
            .load_module(cudarc::nvrtc::Ptx::from_src(PTX))
            .unwrap()
            .load_function("add_one")
            .unwrap()
    };
    let (tracked_function, untracked_function) =
        (cudarc_function(tracked), cudarc_function(untracked));
    let tracked_slice = tracked.alloc_zeros::<u32>(ELEMENTS as usize).unwrap();
    let untracked_slice = untracked.alloc_zeros::<u32>(ELEMENTS as usize).unwrap();
    let cudarc_config = cudarc::driver::LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (ELEMENTS, 1, 1),
        shared_mem_bytes: 0,
    };
    let raw_stream = stream.as_cu();
    let raw_kernel = kernel.as_cu() as sys::CUfunction;
    let raw_buffer = buffer.as_cu();
    // cudarc's own driver objects, launched raw: its module function on its stream, over a
    // buffer of its own (the driver charges a module's function less than a library's kernel,
    // so each layer is also set against the raw launch of the objects it launches).
    let (cudarc_raw_function, cudarc_raw_stream) =
        (untracked_function.cu_function(), untracked.cu_stream());
    let cudarc_raw_buffer = {
        use cudarc::driver::DevicePtr;
        // The guard records nothing on a stream without event tracking.
        let (pointer, _guard) = untracked_slice.device_ptr(untracked);
        pointer
    };
    interleave(
        &mut [
            Variant::new("raw cuLaunchKernel", || {
                calibrate::launch(raw_kernel, raw_stream, raw_buffer)
            }),
            Variant::new(
                "raw cuLaunchKernel, cudarc's module function and stream",
                || calibrate::launch(cudarc_raw_function, cudarc_raw_stream, cudarc_raw_buffer),
            ),
            Variant::new("handles-cuda TypedKernel::launch", || {
                add_one
                    .launch(stream, &config, (keep(&buffer), ELEMENTS))
                    .unwrap();
            }),
            Variant::new("cudarc launch_builder (event tracking on)", || {
                let mut builder = tracked.launch_builder(&tracked_function);
                builder.arg(&tracked_slice).arg(&ELEMENTS);
                // SAFETY: `add_one` touches `ELEMENTS` elements of the slice.
                unsafe { builder.launch(cudarc_config) }.unwrap();
            }),
            Variant::new("cudarc launch_builder (event tracking off)", || {
                let mut builder = untracked.launch_builder(&untracked_function);
                builder.arg(&untracked_slice).arg(&ELEMENTS);
                // SAFETY: `add_one` touches `ELEMENTS` elements of the slice.
                unsafe { builder.launch(cudarc_config) }.unwrap();
            }),
        ],
        ROUNDS,
        LAUNCHES,
        || {
            stream.synchronize().unwrap();
            tracked.synchronize().unwrap();
            untracked.synchronize().unwrap();
        },
    )
}

/// A graph launch (one `add_one` node): raw `cuGraphLaunch`, ours (the graph's buffer
/// reported on the stream), cudarc's `CudaGraph::launch`.
fn graph_launches(
    context: &ContextHandle,
    stream: &StreamHandle,
    cudarc_stream: &Arc<cudarc::driver::CudaStream>,
) -> Measured {
    let add_one = add_one();
    let buffer = DevicePtrHandle::alloc(context, ELEMENTS as usize * 4).unwrap();
    let config = LaunchConfig::linear(ELEMENTS, ELEMENTS);
    let graph = GraphHandle::capture(context, CaptureMode::Global, |capture| {
        capture.launch(&add_one, &config, (&buffer, ELEMENTS))
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    let raw_exec = exec.as_cu();
    let raw_stream = stream.as_cu();
    let function = cudarc_stream
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(PTX))
        .unwrap()
        .load_function("add_one")
        .unwrap();
    let slice = cudarc_stream.alloc_zeros::<u32>(ELEMENTS as usize).unwrap();
    cudarc_stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    let mut builder = cudarc_stream.launch_builder(&function);
    builder.arg(&slice).arg(&ELEMENTS);
    // SAFETY: `add_one` touches `ELEMENTS` elements of the slice.
    unsafe {
        builder.launch(cudarc::driver::LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (ELEMENTS, 1, 1),
            shared_mem_bytes: 0,
        })
    }
    .unwrap();
    let cudarc_graph = cudarc_stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a captured graph");
    // cudarc's graph (its node a module function) and stream, launched raw.
    let (cudarc_raw_exec, cudarc_raw_stream) =
        (cudarc_graph.cu_graph_exec(), cudarc_stream.cu_stream());
    interleave(
        &mut [
            Variant::new("raw cuGraphLaunch", || {
                // SAFETY: the executable graph and the stream are alive.
                unsafe { ok(sys::cuGraphLaunch(keep(raw_exec), raw_stream)) }
            }),
            Variant::new("raw cuGraphLaunch, cudarc's graph and stream", || {
                // SAFETY: cudarc's executable graph and its stream live until this function returns.
                unsafe { ok(sys::cuGraphLaunch(keep(cudarc_raw_exec), cudarc_raw_stream)) }
            }),
            Variant::new("handles-cuda GraphExecHandle::launch", || {
                keep(&exec).launch(stream).unwrap();
            }),
            Variant::new("cudarc CudaGraph::launch", || {
                keep(&cudarc_graph).launch().unwrap();
            }),
        ],
        ROUNDS,
        LAUNCHES,
        || {
            stream.synchronize().unwrap();
            cudarc_stream.synchronize().unwrap();
        },
    )
}

/// Mapping a 2 MiB chunk of physical memory into a reservation and unmapping it: raw
/// `cuMemMap`+`cuMemSetAccess`+`cuMemUnmap` against `MappingHandle::map`+drop (which adds the
/// checks, the handle and the wait for the contexts its uses ran in: none here).
fn vmm_map_unmap() -> Measured {
    let grain = handles_cuda::memory::granularity(PoolLocation::Device(0)).unwrap();
    let physical =
        PhysicalAllocationHandle::create(PoolLocation::Device(0), grain, Sharing::None).unwrap();
    let reservation = AddressReservationHandle::reserve(grain, grain).unwrap();
    let (address, handle) = (reservation.as_cu(), physical.as_raw());
    let access = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    interleave(
        &mut [
            Variant::new("raw cuMemMap+cuMemSetAccess+cuMemUnmap", || {
                // SAFETY: the reservation and the allocation are alive; the range is unmapped
                // again before the next iteration.
                unsafe {
                    ok(sys::cuMemMap(keep(address), grain, 0, handle, 0));
                    ok(sys::cuMemSetAccess(address, grain, &access, 1));
                    ok(sys::cuMemUnmap(address, grain));
                }
            }),
            Variant::new("handles-cuda MappingHandle::map+drop", || {
                drop(keep(
                    MappingHandle::map(&reservation, 0, &physical, 0, grain, &[0]).unwrap(),
                ));
            }),
        ],
        ROUNDS,
        200,
        || {},
    )
}

/// Thread counts of the scaling table.
const THREADS: [usize; 5] = [1, 2, 4, 8, 16];
/// Operations per thread per timed run of the scaling table.
const SCALING_OPS: usize = 20_000;
/// Rounds of the interleaved scaling rows (`interleaved`).
const SCALING_ROUNDS: usize = 9;

/// Aggregate operations per second of `threads` threads each running `op` `SCALING_OPS`
/// times after a common start (the median of 5 runs). `setup` makes each thread's state.
/// Set by the raw host function below.
static RAW_HOST_RAN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

unsafe extern "C" fn raw_host_function(_: *mut std::ffi::c_void) {
    RAW_HOST_RAN.store(true, std::sync::atomic::Ordering::Release);
}

/// Spins (yielding) until `ran` is set, then clears it.
fn wait_and_clear(ran: &std::sync::atomic::AtomicBool) {
    while !ran.swap(false, std::sync::atomic::Ordering::AcqRel) {
        std::thread::yield_now();
    }
}

/// A host function on an idle stream, from the call until it has run (the caller polls a flag
/// the function sets): the raw `cuLaunchHostFunc` with a C function, and `launch_host` with a
/// Rust closure (caught panics, captures disposed off the driver's thread). cudarc has only the
/// raw call (`result::stream::launch_host_function`, `unsafe`), the same as the first row.
fn host_functions(stream: &StreamHandle) -> Measured {
    use std::sync::atomic::{AtomicBool, Ordering};
    let ran = Arc::new(AtomicBool::new(false));
    interleave(
        &mut [
            Variant::new("raw cuLaunchHostFunc (C function)", || {
                // SAFETY: the stream is alive; the function only stores to a static.
                unsafe {
                    ok(sys::cuLaunchHostFunc(
                        stream.as_cu(),
                        Some(raw_host_function),
                        std::ptr::null_mut(),
                    ))
                };
                wait_and_clear(&RAW_HOST_RAN);
            }),
            Variant::new("handles-cuda launch_host (closure)", || {
                let seen = Arc::clone(&ran);
                stream
                    .launch_host(move || seen.store(true, Ordering::Release))
                    .unwrap();
                wait_and_clear(&ran);
            }),
        ],
        ROUNDS,
        200,
        || {},
    )
}

/// Waits on a polled executor (parks between polls): the smallest `block_on`.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut task = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut task) {
            return output;
        }
        std::thread::park();
    }
}

/// The raw row of the completion measurements: a 4 KiB memset, `cuEventRecord` behind it and
/// a blocking `cuEventSynchronize`.
fn raw_wait<'a>(
    buffer: &'a DevicePtrHandle,
    event: &'a EventHandle,
    stream: &'a StreamHandle,
) -> Variant<'a> {
    Variant::new("raw memset+cuEventRecord+cuEventSynchronize", move || {
        buffer.memset_async(1, 4096, stream).unwrap();
        // SAFETY: the event and the stream are alive.
        unsafe {
            ok(sys::cuEventRecord(event.as_cu(), stream.as_cu()));
            ok(sys::cuEventSynchronize(event.as_cu()));
        }
    })
}

/// The same memset and record, then awaiting `EventHandle::completed` on a parking executor.
fn awaited<'a>(
    buffer: &'a DevicePtrHandle,
    event: &'a EventHandle,
    stream: &'a StreamHandle,
) -> Variant<'a> {
    Variant::new("handles-cuda memset+record+completed().await", move || {
        buffer.memset_async(1, 4096, stream).unwrap();
        event.record(stream).unwrap();
        block_on(event.completed().unwrap());
    })
}

/// The completion rows again as latency distributions (one operation at a time, 2,000 of
/// each): median and p99 of a blocking wait and of awaiting `completed()`.
fn completion_latencies(context: &ContextHandle, stream: &StreamHandle) {
    let event = EventHandle::create(context, EventFlags::default()).unwrap();
    let buffer = DevicePtrHandle::alloc(context, 4096).unwrap();
    let poller = Poller::default();
    let measured = std::thread::scope(|scope| {
        let helper = scope.spawn(|| poller.run());
        let measured = handles_bench::latencies(
            &mut [
                raw_wait(&buffer, &event, stream),
                Variant::new("handles-cuda memset+record+synchronize", || {
                    buffer.memset_async(1, 4096, stream).unwrap();
                    event.record(stream).unwrap();
                    event.synchronize().unwrap();
                }),
                awaited(&buffer, &event, stream),
                Variant::new(
                    "floor of a parked waiter: raw memset+record, a spinning thread's \
                     cuEventQuery unparks the caller",
                    || {
                        buffer.memset_async(1, 4096, stream).unwrap();
                        // SAFETY: the event and the stream are alive.
                        unsafe { ok(sys::cuEventRecord(event.as_cu(), stream.as_cu())) };
                        poller.wait_for(&event);
                    },
                ),
            ],
            2000,
            200,
        );
        poller.stop();
        helper.join().unwrap();
        measured
    });
    let (raw50, raw99) = (measured.p50[0], measured.p99[0]);
    for (index, name) in measured.names.iter().enumerate() {
        let (p50, p99) = (measured.p50[index], measured.p99[index]);
        println!(
            "| 4 KiB memset, record, wait: latency | {name} | p50 {p50:.0} / p99 {p99:.0} | \
             {:.3} / {:.3} |",
            p50 / raw50,
            p99 / raw99
        );
    }
    handles_cuda::exec::clear_notifiers();
}

/// The least any future woken on a parked thread can take: a thread of its own spins on
/// `cuEventQuery` and unparks the caller, which parks as `block_on` does. No locks, no
/// allocation, no waker: the gap between this and a blocking wait is the thread's wake-up.
#[derive(Default)]
struct Poller {
    /// The raw event to poll (0: none), and the parked caller.
    event: std::sync::atomic::AtomicUsize,
    caller: std::sync::Mutex<Option<std::thread::Thread>>,
    done: std::sync::atomic::AtomicBool,
    stop: std::sync::atomic::AtomicBool,
}

impl Poller {
    fn run(&self) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        while !self.stop.load(Acquire) {
            let raw = self.event.load(Acquire);
            if raw == 0 {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: the caller keeps the event alive until `done` is set.
            while unsafe { sys::cuEventQuery(raw as sys::CUevent) }
                == sys::CUresult::CUDA_ERROR_NOT_READY
            {}
            let caller = self.caller.lock().unwrap().clone().unwrap();
            self.event.store(0, Release);
            let _ = self.done.swap(true, AcqRel);
            caller.unpark();
        }
    }

    fn wait_for(&self, event: &EventHandle) {
        use std::sync::atomic::Ordering::{AcqRel, Release};
        *self.caller.lock().unwrap() = Some(std::thread::current());
        self.event.store(event.as_cu() as usize, Release);
        while !self.done.swap(false, AcqRel) {
            std::thread::park();
        }
    }

    fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// An event recorded behind a short memset on an idle stream, then waited for: the driver's
/// blocking `cuEventSynchronize`, cudarc's `CudaEvent::synchronize`, and awaiting
/// `EventHandle::completed` on a parking executor (a host function wakes it: the wake-up
/// latency of the future, against a thread that sits in the driver).
fn completions(
    context: &ContextHandle,
    stream: &StreamHandle,
    cudarc_context: &Arc<CudaContext>,
    tracked: &Arc<cudarc::driver::CudaStream>,
) -> Measured {
    let event = EventHandle::create(context, EventFlags::default()).unwrap();
    let buffer = DevicePtrHandle::alloc(context, 4096).unwrap();
    let cudarc_event = cudarc_context.new_event(None).unwrap();
    let mut cudarc_buffer = tracked.alloc_zeros::<u8>(4096).unwrap();
    let measured = interleave(
        &mut [
            raw_wait(&buffer, &event, stream),
            awaited(&buffer, &event, stream),
            Variant::new("cudarc memset_zeros+record+synchronize", || {
                tracked.memset_zeros(&mut cudarc_buffer).unwrap();
                cudarc_event.record(tracked).unwrap();
                cudarc_event.synchronize().unwrap();
            }),
        ],
        ROUNDS,
        200,
        || {},
    );
    handles_cuda::exec::clear_notifiers();
    measured
}

/// 256 MiB of managed memory prefetched to device 0 and back to the host, then the stream
/// synchronised (one round trip per op; the bandwidth is 2 × 256 MiB over the time): the raw
/// `cuMemPrefetchAsync_v2` calls against `prefetch`. cudarc has no managed-memory prefetch in
/// its safe layer.
fn managed_prefetch(context: &ContextHandle, stream: &StreamHandle) -> Measured {
    use handles_cuda::memory::{Attach, PoolLocation};
    const SIZE: usize = 256 << 20;
    let ours = DevicePtrHandle::alloc_managed(context, SIZE, Attach::Global).unwrap();
    let mut raw: sys::CUdeviceptr = 0;
    // SAFETY: the primary context is current; `raw` is a valid out-pointer.
    unsafe {
        ok(sys::cuMemAllocManaged(
            &mut raw,
            SIZE,
            sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
        ))
    };
    let location = |type_, id| sys::CUmemLocation { type_, id };
    let device = location(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, 0);
    let host = location(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0);
    let measured = interleave(
        &mut [
            Variant::new("raw cuMemPrefetchAsync_v2 there and back", || {
                // SAFETY: `raw` is a live managed allocation of SIZE bytes; the stream is alive.
                unsafe {
                    ok(sys::cuMemPrefetchAsync_v2(
                        raw,
                        SIZE,
                        device,
                        0,
                        stream.as_cu(),
                    ));
                    ok(sys::cuMemPrefetchAsync_v2(
                        raw,
                        SIZE,
                        host,
                        0,
                        stream.as_cu(),
                    ));
                    ok(sys::cuStreamSynchronize(stream.as_cu()));
                }
            }),
            Variant::new("handles-cuda prefetch there and back", || {
                ours.prefetch(PoolLocation::Device(0), stream).unwrap();
                ours.prefetch(PoolLocation::Host, stream).unwrap();
                stream.synchronize().unwrap();
            }),
        ],
        9,
        4,
        || {},
    );
    // SAFETY: the allocation is idle (synchronised above) and freed once.
    unsafe { ok(sys::cuMemFree_v2(raw)) };
    for (name, ns) in measured.names.iter().zip(&measured.medians) {
        println!(
            "| managed prefetch 256 MiB there and back (GB/s, not ns) | {name} | {:.1} | |",
            2.0 * SIZE as f64 / ns
        );
    }
    measured
}

/// One timed run: `threads` threads each make `SCALING_OPS` operations after a common start;
/// the aggregate operations per second. With `cpus` given, thread `i` runs on
/// `cpus[i % cpus.len()]` alone.
fn run_once<S>(
    threads: usize,
    cpus: &[usize],
    setup: &(impl Fn(usize) -> S + Sync),
    op: &(impl Fn(&mut S) + Sync),
) -> f64 {
    let barrier = std::sync::Barrier::new(threads + 1);
    let elapsed = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let barrier = &barrier;
                let cpu = (!cpus.is_empty()).then(|| cpus[index % cpus.len()]);
                scope.spawn(move || {
                    if let Some(cpu) = cpu {
                        pin_to(cpu);
                    }
                    let mut state = setup(index);
                    for _ in 0..100 {
                        op(&mut state);
                    }
                    barrier.wait();
                    for _ in 0..SCALING_OPS {
                        op(&mut state);
                    }
                    drop(state);
                })
            })
            .collect();
        barrier.wait();
        let start = std::time::Instant::now();
        for handle in handles {
            handle.join().unwrap();
        }
        start.elapsed()
    });
    (threads * SCALING_OPS) as f64 / elapsed.as_secs_f64()
}

/// The median of five runs of one variant (see `run_once`).
fn aggregate<S>(
    threads: usize,
    setup: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S) + Sync,
) -> f64 {
    handles_bench::median(
        (0..5)
            .map(|_| run_once(threads, &[], &setup, &op))
            .collect(),
    )
}

/// Runs of several variants interleaved: `SCALING_ROUNDS` rounds at each thread count, each
/// round running every variant once, starting one further along each round; the median per
/// variant and thread count. Throughput drifts between runs (the clock, where the threads
/// land), so variants compared with each other are measured in turn, as in the first table.
type Run<'a> = Box<dyn Fn(usize, &[usize]) -> f64 + Sync + 'a>;

fn interleaved(
    variants: &[(&str, Run<'_>)],
    thread_counts: &[usize],
    rounds: usize,
    cpus: &[usize],
) -> Vec<Vec<f64>> {
    let mut table = vec![Vec::new(); variants.len()];
    for &threads in thread_counts {
        let mut runs = vec![Vec::new(); variants.len()];
        for round in 0..rounds {
            for k in 0..variants.len() {
                let v = (round + k) % variants.len();
                runs[v].push((variants[v].1)(threads, cpus));
            }
        }
        for (column, runs) in table.iter_mut().zip(runs) {
            column.push(handles_bench::median(runs));
        }
    }
    table
}

/// The scaling table: aggregate throughput (million ops/s) at 1 to 16 threads.
/// The scaling table; with `events_only`, its event create+drop rows alone.
fn scaling(context: &ContextHandle, pool: &MemoryPoolHandle, events_only: bool) {
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    let raw_context = context.as_cu() as usize;
    let bind = move || {
        // SAFETY: the primary context is alive for the whole benchmark.
        unsafe { ok(sys::cuCtxSetCurrent(raw_context as sys::CUcontext)) };
    };
    let cudarc_context = CudaContext::new(0).unwrap();
    let untracked_context = CudaContext::new(0).unwrap();
    // SAFETY: slices of this context are used on their own stream only.
    unsafe { untracked_context.disable_event_tracking() };
    let recycler = EventRecycler::new(context, EventFlags::default()).unwrap();
    let raw_pool = pool.as_cu() as usize;
    println!();
    println!(
        "| op | variant | {} |",
        THREADS.map(|t| format!("{t} thr (M/s)")).join(" | ")
    );
    println!("|---|---|{}", "---|".repeat(THREADS.len()));
    let row = |op: &str, name: &str, rates: Vec<f64>| {
        let cells: Vec<String> = rates
            .iter()
            .map(|rate| format!("{:.3}", rate / 1e6))
            .collect();
        println!("| {op} | {name} | {} |", cells.join(" | "));
    };
    let each = |run: &dyn Fn(usize) -> f64| THREADS.iter().map(|&t| run(t)).collect::<Vec<_>>();
    let event = || EventFlags::default();
    let event_variants: Vec<(&str, Run<'_>)> = vec![
        (
            "raw",
            Box::new(|t, cpus| {
                run_once(t, cpus, &|_| bind(), &|_| {
                    let mut event = std::ptr::null_mut();
                    // SAFETY: the primary context is current on this thread.
                    unsafe {
                        ok(sys::cuEventCreate(&mut event, flags));
                        ok(sys::cuEventDestroy_v2(keep(event)));
                    }
                })
            }),
        ),
        (
            "handles-cuda",
            Box::new(|t, cpus| {
                run_once(t, cpus, &|_| (), &|_| {
                    drop(keep(EventHandle::create(context, event()).unwrap()));
                })
            }),
        ),
        (
            "handles-cuda, context bound to the thread",
            Box::new(|t, cpus| {
                run_once(t, cpus, &|_| context.bind_to_thread().unwrap(), &|_| {
                    drop(keep(EventHandle::create(context, event()).unwrap()));
                })
            }),
        ),
        (
            "cudarc",
            Box::new(|t, cpus| {
                run_once(t, cpus, &|_| (), &|_| {
                    drop(keep(cudarc_context.new_event(None).unwrap()));
                })
            }),
        ),
        (
            "handles-cuda recycled",
            Box::new(|t, cpus| {
                run_once(t, cpus, &|_| (), &|_| {
                    drop(keep(recycler.acquire().unwrap()));
                })
            }),
        ),
    ];
    for ((name, _), rates) in
        event_variants
            .iter()
            .zip(interleaved(&event_variants, &THREADS, SCALING_ROUNDS, &[]))
    {
        row("event create+drop (interleaved)", name, rates);
    }
    // The one-thread column again with the thread pinned, on three CPUs in turn, with more
    // rounds: where an unpinned thread lands moves this column by more than the variants
    // differ. (Only the first cell of each row is measured.)
    for cpu in three_cpus() {
        let rates = interleaved(&event_variants, &[1], 3 * SCALING_ROUNDS, &[cpu]);
        for ((name, _), rates) in event_variants.iter().zip(rates) {
            row(
                &format!("event create+drop, 1 thread pinned to CPU {cpu}"),
                name,
                rates,
            );
        }
    }
    if events_only {
        return;
    }
    row(
        "event create+record+drop, a stream per thread",
        "raw",
        each(&|t| {
            aggregate(
                t,
                |_| {
                    bind();
                    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
                },
                |stream| {
                    let mut event = std::ptr::null_mut();
                    // SAFETY: the primary context is current on this thread; the stream is
                    // alive.
                    unsafe {
                        ok(sys::cuEventCreate(&mut event, flags));
                        ok(sys::cuEventRecord(event, stream.as_cu()));
                        ok(sys::cuEventDestroy_v2(keep(event)));
                    }
                },
            )
        }),
    );
    row(
        "event create+record+drop, a stream per thread",
        "handles-cuda recycled (acquire+record+drop)",
        each(&|t| {
            aggregate(
                t,
                |_| StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap(),
                |stream| {
                    let event = recycler.acquire().unwrap();
                    event.record(stream).unwrap();
                    drop(keep(event));
                },
            )
        }),
    );
    row(
        "pool alloc+free 1 KiB, a stream per thread",
        "raw",
        each(&|t| {
            aggregate(
                t,
                |_| {
                    bind();
                    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
                },
                |stream| {
                    let mut ptr = 0;
                    // SAFETY: the pool and the thread's stream are alive; the memory is freed at once.
                    unsafe {
                        ok(sys::cuMemAllocFromPoolAsync(
                            &mut ptr,
                            1024,
                            raw_pool as sys::CUmemoryPool,
                            stream.as_cu(),
                        ));
                        ok(sys::cuMemFreeAsync(keep(ptr), stream.as_cu()));
                    }
                },
            )
        }),
    );
    row(
        "pool alloc+free 1 KiB, a stream per thread",
        "handles-cuda",
        each(&|t| {
            aggregate(
                t,
                |_| StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap(),
                |stream| {
                    drop(keep(
                        DevicePtrHandle::alloc_from_pool(pool, 1024, stream).unwrap(),
                    ));
                },
            )
        }),
    );
    row(
        "pool alloc+free 1 KiB, a stream per thread",
        "handles-cuda, context bound to the thread",
        each(&|t| {
            aggregate(
                t,
                |_| {
                    context.bind_to_thread().unwrap();
                    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
                },
                |stream| {
                    drop(keep(
                        DevicePtrHandle::alloc_from_pool(pool, 1024, stream).unwrap(),
                    ));
                },
            )
        }),
    );
    row(
        "pool alloc+free 1 KiB, a stream per thread",
        "cudarc (tracking off)",
        each(&|t| {
            aggregate(
                t,
                |_| untracked_context.new_stream().unwrap(),
                |stream| {
                    // SAFETY: the uninitialised memory is freed without being read.
                    drop(keep(unsafe { stream.alloc::<u8>(1024) }.unwrap()));
                },
            )
        }),
    );
}

/// The event create+drop rows on a fresh thread pinned to each of three CPUs, context bound.
fn pinned_event_rows(context: &ContextHandle, cudarc_context: &Arc<CudaContext>) {
    for cpu in three_cpus() {
        report(
            &format!("event create+drop on a fresh thread pinned to CPU {cpu}, context bound"),
            &on_a_fresh_thread(context, Some(cpu), || events(context, cudarc_context)),
        );
    }
}

fn main() {
    if let Err(error) = handles_cuda::driver::ensure_loaded() {
        println!("gpu_bench needs a CUDA driver: {error}");
        return;
    }
    let context = ContextHandle::primary(0).unwrap();
    // The raw variants assume a current context; so do cudarc's. Ours do not need one, and
    // find it already current here, which is the comparable case.
    // SAFETY: the primary context is alive while `context` is.
    unsafe { ok(sys::cuCtxSetCurrent(context.as_cu())) };
    let cudarc_context = CudaContext::new(0).unwrap();
    let untracked_context = CudaContext::new(0).unwrap();
    // SAFETY: this context's slices are never shared across streams in this benchmark.
    unsafe { untracked_context.disable_event_tracking() };
    let tracked = cudarc_context.new_stream().unwrap();
    let untracked = untracked_context.new_stream().unwrap();
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();

    // `gpu_bench core`: only the rows the handle layer's own costs show in (events, pool
    // allocations, streams, clones, graph launches, their scaling), for quick before/after
    // runs of two builds in one device call.
    let core_only = std::env::args().nth(1).as_deref() == Some("core");
    println!("| op | variant | median ns/op | ratio to first row |");
    println!("|---|---|---|---|");
    // `gpu_bench events`: the event create+drop rows alone (the main thread, fresh pinned
    // threads and the scaling table's), for several alternations of builds in one call.
    if std::env::args().nth(1).as_deref() == Some("contention") {
        contention::report(&context);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("calibrate") {
        calibrate::report_all(&context, &stream, &pool, &untracked);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("latency") {
        for _ in 0..5 {
            completion_latencies(&context, &stream);
        }
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("events") {
        report(
            "event create+drop (timing off)",
            &events(&context, &cudarc_context),
        );
        pinned_event_rows(&context, &cudarc_context);
        scaling(&context, &pool, true);
        return;
    }
    occupancy::report_all(&context, &stream);
    report(
        "event create+drop (timing off)",
        &events(&context, &cudarc_context),
    );
    if core_only {
        report(
            "pool alloc+free 1 KiB",
            &pool_allocations(&stream, &pool, &tracked, &untracked),
        );
        report("stream create+drop", &streams(&context, &cudarc_context));
        report("handle clone+drop", &clones(&stream));
        report(
            "floor parts (ns, ratio to first row)",
            &floor_parts(&context),
        );
        report(
            "graph launch (1 kernel node)",
            &graph_launches(&context, &stream, &untracked),
        );
        report(
            "kernel launch (1 block of 256)",
            &launches(&stream, &tracked, &untracked),
        );
        calibrate::report_all(&context, &stream, &pool, &untracked);
        report(
            "event create+drop on a fresh thread, context bound (timing off)",
            &on_a_fresh_thread(&context, None, || events(&context, &cudarc_context)),
        );
        report(
            "floor parts on a fresh thread (ns, ratio to first row)",
            &on_a_fresh_thread(&context, None, || floor_parts(&context)),
        );
        pinned_event_rows(&context, &cudarc_context);
        scaling(&context, &pool, false);
        return;
    }
    report(
        "event create+record+drop (timing off)",
        &recorded_events(&context, &stream, &cudarc_context, &tracked),
    );
    report(
        "event batch of 64: make, record, synchronize, release (per event)",
        &event_batches(&context, &stream),
    );
    report(
        "pool alloc+free 1 KiB",
        &pool_allocations(&stream, &pool, &tracked, &untracked),
    );
    report("stream create+drop", &streams(&context, &cudarc_context));
    report("primary context lookup", &context_lookup());
    report("handle clone+drop", &clones(&stream));
    report(
        "floor parts (ns, ratio to first row)",
        &floor_parts(&context),
    );
    report("raw accessor", &accessor(&stream));
    report(
        "kernel launch (1 block of 256)",
        &launches(&stream, &tracked, &untracked),
    );
    report(
        "graph launch (1 kernel node)",
        &graph_launches(&context, &stream, &untracked),
    );
    report(
        "kernel node arguments changed, then a launch",
        &node_update::node_updates(&context, &stream),
    );
    report("map+unmap 2 MiB", &vmm_map_unmap());
    report(
        "host function on an idle stream, until it ran",
        &host_functions(&stream),
    );
    report(
        "managed prefetch 256 MiB to device 0 and back (ns per round trip)",
        &managed_prefetch(&context, &stream),
    );
    report(
        "4 KiB memset, event record, wait for it",
        &completions(&context, &stream, &cudarc_context, &tracked),
    );
    completion_latencies(&context, &stream);
    report(
        "a loop of 100 kernels, until done: host-driven vs a while node",
        &conditional::conditional_loops(&context, &stream),
    );
    scaling(&context, &pool, false);
}
