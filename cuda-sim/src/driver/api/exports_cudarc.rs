//! The rest of the driver API that cudarc's `result` and `safe` layers call (see
//! `COVERAGE.md`): context limits and cache configuration, pointer attributes, occupancy,
//! cooperative launches, peer copies, the profiler switches, and the functions that cannot be
//! modelled here (external memory, arrays, textures, surfaces, 2-D/3-D copies), which exist
//! and answer `CUDA_ERROR_NOT_SUPPORTED` so that a program gets an error instead of cudarc's
//! "Missing symbol" panic.
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_uint, c_void};

use crate::api::exports::stream_work;
use crate::api::exports_kernels::{launch_context, launch_target};
use crate::api::managed::ManagedState;
use crate::api::modules::Module;
use crate::base::abi::{get, put};
use crate::base::errors::{INVALID_VALUE, NOT_SUPPORTED};
use crate::base::types::*;
use crate::resources::memory::AllocKind;
use crate::resources::work::Op;
use crate::{Sim, with_sim};

/// `CUDA_ERROR_UNSUPPORTED_LIMIT`.
pub const UNSUPPORTED_LIMIT: CuResult = 215;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`, `…_NOT_ENABLED`.
pub const PEER_ACCESS_ALREADY_ENABLED: CuResult = 704;
pub const PEER_ACCESS_NOT_ENABLED: CuResult = 705;
pub use crate::resources::occupancy::COOPERATIVE_LAUNCH_TOO_LARGE;
/// `CUDA_ERROR_INVALID_CLUSTER_SIZE`.
pub const INVALID_CLUSTER_SIZE: CuResult = 912;

/// State the simulator keeps beyond the core objects: modules, managed-memory advice, and
/// per-context settings. (Kept apart so the core files need no new fields.)
#[derive(Default)]
pub struct Extra {
    /// Loaded modules (`cuModule*`), by handle.
    pub modules: HashMap<Raw, Module>,
    /// Managed allocations' attach flags and advice, by base address (an entry is valid only
    /// while a live `AllocKind::Managed` allocation starts there).
    pub managed: HashMap<u64, ManagedState>,
    /// Per-context limits and cache configuration, by context (created on first use).
    pub contexts: HashMap<Raw, ContextSettings>,
    /// Peer access enabled: (current context, peer context).
    pub peers: HashSet<(Raw, Raw)>,
}

/// `CU_LIMIT_*` values 0 to 8 with their defaults on a real H200 (driver 580, CUDA 13.0
/// numbering; measured by `cudarc_coverage.rs::probe_real_driver`).
pub const LIMIT_DEFAULTS: [u64; 9] = [
    1024,       // STACK_SIZE (bytes per thread)
    8_650_752,  // PRINTF_FIFO_SIZE
    8 << 20,    // MALLOC_HEAP_SIZE
    0,          // DEV_RUNTIME_SYNC_DEPTH: CUDA_ERROR_UNSUPPORTED_LIMIT on Hopper (CDP2)
    2048,       // DEV_RUNTIME_PENDING_LAUNCH_COUNT
    64,         // MAX_L2_FETCH_GRANULARITY (bytes)
    11_796_480, // PERSISTING_L2_CACHE_SIZE
    232_448,    // SHMEM_SIZE (read-only: CUDA_ERROR_NOT_PERMITTED to set)
    0,          // CIG_ENABLED (read-only)
];
/// Device attribute 108, `MAX_PERSISTING_L2_CACHE_SIZE`: the largest persisting L2 limit.
pub const MAX_PERSISTING_L2: u64 = 39_321_600;
/// The persisting L2 limit is set in units of 1/16 of the 60 MiB L2 (rounded up).
pub const PERSISTING_L2_UNIT: u64 = 3_932_160;
/// `CUDA_ERROR_NOT_PERMITTED`.
pub const NOT_PERMITTED: CuResult = 800;

/// A context's settable state.
#[derive(Clone, Debug)]
pub struct ContextSettings {
    pub limits: [u64; 9],
    pub cache_config: u32,
}

impl Default for ContextSettings {
    fn default() -> ContextSettings {
        ContextSettings {
            limits: LIMIT_DEFAULTS,
            cache_config: 0,
        }
    }
}

impl Sim {
    /// The settings of the current context (which the call `what` needs).
    fn current_settings(&mut self, what: &str) -> Result<&mut ContextSettings, CuResult> {
        let context = self.require_current(what)?;
        Ok(self.extra.contexts.entry(context).or_default())
    }
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes.

pub const POINTER_ATTR_SYNC_MEMOPS: u32 = 6;
pub const POINTER_ATTR_BUFFER_ID: u32 = 7;
pub const POINTER_ATTR_IS_LEGACY_IPC_CAPABLE: u32 = 10;
pub const POINTER_ATTR_ALLOWED_HANDLE_TYPES: u32 = 14;
pub const POINTER_ATTR_ACCESS_FLAGS: u32 = 16;

/// Writes attribute `attribute` of the live allocation containing `ptr` to `data`;
/// `CUDA_ERROR_INVALID_VALUE` for a pointer in no allocation (as the driver answers for
/// unregistered host memory) or an attribute it does not know.
pub fn pointer_attribute(
    data: *mut c_void,
    attribute: c_uint,
    ptr: CuDevicePtr,
) -> Result<(), CuResult> {
    let alloc = with_sim(|sim| sim.alloc_at(ptr).cloned().ok_or(INVALID_VALUE))?;
    let managed = alloc.kind == AllocKind::Managed;
    let device_memory = alloc.kind != AllocKind::Host;
    match attribute {
        POINTER_ATTR_CONTEXT => put(data.cast::<Raw>(), alloc.context.unwrap_or(0)),
        // Managed memory is CU_MEMORYTYPE_DEVICE (with IS_MANAGED set), as the H200's driver
        // answers; the runtime's cudaMemoryTypeManaged comes from IS_MANAGED.
        POINTER_ATTR_MEMORY_TYPE => put(
            data.cast::<c_uint>(),
            if device_memory {
                MEMORY_TYPE_DEVICE
            } else {
                MEMORY_TYPE_HOST
            },
        ),
        POINTER_ATTR_DEVICE_POINTER | POINTER_ATTR_HOST_POINTER => put(data.cast::<u64>(), ptr),
        POINTER_ATTR_IS_MANAGED => put(data.cast::<c_uint>(), c_uint::from(managed)),
        POINTER_ATTR_MAPPED => put(data.cast::<c_uint>(), 1),
        POINTER_ATTR_DEVICE_ORDINAL => put(data.cast::<c_int>(), alloc.device as c_int),
        POINTER_ATTR_RANGE_START_ADDR => put(data.cast::<u64>(), alloc.addr),
        POINTER_ATTR_RANGE_SIZE => put(data.cast::<usize>(), alloc.size as usize),
        POINTER_ATTR_MEMPOOL_HANDLE => put(data.cast::<Raw>(), alloc.pool.unwrap_or(0)),
        // Managed memory always synchronises its memory operations (measured); the others'
        // flag is not modelled (`cuPointerSetAttribute` is not exported).
        POINTER_ATTR_SYNC_MEMOPS => put(data.cast::<c_uint>(), c_uint::from(managed)),
        // Unique per allocation: the allocating call's sequence number.
        POINTER_ATTR_BUFFER_ID => put(data.cast::<u64>(), alloc.made_by.1),
        POINTER_ATTR_IS_LEGACY_IPC_CAPABLE => put(
            data.cast::<c_uint>(),
            c_uint::from(alloc.kind == AllocKind::Sync),
        ),
        POINTER_ATTR_ALLOWED_HANDLE_TYPES => put(data.cast::<u64>(), 0),
        POINTER_ATTR_ACCESS_FLAGS => put(data.cast::<c_uint>(), ACCESS_READWRITE),
        _ => Err(INVALID_VALUE),
    }
}

/// `cuPointerGetAttributes` for a pointer in no allocation: the documented defaults (null,
/// zero, and device ordinal -2), and success.
fn pointer_default(data: *mut c_void, attribute: c_uint) -> Result<(), CuResult> {
    match attribute {
        POINTER_ATTR_CONTEXT | POINTER_ATTR_MEMPOOL_HANDLE => put(data.cast::<Raw>(), 0),
        POINTER_ATTR_DEVICE_POINTER
        | POINTER_ATTR_HOST_POINTER
        | POINTER_ATTR_RANGE_START_ADDR
        | POINTER_ATTR_BUFFER_ID
        | POINTER_ATTR_ALLOWED_HANDLE_TYPES => put(data.cast::<u64>(), 0),
        POINTER_ATTR_RANGE_SIZE => put(data.cast::<usize>(), 0),
        POINTER_ATTR_DEVICE_ORDINAL => put(data.cast::<c_int>(), -2),
        POINTER_ATTR_MEMORY_TYPE
        | POINTER_ATTR_IS_MANAGED
        | POINTER_ATTR_MAPPED
        | POINTER_ATTR_SYNC_MEMOPS
        | POINTER_ATTR_IS_LEGACY_IPC_CAPABLE
        | POINTER_ATTR_ACCESS_FLAGS => put(data.cast::<c_uint>(), 0),
        _ => Err(INVALID_VALUE),
    }
}

// ---------------------------------------------------------------------------------------------
// Occupancy (Hopper, compute capability 9.0).

use crate::resources::occupancy::{KernelLimits, SMS, round_up};

/// `CU_OCCUPANCY_DEFAULT` and `CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE`.
fn check_occupancy_flags(flags: c_uint) -> Result<(), CuResult> {
    if flags > 1 {
        return Err(INVALID_VALUE);
    }
    Ok(())
}

/// `CUoccupancyB2DSize`.
pub type BlockToDynamicShared = Option<unsafe extern "C" fn(c_int) -> usize>;

fn max_potential_block_size(
    min_grid: *mut c_int,
    block_size: *mut c_int,
    function: Raw,
    to_dynamic: BlockToDynamicShared,
    dynamic: usize,
    limit: c_int,
    flags: c_uint,
) -> Result<(), CuResult> {
    check_occupancy_flags(flags)?;
    if min_grid.is_null() || block_size.is_null() || limit < 0 {
        return Err(INVALID_VALUE);
    }
    let limits =
        with_sim(|sim| KernelLimits::of(sim, function, "cuOccupancyMaxPotentialBlockSize"))?;
    let mut top = limits.max_threads.min(1024);
    if limit > 0 {
        top = top.min(limit as u64);
    }
    // As the CUDA occupancy calculator: try every multiple of the warp size from the largest
    // down, keep the block size with the most resident threads (the larger on ties). The
    // callback runs outside the simulator's lock.
    let (mut best_block, mut best_blocks, mut best_threads) = (0u64, 0u64, 0u64);
    let mut candidate = round_up(top, 32).min(top.max(1));
    while candidate > 0 {
        let shared = match to_dynamic {
            // SAFETY: the caller's callback, called with a block size as the API specifies.
            Some(f) => (unsafe { f(candidate as c_int) }) as u64,
            None => dynamic as u64,
        };
        let blocks = limits.blocks_per_sm(candidate, shared);
        if blocks * candidate > best_threads {
            (best_block, best_blocks, best_threads) = (candidate, blocks, blocks * candidate);
        }
        candidate = if candidate.is_multiple_of(32) {
            candidate - 32
        } else {
            candidate / 32 * 32
        };
    }
    put(min_grid, (best_blocks * SMS) as c_int)?;
    put(block_size, best_block as c_int)
}

/// The cluster size of a launch configuration (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`, 1
/// without one) and its block and shared memory.
fn cluster_config(config: *const LaunchConfig) -> Result<(LaunchConfig, Option<u64>), CuResult> {
    let config = get(config)?;
    if config.num_attrs > 0 && config.attrs.is_null() {
        return Err(INVALID_VALUE);
    }
    let mut cluster = None;
    for i in 0..config.num_attrs as usize {
        // SAFETY: `attrs` holds `numAttrs` attributes by the API's contract.
        let attribute = get(unsafe { config.attrs.add(i) }.cast_const())?;
        if attribute.id == 4 {
            let dim = |k: usize| {
                u32::from_le_bytes(
                    attribute.value[4 * k..4 * k + 4]
                        .try_into()
                        .expect("4 bytes"),
                )
            };
            cluster = Some(u64::from(dim(0)) * u64::from(dim(1)) * u64::from(dim(2)));
        }
    }
    Ok((config, cluster))
}

// ---------------------------------------------------------------------------------------------

export_fns! {
    /// The device address of pinned host memory: with unified addressing, the host address
    /// itself. `ptr` must lie in a live `cuMemHostAlloc`/`cuMemAllocHost` allocation (every
    /// one is mapped on such a system) and `flags` must be 0, as the driver requires.
    fn cuMemHostGetDevicePointer_v2(dptr: *mut CuDevicePtr, ptr: *mut c_void, flags: c_uint) {
        if dptr.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        let addr = ptr as usize as CuDevicePtr;
        with_sim(|sim| {
            sim.require_current("cuMemHostGetDevicePointer_v2")?;
            match sim.alloc_at(addr) {
                Some(alloc) if alloc.kind == AllocKind::Host => Ok(()),
                _ => Err(INVALID_VALUE),
            }
        })?;
        put(dptr, addr)
    }

    fn cuPointerGetAttribute(data: *mut c_void, attribute: c_uint, ptr: CuDevicePtr) {
        // One implementation with `cuPointerGetAttributes` (knows managed memory).
        pointer_attribute(data, attribute, ptr)
    }

    fn cuPointerGetAttributes(count: c_uint, attributes: *mut c_uint, data: *mut *mut c_void, ptr: CuDevicePtr) {
        if count > 0 && (attributes.is_null() || data.is_null()) {
            return Err(INVALID_VALUE);
        }
        let known = with_sim(|sim| Ok(sim.alloc_at(ptr).is_some()))?;
        for i in 0..count as usize {
            // SAFETY: both arrays hold `count` entries by the API's contract.
            let (attribute, out) = unsafe { (attributes.add(i).read(), data.add(i).read()) };
            if known {
                pointer_attribute(out, attribute, ptr)?;
            } else {
                pointer_default(out, attribute)?;
            }
        }
        Ok(())
    }

    fn cuCtxGetLimit(value: *mut usize, limit: c_uint) {
        let v = with_sim(|sim| {
            let settings = sim.current_settings("cuCtxGetLimit")?;
            match settings.limits.get(limit as usize) {
                // Device-runtime synchronisation depth: not on Hopper (CDP2).
                Some(_) if limit == 3 => Err(UNSUPPORTED_LIMIT),
                Some(&v) => Ok(v),
                // CIG_SHMEM_FALLBACK_ENABLED: graphics interop only.
                None if limit < 10 => Err(UNSUPPORTED_LIMIT),
                None => Err(INVALID_VALUE),
            }
        })?;
        put(value, v as usize)
    }

    fn cuCtxSetLimit(limit: c_uint, value: usize) {
        with_sim(|sim| {
            let settings = sim.current_settings("cuCtxSetLimit")?;
            let value = value as u64;
            // As measured on the H200: the stack size rounds up to 16 bytes, the FIFO and
            // the heap have minimums (512 KiB, 4 MiB), the persisting L2 size rounds up to
            // 1/16 of the L2 and may not exceed the device's maximum.
            match limit {
                0 => settings.limits[0] = value.div_ceil(16) * 16,
                1 => settings.limits[1] = value.max(512 << 10),
                2 => settings.limits[2] = value.max(4 << 20),
                4 => settings.limits[4] = value,
                5 if value <= 128 => settings.limits[5] = value,
                6 if value <= MAX_PERSISTING_L2 => {
                    settings.limits[6] = value.div_ceil(PERSISTING_L2_UNIT) * PERSISTING_L2_UNIT;
                }
                5 | 6 => return Err(INVALID_VALUE),
                3 | 9 => return Err(UNSUPPORTED_LIMIT),
                7 | 8 => return Err(NOT_PERMITTED),
                _ => return Err(INVALID_VALUE),
            }
            Ok(())
        })
    }

    fn cuCtxGetCacheConfig(config: *mut c_uint) {
        let c = with_sim(|sim| Ok(sim.current_settings("cuCtxGetCacheConfig")?.cache_config))?;
        put(config, c)
    }

    fn cuCtxSetCacheConfig(config: c_uint) {
        if config > 3 {
            return Err(INVALID_VALUE);
        }
        with_sim(|sim| {
            sim.current_settings("cuCtxSetCacheConfig")?.cache_config = config;
            Ok(())
        })
    }

    fn cuFuncSetCacheConfig(function: Raw, config: c_uint) {
        if config > 3 {
            return Err(INVALID_VALUE);
        }
        // A preference only: checked and accepted (Hopper's L1/shared split follows the
        // carveout attribute).
        with_sim(|sim| sim.callee(function).map(|_| ()))
    }

    fn cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks: *mut c_int, function: Raw, block_size: c_int, dynamic: usize) {
        let n = with_sim(|sim| {
            let limits = KernelLimits::of(sim, function, "cuOccupancyMaxActiveBlocksPerMultiprocessor")?;
            if block_size <= 0 {
                return Err(INVALID_VALUE);
            }
            Ok(limits.blocks_per_sm(block_size as u64, dynamic as u64))
        })?;
        put(blocks, n as c_int)
    }

    fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks: *mut c_int, function: Raw, block_size: c_int, dynamic: usize, flags: c_uint) {
        check_occupancy_flags(flags)?;
        let n = with_sim(|sim| {
            let limits = KernelLimits::of(sim, function, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")?;
            if block_size <= 0 {
                return Err(INVALID_VALUE);
            }
            Ok(limits.blocks_per_sm(block_size as u64, dynamic as u64))
        })?;
        put(blocks, n as c_int)
    }

    fn cuOccupancyMaxPotentialBlockSize(min_grid: *mut c_int, block_size: *mut c_int, function: Raw, to_dynamic: BlockToDynamicShared, dynamic: usize, limit: c_int) {
        max_potential_block_size(min_grid, block_size, function, to_dynamic, dynamic, limit, 0)
    }

    fn cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid: *mut c_int, block_size: *mut c_int, function: Raw, to_dynamic: BlockToDynamicShared, dynamic: usize, limit: c_int, flags: c_uint) {
        max_potential_block_size(min_grid, block_size, function, to_dynamic, dynamic, limit, flags)
    }

    fn cuOccupancyAvailableDynamicSMemPerBlock(dynamic: *mut usize, function: Raw, blocks: c_int, block_size: c_int) {
        let n = with_sim(|sim| {
            let limits = KernelLimits::of(sim, function, "cuOccupancyAvailableDynamicSMemPerBlock")?;
            limits.available_dynamic(blocks.max(0) as u64, block_size.max(0) as u64)
        })?;
        put(dynamic, n as usize)
    }

    fn cuOccupancyMaxPotentialClusterSize(size: *mut c_int, function: Raw, config: *const LaunchConfig) {
        let _ = cluster_config(config)?;
        let limits = with_sim(|sim| KernelLimits::of(sim, function, "cuOccupancyMaxPotentialClusterSize"))?;
        put(size, if limits.non_portable_cluster { 16 } else { 8 })
    }

    fn cuOccupancyMaxActiveClusters(clusters: *mut c_int, function: Raw, config: *const LaunchConfig) {
        let (config, cluster) = cluster_config(config)?;
        let limits = with_sim(|sim| KernelLimits::of(sim, function, "cuOccupancyMaxActiveClusters"))?;
        // Without a cluster dimension the H200 answers 0 clusters (for a kernel compiled
        // without one).
        let Some(cluster) = cluster else {
            return put(clusters, 0);
        };
        let most = if limits.non_portable_cluster { 16 } else { 8 };
        if cluster == 0 || cluster > most {
            return Err(INVALID_CLUSTER_SIZE);
        }
        let block = u64::from(config.block[0]) * u64::from(config.block[1]) * u64::from(config.block[2]);
        // Simplified: the SMs of all GPCs pooled. The H200 answers fewer: it packs clusters
        // per GPC and sizes the shared memory carveout for clusters (128-thread blocks, no
        // shared memory: 1056 one-block clusters, 528 of 2, 248 of 4, 124 of 8, where this
        // gives 2112, 1056, 528, 264; with 48 KiB of dynamic shared memory, 264 of 2, as here).
        let blocks = limits.blocks_per_sm(block, u64::from(config.shared)) * SMS;
        put(clusters, (blocks / cluster) as c_int)
    }

    fn cuLaunchCooperativeKernel(
        function: Raw,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared: c_uint,
        stream: Raw,
        params: *mut *mut c_void
    ) {
        let op = with_sim(|sim| {
            let (context, device) = launch_context(sim, "cuLaunchCooperativeKernel")?;
            launch_target(sim, stream, context, "cuLaunchCooperativeKernel")?;
            let grid = [grid_x, grid_y, grid_z];
            let block = [block_x, block_y, block_z];
            let launch = sim.prepare_launch(function, grid, block, shared, params, std::ptr::null_mut(), device)?;
            sim.check_launch_context(&launch, context)?;
            // Every block of a cooperative grid must be resident at once.
            let limits = KernelLimits::of(sim, function, "cuLaunchCooperativeKernel")?;
            let threads = u64::from(block_x) * u64::from(block_y) * u64::from(block_z);
            let resident = limits.blocks_per_sm(threads, u64::from(shared)) * SMS;
            let blocks = u64::from(grid_x) * u64::from(grid_y) * u64::from(grid_z);
            if blocks > resident {
                return Err(COOPERATIVE_LAUNCH_TOO_LARGE);
            }
            Ok(Op::Kernel(launch))
        })?;
        stream_work(Some(stream), "cuLaunchCooperativeKernel", op)
    }

    fn cuMemcpyPeerAsync(dst: CuDevicePtr, dst_context: Raw, src: CuDevicePtr, src_context: Raw, len: usize, stream: Raw) {
        with_sim(|sim| {
            sim.context(dst_context)?;
            sim.context(src_context).map(|_| ())
        })?;
        let op = Op::Memcpy { dst, src, len, device: (true, true) };
        stream_work(Some(stream), "cuMemcpyPeerAsync", op)
    }

    fn cuMemcpyPeer(dst: CuDevicePtr, dst_context: Raw, src: CuDevicePtr, src_context: Raw, len: usize) {
        with_sim(|sim| {
            sim.context(dst_context)?;
            sim.context(src_context).map(|_| ())
        })?;
        let op = Op::Memcpy { dst, src, len, device: (true, true) };
        stream_work(None, "cuMemcpyPeer", op)
    }

    fn cuDeviceCanAccessPeer(can: *mut c_int, device: CuDevice, peer: CuDevice) {
        with_sim(|sim| {
            sim.device(device)?;
            sim.device(peer).map(|_| ())
        })?;
        // NVLink-connected H200s: every pair of distinct devices.
        put(can, c_int::from(device != peer))
    }

    fn cuCtxEnablePeerAccess(peer: Raw, flags: c_uint) {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        with_sim(|sim| {
            let current = sim.require_current("cuCtxEnablePeerAccess")?;
            let device = sim.contexts[&current].device;
            if sim.context(peer)?.device == device {
                return Err(INVALID_VALUE);
            }
            if !sim.extra.peers.insert((current, peer)) {
                return Err(PEER_ACCESS_ALREADY_ENABLED);
            }
            Ok(())
        })
    }

    fn cuCtxDisablePeerAccess(peer: Raw) {
        with_sim(|sim| {
            let current = sim.require_current("cuCtxDisablePeerAccess")?;
            sim.context(peer)?;
            if !sim.extra.peers.remove(&(current, peer)) {
                return Err(PEER_ACCESS_NOT_ENABLED);
            }
            Ok(())
        })
    }

    // The older context constructors (cudarc before `cuda-12050` calls `cuCtxCreate_v3`), as
    // `cuCtxCreate_v4` without parameters: affinity parameters are not modelled.
    fn cuCtxCreate_v2(context: *mut Raw, flags: c_uint, device: CuDevice) {
        let _ = flags;
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_context(device))?;
        put(context, raw)
    }

    fn cuCtxCreate_v3(context: *mut Raw, params: *mut c_void, count: c_int, flags: c_uint, device: CuDevice) {
        let _ = (params, flags);
        if context.is_null() || count < 0 || (count > 0 && params.is_null()) {
            return Err(INVALID_VALUE);
        }
        if count > 0 {
            return Err(NOT_SUPPORTED);
        }
        let raw = with_sim(|sim| sim.create_context(device))?;
        put(context, raw)
    }

    fn cuProfilerStart() {
        // No profiler attached: nothing to start, as the driver without one.
        with_sim(|sim| sim.require_current("cuProfilerStart").map(|_| ()))
    }

    fn cuProfilerStop() {
        with_sim(|sim| sim.require_current("cuProfilerStop").map(|_| ()))
    }
}

/// Exports functions that cannot be modelled: each checks that the driver is initialised and
/// returns `CUDA_ERROR_NOT_SUPPORTED`. The arguments are the C signature's, never read.
macro_rules! not_supported {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ); )*) => {
        export_fns! {$(
            fn $name($($arg: $ty),*) {
                $( let _ = $arg; )*
                with_sim(|_| Ok(()))?;
                Err(NOT_SUPPORTED)
            }
        )*}
    };
}

not_supported! {
    // External memory and semaphores (Vulkan/D3D/NvSci interop).
    fn cuImportExternalMemory(memory: *mut Raw, desc: *const c_void);
    fn cuExternalMemoryGetMappedBuffer(ptr: *mut CuDevicePtr, memory: Raw, desc: *const c_void);
    fn cuExternalMemoryGetMappedMipmappedArray(array: *mut Raw, memory: Raw, desc: *const c_void);
    fn cuDestroyExternalMemory(memory: Raw);
    fn cuImportExternalSemaphore(semaphore: *mut Raw, desc: *const c_void);
    fn cuSignalExternalSemaphoresAsync(semaphores: *const Raw, params: *const c_void, count: c_uint, stream: Raw);
    fn cuWaitExternalSemaphoresAsync(semaphores: *const Raw, params: *const c_void, count: c_uint, stream: Raw);
    fn cuDestroyExternalSemaphore(semaphore: Raw);
    // Arrays, mipmapped arrays, textures and surfaces.
    fn cuArrayCreate_v2(array: *mut Raw, desc: *const c_void);
    fn cuArray3DCreate_v2(array: *mut Raw, desc: *const c_void);
    fn cuArrayGetDescriptor_v2(desc: *mut c_void, array: Raw);
    fn cuArray3DGetDescriptor_v2(desc: *mut c_void, array: Raw);
    fn cuArrayDestroy(array: Raw);
    fn cuMipmappedArrayCreate(array: *mut Raw, desc: *const c_void, levels: c_uint);
    fn cuMipmappedArrayGetLevel(array: *mut Raw, mipmapped: Raw, level: c_uint);
    fn cuMipmappedArrayDestroy(array: Raw);
    fn cuTexObjectCreate(object: *mut u64, resource: *const c_void, texture: *const c_void, view: *const c_void);
    fn cuTexObjectDestroy(object: u64);
    fn cuTexObjectGetResourceDesc(desc: *mut c_void, object: u64);
    fn cuSurfObjectCreate(object: *mut u64, resource: *const c_void);
    fn cuSurfObjectDestroy(object: u64);
    fn cuModuleGetTexRef(texref: *mut Raw, module: Raw, name: *const std::ffi::c_char);
    fn cuModuleGetSurfRef(surfref: *mut Raw, module: Raw, name: *const std::ffi::c_char);
    // 2-D and 3-D copies, and copies to and from arrays.
    fn cuMemcpy2D_v2(copy: *const c_void);
    fn cuMemcpy2DUnaligned_v2(copy: *const c_void);
    fn cuMemcpy2DAsync_v2(copy: *const c_void, stream: Raw);
    fn cuMemcpy3D_v2(copy: *const c_void);
    fn cuMemcpy3DAsync_v2(copy: *const c_void, stream: Raw);
    fn cuMemcpy3DPeer(copy: *const c_void);
    fn cuMemcpy3DPeerAsync(copy: *const c_void, stream: Raw);
    fn cuMemcpyAtoH_v2(dst: *mut c_void, src: Raw, offset: usize, len: usize);
    fn cuMemcpyHtoA_v2(dst: Raw, offset: usize, src: *const c_void, len: usize);
    fn cuMemcpyAtoD_v2(dst: CuDevicePtr, src: Raw, offset: usize, len: usize);
    fn cuMemcpyDtoA_v2(dst: Raw, offset: usize, src: CuDevicePtr, len: usize);
    fn cuMemcpyAtoA_v2(dst: Raw, dst_offset: usize, src: Raw, src_offset: usize, len: usize);
    fn cuMemAllocPitch_v2(ptr: *mut CuDevicePtr, pitch: *mut usize, width: usize, height: usize, element: c_uint);
    // Registered host memory and graphics interop.
    fn cuMemHostRegister_v2(ptr: *mut c_void, size: usize, flags: c_uint);
    fn cuMemHostUnregister(ptr: *mut c_void);
    fn cuGraphicsUnregisterResource(resource: Raw);
    fn cuGraphicsMapResources(count: c_uint, resources: *mut Raw, stream: Raw);
    fn cuGraphicsUnmapResources(count: c_uint, resources: *mut Raw, stream: Raw);
    // Multi-device cooperative launches (removed in CUDA 13) and unified functions.
    fn cuLaunchCooperativeKernelMultiDevice(params: *mut c_void, count: c_uint, flags: c_uint);
    fn cuLibraryGetUnifiedFunction(function: *mut *mut c_void, library: Raw, name: *const std::ffi::c_char);
}
