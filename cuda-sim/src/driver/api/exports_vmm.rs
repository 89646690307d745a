//! The exported virtual-memory-management functions (see `vmm`).
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};

use crate::base::abi::{get, put};
use crate::base::errors::INVALID_VALUE;
use crate::base::types::*;
use crate::with_sim;

export_fns! {
    fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const MemAllocationProp, option: c_uint) {
        let prop = get(prop)?;
        if granularity.is_null() {
            return Err(INVALID_VALUE);
        }
        let value = with_sim(|sim| sim.allocation_granularity(&prop, option))?;
        put(granularity, value as usize)
    }

    fn cuMemCreate(handle: *mut MemHandle, size: usize, prop: *const MemAllocationProp, flags: c_ulonglong) {
        let prop = get(prop)?;
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.mem_create(size as u64, &prop, flags))?;
        put(handle, raw as MemHandle)
    }

    fn cuMemRelease(handle: MemHandle) {
        with_sim(|sim| sim.mem_release(handle as Raw))
    }

    fn cuMemGetAllocationPropertiesFromHandle(prop: *mut MemAllocationProp, handle: MemHandle) {
        if prop.is_null() {
            return Err(INVALID_VALUE);
        }
        let value = with_sim(|sim| sim.handle_properties(handle as Raw))?;
        put(prop, value)
    }

    fn cuMemRetainAllocationHandle(handle: *mut MemHandle, addr: *mut c_void) {
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.retain_handle(addr as usize as u64))?;
        put(handle, raw as MemHandle)
    }

    fn cuMemExportToShareableHandle(shareable: *mut c_void, handle: MemHandle, handle_type: c_uint, flags: c_ulonglong) {
        if shareable.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        let fd = with_sim(|sim| sim.export_handle(handle as Raw, handle_type))?;
        put(shareable.cast::<c_int>(), fd)
    }

    fn cuMemImportFromShareableHandle(handle: *mut MemHandle, os_handle: *mut c_void, handle_type: c_uint) {
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        // A POSIX descriptor is passed by value, cast to a pointer.
        let fd = os_handle as usize as c_int;
        let raw = with_sim(|sim| sim.import_handle(fd, handle_type))?;
        put(handle, raw as MemHandle)
    }

    fn cuMemAddressReserve(ptr: *mut CuDevicePtr, size: usize, alignment: usize, addr: CuDevicePtr, flags: c_ulonglong) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let base = with_sim(|sim| sim.address_reserve(size as u64, alignment as u64, addr, flags))?;
        put(ptr, base)
    }

    fn cuMemAddressFree(ptr: CuDevicePtr, size: usize) {
        with_sim(|sim| sim.address_free(ptr, size as u64))
    }

    fn cuMemMap(ptr: CuDevicePtr, size: usize, offset: usize, handle: MemHandle, flags: c_ulonglong) {
        with_sim(|sim| sim.mem_map(ptr, size as u64, offset as u64, handle as Raw, flags))
    }

    fn cuMemUnmap(ptr: CuDevicePtr, size: usize) {
        with_sim(|sim| sim.mem_unmap(ptr, size as u64))
    }

    fn cuMemSetAccess(ptr: CuDevicePtr, size: usize, desc: *const MemAccessDesc, count: usize) {
        if desc.is_null() && count > 0 {
            return Err(INVALID_VALUE);
        }
        let descs: Vec<MemAccessDesc> = (0..count)
            // SAFETY: `desc` points to `count` descriptors by the API's contract.
            .map(|i| get(unsafe { desc.add(i) }))
            .collect::<Result<_, _>>()?;
        with_sim(|sim| sim.mem_set_access(ptr, size as u64, &descs))
    }

    fn cuMemGetAccess(flags: *mut c_ulonglong, location: *const MemLocation, ptr: CuDevicePtr) {
        let location = get(location)?;
        let access = with_sim(|sim| sim.mem_get_access(location, ptr))?;
        put(flags, c_ulonglong::from(access))
    }
}
