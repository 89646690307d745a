//! Occupancy: how many blocks of a kernel can be resident on a multiprocessor, which block
//! size keeps a device busiest, how much dynamic shared memory a block may still use, and how
//! many clusters fit at once (`cuOccupancy*`).
//!
//! A kernel belongs to no context, but the driver answers occupancy questions for the device
//! of the current context: each call here takes the context to ask in, and makes it current
//! for the call. A `CUkernel` is passed where the driver takes a `CUfunction`, which the
//! occupancy calls accept (the current context resolves it).
//!
//! The dynamic shared memory of [`KernelHandle::potential_block_size`] can depend on the
//! block size: [`SharedPerBlock::PerBlock`] takes a plain Rust function, which the driver
//! calls (on the calling thread, during the call) through a trampoline that reads it from a
//! thread-local slot. A panic in it is caught at the boundary and resumed after the driver
//! call has returned, so it never unwinds through the driver.

use std::cell::Cell;
use std::ffi::c_int;

use cudarc::driver::sys::{self, CUfunction};

use crate::code::config::LaunchConfig;
use crate::code::kernel::KernelHandle;
use crate::code::launch::LaunchOptions;
use crate::driver::call::{driver, out};
use crate::driver::current::in_context;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;

/// Flags of the occupancy calculation (`CUoccupancy_flags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OccupancyFlags {
    /// The default calculation.
    #[default]
    Default,
    /// Assume the L1/shared-memory split the kernel's carve-out asks for cannot be overridden
    /// by the global caching setting (`CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE`).
    DisableCachingOverride,
}

impl OccupancyFlags {
    fn to_raw(self) -> u32 {
        match self {
            OccupancyFlags::Default => sys::CUoccupancy_flags::CU_OCCUPANCY_DEFAULT as u32,
            OccupancyFlags::DisableCachingOverride => {
                sys::CUoccupancy_flags::CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE as u32
            }
        }
    }
}

/// The dynamic shared memory a block uses, for [`KernelHandle::potential_block_size`].
#[derive(Clone, Copy, Debug)]
pub enum SharedPerBlock {
    /// The same number of bytes whatever the block size.
    Fixed(usize),
    /// Bytes as a function of the block size (threads).
    PerBlock(fn(u32) -> usize),
}

/// The answer of [`KernelHandle::potential_block_size`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PotentialBlockSize {
    /// The block size (threads) with the highest occupancy.
    pub block: u32,
    /// The smallest grid that reaches that occupancy on the whole device.
    pub min_grid: u32,
}

/// A Rust shared-memory function of [`SharedPerBlock::PerBlock`].
type SharedFor = fn(u32) -> usize;

thread_local! {
    /// The function [`trampoline`] calls, set for the duration of one driver call.
    static SHARED_FOR_BLOCK: Cell<Option<SharedFor>> = const { Cell::new(None) };
    /// A panic caught in [`trampoline`], resumed once the driver call has returned.
    static PANIC: Cell<Option<Box<dyn std::any::Any + Send>>> = const { Cell::new(None) };
}

/// The `CUoccupancyB2DSize` the driver calls: the thread's current function, or 0 bytes if
/// none is set (the driver called it from another thread) or after a caught panic.
extern "C" fn trampoline(block: c_int) -> usize {
    let Some(function) = SHARED_FOR_BLOCK.with(Cell::get) else {
        return 0;
    };
    let block = u32::try_from(block).unwrap_or(0);
    match std::panic::catch_unwind(|| function(block)) {
        Ok(bytes) => bytes,
        Err(payload) => {
            PANIC.with(|slot| {
                // Only the first panic is kept; later ones are dropped here.
                let first = slot.take().unwrap_or(payload);
                slot.set(Some(first));
            });
            0
        }
    }
}

/// Restores the previous function when the driver call is over (also on an error return).
struct Installed(Option<SharedFor>);

impl Drop for Installed {
    fn drop(&mut self) {
        SHARED_FOR_BLOCK.with(|slot| slot.set(self.0));
    }
}

fn positive(call: &'static str, value: c_int) -> Result<u32> {
    u32::try_from(value).map_err(|_| Error::DriverAnomaly {
        call,
        what: format!("a negative answer: {value}"),
    })
}

fn int(value: u32, what: &str) -> Result<c_int> {
    c_int::try_from(value)
        .map_err(|_| Error::InvalidArgument(format!("{what} {value} is too large")))
}

impl KernelHandle {
    fn as_function(&self) -> CUfunction {
        self.as_cu() as CUfunction
    }

    /// The most blocks of `block_threads` threads, each with `dynamic_shared` bytes of
    /// dynamic shared memory, that can be resident on one multiprocessor of `context`'s device
    /// (`cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`). 0 when such a block cannot
    /// run at all (too many threads or too much shared memory for this kernel).
    pub fn max_active_blocks_per_sm(
        &self,
        context: &ContextHandle,
        block_threads: u32,
        dynamic_shared: usize,
        flags: OccupancyFlags,
    ) -> Result<u32> {
        let block = int(block_threads, "a block of")?;
        let value = in_context(context.as_cu(), || {
            out(|blocks| {
                // SAFETY: the kernel is alive (its handle keeps the library loaded), the
                // context is current, and `blocks` is a valid out-pointer.
                unsafe {
                    driver!(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                        blocks,
                        self.as_function(),
                        block,
                        dynamic_shared,
                        flags.to_raw()
                    ))
                }
            })
        })?;
        positive(
            "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
            value,
        )
    }

    /// The block size that gives this kernel the highest occupancy on `context`'s device, and
    /// the smallest grid that reaches it (`cuOccupancyMaxPotentialBlockSizeWithFlags`).
    /// `block_limit` caps the block size (0: the kernel's own limit).
    pub fn potential_block_size(
        &self,
        context: &ContextHandle,
        shared: SharedPerBlock,
        block_limit: u32,
        flags: OccupancyFlags,
    ) -> Result<PotentialBlockSize> {
        let limit = int(block_limit, "a block limit of")?;
        let (callback, fixed): (sys::CUoccupancyB2DSize, usize) = match shared {
            SharedPerBlock::Fixed(bytes) => (None, bytes),
            SharedPerBlock::PerBlock(_) => (Some(trampoline), 0),
        };
        let (mut min_grid, mut block) = (0 as c_int, 0 as c_int);
        let status = in_context(context.as_cu(), || {
            let _installed = match shared {
                SharedPerBlock::PerBlock(function) => Some(Installed(
                    SHARED_FOR_BLOCK.with(|slot| slot.replace(Some(function))),
                )),
                SharedPerBlock::Fixed(_) => None,
            };
            // SAFETY: the kernel is alive, the context is current, both out-pointers are
            // valid; the callback, if any, is `trampoline`, which matches
            // `CUoccupancyB2DSize`, never unwinds, and reads the function installed above
            // for exactly this call.
            unsafe {
                driver!(cuOccupancyMaxPotentialBlockSizeWithFlags(
                    &mut min_grid,
                    &mut block,
                    self.as_function(),
                    callback,
                    fixed,
                    limit,
                    flags.to_raw()
                ))
            }
        });
        if let Some(payload) = PANIC.with(Cell::take) {
            std::panic::resume_unwind(payload);
        }
        status?;
        Ok(PotentialBlockSize {
            block: positive("cuOccupancyMaxPotentialBlockSizeWithFlags", block)?,
            min_grid: positive("cuOccupancyMaxPotentialBlockSizeWithFlags", min_grid)?,
        })
    }

    /// The most dynamic shared memory per block that still lets `blocks_per_sm` blocks of
    /// `block_threads` threads be resident on one multiprocessor of `context`'s device
    /// (`cuOccupancyAvailableDynamicSMemPerBlock`).
    pub fn available_dynamic_shared(
        &self,
        context: &ContextHandle,
        blocks_per_sm: u32,
        block_threads: u32,
    ) -> Result<usize> {
        let blocks = int(blocks_per_sm, "a count of")?;
        let threads = int(block_threads, "a block of")?;
        in_context(context.as_cu(), || {
            out(|bytes| {
                // SAFETY: the kernel is alive, the context is current, `bytes` is a valid
                // out-pointer.
                unsafe {
                    driver!(cuOccupancyAvailableDynamicSMemPerBlock(
                        bytes,
                        self.as_function(),
                        blocks,
                        threads
                    ))
                }
            })
        })
    }

    /// The most clusters of `cluster` blocks, with `config`'s block and shared memory, that
    /// can be resident at once on `context`'s device (`cuOccupancyMaxActiveClusters`). The
    /// cluster must divide `config`'s grid and hold at most 8 blocks, as for a launch.
    pub fn max_active_clusters(
        &self,
        context: &ContextHandle,
        config: &LaunchConfig,
        cluster: [u32; 3],
    ) -> Result<u32> {
        let options = LaunchOptions {
            cluster: Some(cluster),
            ..LaunchOptions::default()
        };
        options.check(config)?;
        let (mut attributes, count) = options.attributes();
        let value = in_context(context.as_cu(), || {
            let raw = config.raw(std::ptr::null_mut(), &mut attributes[..count as usize]);
            out(|clusters| {
                // SAFETY: the kernel is alive, the context is current; `raw` and its one
                // attribute live for the call; `clusters` is a valid out-pointer.
                unsafe {
                    driver!(cuOccupancyMaxActiveClusters(
                        clusters,
                        self.as_function(),
                        &raw
                    ))
                }
            })
        })?;
        positive("cuOccupancyMaxActiveClusters", value)
    }
}
