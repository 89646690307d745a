//! The shape of a launch ([`LaunchConfig`]): grid, block and dynamic shared memory, the limits
//! every device has, and the one spread of the shape into the driver's fields.

use cudarc::driver::sys::{self, CUstream};

use crate::error::{Error, LaunchProblem, Result};

/// The shape of a launch: grid and block dimensions and dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in x, y and z.
    pub grid: [u32; 3],
    /// Threads per block in x, y and z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// This shape as the driver takes it, on `stream` with `attributes`: the one place where
    /// the grid and block are spread into the driver's fields (launches, kernel nodes).
    pub(crate) fn raw(
        &self,
        stream: CUstream,
        attributes: &mut [sys::CUlaunchAttribute],
    ) -> sys::CUlaunchConfig {
        sys::CUlaunchConfig {
            gridDimX: self.grid[0],
            gridDimY: self.grid[1],
            gridDimZ: self.grid[2],
            blockDimX: self.block[0],
            blockDimY: self.block[1],
            blockDimZ: self.block[2],
            sharedMemBytes: self.shared_mem_bytes,
            hStream: stream,
            attrs: attributes.as_mut_ptr(),
            numAttrs: attributes.len() as u32,
        }
    }

    /// A one-dimensional launch of at least `elements` threads, `block` per block (the grid
    /// is rounded up; `elements` 0 still launches one block). [`Self::for_elements`] takes a
    /// `usize`.
    #[inline]
    pub fn linear(elements: u32, block: u32) -> Self {
        let block = block.max(1);
        LaunchConfig {
            grid: [elements.div_ceil(block).max(1), 1, 1],
            block: [block, 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// A one-dimensional launch of at least `elements` threads (a buffer's `len()`), `block`
    /// per block: the grid is rounded up, and `elements` 0 still launches one block. More
    /// blocks than grid x allows is [`LaunchProblem::TooManyElements`], and a block of 0
    /// threads or more than 1024 is [`LaunchProblem::Block`].
    pub fn for_elements(elements: usize, block: u32) -> Result<Self> {
        if block == 0 || block > 1024 {
            return Err(config_error(LaunchProblem::Block {
                axis: 'x',
                threads: block,
                limit: 1024,
            }));
        }
        let blocks = elements.div_ceil(block as usize).max(1);
        match u32::try_from(blocks) {
            Ok(blocks) if blocks <= i32::MAX as u32 => Ok(LaunchConfig {
                grid: [blocks, 1, 1],
                block: [block, 1, 1],
                shared_mem_bytes: 0,
            }),
            _ => Err(config_error(LaunchProblem::TooManyElements {
                elements,
                block,
            })),
        }
    }

    /// This configuration with `bytes` of dynamic shared memory per block. A launch checks it
    /// against the kernel's limit on its device ([`LaunchProblem::SharedMemory`]); a size
    /// above `u32::MAX` is kept as `u32::MAX`, which every launch refuses.
    pub fn with_shared_mem(self, bytes: usize) -> Self {
        LaunchConfig {
            shared_mem_bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
            ..self
        }
    }

    /// The total number of threads per block.
    #[inline]
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&d| u64::from(d)).product()
    }

    /// Checks the limits every device has, and the kernel's own on the launch's device.
    #[inline]
    pub(crate) fn check(&self, max_threads: u32, max_shared: u32) -> Result<()> {
        // The common case in straight-line compares: `count - 1 < limit` (wrapping) holds
        // exactly when `count` is neither 0 nor above `limit`.
        let within = |counts: [u32; 3], limits: [u32; 3]| {
            (counts[0].wrapping_sub(1) < limits[0])
                & (counts[1].wrapping_sub(1) < limits[1])
                & (counts[2].wrapping_sub(1) < limits[2])
        };
        if within(self.grid, GRID_LIMITS)
            & within(self.block, BLOCK_LIMITS)
            & (self.threads_per_block() <= u64::from(max_threads))
            & (self.shared_mem_bytes <= max_shared)
        {
            return Ok(());
        }
        self.refusal(max_threads, max_shared)
    }

    /// The error [`Self::check`] returns: the first rule broken, in the order they are listed.
    #[cold]
    fn refusal(&self, max_threads: u32, max_shared: u32) -> Result<()> {
        if let Some((axis, blocks, limit)) = first_out_of_range(self.grid, GRID_LIMITS) {
            return Err(config_error(LaunchProblem::Grid {
                axis,
                blocks,
                limit,
            }));
        }
        if let Some((axis, threads, limit)) = first_out_of_range(self.block, BLOCK_LIMITS) {
            return Err(config_error(LaunchProblem::Block {
                axis,
                threads,
                limit,
            }));
        }
        if self.threads_per_block() > u64::from(max_threads) {
            return Err(config_error(LaunchProblem::ThreadsPerBlock {
                threads: self.threads_per_block(),
                max: max_threads,
            }));
        }
        if self.shared_mem_bytes > max_shared {
            return Err(config_error(LaunchProblem::SharedMemory {
                bytes: self.shared_mem_bytes,
                max: max_shared,
            }));
        }
        Ok(())
    }
}

/// The most blocks per grid axis, x then y then z.
const GRID_LIMITS: [u32; 3] = [i32::MAX as u32, 65_535, 65_535];
/// The most threads per block axis.
const BLOCK_LIMITS: [u32; 3] = [1024, 1024, 64];

/// The first axis, x then y then z, whose count is 0 or above its limit: its name, the count
/// and the limit.
fn first_out_of_range(counts: [u32; 3], limits: [u32; 3]) -> Option<(char, u32, u32)> {
    ['x', 'y', 'z']
        .into_iter()
        .zip(counts.into_iter().zip(limits))
        .map(|(axis, (count, limit))| (axis, count, limit))
        .find(|&(_, count, limit)| count == 0 || count > limit)
}

pub(crate) fn config_error(what: LaunchProblem) -> Error {
    Error::BadLaunch { what }
}
