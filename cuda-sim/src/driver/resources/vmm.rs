//! Virtual memory management (`cuMemCreate`, `cuMemAddressReserve`, `cuMemMap`, …): physical
//! allocations, reserved address ranges, and mappings of the one into the other.
//!
//! A physical allocation is a memory file (memfd) of its size, charged to its device's budget.
//! Handles onto it are counted: `cuMemRelease` drops one, and the memory itself lives until
//! its last handle is released *and* its last mapping unmapped, as the driver refcounts it. A
//! reservation is a real inaccessible (`PROT_NONE`) range of the host's address space, so a
//! device pointer in it is a host address, as everywhere in the simulator; `cuMemMap` maps
//! the allocation's file over part of it (`MAP_FIXED | MAP_SHARED`), `cuMemUnmap` makes that
//! part inaccessible again. Addresses of freed reservations are never handed out again (the
//! range stays reserved), so stale pointers keep meaning what they meant.
//!
//! Each mapping is an allocation for the checker (`AllocKind::Mapping`): it records its uses
//! per timeline, so an unmap (a host operation) that is not ordered after them is an
//! `unordered-unmap`, and a later touch of the unmapped range a `use-after-free`. A mapping is
//! not accessible to a device until `cuMemSetAccess` grants that device access, owner or not:
//! a touch by device work (a memset, a copy either way, a kernel) is checked against the
//! access of the device the work runs on, and without it is `no-access`.
//!
//! The descriptor that `cuMemExportToShareableHandle` hands out is a new descriptor of the
//! memory file; the file's name (`cuda-sim-vmm:<pid>:<id>:<size>:<location>:<types>`, readable
//! in `/proc/self/fd`) tells an importer, in this process or another, what it holds.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;

use crate::base::calls;
use crate::base::errors::{
    INVALID_DEVICE, INVALID_VALUE, NOT_SUPPORTED, OPERATING_SYSTEM, OUT_OF_MEMORY,
};
use crate::base::sys;
use crate::base::types::{
    ACCESS_NONE, ACCESS_READ, ACCESS_READWRITE, ALLOCATION_TYPE_PINNED, CuResult,
    GRANULARITY_MINIMUM, GRANULARITY_RECOMMENDED, HANDLE_TYPE_FABRIC, HANDLE_TYPE_NONE,
    HANDLE_TYPE_POSIX_FD, LOCATION_DEVICE, LOCATION_HOST_NUMA, MemAccessDesc, MemAllocationProp,
    MemLocation, Raw,
};
use crate::order::checker::Use;
use crate::resources::memory::AllocKind;
use crate::{Kind, Sim};

/// Minimum and recommended granularity of physical allocations, mappings and reservations
/// (2 MiB, as the driver answers on an H200).
pub const GRANULARITY: u64 = 2 << 20;

/// A physical allocation: the memory behind one or more handles and mappings.
#[derive(Debug)]
pub struct Physical {
    pub fd: i32,
    pub size: u64,
    /// The device charged for it; `None` for host (NUMA) memory.
    pub device: Option<usize>,
    pub location: MemLocation,
    pub handle_types: u32,
    /// Made in another process (imported): not charged to this process's devices.
    pub imported: bool,
    /// Live handles (`cuMemCreate`, imports, `cuMemRetainAllocationHandle`).
    pub handles: u64,
    /// Live mappings.
    pub mappings: u64,
}

/// One `CUmemGenericAllocationHandle`.
#[derive(Clone, Copy, Debug)]
pub struct Handle {
    pub physical: u64,
    pub made_by: (&'static str, u64),
}

/// A reserved virtual address range.
#[derive(Clone, Copy, Debug)]
pub struct Reservation {
    pub size: u64,
    /// The whole host range reserved for it (the aligned range lies inside).
    pub host_base: usize,
    pub host_size: usize,
    pub made_by: (&'static str, u64),
}

/// A mapped range (its allocation record, with the uses, is in `Sim::allocs`).
#[derive(Clone, Debug)]
pub struct Mapping {
    pub size: u64,
    pub physical: u64,
    pub offset: u64,
    /// The device the physical memory lives on; `None` for host memory.
    pub owner: Option<usize>,
    /// Access per device (`cuMemSetAccess`); none at first.
    pub access: Vec<u32>,
}

impl Mapping {
    /// Whether work of `device` may touch the mapping: that device needs access of its own
    /// (`cuMemSetAccess`), whether it owns the memory or not (the driver grants the owner
    /// nothing either). Work with no device (the host's operations) is checked against the
    /// owner's access, or for host memory any device's.
    pub fn accessible_by(&self, device: Option<usize>) -> bool {
        let granted = |d: usize| self.access.get(d).is_some_and(|&a| a != ACCESS_NONE);
        match (device, self.owner) {
            (Some(device), _) => granted(device),
            (None, Some(owner)) => granted(owner),
            (None, None) => self.access.iter().any(|&a| a != ACCESS_NONE),
        }
    }
}

/// The virtual-memory state of the simulator.
#[derive(Debug, Default)]
pub struct Vmm {
    pub physicals: HashMap<u64, Physical>,
    pub handles: HashMap<Raw, Handle>,
    pub reservations: BTreeMap<u64, Reservation>,
    /// Freed reservations, by base: who freed them (for double frees).
    pub freed: HashMap<u64, (&'static str, u64)>,
    pub mappings: BTreeMap<u64, Mapping>,
    next_physical: u64,
}

const NAME_PREFIX: &str = "cuda-sim-vmm:";

/// Parses the name of a simulator VMM memory file: `(pid, id, size, location, types)`.
fn parse_name(fd: i32) -> Option<(u32, u64, u64, MemLocation, u32)> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let text = target.to_str()?;
    let name = text.strip_prefix("/memfd:")?.trim_end_matches(" (deleted)");
    let fields: Vec<&str> = name.strip_prefix(NAME_PREFIX)?.split(':').collect();
    let [pid, id, size, kind, location, types] = fields.as_slice() else {
        return None;
    };
    Some((
        pid.parse().ok()?,
        id.parse().ok()?,
        size.parse().ok()?,
        MemLocation {
            kind: kind.parse().ok()?,
            id: location.parse().ok()?,
        },
        types.parse().ok()?,
    ))
}

impl Sim {
    /// Checks allocation properties as the driver does; returns the device to charge
    /// (`None` for host NUMA memory).
    pub fn check_allocation_prop(
        &self,
        prop: &MemAllocationProp,
    ) -> Result<Option<usize>, CuResult> {
        if prop.alloc_type != ALLOCATION_TYPE_PINNED {
            return Err(INVALID_VALUE);
        }
        if prop.handle_types & HANDLE_TYPE_FABRIC != 0 {
            // No fabric (IMEX) on this machine.
            return Err(NOT_SUPPORTED);
        }
        if prop.handle_types & !HANDLE_TYPE_POSIX_FD != HANDLE_TYPE_NONE {
            // Win32 handles on Linux, or unknown bits.
            return Err(INVALID_VALUE);
        }
        match prop.location.kind {
            LOCATION_DEVICE => {
                let device = self.device(prop.location.id)?;
                Ok(Some(device.ordinal))
            }
            // One host NUMA node, id 0.
            LOCATION_HOST_NUMA if prop.location.id == 0 => Ok(None),
            LOCATION_HOST_NUMA => Err(INVALID_VALUE),
            _ => Err(INVALID_VALUE),
        }
    }

    /// `cuMemGetAllocationGranularity`.
    pub fn allocation_granularity(
        &self,
        prop: &MemAllocationProp,
        option: u32,
    ) -> Result<u64, CuResult> {
        if option != GRANULARITY_MINIMUM && option != GRANULARITY_RECOMMENDED {
            return Err(INVALID_VALUE);
        }
        self.check_allocation_prop(prop)?;
        Ok(GRANULARITY)
    }

    /// Bytes of device `device` held by physical allocations made in this process.
    pub fn vmm_reserved(&self, device: usize) -> u64 {
        self.vmm
            .physicals
            .values()
            .filter(|p| p.device == Some(device) && !p.imported)
            .map(|p| p.size)
            .sum()
    }

    fn new_handle(&mut self, physical: u64) -> Raw {
        let raw = self.new_raw(Kind::MemHandle);
        self.vmm.handles.insert(
            raw,
            Handle {
                physical,
                made_by: calls::current_call(),
            },
        );
        if let Some(p) = self.vmm.physicals.get_mut(&physical) {
            p.handles += 1;
        }
        raw
    }

    /// A live handle's physical allocation, or the error (and violation) for a dead one.
    fn handle(&mut self, raw: Raw, destroying: bool) -> Result<Handle, CuResult> {
        match self.vmm.handles.get(&raw) {
            Some(handle) => Ok(*handle),
            None => Err(self.dead_handle(raw, Kind::MemHandle, destroying)),
        }
    }

    /// Frees a physical allocation that has neither handles nor mappings left.
    fn drop_physical_if_unused(&mut self, id: u64) {
        if self
            .vmm
            .physicals
            .get(&id)
            .is_some_and(|p| p.handles == 0 && p.mappings == 0)
        {
            let physical = self.vmm.physicals.remove(&id).expect("checked");
            sys::close_fd(physical.fd);
        }
    }

    /// `cuMemCreate`.
    pub fn mem_create(
        &mut self,
        size: u64,
        prop: &MemAllocationProp,
        flags: u64,
    ) -> Result<Raw, CuResult> {
        if flags != 0 || size == 0 || !size.is_multiple_of(GRANULARITY) {
            return Err(INVALID_VALUE);
        }
        let device = self.check_allocation_prop(prop)?;
        if size > self.budget(device) {
            return Err(OUT_OF_MEMORY);
        }
        let id = self.vmm.next_physical;
        self.vmm.next_physical += 1;
        let name = format!(
            "{NAME_PREFIX}{}:{id}:{size}:{}:{}:{}",
            std::process::id(),
            prop.location.kind,
            prop.location.id,
            prop.handle_types
        );
        let name = CString::new(name).expect("no NUL in the name");
        let fd = sys::memfd_named(&name, size).ok_or(OUT_OF_MEMORY)?;
        self.vmm.physicals.insert(
            id,
            Physical {
                fd,
                size,
                device,
                location: prop.location,
                handle_types: prop.handle_types,
                imported: false,
                handles: 0,
                mappings: 0,
            },
        );
        Ok(self.new_handle(id))
    }

    /// `cuMemRelease`: drops the handle; the memory stays while it is mapped.
    pub fn mem_release(&mut self, raw: Raw) -> Result<(), CuResult> {
        let handle = self.handle(raw, true)?;
        self.vmm.handles.remove(&raw);
        self.bury(raw, Kind::MemHandle);
        if let Some(p) = self.vmm.physicals.get_mut(&handle.physical) {
            p.handles -= 1;
        }
        self.drop_physical_if_unused(handle.physical);
        Ok(())
    }

    /// `cuMemGetAllocationPropertiesFromHandle`.
    pub fn handle_properties(&mut self, raw: Raw) -> Result<MemAllocationProp, CuResult> {
        let handle = self.handle(raw, false)?;
        let physical = &self.vmm.physicals[&handle.physical];
        Ok(MemAllocationProp {
            alloc_type: ALLOCATION_TYPE_PINNED,
            handle_types: physical.handle_types,
            location: physical.location,
            win32_metadata: std::ptr::null_mut(),
            compression: 0,
            rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        })
    }

    /// `cuMemExportToShareableHandle`: a new descriptor of the allocation's memory file.
    pub fn export_handle(&mut self, raw: Raw, handle_type: u32) -> Result<i32, CuResult> {
        let handle = self.handle(raw, false)?;
        if handle_type == HANDLE_TYPE_FABRIC {
            return Err(NOT_SUPPORTED);
        }
        let physical = &self.vmm.physicals[&handle.physical];
        if handle_type != HANDLE_TYPE_POSIX_FD || physical.handle_types & handle_type == 0 {
            // The driver only exports the handle types requested at creation.
            return Err(INVALID_VALUE);
        }
        sys::dup(physical.fd).ok_or(OPERATING_SYSTEM)
    }

    /// `cuMemImportFromShareableHandle`: a new handle onto the memory behind `fd`; the same
    /// physical allocation when it was made in this process and is still alive.
    pub fn import_handle(&mut self, fd: i32, handle_type: u32) -> Result<Raw, CuResult> {
        if handle_type == HANDLE_TYPE_FABRIC {
            return Err(NOT_SUPPORTED);
        }
        if handle_type != HANDLE_TYPE_POSIX_FD {
            return Err(INVALID_VALUE);
        }
        let (pid, id, size, location, types) = parse_name(fd).ok_or(INVALID_VALUE)?;
        if pid == std::process::id() && self.vmm.physicals.contains_key(&id) {
            return Ok(self.new_handle(id));
        }
        let own = sys::dup(fd).ok_or(OPERATING_SYSTEM)?;
        let device = (location.kind == LOCATION_DEVICE)
            .then_some(location.id as usize)
            .filter(|&d| d < self.devices.len());
        // Imported ids live above every local one, so they never collide.
        let local = self.vmm.next_physical;
        self.vmm.next_physical += 1;
        let key = local | (1 << 63);
        self.vmm.physicals.insert(
            key,
            Physical {
                fd: own,
                size,
                device,
                location,
                handle_types: types,
                imported: true,
                handles: 0,
                mappings: 0,
            },
        );
        Ok(self.new_handle(key))
    }

    /// `cuMemRetainAllocationHandle`: a new handle onto the allocation mapped at `addr`.
    pub fn retain_handle(&mut self, addr: u64) -> Result<Raw, CuResult> {
        let physical = self
            .mapping_at(addr)
            .map(|(_, m)| m.physical)
            .ok_or(INVALID_VALUE)?;
        Ok(self.new_handle(physical))
    }

    /// The mapping containing `addr`.
    pub fn mapping_at(&self, addr: u64) -> Option<(u64, &Mapping)> {
        let (&start, mapping) = self.vmm.mappings.range(..=addr).next_back()?;
        (addr < start + mapping.size).then_some((start, mapping))
    }

    /// The base of the live reservation containing `addr`.
    pub fn reservation_containing(&self, addr: u64) -> Option<u64> {
        let (&start, reservation) = self.vmm.reservations.range(..=addr).next_back()?;
        (addr < start + reservation.size).then_some(start)
    }

    /// `cuMemAddressReserve`. `addr` is a hint, as for the driver.
    pub fn address_reserve(
        &mut self,
        size: u64,
        alignment: u64,
        addr: u64,
        flags: u64,
    ) -> Result<u64, CuResult> {
        if flags != 0 || size == 0 || !size.is_multiple_of(GRANULARITY) {
            return Err(INVALID_VALUE);
        }
        let alignment = if alignment == 0 {
            GRANULARITY
        } else {
            alignment
        };
        if !alignment.is_power_of_two() || !alignment.is_multiple_of(GRANULARITY) {
            return Err(INVALID_VALUE);
        }
        let host_size = size.checked_add(alignment).ok_or(OUT_OF_MEMORY)? as usize;
        let host_base = sys::reserve(host_size, addr as usize).ok_or(OUT_OF_MEMORY)?;
        let base = (host_base as u64).next_multiple_of(alignment);
        self.vmm.freed.remove(&base);
        self.vmm.reservations.insert(
            base,
            Reservation {
                size,
                host_base,
                host_size,
                made_by: calls::current_call(),
            },
        );
        Ok(base)
    }

    /// `cuMemAddressFree`: the whole reservation, which must have no mapping left.
    pub fn address_free(&mut self, ptr: u64, size: u64) -> Result<(), CuResult> {
        let Some(reservation) = self.vmm.reservations.get(&ptr).copied() else {
            if let Some(&(call, seq)) = self.vmm.freed.get(&ptr) {
                self.checker.violation(
                    "double-destroy",
                    format!(
                        "reservation {ptr:#x} freed again; it was freed by {call} (call #{seq})"
                    ),
                );
            }
            return Err(INVALID_VALUE);
        };
        if size != reservation.size {
            return Err(INVALID_VALUE);
        }
        let mapped: Vec<(u64, u64)> = self
            .vmm
            .mappings
            .range(ptr..ptr + size)
            .map(|(&start, m)| (start, m.size))
            .collect();
        if let Some(&(first, first_size)) = mapped.first() {
            let (call, seq) = calls::current_call();
            self.checker.violation(
                "free-while-mapped",
                format!(
                    "{call} (call #{seq}) frees the reservation at {ptr:#x} ({size} bytes) while {} mapping(s) in it are alive, the first [{first:#x}, +{first_size}); unmap them first",
                    mapped.len()
                ),
            );
            return Err(INVALID_VALUE);
        }
        self.vmm.reservations.remove(&ptr);
        // Keep the range reserved (and inaccessible) for good: its addresses stay unique.
        sys::retire(reservation.host_base, reservation.host_size);
        self.vmm.freed.insert(ptr, calls::current_call());
        Ok(())
    }

    /// `cuMemMap`.
    pub fn mem_map(
        &mut self,
        ptr: u64,
        size: u64,
        offset: u64,
        raw: Raw,
        flags: u64,
    ) -> Result<(), CuResult> {
        let handle = self.handle(raw, false)?;
        // The real driver (580) maps only from offset 0 of an allocation ("currently must be
        // zero"), and answers any other offset with CUDA_ERROR_INVALID_VALUE.
        if flags != 0
            || size == 0
            || offset != 0
            || !size.is_multiple_of(GRANULARITY)
            || !ptr.is_multiple_of(GRANULARITY)
        {
            return Err(INVALID_VALUE);
        }
        let end = ptr.checked_add(size).ok_or(INVALID_VALUE)?;
        let base = self.reservation_containing(ptr).ok_or(INVALID_VALUE)?;
        if end > base + self.vmm.reservations[&base].size {
            return Err(INVALID_VALUE);
        }
        let overlaps =
            self.mapping_at(ptr).is_some() || self.vmm.mappings.range(ptr..end).next().is_some();
        if overlaps {
            return Err(INVALID_VALUE);
        }
        let devices = self.devices.len();
        let physical = &self.vmm.physicals[&handle.physical];
        if offset
            .checked_add(size)
            .is_none_or(|last| last > physical.size)
        {
            return Err(INVALID_VALUE);
        }
        if !sys::map_fixed(ptr as usize, size as usize, physical.fd, offset) {
            return Err(OUT_OF_MEMORY);
        }
        let owner = physical.device;
        self.vmm
            .physicals
            .get_mut(&handle.physical)
            .expect("live")
            .mappings += 1;
        self.vmm.mappings.insert(
            ptr,
            Mapping {
                size,
                physical: handle.physical,
                offset,
                owner,
                access: vec![ACCESS_NONE; devices],
            },
        );
        let context = crate::resources::contexts::current();
        self.record_alloc(
            ptr,
            size,
            size,
            AllocKind::Mapping,
            None,
            owner.unwrap_or(0),
            (context != 0).then_some(context),
            None,
        );
        Ok(())
    }

    /// The starts of the mappings that make up exactly `[ptr, ptr + size)`, adjacent to each
    /// other (a range must consist of whole mappings).
    fn whole_mappings(&self, ptr: u64, size: u64) -> Option<Vec<u64>> {
        let end = ptr.checked_add(size)?;
        let mut starts = Vec::new();
        let mut cursor = ptr;
        while cursor < end {
            let mapping = self.vmm.mappings.get(&cursor)?;
            starts.push(cursor);
            cursor += mapping.size;
        }
        (cursor == end && !starts.is_empty()).then_some(starts)
    }

    /// `cuMemUnmap`: a host operation, which must be ordered after every use of the range.
    pub fn mem_unmap(&mut self, ptr: u64, size: u64) -> Result<(), CuResult> {
        let Some(starts) = self.whole_mappings(ptr, size) else {
            if self.mapping_at(ptr).is_none()
                && let Some(tomb) = self.tomb_at(ptr).cloned()
            {
                self.checker.violation(
                    "double-destroy",
                    format!(
                        "[{ptr:#x}, +{size}) unmapped again; it was unmapped or freed by {} (call #{}) on {}",
                        tomb.freed_by.call,
                        tomb.freed_by.seq,
                        self.checker.label(tomb.freed_by.timeline)
                    ),
                );
            }
            return Err(INVALID_VALUE);
        };
        let operation = self.checker.host_op();
        for start in starts {
            self.unmap_one(start, operation);
        }
        Ok(())
    }

    fn unmap_one(&mut self, start: u64, operation: Use) {
        if let Some(alloc) = self.allocs.get(&start).cloned() {
            self.check_release_order(&alloc, operation, "unordered-unmap", "unmaps");
        }
        self.remove_alloc(start, operation);
        let mapping = self.vmm.mappings.remove(&start).expect("whole mapping");
        sys::retire(start as usize, mapping.size as usize);
        if let Some(p) = self.vmm.physicals.get_mut(&mapping.physical) {
            p.mappings -= 1;
        }
        self.drop_physical_if_unused(mapping.physical);
    }

    /// `cuMemSetAccess`: the range must consist of whole mappings.
    pub fn mem_set_access(
        &mut self,
        ptr: u64,
        size: u64,
        descs: &[MemAccessDesc],
    ) -> Result<(), CuResult> {
        if descs.is_empty() {
            return Err(INVALID_VALUE);
        }
        let starts = self.whole_mappings(ptr, size).ok_or(INVALID_VALUE)?;
        let devices = self.devices.len();
        for desc in descs {
            if desc.location.kind != LOCATION_DEVICE {
                return Err(INVALID_VALUE);
            }
            if desc.location.id < 0 || desc.location.id as usize >= devices {
                return Err(INVALID_DEVICE);
            }
            if !matches!(desc.flags, ACCESS_NONE | ACCESS_READ | ACCESS_READWRITE) {
                return Err(INVALID_VALUE);
            }
        }
        for start in starts {
            let mapping = self.vmm.mappings.get_mut(&start).expect("whole mapping");
            for desc in descs {
                mapping.access[desc.location.id as usize] = desc.flags;
            }
        }
        Ok(())
    }

    /// `cuMemGetAccess`.
    pub fn mem_get_access(&mut self, location: MemLocation, ptr: u64) -> Result<u32, CuResult> {
        let devices = self.devices.len();
        let (_, mapping) = self.mapping_at(ptr).ok_or(INVALID_VALUE)?;
        if location.kind != LOCATION_DEVICE {
            return Err(INVALID_VALUE);
        }
        if location.id < 0 || location.id as usize >= devices {
            return Err(INVALID_DEVICE);
        }
        Ok(mapping.access[location.id as usize])
    }

    /// A touch of `[addr, addr + len)` starting in a mapping: the range may continue into
    /// adjacent mappings (contiguous virtual memory), every one of which must be accessible
    /// to the device doing the work (the operation's: its stream's context's, or for a
    /// graph's nodes the graph's). Records the use on each.
    pub fn touch_mapped(&mut self, addr: u64, len: u64, operation: Use) -> Result<bool, CuResult> {
        let (call, seq) = calls::current_call();
        let Some(end) = addr.checked_add(len) else {
            return Err(INVALID_VALUE);
        };
        let device = self.operation_device(operation);
        let mut starts = Vec::new();
        let mut cursor = addr;
        while cursor < end {
            let Some((start, mapping)) = self.mapping_at(cursor) else {
                let message = format!(
                    "{call} (call #{seq}) touches [{addr:#x}, +{len}), which runs past the mapped memory at {cursor:#x}"
                );
                self.checker.violation("out-of-bounds", message);
                return Err(INVALID_VALUE);
            };
            if !mapping.accessible_by(device) {
                let by = match device {
                    Some(device) => format!(" (device {device})"),
                    None => String::new(),
                };
                let of = match mapping.owner {
                    Some(owner) => format!("memory of device {owner}"),
                    None => "host memory".to_string(),
                };
                let whom = match device {
                    Some(device) => format!("to device {device}"),
                    None => "to its device".to_string(),
                };
                let message = format!(
                    "{call} (call #{seq}) on {}{by} touches [{addr:#x}, +{len}): the mapping at {start:#x} ({} bytes, {of}) has no access granted {whom} (cuMemSetAccess)",
                    self.checker.label(operation.timeline),
                    mapping.size
                );
                self.checker.violation("no-access", message);
                return Err(INVALID_VALUE);
            }
            starts.push(start);
            cursor = start + mapping.size;
        }
        for start in starts {
            if let Some(alloc) = self.allocs.get_mut(&start) {
                alloc.uses.insert(operation.timeline, operation);
            }
        }
        Ok(true)
    }
}
