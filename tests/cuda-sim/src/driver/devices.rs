//! Devices: count and memory from the environment, attributes of an H200-like GPU, and each
//! device's primary context, default pool and synchronous allocator.

use super::errors::{INVALID_DEVICE, INVALID_VALUE};
use super::memory::Arena;
use super::types::{CuResult, Raw};
use super::{Kind, Sim, contexts::Context, pools::Pool};

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

/// The address space each arena reserves: room for fragmentation above the capacity.
pub fn arena_size(capacity: u64) -> u64 {
    (capacity.saturating_mul(4)).clamp(64 << 20, 1 << 40)
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
            1 => 1024,            // max threads per block
            2 | 3 => 1024,        // max block dim x, y
            4 => 64,              // max block dim z
            5 => i32::MAX,        // max grid dim x
            6 | 7 => 65535,       // max grid dim y, z
            8 => 49152,           // shared memory per block
            9 => 65536,           // constant memory
            10 => 32,             // warp size
            11 => i32::MAX,       // max pitch
            12 | 82 => 65536,     // registers per block, per multiprocessor
            13 => 1_980_000,      // clock rate (kHz)
            14 => 512,            // texture alignment
            16 => 132,            // multiprocessors
            20 => 0,              // compute mode default
            33 => ordinal + 0x18, // PCI bus id
            34 | 50 => 0,         // PCI device, domain
            36 => 2_619_000,      // memory clock (kHz)
            37 => 6144,           // bus width
            38 => 50 << 20,       // L2 cache
            39 => 2048,           // threads per multiprocessor
            40 => 5,              // async engines
            75 => 9,              // compute capability major
            76 => 0,              // compute capability minor
            81 => 233_472,        // shared memory per multiprocessor
            97 => 232_448,        // shared memory per block, opt-in
            106 => 32,            // blocks per multiprocessor
            119 => 1,             // pool handle types: POSIX file descriptor
            126 => 4,             // sync domains
            130 => 0,             // NUMA config: none
            131 => -1,            // NUMA id
            134 => 0,             // host NUMA id
            15 | 17 | 18 | 35 | 84 | 85 | 104 | 105 | 128 | 132 | 133 | 135 | 138 => 0,
            _ => 1, // supported: unified addressing, pools, IPC, ...
        })
    }
}
