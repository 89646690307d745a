//! Cooperative and programmatic dependent launches: the attributes of [`LaunchOptions`] beyond
//! clusters and priorities, and the checks they get before the driver is called.
//!
//! # Cooperative launches
//!
//! `cooperative: true` sets `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`: every block of the grid is
//! resident at once, so the kernel may synchronise the whole grid (cooperative groups'
//! `grid.sync()`). A grid that cannot be resident at once would make the driver fail the
//! launch (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`); here it is refused before the driver is
//! called, as [`LaunchProblem::CooperativeGrid`], against the kernel's own occupancy on the
//! stream's device: `cuOccupancyMaxActiveBlocksPerMultiprocessor` for this kernel, block size
//! and dynamic shared memory, times the device's multiprocessors. A device without
//! `CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH` is [`LaunchProblem::CooperativeUnsupported`].
//!
//! # Programmatic dependent launches, and why frees stay ordered
//!
//! `programmatic_serialization: true` sets
//! `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` on a launch B: B may start as soon
//! as the previous kernel A of the stream triggers (`griddepcontrol.launch_dependents`) or
//! starts to finish, instead of after A has completed; B's threads wait for A's completion and
//! memory with `griddepcontrol.wait`. `programmatic_event` sets
//! `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`: the launch records one of our events
//! (timing disabled, of the stream's context) once every block has triggered, for other
//! streams to wait on.
//!
//! The relaxation is between B and its predecessor kernel only. Every buffer argument is
//! still reported as used on the launch's stream, and a free of a buffer is queued (or
//! waited for) as an ordinary stream operation after the uses it is ordered behind. An
//! ordinary operation waits for all work queued before it on the stream to complete, both
//! kernels included, whatever attribute B carries; so:
//!
//! - **A buffer freed after B** (used by A, by B, or both): the free is queued after B, and
//!   runs after A and B have both completed.
//! - **A buffer used only by A, whose last handle is dropped between the two launches**: the
//!   free is queued on the stream after A and before B. It waits for A to complete; B does not
//!   touch the buffer, and the free is not a kernel, so B's relaxation (which is relative to
//!   the previous *kernel* of the stream) can neither make the free overtake A nor let B run
//!   against freed memory it never uses.
//!
//! An event of `programmatic_event` may fire before the kernel completes, so it must not be
//! used to order a free: it is never one of the events this crate orders frees with, and a
//! launch reports its buffers through the stream, not through the event. The event is borrowed
//! for the call: the driver takes the record at the launch, and an event destroyed while a
//! record is pending is released by the driver once that record completes (as for
//! `cuEventRecord`), so the handle need not outlive the launch; its context is kept alive by
//! the event's own handle and the stream's.

use cudarc::driver::sys::{self, CUcontext};

use crate::code::config::LaunchConfig;
use crate::code::kernel::KernelHandle;
use crate::code::launch::LaunchOptions;
use crate::error::{Error, LaunchProblem, Result};
use crate::exec::device::Device;
use crate::exec::stream::StreamHandle;

impl LaunchOptions {
    /// Checks that need no driver call: the event's flags.
    pub(crate) fn check_attributes(&self) -> Result<()> {
        if let Some(programmatic) = &self.programmatic_event {
            let flags = programmatic.event.flags();
            if flags.timing || flags.interprocess {
                return Err(Error::BadFlags {
                    what: "a programmatic launch event must be created with timing disabled and \
                           not interprocess",
                });
            }
        }
        Ok(())
    }

    /// Checks against the stream's device `ordinal`, before anything is queued: cooperative
    /// support and the occupancy limit of a cooperative grid. Returns the multiprocessors a
    /// cooperative grid needs to be resident at once (0 for a launch that is not cooperative).
    pub(crate) fn check_on_device(
        &self,
        kernel: &KernelHandle,
        stream: &StreamHandle,
        config: &LaunchConfig,
        ordinal: usize,
    ) -> Result<u32> {
        if !self.cooperative {
            return Ok(0);
        }
        let properties = Device::new(ordinal)?.properties()?;
        if properties.cooperative_launch != Some(true) {
            return Err(Error::BadLaunch {
                what: LaunchProblem::CooperativeUnsupported { ordinal },
            });
        }
        let context = stream.owning_context()?;
        let per_sm = kernel.max_active_blocks_per_sm(
            &context,
            config.threads_per_block() as u32,
            config.shared_mem_bytes as usize,
            crate::code::occupancy::OccupancyFlags::Default,
        )?;
        // A green context's stream runs on its share of the SMs, not the whole device's.
        let multiprocessors = context
            .sm_count()
            .unwrap_or(properties.multiprocessor_count);
        let max = u64::from(per_sm) * u64::from(multiprocessors);
        let blocks: u64 = config.grid.iter().map(|&d| u64::from(d)).product();
        if blocks > max {
            return Err(Error::BadLaunch {
                what: LaunchProblem::CooperativeGrid {
                    blocks,
                    max,
                    per_sm,
                    multiprocessors,
                },
            });
        }
        // The multiprocessors the grid needs, for a graph that keeps this launch as a node.
        Ok(u32::try_from(blocks.div_ceil(u64::from(per_sm.max(1)))).unwrap_or(u32::MAX))
    }

    /// Checks in the context the launch runs in (current during the call): the event's.
    pub(crate) fn check_in_context(&self, context: CUcontext) -> Result<()> {
        match &self.programmatic_event {
            Some(programmatic) => programmatic.event.require_recordable_in(context),
            None => Ok(()),
        }
    }

    /// Writes the attributes of this file into `slots`; returns how many.
    pub(crate) fn fill_attributes(&self, slots: &mut [sys::CUlaunchAttribute]) -> usize {
        use sys::CUlaunchAttributeID as Id;
        let mut count = 0;
        if self.cooperative {
            slots[count].id = Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
            slots[count].value.cooperative = 1;
            count += 1;
        }
        if self.programmatic_serialization {
            slots[count].id = Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            slots[count].value.programmaticStreamSerializationAllowed = 1;
            count += 1;
        }
        if let Some(programmatic) = &self.programmatic_event {
            slots[count].id = Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
            slots[count].value.programmaticEvent.event = programmatic.event.as_cu();
            slots[count].value.programmaticEvent.flags = 0;
            slots[count].value.programmaticEvent.triggerAtBlockStart =
                i32::from(programmatic.trigger_at_block_start);
            count += 1;
        }
        count
    }
}
