//! The launch attributes that `cuLaunchKernelEx` checks beyond clusters and priorities:
//! cooperative and programmatic dependent launches (occupancy itself is modelled with the
//! other `cuOccupancy*` functions, in `exports_cudarc`).
//!
//! A cooperative launch (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`) whose grid exceeds what can be
//! resident at once (the occupancy model's blocks per multiprocessor for the launch's block
//! and shared memory, times 132) is a **cooperative-too-large** violation and
//! `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`; grid-wide synchronisation itself is not
//! simulated (blocks run one after another). Programmatic stream serialization is accepted:
//! launches run one after another, so a dependent kernel always starts after its predecessor
//! finished (`griddepcontrol` is a no-op in the interpreter). A programmatic event must be a
//! live event of the launch's context with timing disabled and not interprocess; it is
//! recorded on the stream after the kernel (every block has triggered by then).

use crate::Sim;
use crate::base::errors::INVALID_VALUE;
use crate::base::types::{CuResult, LaunchAttribute, Raw};
use crate::resources::launch::{ATTRIBUTE_COOPERATIVE, ATTRIBUTE_PROGRAMMATIC_EVENT, Launch};
use crate::resources::occupancy::{COOPERATIVE_LAUNCH_TOO_LARGE, KernelLimits, SMS};

impl Sim {
    /// The checks of the attributes of this file on a launch; returns the programmatic
    /// event to record after the kernel, if any.
    pub fn check_dependent_attributes(
        &mut self,
        launch: &Launch,
        attributes: &[LaunchAttribute],
        context: Raw,
    ) -> Result<Option<Raw>, CuResult> {
        let mut event = None;
        for attribute in attributes {
            match attribute.id {
                ATTRIBUTE_COOPERATIVE if attribute.value[..4] != [0; 4] => {
                    let threads: u64 = launch.block.iter().map(|&d| u64::from(d)).product();
                    let limits = KernelLimits::of(self, launch.kernel, "cuLaunchKernelEx")?;
                    let per_sm = limits.blocks_per_sm(threads, u64::from(launch.shared));
                    let blocks: u64 = launch.grid.iter().map(|&d| u64::from(d)).product();
                    if blocks > per_sm * SMS {
                        self.checker.violation(
                            "cooperative-too-large",
                            format!(
                                "cooperative launch of {blocks} blocks; at most {} ({per_sm} per multiprocessor) can be resident at once",
                                per_sm * SMS
                            ),
                        );
                        return Err(COOPERATIVE_LAUNCH_TOO_LARGE);
                    }
                }
                ATTRIBUTE_PROGRAMMATIC_EVENT => {
                    let raw = Raw::from_le_bytes(attribute.value[..8].try_into().expect("8"));
                    let flags = i32::from_le_bytes(attribute.value[8..12].try_into().expect("4"));
                    if flags != 0 {
                        return Err(INVALID_VALUE);
                    }
                    self.check_programmatic_event(raw, context)?;
                    event = Some(raw);
                }
                _ => {}
            }
        }
        Ok(event)
    }
}

impl Sim {
    /// A programmatic launch event: live, of the launch's context, timing disabled and not
    /// interprocess (as the driver requires).
    fn check_programmatic_event(&mut self, raw: Raw, context: Raw) -> Result<(), CuResult> {
        let event = self.event(raw)?;
        let (own, flags) = (event.context, event.flags);
        if own != context {
            self.checker.violation(
                "wrong-context",
                format!(
                    "programmatic event {raw:#x} of context {own:#x} on a launch in context {context:#x}"
                ),
            );
            return Err(crate::base::errors::INVALID_HANDLE);
        }
        use crate::base::types::{EVENT_DISABLE_TIMING, EVENT_INTERPROCESS};
        if flags & EVENT_DISABLE_TIMING == 0 || flags & EVENT_INTERPROCESS != 0 {
            return Err(INVALID_VALUE);
        }
        Ok(())
    }
}
