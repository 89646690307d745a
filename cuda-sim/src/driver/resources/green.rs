//! Green contexts: device SM resources, splitting them into groups, resource descriptors, and
//! green contexts built from them. A green context owns an ordinary (non-primary) context,
//! which `cuCtxFromGreenCtx` hands out, so everything that works in a context (current-context
//! checks, streams, events, allocations, launches) works in it. SM counts are bookkeeping
//! only: work runs on the host whatever the partition.
//!
//! With `CUDA_SIM_NO_GREEN_CONTEXTS=1` every function here answers `CUDA_ERROR_NOT_SUPPORTED`,
//! like a driver or device without green contexts, so a program's fallback can be tested.

use crate::base::errors::{INVALID_VALUE, NOT_SUPPORTED};
use crate::base::types::{
    CuResult, DEV_RESOURCE_TYPE_SM, DevResource, DevSmResource, GREEN_CTX_DEFAULT_STREAM, Raw,
    SM_SPLIT_IGNORE_SM_COSCHEDULING, STREAM_NON_BLOCKING,
};
use crate::resources::contexts;
use crate::{Kind, Sim};

/// `CUDA_ERROR_INVALID_RESOURCE_TYPE`.
pub const INVALID_RESOURCE_TYPE: CuResult = 914;
/// `CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION`.
pub const INVALID_RESOURCE_CONFIGURATION: CuResult = 915;

/// SMs of an H200.
pub const SM_COUNT: u32 = 132;
/// Hopper's minimum SM partition, and the multiple a group must be of (a group must be able to
/// co-schedule clusters); 2 when the program waives co-scheduling.
pub const MIN_PARTITION: u32 = 8;
pub const COSCHEDULED_ALIGNMENT: u32 = 8;
pub const UNCOSCHEDULED_ALIGNMENT: u32 = 2;

/// Written into the driver's private part of a `CUdevResource`: who made it, for which device.
const RESOURCE_MAGIC: &[u8; 8] = b"CUSIMRES";

/// A `CUdevResourceDesc`: SMs of one device.
#[derive(Clone, Copy, Debug)]
pub struct ResourceDesc {
    pub device: usize,
    pub sm_count: u32,
}

/// A green context.
#[derive(Clone, Copy, Debug)]
pub struct GreenContext {
    pub raw: Raw,
    pub device: usize,
    pub sm_count: u32,
    /// The context `cuCtxFromGreenCtx` returns.
    pub context: Raw,
}

/// An SM resource of `sm_count` SMs of `device`.
pub fn sm_resource(device: usize, sm_count: u32) -> DevResource {
    let mut internal = [0u8; 92];
    internal[..8].copy_from_slice(RESOURCE_MAGIC);
    internal[8..12].copy_from_slice(&(device as u32).to_le_bytes());
    DevResource {
        kind: DEV_RESOURCE_TYPE_SM,
        internal,
        sm: DevSmResource {
            sm_count,
            min_partition: MIN_PARTITION,
            coscheduled_alignment: COSCHEDULED_ALIGNMENT,
        },
        rest: [0; 36],
    }
}

/// The device of a resource this simulator made, or `CUDA_ERROR_INVALID_VALUE`.
fn resource_device(resource: &DevResource) -> Result<usize, CuResult> {
    if &resource.internal[..8] != RESOURCE_MAGIC {
        return Err(INVALID_VALUE);
    }
    let device = u32::from_le_bytes(resource.internal[8..12].try_into().expect("4 bytes"));
    Ok(device as usize)
}

/// The outcome of `cuDevSmResourceSplitByCount`.
#[derive(Clone, Copy, Debug)]
pub struct Split {
    pub groups: u32,
    pub group_size: u32,
    pub remaining: u32,
    pub device: usize,
}

impl Sim {
    /// `CUDA_ERROR_NOT_SUPPORTED` when green contexts are switched off.
    pub fn green_supported(&self) -> Result<(), CuResult> {
        if self.config.no_green_contexts {
            return Err(NOT_SUPPORTED);
        }
        Ok(())
    }

    /// `cuDeviceGetDevResource`: all SMs of the device.
    pub fn device_resource(&self, device: i32, kind: u32) -> Result<DevResource, CuResult> {
        self.green_supported()?;
        let ordinal = self.device(device)?.ordinal;
        if kind != DEV_RESOURCE_TYPE_SM {
            return Err(INVALID_RESOURCE_TYPE);
        }
        Ok(sm_resource(ordinal, SM_COUNT))
    }

    /// `cuDevSmResourceSplitByCount`: groups of `min_count` SMs (rounded up to the partition
    /// rules), at most `wanted` of them (`None`: as many as fit), and the remainder.
    pub fn split_by_count(
        &self,
        input: &DevResource,
        wanted: Option<u32>,
        flags: u32,
        min_count: u32,
    ) -> Result<Split, CuResult> {
        self.green_supported()?;
        if input.kind != DEV_RESOURCE_TYPE_SM {
            return Err(INVALID_RESOURCE_TYPE);
        }
        let device = resource_device(input)?;
        self.device(device as i32)?;
        if flags & !SM_SPLIT_IGNORE_SM_COSCHEDULING != 0 {
            return Err(INVALID_VALUE);
        }
        let alignment = if flags & SM_SPLIT_IGNORE_SM_COSCHEDULING != 0 {
            UNCOSCHEDULED_ALIGNMENT
        } else {
            COSCHEDULED_ALIGNMENT
        };
        let group_size = min_count.max(MIN_PARTITION).next_multiple_of(alignment);
        let available = input.sm.sm_count;
        let fit = available / group_size;
        let groups = wanted.map_or(fit, |w| w.min(fit));
        if fit == 0 || wanted == Some(0) {
            return Err(INVALID_RESOURCE_CONFIGURATION);
        }
        Ok(Split {
            groups,
            group_size,
            remaining: available - groups * group_size,
            device,
        })
    }

    /// `cuDevResourceGenerateDesc`: SM resources of one device, combined.
    pub fn generate_desc(&mut self, resources: &[DevResource]) -> Result<Raw, CuResult> {
        self.green_supported()?;
        if resources.is_empty() {
            return Err(INVALID_VALUE);
        }
        let mut device = None;
        let mut sm_count = 0u32;
        for resource in resources {
            if resource.kind != DEV_RESOURCE_TYPE_SM {
                return Err(INVALID_RESOURCE_TYPE);
            }
            let d = resource_device(resource)?;
            if device.is_some_and(|first| first != d) {
                return Err(INVALID_RESOURCE_CONFIGURATION);
            }
            device = Some(d);
            sm_count = sm_count.saturating_add(resource.sm.sm_count);
        }
        if sm_count == 0 || sm_count > SM_COUNT {
            return Err(INVALID_RESOURCE_CONFIGURATION);
        }
        let device = device.expect("at least one resource");
        self.device(device as i32)?;
        let raw = self.new_raw(Kind::ResourceDesc);
        self.descs.insert(raw, ResourceDesc { device, sm_count });
        Ok(raw)
    }

    /// A live green context, or the error (and violation) for a destroyed one.
    pub fn green(&mut self, raw: Raw, destroying: bool) -> Result<GreenContext, CuResult> {
        self.green_supported()?;
        match self.greens.get(&raw) {
            Some(green) => Ok(*green),
            None => Err(self.dead_handle(raw, Kind::GreenContext, destroying)),
        }
    }

    /// `cuGreenCtxCreate`: a green context and its context (not made current).
    pub fn create_green(&mut self, desc: Raw, device: i32, flags: u32) -> Result<Raw, CuResult> {
        self.green_supported()?;
        let ordinal = self.device(device)?.ordinal;
        // CUDA 13.0 requires the flag: every green context has a default stream.
        if flags != GREEN_CTX_DEFAULT_STREAM {
            return Err(INVALID_VALUE);
        }
        let Some(&ResourceDesc {
            device: desc_device,
            sm_count,
        }) = self.descs.get(&desc)
        else {
            return Err(INVALID_VALUE);
        };
        if desc_device != ordinal {
            return Err(INVALID_VALUE);
        }
        let raw = self.new_raw(Kind::GreenContext);
        let context = self.new_raw(Kind::Context);
        let legacy = self.checker.timeline(format!(
            "default stream of green context {raw:#x} (context {context:#x})"
        ));
        let mut ctx = contexts::Context::new(context, ordinal, false, legacy);
        ctx.green = Some(raw);
        self.contexts.insert(context, ctx);
        self.greens.insert(
            raw,
            GreenContext {
                raw,
                device: ordinal,
                sm_count,
                context,
            },
        );
        Ok(raw)
    }

    /// `cuGreenCtxStreamCreate`: the driver requires non-blocking streams here.
    pub fn green_stream(&mut self, raw: Raw, flags: u32, priority: i32) -> Result<Raw, CuResult> {
        let green = self.green(raw, false)?;
        if flags & STREAM_NON_BLOCKING == 0 {
            return Err(INVALID_VALUE);
        }
        self.create_stream_in(green.context, flags, priority)
    }

    /// `cuGreenCtxDestroy`: destroys the green context and its context. Streams still alive
    /// in it become unusable: reported now, and again (`destroyed-handle`) at each later use.
    pub fn destroy_green(&mut self, raw: Raw) -> Result<(), CuResult> {
        let green = self.green(raw, true)?;
        let mut live: Vec<Raw> = self
            .streams
            .values()
            .filter(|s| s.context == green.context)
            .map(|s| s.raw)
            .collect();
        live.sort_unstable();
        if !live.is_empty() {
            let names: Vec<String> = live.iter().map(|s| format!("{s:#x}")).collect();
            self.checker.violation(
                "destroyed-handle",
                format!(
                    "green context {raw:#x} destroyed while its stream(s) {} are alive: destroy them first",
                    names.join(", ")
                ),
            );
        }
        self.greens.remove(&raw);
        self.bury(raw, Kind::GreenContext);
        self.contexts.remove(&green.context);
        self.bury(green.context, Kind::Context);
        // Driver 580 keeps a destroyed green context current on every thread that had it
        // current (driver-facts: "Green contexts destroyed while current"): it stays on the
        // stacks, and each later use of it is a destroyed-handle violation.
        Ok(())
    }
}
