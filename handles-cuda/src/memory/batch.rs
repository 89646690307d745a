//! Batched copies: many device-to-device copies queued on one stream by one call
//! ([`StreamHandle::copy_batch`]), through `cuMemcpyBatchAsync` where the driver has it (CUDA
//! 12.8 and newer) and one `cuMemcpyAsync` per copy otherwise.
//!
//! Every copy is checked before anything is queued, with the checks of a single copy
//! (`DevicePtrHandle::copy_ranges`: both ranges inside their buffers, a source that does not
//! overlap its destination), and the batch as a whole: the driver runs the copies of a batch in
//! no particular order, so two copies that touch the same bytes, one of them writing, are
//! refused ([`Error::BatchConflict`]). The fallback keeps that rule, so a batch means the same
//! on every driver. Then the capture check and the reach check of every buffer (the guards are
//! held until the copies are queued), and after queueing one ordering report per buffer
//! (`record_guarded_use`, once per allocation however many copies and views name it).
//!
//! Host memory takes part only as pinned memory a handle owns (`DevicePtrHandle::alloc_host`),
//! which the handle keeps alive until its free is ordered after the batch; a borrowed host
//! slice has no place in an asynchronous batch.

use std::collections::HashSet;

use bytemuck::Pod;
use cudarc::driver::sys::{self, CUdeviceptr, CUstream};

use crate::driver::call::driver;
use crate::driver::load::{Capability, newer, probed};
use crate::error::{Error, Result};
use crate::exec::stream::{LEGACY_STREAM, StreamHandle};
use crate::memory::device_ptr::{DevicePtr, DevicePtrHandle};
use crate::memory::reach::AccessGuard;
use crate::memory::typed::DeviceBuffer;

/// The most copies passed to one `cuMemcpyBatchAsync`. The driver documents no limit; this
/// bounds the arrays built per call, and a longer batch is queued in several calls, in order.
pub(crate) const COPIES_PER_CALL: usize = 1024;

/// One copy of a batch: `len` bytes from byte `src_offset` of `src` to byte `dst_offset` of
/// `dst`, device to device (either side may be pinned host memory from
/// [`DevicePtrHandle::alloc_host`]). Made with [`BatchCopy::bytes`], or in elements with
/// [`BatchCopy::elements`] and [`BatchCopy::all`]; queued with [`StreamHandle::copy_batch`],
/// which checks every range.
#[derive(Clone, Copy, Debug)]
pub struct BatchCopy<'a> {
    src: &'a DevicePtrHandle,
    src_offset: usize,
    dst: &'a DevicePtrHandle,
    dst_offset: usize,
    len: usize,
}

impl<'a> BatchCopy<'a> {
    /// `len` bytes from byte `src_offset` of `src` to byte `dst_offset` of `dst`. The ranges are
    /// checked when the batch is queued.
    pub fn bytes(
        src: &'a DevicePtrHandle,
        src_offset: usize,
        dst: &'a DevicePtrHandle,
        dst_offset: usize,
        len: usize,
    ) -> Self {
        BatchCopy {
            src,
            src_offset,
            dst,
            dst_offset,
            len,
        }
    }

    /// `count` elements from element `src_start` of `src` to element `dst_start` of `dst`;
    /// [`Error::ElementsOutOfRange`] unless both lie within their buffers.
    pub fn elements<T: Pod>(
        src: &'a DeviceBuffer<T>,
        src_start: usize,
        dst: &'a DeviceBuffer<T>,
        dst_start: usize,
        count: usize,
    ) -> Result<Self> {
        src.check_range(src_start, count)?;
        dst.check_range(dst_start, count)?;
        // Within a buffer of `len` elements, whose byte size fits: no product overflows.
        let size = std::mem::size_of::<T>();
        Ok(BatchCopy::bytes(
            src.as_bytes(),
            src_start * size,
            dst.as_bytes(),
            dst_start * size,
            count * size,
        ))
    }

    /// Every element of `src` into `dst`, of the same length ([`Error::LengthMismatch`]
    /// otherwise).
    pub fn all<T: Pod>(src: &'a DeviceBuffer<T>, dst: &'a DeviceBuffer<T>) -> Result<Self> {
        if src.len() != dst.len() {
            return Err(Error::LengthMismatch {
                src: src.len(),
                dst: dst.len(),
            });
        }
        BatchCopy::elements(src, 0, dst, 0, src.len())
    }
}

/// A checked copy that moves bytes: its position in the batch and its addresses.
struct Planned {
    index: usize,
    from: CUdeviceptr,
    to: CUdeviceptr,
    len: usize,
}

/// A buffer of the batch, once: the allocation whose ordering it is, and the first copy (by
/// position among the planned ones, and in the batch) that uses it.
struct Used<'a> {
    root: &'a DevicePtrHandle,
    first_planned: usize,
    first_index: usize,
}

fn in_batch(index: usize) -> impl FnOnce(Error) -> Error {
    move |cause| Error::InBatch {
        index,
        cause: Box::new(cause),
    }
}

/// Checks every copy and the batch as a whole; returns the copies that move bytes (empty ones
/// are checked and then skipped).
fn plan(copies: &[BatchCopy<'_>]) -> Result<Vec<Planned>> {
    let mut planned = Vec::with_capacity(copies.len());
    for (index, copy) in copies.iter().enumerate() {
        let (from, to) = copy
            .src
            .copy_ranges(copy.src_offset, copy.dst, copy.dst_offset, copy.len)
            .map_err(in_batch(index))?;
        if copy.len > 0 {
            planned.push(Planned {
                index,
                from,
                to,
                len: copy.len,
            });
        }
    }
    refuse_conflicts(&planned)?;
    Ok(planned)
}

/// Refuses two copies of which one writes bytes the other reads or writes. Every range sorted
/// by start: a range conflicts with an earlier-starting one exactly when the farthest end
/// before it reaches past its start, so it suffices to keep the farthest end of all ranges and
/// of destinations. A copy's own two ranges never overlap (checked before).
fn refuse_conflicts(planned: &[Planned]) -> Result<()> {
    let mut ranges: Vec<(CUdeviceptr, CUdeviceptr, usize, bool)> = planned
        .iter()
        .flat_map(|p| {
            let len = p.len as CUdeviceptr;
            [
                (p.from, p.from.saturating_add(len), p.index, false),
                (p.to, p.to.saturating_add(len), p.index, true),
            ]
        })
        .collect();
    // Ties in copy order, so that the pair reported does not depend on the sort.
    ranges.sort_unstable_by_key(|&(start, _, index, _)| (start, index));
    let mut farthest: Option<(CUdeviceptr, usize)> = None;
    let mut farthest_write: Option<(CUdeviceptr, usize)> = None;
    for (start, end, index, writes) in ranges {
        let reach = if writes { farthest } else { farthest_write };
        if let Some((other_end, other)) = reach
            && other_end > start
        {
            return Err(Error::BatchConflict {
                first: other.min(index),
                second: other.max(index),
            });
        }
        if farthest.is_none_or(|(far, _)| end > far) {
            farthest = Some((end, index));
        }
        if writes && farthest_write.is_none_or(|(far, _)| end > far) {
            farthest_write = Some((end, index));
        }
    }
    Ok(())
}

/// The buffers of the planned copies, each allocation once (views count as their allocation),
/// in the order of their first use.
fn distinct_buffers<'a>(copies: &[BatchCopy<'a>], planned: &[Planned]) -> Vec<Used<'a>> {
    let mut seen: HashSet<*const DevicePtr> = HashSet::new();
    let mut used = Vec::new();
    for (position, p) in planned.iter().enumerate() {
        let copy = &copies[p.index];
        for buffer in [copy.src, copy.dst] {
            let root = buffer.ordering_root();
            // One record per allocation box: a borrowed handle of the same address is another
            // box, and is reported on its own (it orders nothing, but is not mistaken for the
            // owner).
            if seen.insert(std::ptr::from_ref(root.record())) {
                used.push(Used {
                    root,
                    first_planned: position,
                    first_index: p.index,
                });
            }
        }
    }
    used
}

/// The driver function of batched copies in the bindings this crate is built with.
fn batch_function() -> &'static Capability {
    #[cfg(any(feature = "cuda-12080", feature = "cuda-12090"))]
    return &newer::cuMemcpyBatchAsync;
    #[cfg(not(any(feature = "cuda-12080", feature = "cuda-12090")))]
    return &newer::cuMemcpyBatchAsync_v2;
}

/// The attributes of every copy: sources read in stream order (the copies run after the work
/// queued before them), no flags; the location hints name the stream's device (the driver uses
/// them only for managed memory and memory from outside CUDA).
fn attributes(ordinal: usize) -> sys::CUmemcpyAttributes {
    let location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal as i32,
    };
    sys::CUmemcpyAttributes {
        srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        srcLocHint: location,
        dstLocHint: location,
        flags: 0,
    }
}

/// Queues one call's worth of copies with `cuMemcpyBatchAsync`.
///
/// # Safety
///
/// Every `(dsts[i], srcs[i], sizes[i])` is a copy between ranges of live allocations, none
/// writing bytes another reads or writes, and `raw` is a live stream that is not the legacy
/// stream.
unsafe fn queue_batch(
    dsts: &mut [CUdeviceptr],
    srcs: &mut [CUdeviceptr],
    sizes: &mut [usize],
    attrs: &mut sys::CUmemcpyAttributes,
    raw: CUstream,
) -> Result<()> {
    let count = dsts.len();
    let mut first = 0usize;
    #[cfg(any(feature = "cuda-12080", feature = "cuda-12090"))]
    {
        let mut failed = usize::MAX;
        // SAFETY: three arrays of `count` entries, one attribute applying from copy 0, valid
        // out-pointer; the copies are valid by the caller's contract.
        unsafe {
            probed!(cuMemcpyBatchAsync(
                dsts.as_mut_ptr(),
                srcs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                count,
                attrs,
                &mut first,
                1,
                &mut failed,
                raw
            ))
        }
    }
    #[cfg(not(any(feature = "cuda-12080", feature = "cuda-12090")))]
    {
        // SAFETY: three arrays of `count` entries and one attribute applying from copy 0; the
        // copies are valid by the caller's contract.
        unsafe {
            probed!(cuMemcpyBatchAsync_v2(
                dsts.as_mut_ptr(),
                srcs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                count,
                attrs,
                &mut first,
                1,
                raw
            ))
        }
    }
}

impl StreamHandle {
    /// Queues every copy of `copies` on this stream, after the work queued on it before and
    /// before the work queued after; the copies themselves run in no particular order, so no
    /// two may touch the same bytes where one of them writes ([`Error::BatchConflict`]).
    ///
    /// Uses one `cuMemcpyBatchAsync` per 1024 copies where the driver has it (CUDA 12.8; the
    /// `_v2` form of 13.0 with this crate's default bindings), and one `cuMemcpyAsync` per copy
    /// on older drivers and on the legacy default stream, which the batch function refuses.
    ///
    /// Everything is checked before anything is queued: each copy's ranges and overlap
    /// ([`Error::InBatch`] with the copy's position and the reason, as
    /// [`DevicePtrHandle::copy_to_async`] would give it), conflicts between copies, the
    /// stream's capture state ([`Error::Capturing`]) and whether the stream's device reaches
    /// every buffer. Each buffer's free is then ordered after the batch, with one report per
    /// allocation. An empty batch calls nothing. If the driver fails part-way, the copies it
    /// had accepted are still reported, and the error is returned.
    pub fn copy_batch(&self, copies: &[BatchCopy<'_>]) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        let planned = plan(copies)?;
        if planned.is_empty() {
            return Ok(());
        }
        self.refuse_if_captured()?;
        let buffers = distinct_buffers(copies, &planned);
        let _reach: Vec<AccessGuard> = buffers
            .iter()
            .map(|used| {
                used.root
                    .check_accessible_on(self)
                    .map_err(in_batch(used.first_index))
            })
            .collect::<Result<_>>()?;
        let raw_stream = self.as_cu();
        let native =
            !raw_stream.is_null() && raw_stream != LEGACY_STREAM && batch_function().available();
        let ordinal = if native { self.device_ordinal()? } else { 0 };
        let mut queued = 0;
        let status = self.run_bound(|raw| {
            if native {
                let mut attrs = attributes(ordinal);
                for chunk in planned.chunks(COPIES_PER_CALL) {
                    let mut dsts: Vec<CUdeviceptr> = chunk.iter().map(|p| p.to).collect();
                    let mut srcs: Vec<CUdeviceptr> = chunk.iter().map(|p| p.from).collect();
                    let mut sizes: Vec<usize> = chunk.iter().map(|p| p.len).collect();
                    // SAFETY: every copy was checked to lie in live allocations (kept alive by
                    // `copies`' handles) without conflicts; the stream is alive while `self`
                    // is, and not the legacy stream (`native`).
                    unsafe { queue_batch(&mut dsts, &mut srcs, &mut sizes, &mut attrs, raw) }?;
                    queued += chunk.len();
                }
            } else {
                for p in &planned {
                    // SAFETY: both ranges were checked to lie in live allocations kept alive
                    // by `copies`' handles, and not to overlap.
                    unsafe { driver!(cuMemcpyAsync(p.to, p.from, p.len, raw)) }?;
                    queued += 1;
                }
            }
            Ok(())
        });
        // Every buffer of an accepted copy is reported, whatever happens to another: an
        // unreported use could be freed unordered.
        let mut reported = Ok(());
        for used in buffers.iter().filter(|used| used.first_planned < queued) {
            reported = reported.and(used.root.record_guarded_use(self));
        }
        status.and(reported)
    }
}
