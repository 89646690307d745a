//! Memsets and copies of allocations: stream-ordered fills and device-to-device copies, and
//! host copies that return only once the copy is complete. Each reports its stream as a use, so
//! the allocation's free is ordered after it.

use cudarc::driver::sys::CUdeviceptr;

use crate::driver::call::driver;
use crate::error::{Error, Result};
use crate::exec::stream::{LEGACY_STREAM, StreamHandle};
use crate::memory::device_ptr::DevicePtrHandle;

impl DevicePtrHandle {
    /// The source and destination addresses of a device-to-device copy of `len` bytes, if
    /// both ranges lie in their allocations and do not overlap: the one check of every copy
    /// (direct, captured, or a graph node).
    pub(crate) fn copy_ranges(
        &self,
        src_offset: usize,
        dst: &DevicePtrHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<(CUdeviceptr, CUdeviceptr)> {
        let from = self.range(src_offset, len)?;
        let to = dst.range(dst_offset, len)?;
        // Absolute addresses: two views of one allocation overlap as much as their bases do.
        if from.abs_diff(to) < len as CUdeviceptr {
            return Err(Error::Overlap { len });
        }
        Ok((from, to))
    }

    /// Fills the first `len` bytes with `value`, ordered on `stream`.
    pub fn memset_async(&self, value: u8, len: usize, stream: &StreamHandle) -> Result<()> {
        self.memset_at_async(0, value, len, stream)
    }

    /// Fills `len` bytes from byte `offset` with `value`, ordered on `stream`.
    pub fn memset_at_async(
        &self,
        offset: usize,
        value: u8,
        len: usize,
        stream: &StreamHandle,
    ) -> Result<()> {
        let start = self.range(offset, len)?;
        stream.refuse_if_captured()?;
        let _reach = self.check_accessible_on(stream)?;
        stream
            .queue(|raw_stream| {
                // SAFETY: the range is within the allocation, which is alive while `self` is.
                unsafe { driver!(cuMemsetD8Async(start, value, len, raw_stream)) }
            })
            .then(|| self.record_guarded_use(stream))
    }

    /// Copies `src` into the start of the allocation, after the work queued on `stream`.
    /// Returns once the copy is complete.
    pub fn copy_from_host(&self, src: &[u8], stream: &StreamHandle) -> Result<()> {
        self.copy_from_host_at(0, src, stream)
    }

    /// Copies `src` into the allocation from byte `offset`, after the work queued on
    /// `stream`. Returns once the copy is complete.
    pub fn copy_from_host_at(
        &self,
        offset: usize,
        src: &[u8],
        stream: &StreamHandle,
    ) -> Result<()> {
        let start = self.range(offset, src.len())?;
        let _reach = self.check_accessible_on(stream)?;
        host_copy(self, stream, start, src.as_ptr() as CUdeviceptr, src.len())
    }

    /// Copies the start of the allocation into `dst`, after the work queued on `stream`.
    /// Returns once the copy is complete.
    pub fn copy_to_host(&self, dst: &mut [u8], stream: &StreamHandle) -> Result<()> {
        self.copy_to_host_at(0, dst, stream)
    }

    /// Copies `dst.len()` bytes from byte `offset` of the allocation into `dst`, after the
    /// work queued on `stream`. Returns once the copy is complete.
    pub fn copy_to_host_at(
        &self,
        offset: usize,
        dst: &mut [u8],
        stream: &StreamHandle,
    ) -> Result<()> {
        let start = self.range(offset, dst.len())?;
        let _reach = self.check_accessible_on(stream)?;
        host_copy(
            self,
            stream,
            dst.as_mut_ptr() as CUdeviceptr,
            start,
            dst.len(),
        )
    }

    /// Copies `len` bytes from byte `src_offset` of this allocation to byte `dst_offset` of
    /// `dst`, ordered on `stream` (device to device; the two ranges may be in one allocation
    /// only if they do not overlap). Both frees are ordered after the copy.
    pub fn copy_to_async(
        &self,
        src_offset: usize,
        dst: &DevicePtrHandle,
        dst_offset: usize,
        len: usize,
        stream: &StreamHandle,
    ) -> Result<()> {
        let (from, to) = self.copy_ranges(src_offset, dst, dst_offset, len)?;
        stream.refuse_if_captured()?;
        let _reach = self.check_accessible_on(stream)?;
        let _dst_reach = dst.check_accessible_on(stream)?;
        stream
            .queue_bound(|raw_stream| {
                // SAFETY: both ranges are within live allocations kept alive by their handles.
                unsafe { driver!(cuMemcpyAsync(to, from, len, raw_stream)) }
            })
            .then(|| {
                // Both are reported whatever happens to the other: an unreported use could be
                // freed unordered.
                let source = self.record_guarded_use(stream);
                let destination = dst.record_guarded_use(stream);
                source.and(destination)
            })
    }
}

/// A copy between host memory the caller lends and `memory`, after the work queued on
/// `stream`: the host first waits for `stream`, then a synchronous `cuMemcpy` copies, then the
/// host waits for the legacy default stream. A synchronous copy does not return while the
/// driver may still read or write the host memory, whatever its status; an asynchronous copy
/// followed by a failed synchronize could. But it may return before it has written device
/// memory: from pageable host memory once the source is staged, with the transfer still queued
/// on the legacy stream, which a non-blocking `stream` does not follow. The last wait makes the
/// copy complete when this returns, so it orders the later free and the later work of every
/// stream by itself; if that wait fails, the legacy stream is reported as a use of `memory`
/// instead, so that its free still follows the copy.
fn host_copy(
    memory: &DevicePtrHandle,
    stream: &StreamHandle,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
) -> Result<()> {
    stream.synchronize()?;
    stream.run_bound(|_| {
        // SAFETY: both ranges are valid for `len` bytes (checked by the caller, and the host
        // slice is borrowed for the whole call); unified addressing lets `cuMemcpy` take host
        // and device addresses alike.
        unsafe { driver!(cuMemcpy(dst, src, len)) }?;
        // SAFETY: `CU_STREAM_LEGACY` names the legacy stream of the context current here (the
        // one `cuMemcpy` used), which needs no handle to stay alive.
        let waited = unsafe { driver!(cuStreamSynchronize(LEGACY_STREAM)) };
        if waited.is_err() {
            // The copy may still be queued there; the wait's error is the one returned.
            let _ = memory.record_guarded_use(&StreamHandle::legacy());
        }
        waited
    })
}
