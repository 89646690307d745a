//! A fixed amount of one operation, for instruction counts on the simulated driver, which do
//! not drift: `sim_count N OP` runs `N` of the operation `OP`, and the per-operation count is
//! the difference between two values of `N`, divided by their difference (what
//! `scripts/count-instructions.sh` does, under callgrind). Each operation has a raw-driver, a
//! handles-cuda and (where cudarc has one) a cudarc form, as in `gpu_bench`:
//!
//! | `OP` | operation |
//! |---|---|
//! | `event-raw`, `event`, `event-cudarc` | event create+drop, timing off |
//! | `pool-raw`, `pool`, `pool-cudarc` | 1 KiB pool allocation+free (cudarc untracked) |
//! | `stream-raw`, `stream`, `stream-cudarc` | stream create+drop |
//! | `graph-raw`, `graph`, `graph-cudarc` | launch of a one-kernel-node graph |
//! | `graph10-raw`, `graph10` | launch of a graph of ten kernel nodes on one buffer |
//! | `launch-raw`, `launch`, `launch-cudarc` | kernel launch, `add_one` over one buffer (cudarc untracked) |
//! | `event-unbound`, `event-cudarc-unbound` | event create+drop on a thread with no context current |
//! | `record-raw`, `record`, `record-cudarc` | one event recorded on the stream and synchronized |
//! | `clone-arc`, `clone` | `Arc` clone+drop against `StreamHandle` clone+drop |
//!
//! See BENCHMARKS.md for the commands and the table.

use std::sync::Arc;

use cudarc::driver::{CudaContext, PushKernelArg, sys};
use handles_bench::keep;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, EventHandle, KernelHandle, LaunchConfig, LibraryHandle,
    MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
    code::{Buffer, TypedKernel},
    exec::EventFlags,
    graph::{CaptureMode, GraphHandle},
};

type Failure = Box<dyn std::error::Error>;

fn ok(status: sys::CUresult) -> Result<(), Failure> {
    match status {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        status => Err(format!("driver call failed: {status:?}").into()),
    }
}

/// The checked-in test kernels; `add_one(data, n)` is the graph's one node.
const PTX: &str = include_str!("../../../tests/kernels/test_kernels.ptx");

fn add_one() -> Result<TypedKernel<(Buffer, u32)>, Failure> {
    let library = LibraryHandle::load_ptx(PTX)?;
    let kernel = KernelHandle::get(&library, "add_one")?;
    // SAFETY: `(Buffer, u32)` is `add_one`'s parameter list, and `add_one(data, n)` touches
    // `n` 32-bit elements of `data`, which the check bounds by the buffer's size.
    let typed = unsafe {
        kernel.typed::<(Buffer, u32)>(|args: &(&DevicePtrHandle, u32), _| {
            if args.1 as usize * 4 <= args.0.size() {
                Ok(())
            } else {
                Err(handles_cuda::Error::InvalidArgument(
                    "too many elements".into(),
                ))
            }
        })
    }?;
    Ok(typed)
}

/// cudarc's launch of `add_one` over the first element of `slice`, one thread.
fn cudarc_add_one(
    stream: &Arc<cudarc::driver::CudaStream>,
    function: &cudarc::driver::CudaFunction,
    slice: &cudarc::driver::CudaSlice<u32>,
) -> Result<(), Failure> {
    let mut builder = stream.launch_builder(function);
    builder.arg(slice).arg(&1u32);
    // SAFETY: `add_one` touches one element of the slice.
    unsafe {
        builder.launch(cudarc::driver::LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        })
    }?;
    Ok(())
}

fn main() -> Result<(), Failure> {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(op)) = (args.next(), args.next()) else {
        return Err("usage: sim_count N OP (see the file's documentation)".into());
    };
    let n: usize = n.parse()?;
    let context = ContextHandle::primary(0)?;
    // The raw and cudarc forms assume a current context, as in gpu_bench.
    // SAFETY: the primary context is alive while `context` is.
    ok(unsafe { sys::cuCtxSetCurrent(context.as_cu()) })?;
    let flags = StreamFlags { non_blocking: true };
    let stream = StreamHandle::create(&context, flags, 0)?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let cudarc = CudaContext::new(0)?;
    // SAFETY: this context's slices are never shared across streams here.
    unsafe { cudarc.disable_event_tracking() };
    let cudarc_stream = cudarc.new_stream()?;
    let (raw_stream, raw_pool) = (stream.as_cu(), pool.as_cu());
    let timing_off = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    let mut graph_forms = None;
    if op.starts_with("graph") {
        let kernel = add_one()?;
        let buffer = DevicePtrHandle::alloc(&context, 4)?;
        let config = LaunchConfig::linear(1, 1);
        let nodes = if op.starts_with("graph10") { 10 } else { 1 };
        let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
            (0..nodes).try_for_each(|_| capture.launch(&kernel, &config, (&buffer, 1)))
        })?;
        let exec = graph.instantiate()?;
        let function = cudarc
            .load_module(cudarc::nvrtc::Ptx::from_src(PTX))?
            .load_function("add_one")?;
        let slice = cudarc_stream.alloc_zeros::<u32>(1)?;
        cudarc_stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)?;
        cudarc_add_one(&cudarc_stream, &function, &slice)?;
        let cudarc_graph = cudarc_stream
            .end_capture(sys::CUgraphInstantiate_flags(0))?
            .ok_or("cudarc's capture made no graph")?;
        // cudarc's graph does not keep its kernel's module loaded: the function is kept here.
        graph_forms = Some((exec, cudarc_graph, buffer, slice, function));
    }
    let mut launch_forms = None;
    if op.starts_with("launch") {
        let kernel = add_one()?;
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4, &stream)?;
        let function = cudarc
            .load_module(cudarc::nvrtc::Ptx::from_src(PTX))?
            .load_function("add_one")?;
        let slice = cudarc_stream.alloc_zeros::<u32>(1)?;
        launch_forms = Some((kernel, buffer, function, slice));
    }
    if op.ends_with("-unbound") {
        // The same loop on a thread where no context is current.
        let (ours, cudarc) = (context.clone(), cudarc.clone());
        return std::thread::spawn(move || -> Result<(), String> {
            for _ in 0..n {
                if op == "event-unbound" {
                    let event = EventHandle::create(&ours, EventFlags::default());
                    drop(keep(event.map_err(|error| error.to_string())?));
                } else {
                    let event = cudarc.new_event(None);
                    drop(keep(event.map_err(|error| error.to_string())?));
                }
            }
            Ok(())
        })
        .join()
        .map_err(|_| "the unbound thread panicked")?
        .map_err(Into::into);
    }
    let arc = Arc::new(raw_stream as usize);
    let mut raw_event = std::ptr::null_mut();
    // SAFETY: the primary context is current; an out-pointer. Destroyed after the loop.
    ok(unsafe { sys::cuEventCreate(&mut raw_event, timing_off) })?;
    let event = EventHandle::create(&context, EventFlags::default())?;
    let cudarc_event = cudarc.new_event(None)?;
    for _ in 0..n {
        match op.as_str() {
            "event-raw" => {
                let mut event = std::ptr::null_mut();
                // SAFETY: the primary context is current; the event is destroyed once.
                unsafe {
                    ok(sys::cuEventCreate(&mut event, timing_off))?;
                    ok(sys::cuEventDestroy_v2(keep(event)))?;
                }
            }
            "event" => drop(keep(EventHandle::create(&context, EventFlags::default())?)),
            "record-raw" => {
                // SAFETY: the event and the stream are alive.
                unsafe {
                    ok(sys::cuEventRecord(keep(raw_event), raw_stream))?;
                    ok(sys::cuEventSynchronize(raw_event))?;
                }
            }
            "record" => {
                keep(&event).record(&stream)?;
                event.synchronize()?;
            }
            "record-cudarc" => {
                keep(&cudarc_event).record(&cudarc_stream)?;
                cudarc_event.synchronize()?;
            }
            "event-cudarc" => drop(keep(cudarc.new_event(None)?)),
            "pool-raw" => {
                let mut ptr = 0;
                // SAFETY: pool and stream are alive; the pointer is freed once.
                unsafe {
                    ok(sys::cuMemAllocFromPoolAsync(
                        &mut ptr, 1024, raw_pool, raw_stream,
                    ))?;
                    ok(sys::cuMemFreeAsync(keep(ptr), raw_stream))?;
                }
            }
            "pool" => drop(keep(DevicePtrHandle::alloc_from_pool(
                &pool, 1024, &stream,
            )?)),
            // SAFETY: the memory is never read.
            "pool-cudarc" => drop(keep(unsafe { cudarc_stream.alloc::<u8>(1024) }?)),
            "stream-raw" => {
                let mut created = std::ptr::null_mut();
                // SAFETY: the primary context is current; the stream is destroyed once.
                unsafe {
                    ok(sys::cuStreamCreateWithPriority(&mut created, 1, 0))?;
                    ok(sys::cuStreamDestroy_v2(keep(created)))?;
                }
            }
            "stream" => drop(keep(StreamHandle::create(&context, flags, 0)?)),
            "stream-cudarc" => drop(keep(cudarc.new_stream()?)),
            "graph-raw" | "graph" | "graph-cudarc" | "graph10-raw" | "graph10" => {
                let (exec, cudarc_graph, ..) = graph_forms.as_ref().ok_or("no graph")?;
                match op.as_str() {
                    "graph-raw" | "graph10-raw" => {
                        // SAFETY: the executable graph and the stream are alive.
                        ok(unsafe { sys::cuGraphLaunch(exec.as_cu(), raw_stream) })?
                    }
                    "graph" | "graph10" => keep(exec).launch(&stream)?,
                    _ => keep(cudarc_graph).launch()?,
                }
            }
            "launch-raw" | "launch" | "launch-cudarc" => {
                let (kernel, buffer, function, slice) = launch_forms.as_ref().ok_or("no kernel")?;
                match op.as_str() {
                    "launch-raw" => {
                        let (mut data, mut elements) = (buffer.as_cu(), 1u32);
                        let mut params = [
                            (&raw mut data).cast::<std::ffi::c_void>(),
                            (&raw mut elements).cast::<std::ffi::c_void>(),
                        ];
                        // SAFETY: the kernel, stream and buffer are alive; `add_one` touches
                        // one element of the 4-byte buffer.
                        ok(unsafe {
                            sys::cuLaunchKernel(
                                kernel.kernel().as_cu() as sys::CUfunction,
                                1,
                                1,
                                1,
                                1,
                                1,
                                1,
                                0,
                                raw_stream,
                                params.as_mut_ptr(),
                                std::ptr::null_mut(),
                            )
                        })?
                    }
                    "launch" => keep(kernel).launch(
                        &stream,
                        &LaunchConfig::linear(1, 1),
                        (keep(buffer), 1),
                    )?,
                    _ => cudarc_add_one(&cudarc_stream, function, slice)?,
                }
            }
            "clone-arc" => drop(keep(keep(&arc).clone())),
            "clone" => drop(keep(keep(&stream).clone())),
            other => return Err(format!("unknown operation {other}").into()),
        }
    }
    stream.synchronize()?;
    cudarc_stream.synchronize()?;
    // SAFETY: created above, destroyed once; its records have completed.
    ok(unsafe { sys::cuEventDestroy_v2(raw_event) })?;
    Ok(())
}
