//! Managed (unified) memory: `cuMemAllocManaged`, prefetches, advice, stream attachment and
//! range attributes.
//!
//! A managed allocation is an allocation of kind `AllocKind::Managed` from the current
//! context's device's synchronous arena (charged to that device like `cuMemAlloc`, freed by
//! `cuMemFree`). Device memory is host memory here, so host access is direct and every device
//! reaches it; there is no page migration. What the driver would migrate is kept as state per
//! allocation, in segments of the address range: read-mostly, preferred location, accessed-by
//! devices and the last prefetch location, as `cuMemRangeGetAttribute(s)` answers them.
//! Prefetches are stream operations that read the range (the checker orders frees after
//! them); attaching is a stream operation that touches nothing.
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::collections::BTreeSet;
use std::ffi::{c_int, c_uint, c_void};

use crate::base::abi::put;
use crate::base::errors::{INVALID_DEVICE, INVALID_VALUE, OUT_OF_MEMORY};
use crate::base::types::*;
use crate::resources::memory::AllocKind;
use crate::{Sim, api::faults, with_sim};

pub const ATTACH_GLOBAL: u32 = 1;
pub const ATTACH_HOST: u32 = 2;
pub const ATTACH_SINGLE: u32 = 4;

/// `CU_DEVICE_CPU`.
pub const DEVICE_CPU: i32 = -1;
/// `CU_DEVICE_INVALID`.
pub const DEVICE_INVALID: i32 = -2;

pub const ADVISE_SET_READ_MOSTLY: u32 = 1;
pub const ADVISE_UNSET_READ_MOSTLY: u32 = 2;
pub const ADVISE_SET_PREFERRED_LOCATION: u32 = 3;
pub const ADVISE_UNSET_PREFERRED_LOCATION: u32 = 4;
pub const ADVISE_SET_ACCESSED_BY: u32 = 5;
pub const ADVISE_UNSET_ACCESSED_BY: u32 = 6;

pub const RANGE_READ_MOSTLY: u32 = 1;
pub const RANGE_PREFERRED_LOCATION: u32 = 2;
pub const RANGE_ACCESSED_BY: u32 = 3;
pub const RANGE_LAST_PREFETCH_LOCATION: u32 = 4;
pub const RANGE_PREFERRED_LOCATION_TYPE: u32 = 5;
pub const RANGE_PREFERRED_LOCATION_ID: u32 = 6;
pub const RANGE_LAST_PREFETCH_LOCATION_TYPE: u32 = 7;
pub const RANGE_LAST_PREFETCH_LOCATION_ID: u32 = 8;

const LOCATION_HOST_NUMA_CURRENT: u32 = 4;

/// Where managed memory is advised to live or was prefetched to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Loc {
    Device(i32),
    Host,
    HostNuma(i32),
}

impl Loc {
    /// The legacy `CUdevice` form (`CU_DEVICE_CPU` for any host location).
    fn legacy(self) -> i32 {
        match self {
            Loc::Device(d) => d,
            Loc::Host | Loc::HostNuma(_) => DEVICE_CPU,
        }
    }

    fn location(self) -> MemLocation {
        match self {
            Loc::Device(id) => MemLocation {
                kind: LOCATION_DEVICE,
                id,
            },
            // The driver reports the host's id as CU_DEVICE_CPU (measured).
            Loc::Host => MemLocation {
                kind: LOCATION_HOST,
                id: DEVICE_CPU,
            },
            Loc::HostNuma(id) => MemLocation {
                kind: LOCATION_HOST_NUMA,
                id,
            },
        }
    }
}

/// The advice and prefetch state of one segment of a managed allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advice {
    pub read_mostly: bool,
    pub preferred: Option<Loc>,
    pub accessed_by: BTreeSet<Loc>,
    pub last_prefetch: Option<Loc>,
}

/// A managed allocation's state: attach flags (and stream, for `CU_MEM_ATTACH_SINGLE`), and
/// its advice as segments `(start offset, end offset, advice)` covering the allocation.
#[derive(Clone, Debug)]
pub struct ManagedState {
    pub size: u64,
    pub attach: u32,
    pub attached_stream: Option<Raw>,
    pub segments: Vec<(u64, u64, Advice)>,
}

impl ManagedState {
    fn new(size: u64, attach: u32) -> ManagedState {
        ManagedState {
            size,
            attach,
            attached_stream: None,
            segments: vec![(0, size, Advice::default())],
        }
    }

    /// Splits the segments at `at` (an offset inside the allocation).
    fn split(&mut self, at: u64) {
        if let Some(i) = self
            .segments
            .iter()
            .position(|(s, e, _)| *s < at && at < *e)
        {
            let (start, end, advice) = self.segments[i].clone();
            self.segments[i] = (start, at, advice.clone());
            self.segments.insert(i + 1, (at, end, advice));
        }
    }

    /// Applies `change` to `[start, end)`, then merges equal neighbours.
    fn update(&mut self, start: u64, end: u64, change: impl Fn(&mut Advice)) {
        self.split(start);
        self.split(end);
        for (s, e, advice) in self.segments.iter_mut() {
            if *s >= start && *e <= end {
                change(advice);
            }
        }
        let mut merged: Vec<(u64, u64, Advice)> = Vec::with_capacity(self.segments.len());
        for segment in self.segments.drain(..) {
            match merged.last_mut() {
                Some(last) if last.2 == segment.2 => last.1 = segment.1,
                _ => merged.push(segment),
            }
        }
        self.segments = merged;
    }

    /// The advice of every segment overlapping `[start, end)`.
    fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &Advice> {
        self.segments
            .iter()
            .filter(move |(s, e, _)| *s < end && start < *e)
            .map(|(_, _, advice)| advice)
    }
}

/// Advice and prefetches apply to whole pages (a 1 KiB advice covers its 4 KiB page on the
/// H200), clamped here to the allocation: `[start, end)` offsets of `[addr, addr + len)` in
/// the allocation at `base` of `size` bytes, rounded out to pages.
const PAGE: u64 = 4096;

fn pages(base: u64, size: u64, addr: u64, len: u64) -> (u64, u64) {
    let start = (addr / PAGE * PAGE).max(base);
    let end = (addr + len)
        .div_ceil(PAGE)
        .saturating_mul(PAGE)
        .min(base + size);
    (start - base, end - base)
}

/// A location argument of the `_v2` functions.
fn location_of(sim: &Sim, location: MemLocation) -> Result<Loc, CuResult> {
    match location.kind {
        LOCATION_DEVICE => {
            sim.device(location.id)?;
            Ok(Loc::Device(location.id))
        }
        LOCATION_HOST => Ok(Loc::Host),
        LOCATION_HOST_NUMA if location.id == 0 => Ok(Loc::HostNuma(0)),
        LOCATION_HOST_NUMA_CURRENT => Ok(Loc::HostNuma(0)),
        _ => Err(INVALID_VALUE),
    }
}

/// A legacy `CUdevice` location argument (`CU_DEVICE_CPU` is the host).
fn device_location(sim: &Sim, device: CuDevice) -> Result<Loc, CuResult> {
    if device == DEVICE_CPU {
        return Ok(Loc::Host);
    }
    sim.device(device).map_err(|_| INVALID_DEVICE)?;
    Ok(Loc::Device(device))
}

impl Sim {
    /// `cuMemAllocManaged`.
    pub fn alloc_managed(&mut self, size: usize, flags: u32) -> Result<u64, CuResult> {
        let context = self.require_current("cuMemAllocManaged")?;
        if size == 0 || (flags != ATTACH_GLOBAL && flags != ATTACH_HOST) {
            return Err(INVALID_VALUE);
        }
        let device = self.contexts[&context].device;
        // Whole pages of its own, so that guarding it against the host's accesses
        // (`host_access`) changes the protection of no other allocation.
        let block = (size as u64)
            .checked_next_multiple_of(PAGE)
            .ok_or(OUT_OF_MEMORY)?;
        let budget = self.budget(Some(device));
        let arena = &mut self.devices[device].sync_arena;
        let (offset, _) = arena.alloc_aligned(block, PAGE, budget)?;
        let addr = arena.base as u64 + offset;
        let operation = self.checker.host_op();
        self.record_alloc(
            addr,
            size as u64,
            block,
            AllocKind::Managed,
            None,
            device,
            Some(context),
            Some(operation),
        );
        self.extra
            .managed
            .insert(addr, ManagedState::new(size as u64, flags));
        self.races.watch_host_visible(addr, block);
        Ok(addr)
    }

    /// The base of the live managed allocation holding all of `[addr, addr + len)`.
    /// Otherwise `CUDA_ERROR_INVALID_VALUE`, reporting an out-of-bounds violation when
    /// `report` (or a use after free, for freed memory).
    fn managed_range(
        &mut self,
        addr: u64,
        len: u64,
        what: &str,
        report: bool,
    ) -> Result<u64, CuResult> {
        if len == 0 {
            return Err(INVALID_VALUE);
        }
        let (call, seq) = faults::current_call();
        let found = self.alloc_at(addr).map(|a| (a.addr, a.size, a.kind));
        let problem = match found {
            Some((base, size, AllocKind::Managed)) => {
                if addr.checked_add(len).is_some_and(|end| end <= base + size) {
                    return Ok(base);
                }
                format!(
                    "{call} (call #{seq}) {what} [{addr:#x}, +{len}) past the end of the {size}-byte managed allocation at {base:#x}"
                )
            }
            Some((base, _, kind)) => format!(
                "{call} (call #{seq}) {what} [{addr:#x}, +{len}) in the {} at {base:#x}, which is not managed memory",
                kind.name()
            ),
            None if self.tomb_at(addr).is_some() => {
                if report {
                    // Reports the use after free.
                    let operation = self.checker.host_op();
                    let _ = self.touch(addr, len, operation, true);
                }
                return Err(INVALID_VALUE);
            }
            None => format!(
                "{call} (call #{seq}) {what} [{addr:#x}, +{len}), which is in no allocation"
            ),
        };
        if report {
            self.checker.violation("out-of-bounds", problem);
        }
        Err(INVALID_VALUE)
    }

    /// `cuMemPrefetchAsync(_v2)`: a stream operation that reads the range.
    fn prefetch(
        &mut self,
        addr: u64,
        len: u64,
        to: Loc,
        stream: Raw,
        what: &str,
    ) -> Result<(), CuResult> {
        let target = self.stream(stream, what)?;
        let base = self.managed_range(addr, len, "prefetches", true)?;
        self.forbid_capture(target)?;
        self.check_legacy_capture(target, false)?;
        let operation = self.enqueue(target);
        self.touch(addr, len, operation, true)?;
        if let Some(state) = self.extra.managed.get_mut(&base) {
            let (start, end) = pages(base, state.size, addr, len);
            state.update(start, end, |a| a.last_prefetch = Some(to));
        }
        Ok(())
    }

    /// `cuMemAdvise(_v2)`.
    fn advise(
        &mut self,
        addr: u64,
        len: u64,
        advice: u32,
        at: Result<Loc, CuResult>,
    ) -> Result<(), CuResult> {
        if !(ADVISE_SET_READ_MOSTLY..=ADVISE_UNSET_ACCESSED_BY).contains(&advice) {
            return Err(INVALID_VALUE);
        }
        let base = self.managed_range(addr, len, "advises", false)?;
        // Read-mostly advice ignores the location.
        let at = match advice {
            ADVISE_SET_READ_MOSTLY | ADVISE_UNSET_READ_MOSTLY => Loc::Host,
            _ => at?,
        };
        let state = self.extra.managed.get_mut(&base).ok_or(INVALID_VALUE)?;
        let (start, end) = pages(base, state.size, addr, len);
        state.update(start, end, |a| match advice {
            ADVISE_SET_READ_MOSTLY => a.read_mostly = true,
            ADVISE_UNSET_READ_MOSTLY => a.read_mostly = false,
            ADVISE_SET_PREFERRED_LOCATION => a.preferred = Some(at),
            ADVISE_UNSET_PREFERRED_LOCATION => a.preferred = None,
            ADVISE_SET_ACCESSED_BY => {
                a.accessed_by.insert(at);
            }
            _ => {
                a.accessed_by.remove(&at);
            }
        });
        Ok(())
    }

    /// The state of the managed allocation holding `[addr, addr + len)`, and the range's
    /// offsets in it.
    fn managed_state(
        &mut self,
        addr: u64,
        len: u64,
    ) -> Result<(&ManagedState, u64, u64), CuResult> {
        let base = self.managed_range(addr, len, "queries", false)?;
        let state = self.extra.managed.get(&base).ok_or(INVALID_VALUE)?;
        let (start, end) = pages(base, state.size, addr, len);
        Ok((state, start, end))
    }
}

/// One range attribute of `[addr, addr + len)`, written to `data` (`size` bytes).
fn range_attribute(
    sim: &mut Sim,
    data: *mut c_void,
    size: usize,
    attribute: u32,
    addr: u64,
    len: u64,
) -> Result<(), CuResult> {
    if data.is_null() {
        return Err(INVALID_VALUE);
    }
    let (state, start, end) = sim.managed_state(addr, len)?;
    let advice: Vec<&Advice> = state.overlapping(start, end).collect();
    // A location is reported when the whole range agrees on it.
    let same = |pick: &dyn Fn(&Advice) -> Option<Loc>| -> Option<Loc> {
        let first = pick(advice[0]);
        advice
            .iter()
            .all(|a| pick(a) == first)
            .then_some(first)
            .flatten()
    };
    let preferred = same(&|a: &Advice| a.preferred);
    let prefetched = same(&|a: &Advice| a.last_prefetch);
    let int = |value: i32| {
        if size != 4 {
            return Err(INVALID_VALUE);
        }
        put(data.cast::<c_int>(), value)
    };
    let kind = |loc: Option<Loc>| loc.map_or(0, |l| l.location().kind as i32);
    let id = |loc: Option<Loc>| loc.map_or(0, |l| l.location().id);
    match attribute {
        RANGE_READ_MOSTLY => int(i32::from(advice.iter().all(|a| a.read_mostly))),
        RANGE_PREFERRED_LOCATION => int(preferred.map_or(DEVICE_INVALID, Loc::legacy)),
        RANGE_LAST_PREFETCH_LOCATION => int(prefetched.map_or(DEVICE_INVALID, Loc::legacy)),
        RANGE_PREFERRED_LOCATION_TYPE => int(kind(preferred)),
        RANGE_PREFERRED_LOCATION_ID => int(id(preferred)),
        RANGE_LAST_PREFETCH_LOCATION_TYPE => int(kind(prefetched)),
        RANGE_LAST_PREFETCH_LOCATION_ID => int(id(prefetched)),
        RANGE_ACCESSED_BY => {
            if size == 0 || !size.is_multiple_of(4) {
                return Err(INVALID_VALUE);
            }
            // The devices set for the entire range, then CU_DEVICE_INVALID.
            let mut common = advice[0].accessed_by.clone();
            for a in &advice[1..] {
                common = common.intersection(&a.accessed_by).copied().collect();
            }
            let list: Vec<i32> = common.into_iter().map(Loc::legacy).collect();
            for i in 0..size / 4 {
                let value = list.get(i).copied().unwrap_or(DEVICE_INVALID);
                // SAFETY: `data` holds `size` bytes by the API's contract; `4 * i < size`.
                put(unsafe { data.cast::<c_int>().add(i) }, value)?;
            }
            Ok(())
        }
        _ => Err(INVALID_VALUE),
    }
}

export_fns! {
    fn cuMemAllocManaged(ptr: *mut CuDevicePtr, size: usize, flags: c_uint) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = with_sim(|sim| sim.alloc_managed(size, flags))?;
        put(ptr, addr)
    }

    fn cuMemPrefetchAsync(ptr: CuDevicePtr, len: usize, device: CuDevice, stream: Raw) {
        with_sim(|sim| {
            let to = device_location(sim, device)?;
            sim.prefetch(ptr, len as u64, to, stream, "cuMemPrefetchAsync")
        })
    }

    fn cuMemPrefetchAsync_v2(ptr: CuDevicePtr, len: usize, location: MemLocation, flags: c_uint, stream: Raw) {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        with_sim(|sim| {
            let to = location_of(sim, location)?;
            sim.prefetch(ptr, len as u64, to, stream, "cuMemPrefetchAsync_v2")
        })
    }

    fn cuMemAdvise(ptr: CuDevicePtr, len: usize, advice: c_uint, device: CuDevice) {
        with_sim(|sim| {
            let at = device_location(sim, device);
            sim.advise(ptr, len as u64, advice, at)
        })
    }

    fn cuMemAdvise_v2(ptr: CuDevicePtr, len: usize, advice: c_uint, location: MemLocation) {
        with_sim(|sim| {
            let at = location_of(sim, location);
            sim.advise(ptr, len as u64, advice, at)
        })
    }

    fn cuStreamAttachMemAsync(stream: Raw, ptr: CuDevicePtr, len: usize, flags: c_uint) {
        if ![ATTACH_GLOBAL, ATTACH_HOST, ATTACH_SINGLE].contains(&flags) {
            return Err(INVALID_VALUE);
        }
        with_sim(|sim| {
            let target = sim.stream(stream, "cuStreamAttachMemAsync")?;
            let (base, size) = match sim.alloc_at(ptr) {
                Some(a) if a.kind == AllocKind::Managed => (a.addr, a.size),
                _ => return Err(INVALID_VALUE),
            };
            // Managed memory is attached whole, from its start: length 0 or its size.
            if ptr != base || (len != 0 && len as u64 != size) {
                return Err(INVALID_VALUE);
            }
            sim.forbid_capture(target)?;
            sim.check_legacy_capture(target, false)?;
            sim.enqueue(target);
            let state = sim.extra.managed.get_mut(&base).ok_or(INVALID_VALUE)?;
            state.attach = flags;
            state.attached_stream = (flags == ATTACH_SINGLE).then_some(stream);
            Ok(())
        })
    }

    fn cuMemRangeGetAttribute(data: *mut c_void, size: usize, attribute: c_uint, ptr: CuDevicePtr, len: usize) {
        with_sim(|sim| range_attribute(sim, data, size, attribute, ptr, len as u64))
    }

    fn cuMemRangeGetAttributes(data: *mut *mut c_void, sizes: *mut usize, attributes: *mut c_uint, count: usize, ptr: CuDevicePtr, len: usize) {
        if count == 0 || data.is_null() || sizes.is_null() || attributes.is_null() {
            return Err(INVALID_VALUE);
        }
        with_sim(|sim| {
            for i in 0..count {
                // SAFETY: the three arrays hold `count` entries by the API's contract.
                let (out, size, attribute) = unsafe { (data.add(i).read(), sizes.add(i).read(), attributes.add(i).read()) };
                range_attribute(sim, out, size, attribute, ptr, len as u64)?;
            }
            Ok(())
        })
    }
}
