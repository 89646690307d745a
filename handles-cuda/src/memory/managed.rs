//! Managed memory (`cuMemAllocManaged`): prefetches, advice and stream attachment.
//!
//! A managed allocation is a [`DevicePtrHandle`] like any other (same ownership, ordering and
//! typed API; [`DevicePtrHandle::alloc_managed`], [`DeviceBuffer::alloc_managed`]); what this
//! file adds only applies to it, and anything else is [`Error::NotManaged`]. A prefetch and an
//! attachment are stream operations: they pass the reach check and the host-view gate like
//! every use, and report their stream, so the free and later host views wait for them.
//! Locations are [`PoolLocation`]s, converted to `CUmemLocation` in one place (`pool.rs`).
//! `cuMemPrefetchAsync_v2` and `cuMemAdvise_v2` came with CUDA 12.2; an older driver gets the
//! CUDA 12.0 forms (a device ordinal, or the CPU), and a host NUMA node there is
//! [`Error::NotSupported`]. Discarding (`cuMemDiscardBatchAsync`) is not offered: cudarc binds
//! it only in its CUDA 13 headers.

use cudarc::driver::sys::{self, CUdeviceptr};

use crate::driver::call::{check, driver, out};
use crate::driver::current::in_context_of;
use crate::driver::load::{self, newer, probed};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::stream::StreamHandle;
use std::sync::Arc;

use crate::driver::current::in_context;
use crate::memory::device_ptr::{DevicePtrHandle, Release, check_size};
use crate::memory::host_access::HostAccess;
use crate::memory::pool::{PoolLocation, raw_location};
use crate::memory::typed::{DeviceBuffer, bytes_of};

/// Which streams may use managed memory (`CU_MEM_ATTACH_*`), at allocation and through
/// [`DevicePtrHandle::attach`]. On devices with concurrent managed access (Linux, Pascal and
/// newer) every device may touch it whatever the attachment; the attachment then only tells the
/// driver what to keep coherent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attach {
    /// Any stream of any device (`CU_MEM_ATTACH_GLOBAL`).
    Global,
    /// The host (`CU_MEM_ATTACH_HOST`): devices without concurrent managed access may not touch it.
    Host,
    /// Only the stream it is attached on (`CU_MEM_ATTACH_SINGLE`; attachment only).
    Single,
}

impl Attach {
    fn raw(self) -> u32 {
        (match self {
            Attach::Global => sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL,
            Attach::Host => sys::CUmemAttach_flags::CU_MEM_ATTACH_HOST,
            Attach::Single => sys::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE,
        }) as u32
    }

    /// The flags of `cuMemAllocManaged`, which takes `Global` or `Host` only.
    pub(crate) fn alloc_flags(self) -> Result<u32> {
        match self {
            Attach::Single => Err(Error::BadFlags {
                what: "managed memory is allocated attached globally or to the host; attach it \
                       to one stream afterwards (DevicePtrHandle::attach)",
            }),
            other => Ok(other.raw()),
        }
    }
}

/// Advice about how managed memory will be used (`cuMemAdvise`): each `Set` form has its
/// `Unset` form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Mostly read: devices that read it get read-only copies (`SET_READ_MOSTLY`).
    SetReadMostly,
    /// Undoes [`Advice::SetReadMostly`].
    UnsetReadMostly,
    /// Keep the pages at this location where possible (`SET_PREFERRED_LOCATION`).
    SetPreferredLocation(PoolLocation),
    /// Undoes [`Advice::SetPreferredLocation`].
    UnsetPreferredLocation,
    /// This location will access it: keep it mapped there (`SET_ACCESSED_BY`).
    SetAccessedBy(PoolLocation),
    /// Undoes [`Advice::SetAccessedBy`] for this location.
    UnsetAccessedBy(PoolLocation),
}

impl Advice {
    /// The driver's advice and the location it applies to (locations that the driver ignores
    /// are the host).
    fn raw(self) -> (sys::CUmem_advise, PoolLocation) {
        use sys::CUmem_advise::*;
        match self {
            Advice::SetReadMostly => (CU_MEM_ADVISE_SET_READ_MOSTLY, PoolLocation::Host),
            Advice::UnsetReadMostly => (CU_MEM_ADVISE_UNSET_READ_MOSTLY, PoolLocation::Host),
            Advice::SetPreferredLocation(at) => (CU_MEM_ADVISE_SET_PREFERRED_LOCATION, at),
            Advice::UnsetPreferredLocation => {
                (CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, PoolLocation::Host)
            }
            Advice::SetAccessedBy(at) => (CU_MEM_ADVISE_SET_ACCESSED_BY, at),
            Advice::UnsetAccessedBy(at) => (CU_MEM_ADVISE_UNSET_ACCESSED_BY, at),
        }
    }
}

/// `CU_DEVICE_CPU`, the host as a `CUdevice`.
const DEVICE_CPU: sys::CUdevice = -1;

/// The CUDA 12.0 form of a location: a device ordinal, or `CU_DEVICE_CPU` for the host; a host
/// NUMA node has none, and needs the `_v2` function named.
fn legacy_device(location: PoolLocation, needs: &'static load::Capability) -> Result<i32> {
    match location {
        PoolLocation::Device(ordinal) => Ok(load::device(ordinal)?),
        PoolLocation::Host => Ok(DEVICE_CPU),
        PoolLocation::HostNuma(_) => needs.require().map(|()| 0),
    }
}

impl DevicePtrHandle {
    /// Allocates `size` bytes of managed memory in `context` (`cuMemAllocManaged`), reachable
    /// from the host and from every device; `attach` says which streams may use it at first
    /// ([`Attach::Global`] or [`Attach::Host`]; [`Attach::Single`] is refused here, as by the
    /// driver: attach to one stream with [`Self::attach`]). Freed synchronously after every
    /// context the safe methods used it in; prefetch, advise and attach it with the methods of
    /// `memory/managed.rs`, and read or write it on the host with [`Self::host_view`].
    ///
    /// [`Attach::Global`]: crate::memory::Attach::Global
    /// [`Attach::Host`]: crate::memory::Attach::Host
    /// [`Attach::Single`]: crate::memory::Attach::Single
    pub fn alloc_managed(context: &ContextHandle, size: usize, attach: Attach) -> Result<Self> {
        check_size(size)?;
        let flags = attach.alloc_flags()?;
        let context = &context.keep_alive()?;
        let device = match context.device() {
            Some(device) => device,
            None => StreamHandle::legacy_in(context)?.device_ordinal()?,
        };
        in_context(context.as_cu(), || {
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            let raw = out(|raw| unsafe { driver!(cuMemAllocManaged(raw, size, flags)) })?;
            let release = Release::Managed(Arc::new(HostAccess::managed(device)));
            Ok(Self::context_bound(raw, size, context, release))
        })
    }

    /// The managed allocation this memory is (or is a view of), if it is managed.
    fn managed_root(&self) -> Option<&DevicePtrHandle> {
        match &self.record().release {
            Release::View(parent) => parent.managed_root(),
            Release::Managed(_) if self.is_owning() => Some(self),
            _ => None,
        }
    }

    fn require_managed(&self) -> Result<&DevicePtrHandle> {
        self.managed_root().ok_or(Error::NotManaged)
    }

    /// Migrates the memory (this handle's range: all of it, or a view's part) to `location`,
    /// ordered on `stream` (`cuMemPrefetchAsync_v2`, or `cuMemPrefetchAsync` before CUDA 12.2).
    /// A stream use like any other: refused while a host view is open, waited for by the free
    /// and by later views. Prefetch to [`PoolLocation::Host`] before reading on the host, and
    /// to the device before a kernel, to avoid page faults on first touch.
    pub fn prefetch(&self, location: PoolLocation, stream: &StreamHandle) -> Result<()> {
        self.require_managed()?;
        let (start, len) = (self.as_cu(), self.size());
        stream.refuse_if_captured()?;
        let _reach = self.check_accessible_on(stream)?;
        let device = if newer::cuMemPrefetchAsync_v2.available() {
            None
        } else {
            Some(legacy_device(location, &newer::cuMemPrefetchAsync_v2)?)
        };
        stream
            .queue_bound(|raw_stream| match device {
                // SAFETY: the range is this handle's, inside a live managed allocation; the
                // location is a valid `CUmemLocation`; the stream is alive.
                None => unsafe {
                    probed!(cuMemPrefetchAsync_v2(
                        start,
                        len,
                        raw_location(location),
                        0,
                        raw_stream
                    ))
                },
                Some(device) => legacy_prefetch(start, len, device, raw_stream),
            })
            .then(|| self.record_guarded_use(stream))
    }

    /// Advises the driver how the memory (this handle's range) will be used (`cuMemAdvise_v2`,
    /// or `cuMemAdvise` before CUDA 12.2). A host call that touches no data: it needs no stream
    /// and is allowed while a host view is open.
    pub fn advise(&self, advice: Advice) -> Result<()> {
        let root = self.require_managed()?;
        let (start, len) = (self.as_cu(), self.size());
        let (raw_advice, location) = advice.raw();
        let legacy = if newer::cuMemAdvise_v2.available() {
            None
        } else {
            Some(legacy_device(location, &newer::cuMemAdvise_v2)?)
        };
        in_context_of(root.context().as_ref().map(ContextHandle::as_cu), || {
            match legacy {
                // SAFETY: the range lies in a live managed allocation; the location is valid.
                None => unsafe {
                    probed!(cuMemAdvise_v2(
                        start,
                        len,
                        raw_advice,
                        raw_location(location)
                    ))
                },
                Some(device) => legacy_advise(start, len, raw_advice, device),
            }
        })
    }

    /// Attaches the whole allocation (of a view too) to `stream`'s work as `how` says,
    /// ordered on `stream` (`cuStreamAttachMemAsync`). A stream use like any other.
    pub fn attach(&self, stream: &StreamHandle, how: Attach) -> Result<()> {
        let root = self.require_managed()?;
        let base = root.as_cu();
        stream.refuse_if_captured()?;
        let _reach = root.check_accessible_on(stream)?;
        stream
            .queue_bound(|raw_stream| {
                // SAFETY: `base` is the start of a live managed allocation; length 0 attaches
                // all of it; the stream is alive.
                unsafe { driver!(cuStreamAttachMemAsync(raw_stream, base, 0, how.raw())) }
            })
            .then(|| root.record_guarded_use(stream))
    }
}

/// `cuMemPrefetchAsync` of CUDA 12.0 (a `CUdevice` location), looked up by name: cudarc's
/// CUDA 13 bindings declare only the `_v2` form.
fn legacy_prefetch(
    start: CUdeviceptr,
    len: usize,
    device: i32,
    stream: sys::CUstream,
) -> Result<()> {
    type Prefetch =
        unsafe extern "C" fn(CUdeviceptr, usize, sys::CUdevice, sys::CUstream) -> sys::CUresult;
    // SAFETY: the signature of `cuMemPrefetchAsync` in every driver that exports it.
    let Some(prefetch) = (unsafe { load::function::<Prefetch>(c"cuMemPrefetchAsync") }) else {
        return newer::cuMemPrefetchAsync_v2.require();
    };
    // SAFETY: the range lies in a live managed allocation; `device` is a device or the CPU;
    // the stream is alive.
    check("cuMemPrefetchAsync", unsafe {
        prefetch(start, len, device, stream)
    })
}

/// `cuMemAdvise` of CUDA 12.0, looked up by name like [`legacy_prefetch`].
fn legacy_advise(
    start: CUdeviceptr,
    len: usize,
    advice: sys::CUmem_advise,
    device: i32,
) -> Result<()> {
    type Advise =
        unsafe extern "C" fn(CUdeviceptr, usize, sys::CUmem_advise, sys::CUdevice) -> sys::CUresult;
    // SAFETY: the signature of `cuMemAdvise` in every driver that exports it.
    let Some(advise) = (unsafe { load::function::<Advise>(c"cuMemAdvise") }) else {
        return newer::cuMemAdvise_v2.require();
    };
    // SAFETY: the range lies in a live managed allocation; `device` is a device or the CPU.
    check("cuMemAdvise", unsafe { advise(start, len, advice, device) })
}

impl<T: bytemuck::Pod> DeviceBuffer<T> {
    /// `n` elements of managed memory in `context` ([`DevicePtrHandle::alloc_managed`];
    /// contents unspecified).
    pub fn alloc_managed(context: &ContextHandle, n: usize, attach: Attach) -> Result<Self> {
        Self::wrap(DevicePtrHandle::alloc_managed(
            context,
            bytes_of::<T>(n)?,
            attach,
        )?)
    }

    /// [`DevicePtrHandle::prefetch`] of the elements.
    pub fn prefetch(&self, location: PoolLocation, stream: &StreamHandle) -> Result<()> {
        self.as_bytes().prefetch(location, stream)
    }

    /// [`DevicePtrHandle::advise`] for the elements.
    pub fn advise(&self, advice: Advice) -> Result<()> {
        self.as_bytes().advise(advice)
    }

    /// [`DevicePtrHandle::attach`] of the buffer's allocation.
    pub fn attach(&self, stream: &StreamHandle, how: Attach) -> Result<()> {
        self.as_bytes().attach(stream, how)
    }
}
