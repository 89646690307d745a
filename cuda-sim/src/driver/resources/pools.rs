//! Memory pools and the allocations made from them: creation from properties, the device's
//! default and current pools, attributes, per-device access, trimming, and the allocation
//! and free calls (stream-ordered, synchronous and pinned host).

use std::collections::HashMap;

use crate::base::calls;
use crate::base::errors::{INVALID_DEVICE, INVALID_VALUE, NOT_SUPPORTED, OUT_OF_MEMORY};
use crate::base::types::{
    ACCESS_NONE, ACCESS_READWRITE, CuResult, HANDLE_TYPE_NONE, HANDLE_TYPE_POSIX_FD,
    LOCATION_DEVICE, LOCATION_HOST, LOCATION_HOST_NUMA, MemAccessDesc, MemLocation, MemPoolProps,
    Raw,
};
use crate::order::checker::Use;
use crate::resources::memory::{Alloc, AllocKind, Arena, PAGE, arena_size, rounded};
use crate::resources::streams::Target;
use crate::{Kind, Sim};

/// A memory pool (created, a device's default pool, or imported from another process).
#[derive(Debug)]
pub struct Pool {
    /// The owning device; `None` for host pools.
    pub device: Option<usize>,
    pub location: MemLocation,
    pub ipc: bool,
    pub arena: Arena,
    /// Access per device.
    pub access: Vec<u32>,
    /// Per device: its access was revoked (`PROT_NONE`) and not granted again since. Device
    /// touches of a host pool are checked against this (`Sim::check_pool_access`).
    pub revoked: Vec<bool>,
    pub release_threshold: u64,
    pub reuse: [i32; 3],
    pub max_size: u64,
    /// `cuMemPoolExportToShareableHandle` was called once (driver 580 needs it before
    /// `cuMemPoolExportPointer`).
    pub exported: bool,
    pub imported: bool,
    pub default: bool,
    /// Destroyed while allocations were live: released with the last of them.
    pub zombie: bool,
    /// Identity shared with importers.
    pub uid: u64,
    /// Live imports by offset (imported pools).
    pub imports: HashMap<u64, u64>,
    /// Bytes whose `cuMemFreeAsync` was called but has not run: driver 580 no longer counts
    /// them as used (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT` drops at the call, measured on an
    /// H100: `probes/pool_destroy_pending.h100.txt`), though the memory is reused only after
    /// the free ran.
    pub queued_free: u64,
}

/// The header an IPC pool writes at the start of its memory file.
pub const POOL_MAGIC: &[u8; 8] = b"CUSIMPOL";

impl Pool {
    pub fn new_device_default(device: usize, devices: usize, size: u64) -> Option<Pool> {
        let location = MemLocation {
            kind: LOCATION_DEVICE,
            id: device as i32,
        };
        let mut pool = Pool::new(location, Some(device), devices, false, size, 0)?;
        pool.default = true;
        Some(pool)
    }

    fn new(
        location: MemLocation,
        device: Option<usize>,
        devices: usize,
        ipc: bool,
        size: u64,
        uid: u64,
    ) -> Option<Pool> {
        let arena = Arena::new(size, ipc)?;
        let mut access = vec![ACCESS_NONE; devices];
        if let Some(d) = device {
            access[d] = ACCESS_READWRITE;
        }
        if ipc {
            let mut header = [0u8; 32];
            header[..8].copy_from_slice(POOL_MAGIC);
            header[8..16].copy_from_slice(&uid.to_le_bytes());
            header[16..24].copy_from_slice(&size.to_le_bytes());
            header[24..28].copy_from_slice(&location.kind.to_le_bytes());
            header[28..32].copy_from_slice(&location.id.to_le_bytes());
            // SAFETY: the arena's first page is mapped, writable and reserved for the header.
            unsafe {
                std::ptr::copy_nonoverlapping(header.as_ptr(), arena.base as *mut u8, 32);
            }
        }
        Some(Pool {
            device,
            location,
            ipc,
            arena,
            access,
            revoked: vec![false; devices],
            release_threshold: 0,
            reuse: [1, 1, 1],
            max_size: 0,
            exported: false,
            imported: false,
            default: false,
            zombie: false,
            uid,
            imports: HashMap::new(),
            queued_free: 0,
        })
    }
}

impl Sim {
    /// A live pool, or the error (and violation) for a destroyed one.
    pub fn pool(&mut self, raw: Raw) -> Result<&mut Pool, CuResult> {
        if self.pools.get(&raw).is_none_or(|pool| pool.zombie) {
            return Err(self.dead_handle(raw, Kind::Pool, false));
        }
        Ok(self.pools.get_mut(&raw).expect("checked"))
    }

    pub fn create_pool(&mut self, props: &MemPoolProps) -> Result<Raw, CuResult> {
        if props.alloc_type != 1 {
            return Err(INVALID_VALUE);
        }
        let ipc = match props.handle_types {
            HANDLE_TYPE_NONE => false,
            HANDLE_TYPE_POSIX_FD => true,
            _ => return Err(NOT_SUPPORTED),
        };
        // Host pools came with CUDA 12.6, host NUMA pools with 12.2: an older driver rejects
        // the location type.
        let version = crate::base::abi::simulated_version();
        let too_old = match props.location.kind {
            LOCATION_HOST => version < 12060,
            LOCATION_HOST_NUMA => version < 12020,
            _ => false,
        };
        if too_old {
            return Err(INVALID_VALUE);
        }
        let device = match props.location.kind {
            LOCATION_DEVICE => Some(self.device(props.location.id)?.ordinal),
            LOCATION_HOST if !ipc => None,
            LOCATION_HOST_NUMA if props.location.id == 0 => None,
            _ => return Err(INVALID_VALUE),
        };
        let raw = self.new_raw(Kind::Pool);
        let uid = (u64::from(std::process::id()) << 32) | raw as u64 >> 4 & 0xffff_ffff;
        let size = arena_size(self.config.memory);
        let mut pool = Pool::new(props.location, device, self.devices.len(), ipc, size, uid)
            .ok_or(OUT_OF_MEMORY)?;
        pool.max_size = props.max_size as u64;
        if let Some(d) = device
            && let Some(mut inherited) = self.devices[d].inherited_access.take()
        {
            // nvbug 5698116, made deterministic: the next pool on the device inherits the
            // peer access of the last pool destroyed with access still granted.
            inherited[d] = ACCESS_READWRITE;
            pool.access = inherited;
        }
        self.pools.insert(raw, pool);
        Ok(raw)
    }

    pub fn destroy_pool(&mut self, raw: Raw) -> Result<(), CuResult> {
        if self.pools.get(&raw).is_none_or(|pool| pool.zombie) {
            return Err(self.dead_handle(raw, Kind::Pool, true));
        }
        let pool = &self.pools[&raw];
        if pool.default {
            return Err(INVALID_VALUE);
        }
        if let Some(d) = pool.device {
            if pool
                .access
                .iter()
                .enumerate()
                .any(|(i, &a)| i != d && a != ACCESS_NONE)
            {
                self.devices[d].inherited_access = Some(pool.access.clone());
            }
            if self.devices[d].current_pool == raw {
                self.devices[d].current_pool = self.devices[d].default_pool;
            }
        }
        self.bury(raw, Kind::Pool);
        let live = self.allocs.values().any(|a| a.pool == Some(raw));
        if live {
            self.pools.get_mut(&raw).expect("checked").zombie = true;
        } else {
            let mut pool = self.pools.remove(&raw).expect("checked");
            pool.arena.destroy();
        }
        Ok(())
    }

    /// Gives free pool memory above each pool's release threshold back (at synchronisation).
    pub fn release_pool_memory(&mut self) {
        for pool in self.pools.values_mut().filter(|p| !p.imported) {
            pool.arena.trim(pool.release_threshold);
        }
    }

    pub fn set_access(&mut self, raw: Raw, descs: &[MemAccessDesc]) -> Result<(), CuResult> {
        let devices = self.devices.len();
        let pool = self.pool(raw)?;
        for desc in descs {
            if desc.location.kind != LOCATION_DEVICE
                || desc.location.id < 0
                || desc.location.id as usize >= devices
            {
                return Err(INVALID_DEVICE);
            }
            // The real driver refuses to revoke the owner's access, and fails the whole call.
            if desc.flags == ACCESS_NONE && pool.device == Some(desc.location.id as usize) {
                return Err(INVALID_DEVICE);
            }
            if !matches!(desc.flags, 0 | 1 | 3) {
                return Err(INVALID_VALUE);
            }
        }
        for desc in descs {
            pool.access[desc.location.id as usize] = desc.flags;
            pool.revoked[desc.location.id as usize] = desc.flags == ACCESS_NONE;
        }
        Ok(())
    }

    pub fn get_access(&mut self, raw: Raw, location: MemLocation) -> Result<u32, CuResult> {
        let devices = self.devices.len();
        let pool = self.pool(raw)?;
        match location.kind {
            LOCATION_DEVICE if location.id >= 0 && (location.id as usize) < devices => {
                Ok(pool.access[location.id as usize])
            }
            LOCATION_HOST | LOCATION_HOST_NUMA => Ok(ACCESS_READWRITE),
            _ => Err(INVALID_DEVICE),
        }
    }

    /// Allocates from `pool` (the device's current pool when `None`), ordered on `target`.
    pub fn alloc_async(
        &mut self,
        pool: Option<Raw>,
        size: usize,
        target: Target,
    ) -> Result<u64, CuResult> {
        let raw = pool.unwrap_or(self.devices[target.device].current_pool);
        let (device, imported, max_size, used) = {
            let pool = self.pool(raw)?;
            (pool.device, pool.imported, pool.max_size, pool.arena.used)
        };
        if imported {
            return Err(INVALID_VALUE);
        }
        if size == 0 {
            // Measured on the H200 (driver 580): a zero-byte stream-ordered allocation
            // (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`) succeeds with pointer 0 (unlike
            // `cuMemAlloc(0)`, which is `CUDA_ERROR_INVALID_VALUE`). Nothing is recorded, so
            // no check sees 0 as an allocation; `cuMemFreeAsync(0)` succeeds (`free_async`).
            return Ok(0);
        }
        let mut block = rounded(size as u64).ok_or(OUT_OF_MEMORY)?;
        // A host pool's allocation (no device) takes whole pages of its own, as pinned memory
        // from `cuMemHostAlloc` does: the host's accesses through the pointer are watched.
        let host = device.is_none();
        if host {
            block = block.checked_next_multiple_of(PAGE).ok_or(OUT_OF_MEMORY)?;
        }
        if max_size != 0 && used.saturating_add(block) > max_size {
            return Err(OUT_OF_MEMORY);
        }
        let budget = self.budget(device);
        let pool = self.pools.get_mut(&raw).expect("checked");
        let (offset, _) = if host {
            pool.arena.alloc_aligned(block, PAGE, budget)?
        } else {
            pool.arena.alloc(block, budget)?
        };
        let addr = (pool.arena.base as u64) + offset;
        let operation = self.enqueue(target);
        self.record_alloc(
            addr,
            size as u64,
            block,
            AllocKind::Pool,
            Some(raw),
            device.unwrap_or(target.device),
            Some(target.context),
            Some(operation),
        );
        if host {
            self.races.watch_host_visible(addr, block);
        }
        Ok(addr)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn record_alloc(
        &mut self,
        addr: u64,
        size: u64,
        block: u64,
        kind: AllocKind,
        pool: Option<Raw>,
        device: usize,
        context: Option<Raw>,
        operation: Option<Use>,
    ) {
        let uses = operation.map(|u| (u.timeline, u)).into_iter().collect();
        self.insert_alloc(Alloc {
            addr,
            size,
            block,
            kind,
            pool,
            device,
            context,
            uses,
            made_by: calls::current_call(),
        });
    }

    /// The live allocation starting at `addr`, or the error for a bad free (reporting a
    /// double free as `double-destroy`).
    pub fn allocation_to_free(
        &mut self,
        addr: u64,
        kinds: &[AllocKind],
    ) -> Result<Alloc, CuResult> {
        if let Some(alloc) = self.allocs.get(&addr)
            && kinds.contains(&alloc.kind)
        {
            return Ok(alloc.clone());
        }
        if let Some(tomb) = self.tombs.get(&addr).cloned()
            && !self.allocs.contains_key(&addr)
        {
            self.checker.violation(
                "double-destroy",
                format!(
                    "{addr:#x} freed again; it was freed by {} (call #{}) on {}",
                    tomb.freed_by.call,
                    tomb.freed_by.seq,
                    self.checker.label(tomb.freed_by.timeline)
                ),
            );
        }
        Err(INVALID_VALUE)
    }

    /// Returns a freed allocation's block to where it came from.
    pub fn release_block(&mut self, alloc: &Alloc) {
        match alloc.kind {
            AllocKind::Pool => {
                let raw = alloc.pool.expect("pool allocations name their pool");
                let Some(pool) = self.pools.get_mut(&raw) else {
                    return;
                };
                pool.arena
                    .free(alloc.addr - pool.arena.base as u64, alloc.block);
                if pool.zombie && !self.allocs.values().any(|a| a.pool == Some(raw)) {
                    let mut pool = self.pools.remove(&raw).expect("present");
                    pool.arena.destroy();
                }
            }
            AllocKind::Import => {
                if let Some(pool) = alloc.pool.and_then(|raw| self.pools.get_mut(&raw)) {
                    pool.imports.remove(&(alloc.addr - pool.arena.base as u64));
                }
            }
            AllocKind::Sync | AllocKind::Managed | AllocKind::Global => {
                let arena = &mut self.devices[alloc.device].sync_arena;
                arena.free(alloc.addr - arena.base as u64, alloc.block);
                arena.trim(0);
            }
            AllocKind::Host => {
                let arena = &mut self.devices[alloc.device].host_arena;
                arena.free(alloc.addr - arena.base as u64, alloc.block);
                arena.trim(0);
            }
            // Never freed through the free calls (`allocation_to_free` does not accept them);
            // graph memory keeps its reservation until its graph and executable graph are gone.
            AllocKind::Mapping | AllocKind::Graph => {}
        }
    }

    pub fn free_async(&mut self, addr: u64, stream: Raw) -> Result<(), CuResult> {
        if addr == 0 {
            return Ok(());
        }
        let target = self.stream(stream, "cuMemFreeAsync")?;
        // Graph-owned memory a launch left live (its graph has no free node) is freed here too.
        let alloc = self.allocation_to_free(
            addr,
            &[AllocKind::Pool, AllocKind::Import, AllocKind::Graph],
        )?;
        self.follow_implicitly(target);
        if self.is_busy(target.timeline) {
            // Behind a host function: checked now, freed in stream order (`deferred`).
            self.defer_free(target, addr, alloc.kind);
            return Ok(());
        }
        self.free_now(target, addr)
    }

    /// Frees the stream-ordered allocation at `addr` as the next operation of `target`.
    pub fn free_now(&mut self, target: Target, addr: u64) -> Result<(), CuResult> {
        let alloc = self.allocation_to_free(
            addr,
            &[AllocKind::Pool, AllocKind::Import, AllocKind::Graph],
        )?;
        let operation = self.free_operation(target);
        self.check_free_order(&alloc, operation);
        self.remove_alloc(addr, operation);
        self.release_block(&alloc);
        Ok(())
    }

    /// `cuMemFree` and `cuMemFreeHost`: host-side frees, ordered only after what the host
    /// has synchronised with.
    pub fn free_sync(&mut self, addr: u64, host: bool) -> Result<(), CuResult> {
        let call = if host { "cuMemFreeHost" } else { "cuMemFree" };
        let context = self.require_current(call)?;
        let kinds: &[AllocKind] = if host {
            &[AllocKind::Host]
        } else {
            &[AllocKind::Sync, AllocKind::Pool, AllocKind::Managed]
        };
        let alloc = self.allocation_to_free(addr, kinds)?;
        let device = self.contexts[&context].device;
        if !host && device != alloc.device {
            self.checker.violation(
                "wrong-context",
                format!(
                    "{call} of {addr:#x} (device {}) with a context of device {device} current",
                    alloc.device
                ),
            );
        }
        // Driver 580 makes both frees wait for all pending work on the device, whatever the
        // stream (driver-facts: "Synchronous frees wait for the whole device").
        self.host_waits_device(device);
        if alloc.device != device {
            self.host_waits_device(alloc.device);
        }
        let operation = self.checker.host_op();
        self.check_free_order(&alloc, operation);
        self.remove_alloc(addr, operation);
        self.release_block(&alloc);
        Ok(())
    }

    /// The host waits for every stream of every context of `device`.
    pub fn host_waits_device(&mut self, device: usize) {
        let mut timelines: Vec<usize> = self
            .contexts
            .values()
            .filter(|c| c.device == device)
            .flat_map(|c| c.streams.iter().copied())
            .collect();
        timelines.sort_unstable();
        for timeline in timelines {
            self.checker.host_waits(timeline);
        }
        // Graphs of the device's contexts launched on other devices' streams ran on this
        // device (their nodes run in their graph's context).
        let launched: Vec<_> = self
            .contexts
            .values()
            .filter(|c| c.device == device)
            .map(|c| c.launched.clone())
            .collect();
        for stamp in launched {
            self.checker.host_waits_stamp(&stamp);
        }
    }

    /// `cuMemAlloc` (`host` false) and `cuMemHostAlloc` (`host` true).
    pub fn alloc_sync(&mut self, size: usize, host: bool) -> Result<u64, CuResult> {
        let what = if host { "cuMemHostAlloc" } else { "cuMemAlloc" };
        let context = self.require_current(what)?;
        if !host {
            self.forbid_unsafe_call()?;
        }
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let device = self.contexts[&context].device;
        let mut block = rounded(size as u64).ok_or(OUT_OF_MEMORY)?;
        let budget = self.budget((!host).then_some(device));
        let arena = if host {
            &mut self.devices[device].host_arena
        } else {
            &mut self.devices[device].sync_arena
        };
        let (offset, _) = if host {
            // Whole pages of its own, as a managed allocation's: the host's accesses through
            // the pointer are watched the same way (`host_access`).
            block = block.checked_next_multiple_of(PAGE).ok_or(OUT_OF_MEMORY)?;
            arena.alloc_aligned(block, PAGE, budget)?
        } else {
            arena.alloc(block, budget)?
        };
        let addr = arena.base as u64 + offset;
        let operation = self.checker.host_op();
        let kind = if host {
            AllocKind::Host
        } else {
            AllocKind::Sync
        };
        self.record_alloc(
            addr,
            size as u64,
            block,
            kind,
            None,
            device,
            Some(context),
            Some(operation),
        );
        if host {
            self.races.watch_host_visible(addr, block);
        }
        Ok(addr)
    }
}
