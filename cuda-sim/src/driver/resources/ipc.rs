//! Interprocess sharing: pools exported as memory-file descriptors, pointers exported as
//! `(pool, offset, size)`, and interprocess events. Reproduces the real driver's quirks
//! (measured on the H200 by `tests/tests/gpu_process.rs`): a second import of one allocation
//! returns the same pointer and the first free unmaps it for both (nvbug 5570902); pinned host
//! memory refuses a second import with `CUDA_ERROR_ALREADY_MAPPED`; pointers cannot be exported
//! before the pool's handle was exported once (driver 580).

use std::collections::HashMap;

use crate::base::errors::{ALREADY_MAPPED, INVALID_VALUE, OPERATING_SYSTEM, OUT_OF_MEMORY};
use crate::base::sys;
use crate::base::types::{
    ACCESS_NONE, ACCESS_READWRITE, CuResult, EVENT_DISABLE_TIMING, EVENT_INTERPROCESS,
    HANDLE_TYPE_POSIX_FD, LOCATION_DEVICE, MemLocation, Raw,
};
use crate::resources::memory::{AllocKind, Arena, HEADER};
use crate::resources::pools::{POOL_MAGIC, Pool};
use crate::resources::work::Op;
use crate::{Kind, Sim};

const POINTER_MAGIC: &[u8; 8] = b"CUSIMPTR";
const EVENT_MAGIC: &[u8; 8] = b"CUSIMEVT";

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl Sim {
    /// `cuMemPoolExportToShareableHandle`: a new descriptor of the pool's memory file.
    pub fn export_pool(&mut self, raw: Raw, handle_type: u32) -> Result<i32, CuResult> {
        let pool = self.pool(raw)?;
        if !pool.ipc || handle_type != HANDLE_TYPE_POSIX_FD {
            return Err(INVALID_VALUE);
        }
        let fd = pool.arena.fd.ok_or(INVALID_VALUE)?;
        let new = sys::dup(fd).ok_or(OPERATING_SYSTEM)?;
        pool.exported = true;
        Ok(new)
    }

    /// `cuMemPoolImportFromShareableHandle`: maps another process's pool file.
    pub fn import_pool(&mut self, fd: i32, handle_type: u32) -> Result<Raw, CuResult> {
        if handle_type != HANDLE_TYPE_POSIX_FD {
            return Err(INVALID_VALUE);
        }
        let mut header = [0u8; 32];
        if !sys::read_at(fd, &mut header, 0) || &header[..8] != POOL_MAGIC {
            return Err(INVALID_VALUE);
        }
        let uid = word(&header, 8);
        let size = word(&header, 16);
        let location = MemLocation {
            kind: u32::from_le_bytes(header[24..28].try_into().expect("4 bytes")),
            id: i32::from_le_bytes(header[28..32].try_into().expect("4 bytes")),
        };
        let own = sys::dup(fd).ok_or(OPERATING_SYSTEM)?;
        let Some(base) = sys::map(size as usize, Some(own)) else {
            sys::close_fd(own);
            return Err(OUT_OF_MEMORY);
        };
        let device = (location.kind == LOCATION_DEVICE)
            .then_some(location.id as usize)
            .filter(|&d| d < self.devices.len());
        let mut access = vec![ACCESS_NONE; self.devices.len()];
        if let Some(d) = device {
            access[d] = ACCESS_READWRITE;
        }
        let arena = Arena::imported(base, size, own);
        let raw = self.new_raw(Kind::Pool);
        self.pools.insert(
            raw,
            Pool {
                device,
                location,
                ipc: true,
                arena,
                revoked: vec![false; access.len()],
                access,
                release_threshold: 0,
                reuse: [1, 1, 1],
                max_size: 0,
                exported: false,
                imported: true,
                default: false,
                zombie: false,
                uid,
                imports: HashMap::new(),
                queued_free: 0,
            },
        );
        Ok(raw)
    }

    /// `cuMemPoolExportPointer`.
    pub fn export_pointer(&mut self, addr: u64) -> Result<[u8; 64], CuResult> {
        let alloc = match self.allocs.get(&addr) {
            Some(alloc) if alloc.kind == AllocKind::Pool => alloc.clone(),
            _ => return Err(INVALID_VALUE),
        };
        let raw = alloc.pool.expect("pool allocation");
        let pool = self.pool(raw)?;
        if !pool.ipc || !pool.exported {
            return Err(INVALID_VALUE);
        }
        let mut data = [0u8; 64];
        data[..8].copy_from_slice(POINTER_MAGIC);
        data[8..16].copy_from_slice(&pool.uid.to_le_bytes());
        data[16..24].copy_from_slice(&(addr - pool.arena.base as u64).to_le_bytes());
        data[24..32].copy_from_slice(&alloc.size.to_le_bytes());
        data[32..40].copy_from_slice(&alloc.made_by.1.to_le_bytes());
        self.initcheck.shared(addr);
        Ok(data)
    }

    /// `cuMemPoolImportPointer`.
    pub fn import_pointer(&mut self, raw: Raw, data: &[u8; 64]) -> Result<u64, CuResult> {
        let context = crate::resources::contexts::current();
        let pool = self.pool(raw)?;
        if !pool.imported || &data[..8] != POINTER_MAGIC || word(data, 8) != pool.uid {
            return Err(INVALID_VALUE);
        }
        let (offset, size) = (word(data, 16), word(data, 24));
        if offset < HEADER || size == 0 || offset.saturating_add(size) > pool.arena.size {
            return Err(INVALID_VALUE);
        }
        let addr = pool.arena.base as u64 + offset;
        if pool.imports.contains_key(&offset) {
            let host = pool.device.is_none();
            if self.reimport(addr) {
                // The previous import's free is queued: a fresh mapping at the same address.
                return Ok(addr);
            }
            if host {
                return Err(ALREADY_MAPPED);
            }
            // nvbug 5570902: the same pointer again, not counted.
            return Ok(addr);
        }
        pool.imports.insert(offset, addr);
        let device = pool.device.unwrap_or(0);
        self.record_alloc(
            addr,
            size,
            size,
            AllocKind::Import,
            Some(raw),
            device,
            (context != 0).then_some(context),
            None,
        );
        Ok(addr)
    }

    /// Whether the allocation starting at `start` is an import, made in this process, of an
    /// IPC host pool this process created. Driver 580 maps such an import, but refuses device
    /// writes through it: `cuMemsetD8Async` fails with `CUDA_ERROR_INVALID_VALUE`
    /// (driver-facts, "Graph nodes run in their graph's context", measured 2026-12-04).
    pub fn refuses_device_writes(&self, start: u64) -> bool {
        let Some(alloc) = self.allocs.get(&start) else {
            return false;
        };
        alloc.kind == AllocKind::Import
            && alloc
                .pool
                .and_then(|raw| self.pools.get(&raw))
                .is_some_and(Pool::own_host_import)
    }

    /// Refuses an operation that writes, with device work, an import of this process's own
    /// IPC host pool (`refuses_device_writes`): `CUDA_ERROR_INVALID_VALUE`, as driver 580
    /// answers the memset (measured) and, by the same rule, the copies into it (not measured).
    /// The call fails and nothing runs; a refusal the driver makes is no violation. Kernels'
    /// stores are checked where they happen (`interp.rs`).
    pub fn refuse_import_writes(&self, op: &Op) -> Result<(), CuResult> {
        // `rows` rows of `len` bytes, `pitch` apart, from `dst`.
        let (dst, len, pitch, rows) = match *op {
            Op::Memset {
                dst,
                pitch,
                width,
                count,
                rows,
                ..
            } => (
                dst,
                count.saturating_mul(width) as u64,
                pitch as u64,
                rows as u64,
            ),
            Op::Memcpy { dst, len, .. } => (dst, len as u64, 0, 1),
            Op::Upload {
                ref dst, ref data, ..
            } => (*dst, data.len() as u64, 0, 1),
            _ => return Ok(()),
        };
        if len == 0 || rows == 0 {
            return Ok(());
        }
        // Whether a row meets `[start, end)`: the first row that ends past `start` starts
        // before `end`. Imports are few; rows may be many.
        let meets = |start: u64, end: u64| {
            let first = if dst.saturating_add(len) > start {
                0
            } else {
                match (start - dst - len).checked_div(pitch) {
                    Some(whole) => whole + 1,
                    // One row, which ends before `start`.
                    None => return false,
                }
            };
            first < rows
                && first
                    .checked_mul(pitch)
                    .and_then(|offset| dst.checked_add(offset))
                    .is_some_and(|row| row < end)
        };
        // Pools are few; a program without such an import pays only this scan.
        if !self.pools.values().any(Pool::own_host_import) {
            return Ok(());
        }
        let refused = self
            .allocs
            .values()
            .filter(|alloc| alloc.kind == AllocKind::Import)
            .any(|alloc| {
                self.refuses_device_writes(alloc.addr) && meets(alloc.addr, alloc.addr + alloc.size)
            });
        if refused { Err(INVALID_VALUE) } else { Ok(()) }
    }

    /// `cuIpcGetEventHandle`.
    pub fn export_event(&mut self, raw: Raw) -> Result<[u8; 64], CuResult> {
        self.require_current("cuIpcGetEventHandle")?;
        let event = self.event(raw)?;
        if event.flags & EVENT_INTERPROCESS == 0 {
            return Err(INVALID_VALUE);
        }
        let mut data = [0u8; 64];
        data[..8].copy_from_slice(EVENT_MAGIC);
        data[8..16].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
        data[16..24].copy_from_slice(&(raw as u64).to_le_bytes());
        Ok(data)
    }

    /// `cuIpcOpenEventHandle`: an event that is always complete in this process.
    pub fn open_event(&mut self, data: &[u8; 64]) -> Result<Raw, CuResult> {
        if &data[..8] != EVENT_MAGIC {
            return Err(INVALID_VALUE);
        }
        self.create_event(EVENT_INTERPROCESS | EVENT_DISABLE_TIMING, true)
    }
}

impl Pool {
    /// Whether this is this process's import of an IPC host pool it created itself.
    fn own_host_import(&self) -> bool {
        self.imported && self.device.is_none() && self.uid >> 32 == u64::from(std::process::id())
    }
}

impl Arena {
    /// An arena over another process's pool file, mapped at `base`.
    pub fn imported(base: usize, size: u64, fd: i32) -> Arena {
        let mut arena = Arena::new_mapped(base, size, fd);
        arena.reserved = 0;
        arena
    }
}
