//! Batched copies on the simulator: `cuMemcpyBatchAsync_v2` (through cudarc's 13.0 bindings)
//! and `cuMemcpyBatchAsync` (the 12.8 form with `failIdx`, looked up in the loaded library),
//! driven by raw calls in a child process: copies land, arguments are parsed as documented, and
//! misuse is reported.

use std::ffi::c_void;

use cuda_sim::SimCommand;
use cudarc::driver::sys::{self, CUdeviceptr, CUresult, CUstream};

mod common;
use common::*;

type Attributes = sys::CUmemcpyAttributes;

/// The 12.8 form, which cudarc's 13.0 bindings do not declare.
type BatchWithFailIndex = unsafe extern "C" fn(
    *mut CUdeviceptr,
    *mut CUdeviceptr,
    *mut usize,
    usize,
    *mut Attributes,
    *mut usize,
    usize,
    *mut usize,
    CUstream,
) -> CUresult;

fn stream_order() -> Attributes {
    let location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    };
    Attributes {
        srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        srcLocHint: location,
        dstLocHint: location,
        flags: 0,
    }
}

fn with_fail_index() -> BatchWithFailIndex {
    // SAFETY: only looks up a symbol of the already loaded simulator (cudarc loaded it).
    unsafe {
        let library = libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!library.is_null(), "the simulator is loaded");
        let symbol = libc::dlsym(library, c"cuMemcpyBatchAsync".as_ptr());
        assert!(
            !symbol.is_null(),
            "the simulator exports cuMemcpyBatchAsync"
        );
        std::mem::transmute::<*mut c_void, BatchWithFailIndex>(symbol)
    }
}

fn alloc(len: usize) -> CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: a context is current; valid out-pointer.
    unsafe { ok(sys::cuMemAlloc_v2(&mut ptr, len)) };
    ptr
}

fn free(ptr: CUdeviceptr) {
    // SAFETY: our own allocation, freed once.
    unsafe { ok(sys::cuMemFree_v2(ptr)) };
}

/// `(dst, src, len)` copies as one batch with one attribute entry, on `stream`.
fn batch(
    copies: &[(CUdeviceptr, CUdeviceptr, usize)],
    attrs: &mut [Attributes],
    starts: &mut [usize],
    stream: CUstream,
) -> CUresult {
    let mut dsts: Vec<CUdeviceptr> = copies.iter().map(|c| c.0).collect();
    let mut srcs: Vec<CUdeviceptr> = copies.iter().map(|c| c.1).collect();
    let mut sizes: Vec<usize> = copies.iter().map(|c| c.2).collect();
    assert_eq!(attrs.len(), starts.len());
    // SAFETY: arrays of the lengths passed.
    unsafe {
        sys::cuMemcpyBatchAsync_v2(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            copies.len(),
            attrs.as_mut_ptr(),
            starts.as_mut_ptr(),
            attrs.len(),
            stream,
        )
    }
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_batch_copies_and_arguments() {
    child();
    setup();
    let stream = new_stream();
    let (a, b) = (alloc(256), alloc(256));
    let pattern: Vec<u8> = (0..=255).collect();
    // SAFETY: host buffers of 256 bytes; device ranges inside the allocations.
    unsafe {
        ok(sys::cuMemcpyHtoD_v2(a, pattern.as_ptr().cast(), 256));
        ok(sys::cuMemsetD8_v2(b, 0, 256));
        // Both may return before the device memory is written, on the legacy stream, which
        // the non-blocking stream does not follow.
        ok(sys::cuStreamSynchronize(LEGACY));
    }
    let swap = [(b, a + 128, 128), (b + 128, a, 128)];
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    // Two attribute entries (copies 0.. and 1..), the second with the one flag.
    let mut second = stream_order();
    second.flags = 1;
    ok(batch(
        &swap,
        &mut [stream_order(), second],
        &mut [0, 1],
        stream,
    ));
    let mut back = vec![0u8; 256];
    // SAFETY: a host buffer of 256 bytes.
    unsafe {
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), b, 256));
    }
    let swapped: Vec<u8> = pattern[128..]
        .iter()
        .chain(&pattern[..128])
        .copied()
        .collect();
    assert_eq!(back, swapped);

    let mut bad_order = stream_order();
    bad_order.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
    let mut bad_flags = stream_order();
    bad_flags.flags = 2;
    assert_eq!(batch(&swap, &mut [bad_order], &mut [0], stream), invalid);
    assert_eq!(batch(&swap, &mut [bad_flags], &mut [0], stream), invalid);
    assert_eq!(
        batch(&swap, &mut [stream_order()], &mut [1], stream),
        invalid,
        "first entry from 0"
    );
    assert_eq!(
        batch(
            &swap,
            &mut [stream_order(), stream_order()],
            &mut [0, 0],
            stream
        ),
        invalid,
        "increasing starts"
    );
    assert_eq!(batch(&[], &mut [], &mut [], stream), invalid, "count 0");
    let legacy = 0x1 as CUstream;
    assert_eq!(
        batch(&swap, &mut [stream_order()], &mut [0], legacy),
        invalid
    );
    assert_eq!(
        batch(&swap, &mut [stream_order()], &mut [0], std::ptr::null_mut()),
        invalid
    );
    // The per-thread stream is a stream like any other.
    ok(batch(
        &swap,
        &mut [stream_order()],
        &mut [0],
        0x2 as CUstream,
    ));
    // The batches below write the same bytes on `stream`, which the per-thread stream does
    // not synchronise with: without this wait they would race (`data-race`).
    // SAFETY: the calling thread's per-thread stream.
    unsafe { ok(sys::cuStreamSynchronize(0x2 as CUstream)) };

    // The 12.8 form names the copy a refusal concerns.
    let batch_12080 = with_fail_index();
    let mut dsts = [b, b + 128, b + 64];
    let mut srcs = [a, a + 128, 0];
    let mut sizes = [64, 64, 64];
    let mut attrs = [stream_order(), bad_order];
    let mut starts = [0, 1];
    let mut failed = 0;
    // SAFETY: arrays of the lengths passed; a valid out-pointer.
    let status = unsafe {
        batch_12080(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            3,
            attrs.as_mut_ptr(),
            starts.as_mut_ptr(),
            2,
            &mut failed,
            stream,
        )
    };
    assert_eq!(
        (status, failed),
        (invalid, 1),
        "the bad attribute applies from copy 1"
    );
    attrs[1] = stream_order();
    // SAFETY: as above.
    let status = unsafe {
        batch_12080(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            3,
            attrs.as_mut_ptr(),
            starts.as_mut_ptr(),
            2,
            &mut failed,
            stream,
        )
    };
    assert_eq!((status, failed), (invalid, 2), "copy 2 reads address 0");
    srcs[2] = a + 64;
    // SAFETY: as above.
    let status = unsafe {
        batch_12080(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            3,
            attrs.as_mut_ptr(),
            starts.as_mut_ptr(),
            2,
            &mut failed,
            stream,
        )
    };
    assert_eq!((status, failed), (CUresult::CUDA_SUCCESS, usize::MAX));
    // SAFETY: our stream.
    unsafe { ok(sys::cuStreamSynchronize(stream)) };
    free(a);
    free(b);
    destroy_stream(stream);
    teardown();
}

/// Two copies of one batch write the same bytes.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_batch_conflict() {
    child();
    setup();
    let stream = new_stream();
    let (a, b) = (alloc(256), alloc(256));
    ok(batch(
        &[(b, a, 64), (b + 32, a + 128, 64)],
        &mut [stream_order()],
        &mut [0],
        stream,
    ));
    // SAFETY: our stream.
    unsafe { ok(sys::cuStreamSynchronize(stream)) };
    free(a);
    free(b);
    destroy_stream(stream);
    teardown();
}

/// A copy of a batch runs past its allocation.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_batch_out_of_bounds() {
    child();
    setup();
    let stream = new_stream();
    let (a, b) = (alloc(256), alloc(256));
    let status = batch(
        &[(b, a, 64), (b + 200, a, 64)],
        &mut [stream_order()],
        &mut [0],
        stream,
    );
    assert_eq!(status, CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: our stream.
    unsafe { ok(sys::cuStreamSynchronize(stream)) };
    free(a);
    free(b);
    destroy_stream(stream);
    teardown();
}

/// A batch's copies are ordered on their stream like any copy: freeing on another stream
/// without an event is an unordered free.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_batch_unordered_free() {
    child();
    setup();
    let (first, second) = (new_stream(), new_stream());
    let (a, b) = (alloc(256), alloc(256));
    let mut ptr = 0;
    // SAFETY: stream-ordered allocation on `second`, freed there without waiting for `first`.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 256, second));
        ok(sys::cuStreamSynchronize(second));
        ok(batch(
            &[(ptr, a, 64), (b, ptr + 128, 64)],
            &mut [stream_order()],
            &mut [0],
            first,
        ));
        ok(sys::cuMemFreeAsync(ptr, second));
        ok(sys::cuStreamSynchronize(first));
        ok(sys::cuStreamSynchronize(second));
    }
    free(a);
    free(b);
    destroy_stream(first);
    destroy_stream(second);
    teardown();
}

#[test]
fn batches_copy_and_refuse_what_the_driver_documents() {
    let report = report_of("scenario_batch_copies_and_arguments");
    assert!(report.violations.is_empty(), "{report:?}");
    assert!(
        report.leaks_without_primary().is_empty(),
        "{:?}",
        report.leaks
    );
}

#[test]
fn batch_misuse_is_reported() {
    for (scenario, kind) in [
        ("scenario_batch_conflict", "batch-conflict"),
        ("scenario_batch_out_of_bounds", "out-of-bounds"),
        ("scenario_batch_unordered_free", "unordered-free"),
    ] {
        // The scenarios copy out of memory they never wrote: initcheck would report that
        // too, which is not what they test.
        let report = report_with(scenario, |command| {
            command.sim_check_initcheck(false);
        });
        assert_eq!(kinds(&report), vec![kind], "{scenario}: {report:?}");
    }
}
