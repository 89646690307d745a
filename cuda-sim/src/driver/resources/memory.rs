//! Memory: arenas (the address ranges behind pools and the synchronous and pinned-host
//! allocators), allocation records, freed-range tombstones, and the checks every memory
//! operation makes (bounds, use after free, ordering of frees).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::Sim;
use crate::base::errors::{INVALID_VALUE, OUT_OF_MEMORY};
use crate::base::sys;
use crate::base::types::{ACCESS_NONE, CuResult, Raw};
use crate::order::checker::{Use, covers};

/// Allocation granularity.
pub const ALIGN: u64 = 512;
/// Bytes at the start of every arena kept for a header (IPC pools describe themselves there).
pub const HEADER: u64 = 4096;
/// How many freed ranges are remembered for use-after-free reports.
const TOMB_LIMIT: usize = 1 << 18;

/// Rounds `size` up to the allocation granularity.
pub fn rounded(size: u64) -> Option<u64> {
    size.checked_add(ALIGN - 1).map(|s| s / ALIGN * ALIGN)
}

/// Page size of the host: trimming gives back only whole pages that hold no live byte.
pub const PAGE: u64 = 4096;

/// The address space each arena reserves: room for fragmentation above the capacity.
pub fn arena_size(capacity: u64) -> u64 {
    (capacity.saturating_mul(4)).clamp(64 << 20, 1 << 40)
}

/// A reserved address range that hands out blocks: bump allocation plus a best-fit list of
/// free extents, which coalesce with their neighbours when freed (an extent that reaches the
/// bump pointer gives its range back to it).
///
/// Accounting follows a real pool: `reserved` is what the arena holds of the device's memory,
/// `used` plus the free bytes not yet trimmed (`free_resident`). A trim lowers the free bytes
/// held to the threshold, and gives the host's pages back only where a page lies wholly
/// inside free space, so that no live byte is ever discarded.
#[derive(Debug)]
pub struct Arena {
    pub base: usize,
    pub size: u64,
    pub fd: Option<i32>,
    bump: u64,
    /// The highest bump pointer since the last physical trim: pages above the current bump
    /// and below `top` may still be committed.
    top: u64,
    /// Free extents by offset → length, coalesced (no two are adjacent).
    free: BTreeMap<u64, u64>,
    /// The same extents by `(length, offset)`, for best fit.
    by_size: BTreeSet<(u64, u64)>,
    /// Offsets freed since the last physical trim (their extents may hold committed pages).
    dirty: Vec<u64>,
    /// Free bytes still counted as reserved (not yet trimmed).
    free_resident: u64,
    pub used: u64,
    pub used_high: u64,
    pub reserved: u64,
    pub reserved_high: u64,
}

impl Arena {
    /// A new arena of `size` bytes, backed by a memory file when `shareable`.
    pub fn new(size: u64, shareable: bool) -> Option<Arena> {
        let fd = if shareable {
            Some(sys::memfd(size)?)
        } else {
            None
        };
        let Some(base) = sys::map(size as usize, fd) else {
            if let Some(fd) = fd {
                sys::close_fd(fd);
            }
            return None;
        };
        Some(Arena::over(base, size, fd, HEADER))
    }

    /// An arena over an existing mapping of `fd`.
    pub fn new_mapped(base: usize, size: u64, fd: i32) -> Arena {
        Arena::over(base, size, Some(fd), size)
    }

    fn over(base: usize, size: u64, fd: Option<i32>, bump: u64) -> Arena {
        Arena {
            base,
            size,
            fd,
            bump,
            top: bump,
            free: BTreeMap::new(),
            by_size: BTreeSet::new(),
            dirty: Vec::new(),
            free_resident: 0,
            used: 0,
            used_high: 0,
            reserved: 0,
            reserved_high: 0,
        }
    }

    /// Takes a block of `size` (rounded) bytes; returns its offset and how many bytes were
    /// newly reserved from the device. `budget` is what the device can still reserve.
    pub fn alloc(&mut self, size: u64, budget: u64) -> Result<(u64, u64), CuResult> {
        self.alloc_aligned(size, ALIGN, budget)
    }

    /// As [`Arena::alloc`], with the block's offset a multiple of `align` (a power of two, at
    /// least [`ALIGN`]; the arena's base is page-aligned, so `PAGE` gives a block of pages of
    /// its own when `size` is a multiple of it). Bytes skipped to align stay free extents.
    pub fn alloc_aligned(
        &mut self,
        size: u64,
        align: u64,
        budget: u64,
    ) -> Result<(u64, u64), CuResult> {
        let grew = size.saturating_sub(self.free_resident);
        if grew > budget {
            return Err(OUT_OF_MEMORY);
        }
        let fits = |&(length, offset): &(u64, u64)| {
            offset
                .checked_next_multiple_of(align)
                .and_then(|at| at.checked_add(size))
                .is_some_and(|end| end <= offset + length)
        };
        let offset = match self.by_size.range((size, 0)..).copied().find(fits) {
            Some((length, offset)) => {
                self.remove_extent(offset, length);
                let at = offset.next_multiple_of(align);
                if at > offset {
                    self.insert_extent(offset, at - offset);
                }
                if offset + length > at + size {
                    self.insert_extent(at + size, offset + length - at - size);
                }
                at
            }
            None => {
                let Some(at) = self
                    .bump
                    .checked_next_multiple_of(align)
                    .filter(|at| at.checked_add(size).is_some_and(|end| end <= self.size))
                else {
                    return Err(OUT_OF_MEMORY);
                };
                if at > self.bump {
                    // The skipped bytes become a free extent (held by no block), merged with
                    // a free extent ending at the old bump pointer.
                    let (mut start, mut length) = (self.bump, at - self.bump);
                    if let Some((&before, &before_len)) = self.free.range(..start).next_back()
                        && before + before_len == start
                    {
                        self.remove_extent(before, before_len);
                        start = before;
                        length += before_len;
                    }
                    self.insert_extent(start, length);
                }
                self.bump = at + size;
                self.top = self.top.max(self.bump);
                at
            }
        };
        self.free_resident -= size - grew;
        self.used += size;
        self.used_high = self.used_high.max(self.used);
        self.reserved += grew;
        self.reserved_high = self.reserved_high.max(self.reserved);
        Ok((offset, grew))
    }

    fn insert_extent(&mut self, offset: u64, length: u64) {
        self.free.insert(offset, length);
        self.by_size.insert((length, offset));
    }

    fn remove_extent(&mut self, offset: u64, length: u64) {
        self.free.remove(&offset);
        self.by_size.remove(&(length, offset));
    }

    /// Returns a block; it stays reserved until trimmed. It merges with free neighbours, and
    /// a free extent that ends at the bump pointer moves the pointer down instead.
    pub fn free(&mut self, offset: u64, size: u64) {
        self.used -= size;
        self.free_resident += size;
        self.dirty.push(offset);
        let (mut start, mut length) = (offset, size);
        if let Some((&before, &before_len)) = self.free.range(..offset).next_back()
            && before + before_len == offset
        {
            self.remove_extent(before, before_len);
            start = before;
            length += before_len;
        }
        if let Some(&after_len) = self.free.get(&(offset + size)) {
            self.remove_extent(offset + size, after_len);
            length += after_len;
        }
        if start + length == self.bump {
            self.bump = start;
        } else {
            self.insert_extent(start, length);
        }
    }

    /// Lowers the free bytes held to what keeps at most `keep` bytes reserved; returns the
    /// bytes released. When no free byte stays reserved, the pages that lie wholly in free
    /// space go back to the system.
    pub fn trim(&mut self, keep: u64) -> u64 {
        let released = self.free_resident.min(self.reserved.saturating_sub(keep));
        self.free_resident -= released;
        self.reserved -= released;
        if self.free_resident == 0 {
            self.discard_free_pages();
        }
        released
    }

    /// Discards the whole pages of every extent freed since the last discard, and of the
    /// range above the bump pointer that was in use before.
    fn discard_free_pages(&mut self) {
        let mut done = BTreeSet::new();
        for offset in std::mem::take(&mut self.dirty) {
            let Some((&start, &length)) = self.free.range(..=offset).next_back() else {
                continue;
            };
            if offset < start + length && done.insert(start) {
                self.discard(start, start + length);
            }
        }
        if self.top > self.bump {
            self.discard(self.bump, self.top);
            self.top = self.bump;
        }
    }

    /// Discards the pages wholly inside `[start, end)` (offsets).
    fn discard(&self, start: u64, end: u64) {
        let first = (self.base as u64 + start).next_multiple_of(PAGE);
        let last = (self.base as u64 + end) / PAGE * PAGE;
        if last > first {
            let offset = first - self.base as u64;
            sys::discard(
                first as usize,
                (last - first) as usize,
                self.fd.map(|fd| (fd, offset)),
            );
        }
    }

    /// Gives the whole range back; its addresses are never reused.
    pub fn destroy(&mut self) {
        sys::retire(self.base, self.size as usize);
        if let Some(fd) = self.fd.take() {
            sys::close_fd(fd);
        }
    }
}

/// How an allocation was made, which fixes how it must be freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// `cuMemAllocAsync` / `cuMemAllocFromPoolAsync`: from a pool, freed by `cuMemFreeAsync`.
    Pool,
    /// `cuMemAlloc`: freed by `cuMemFree`.
    Sync,
    /// `cuMemHostAlloc`: freed by `cuMemFreeHost`.
    Host,
    /// `cuMemPoolImportPointer`: freed by `cuMemFreeAsync`; unmaps the import.
    Import,
    /// A module variable (`.global`/`.const`) of a loaded library: freed when the library is
    /// unloaded, never by a free call.
    Global,
    /// `cuMemMap`: a range of a physical allocation mapped into a reservation, released by
    /// `cuMemUnmap` (see `vmm`).
    Mapping,
    /// `cuMemAllocManaged`: from the device's synchronous arena, freed by `cuMemFree`.
    Managed,
    /// Graph-owned memory, live from its allocation node to its free node in a launch
    /// (`graph_memory`); never freed by a free call.
    Graph,
}

impl AllocKind {
    pub fn name(self) -> &'static str {
        match self {
            AllocKind::Pool => "allocation",
            AllocKind::Sync => "sync_allocation",
            AllocKind::Host => "host_allocation",
            AllocKind::Import => "import",
            AllocKind::Mapping => "mapping",
            AllocKind::Global => "module_variable",
            AllocKind::Managed => "managed_allocation",
            AllocKind::Graph => "graph_allocation",
        }
    }
}

/// A live allocation.
#[derive(Clone, Debug)]
pub struct Alloc {
    pub addr: u64,
    pub size: u64,
    pub block: u64,
    pub kind: AllocKind,
    /// The pool (or, for synchronous and host memory, none: the device's arenas).
    pub pool: Option<Raw>,
    pub device: usize,
    pub context: Option<Raw>,
    /// The last use on each timeline.
    pub uses: HashMap<usize, Use>,
    pub made_by: (&'static str, u64),
}

/// A freed range: who freed it.
#[derive(Clone, Debug)]
pub struct Tomb {
    pub size: u64,
    pub freed_by: Use,
}

impl Sim {
    /// The live allocation containing `addr`.
    pub fn alloc_at(&self, addr: u64) -> Option<&Alloc> {
        let (_, alloc) = self.allocs.range(..=addr).next_back()?;
        (addr < alloc.addr + alloc.size.max(1)).then_some(alloc)
    }

    pub fn tomb_at(&self, addr: u64) -> Option<&Tomb> {
        let (start, tomb) = self.tombs.range(..=addr).next_back()?;
        (addr < start + tomb.size.max(1)).then_some(tomb)
    }

    /// Registers a new allocation (forgetting any tombstone at its address).
    pub fn insert_alloc(&mut self, alloc: Alloc) {
        self.tombs.remove(&alloc.addr);
        self.races.forget(alloc.addr);
        self.initcheck
            .allocated(alloc.addr, alloc.size, alloc.kind, alloc.made_by);
        self.allocs.insert(alloc.addr, alloc);
    }

    /// Removes a live allocation and leaves a tombstone.
    pub fn remove_alloc(&mut self, addr: u64, freed_by: Use) -> Option<Alloc> {
        let alloc = self.allocs.remove(&addr)?;
        self.races.forget(addr);
        self.initcheck.freed(addr);
        self.tombs.insert(
            addr,
            Tomb {
                size: alloc.size,
                freed_by,
            },
        );
        self.tomb_order.push_back((addr, freed_by.seq));
        while self.tomb_order.len() > TOMB_LIMIT {
            if let Some((old, seq)) = self.tomb_order.pop_front()
                && self.tombs.get(&old).is_some_and(|t| t.freed_by.seq == seq)
            {
                self.tombs.remove(&old);
            }
        }
        Some(alloc)
    }

    /// Checks that `[addr, addr + len)` lies in one live allocation and records the use.
    /// `device_only`: the range must be device (or pinned) memory; otherwise an address
    /// outside every allocation is taken as pageable host memory. Returns whether the range
    /// is known memory.
    pub fn touch(
        &mut self,
        addr: u64,
        len: u64,
        operation: Use,
        device_only: bool,
    ) -> Result<bool, CuResult> {
        if len == 0 {
            return Ok(false);
        }
        let (call, seq) = crate::base::calls::current_call();
        if let Some(alloc) = self.alloc_at(addr) {
            if alloc.kind == AllocKind::Mapping {
                // Virtual memory: the range may span adjacent mappings, and needs access.
                return self.touch_mapped(addr, len, operation);
            }
            let end = alloc.addr + alloc.size;
            if addr.checked_add(len).is_none_or(|last| last > end) {
                let message = format!(
                    "{call} (call #{seq}) touches [{addr:#x}, +{len}) past the end of the {}-byte allocation at {:#x} (made by {} call #{})",
                    alloc.size, alloc.addr, alloc.made_by.0, alloc.made_by.1
                );
                self.checker.violation("out-of-bounds", message);
                return Err(INVALID_VALUE);
            }
            let start = alloc.addr;
            self.check_pool_access(start, addr, len, operation)?;
            if let Some(alloc) = self.allocs.get_mut(&start) {
                alloc.uses.insert(operation.timeline, operation);
            }
            return Ok(true);
        }
        if let Some(tomb) = self.tomb_at(addr) {
            let message = format!(
                "{call} (call #{seq}) on {} uses [{addr:#x}, +{len}), freed by {} (call #{}) on {}",
                self.checker.label(operation.timeline),
                tomb.freed_by.call,
                tomb.freed_by.seq,
                self.checker.label(tomb.freed_by.timeline)
            );
            self.checker.violation("use-after-free", message);
            return Err(INVALID_VALUE);
        }
        if let Some(base) = self.reservation_containing(addr) {
            // Reserved address space without a mapping is inaccessible: it must not be taken
            // for pageable host memory (touching it would fault the process).
            let message = format!(
                "{call} (call #{seq}) uses [{addr:#x}, +{len}), in the reservation at {base:#x} but not mapped"
            );
            self.checker.violation("out-of-bounds", message);
            return Err(INVALID_VALUE);
        }
        if device_only {
            let message =
                format!("{call} (call #{seq}) uses [{addr:#x}, +{len}), which is in no allocation");
            self.checker.violation("out-of-bounds", message);
            return Err(INVALID_VALUE);
        }
        Ok(false)
    }

    /// The device whose work `timeline` is (a stream's, or a context's default stream);
    /// `None` for the host.
    pub fn timeline_device(&self, timeline: usize) -> Option<usize> {
        self.contexts
            .values()
            .find(|c| c.streams.contains(&timeline))
            .map(|c| c.device)
    }

    /// The device an operation runs on: its context's (for a graph's nodes, the graph's
    /// context's, whatever the launch stream's); `None` for the host.
    pub fn operation_device(&self, operation: Use) -> Option<usize> {
        operation
            .device
            .or_else(|| self.timeline_device(operation.timeline))
    }

    /// A touch by device work of pool memory owned by another device needs that device's
    /// access to the pool (`cuMemPoolSetAccess`); without it the touch is **no access**. Copies
    /// and memsets of a host pool's memory pass while the device was never granted access
    /// (driver 580 copied an imported host pool's memory with no access set), but not once its
    /// access was revoked (`PROT_NONE`): the program said the device must not touch it, and
    /// may read or write it from the host meanwhile. Kernels need access either way
    /// (`interp.rs`: measured, they fault).
    fn check_pool_access(
        &mut self,
        start: u64,
        addr: u64,
        len: u64,
        operation: Use,
    ) -> Result<(), CuResult> {
        let alloc = &self.allocs[&start];
        let Some(pool) = alloc.pool.and_then(|raw| self.pools.get(&raw)) else {
            return Ok(());
        };
        let Some(device) = self.operation_device(operation) else {
            return Ok(());
        };
        let whose = match pool.device {
            Some(owner)
                if device == owner
                    || pool.access.get(device).is_some_and(|&a| a != ACCESS_NONE) =>
            {
                return Ok(());
            }
            Some(owner) => format!(
                "a pool of device {owner} that device {device} has no access to (cuMemPoolSetAccess)"
            ),
            None if pool.revoked.get(device).is_some_and(|&revoked| revoked) => format!(
                "a host pool whose access by device {device} was revoked (cuMemPoolSetAccess, PROT_NONE)"
            ),
            None => return Ok(()),
        };
        let (call, seq) = crate::base::calls::current_call();
        let message = format!(
            "{call} (call #{seq}) on {} (device {device}) touches [{addr:#x}, +{len}) of {whose}",
            self.checker.label(operation.timeline)
        );
        self.checker.violation("no-access", message);
        Err(INVALID_VALUE)
    }

    /// Checks that a free at `free` (whose clock is that of its timeline) is ordered after
    /// every earlier use of the allocation on other timelines.
    pub fn check_free_order(&mut self, alloc: &Alloc, free: Use) {
        self.check_release_order(alloc, free, "unordered-free", "frees");
    }

    /// Checks that `release` (a free, or an unmap: `kind` and `verb` say which) is ordered
    /// after every earlier use of the allocation on other timelines.
    pub fn check_release_order(
        &mut self,
        alloc: &Alloc,
        free: Use,
        kind: &'static str,
        verb: &str,
    ) {
        let clock = self.checker.clock(free.timeline).clone();
        let mut races: Vec<Use> = alloc
            .uses
            .values()
            .filter(|u| u.timeline != free.timeline && !covers(&clock, u.timeline, u.epoch))
            .copied()
            .collect();
        races.sort_by_key(|u| u.seq);
        for race in races {
            let message = format!(
                "{} (call #{}) on {} {verb} {:#x} ({} bytes) while {} (call #{}) on {} may still use it: no synchronisation orders them",
                free.call,
                free.seq,
                self.checker.label(free.timeline),
                alloc.addr,
                alloc.size,
                race.call,
                race.seq,
                self.checker.label(race.timeline)
            );
            self.checker.violation(kind, message);
        }
    }

    /// Reserves `size` bytes from `arena` of device `device` (or host memory when `None`),
    /// honouring the device's capacity.
    pub fn budget(&self, device: Option<usize>) -> u64 {
        match device {
            Some(d) => self.devices[d]
                .capacity
                .saturating_sub(self.device_reserved(d)),
            None => self.config.memory,
        }
    }
}
