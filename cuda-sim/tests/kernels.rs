//! Libraries, kernel launches, stream capture, graphs and user objects on the simulator. As in
//! `selftest.rs`, each scenario drives raw `cudarc::driver::sys` calls in a child process (this
//! test binary, re-executed with the simulator on its library path), and the parent test reads
//! the child's report.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::sys::{self, CUresult};

mod common;
use common::*;

/// Launches `kernel` over `threads` threads (blocks of 128) with `(dst, value, n)` or
/// `(dst, src, n)` style arguments; returns the status.
fn launch(
    kernel: sys::CUkernel,
    stream: sys::CUstream,
    threads: u32,
    (first, second, n): (u64, u64, u32),
    second_is_u32: bool,
) -> CUresult {
    let blocks = threads.div_ceil(128);
    if second_is_u32 {
        launch_kernel(kernel, blocks, 128, stream, (first, second as u32, n))
    } else {
        launch_kernel(kernel, blocks, 128, stream, (first, second, n))
    }
}

fn read_u32(ptr: sys::CUdeviceptr, n: usize) -> Vec<u32> {
    let mut host = vec![0u32; n];
    // SAFETY: `host` has room for `n` values.
    unsafe { ok(sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), ptr, 4 * n)) };
    host
}

fn kernel_attribute(kernel: sys::CUkernel, attribute: sys::CUfunction_attribute) -> i32 {
    let mut value = 0;
    // SAFETY: valid out-pointer, live kernel.
    unsafe { ok(sys::cuKernelGetAttribute(&mut value, attribute, kernel, 0)) };
    value
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_library_and_launches() {
    use sys::CUfunction_attribute::*;
    child();
    // Libraries need no context.
    // SAFETY: plain driver call.
    unsafe { ok(sys::cuInit(0)) };
    let library = load();
    setup();
    let stream = new_stream();
    // SAFETY: valid pointers throughout; every launch argument outlives its call.
    unsafe {
        let mut count = 0;
        ok(sys::cuLibraryGetKernelCount(&mut count, library));
        assert_eq!(count, 5);
        let mut missing = std::ptr::null_mut();
        assert_eq!(
            sys::cuLibraryGetKernel(&mut missing, library, c"nope".as_ptr()),
            CUresult::CUDA_ERROR_NOT_FOUND
        );
        let (fill, add, copy) = (
            kernel(library, c"fill_u32"),
            kernel(library, c"add_u32"),
            kernel(library, c"copy_u32"),
        );
        assert_eq!(fill, kernel(library, c"fill_u32"), "one handle per kernel");
        let mut name = std::ptr::null();
        ok(sys::cuKernelGetName(&mut name, copy));
        assert_eq!(std::ffi::CStr::from_ptr(name), c"copy_u32");
        let mut owner = std::ptr::null_mut();
        ok(sys::cuKernelGetLibrary(&mut owner, add));
        assert_eq!(owner, library);
        let layout: Vec<(usize, usize)> = (0..3)
            .map(|i| {
                let (mut offset, mut size) = (0, 0);
                ok(sys::cuKernelGetParamInfo(copy, i, &mut offset, &mut size));
                (offset, size)
            })
            .collect();
        assert_eq!(layout, [(0, 8), (8, 8), (16, 4)]);
        let (mut offset, mut size) = (0, 0);
        assert_eq!(
            sys::cuKernelGetParamInfo(copy, 3, &mut offset, &mut size),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );

        // Attributes.
        assert_eq!(
            kernel_attribute(fill, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            1024
        );
        assert_eq!(kernel_attribute(fill, CU_FUNC_ATTRIBUTE_NUM_REGS), 16);
        assert_eq!(kernel_attribute(fill, CU_FUNC_ATTRIBUTE_PTX_VERSION), 90);
        let dynamic = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        assert_eq!(kernel_attribute(fill, dynamic), 49152);
        let mut value = 0;
        assert_eq!(
            sys::cuKernelGetAttribute(&mut value, dynamic, fill, 7),
            CUresult::CUDA_ERROR_INVALID_DEVICE
        );
        assert_eq!(
            sys::cuKernelSetAttribute(dynamic, 232449, fill, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        ok(sys::cuKernelSetAttribute(dynamic, 100_000, fill, 0));
        assert_eq!(kernel_attribute(fill, dynamic), 100_000);
        let mut function = std::ptr::null_mut();
        ok(sys::cuKernelGetFunction(&mut function, add));
        ok(sys::cuFuncGetAttribute(&mut value, dynamic, function));
        assert_eq!(value, 49152);
        ok(sys::cuFuncSetAttribute(function, dynamic, 65536));
        assert_eq!(kernel_attribute(add, dynamic), 65536);

        // fill, add (through the function), copy; read back.
        let n = 1000usize;
        let (mut a, mut b) = (0, 0);
        ok(sys::cuMemAlloc_v2(&mut a, 4 * n));
        ok(sys::cuMemAlloc_v2(&mut b, 4 * n));
        ok(launch(fill, stream, 1024, (a, 7, n as u32), true));
        ok(launch(
            function as sys::CUkernel,
            stream,
            1024,
            (a, 3, 500),
            true,
        ));
        ok(launch(copy, stream, 1024, (b, a, n as u32), false));
        ok(sys::cuStreamSynchronize(stream));
        let back = read_u32(b, n);
        assert!(back[..500].iter().all(|&v| v == 10), "{:?}", &back[..4]);
        assert!(back[500..].iter().all(|&v| v == 7));

        // The driver's checks of launch configurations.
        let mut args = (a, 1u32, n as u32);
        let mut params = [
            (&mut args.0 as *mut u64).cast::<c_void>(),
            (&mut args.1 as *mut u32).cast(),
            (&mut args.2 as *mut u32).cast(),
        ];
        let f = fill as sys::CUfunction;
        let p = params.as_mut_ptr();
        let null = std::ptr::null_mut();
        let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
        assert_eq!(
            sys::cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, stream, p, null),
            invalid
        );
        assert_eq!(
            sys::cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, stream, p, null),
            invalid
        );
        assert_eq!(
            sys::cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, stream, p, null),
            invalid
        );
        assert_eq!(
            sys::cuLaunchKernel(f, 1, 1, 1, 64, 32, 1, 0, stream, p, null),
            invalid
        );
        let huge = 200_000;
        assert_eq!(
            sys::cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, huge, stream, p, null),
            invalid
        );
        ok(sys::cuLaunchKernel(
            f, 1, 1, 1, 32, 1, 1, 100_000, stream, p, null,
        ));
        let mut extra = [std::ptr::null_mut::<c_void>()];
        assert_eq!(
            sys::cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, p, extra.as_mut_ptr()),
            invalid
        );

        // cuLaunchKernelEx with cluster dimensions.
        let cluster = |x: u32| {
            let mut attribute: sys::CUlaunchAttribute = std::mem::zeroed();
            attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attribute.value.clusterDim.x = x;
            attribute.value.clusterDim.y = 1;
            attribute.value.clusterDim.z = 1;
            attribute
        };
        let launch_ex = |grid: u32, mut attribute: sys::CUlaunchAttribute| {
            let config = sys::CUlaunchConfig {
                gridDimX: grid,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: 128,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                hStream: stream,
                attrs: &mut attribute,
                numAttrs: 1,
            };
            sys::cuLaunchKernelEx(&config, f, p, std::ptr::null_mut())
        };
        ok(launch_ex(8, cluster(2)));
        assert_eq!(launch_ex(8, cluster(3)), invalid);
        assert_eq!(
            launch_ex(16, cluster(16)),
            CUresult::CUDA_ERROR_INVALID_CLUSTER_SIZE
        );
        let mut cooperative = cluster(1);
        cooperative.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
        assert_eq!(launch_ex(8, cooperative), invalid);
        ok(sys::cuStreamSynchronize(stream));
        assert!(read_u32(a, n).iter().all(|&v| v == 1));

        // Not PTX.
        let mut other = std::ptr::null_mut();
        let garbage = b"\x7fELF\x02\x01\0";
        assert_eq!(
            sys::cuLibraryLoadData(
                &mut other,
                garbage.as_ptr().cast(),
                null.cast(),
                null,
                0,
                null.cast(),
                null,
                0
            ),
            CUresult::CUDA_ERROR_INVALID_IMAGE
        );
        ok(sys::cuMemFree_v2(a));
        ok(sys::cuMemFree_v2(b));
    }
    destroy_stream(stream);
    teardown();
    // Libraries need no context.
    unload(library);
}

/// Fills 128 elements of a 64-element allocation.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_launch_out_of_bounds() {
    child();
    setup();
    let library = load();
    let stream = new_stream();
    let mut ptr = 0;
    // SAFETY: valid out-pointer; the launch's range is the test.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut ptr, 256));
        let status = launch(
            kernel(library, c"fill_u32"),
            stream,
            128,
            (ptr, 1, 128),
            true,
        );
        assert_eq!(status, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemFree_v2(ptr));
    }
    destroy_stream(stream);
    unload(library);
    teardown();
}

/// Launches on stream `a`, frees on `b`: ordered by an event when `ordered`.
fn launch_then_free(ordered: bool) {
    child();
    setup();
    let library = load();
    let (a, b) = (new_stream(), new_stream());
    let mut ptr = 0;
    let mut event = std::ptr::null_mut();
    // SAFETY: live streams, event and allocation.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 4096, a));
        ok(launch(
            kernel(library, c"fill_u32"),
            a,
            1024,
            (ptr, 9, 1024),
            true,
        ));
        ok(sys::cuEventCreate(&mut event, 2));
        if ordered {
            ok(sys::cuEventRecord(event, a));
            ok(sys::cuStreamWaitEvent(b, event, 0));
        }
        ok(sys::cuMemFreeAsync(ptr, b));
        ok(sys::cuStreamSynchronize(b));
        ok(sys::cuStreamSynchronize(a));
        ok(sys::cuEventDestroy_v2(event));
    }
    destroy_stream(a);
    destroy_stream(b);
    unload(library);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_launch_unordered_free() {
    launch_then_free(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_launch_ordered_free() {
    launch_then_free(true);
}

/// Launches a kernel on freed memory.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_launch_after_free() {
    child();
    setup();
    let library = load();
    let stream = new_stream();
    let mut ptr = 0;
    // SAFETY: deliberately uses freed memory; the simulator checks the range.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 4096, stream));
        ok(sys::cuMemFreeAsync(ptr, stream));
        let status = launch(kernel(library, c"fill_u32"), stream, 16, (ptr, 1, 16), true);
        assert_ne!(status, CUresult::CUDA_SUCCESS);
        ok(sys::cuStreamSynchronize(stream));
    }
    destroy_stream(stream);
    unload(library);
    teardown();
}

/// Captures memset + add into a graph, launches it twice, reads back; plus the capture errors.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_capture() {
    use sys::CUstreamCaptureMode::*;
    use sys::CUstreamCaptureStatus::*;
    child();
    setup();
    let library = load();
    let add = kernel(library, c"add_u32");
    let stream = new_stream();
    let n = 256usize;
    // SAFETY: valid pointers throughout; arguments outlive their calls.
    unsafe {
        let mut ptr = 0;
        ok(sys::cuMemAllocAsync(&mut ptr, 4 * n, stream));
        ok(sys::cuMemsetD32Async(ptr, 100, n, stream));
        ok(sys::cuStreamSynchronize(stream));

        let mut graph = std::ptr::null_mut();
        assert_eq!(
            sys::cuStreamEndCapture(stream, &mut graph),
            CUresult::CUDA_ERROR_ILLEGAL_STATE
        );
        ok(sys::cuStreamBeginCapture_v2(
            stream,
            CU_STREAM_CAPTURE_MODE_GLOBAL,
        ));
        let mut status = CU_STREAM_CAPTURE_STATUS_NONE;
        ok(sys::cuStreamIsCapturing(stream, &mut status));
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        ok(sys::cuMemsetD32Async(ptr, 1, n, stream));
        ok(launch(add, stream, n as u32, (ptr, 5, n as u32), true));
        let (mut id, mut captured, mut deps, mut count) =
            (0, std::ptr::null_mut(), std::ptr::null(), 0);
        ok(sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            &mut id,
            &mut captured,
            &mut deps,
            std::ptr::null_mut(),
            &mut count,
        ));
        assert_eq!(count, 1);
        let mut extra = 0;
        assert_eq!(
            sys::cuMemAllocAsync(&mut extra, 64, stream),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            "the simulator makes no memory nodes"
        );
        // That invalidated the capture: start again.
        assert_eq!(
            sys::cuStreamEndCapture(stream, &mut graph),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        assert!(graph.is_null());
        ok(sys::cuStreamBeginCapture_v2(
            stream,
            CU_STREAM_CAPTURE_MODE_RELAXED,
        ));
        ok(sys::cuMemsetD32Async(ptr, 1, n, stream));
        ok(launch(add, stream, n as u32, (ptr, 5, n as u32), true));
        ok(sys::cuStreamEndCapture(stream, &mut graph));
        assert!(!captured.is_null(), "the capture's graph was handed out");
        // Nothing ran yet.
        assert!(read_u32(ptr, n).iter().all(|&v| v == 100));
        let mut nodes = 0;
        ok(sys::cuGraphGetNodes(
            graph,
            std::ptr::null_mut(),
            &mut nodes,
        ));
        assert_eq!(nodes, 2);
        let exec = instantiate(graph);
        ok(sys::cuGraphDestroy(graph));
        ok(sys::cuGraphUpload(exec, stream));
        ok(sys::cuGraphLaunch(exec, stream));
        ok(sys::cuGraphLaunch(exec, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert!(read_u32(ptr, n).iter().all(|&v| v == 6));

        // Fork and join: a second stream joins the capture through a captured event.
        let side = new_stream();
        let (mut fork, mut join) = (std::ptr::null_mut(), std::ptr::null_mut());
        ok(sys::cuEventCreate(&mut fork, 2));
        ok(sys::cuEventCreate(&mut join, 2));
        ok(sys::cuStreamBeginCapture_v2(
            stream,
            CU_STREAM_CAPTURE_MODE_GLOBAL,
        ));
        ok(sys::cuMemsetD32Async(ptr, 40, n, stream));
        ok(sys::cuEventRecord(fork, stream));
        ok(sys::cuStreamWaitEvent(side, fork, 0));
        ok(sys::cuStreamIsCapturing(side, &mut status));
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_ACTIVE, "joined");
        ok(launch(add, side, n as u32, (ptr, 2, n as u32), true));
        ok(sys::cuEventRecord(join, side));
        ok(sys::cuStreamWaitEvent(stream, join, 0));
        ok(sys::cuStreamEndCapture(stream, &mut graph));
        ok(sys::cuStreamIsCapturing(side, &mut status));
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_NONE);
        ok(sys::cuGraphGetNodes(
            graph,
            std::ptr::null_mut(),
            &mut nodes,
        ));
        assert_eq!(nodes, 2, "memset, kernel: a captured record makes no node");
        let forked = instantiate(graph);
        ok(sys::cuGraphLaunch(forked, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert!(read_u32(ptr, n).iter().all(|&v| v == 42));
        destroy_graph(forked, graph);
        ok(sys::cuEventDestroy_v2(fork));
        ok(sys::cuEventDestroy_v2(join));
        destroy_stream(side);

        // A synchronisation inside a capture invalidates it.
        ok(sys::cuStreamBeginCapture_v2(
            stream,
            CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        ));
        ok(sys::cuGraphLaunch(exec, stream));
        assert_eq!(
            sys::cuStreamSynchronize(stream),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        );
        assert_eq!(
            sys::cuMemsetD32Async(ptr, 1, n, stream),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        assert_eq!(
            sys::cuStreamEndCapture(stream, &mut graph),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        ok(sys::cuThreadExchangeStreamCaptureMode(&mut mode));
        assert_eq!(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
        ok(sys::cuThreadExchangeStreamCaptureMode(&mut mode));

        ok(sys::cuGraphExecDestroy(exec));
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuStreamSynchronize(stream));
    }
    destroy_stream(stream);
    unload(library);
    teardown();
}

/// A graph of a memset node and a kernel node (`fill_u32` with `value`), built by hand.
///
/// # Safety
///
/// `ptr` is a live allocation of at least `4 * n` bytes.
unsafe fn memset_then_fill(
    fill: sys::CUkernel,
    ptr: sys::CUdeviceptr,
    n: u32,
    value: u32,
    memset_first: bool,
) -> sys::CUgraph {
    let mut graph = std::ptr::null_mut();
    let mut context = std::ptr::null_mut();
    let mut args = (ptr, value, n);
    let mut params = [
        (&mut args.0 as *mut u64).cast::<c_void>(),
        (&mut args.1 as *mut u32).cast(),
        (&mut args.2 as *mut u32).cast(),
    ];
    // SAFETY: valid pointers; the node copies the arguments.
    unsafe {
        ok(sys::cuCtxGetCurrent(&mut context));
        ok(sys::cuGraphCreate(&mut graph, 0));
        let mut first = std::ptr::null_mut();
        if memset_first {
            let memset = sys::CUDA_MEMSET_NODE_PARAMS {
                dst: ptr,
                pitch: 0,
                value: 0,
                elementSize: 4,
                width: n as usize,
                height: 1,
            };
            ok(sys::cuGraphAddMemsetNode(
                &mut first,
                graph,
                std::ptr::null(),
                0,
                &memset,
                context,
            ));
        } else {
            ok(sys::cuGraphAddEmptyNode(
                &mut first,
                graph,
                std::ptr::null(),
                0,
            ));
        }
        let mut node_params: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        node_params.kern = fill;
        node_params.gridDimX = n.div_ceil(128);
        node_params.gridDimY = 1;
        node_params.gridDimZ = 1;
        node_params.blockDimX = 128;
        node_params.blockDimY = 1;
        node_params.blockDimZ = 1;
        node_params.kernelParams = params.as_mut_ptr();
        let mut node = std::ptr::null_mut();
        ok(sys::cuGraphAddKernelNode_v2(
            &mut node,
            graph,
            &first,
            1,
            &node_params,
        ));
    }
    graph
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_exec_update() {
    use sys::CUgraphExecUpdateResult::*;
    child();
    setup();
    let library = load();
    let fill = kernel(library, c"fill_u32");
    let stream = new_stream();
    let n = 300u32;
    // SAFETY: valid pointers; the graphs use a live allocation.
    unsafe {
        let mut ptr = 0;
        ok(sys::cuMemAlloc_v2(&mut ptr, 4 * n as usize));
        let first = memset_then_fill(fill, ptr, n, 11, true);
        let exec = instantiate(first);
        ok(sys::cuGraphLaunch(exec, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert!(read_u32(ptr, n as usize).iter().all(|&v| v == 11));

        let same_shape = memset_then_fill(fill, ptr, n, 22, true);
        let mut info: sys::CUgraphExecUpdateResultInfo = std::mem::zeroed();
        ok(sys::cuGraphExecUpdate_v2(exec, same_shape, &mut info));
        assert_eq!(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
        ok(sys::cuGraphLaunch(exec, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert!(read_u32(ptr, n as usize).iter().all(|&v| v == 22));

        let other_types = memset_then_fill(fill, ptr, n, 33, false);
        assert_eq!(
            sys::cuGraphExecUpdate_v2(exec, other_types, &mut info),
            CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
        );
        assert_eq!(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
        let mut smaller = std::ptr::null_mut();
        let mut node = std::ptr::null_mut();
        ok(sys::cuGraphCreate(&mut smaller, 0));
        ok(sys::cuGraphAddEmptyNode(
            &mut node,
            smaller,
            std::ptr::null(),
            0,
        ));
        assert_eq!(
            sys::cuGraphExecUpdate_v2(exec, smaller, &mut info),
            CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
        );
        assert_eq!(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
        // The failed updates left the exec as it was.
        ok(sys::cuGraphLaunch(exec, stream));
        ok(sys::cuStreamSynchronize(stream));
        assert!(read_u32(ptr, n as usize).iter().all(|&v| v == 22));

        for graph in [first, same_shape, other_types, smaller] {
            ok(sys::cuGraphDestroy(graph));
        }
        ok(sys::cuGraphExecDestroy(exec));
        ok(sys::cuMemFree_v2(ptr));
    }
    destroy_stream(stream);
    unload(library);
    teardown();
}

static DESTROYED: AtomicUsize = AtomicUsize::new(0);

/// A destructor whose data is the counter it increments.
unsafe extern "C" fn count_destruction(data: *mut c_void) {
    // SAFETY: the data registered with the destructor is `&DESTROYED`.
    let counter = unsafe { &*data.cast::<AtomicUsize>() };
    counter.fetch_add(1, Ordering::SeqCst);
}

fn counter() -> *mut c_void {
    (&DESTROYED as *const AtomicUsize).cast_mut().cast()
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_user_objects() {
    child();
    setup();
    // SAFETY: valid pointers; the destructor is a plain function.
    unsafe {
        let mut object = std::ptr::null_mut();
        assert_eq!(
            sys::cuUserObjectCreate(&mut object, counter(), Some(count_destruction), 1, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "CU_USER_OBJECT_NO_DESTRUCTOR_SYNC is required"
        );
        let sync = sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32;
        ok(sys::cuUserObjectCreate(
            &mut object,
            counter(),
            Some(count_destruction),
            1,
            sync,
        ));
        let graph = new_graph();
        let moved = sys::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as u32;
        ok(sys::cuGraphRetainUserObject(graph, object, 1, moved));
        let exec = instantiate(graph);
        ok(sys::cuGraphDestroy(graph));
        assert_eq!(
            DESTROYED.load(Ordering::SeqCst),
            0,
            "the exec holds a reference"
        );
        ok(sys::cuUserObjectRetain(object, 2));
        ok(sys::cuGraphExecDestroy(exec));
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 0, "the program holds two");
        ok(sys::cuUserObjectRelease(object, 2));
        assert_eq!(
            DESTROYED.load(Ordering::SeqCst),
            1,
            "the last reference went"
        );
    }
    teardown();
}

unsafe extern "C" fn calls_the_driver(_: *mut c_void) {
    let mut context = std::ptr::null_mut();
    // SAFETY: a forbidden call, on purpose; valid out-pointer.
    let status = unsafe { sys::cuCtxGetCurrent(&mut context) };
    assert_eq!(status, CUresult::CUDA_ERROR_NOT_PERMITTED);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_call_from_destructor() {
    child();
    setup();
    let sync = sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32;
    // SAFETY: valid pointers; the destructor misbehaves on purpose.
    unsafe {
        let mut object = std::ptr::null_mut();
        ok(sys::cuUserObjectCreate(
            &mut object,
            std::ptr::null_mut(),
            Some(calls_the_driver),
            1,
            sync,
        ));
        ok(sys::cuUserObjectRelease(object, 1));
    }
    teardown();
}

/// Builds a graph with a kernel node, instantiates it, unloads the library, launches.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_graph_after_unload() {
    child();
    setup();
    let library = load();
    let stream = new_stream();
    // SAFETY: deliberately launches a graph whose kernel's library is gone.
    unsafe {
        let mut ptr = 0;
        ok(sys::cuMemAlloc_v2(&mut ptr, 1024));
        let graph = memset_then_fill(kernel(library, c"fill_u32"), ptr, 256, 1, true);
        let exec = instantiate(graph);
        unload(library);
        assert_eq!(
            sys::cuGraphLaunch(exec, stream),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        ok(sys::cuStreamSynchronize(stream));
        destroy_graph(exec, graph);
        ok(sys::cuMemFree_v2(ptr));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_leaks() {
    child();
    setup();
    let _library = load();
    // The graph and its exec are leaked on purpose.
    let _leaked = instantiate(new_graph());
}

#[test]
fn kernels_graphs_and_user_objects_work() {
    for scenario in [
        "scenario_library_and_launches",
        "scenario_launch_ordered_free",
        "scenario_capture",
        "scenario_exec_update",
        "scenario_user_objects",
    ] {
        let (output, report) = run(scenario, |_| {});
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{scenario}:\n{}\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        );
        let report = report.unwrap_or_else(|| panic!("{scenario} wrote no report"));
        assert!(report.violations.is_empty(), "{scenario}: {report:?}");
        assert!(
            report.leaks_without_primary().is_empty(),
            "{scenario}: {:?}",
            report.leaks
        );
        assert!(!stderr.contains("cuda-sim: violation"), "{stderr}");
    }
}

/// `cuKernelGetParamCount` (CUDA 13.2): each test kernel's parameter count where the driver
/// the simulator plays has it (the parent sets `CUDA_SIM_DRIVER_VERSION`), else
/// `CUDA_ERROR_NOT_SUPPORTED`. cudarc's CUDA 13.0 bindings do not declare it: looked up by name.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_param_count() {
    child();
    setup();
    let library = load();
    let has = std::env::var("CUDA_SIM_DRIVER_VERSION")
        .ok()
        .and_then(|version| version.parse::<i32>().ok())
        .is_some_and(|version| version >= 13020);
    type ParamCount = unsafe extern "C" fn(sys::CUkernel, *mut usize) -> CUresult;
    // SAFETY: the simulator's export has this signature; the library stays loaded.
    let count_of = unsafe {
        *sys::culib()
            .get::<ParamCount>(b"cuKernelGetParamCount\0")
            .unwrap()
    };
    for (name, params) in [
        (c"fill_u32", 3),
        (c"add_u32", 3),
        (c"copy_u32", 3),
        (c"add_one", 2),
        (c"spin", 1),
    ] {
        let mut count = usize::MAX;
        // SAFETY: a live kernel; `count` is a valid out-pointer.
        let status = unsafe { count_of(kernel(library, name), &mut count) };
        if has {
            assert_eq!(
                (status, count),
                (CUresult::CUDA_SUCCESS, params),
                "{name:?}"
            );
        } else {
            assert_eq!(status, CUresult::CUDA_ERROR_NOT_SUPPORTED, "{name:?}");
        }
    }
    // SAFETY: a null out-pointer, which the driver refuses.
    let null = unsafe { count_of(kernel(library, c"spin"), std::ptr::null_mut()) };
    assert_ne!(null, CUresult::CUDA_SUCCESS);
    unload(library);
    teardown();
}

#[test]
fn the_parameter_count_follows_the_driver_version() {
    for version in ["13000", "13020"] {
        let report = report_with("scenario_param_count", |command| {
            command.env("CUDA_SIM_DRIVER_VERSION", version);
        });
        assert!(report.violations.is_empty(), "{version}: {report:?}");
        assert_eq!(
            report.calls.get("cuKernelGetParamCount"),
            Some(&6),
            "{version}: {:?}",
            report.calls
        );
    }
}

#[test]
fn misuse_is_reported() {
    let cases = [
        ("scenario_launch_out_of_bounds", "out-of-bounds"),
        ("scenario_launch_unordered_free", "unordered-free"),
        ("scenario_launch_after_free", "use-after-free"),
        ("scenario_graph_after_unload", "destroyed-handle"),
        ("scenario_call_from_destructor", "call-from-destructor"),
    ];
    for (scenario, kind) in cases {
        let report = report_of(scenario);
        assert_eq!(kinds(&report), vec![kind], "{scenario}: {report:?}");
    }
}

#[test]
fn libraries_graphs_and_execs_leak_by_type() {
    let report = report_of("scenario_leaks");
    assert!(report.violations.is_empty(), "{report:?}");
    let leaks: Vec<(String, u64)> = report.leaks_without_primary().into_iter().collect();
    let expected: Vec<(String, u64)> = [("graph", 1), ("graph_exec", 1), ("library", 1)]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    assert_eq!(leaks, expected);
}
