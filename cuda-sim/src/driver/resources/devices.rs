//! Devices: count and memory from the environment, attributes of an H200-like GPU, and each
//! device's primary context, default pool and synchronous allocator.

use crate::base::errors::{INVALID_DEVICE, INVALID_VALUE};
use crate::base::types::{CuResult, Raw};
use crate::resources::memory::{Arena, arena_size};
use crate::{Kind, Sim, resources::contexts::Context, resources::pools::Pool};

/// One simulated GPU.
pub struct Device {
    pub ordinal: usize,
    pub capacity: u64,
    pub primary: Raw,
    pub default_pool: Raw,
    pub current_pool: Raw,
    /// Backs `cuMemAlloc`.
    pub sync_arena: Arena,
    /// Backs `cuMemHostAlloc` of contexts on this device (not counted as device memory).
    pub host_arena: Arena,
    /// Peer access that the next pool created on this device inherits (nvbug 5698116).
    pub inherited_access: Option<Vec<u32>>,
}

impl Sim {
    pub fn add_device(&mut self, ordinal: usize) {
        let capacity = self.config.memory;
        let size = arena_size(capacity);
        let primary = self.new_raw(Kind::Context);
        let legacy = self
            .checker
            .timeline(format!("legacy stream of device {ordinal}"));
        self.contexts
            .insert(primary, Context::new(primary, ordinal, true, legacy));
        let default_pool = self.new_raw(Kind::Pool);
        let pool = Pool::new_device_default(ordinal, self.config.devices, size)
            .expect("cuda-sim: cannot reserve address space for a default pool");
        self.pools.insert(default_pool, pool);
        self.devices.push(Device {
            ordinal,
            capacity,
            primary,
            default_pool,
            current_pool: default_pool,
            sync_arena: Arena::new(size, false).expect("cuda-sim: cannot reserve address space"),
            host_arena: Arena::new(size, false).expect("cuda-sim: cannot reserve address space"),
            inherited_access: None,
        });
    }

    /// Device `device`, or `CUDA_ERROR_INVALID_DEVICE`.
    pub fn device(&self, device: i32) -> Result<&Device, CuResult> {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.devices.get(d))
            .ok_or(INVALID_DEVICE)
    }

    /// Bytes of device `device` reserved by its pools, its synchronous allocator and the
    /// physical allocations (`cuMemCreate`) made on it.
    pub fn device_reserved(&self, device: usize) -> u64 {
        let pools: u64 = self
            .pools
            .values()
            .filter(|pool| pool.device == Some(device) && !pool.imported)
            .map(|pool| pool.arena.reserved)
            .sum();
        pools + self.devices[device].sync_arena.reserved + self.vmm_reserved(device)
    }

    /// `cuDeviceGetAttribute`.
    pub fn attribute(&self, attribute: u32, device: i32) -> Result<i32, CuResult> {
        let ordinal = self.device(device)?.ordinal as i32;
        if attribute == 0 || attribute >= 148 {
            return Err(INVALID_VALUE);
        }
        Ok(match attribute {
            33 => ordinal + 0x18, // PCI bus id
            119 => 1,             // pool handle types: POSIX file descriptor (no fabric)
            128 => 0,             // fabric handles: not supported
            // Everything else as a real H200 answers (L2 60 MiB, bus 6016 bits, memory clock
            // 3201 MHz, 132 SMs, 228 KiB shared per SM, managed memory, no pageable access).
            other => H200_ATTRIBUTES[other as usize],
        })
    }
}

/// `cuDeviceGetAttribute` of a real H200 (driver 580.159.04, CUDA 13.0 numbering), attributes
/// 1 to 147 (index 0 unused), measured with `cudarc_coverage.rs::probe_real_driver`. The
/// simulator answers these, except the PCI bus id (per ordinal), the pool handle types (POSIX
/// descriptors only) and fabric handles (not supported here): see `Sim::attribute` above.
pub const H200_ATTRIBUTES: [i32; 148] = [
    0, 1024, 1024, 1024, 64, 2147483647, 65535, 65535, // 0..
    49152, 65536, 32, 2147483647, 65536, 1980000, 512, 1, // 8..
    132, 0, 0, 1, 0, 131072, 131072, 65536, // 16..
    16384, 16384, 16384, 32768, 32768, 2048, 512, 1, // 24..
    1, 0, 6, 0, 3201000, 6016, 62914560, 2048, // 32..
    3, 1, 32768, 2048, 1, 32768, 32768, 8192, // 40..
    8192, 32768, 0, 32, 32768, 32768, 2046, 32768, // 48..
    131072, 65536, 16384, 16384, 16384, 32768, 2048, 32768, // 56..
    32768, 2048, 32768, 32768, 2046, 268435456, 131072, 65000, // 64..
    2097120, 32768, 32768, 9, 0, 32768, 1, 1, // 72..
    1, 233472, 65536, 1, 0, 0, 0, 2, // 80..
    0, 1, 1, 1, 0, 0, 0, 1, // 88..
    1, 232448, 0, 1, 0, 0, 1, 1, // 96..
    0, 0, 32, 1, 39321600, 134217728, 1, 1024, // 104..
    1, 1, 1, 1, 1, 1, 100, 9, // 112..
    1, 1, 1, 1, 1, 1, 4, 1, // 120..
    1, 1, 0, -1, 0, 0, 0, 0, // 128..
    0, 0, 0, 590680286, 415174878, 1, 1, 0, // 136..
    1, 1, 0, 0, // 144..
];
