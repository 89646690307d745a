//! Kernel launches (`cuLaunchKernel`, `cuLaunchKernelEx`, kernel nodes): the driver's checks
//! of the configuration, and the copy of the arguments. Arguments are copied when the launch
//! is made (or captured, or added as a node), as the driver does; the memory they point to is
//! touched when the kernel runs.

use std::ffi::c_void;

use crate::Sim;
use crate::base::errors::{INVALID_CONTEXT, INVALID_VALUE};
use crate::base::types::{CuResult, LaunchAttribute, Raw};
use crate::resources::kernels::{
    DEFAULT_DYNAMIC_SHARED, MAX_DYNAMIC_SHARED, MAX_THREADS_PER_BLOCK,
};

/// `CUDA_ERROR_INVALID_CLUSTER_SIZE`.
pub const INVALID_CLUSTER_SIZE: CuResult = 912;

const ATTRIBUTE_IGNORE: u32 = 0;
const ATTRIBUTE_CLUSTER_DIMENSION: u32 = 4;
const ATTRIBUTE_PRIORITY: u32 = 8;
/// Checked in `launch_attributes`.
pub const ATTRIBUTE_COOPERATIVE: u32 = 2;
pub const ATTRIBUTE_PROGRAMMATIC_SERIALIZATION: u32 = 6;
pub const ATTRIBUTE_PROGRAMMATIC_EVENT: u32 = 7;
/// Blocks per cluster without `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`, and with.
const PORTABLE_CLUSTER: u64 = 8;
const NON_PORTABLE_CLUSTER: u64 = 16;

/// A launch, validated, with its arguments copied.
#[derive(Clone, Debug)]
pub struct Launch {
    pub kernel: Raw,
    /// The context a `CUfunction` belongs to; `None` for a `CUkernel`.
    pub context: Option<Raw>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    /// The parameter buffer, laid out as the PTX signature says.
    pub args: Vec<u8>,
    /// The executable graph whose launch runs it (`None`: a launch on a stream); set at
    /// instantiation, for its conditional-handle sets.
    pub exec: Option<Raw>,
}

impl Sim {
    /// Checks a launch of `f` on device `device` as the driver does, and copies the
    /// arguments: one pointer per parameter in `params` (`void **kernelParams`), each read with
    /// the parameter's size. `extra` (the packed-buffer form) is not supported.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_launch(
        &mut self,
        f: Raw,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
        device: usize,
    ) -> Result<Launch, CuResult> {
        let callee = self.callee(f)?;
        if let Some(context) = callee.context {
            self.context(context)?;
        }
        if !extra.is_null() {
            return Err(INVALID_VALUE);
        }
        if grid.contains(&0) || block.contains(&0) {
            return Err(INVALID_VALUE);
        }
        if grid[0] > i32::MAX as u32 || grid[1] > 65535 || grid[2] > 65535 {
            return Err(INVALID_VALUE);
        }
        if block[0] > 1024 || block[1] > 1024 || block[2] > 64 {
            return Err(INVALID_VALUE);
        }
        let threads: u64 = block.iter().map(|&d| u64::from(d)).product();
        if threads > MAX_THREADS_PER_BLOCK as u64 {
            return Err(INVALID_VALUE);
        }
        let kernel = &self.kernels[&callee.kernel];
        let limit = kernel.attrs[device]
            .max_dynamic_shared
            .min(MAX_DYNAMIC_SHARED);
        if u64::from(shared) > limit as u64 {
            return Err(INVALID_VALUE);
        }
        // Static and dynamic shared memory together: at most 48 KiB unless the kernel's
        // dynamic limit was raised (opted in), then the device's opt-in maximum.
        let static_shared = kernel.sizes[0];
        let total_limit = if kernel.attrs[device].max_dynamic_shared > DEFAULT_DYNAMIC_SHARED {
            MAX_DYNAMIC_SHARED as u64
        } else {
            DEFAULT_DYNAMIC_SHARED as u64
        };
        if static_shared + u64::from(shared) > total_limit {
            return Err(INVALID_VALUE);
        }
        let entry = &kernel.entry;
        let mut args = vec![0u8; entry.param_bytes()];
        if !entry.params.is_empty() && params.is_null() {
            return Err(INVALID_VALUE);
        }
        for (index, param) in entry.params.iter().enumerate() {
            // SAFETY: `kernelParams` holds one pointer per kernel parameter by the API's
            // contract; the kernel has `entry.params.len()` of them.
            let value = unsafe { params.add(index).read() };
            if value.is_null() {
                return Err(INVALID_VALUE);
            }
            let slot = param
                .offset
                .checked_add(param.size)
                .and_then(|end| args.get_mut(param.offset..end))
                .ok_or(INVALID_VALUE)?;
            // SAFETY: each pointer addresses an argument of the parameter's size, by the
            // API's contract; the destination is `slot`, exactly `param.size` bytes of `args`.
            unsafe {
                std::ptr::copy_nonoverlapping(value.cast::<u8>(), slot.as_mut_ptr(), param.size)
            };
        }
        Ok(Launch {
            kernel: callee.kernel,
            context: callee.context,
            grid,
            block,
            shared,
            args,
            exec: None,
        })
    }

    /// The launch runs in `context` (the current one): a `CUfunction` of another context is
    /// a wrong-context use.
    pub fn check_launch_context(&mut self, launch: &Launch, context: Raw) -> Result<(), CuResult> {
        if let Some(own) = launch.context
            && own != context
        {
            self.checker.violation(
                "wrong-context",
                format!("function of context {own:#x} launched with context {context:#x} current"),
            );
            return Err(INVALID_CONTEXT);
        }
        Ok(())
    }

    /// The launch attributes of `cuLaunchKernelEx`. Cluster dimensions are checked against
    /// the grid and the cluster size limit, priorities accepted, cooperative and programmatic attributes checked in `launch_attributes`; every
    /// other attribute (access policy windows, memory sync domains…) is not modelled
    /// and refused with `CUDA_ERROR_INVALID_VALUE`, so a program never silently loses what it
    /// asked for.
    pub fn check_launch_attributes(
        &mut self,
        launch: &Launch,
        attributes: &[LaunchAttribute],
        device: usize,
    ) -> Result<(), CuResult> {
        for attribute in attributes {
            let word = |i: usize| {
                u32::from_le_bytes(attribute.value[4 * i..4 * i + 4].try_into().expect("4"))
            };
            match attribute.id {
                ATTRIBUTE_IGNORE | ATTRIBUTE_PRIORITY => {}
                // Checked in `launch_attributes`.
                ATTRIBUTE_COOPERATIVE
                | ATTRIBUTE_PROGRAMMATIC_SERIALIZATION
                | ATTRIBUTE_PROGRAMMATIC_EVENT => {}
                ATTRIBUTE_CLUSTER_DIMENSION => {
                    let cluster = [word(0), word(1), word(2)];
                    if cluster.contains(&0)
                        || launch
                            .grid
                            .iter()
                            .zip(cluster)
                            .any(|(&grid, cluster)| grid % cluster != 0)
                    {
                        return Err(INVALID_VALUE);
                    }
                    let non_portable =
                        self.kernels[&launch.kernel].attrs[device].non_portable_cluster != 0;
                    let limit = if non_portable {
                        NON_PORTABLE_CLUSTER
                    } else {
                        PORTABLE_CLUSTER
                    };
                    let size: u64 = cluster.iter().map(|&d| u64::from(d)).product();
                    if size > limit {
                        return Err(INVALID_CLUSTER_SIZE);
                    }
                }
                _ => return Err(INVALID_VALUE),
            }
        }
        Ok(())
    }
}
