//! The exported green-context functions (see `green`).
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{c_int, c_uint};

use crate::base::abi::{get, put};
use crate::base::errors::INVALID_VALUE;
use crate::base::types::*;
use crate::with_sim;

export_fns! {
    fn cuDeviceGetDevResource(device: CuDevice, resource: *mut DevResource, kind: c_uint) {
        if resource.is_null() {
            return Err(INVALID_VALUE);
        }
        let value = with_sim(|sim| sim.device_resource(device, kind))?;
        put(resource, value)
    }

    fn cuDevSmResourceSplitByCount(result: *mut DevResource, groups: *mut c_uint, input: *const DevResource, remaining: *mut DevResource, flags: c_uint, min_count: c_uint) {
        let input = get(input)?;
        // With no result array, `*groups` answers how many groups fit; with one, it says how
        // many the array holds on input and how many were made on output.
        let wanted = if result.is_null() { None } else { Some(get(groups.cast_const())?) };
        if groups.is_null() {
            return Err(INVALID_VALUE);
        }
        let split = with_sim(|sim| sim.split_by_count(&input, wanted, flags, min_count))?;
        if !result.is_null() {
            for i in 0..split.groups as usize {
                // SAFETY: `result` has room for `*groups` (≥ `split.groups`) resources by the
                // API's contract.
                put(unsafe { result.add(i) }, crate::resources::green::sm_resource(split.device, split.group_size))?;
            }
        }
        if !remaining.is_null() {
            put(remaining, crate::resources::green::sm_resource(split.device, split.remaining))?;
        }
        put(groups, split.groups)
    }

    fn cuDevResourceGenerateDesc(desc: *mut Raw, resources: *mut DevResource, count: c_uint) {
        if desc.is_null() || (resources.is_null() && count > 0) {
            return Err(INVALID_VALUE);
        }
        let list: Vec<DevResource> = (0..count as usize)
            // SAFETY: `resources` points to `count` resources by the API's contract.
            .map(|i| get(unsafe { resources.add(i) }.cast_const()))
            .collect::<Result<_, _>>()?;
        let raw = with_sim(|sim| sim.generate_desc(&list))?;
        put(desc, raw)
    }

    fn cuGreenCtxCreate(green: *mut Raw, desc: Raw, device: CuDevice, flags: c_uint) {
        if green.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_green(desc, device, flags))?;
        put(green, raw)
    }

    fn cuGreenCtxDestroy(green: Raw) {
        with_sim(|sim| sim.destroy_green(green))
    }

    fn cuCtxFromGreenCtx(context: *mut Raw, green: Raw) {
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.green(green, false).map(|g| g.context))?;
        put(context, raw)
    }

    fn cuGreenCtxGetDevResource(green: Raw, resource: *mut DevResource, kind: c_uint) {
        if resource.is_null() {
            return Err(INVALID_VALUE);
        }
        let green = with_sim(|sim| sim.green(green, false))?;
        if kind != DEV_RESOURCE_TYPE_SM {
            return Err(crate::resources::green::INVALID_RESOURCE_TYPE);
        }
        put(resource, crate::resources::green::sm_resource(green.device, green.sm_count))
    }

    fn cuGreenCtxStreamCreate(stream: *mut Raw, green: Raw, flags: c_uint, priority: c_int) {
        if stream.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.green_stream(green, flags, priority))?;
        put(stream, raw)
    }
}
