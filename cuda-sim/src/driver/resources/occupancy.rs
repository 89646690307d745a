//! The occupancy model of an H200 (compute capability 9.0): the per-multiprocessor limits and
//! a kernel's resident blocks, shared by the `cuOccupancy*` functions (`exports_cudarc`) and the
//! cooperative-launch checks (`launch_attributes`, `cuLaunchCooperativeKernel`).

use crate::Sim;
use crate::base::errors::INVALID_VALUE;
use crate::base::types::{CuResult, Raw};
use crate::resources::kernels::{
    ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, ATTR_MAX_THREADS_PER_BLOCK,
    ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, ATTR_NUM_REGS, ATTR_SHARED_SIZE_BYTES,
};

/// `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`.
pub const COOPERATIVE_LAUNCH_TOO_LARGE: CuResult = 720;

/// Per-SM limits of an H200.
pub(crate) const SMS: u64 = 132;
pub(crate) const MAX_WARPS_PER_SM: u64 = 64;
pub(crate) const MAX_BLOCKS_PER_SM: u64 = 32;
pub(crate) const REGS_PER_SM: u64 = 65536;
/// Registers are allocated per warp in units of 256.
pub(crate) const REG_UNIT: u64 = 256;
pub(crate) const SHARED_PER_SM: u64 = 233_472;
/// Shared memory the system reserves per block (1 KiB on compute capability 8.0 and later).
pub(crate) const SHARED_RESERVED: u64 = 1024;
pub(crate) const SHARED_UNIT: u64 = 128;

/// What occupancy needs to know about a kernel on a device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KernelLimits {
    pub(crate) max_threads: u64,
    pub(crate) regs: u64,
    pub(crate) static_shared: u64,
    pub(crate) max_dynamic: u64,
    pub(crate) non_portable_cluster: bool,
}

pub(crate) fn round_up(value: u64, unit: u64) -> u64 {
    value.div_ceil(unit) * unit
}

impl KernelLimits {
    pub(crate) fn of(sim: &mut Sim, function: Raw, what: &str) -> Result<KernelLimits, CuResult> {
        let callee = sim.callee(function)?;
        let device = sim.callee_device(callee, what)?;
        let mut attr = |a| {
            sim.kernel_attribute(callee.kernel, a, device)
                .map(|v| v.max(0) as u64)
        };
        Ok(KernelLimits {
            max_threads: attr(ATTR_MAX_THREADS_PER_BLOCK)?,
            regs: attr(ATTR_NUM_REGS)?,
            static_shared: attr(ATTR_SHARED_SIZE_BYTES)?,
            max_dynamic: attr(ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
            non_portable_cluster: attr(ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED)? != 0,
        })
    }

    /// Resident blocks per SM for `block` threads and `dynamic` bytes of dynamic shared
    /// memory (0 when the block cannot run at all).
    pub(crate) fn blocks_per_sm(&self, block: u64, dynamic: u64) -> u64 {
        if block == 0 || block > self.max_threads || dynamic > self.max_dynamic {
            return 0;
        }
        let warps = block.div_ceil(32);
        let by_warps = MAX_WARPS_PER_SM / warps;
        let regs_per_block = round_up(self.regs.max(1) * 32, REG_UNIT) * warps;
        let by_regs = REGS_PER_SM / regs_per_block;
        let shared = round_up(self.static_shared + dynamic + SHARED_RESERVED, SHARED_UNIT);
        let by_shared = SHARED_PER_SM / shared;
        MAX_BLOCKS_PER_SM.min(by_warps).min(by_regs).min(by_shared)
    }

    /// The largest dynamic shared memory per block that lets `blocks` blocks of `block`
    /// threads reside on one SM: `CUDA_ERROR_INVALID_VALUE` when that many cannot reside at
    /// all. As the H200's driver answers, the per-block reserve is not subtracted (8 blocks
    /// of 256 threads: 29184 bytes, 228 KiB / 8).
    pub(crate) fn available_dynamic(&self, blocks: u64, block: u64) -> Result<u64, CuResult> {
        if blocks == 0 || block == 0 || self.blocks_per_sm(block, 0) < blocks {
            return Err(INVALID_VALUE);
        }
        let per_block = (SHARED_PER_SM / blocks) / SHARED_UNIT * SHARED_UNIT;
        Ok(per_block
            .saturating_sub(self.static_shared)
            .min(self.max_dynamic))
    }
}
