//! Safe host access to memory the host can address: managed memory and owned pinned host
//! memory (`alloc_host`, the allocations of a host pool), as a slice that lives in a guard
//! ([`HostView`], [`HostViewMut`]).
//!
//! # Why a view is sound
//!
//! A `&[T]` must not change while it lives, and a `&mut [T]` must be the only access; the
//! device is another accessor. Every allocation with host access has one gate
//! (`order/access_gate.rs`), one marker event per stream its work was queued on
//! (`order/markers.rs`) and one set of contexts (`ContextsUsed`) for the work no marker covers,
//! all in its record, shared by every handle and view of it. Then:
//!
//! 1. **Every safe use passes the gate.** Every safe method that queues work on memory (copies,
//!    memsets, kernel launches, captures, prefetches, attachment) and every graph launch, for
//!    each buffer its nodes reference, first calls `check_accessible_on` / `check_accessible_in`
//!    (`memory/reach.rs`). For this memory that call *enters* the gate (refused with
//!    [`Error::HostAccessActive`] while a view is open or opening) and returns an
//!    [`AccessGuard`] that *leaves* the gate only once the work is queued. Leaving covers the
//!    work first: work queued on a stream by the thread that leaves gets that stream's marker
//!    recorded after it; work of a graph launch, or work no marker can cover (a failed record,
//!    a per-thread stream's guard dropped on another thread), has its context noted; a context
//!    that cannot be noted either marks the memory unwaitable. So every use that entered is
//!    covered before it leaves.
//! 2. **Opening a view** marks the gate (new uses are refused from this instant), waits until no
//!    use is in flight (every use that entered before is now queued and covered), then waits
//!    for every marker (`cuEventSynchronize`: a stream's marker follows its latest use there,
//!    and a stream runs in order) and synchronises every noted context (`cuCtxSynchronize`):
//!    every piece of work the safe API ever queued on this memory, kernels of graph launches
//!    included, has completed, and nothing else is waited for. Only then is the slice handed
//!    out. Memory marked unwaitable fails the view.
//! 3. **While it lives** no new use enters (step 1 refuses it), so no device work can touch
//!    the memory; the view borrows a handle, so the memory is not freed (a free needs the last
//!    handle). Shared views count as readers and may coexist; a mutable view excludes every
//!    other view of the allocation (views of parts of one allocation share its gate).
//! 4. **Dropping the view** closes the gate; work queued afterwards is ordered after the host's
//!    accesses, as every launch and copy is after the host code that queued it.
//!
//! Work queued through the raw pointer (`as_cu`, an `unsafe` launch, another library) does not
//! pass the gate: as every use of a raw pointer, ordering it before a view is the caller's.
//! A thread that holds an [`AccessGuard`] of the memory and opens a view of it waits for
//! itself: drop guards once their work is queued, as their docs say.
//!
//! Managed memory is viewable only on a device with concurrent managed access (the attribute
//! `CONCURRENT_MANAGED_ACCESS`, which Linux on Pascal and newer has): without it, a host access
//! while any kernel of the device runs faults, whichever memory the kernel uses. The bytes are
//! whatever the memory holds; every bit pattern is a value of a `Pod` type.
//!
//! [`AccessGuard`]: crate::memory::AccessGuard

use std::marker::PhantomData;
use std::ptr::NonNull;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::memory::device_ptr::{DevicePtrHandle, Release};
use crate::memory::host_access::{HostAccess, Open};
use crate::memory::typed::DeviceBuffer;

/// A shared host view of memory: derefs to `&[T]`. While it lives, work on the memory is
/// refused ([`Error::HostAccessActive`]); other shared views may coexist. See the module docs.
pub struct HostView<'a, T> {
    _open: Open<'a>,
    start: NonNull<T>,
    len: usize,
    element: PhantomData<&'a [T]>,
}

/// A mutable host view of memory: derefs to `&mut [T]`. While it lives, work on the memory
/// and every other view of its allocation are refused. See the module docs.
pub struct HostViewMut<'a, T> {
    _open: Open<'a>,
    start: NonNull<T>,
    len: usize,
    element: PhantomData<&'a mut [T]>,
}

impl<T> std::ops::Deref for HostView<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `start` is the host address of `len` elements of the allocation, aligned for
        // `T` (checked at the view's creation), kept alive by the borrowed handle; no device
        // work can touch them while the view is open (module docs), and only shared views
        // coexist with this one.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl<T> std::ops::Deref for HostViewMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: as for `HostView`; this view excludes every other.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for HostViewMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `HostView`; this view excludes every other view and every use, and
        // `&mut self` makes this borrow the only one of the slice.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len) }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HostView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HostViewMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl DevicePtrHandle {
    /// The host-access state of this memory (through views), if it has one: owned managed
    /// and pinned host memory, and allocations of a host pool made here.
    pub(crate) fn host_access(&self) -> Option<&HostAccess> {
        match &self.record().release {
            Release::View(parent) => parent.host_access(),
            Release::Managed(host) | Release::PinnedHost(host) if self.is_owning() => Some(host),
            Release::StreamOrdered {
                host: Some(host), ..
            } if self.is_owning() => Some(host),
            _ => None,
        }
    }

    /// The open gate and the host address of this memory as `len` elements of `T`.
    fn open_host<T: Pod>(&self, mutable: bool) -> Result<(Open<'_>, NonNull<T>, usize)> {
        // `let else` rather than `ok_or`: the error is built (and dropped) only when returned.
        let Some(host) = self.host_access() else {
            return Err(Error::NotHostAccessible {
                what: "only owned managed memory, pinned host memory and host-pool allocations \
                       (or views of them) have host views",
            });
        };
        host.refuse_if_shared_with_processes()?;
        let element = std::mem::size_of::<T>().max(1);
        let len = self.size() / element;
        let Some(start) = NonNull::new(self.as_cu() as usize as *mut T) else {
            return Err(Error::NothingMade {
                what: "the allocation has no address",
            });
        };
        if !start.as_ptr().is_aligned() {
            return Err(Error::MisalignedElements {
                address: self.as_cu(),
                element: std::any::type_name::<T>(),
                align: std::mem::align_of::<T>(),
            });
        }
        let open = host.open(mutable)?;
        Ok((open, start, len))
    }

    /// A shared host view of the bytes, once every use the safe API queued on the memory has
    /// completed; work on the memory is refused while it lives (see the module docs). Only for
    /// memory with host access, else [`Error::NotHostAccessible`]; a mutable view open is
    /// [`Error::HostAccessActive`].
    pub fn host_view(&self) -> Result<HostView<'_, u8>> {
        let (open, start, len) = self.open_host::<u8>(false)?;
        Ok(HostView {
            _open: open,
            start,
            len,
            element: PhantomData,
        })
    }

    /// A mutable host view of the bytes: as [`Self::host_view`], and every other view of the
    /// allocation is refused while it lives.
    pub fn host_view_mut(&self) -> Result<HostViewMut<'_, u8>> {
        let (open, start, len) = self.open_host::<u8>(true)?;
        Ok(HostViewMut {
            _open: open,
            start,
            len,
            element: PhantomData,
        })
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// A shared host view of the elements ([`DevicePtrHandle::host_view`]).
    pub fn host_view(&self) -> Result<HostView<'_, T>> {
        let (open, start, _) = self.as_bytes().open_host::<T>(false)?;
        Ok(HostView {
            _open: open,
            start,
            len: self.len(),
            element: PhantomData,
        })
    }

    /// A mutable host view of the elements ([`DevicePtrHandle::host_view_mut`]).
    pub fn host_view_mut(&self) -> Result<HostViewMut<'_, T>> {
        let (open, start, _) = self.as_bytes().open_host::<T>(true)?;
        Ok(HostViewMut {
            _open: open,
            start,
            len: self.len(),
            element: PhantomData,
        })
    }
}
