//! Checks of the simulator that no H200 measurement decides: device work touching a host
//! pool whose access by the device was revoked is a violation (as for another device's pool
//! without access), and absurd sizes and counts are driver errors, never an abort of the
//! process.

use cudarc::driver::sys::{self, CUresult};

mod common;
use common::*;

/// S3: device 0's access to a host pool is granted, then revoked. A memset, a copy out of it
/// and a kernel are then each a `no-access` violation (and fail); once access is granted
/// again, the same memset is fine.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_device_touches_after_a_host_pool_revocation() {
    child();
    setup();
    let stream = new_stream();
    let library = load();
    let fill = kernel(library, c"fill_u32");
    // SAFETY: plain driver calls on our own handles with valid pointers.
    unsafe {
        let pool = host_pool(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE);
        let mut ptr = 0;
        ok(sys::cuMemAllocFromPoolAsync(&mut ptr, 4096, pool, stream));
        ok(sys::cuMemsetD8Async(ptr, 1, 4096, stream));
        ok(sys::cuStreamSynchronize(stream));
        set_device_access(pool, 0, false);
        assert_eq!(
            sys::cuMemsetD8Async(ptr, 2, 4096, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        let mut back = [0u8; 64];
        assert_eq!(
            sys::cuMemcpyDtoHAsync_v2(back.as_mut_ptr().cast(), ptr, 64, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        // Measured on the H200 (driver 580, 2026-12-04): the memset and the copy above are
        // refused with CUDA_ERROR_INVALID_VALUE there too; the launch returns CUDA_SUCCESS and
        // the fault surfaces at the next synchronisation. The simulator runs a kernel at its
        // launch, so it returns the fault at once; the violation is what this test is about.
        assert_eq!(
            launch_kernel(fill, 1, 64, stream, (ptr, 5u32, 64)),
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        );
        set_device_access(pool, 0, true);
        ok(sys::cuMemsetD8Async(ptr, 3, 4096, stream));
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemPoolDestroy(pool));
    }
    unload(library);
    destroy_stream(stream);
    teardown();
}

#[test]
fn device_touches_after_a_host_pool_revocation() {
    let report = report_of("scenario_device_touches_after_a_host_pool_revocation");
    assert_eq!(
        kinds(&report),
        ["no-access", "no-access", "no-access"],
        "{:?}",
        report.violations
    );
    assert_eq!(
        calls(&report),
        ["cuMemsetD8Async", "cuMemcpyDtoHAsync_v2", "cuLaunchKernel"]
    );
    assert_message_contains(&report, 0, "revoked");
    assert_no_leaks(&report);
}

/// F12: a switch node of `u32::MAX` bodies (the simulator used to abort allocating their
/// handles), a batch of copies whose arrays could not exist, and a memset node whose height
/// reaches far past its allocation are driver errors; the process goes on.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_absurd_sizes_are_driver_errors() {
    child();
    setup();
    let stream = new_stream();
    // SAFETY: plain driver calls on our own handles with valid pointers; the batch's arrays
    // are never read (its count is refused first).
    unsafe {
        let graph = new_graph();
        let mut current = std::ptr::null_mut();
        ok(sys::cuCtxGetCurrent(&mut current));
        let switch = |size: u32| {
            let mut handle = 0;
            ok(sys::cuGraphConditionalHandleCreate(
                &mut handle,
                graph,
                current,
                0,
                sys::CU_GRAPH_COND_ASSIGN_DEFAULT,
            ));
            let mut params: sys::CUgraphNodeParams = std::mem::zeroed();
            params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
            params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
                handle,
                type_: sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH,
                size,
                phGraph_out: std::ptr::null_mut(),
                ctx: current,
            };
            let mut node = std::ptr::null_mut();
            sys::cuGraphAddNode_v2(
                &mut node,
                graph,
                std::ptr::null(),
                std::ptr::null(),
                0,
                &mut params,
            )
        };
        assert_eq!(switch(u32::MAX), CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(switch((1 << 16) + 1), CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        ok(switch(3));
        ok(sys::cuGraphDestroy(graph));

        let mut attributes = sys::CUmemcpyAttributes {
            srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            srcLocHint: std::mem::zeroed(),
            dstLocHint: std::mem::zeroed(),
            flags: 0,
        };
        let (mut dst, mut src, mut size, mut start) = (0u64, 0u64, 0usize, 0usize);
        assert_eq!(
            sys::cuMemcpyBatchAsync_v2(
                &mut dst,
                &mut src,
                &mut size,
                usize::MAX / 8,
                &mut attributes,
                &mut start,
                1,
                stream,
            ),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );

        let mut ptr = 0;
        ok(sys::cuMemAlloc_v2(&mut ptr, 4096));
        let graph = new_graph();
        let memset = sys::CUDA_MEMSET_NODE_PARAMS {
            dst: ptr,
            pitch: 1 << 40,
            value: 1,
            elementSize: 1,
            width: 16,
            height: 1 << 40,
        };
        let mut node = std::ptr::null_mut();
        ok(sys::cuGraphAddMemsetNode(
            &mut node,
            graph,
            std::ptr::null(),
            0,
            &memset,
            current,
        ));
        let exec = instantiate(graph);
        assert_eq!(
            sys::cuGraphLaunch(exec, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        ok(sys::cuStreamSynchronize(stream));
        destroy_graph(exec, graph);
        ok(sys::cuMemFree_v2(ptr));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn absurd_sizes_are_driver_errors() {
    let report = report_of("scenario_absurd_sizes_are_driver_errors");
    // The memset node's second row lies in no allocation.
    assert_eq!(kinds(&report), ["out-of-bounds"], "{:?}", report.violations);
    assert_eq!(report.violations[0].call, "cuGraphLaunch");
    assert_no_leaks(&report);
}
