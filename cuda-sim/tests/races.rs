//! The `data-race` check: planted cross-stream races on device memory, each reported, and each
//! one's correct twin (the same program with the fix: an event, a synchronisation, a graph
//! edge, disjoint ranges), which must report nothing. Each scenario is a raw driver sequence
//! in a child process under the simulator (not strict, so that it runs to its end), and the
//! parent test reads its report.

use std::ffi::c_void;

use cudarc::driver::sys;

#[macro_use]
mod common;
use common::*;

/// Elements (u32) of the buffers.
const N: u32 = 1024;
/// Bytes of a buffer of `N` elements.
const BYTES: usize = 4 * N as usize;

/// An atomic kernel written for these tests: `atomic_add(u32 *counter, u32 value, u32 n)`
/// adds `value` to `counter[0]` atomically once per thread `i < n`.
const ATOMIC_PTX: &str = "
.version 7.0
.target sm_52
.address_size 64

.visible .entry atomic_add(
    .param .u64 atomic_add_counter,
    .param .u32 atomic_add_value,
    .param .u32 atomic_add_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [atomic_add_counter];
    ld.param.u32 %r1, [atomic_add_value];
    ld.param.u32 %r2, [atomic_add_n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r2;
    @%p1 bra ATOMIC_DONE;
    cvta.to.global.u64 %rd2, %rd1;
    atom.global.add.u32 %r7, [%rd2], %r1;
ATOMIC_DONE:
    ret;
}
\0";

/// The test kernels, two streams and the library of [`ATOMIC_PTX`].
struct Env {
    library: sys::CUlibrary,
    atomics: sys::CUlibrary,
    fill: sys::CUkernel,
    add: sys::CUkernel,
    copy: sys::CUkernel,
    atomic: sys::CUkernel,
    s1: sys::CUstream,
    s2: sys::CUstream,
}

/// Sets up the context, the kernels and two streams (non-blocking unless `blocking`).
fn env(blocking: bool) -> Env {
    setup();
    let library = load();
    let atomics = load_ptx(ATOMIC_PTX).expect("load the atomic kernel");
    let stream = || {
        if !blocking {
            return new_stream();
        }
        let mut stream = std::ptr::null_mut();
        // SAFETY: a context is current; valid out-pointer.
        unsafe { ok(sys::cuStreamCreate(&mut stream, 0)) };
        stream
    };
    Env {
        fill: kernel(library, c"fill_u32"),
        add: kernel(library, c"add_u32"),
        copy: kernel(library, c"copy_u32"),
        atomic: kernel(atomics, c"atomic_add"),
        library,
        atomics,
        s1: stream(),
        s2: stream(),
    }
}

/// Waits for everything, then destroys what [`env`] made.
fn finish(env: Env) {
    // SAFETY: a context is current.
    unsafe { ok(sys::cuCtxSynchronize()) };
    destroy_stream(env.s1);
    destroy_stream(env.s2);
    unload(env.library);
    unload(env.atomics);
    teardown();
}

fn alloc(bytes: usize) -> sys::CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: a context is current; valid out-pointer.
    unsafe { ok(sys::cuMemAlloc_v2(&mut ptr, bytes)) };
    ptr
}

fn free(ptr: sys::CUdeviceptr) {
    // SAFETY: our own allocation, freed once.
    unsafe { ok(sys::cuMemFree_v2(ptr)) };
}

/// Orders `then`'s later work after `first`'s work so far, with an event.
fn order(first: sys::CUstream, then: sys::CUstream) {
    let mut event = std::ptr::null_mut();
    // SAFETY: live streams; the event is destroyed after the wait was issued, which the
    // driver allows.
    unsafe {
        ok(sys::cuEventCreate(&mut event, 2));
        ok(sys::cuEventRecord(event, first));
        ok(sys::cuStreamWaitEvent(then, event, 0));
        ok(sys::cuEventDestroy_v2(event));
    }
}

/// `kernel(ptr, x, n)` over `n` threads in blocks of 256.
fn launch<X>(kernel: sys::CUkernel, stream: sys::CUstream, ptr: u64, x: X, n: u32) {
    ok(launch_kernel(
        kernel,
        n.div_ceil(256),
        256,
        stream,
        (ptr, x, n),
    ));
}

/// Two kernels on two streams write the whole buffer; the fix orders them with an event.
fn kernel_kernel(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES);
    launch(env.fill, env.s1, buf, 1u32, N);
    if fixed {
        order(env.s1, env.s2);
    }
    launch(env.fill, env.s2, buf, 2u32, N);
    finish_with(env, &[buf]);
}

fn finish_with(env: Env, buffers: &[sys::CUdeviceptr]) {
    // SAFETY: a context is current.
    unsafe { ok(sys::cuCtxSynchronize()) };
    for &buf in buffers {
        free(buf);
    }
    finish(env);
}

planted!(
    kernel_writes_on_two_streams_race,
    scenario_kernel_kernel,
    scenario_kernel_kernel_ordered_by_an_event,
    kernel_kernel,
    "data-race",
    [
        "kernel fill_u32",
        "writes [",
        "(4096 bytes) of the 4096-byte allocation",
        "cuLaunchKernel (call #",
        "wrote: no synchronisation orders them",
        "block [0, 0, 0], thread [0, 0, 0]",
    ]
);

/// An asynchronous copy into the buffer on one stream, a kernel reading it on another.
fn copy_kernel(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES);
    let out = alloc(BYTES);
    let data = vec![7u32; N as usize];
    // SAFETY: `data` lives until the context is synchronised in `finish_with`.
    unsafe {
        ok(sys::cuMemcpyHtoDAsync_v2(
            buf,
            data.as_ptr().cast(),
            BYTES,
            env.s1,
        ))
    };
    if fixed {
        order(env.s1, env.s2);
    }
    launch(env.copy, env.s2, out, buf, N);
    finish_with(env, &[buf, out]);
    drop(data);
}

planted!(
    copy_then_unordered_kernel_read_race,
    scenario_copy_kernel,
    scenario_copy_kernel_ordered_by_an_event,
    copy_kernel,
    "data-race",
    [
        "kernel copy_u32",
        "reads [",
        "a copy",
        "cuMemcpyHtoDAsync_v2 (call #"
    ]
);

/// A memset on one stream, a kernel adding to the buffer (reading and writing) on another.
fn memset_kernel(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES);
    // SAFETY: a live allocation of `N` u32s.
    unsafe { ok(sys::cuMemsetD32Async(buf, 5, N as usize, env.s1)) };
    if fixed {
        order(env.s1, env.s2);
    }
    launch(env.add, env.s2, buf, 1u32, N);
    finish_with(env, &[buf]);
}

planted!(
    memset_then_unordered_kernel_race,
    scenario_memset_kernel,
    scenario_memset_kernel_ordered_by_an_event,
    memset_kernel,
    "data-race",
    [
        "kernel add_u32",
        "a memset",
        "cuMemsetD32Async (call #",
        "wrote"
    ]
);

/// Four blocks fill 1024 elements on one stream; one block of another stream's kernel fills
/// 4 elements: the last 4 of the first kernel's range (written only by its block 3), or, in
/// the twin, the 4 just past it.
fn one_block_of_many(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES + 16);
    launch(env.fill, env.s1, buf, 1u32, N);
    let offset = if fixed { BYTES } else { BYTES - 16 } as u64;
    ok(launch_kernel(
        env.fill,
        1,
        32,
        env.s2,
        (buf + offset, 2u32, 4),
    ));
    finish_with(env, &[buf]);
}

planted!(
    one_block_of_many_writes_the_overlap_race,
    scenario_one_block_of_many,
    scenario_one_block_of_many_just_past,
    one_block_of_many,
    "data-race",
    [
        "(16 bytes)",
        "block [0, 0, 0], thread [0, 0, 0]",
        "of the 4112-byte allocation"
    ]
);

/// Two kernels write the two halves of a buffer on two streams: disjoint (the twin, a
/// correct program), or overlapping by one element (the bug).
fn halves(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES + 4);
    launch(env.fill, env.s1, buf, 1u32, N / 2);
    let offset = if fixed { BYTES / 2 } else { BYTES / 2 - 4 } as u64;
    launch(env.fill, env.s2, buf + offset, 2u32, N / 2);
    finish_with(env, &[buf]);
}

planted!(
    halves_overlapping_by_one_element_race,
    scenario_halves_overlapping,
    scenario_disjoint_halves,
    halves,
    "data-race",
    ["(4 bytes)"]
);

/// A graph of two kernel nodes writing the same buffer, with no edge between them (the bug)
/// or with one (the twin).
fn graph_nodes(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES);
    let graph = new_graph();
    let mut args: (u64, u32, u32) = (buf, 3, N);
    let mut params = [
        (&mut args.0 as *mut u64).cast::<c_void>(),
        (&mut args.1 as *mut u32).cast(),
        (&mut args.2 as *mut u32).cast(),
    ];
    // SAFETY: valid pointers; the nodes copy the arguments.
    unsafe {
        let mut node_params: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        node_params.kern = env.fill;
        node_params.gridDimX = N / 256;
        node_params.gridDimY = 1;
        node_params.gridDimZ = 1;
        node_params.blockDimX = 256;
        node_params.blockDimY = 1;
        node_params.blockDimZ = 1;
        node_params.kernelParams = params.as_mut_ptr();
        let mut first = std::ptr::null_mut();
        ok(sys::cuGraphAddKernelNode_v2(
            &mut first,
            graph,
            std::ptr::null(),
            0,
            &node_params,
        ));
        let mut second = std::ptr::null_mut();
        ok(sys::cuGraphAddKernelNode_v2(
            &mut second,
            graph,
            &first,
            usize::from(fixed),
            &node_params,
        ));
    }
    let exec = instantiate(graph);
    // SAFETY: live exec and stream.
    unsafe {
        ok(sys::cuGraphLaunch(exec, env.s1));
        ok(sys::cuStreamSynchronize(env.s1));
    }
    destroy_graph(exec, graph);
    finish_with(env, &[buf]);
}

planted!(
    unconnected_graph_nodes_race,
    scenario_graph_without_edge,
    scenario_graph_with_edge,
    graph_nodes,
    "data-race",
    [
        "cuGraphLaunch (call #",
        "kernel fill_u32 (block [0, 0, 0], thread [0, 0, 0] at",
        "as node 1 of its graph launch",
        "as node 0 of its graph launch",
    ]
);

/// A kernel writes managed memory on a non-blocking stream; the host copies it out with a
/// synchronous copy, without (the bug) or after (the twin) synchronising with the stream.
fn host_copy_of_managed(fixed: bool) {
    let env = env(false);
    let mut buf = 0;
    // SAFETY: a context is current; valid out-pointer; CU_MEM_ATTACH_GLOBAL.
    unsafe { ok(sys::cuMemAllocManaged(&mut buf, BYTES, 1)) };
    launch(env.fill, env.s1, buf, 9u32, N);
    if fixed {
        // SAFETY: a live stream.
        unsafe { ok(sys::cuStreamSynchronize(env.s1)) };
    }
    let mut back = vec![0u32; N as usize];
    // SAFETY: `back` has `BYTES` bytes; `buf` is a live allocation of as many.
    unsafe { ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), buf, BYTES)) };
    assert!(back.iter().all(|&x| x == 9));
    finish_with(env, &[buf]);
}

planted!(
    synchronous_copy_of_managed_memory_race,
    scenario_host_copy_of_managed,
    scenario_host_copy_of_managed_after_a_synchronize,
    host_copy_of_managed,
    "data-race",
    [
        "cuMemcpyDtoH_v2 (call #",
        "a copy",
        "reads [",
        "kernel fill_u32",
        "legacy"
    ]
);

/// An asynchronous copy out of a buffer on one stream, then a kernel writing the buffer on
/// another stream. Into pinned memory (the bug) the copy call returns at once, so nothing
/// orders the two; into pageable memory (the twin) the call returns only once the copy is
/// done, as the driver's does, so the host has seen it before it queues the kernel.
fn copy_out_then_write(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES);
    // SAFETY: a live stream; the buffer is written before anything reads it.
    unsafe {
        ok(sys::cuMemsetD8Async(buf, 1, BYTES, env.s1));
        ok(sys::cuStreamSynchronize(env.s1));
    }
    let mut pageable = vec![0u8; BYTES];
    let mut pinned: *mut c_void = std::ptr::null_mut();
    // SAFETY: a context is current; valid out-pointer.
    unsafe { ok(sys::cuMemAllocHost_v2(&mut pinned, BYTES)) };
    let host = if fixed {
        pageable.as_mut_ptr().cast()
    } else {
        pinned
    };
    // SAFETY: `host` has `BYTES` bytes and outlives the copy (synchronised in finish_with).
    unsafe { ok(sys::cuMemcpyDtoHAsync_v2(host, buf, BYTES, env.s1)) };
    launch(env.fill, env.s2, buf, 2u32, N);
    // SAFETY: a context is current; `pinned` came from cuMemAllocHost.
    unsafe {
        ok(sys::cuCtxSynchronize());
        ok(sys::cuMemFreeHost(pinned));
    }
    finish_with(env, &[buf]);
}

planted!(
    a_copy_into_pinned_memory_then_a_write_on_another_stream_race,
    scenario_copy_out_to_pinned_then_write,
    scenario_copy_out_to_pageable_then_write,
    copy_out_then_write,
    "data-race",
    [
        "cuMemcpyDtoHAsync_v2 (call #",
        "kernel fill_u32",
        "a copy, read"
    ]
);

/// A synchronous copy into device memory from pageable host memory, then a kernel reading the
/// buffer on a non-blocking stream. The driver's call returns once the source is staged, with
/// the transfer still queued on the legacy stream, which a non-blocking stream does not follow:
/// nothing orders the two. The twin waits for the legacy stream first.
fn staged_copy_then_read(fixed: bool) {
    let env = env(false);
    let buf = alloc(BYTES);
    let out = alloc(BYTES);
    let data = vec![7u32; N as usize];
    // SAFETY: `data` and `buf` hold `BYTES` bytes; the call is done with `data` on return.
    unsafe { ok(sys::cuMemcpyHtoD_v2(buf, data.as_ptr().cast(), BYTES)) };
    if fixed {
        // SAFETY: a context is current.
        unsafe { ok(sys::cuStreamSynchronize(LEGACY)) };
    }
    launch(env.copy, env.s1, out, buf, N);
    finish_with(env, &[buf, out]);
}

planted!(
    a_synchronous_copy_from_pageable_memory_is_staged_race,
    scenario_staged_copy_then_read,
    scenario_staged_copy_then_read_after_the_legacy_stream,
    staged_copy_then_read,
    "data-race",
    [
        "kernel copy_u32",
        "reads [",
        "cuMemcpyHtoD_v2 (call #",
        "legacy stream",
        "a copy, wrote"
    ]
);

/// A synchronous device-to-device copy, then a kernel writing its source on a non-blocking
/// stream: the driver's call returns at once, so the copy may still read what the kernel
/// writes. The twin waits for the legacy stream first.
fn device_copy_then_write(fixed: bool) {
    let env = env(false);
    let (a, b) = (alloc(BYTES), alloc(BYTES));
    // SAFETY: live allocations of `BYTES` bytes; the memset is waited for.
    unsafe {
        ok(sys::cuMemsetD32_v2(a, 3, N as usize));
        ok(sys::cuStreamSynchronize(LEGACY));
        ok(sys::cuMemcpyDtoD_v2(b, a, BYTES));
    }
    if fixed {
        // SAFETY: a context is current.
        unsafe { ok(sys::cuStreamSynchronize(LEGACY)) };
    }
    launch(env.fill, env.s1, a, 4u32, N);
    finish_with(env, &[a, b]);
}

planted!(
    a_synchronous_device_copy_returns_at_once_race,
    scenario_device_copy_then_write,
    scenario_device_copy_then_write_after_the_legacy_stream,
    device_copy_then_write,
    "data-race",
    [
        "kernel fill_u32",
        "writes [",
        "cuMemcpyDtoD_v2 (call #",
        "a copy, read"
    ]
);

/// A synchronous copy from pageable memory waits for the legacy stream's earlier work, which
/// follows every blocking stream: a kernel on a blocking stream, then such a copy (of another
/// buffer), then a kernel writing the first buffer on a non-blocking stream, is a correct
/// program.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_staged_copy_after_a_blocking_stream() {
    child();
    let env = env(true);
    let non_blocking = new_stream();
    let (x, y) = (alloc(BYTES), alloc(BYTES));
    let data = vec![1u32; N as usize];
    launch(env.fill, env.s1, x, 1u32, N);
    // SAFETY: `data` and `y` hold `BYTES` bytes; the call is done with `data` on return.
    unsafe { ok(sys::cuMemcpyHtoD_v2(y, data.as_ptr().cast(), BYTES)) };
    launch(env.fill, non_blocking, x, 2u32, N);
    // SAFETY: a context is current; the stream is ours.
    unsafe { ok(sys::cuCtxSynchronize()) };
    destroy_stream(non_blocking);
    finish_with(env, &[x, y]);
}

#[test]
fn a_staged_copy_waits_for_the_blocking_streams_first() {
    assert_clean(&report_of("scenario_staged_copy_after_a_blocking_stream"));
}

/// Synchronous copies that are complete on return: from pinned host memory into device memory,
/// and from device memory into pageable memory. A kernel on a non-blocking stream then reads
/// the one and writes the other's source with no further wait.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_complete_synchronous_copies() {
    child();
    let env = env(false);
    let (buf, out) = (alloc(BYTES), alloc(BYTES));
    let mut pinned: *mut c_void = std::ptr::null_mut();
    let mut back = vec![0u32; N as usize];
    // SAFETY: a context is current; `pinned`, `back`, `buf` and `out` hold `BYTES` bytes.
    unsafe {
        ok(sys::cuMemAllocHost_v2(&mut pinned, BYTES));
        ok(sys::cuMemsetD32_v2(pinned as usize as u64, 5, N as usize));
        ok(sys::cuMemcpyHtoD_v2(buf, pinned, BYTES));
        ok(sys::cuMemcpyHtoD_v2(out, pinned, BYTES));
        ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), out, BYTES));
    }
    assert!(back.iter().all(|&x| x == 5), "{:?}", &back[..4]);
    launch(env.copy, env.s1, out, buf, N);
    // SAFETY: a context is current; `pinned` came from cuMemAllocHost.
    unsafe {
        ok(sys::cuCtxSynchronize());
        ok(sys::cuMemFreeHost(pinned));
    }
    finish_with(env, &[buf, out]);
}

#[test]
fn synchronous_copies_from_pinned_and_into_host_memory_are_complete_on_return() {
    assert_clean(&report_of("scenario_complete_synchronous_copies"));
}

/// A kernel on a stream, then one on the legacy default stream, writing the same buffer: a
/// blocking stream (the twin) is ordered with the legacy stream, a non-blocking one is not.
fn legacy_stream(fixed: bool) {
    let env = env(fixed);
    let buf = alloc(BYTES);
    launch(env.fill, env.s1, buf, 1u32, N);
    launch(env.fill, std::ptr::null_mut(), buf, 2u32, N);
    launch(env.fill, env.s2, buf, 3u32, N);
    finish_with(env, &[buf]);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_legacy_with_non_blocking_streams() {
    child();
    legacy_stream(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_legacy_with_blocking_streams() {
    child();
    legacy_stream(true);
}

#[test]
fn the_legacy_stream_orders_blocking_streams_only() {
    let report = report_of("scenario_legacy_with_non_blocking_streams");
    // The legacy launch races with s1's, and s2's with both earlier ones.
    assert_eq!(
        kinds(&report),
        ["data-race", "data-race", "data-race"],
        "{:?}",
        report.violations
    );
    assert_clean(&report_of("scenario_legacy_with_blocking_streams"));
}

/// Atomic updates of one counter from two streams never race; a plain store racing with
/// them does.
fn atomics(fixed: bool) {
    let env = env(false);
    let counter = alloc(4);
    launch(env.atomic, env.s1, counter, 1u32, N);
    if fixed {
        launch(env.atomic, env.s2, counter, 2u32, N);
    } else {
        launch(env.fill, env.s2, counter, 2u32, 1);
    }
    finish_with(env, &[counter]);
}

planted!(
    a_store_racing_with_atomics_race,
    scenario_store_against_atomics,
    scenario_atomics_on_two_streams,
    atomics,
    "data-race",
    ["kernel atomic_add", "updated atomically", "(4 bytes)"]
);

/// Two kernels on two streams read the same buffer (each writes its own): no race.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_reads_on_two_streams() {
    child();
    let env = env(false);
    let src = alloc(BYTES);
    let (a, b) = (alloc(BYTES), alloc(BYTES));
    // SAFETY: a live allocation. A memset of device memory may return before it is done, on
    // the legacy stream: waited for, so ordered before both streams' work.
    unsafe {
        ok(sys::cuMemsetD32_v2(src, 4, N as usize));
        ok(sys::cuStreamSynchronize(LEGACY));
    }
    launch(env.copy, env.s1, a, src, N);
    launch(env.copy, env.s2, b, src, N);
    finish_with(env, &[src, a, b]);
}

#[test]
fn reads_on_two_streams_do_not_race() {
    assert_clean(&report_of("scenario_reads_on_two_streams"));
}

/// Every way to order two streams' writes that the free-order check knows: stream and
/// context synchronisation, an event waited for by the host or by the stream, a host
/// function's stream order, a synchronous copy after a synchronisation, and a free.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_every_ordering() {
    child();
    let env = env(false);
    let buf = alloc(BYTES);
    let other = alloc(BYTES);
    let (s1, s2) = (env.s1, env.s2);
    // SAFETY: live streams, events and allocations; valid pointers.
    unsafe {
        launch(env.fill, s1, buf, 1u32, N);
        ok(sys::cuStreamSynchronize(s1));
        launch(env.fill, s2, buf, 2u32, N);
        ok(sys::cuCtxSynchronize());
        launch(env.fill, s1, buf, 3u32, N);
        let mut event = std::ptr::null_mut();
        ok(sys::cuEventCreate(&mut event, 2));
        ok(sys::cuEventRecord(event, s1));
        ok(sys::cuEventSynchronize(event));
        launch(env.fill, s2, buf, 4u32, N);
        order(s2, s1);
        launch(env.add, s1, buf, 1u32, N);
        ok(sys::cuEventRecord(event, s1));
        while sys::cuEventQuery(event) != sys::CUresult::CUDA_SUCCESS {}
        launch(env.add, s2, buf, 1u32, N);
        ok(sys::cuStreamSynchronize(s2));
        let mut back = vec![0u32; N as usize];
        ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), buf, BYTES));
        assert!(back.iter().all(|&x| x == 6), "{:?}", &back[..4]);
        launch(env.fill, s1, buf, 1u32, N);
        // A synchronous free waits for the whole device.
        free(other);
        launch(env.fill, s2, buf, 2u32, N);
        ok(sys::cuEventDestroy_v2(event));
    }
    finish_with(env, &[buf]);
}

#[test]
fn every_ordering_is_recognised() {
    assert_clean(&report_of("scenario_every_ordering"));
}

#[test]
fn the_check_can_be_turned_off() {
    let report = report_with("scenario_kernel_kernel", |command| {
        cuda_sim::SimCommand::sim_check_data_race(command, false);
    });
    assert_clean(&report);
}

#[test]
fn strict_mode_aborts_on_a_data_race() {
    let (output, report) = run("scenario_kernel_kernel", |command| {
        cuda_sim::SimCommand::sim_strict(command);
    });
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cuda-sim: violation data-race"), "{stderr}");
    let report = report.expect("a strict abort writes the report of its violation");
    assert_eq!(kinds(&report), ["data-race"]);
}

/// Reads the `u32` at `index` of the managed allocation at `buf` through its pointer, as a
/// program does with unified memory.
fn host_read(buf: sys::CUdeviceptr, index: usize) -> u32 {
    // SAFETY: managed memory is accessible from the host at its device address; `index` is
    // inside the allocation.
    unsafe { std::ptr::read_volatile((buf as usize as *const u32).add(index)) }
}

/// Writes `value` at `index` of the managed allocation at `buf` through its pointer.
fn host_write(buf: sys::CUdeviceptr, index: usize, value: u32) {
    // SAFETY: as for `host_read`.
    unsafe { std::ptr::write_volatile((buf as usize as *mut u32).add(index), value) }
}

/// A kernel writes managed memory on a non-blocking stream and the host reads an element
/// through the pointer: without a synchronisation the read races with the kernel's writes.
fn host_reads_managed(fixed: bool) {
    let env = env(false);
    let mut buf = 0;
    // SAFETY: a context is current; valid out-pointer; CU_MEM_ATTACH_GLOBAL.
    unsafe { ok(sys::cuMemAllocManaged(&mut buf, BYTES, 1)) };
    launch(env.fill, env.s1, buf, 9u32, N);
    if fixed {
        // SAFETY: a live stream.
        unsafe { ok(sys::cuStreamSynchronize(env.s1)) };
    }
    assert_eq!(host_read(buf, 5), 9);
    finish_with(env, &[buf]);
}

planted!(
    host_read_through_a_managed_pointer_race,
    scenario_host_reads_managed,
    scenario_host_reads_managed_after_a_synchronize,
    host_reads_managed,
    "data-race",
    [
        "host thread ",
        " reads 0x",
        "(through a pointer) of the 4096-byte managed allocation at 0x",
        "cuLaunchKernel (call #",
        "kernel fill_u32",
        "wrote [",
        "no synchronisation orders them"
    ]
);

/// A kernel only reads managed memory (copying it into device memory) on a non-blocking
/// stream while the host writes an element through the pointer: a race unless the host
/// synchronised first.
fn host_writes_managed_read_by_a_kernel(fixed: bool) {
    let env = env(false);
    let mut src = 0;
    // SAFETY: a context is current; valid out-pointer; CU_MEM_ATTACH_GLOBAL; the memset is
    // synchronous, so ordered before both the stream's work and the host.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut src, BYTES, 1));
        ok(sys::cuMemsetD32_v2(src, 4, N as usize));
    }
    let out = alloc(BYTES);
    launch(env.copy, env.s1, out, src, N);
    if fixed {
        // SAFETY: a live stream.
        unsafe { ok(sys::cuStreamSynchronize(env.s1)) };
    }
    host_write(src, 3, 7);
    finish_with(env, &[src, out]);
}

planted!(
    host_write_through_a_managed_pointer_a_kernel_reads_race,
    scenario_host_writes_managed_read_by_a_kernel,
    scenario_host_writes_managed_read_by_a_kernel_after_a_synchronize,
    host_writes_managed_read_by_a_kernel,
    "data-race",
    [
        " writes 0x",
        "(through a pointer) of the 4096-byte managed allocation",
        "kernel copy_u32",
        "read ["
    ]
);

/// A kernel reads managed memory on a non-blocking stream while the host reads it too: two
/// reads never race.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_host_and_kernel_read_managed() {
    child();
    let env = env(false);
    let mut src = 0;
    // SAFETY: as in `host_writes_managed_read_by_a_kernel`.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut src, BYTES, 1));
        ok(sys::cuMemsetD32_v2(src, 4, N as usize));
    }
    let out = alloc(BYTES);
    launch(env.copy, env.s1, out, src, N);
    assert_eq!(host_read(src, 3), 4);
    finish_with(env, &[src, out]);
}

#[test]
fn host_and_kernel_reads_of_managed_memory_do_not_race() {
    assert_clean(&report_of("scenario_host_and_kernel_read_managed"));
}

/// A kernel writes the first 64 bytes of a managed allocation on a non-blocking stream while
/// the host reads and writes bytes of the same page that the kernel does not touch: the page
/// is guarded, but only the kernel's footprint races.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_host_touches_other_bytes_of_the_page() {
    child();
    let env = env(false);
    let mut buf = 0;
    // SAFETY: a context is current; valid out-pointer; CU_MEM_ATTACH_GLOBAL; the memset is
    // synchronous.
    unsafe {
        ok(sys::cuMemAllocManaged(&mut buf, BYTES, 1));
        ok(sys::cuMemsetD32_v2(buf, 4, N as usize));
    }
    launch(env.fill, env.s1, buf, 9u32, 16);
    assert_eq!(host_read(buf, 512), 4);
    // A driver call between the two accesses sets the guard again.
    // SAFETY: a live stream; querying it may order nothing (it returns at once either way).
    let _ = unsafe { sys::cuStreamQuery(env.s2) };
    host_write(buf, 600, 5);
    finish_with(env, &[buf]);
}

#[test]
fn host_accesses_outside_the_kernels_footprint_do_not_race() {
    assert_clean(&report_of("scenario_host_touches_other_bytes_of_the_page"));
}

/// A host function: sets the flag (an `AtomicBool`) the main thread waits on.
unsafe extern "C" fn mark_done(data: *mut c_void) {
    // SAFETY: `data` is the scenario's `AtomicBool`, alive until the main thread saw it set.
    let done = unsafe { &*data.cast::<std::sync::atomic::AtomicBool>() };
    done.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// A kernel writes managed memory on a non-blocking stream, then a host function on that
/// stream sets a flag; the main thread waits for the flag (with no driver call) and reads the
/// memory through the pointer: ordered after the kernel by the stream and the flag, though
/// the host never synchronised with the stream through the driver.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_host_reads_managed_after_a_host_function() {
    child();
    let env = env(false);
    let mut buf = 0;
    // SAFETY: a context is current; valid out-pointer; CU_MEM_ATTACH_GLOBAL.
    unsafe { ok(sys::cuMemAllocManaged(&mut buf, BYTES, 1)) };
    launch(env.fill, env.s1, buf, 9u32, N);
    let done = std::sync::atomic::AtomicBool::new(false);
    // SAFETY: a live stream; `done` outlives the host function (waited for below).
    unsafe {
        ok(sys::cuLaunchHostFunc(
            env.s1,
            Some(mark_done),
            std::ptr::from_ref(&done).cast_mut().cast(),
        ))
    };
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    assert_eq!(host_read(buf, 5), 9);
    finish_with(env, &[buf]);
}

#[test]
fn host_accesses_ordered_by_a_host_function_do_not_race() {
    assert_clean(&report_of(
        "scenario_host_reads_managed_after_a_host_function",
    ));
}

/// A host function: reads element 5 of the managed `u32` array at `data` (as an address) and
/// stores it at element 6.
unsafe extern "C" fn copy_element(data: *mut c_void) {
    let buf = data as usize as sys::CUdeviceptr;
    host_write(buf, 6, host_read(buf, 5));
}

/// A kernel writes managed memory on a non-blocking stream, and a host function behind it on
/// that stream reads and writes it through the pointer: ordered by the stream, so no race,
/// though the host function's thread never synchronised through the driver.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_host_function_touches_managed_memory() {
    child();
    let env = env(false);
    let mut buf = 0;
    // SAFETY: a context is current; valid out-pointer; CU_MEM_ATTACH_GLOBAL.
    unsafe { ok(sys::cuMemAllocManaged(&mut buf, BYTES, 1)) };
    launch(env.fill, env.s1, buf, 9u32, N);
    // SAFETY: a live stream; the host function touches the allocation, which lives until
    // `finish_with`, after the stream's work.
    unsafe {
        ok(sys::cuLaunchHostFunc(
            env.s1,
            Some(copy_element),
            buf as usize as *mut c_void,
        ))
    };
    // SAFETY: a live stream.
    unsafe { ok(sys::cuStreamSynchronize(env.s1)) };
    assert_eq!(host_read(buf, 6), 9);
    finish_with(env, &[buf]);
}

#[test]
fn a_host_functions_accesses_are_ordered_by_its_stream() {
    assert_clean(&report_of("scenario_host_function_touches_managed_memory"));
}

/// A program whose SIGSEGV action is the default sends itself SIGSEGV after `cuInit` (the
/// page guards' handler installed, a managed allocation guarded): it dies of it, as without
/// the simulator. The handler passes a signal a process sent to the action before it and
/// sends it again once that action is back.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_a_sent_sigsegv_still_kills() {
    child();
    // The default action before the simulator's (the Rust runtime's own handler would eat a
    // sent SIGSEGV, with or without the simulator).
    // SAFETY: sets a signal's action to the default; no handler of this program is lost.
    unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
    let env = env(false);
    let mut buf = 0;
    // SAFETY: a context is current; valid out-pointer; CU_MEM_ATTACH_GLOBAL.
    unsafe { ok(sys::cuMemAllocManaged(&mut buf, BYTES, 1)) };
    launch(env.fill, env.s1, buf, 9u32, N);
    // SAFETY: sends SIGSEGV to this process, whose action for it is the simulator's handler.
    unsafe { libc::raise(libc::SIGSEGV) };
    // Not reached when the signal kills the process.
    finish_with(env, &[buf]);
}

#[test]
fn a_sent_sigsegv_still_kills() {
    use std::os::unix::process::ExitStatusExt;
    let (output, _) = run("scenario_a_sent_sigsegv_still_kills", |_| {});
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A pinned host buffer is copied to the device on a non-blocking stream, and the host then
/// overwrites it through its pointer: unless it synchronised first, the write races with the
/// copy's read (the classic bug of reusing a staging buffer too early).
fn host_overwrites_pinned_source(fixed: bool) {
    let env = env(false);
    let mut pinned = std::ptr::null_mut();
    // SAFETY: a context is current; valid out-pointer; flags 0 (pinned, not mapped).
    unsafe { ok(sys::cuMemHostAlloc(&mut pinned, BYTES, 0)) };
    let host = pinned as usize as sys::CUdeviceptr;
    for i in 0..N as usize {
        host_write(host, i, 5);
    }
    let dev = alloc(BYTES);
    // SAFETY: `pinned` holds `BYTES` bytes; `dev` is a live allocation of as many.
    unsafe { ok(sys::cuMemcpyHtoDAsync_v2(dev, pinned, BYTES, env.s1)) };
    if fixed {
        // SAFETY: a live stream.
        unsafe { ok(sys::cuStreamSynchronize(env.s1)) };
    }
    host_write(host, 3, 7);
    // SAFETY: a context is current.
    unsafe { ok(sys::cuCtxSynchronize()) };
    // SAFETY: our own pinned allocation, freed once, after the copy.
    unsafe { ok(sys::cuMemFreeHost(pinned)) };
    finish_with(env, &[dev]);
}

planted!(
    host_overwrites_a_pinned_buffer_a_copy_reads_race,
    scenario_host_overwrites_pinned_source,
    scenario_host_overwrites_pinned_source_after_a_synchronize,
    host_overwrites_pinned_source,
    "data-race",
    [
        " writes 0x",
        "(through a pointer) of the 4096-byte pinned host allocation at 0x",
        "cuMemcpyHtoDAsync_v2 (call #",
        "read ["
    ]
);

/// A kernel writes an allocation of a host pool (pinned memory the device was granted) on a
/// non-blocking stream and the host reads an element through the pointer: a race unless the
/// host synchronised with the stream first.
fn host_reads_host_pool_memory(fixed: bool) {
    let env = env(false);
    // SAFETY: all-zero is the props struct's documented default; valid pointers; the pool,
    // its allocation and the access grant are ours.
    let (pool, ptr) = unsafe {
        let mut props: sys::CUmemPoolProps = std::mem::zeroed();
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        };
        let mut pool = std::ptr::null_mut();
        ok(sys::cuMemPoolCreate(&mut pool, &props));
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: 0,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        ok(sys::cuMemPoolSetAccess(pool, &access, 1));
        let mut ptr = 0;
        ok(sys::cuMemAllocFromPoolAsync(&mut ptr, BYTES, pool, env.s1));
        (pool, ptr)
    };
    launch(env.fill, env.s1, ptr, 9u32, N);
    if fixed {
        // SAFETY: a live stream.
        unsafe { ok(sys::cuStreamSynchronize(env.s1)) };
    }
    assert_eq!(host_read(ptr, 5), 9);
    // SAFETY: our allocation, freed once on the stream that used it; the pool destroyed after
    // everything ran.
    unsafe {
        ok(sys::cuMemFreeAsync(ptr, env.s1));
        ok(sys::cuCtxSynchronize());
        ok(sys::cuMemPoolDestroy(pool));
    }
    finish(env);
}

planted!(
    host_read_of_host_pool_memory_a_kernel_writes_race,
    scenario_host_reads_host_pool_memory,
    scenario_host_reads_host_pool_memory_after_a_synchronize,
    host_reads_host_pool_memory,
    "data-race",
    [" reads 0x", "(through a pointer)", "cuLaunchKernel (call #"]
);

/// A kernel writes mapped pinned memory (through its device pointer) on a non-blocking
/// stream and the host reads an element through its host pointer: a race unless the host
/// synchronised with the stream first.
fn host_reads_mapped_memory(fixed: bool) {
    let env = env(false);
    let mut pinned = std::ptr::null_mut();
    let mut device = 0;
    // SAFETY: a context is current; valid out-pointers; CU_MEMHOSTALLOC_DEVICEMAP.
    unsafe {
        ok(sys::cuMemHostAlloc(&mut pinned, BYTES, 2));
        ok(sys::cuMemHostGetDevicePointer_v2(&mut device, pinned, 0));
    }
    launch(env.fill, env.s1, device, 9u32, N);
    if fixed {
        // SAFETY: a live stream.
        unsafe { ok(sys::cuStreamSynchronize(env.s1)) };
    }
    assert_eq!(host_read(pinned as usize as sys::CUdeviceptr, 5), 9);
    // SAFETY: a context is current.
    unsafe { ok(sys::cuCtxSynchronize()) };
    // SAFETY: our own pinned allocation, freed once, after the kernel.
    unsafe { ok(sys::cuMemFreeHost(pinned)) };
    finish(env);
}

planted!(
    host_read_of_mapped_memory_a_kernel_writes_race,
    scenario_host_reads_mapped_memory,
    scenario_host_reads_mapped_memory_after_a_synchronize,
    host_reads_mapped_memory,
    "data-race",
    [
        " reads 0x",
        "(through a pointer) of the 4096-byte pinned host allocation at 0x",
        "kernel fill_u32",
        "wrote ["
    ]
);
