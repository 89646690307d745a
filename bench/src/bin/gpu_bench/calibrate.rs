//! `gpu_bench calibrate`: the raw driver calls behind each layer's launch and allocation,
//! side by side, to tell the driver's own differences from the layers'. The layers do not
//! reach the driver through the same objects: handles-cuda launches a library's kernel
//! (`CUkernel`, from `cuLibraryLoadData`) where cudarc launches a module's function
//! (`CUfunction`, from `cuModuleLoadData`); it captures graphs on a stream of its own and
//! launches them on another, where cudarc captures and launches on one stream; and it
//! allocates from a pool it made (`cuMemAllocFromPoolAsync`) where cudarc allocates from the
//! device's current pool (`cuMemAllocAsync`); and it copies with `cuMemcpyAsync` (unified
//! addresses) where cudarc and the raw serving loop name the direction (`cuMemcpyHtoDAsync`
//! and its kin). Every row here is raw driver calls only.

use std::sync::Arc;

use cudarc::driver::sys;
use handles_bench::{Measured, Variant, interleave, keep};
use handles_cuda::{ContextHandle, DevicePtrHandle, MemoryPoolHandle, StreamHandle};

use super::{ELEMENTS, PTX, add_one, ok, report};

/// Prints the three calibration tables.
pub fn report_all(
    context: &ContextHandle,
    stream: &StreamHandle,
    pool: &MemoryPoolHandle,
    cudarc_stream: &Arc<cudarc::driver::CudaStream>,
) {
    let module_function = module_function();
    report(
        "calibration: raw cuLaunchKernel by kernel handle (1 block of 256)",
        &launches(stream, cudarc_stream, module_function),
    );
    report(
        "calibration: raw cuGraphLaunch by graph and stream (1 kernel node)",
        &graph_launches(context, stream, cudarc_stream),
    );
    report(
        "calibration: raw stream-ordered alloc+free 1 KiB by entry point and pool",
        &allocations(stream, pool, cudarc_stream),
    );
    report(
        "calibration: raw 4 KiB async copy by entry point (pinned host, device)",
        &copies(context, stream, pool),
    );
}

/// `add_one` from a module loaded in the current context, as cudarc loads it.
fn module_function() -> sys::CUfunction {
    let image = std::ffi::CString::new(PTX).unwrap();
    let mut module = std::ptr::null_mut();
    let mut function = std::ptr::null_mut();
    // SAFETY: the primary context is current; `image` is NUL-terminated PTX; both are
    // out-pointers. The module is never unloaded: it lives as long as the process.
    unsafe {
        ok(sys::cuModuleLoadData(&mut module, image.as_ptr().cast()));
        ok(sys::cuModuleGetFunction(
            &mut function,
            module,
            c"add_one".as_ptr(),
        ));
    }
    function
}

/// One `cuLaunchKernel` of `add_one` over `buffer` (of at least `ELEMENTS` 32-bit values), the
/// primary context current.
pub(super) fn launch(function: sys::CUfunction, stream: sys::CUstream, buffer: sys::CUdeviceptr) {
    let (mut data, mut n) = (buffer, ELEMENTS);
    let mut params = [
        (&raw mut data).cast::<std::ffi::c_void>(),
        (&raw mut n).cast::<std::ffi::c_void>(),
    ];
    // SAFETY: the primary context is current; the function, stream and buffer are alive
    // (the callers keep them); `add_one` touches `ELEMENTS` elements of the buffer.
    unsafe {
        ok(sys::cuLaunchKernel(
            keep(function),
            1,
            1,
            1,
            ELEMENTS,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ))
    }
}

fn launches(
    stream: &StreamHandle,
    cudarc_stream: &Arc<cudarc::driver::CudaStream>,
    module_function: sys::CUfunction,
) -> Measured {
    let add_one = add_one();
    let library_kernel = add_one.kernel().as_cu() as sys::CUfunction;
    let mut context_function = std::ptr::null_mut();
    // SAFETY: the kernel is alive and the primary context current; an out-pointer.
    unsafe {
        ok(sys::cuKernelGetFunction(
            &mut context_function,
            add_one.kernel().as_cu(),
        ))
    };
    let buffer = DevicePtrHandle::alloc(stream.context().as_ref().unwrap(), 1024).unwrap();
    let (ours, theirs, raw_buffer) = (stream.as_cu(), cudarc_stream.cu_stream(), buffer.as_cu());
    interleave(
        &mut [
            Variant::new("library kernel (CUkernel), our stream", || {
                launch(library_kernel, ours, raw_buffer)
            }),
            Variant::new("cuKernelGetFunction's CUfunction, our stream", || {
                launch(context_function, ours, raw_buffer)
            }),
            Variant::new("module function (CUfunction), our stream", || {
                launch(module_function, ours, raw_buffer)
            }),
            Variant::new("module function, cudarc's stream", || {
                launch(module_function, theirs, raw_buffer)
            }),
        ],
        super::ROUNDS,
        super::LAUNCHES,
        || {
            stream.synchronize().unwrap();
            cudarc_stream.synchronize().unwrap();
        },
    )
}

/// An executable graph of one `add_one` node captured on `on` with raw calls.
fn captured(
    on: sys::CUstream,
    function: sys::CUfunction,
    buffer: sys::CUdeviceptr,
) -> sys::CUgraphExec {
    let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: `on` is alive and idle; the graph is destroyed once its executable graph is
    // made; both are out-pointers. The executable graph lives as long as the process.
    unsafe {
        ok(sys::cuStreamBeginCapture_v2(
            on,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        ));
        launch(function, on, buffer);
        ok(sys::cuStreamEndCapture(on, &mut graph));
        ok(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
        ok(sys::cuGraphDestroy(graph));
    }
    exec
}

fn graph_launches(
    context: &ContextHandle,
    stream: &StreamHandle,
    cudarc_stream: &Arc<cudarc::driver::CudaStream>,
) -> Measured {
    let add_one = add_one();
    let library_kernel = add_one.kernel().as_cu() as sys::CUfunction;
    let buffer = DevicePtrHandle::alloc(context, 1024).unwrap();
    let (ours, theirs) = (stream.as_cu(), cudarc_stream.cu_stream());
    // A third stream for the capture, as `GraphHandle::capture` does.
    let mut capture_stream = std::ptr::null_mut();
    // SAFETY: the primary context is current; an out-pointer. Lives as long as the process.
    unsafe {
        ok(sys::cuStreamCreate(
            &mut capture_stream,
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
        ))
    };
    let module_function = module_function();
    let kernel_elsewhere = captured(capture_stream, library_kernel, buffer.as_cu());
    let kernel_here = captured(theirs, library_kernel, buffer.as_cu());
    let function_here = captured(theirs, module_function, buffer.as_cu());
    let graph = |exec: sys::CUgraphExec, on: sys::CUstream| {
        // SAFETY: the executable graph and the stream live as long as the process.
        move || unsafe { ok(sys::cuGraphLaunch(keep(exec), on)) }
    };
    // What handles-cuda adds around the call: the graph's lock (the driver's serialization).
    let lock = std::sync::Mutex::new(());
    let locked = |exec: sys::CUgraphExec, on: sys::CUstream| {
        let (lock, launch) = (&lock, graph(exec, on));
        move || {
            let _held = keep(lock).lock().unwrap();
            launch();
        }
    };
    interleave(
        &mut [
            Variant::new(
                "library kernel, captured elsewhere, our stream",
                graph(kernel_elsewhere, ours),
            ),
            Variant::new(
                "library kernel, captured elsewhere, cudarc's stream",
                graph(kernel_elsewhere, theirs),
            ),
            Variant::new(
                "library kernel, captured on cudarc's stream, launched there",
                graph(kernel_here, theirs),
            ),
            Variant::new(
                "module function, captured on cudarc's stream, launched there",
                graph(function_here, theirs),
            ),
            Variant::new(
                "module function, captured on cudarc's stream, our stream",
                graph(function_here, ours),
            ),
            Variant::new(
                "library kernel, captured elsewhere, our stream, cuCtxGetCurrent first",
                asked_first(graph(kernel_elsewhere, ours)),
            ),
            Variant::new(
                "library kernel, captured elsewhere, our stream, a mutex held",
                locked(kernel_elsewhere, ours),
            ),
        ],
        super::ROUNDS,
        super::LAUNCHES,
        || {
            stream.synchronize().unwrap();
            cudarc_stream.synchronize().unwrap();
        },
    )
}

/// `call` after a `cuCtxGetCurrent`, as cudarc's calls ask first (`bind_to_thread`).
fn asked_first(call: impl Fn()) -> impl Fn() {
    move || {
        let mut current = std::ptr::null_mut();
        // SAFETY: an out-pointer.
        unsafe { ok(sys::cuCtxGetCurrent(keep(&mut current))) };
        call();
    }
}

fn allocations(
    stream: &StreamHandle,
    pool: &MemoryPoolHandle,
    cudarc_stream: &Arc<cudarc::driver::CudaStream>,
) -> Measured {
    let (ours, theirs, made) = (stream.as_cu(), cudarc_stream.cu_stream(), pool.as_cu());
    let mut current = std::ptr::null_mut();
    // SAFETY: device 0 exists; an out-pointer.
    unsafe { ok(sys::cuDeviceGetMemPool(&mut current, 0)) };
    let from_pool = |pool: sys::CUmemoryPool, on: sys::CUstream| {
        move || {
            let mut ptr = 0;
            // SAFETY: the pool and stream are alive; the pointer is freed once.
            unsafe {
                ok(sys::cuMemAllocFromPoolAsync(&mut ptr, 1024, keep(pool), on));
                ok(sys::cuMemFreeAsync(keep(ptr), on));
            }
        }
    };
    let from_current = |on: sys::CUstream| {
        move || {
            let mut ptr = 0;
            // SAFETY: the stream is alive; the pointer is freed once.
            unsafe {
                ok(sys::cuMemAllocAsync(&mut ptr, 1024, keep(on)));
                ok(sys::cuMemFreeAsync(keep(ptr), on));
            }
        }
    };
    interleave(
        &mut [
            Variant::new(
                "FromPoolAsync, a made pool, our stream",
                from_pool(made, ours),
            ),
            Variant::new(
                "FromPoolAsync, the current pool, our stream",
                from_pool(current, ours),
            ),
            Variant::new(
                "AllocAsync (the current pool), our stream",
                from_current(ours),
            ),
            Variant::new("AllocAsync, cudarc's stream", from_current(theirs)),
            Variant::new(
                "FromPoolAsync, a made pool, cudarc's stream",
                from_pool(made, theirs),
            ),
            Variant::new(
                "FromPoolAsync, a made pool, our stream, cuCtxGetCurrent first",
                asked_first(from_pool(made, ours)),
            ),
        ],
        super::ROUNDS,
        1000,
        || {
            stream.synchronize().unwrap();
            cudarc_stream.synchronize().unwrap();
        },
    )
}

/// A 4 KiB copy queued on `stream` by each entry point: the unified `cuMemcpyAsync` against
/// the direction-named calls, from and to pinned host memory (`cuMemHostAlloc`) and between
/// two pool allocations.
fn copies(context: &ContextHandle, stream: &StreamHandle, pool: &MemoryPoolHandle) -> Measured {
    const BYTES: usize = 4096;
    let pinned_buffer = DevicePtrHandle::alloc_host(context, BYTES).unwrap();
    let (first, second) = (
        DevicePtrHandle::alloc_from_pool(pool, BYTES, stream).unwrap(),
        DevicePtrHandle::alloc_from_pool(pool, BYTES, stream).unwrap(),
    );
    stream.synchronize().unwrap();
    // The three buffers stay alive for the measurement (their handles are dropped when this
    // function returns, after the last batch was waited for), each `BYTES` long; only this
    // stream touches them, in order.
    let (on, host, a, b) = (
        stream.as_cu(),
        pinned_buffer.as_cu(),
        first.as_cu(),
        second.as_cu(),
    );
    let pinned = host as usize as *mut std::ffi::c_void;
    // One variant per entry point, each the same call shape on the buffers above.
    macro_rules! copies {
        ($($name:literal => $call:expr,)*) => {
            [$(Variant::new($name, || {
                // SAFETY: live buffers of `BYTES` bytes, used on this stream only (above).
                unsafe { ok($call) }
            })),*]
        };
    }
    interleave(
        &mut copies![
            "host to device: cuMemcpyAsync" => sys::cuMemcpyAsync(keep(a), host, BYTES, on),
            "host to device: cuMemcpyHtoDAsync" => sys::cuMemcpyHtoDAsync_v2(keep(a), pinned, BYTES, on),
            "device to host: cuMemcpyAsync" => sys::cuMemcpyAsync(keep(host), a, BYTES, on),
            "device to host: cuMemcpyDtoHAsync" => sys::cuMemcpyDtoHAsync_v2(keep(pinned), a, BYTES, on),
            "device to device: cuMemcpyAsync" => sys::cuMemcpyAsync(keep(b), a, BYTES, on),
            "device to device: cuMemcpyDtoDAsync" => sys::cuMemcpyDtoDAsync_v2(keep(b), a, BYTES, on),
        ],
        super::ROUNDS,
        200,
        || stream.synchronize().unwrap(),
    )
}
