//! Virtual memory management: physical allocations (`cuMemCreate`), address reservations
//! (`cuMemAddressReserve`) and mappings of the one into the other (`cuMemMap`).
//!
//! The owner graph: a [`MappingHandle`] keeps its physical allocation and its reservation
//! alive, so the program may drop both first; the range stays valid until the last mapping of
//! it drops. Device pointers into a mapping ([`MappingHandle::device_ptr`], and the slices of
//! a [`GrowableBuffer`]) keep their mappings alive.
//!
//! **Unmapping after the work that uses the range.** `cuMemUnmap` is a host call that does not
//! wait for streams, so every stream use reported through a pointer into the mapping notes its
//! context (`contexts_used.rs`), and the unmap first synchronises every noted context. If one
//! cannot be synchronised, the mapping is leaked (and reported) rather than unmapped under
//! running work.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use cudarc::driver::sys::{self, CUdeviceptr, CUmemGenericAllocationHandle};
use handles_core::ResourceHandle;

use crate::driver::call::{deleter_status, driver, out, out_fd};
use crate::driver::load::{self, ensure_loaded};
use crate::error::{Error, Result};
use crate::exec::disposal::retry_refused_memory;
use crate::exec::stream::StreamHandle;
use crate::memory::pool::{PoolLocation, raw_location};
use crate::order::contexts_used::ContextsUsed;

const POSIX_FD: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
const FABRIC: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC;

/// How a physical allocation can be shared with other processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// Not shareable.
    #[default]
    None,
    /// As a POSIX file descriptor, with processes of this machine.
    PosixFd,
    /// As a FABRIC handle (64 bytes), with processes on machines of one NVLink fabric. Only
    /// where the driver and the system support it; elsewhere creation is an `Err`.
    Fabric,
}

impl Sharing {
    fn handle_type(self) -> sys::CUmemAllocationHandleType {
        match self {
            Sharing::None => sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            Sharing::PosixFd => POSIX_FD,
            Sharing::Fabric => FABRIC,
        }
    }
}

/// A FABRIC handle: 64 bytes that name a physical allocation across the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FabricHandle(pub [u8; 64]);

/// Physical memory made with `cuMemCreate`, mappable into reservations.
///
/// Ownership: [`PhysicalAllocationHandle::create`] and
/// [`PhysicalAllocationHandle::import_posix_fd`] own the handle and release it
/// (`cuMemRelease`) when the last clone drops; the memory itself lives until its last mapping
/// is gone too. Keeps alive: nothing (mappings keep it).
#[derive(ResourceHandle)]
#[handle(raw = CUmemGenericAllocationHandle, accessor = as_raw, delete = release_physical)]
pub struct PhysicalAllocation {
    /// The size in bytes, a multiple of the location's granularity.
    #[handle(copy)]
    pub size: usize,
    /// Where the memory is: a device, or a host NUMA node.
    #[handle(copy)]
    pub location: PoolLocation,
    /// How it can be shared with other processes.
    #[handle(copy)]
    pub sharing: Sharing,
}
// SAFETY: the CUDA driver API lets allocation handles be used and released from any thread.
unsafe impl handles_core::ThreadSafe for PhysicalAllocation {}

fn release_physical(raw: CUmemGenericAllocationHandle, _: &PhysicalAllocation) -> Result<()> {
    // SAFETY: the handle owns `raw` and this deleter runs once; mappings hold their own
    // reference in the driver.
    deleter_status(unsafe { driver!(cuMemRelease(raw)) })
}

/// A reserved range of virtual addresses (`cuMemAddressReserve`).
///
/// Ownership: [`AddressReservationHandle::reserve`] owns the range and frees it
/// (`cuMemAddressFree`) when the last clone drops, which is after its last mapping (mappings
/// keep it). Keeps alive: nothing.
#[derive(ResourceHandle)]
#[handle(raw = CUdeviceptr, accessor = as_cu, delete = free_reservation)]
pub struct AddressReservation {
    /// The size in bytes.
    #[handle(copy)]
    pub size: usize,
}
// SAFETY: the CUDA driver API lets address ranges be used and freed from any thread.
unsafe impl handles_core::ThreadSafe for AddressReservation {}

fn free_reservation(raw: CUdeviceptr, reservation: &AddressReservation) -> Result<()> {
    // SAFETY: the handle owns the range and this deleter runs once, after every mapping of
    // it was unmapped (each mapping keeps the reservation alive).
    deleter_status(unsafe { driver!(cuMemAddressFree(raw, reservation.size)) })
}

/// Part of a physical allocation mapped at an address of a reservation (`cuMemMap`), with
/// read-write access for the devices it was mapped for (`cuMemSetAccess`).
///
/// Ownership: [`MappingHandle::map`] owns the mapping and unmaps it (`cuMemUnmap`) when the
/// last clone drops, after every context its stream uses ran in has finished. Keeps alive:
/// the physical allocation and the reservation.
#[derive(ResourceHandle)]
#[handle(raw = CUdeviceptr, accessor = as_cu, delete = unmap)]
pub struct Mapping {
    /// The physical memory mapped.
    #[owner]
    pub physical: PhysicalAllocationHandle,
    /// The reservation the mapping lies in.
    #[owner]
    pub reservation: AddressReservationHandle,
    /// The mapped size in bytes.
    #[handle(copy)]
    pub size: usize,
    /// The devices granted read-write access.
    pub devices: Vec<usize>,
    /// The contexts that work using the range ran in.
    #[handle(skip)]
    used: ContextsUsed,
}
// SAFETY: the CUDA driver API lets mappings be used and unmapped from any thread.
unsafe impl handles_core::ThreadSafe for Mapping {}

fn unmap(raw: CUdeviceptr, mapping: &Mapping) -> Result<()> {
    // The release may run later (on the disposal thread, once no capture runs): it keeps the
    // physical memory and the reservation until the range is unmapped. If the range cannot be
    // unmapped, or its uses not waited for, it stays mapped, and the reservation must never be
    // freed under it: the release leaks its reference.
    let (size, physical, reservation) = (
        mapping.size,
        mapping.physical.clone(),
        mapping.reservation.clone(),
    );
    mapping
        .used
        .release_after_all("Mapping", raw as isize, move |waited| {
            let unmapped = waited.and_then(|()| {
                // SAFETY: the handle owned the mapping at `raw` of `size` bytes and is gone;
                // this release runs once; every context that used the range has finished that
                // work.
                deleter_status(unsafe { driver!(cuMemUnmap(raw, size)) })
            });
            if unmapped.is_err() {
                std::mem::forget(reservation);
            }
            drop(physical);
            unmapped
        })
}

/// The allocation properties for `location`.
fn properties(location: PoolLocation, sharing: Sharing) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sharing.handle_type(),
        location: raw_location(location),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The granularity that sizes and offsets at `location` must be a multiple of
/// (`cuMemGetAllocationGranularity`, the minimum).
pub fn granularity(location: PoolLocation) -> Result<usize> {
    ensure_loaded()?;
    check_location(location)?;
    let prop = properties(location, Sharing::None);
    out(|value| {
        // SAFETY: `prop` is fully initialised; `value` is a valid out-pointer.
        unsafe {
            driver!(cuMemGetAllocationGranularity(
                value,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
            ))
        }
    })
}

fn check_location(location: PoolLocation) -> Result<()> {
    match location {
        PoolLocation::Device(ordinal) => load::device(ordinal).map(drop),
        PoolLocation::HostNuma(node) if node >= 0 => Ok(()),
        PoolLocation::HostNuma(node) => Err(Error::BadLocation {
            numa_node: Some(node),
        }),
        PoolLocation::Host => Err(Error::BadLocation { numa_node: None }),
    }
}

/// `size` rounded up to a multiple of `granularity`; an error for 0 or on overflow.
pub(crate) fn rounded(size: usize, granularity: usize) -> Result<usize> {
    if size == 0 {
        return Err(Error::ZeroSize {
            what: "a size of at least one byte is needed",
        });
    }
    size.checked_next_multiple_of(granularity.max(1))
        .ok_or(Error::TooLarge {
            count: size,
            element: "u8",
        })
}

impl PhysicalAllocationHandle {
    /// Physical memory of at least `size` bytes at `location` (rounded up to the granularity),
    /// shareable as `sharing` says.
    pub fn create(location: PoolLocation, size: usize, sharing: Sharing) -> Result<Self> {
        let size = rounded(size, granularity(location)?)?;
        let prop = properties(location, sharing);
        // Refused for memory while dropped pools wait for their frees: asked again as they go.
        let raw = retry_refused_memory(|| {
            out(|raw| {
                // SAFETY: `prop` is fully initialised and `size` a multiple of the granularity;
                // `raw` is a valid out-pointer.
                unsafe { driver!(cuMemCreate(raw, size, &prop, 0)) }
            })
        })?;
        let record = PhysicalAllocation {
            size,
            location,
            sharing,
        };
        // SAFETY: a fresh allocation handle owned by nobody else; `release_physical` releases
        // it once.
        Ok(unsafe { PhysicalAllocationHandle::from_raw(raw, record) })
    }

    /// Exports the allocation as a new POSIX file descriptor
    /// (`cuMemExportToShareableHandle`), to send to another process.
    pub fn export_posix_fd(&self) -> Result<OwnedFd> {
        if self.sharing() != Sharing::PosixFd {
            return Err(Error::NotExportable {
                what: "only allocations created with Sharing::PosixFd export a descriptor",
            });
        }
        out_fd(|fd| {
            // SAFETY: the allocation is alive; for POSIX descriptors the driver writes an
            // `int` to `fd`, which points to one.
            unsafe { driver!(cuMemExportToShareableHandle(fd, self.as_raw(), POSIX_FD, 0)) }
        })
    }

    /// Imports an allocation another process exported as `fd`, of `size` bytes at `location`
    /// as the exporter made it (`cuMemImportFromShareableHandle`; the descriptor is not
    /// consumed). A size larger than the real allocation makes mapping it fail.
    pub fn import_posix_fd(
        fd: BorrowedFd<'_>,
        location: PoolLocation,
        size: usize,
    ) -> Result<Self> {
        let size = rounded(size, granularity(location)?)?;
        let raw = out(|raw| {
            // SAFETY: `fd` is an open descriptor the caller lends for the call; the driver
            // reads it as an `int` passed by value in a pointer.
            unsafe {
                driver!(cuMemImportFromShareableHandle(
                    raw,
                    fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                    POSIX_FD
                ))
            }
        })?;
        let record = PhysicalAllocation {
            size,
            location,
            sharing: Sharing::PosixFd,
        };
        // SAFETY: a fresh handle onto the imported memory, owned by nobody else.
        Ok(unsafe { PhysicalAllocationHandle::from_raw(raw, record) })
    }
}

impl PhysicalAllocationHandle {
    /// Exports the allocation as a FABRIC handle (`cuMemExportToShareableHandle`).
    pub fn export_fabric(&self) -> Result<FabricHandle> {
        if self.sharing() != Sharing::Fabric {
            return Err(Error::NotExportable {
                what: "only allocations created with Sharing::Fabric export a FABRIC handle",
            });
        }
        let mut handle = sys::CUmemFabricHandle_st { data: [0; 64] };
        // SAFETY: the allocation is alive; for FABRIC the driver writes a 64-byte handle.
        unsafe {
            driver!(cuMemExportToShareableHandle(
                (&mut handle as *mut sys::CUmemFabricHandle_st).cast(),
                self.as_raw(),
                FABRIC,
                0
            ))
        }?;
        Ok(FabricHandle(handle.data))
    }

    /// Imports an allocation exported as a FABRIC handle, of `size` bytes at `location` as the
    /// exporter made it (`cuMemImportFromShareableHandle`).
    pub fn import_fabric(
        handle: &FabricHandle,
        location: PoolLocation,
        size: usize,
    ) -> Result<Self> {
        let size = rounded(size, granularity(location)?)?;
        let mut data = sys::CUmemFabricHandle_st { data: handle.0 };
        let raw = out(|raw| {
            // SAFETY: `data` is a 64-byte FABRIC handle, read by the call.
            unsafe {
                driver!(cuMemImportFromShareableHandle(
                    raw,
                    (&mut data as *mut sys::CUmemFabricHandle_st).cast(),
                    FABRIC
                ))
            }
        })?;
        let record = PhysicalAllocation {
            size,
            location,
            sharing: Sharing::Fabric,
        };
        // SAFETY: a fresh handle onto the imported memory, owned by nobody else.
        Ok(unsafe { PhysicalAllocationHandle::from_raw(raw, record) })
    }
}

impl AddressReservationHandle {
    /// Reserves at least `size` bytes of virtual addresses (rounded up to `granularity`, e.g.
    /// [`granularity`] of the memory to be mapped there).
    pub fn reserve(size: usize, granularity: usize) -> Result<Self> {
        ensure_loaded()?;
        let size = rounded(size, granularity)?;
        let raw = out(|raw| {
            // SAFETY: `raw` is a valid out-pointer; no fixed address is asked for.
            unsafe { driver!(cuMemAddressReserve(raw, size, 0, 0, 0)) }
        })?;
        // SAFETY: a fresh range owned by nobody else; `free_reservation` frees it once.
        Ok(unsafe { AddressReservationHandle::from_raw(raw, AddressReservation { size }) })
    }
}

impl MappingHandle {
    /// Maps `size` bytes of `physical`, from byte `physical_offset`, at byte `offset` of
    /// `reservation`, and grants read-write access to each device in `devices` (at least
    /// one). The offset in the reservation and the size must be multiples of the physical
    /// allocation's granularity and lie inside both; `physical_offset` must be 0, the only
    /// offset the driver maps from.
    pub fn map(
        reservation: &AddressReservationHandle,
        offset: usize,
        physical: &PhysicalAllocationHandle,
        physical_offset: usize,
        size: usize,
        devices: &[usize],
    ) -> Result<Self> {
        let granularity = granularity(physical.location())?;
        let aligned = |value: usize| value.is_multiple_of(granularity);
        let fits =
            |start: usize, total: usize| start.checked_add(size).is_some_and(|end| end <= total);
        if physical_offset != 0 {
            // The driver maps an allocation only from its start ("currently must be zero").
            return Err(Error::PhysicalOffset {
                offset: physical_offset,
            });
        }
        if size == 0 || !aligned(offset) || !aligned(size) {
            return Err(Error::Misaligned {
                offset,
                size,
                granularity,
            });
        }
        for (start, total) in [
            (offset, reservation.size()),
            (physical_offset, physical.size()),
        ] {
            if !fits(start, total) {
                return Err(Error::OutOfRange {
                    offset: start,
                    len: size,
                    size: total,
                });
            }
        }
        if devices.is_empty() {
            return Err(Error::ZeroSize {
                what: "grant access to at least one device",
            });
        }
        let descriptors = devices
            .iter()
            .map(|&ordinal| {
                load::device(ordinal)?;
                Ok(sys::CUmemAccessDesc {
                    location: raw_location(PoolLocation::Device(ordinal)),
                    flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let address = reservation.as_cu() + offset as CUdeviceptr;
        // SAFETY: the range lies in the reservation, the part in the allocation (checked);
        // the driver refuses a range that is already mapped.
        unsafe {
            driver!(cuMemMap(
                address,
                size,
                physical_offset,
                physical.as_raw(),
                0
            ))
        }?;
        let record = Mapping {
            physical: physical.clone(),
            reservation: reservation.clone(),
            size,
            devices: devices.to_vec(),
            used: ContextsUsed::new(),
        };
        // SAFETY: a fresh mapping owned by nobody else; `unmap` unmaps it once, after the work
        // using it; the record keeps the allocation and the reservation alive.
        let mapping = unsafe { MappingHandle::from_raw(address, record) };
        // SAFETY: the range is mapped; one descriptor per device. A failure drops `mapping`,
        // which unmaps it again.
        unsafe {
            driver!(cuMemSetAccess(
                address,
                size,
                descriptors.as_ptr(),
                descriptors.len()
            ))
        }?;
        Ok(mapping)
    }

    /// Notes the context of work queued on `stream` that uses the range.
    pub(crate) fn record_use(&self, stream: &StreamHandle) -> Result<()> {
        self.record().used.note_stream(stream)
    }
}
