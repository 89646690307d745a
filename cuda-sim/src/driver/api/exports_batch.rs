//! Batched copies: `cuMemcpyBatchAsync` (CUDA 12.8 and 12.9 headers, with the `failIdx`
//! out-parameter) and `cuMemcpyBatchAsync_v2` (CUDA 13.0 on, without it). Drivers of 13.0
//! export both; the simulator plays one of 13.0 by default.
//!
//! The call is parsed first, as the driver documents it: the three arrays and the attribute
//! arrays present, `count` at least 1, between 1 and `count` attribute entries whose first
//! applies from copy 0 and whose starts increase, each with a source access order of
//! `STREAM`, `DURING_API_CALL` or `ANY` and no flag but `PREFER_OVERLAP_WITH_COMPUTE`; the
//! location hints are accepted whatever they say (the driver reads them only for managed
//! memory and memory from outside CUDA). A copy of bytes from or to address 0 is refused.
//! Any of these is `CUDA_ERROR_INVALID_VALUE`, with `failIdx` naming the copy (or `SIZE_MAX`
//! when the error is no copy's) and nothing queued. The legacy stream (and NULL, which means
//! it) is refused the same way; the per-thread stream is a stream like any other.
//!
//! Each copy is then issued on the stream exactly as `cuMemcpyAsync` issues it, all of them
//! under one lock, so each is checked against the live allocations (out-of-bounds and
//! use-after-free violations) and ordered on the stream like any copy. The driver runs the
//! copies of a batch in no particular order, which makes a batch whose copies depend on each
//! other undefined: two copies that touch the same bytes, one of them writing, are a
//! `batch-conflict` violation. A capturing stream refuses the call
//! (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, the capture invalidated): there is no graph node
//! for a batch. Neither refusal was measured on a GPU.
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract (arrays of `count`
//! and `numAttrs` entries).

use crate::base::abi::put;
use crate::base::errors::{INVALID_VALUE, OUT_OF_MEMORY};
use crate::base::types::*;
use crate::resources::work::Op;

/// `CUmemcpyAttributes` (CUDA 12.8 to 13.1 layout).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemcpyAttributes {
    pub src_access_order: u32,
    pub src_loc_hint: MemLocation,
    pub dst_loc_hint: MemLocation,
    pub flags: u32,
}

/// `CU_MEMCPY_SRC_ACCESS_ORDER_STREAM` through `_ANY`: the valid source access orders.
const ACCESS_ORDERS: std::ops::RangeInclusive<u32> = 1..=3;
/// `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, the one flag.
const FLAG_PREFER_OVERLAP_WITH_COMPUTE: u32 = 1;
/// `failIdx` for an error that concerns no copy.
const NO_COPY: usize = usize::MAX;

/// A refusal and the copy it concerns.
type Refusal = (CuResult, usize);

/// Reads `count` entries of an in-array, refusing null, and a count no array of `T` can have
/// (more than `isize::MAX` bytes): `CUDA_ERROR_INVALID_VALUE`. The copy is allocated fallibly:
/// a count whose copy does not fit in memory is `CUDA_ERROR_OUT_OF_MEMORY`, never an abort of
/// the process.
///
/// # Safety
///
/// A non-null `array` points to `count` readable entries.
unsafe fn entries<T: Copy>(array: *const T, count: usize) -> Result<Vec<T>, Refusal> {
    if array.is_null()
        || count
            .checked_mul(std::mem::size_of::<T>())
            .is_none_or(|bytes| bytes > isize::MAX as usize)
    {
        return Err((INVALID_VALUE, NO_COPY));
    }
    let mut entries = Vec::new();
    entries
        .try_reserve_exact(count)
        .map_err(|_| (OUT_OF_MEMORY, NO_COPY))?;
    // SAFETY: `count` entries, by the caller's contract; read unaligned, as `get` does.
    entries.extend((0..count).map(|i| unsafe { array.add(i).read_unaligned() }));
    Ok(entries)
}

/// The copies of a batch, as `cuMemcpyAsync` operations, once the arguments are valid.
///
/// # Safety
///
/// As for [`entries`], for each array with its length.
#[allow(clippy::too_many_arguments)]
unsafe fn parse(
    dsts: *const CuDevicePtr,
    srcs: *const CuDevicePtr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
) -> Result<Vec<Op>, Refusal> {
    if count == 0 || num_attrs == 0 || num_attrs > count {
        return Err((INVALID_VALUE, NO_COPY));
    }
    // SAFETY: the arrays' lengths, by the caller's contract.
    let (dsts, srcs, sizes, attrs, starts) = unsafe {
        (
            entries(dsts, count)?,
            entries(srcs, count)?,
            entries(sizes, count)?,
            entries(attrs, num_attrs)?,
            entries(attrs_idxs, num_attrs)?,
        )
    };
    if starts[0] != 0 {
        return Err((INVALID_VALUE, NO_COPY));
    }
    for (k, (attr, &start)) in attrs.iter().zip(&starts).enumerate() {
        if k > 0 && start <= starts[k - 1] || start >= count {
            return Err((INVALID_VALUE, NO_COPY));
        }
        if !ACCESS_ORDERS.contains(&attr.src_access_order)
            || attr.flags & !FLAG_PREFER_OVERLAP_WITH_COMPUTE != 0
        {
            return Err((INVALID_VALUE, start));
        }
    }
    let mut ops = Vec::new();
    ops.try_reserve_exact(count)
        .map_err(|_| (OUT_OF_MEMORY, NO_COPY))?;
    for i in 0..count {
        let (dst, src, len) = (dsts[i], srcs[i], sizes[i]);
        if len > 0 && (dst == 0 || src == 0) {
            return Err((INVALID_VALUE, i));
        }
        ops.push(Op::Memcpy {
            dst,
            src,
            len,
            device: (false, false),
        });
    }
    Ok(ops)
}

/// The first two copies (by position) of which one writes bytes the other touches, if any.
fn first_conflict(ops: &[Op]) -> Option<(usize, usize)> {
    let mut ranges: Vec<(u64, u64, usize, bool)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if let &Op::Memcpy { dst, src, len, .. } = op
            && len > 0
        {
            let len = len as u64;
            ranges.push((src, src.saturating_add(len), i, false));
            ranges.push((dst, dst.saturating_add(len), i, true));
        }
    }
    ranges.sort_unstable_by_key(|&(start, _, i, _)| (start, i));
    // The farthest end so far, of any range and of destinations, with its copy.
    let mut farthest: Option<(u64, usize)> = None;
    let mut farthest_write: Option<(u64, usize)> = None;
    for (start, end, i, writes) in ranges {
        let before = if writes { farthest } else { farthest_write };
        if let Some((other_end, other)) = before
            && other_end > start
            && other != i
        {
            return Some((other.min(i), other.max(i)));
        }
        if farthest.is_none_or(|(far, _)| end > far) {
            farthest = Some((end, i));
        }
        if writes && farthest_write.is_none_or(|(far, _)| end > far) {
            farthest_write = Some((end, i));
        }
    }
    None
}

/// Both forms of the call; `failed` receives `failIdx`.
///
/// # Safety
///
/// As for [`parse`].
#[allow(clippy::too_many_arguments)]
unsafe fn batch(
    dsts: *const CuDevicePtr,
    srcs: *const CuDevicePtr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
    stream: Raw,
    failed: &mut usize,
) -> Result<(), CuResult> {
    *failed = NO_COPY;
    // SAFETY: forwarded from the caller.
    let ops = unsafe { parse(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs) }.map_err(
        |(status, at)| {
            *failed = at;
            status
        },
    )?;
    if stream == 0 || stream == STREAM_LEGACY {
        return Err(INVALID_VALUE);
    }
    let mut ops = Some(ops);
    let mut at = NO_COPY;
    let issued = crate::wait_for(|sim| {
        let target = sim.stream(stream, "cuMemcpyBatchAsync")?;
        sim.forbid_capture(target)?;
        let batch = ops.as_ref().expect("issued once");
        if batch.iter().any(|op| sim.must_wait(target, op)) {
            return Ok(None);
        }
        if let Some((first, second)) = first_conflict(batch) {
            sim.checker.violation(
                "batch-conflict",
                format!(
                    "copies {first} and {second} of a batch touch the same bytes and one of them writes them; the driver runs a batch's copies in no particular order"
                ),
            );
        }
        let mut calls = Vec::new();
        for (i, op) in ops.take().expect("issued once").into_iter().enumerate() {
            at = i;
            calls.extend(sim.submit(target, op, false)?);
        }
        at = NO_COPY;
        Ok(Some((target.timeline, calls)))
    });
    let (timeline, calls) = issued.inspect_err(|_| *failed = at)?;
    crate::resources::deferred::start_hosts(
        calls.into_iter().map(|call| (timeline, call)).collect(),
    );
    Ok(())
}

export_fns! {
    fn cuMemcpyBatchAsync(dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attrs: *mut MemcpyAttributes, attrs_idxs: *mut usize, num_attrs: usize, fail_idx: *mut usize, stream: Raw) {
        let mut failed = NO_COPY;
        // SAFETY: the arrays' lengths, by the API's contract.
        let result = unsafe {
            batch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream, &mut failed)
        };
        if !fail_idx.is_null() {
            put(fail_idx, failed)?;
        }
        result
    }

    fn cuMemcpyBatchAsync_v2(dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attrs: *mut MemcpyAttributes, attrs_idxs: *mut usize, num_attrs: usize, stream: Raw) {
        let mut failed = NO_COPY;
        // SAFETY: the arrays' lengths, by the API's contract.
        unsafe { batch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream, &mut failed) }
    }
}
