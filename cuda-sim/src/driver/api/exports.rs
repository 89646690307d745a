//! The exported driver API. Each function goes through `exports!` (call counting, fault
//! injection, panics turned into errors) and then takes the simulator's lock once.
//!
//! # Safety
//!
//! The callers are C callers of the CUDA driver API: pointer arguments follow that API's
//! contract (valid out-pointers, host buffers of the stated length). The simulator checks
//! handles and device ranges itself; it cannot check host pointers.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::base::abi::{get, put, simulated_version};
use crate::base::errors::{self, INVALID_CONTEXT, INVALID_VALUE, NOT_FOUND, SUCCESS};
use crate::base::types::*;
use crate::resources::contexts;
use crate::resources::work::Op;
use crate::with_sim;

/// Issues a stream-ordered operation on `stream`, or a synchronous one (`None`: run on the
/// current context's legacy stream, then waited for); host functions are called once the
/// lock is released.
pub(crate) fn stream_work(stream: Option<Raw>, what: &str, op: Op) -> Result<(), CuResult> {
    let mut op = Some(op);
    let (timeline, calls) = crate::wait_for(|sim| {
        let target = sim.stream(stream.unwrap_or(STREAM_LEGACY), what)?;
        // A synchronous call waits first for the legacy stream's queued work and the blocking
        // streams' it follows (not the non-blocking streams').
        let pending = op.as_ref().is_some_and(|op| sim.must_wait(target, op));
        if pending || (stream.is_none() && sim.follows_busy(target)) {
            return Ok(None);
        }
        let op = op.take().expect("submitted once");
        Ok(Some((
            target.timeline,
            sim.submit(target, op, stream.is_none())?,
        )))
    })?;
    crate::resources::deferred::start_hosts(
        calls.into_iter().map(|call| (timeline, call)).collect(),
    );
    Ok(())
}

/// `count` elements of `width` bytes of `pattern` at `dst`.
fn memset(
    dst: u64,
    pattern: u32,
    width: usize,
    count: usize,
    stream: Option<Raw>,
) -> Result<(), CuResult> {
    let op = Op::Memset {
        dst,
        pitch: 0,
        value: pattern,
        width,
        count,
        rows: 1,
    };
    stream_work(stream, "memset", op)
}

/// Copies `len` bytes; `device` says which sides must be device (or pinned) memory.
fn memcpy(
    dst: u64,
    src: u64,
    len: usize,
    stream: Option<Raw>,
    device: (bool, bool),
) -> Result<(), CuResult> {
    stream_work(
        stream,
        "memcpy",
        Op::Memcpy {
            dst,
            src,
            len,
            device,
        },
    )
}

fn static_str(
    table: Option<&'static (u32, &'static str, &'static str)>,
    name: bool,
    out: *mut *const c_char,
) -> Result<(), CuResult> {
    match table {
        Some((_, n, s)) => put(out, if name { n.as_ptr() } else { s.as_ptr() }.cast()),
        None => {
            let _ = put(out, std::ptr::null());
            Err(INVALID_VALUE)
        }
    }
}

export_fns! {
    fn cuInit(flags: c_uint) {
        crate::init(flags)
    }

    /// The driver's private tables, which toolkit libraries look up (NVRTC does, to learn
    /// about the device). The simulator has none: `CUDA_ERROR_NOT_SUPPORTED`, and the caller
    /// falls back to its defaults.
    fn cuGetExportTable(table: *mut *const c_void, id: *const c_void) {
        let _ = id;
        if !table.is_null() {
            // SAFETY: a non-null out-pointer, by the caller's contract.
            unsafe { table.write(std::ptr::null()) };
        }
        Err(crate::base::errors::NOT_SUPPORTED)
    }

    fn cuDriverGetVersion(version: *mut c_int) {
        // `CUDA_SIM_DRIVER_VERSION` plays an older driver (read on every call: the real call
        // needs no `cuInit` either).
        put(version, simulated_version())
    }

    fn cuGetErrorName(error: CuResult, out: *mut *const c_char) {
        static_str(errors::entry(error), true, out)
    }

    fn cuGetErrorString(error: CuResult, out: *mut *const c_char) {
        static_str(errors::entry(error), false, out)
    }

    fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int) {
        let _ = (symbol, version, flags, status);
        let _ = put(pfn, std::ptr::null_mut());
        Err(NOT_FOUND)
    }

    fn cuDeviceGetCount(count: *mut c_int) {
        let n = with_sim(|sim| Ok(sim.devices.len()))?;
        put(count, n as c_int)
    }

    fn cuDeviceGet(device: *mut CuDevice, ordinal: c_int) {
        with_sim(|sim| sim.device(ordinal).map(|_| ()))?;
        put(device, ordinal)
    }

    fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CuDevice) {
        with_sim(|sim| sim.device(device).map(|_| ()))?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let text = format!("NVIDIA H200 (cuda-sim {device})");
        let n = text.len().min(len as usize - 1);
        // SAFETY: `name` is valid for `len` bytes by the API's contract; we write `n + 1`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    }

    /// `domain:bus:device.function` in hex, from the device's PCI attributes, as the driver
    /// writes it (`0000:18:06.0`); a buffer too small for it is `CUDA_ERROR_INVALID_VALUE`
    /// (the driver documents 13 bytes as enough).
    fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, device: CuDevice) {
        let (domain, bus, slot) = with_sim(|sim| {
            Ok((sim.attribute(50, device)?, sim.attribute(33, device)?, sim.attribute(34, device)?))
        })?;
        let text = format!("{domain:04x}:{bus:02x}:{slot:02x}.0");
        if bus_id.is_null() || len <= 0 || (len as usize) < 13.min(text.len() + 1) {
            return Err(INVALID_VALUE);
        }
        let n = text.len().min(len as usize - 1);
        // SAFETY: `bus_id` is valid for `len` bytes by the API's contract; we write `n + 1`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), bus_id.cast::<u8>(), n);
            bus_id.add(n).write(0);
        }
        Ok(())
    }

    fn cuDeviceGetUuid(uuid: *mut [u8; 16], device: CuDevice) {
        with_sim(|sim| sim.device(device).map(|_| ()))?;
        let mut bytes = *b"cuda-sim-device-";
        bytes[15] = device as u8;
        put(uuid, bytes)
    }

    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], device: CuDevice) {
        with_sim(|sim| sim.device(device).map(|_| ()))?;
        let mut bytes = *b"cuda-sim-device-";
        bytes[15] = device as u8;
        put(uuid, bytes)
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CuDevice) {
        let total = with_sim(|sim| sim.device(device).map(|d| d.capacity))?;
        put(bytes, total as usize)
    }

    fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_uint, device: CuDevice) {
        let v = with_sim(|sim| sim.attribute(attribute, device))?;
        put(value, v)
    }

    fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, device: CuDevice) {
        with_sim(|sim| sim.device(device).map(|_| ()))?;
        put(major, 9)?;
        put(minor, 0)
    }

    fn cuDevicePrimaryCtxRetain(context: *mut Raw, device: CuDevice) {
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.retain_primary(device))?;
        put(context, raw)
    }

    fn cuDevicePrimaryCtxRelease_v2(device: CuDevice) {
        with_sim(|sim| sim.release_primary(device))
    }

    fn cuDevicePrimaryCtxGetState(device: CuDevice, flags: *mut c_uint, active: *mut c_int) {
        let retains = with_sim(|sim| {
            let raw = sim.device(device)?.primary;
            Ok(sim.contexts[&raw].retains)
        })?;
        put(flags, 0)?;
        put(active, c_int::from(retains > 0))
    }

    fn cuDevicePrimaryCtxSetFlags_v2(device: CuDevice, flags: c_uint) {
        let _ = flags;
        with_sim(|sim| sim.device(device).map(|_| ()))
    }

    fn cuDevicePrimaryCtxReset_v2(device: CuDevice) {
        with_sim(|sim| {
            let raw = sim.device(device)?.primary;
            sim.contexts.get_mut(&raw).expect("primary").retains = 0;
            Ok(())
        })
    }

    fn cuCtxCreate_v4(context: *mut Raw, params: *mut c_void, flags: c_uint, device: CuDevice) {
        let _ = (params, flags);
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_context(device))?;
        put(context, raw)
    }

    fn cuCtxDestroy_v2(context: Raw) {
        with_sim(|sim| sim.destroy_context(context))
    }

    fn cuCtxGetCurrent(context: *mut Raw) {
        with_sim(|_| Ok(()))?;
        put(context, contexts::current())
    }

    fn cuCtxSetCurrent(context: Raw) {
        with_sim(|sim| {
            if context != 0 {
                sim.make_current_check(context)?;
            }
            contexts::set_current(context);
            Ok(())
        })
    }

    fn cuCtxPushCurrent_v2(context: Raw) {
        with_sim(|sim| {
            sim.make_current_check(context)?;
            contexts::push(context)
        })
    }

    fn cuCtxPopCurrent_v2(context: *mut Raw) {
        with_sim(|_| Ok(()))?;
        let popped = contexts::pop();
        if popped == 0 {
            return Err(INVALID_CONTEXT);
        }
        if !context.is_null() {
            put(context, popped)?;
        }
        Ok(())
    }

    fn cuCtxGetDevice(device: *mut CuDevice) {
        let d = with_sim(|sim| sim.current_device("cuCtxGetDevice"))?;
        put(device, d as CuDevice)
    }

    fn cuCtxSynchronize() {
        crate::wait_for(|sim| {
            let raw = sim.require_current("cuCtxSynchronize")?;
            if sim.busy_in(Some(raw), None) || sim.foreign_launches_pending(Some(raw), None) {
                return Ok(None);
            }
            sim.synchronize_context(raw).map(Some)
        })
    }

    fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) {
        with_sim(|_| Ok(()))?;
        if !least.is_null() {
            put(least, crate::resources::streams::LEAST_PRIORITY)?;
        }
        if !greatest.is_null() {
            put(greatest, crate::resources::streams::GREATEST_PRIORITY)?;
        }
        Ok(())
    }

    fn cuCtxGetApiVersion(context: Raw, version: *mut c_uint) {
        with_sim(|sim| sim.context(context).map(|_| ()))?;
        put(version, 13000)
    }

    fn cuCtxGetFlags(flags: *mut c_uint) {
        with_sim(|sim| sim.require_current("cuCtxGetFlags").map(|_| ()))?;
        put(flags, 0)
    }

    fn cuCtxSetFlags(flags: c_uint) {
        let _ = flags;
        with_sim(|sim| sim.require_current("cuCtxSetFlags").map(|_| ()))
    }

    fn cuStreamCreate(stream: *mut Raw, flags: c_uint) {
        if stream.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_stream(flags, 0))?;
        put(stream, raw)
    }

    fn cuStreamCreateWithPriority(stream: *mut Raw, flags: c_uint, priority: c_int) {
        if stream.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_stream(flags, priority))?;
        put(stream, raw)
    }

    fn cuStreamDestroy_v2(stream: Raw) {
        // Returns at once, as the driver does: a busy stream's queued work stays queued on
        // its timeline and runs when due (see `deferred`).
        with_sim(|sim| sim.destroy_stream(stream))
    }

    fn cuStreamSynchronize(stream: Raw) {
        // Waits and queries are "potentially unsafe" calls: a capture that forbids them (this
        // thread's, or another thread's in global mode while this thread is not relaxed)
        // refuses them and is invalidated (measured on an H100, driver 580:
        // probes/capture_side_calls.py). Asked as the call begins: what a capture begun
        // during a wait does to it was not measured.
        with_sim(|sim| {
            sim.stream(stream, "cuStreamSynchronize")?;
            sim.forbid_unsafe_call()
        })?;
        crate::wait_for(|sim| {
            let target = sim.stream(stream, "cuStreamSynchronize")?;
            if sim.is_busy(target.timeline) {
                return Ok(None);
            }
            sim.synchronize_stream(stream, "cuStreamSynchronize").map(Some)
        })
    }

    fn cuStreamQuery(stream: Raw) {
        with_sim(|sim| {
            let target = sim.stream(stream, "cuStreamQuery")?;
            sim.forbid_unsafe_call()?;
            sim.not_ready(Some(target.timeline), None)?;
            sim.synchronize_stream(stream, "cuStreamQuery")
        })
    }

    fn cuStreamWaitEvent(stream: Raw, event: Raw, flags: c_uint) {
        let _ = flags;
        with_sim(|sim| sim.wait_event(stream, event))
    }

    fn cuStreamGetPriority(stream: Raw, priority: *mut c_int) {
        let p = with_sim(|sim| {
            sim.stream(stream, "cuStreamGetPriority")?;
            Ok(sim.streams.get(&stream).map_or(0, |s| s.priority))
        })?;
        put(priority, p)
    }

    fn cuStreamGetFlags(stream: Raw, flags: *mut c_uint) {
        let f = with_sim(|sim| {
            sim.stream(stream, "cuStreamGetFlags")?;
            Ok(sim.streams.get(&stream).map_or(0, |s| s.flags))
        })?;
        put(flags, f)
    }

    fn cuStreamGetCtx(stream: Raw, context: *mut Raw) {
        let c = with_sim(|sim| sim.stream(stream, "cuStreamGetCtx").map(|t| t.context))?;
        put(context, c)
    }

    fn cuLaunchHostFunc(stream: Raw, function: HostFn, data: *mut c_void) {
        let function = function.ok_or(INVALID_VALUE)?;
        stream_work(Some(stream), "cuLaunchHostFunc", Op::Host(function, data as usize))
    }

    fn cuStreamAddCallback(stream: Raw, callback: StreamCallback, data: *mut c_void, flags: c_uint) {
        let callback = callback.ok_or(INVALID_VALUE)?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        with_sim(|sim| {
            let target = sim.stream(stream, "cuStreamAddCallback")?;
            // Stream callbacks cannot be captured (host functions can).
            sim.forbid_capture(target)?;
            sim.enqueue(target);
            Ok(())
        })?;
        // SAFETY: as for `cuLaunchHostFunc`.
        unsafe { callback(stream, SUCCESS, data) };
        Ok(())
    }

    fn cuEventCreate(event: *mut Raw, flags: c_uint) {
        if event.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_event(flags, false))?;
        put(event, raw)
    }

    fn cuEventDestroy_v2(event: Raw) {
        with_sim(|sim| sim.destroy_event(event))
    }

    fn cuEventRecord(event: Raw, stream: Raw) {
        with_sim(|sim| sim.record_event(event, stream))
    }

    fn cuEventRecordWithFlags(event: Raw, stream: Raw, flags: c_uint) {
        let _ = flags;
        with_sim(|sim| sim.record_event(event, stream))
    }

    fn cuEventQuery(event: Raw) {
        with_sim(|sim| {
            // An event recorded in the capture answers CUDA_ERROR_CAPTURED_EVENT first.
            sim.forbid_captured_event(event, true)?;
            sim.forbid_unsafe_call()?;
            sim.not_ready(None, Some(event))?;
            sim.synchronize_event(event)
        })
    }

    fn cuEventSynchronize(event: Raw) {
        with_sim(|sim| {
            sim.forbid_captured_event(event, true)?;
            sim.forbid_unsafe_call()
        })?;
        crate::wait_for(|sim| {
            if sim.record_pending(event) {
                return Ok(None);
            }
            sim.synchronize_event(event).map(Some)
        })
    }

    fn cuEventElapsedTime(ms: *mut f32, start: Raw, end: Raw) {
        let elapsed = with_sim(|sim| sim.elapsed(start, end))?;
        put(ms, elapsed)
    }

    fn cuEventElapsedTime_v2(ms: *mut f32, start: Raw, end: Raw) {
        let elapsed = with_sim(|sim| sim.elapsed(start, end))?;
        put(ms, elapsed)
    }

    fn cuIpcGetEventHandle(handle: *mut IpcEventHandle, event: Raw) {
        let data = with_sim(|sim| sim.export_event(event))?;
        put(handle, IpcEventHandle { reserved: data.map(|b| b as c_char) })
    }

    fn cuIpcOpenEventHandle(event: *mut Raw, handle: IpcEventHandle) {
        if event.is_null() {
            return Err(INVALID_VALUE);
        }
        let data = handle.reserved.map(|b| b as u8);
        let raw = with_sim(|sim| sim.open_event(&data))?;
        put(event, raw)
    }

    fn cuMemAlloc_v2(ptr: *mut CuDevicePtr, size: usize) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = with_sim(|sim| sim.alloc_sync(size, false))?;
        put(ptr, addr)
    }

    fn cuMemFree_v2(ptr: CuDevicePtr) {
        // It waits for all work on the device (`free_sync`), queued work included.
        crate::wait_for(|sim| {
            let device = sim.current_device("cuMemFree")?;
            if sim.busy_in(None, Some(device)) || sim.foreign_launches_pending(None, Some(device)) {
                return Ok(None);
            }
            sim.free_sync(ptr, false).map(Some)
        })
    }

    fn cuMemHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) {
        let _ = flags;
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = with_sim(|sim| sim.alloc_sync(size, true))?;
        put(ptr, addr as usize as *mut c_void)
    }

    fn cuMemAllocHost_v2(ptr: *mut *mut c_void, size: usize) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = with_sim(|sim| sim.alloc_sync(size, true))?;
        put(ptr, addr as usize as *mut c_void)
    }

    fn cuMemFreeHost(ptr: *mut c_void) {
        crate::wait_for(|sim| {
            let device = sim.current_device("cuMemFreeHost")?;
            if sim.busy_in(None, Some(device)) || sim.foreign_launches_pending(None, Some(device)) {
                return Ok(None);
            }
            sim.free_sync(ptr as usize as u64, true).map(Some)
        })
    }

    fn cuMemAllocAsync(ptr: *mut CuDevicePtr, size: usize, stream: Raw) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = with_sim(|sim| {
            let target = sim.stream(stream, "cuMemAllocAsync")?;
            // Simplification: the driver records a memory-allocation node; the simulator
            // refuses stream-ordered allocation in a capture.
            sim.forbid_capture(target)?;
            // On a stream outside the capture, a stream-ordered allocation is a "potentially
            // unsafe" call while this thread's capture forbids those (measured on the H200,
            // driver 580: cuMemAllocFromPoolAsync on an outer stream inside a thread-local
            // capture is CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
            sim.forbid_unsafe_call()?;
            sim.alloc_async(None, size, target)
        })?;
        put(ptr, addr)
    }

    fn cuMemAllocFromPoolAsync(ptr: *mut CuDevicePtr, size: usize, pool: Raw, stream: Raw) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = with_sim(|sim| {
            let target = sim.stream(stream, "cuMemAllocFromPoolAsync")?;
            sim.forbid_capture(target)?;
            sim.forbid_unsafe_call()?;
            sim.alloc_async(Some(pool), size, target)
        })?;
        put(ptr, addr)
    }

    fn cuMemFreeAsync(ptr: CuDevicePtr, stream: Raw) {
        with_sim(|sim| {
            // As for allocations: no memory-free nodes.
            let target = sim.stream(stream, "cuMemFreeAsync")?;
            sim.forbid_capture(target)?;
            // Outside the capture, a "potentially unsafe" call, as an allocation is (measured
            // on an H100, driver 580: probes/capture_side_calls.py, `free_async`).
            sim.forbid_unsafe_call()?;
            sim.free_async(ptr, stream)
        })
    }

    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let (f, t) = with_sim(|sim| {
            let device = sim.current_device("cuMemGetInfo")?;
            let capacity = sim.devices[device].capacity;
            Ok((capacity.saturating_sub(sim.device_reserved(device)), capacity))
        })?;
        put(free, f as usize)?;
        put(total, t as usize)
    }

    fn cuMemGetAddressRange_v2(base: *mut CuDevicePtr, size: *mut usize, ptr: CuDevicePtr) {
        let (b, s) = with_sim(|sim| {
            sim.alloc_at(ptr).map(|a| (a.addr, a.size)).ok_or(NOT_FOUND)
        })?;
        if !base.is_null() {
            put(base, b)?;
        }
        if !size.is_null() {
            put(size, s as usize)?;
        }
        Ok(())
    }

    fn cuMemPoolCreate(pool: *mut Raw, props: *const MemPoolProps) {
        let props = get(props)?;
        if pool.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_pool(&props))?;
        put(pool, raw)
    }

    fn cuMemPoolDestroy(pool: Raw) {
        with_sim(|sim| sim.destroy_pool(pool))
    }

    fn cuMemPoolGetAttribute(pool: Raw, attribute: c_uint, value: *mut c_void) {
        with_sim(|sim| {
            let pool = sim.pool(pool)?;
            let arena = &pool.arena;
            match attribute {
                1..=3 => put(value.cast::<c_int>(), pool.reuse[attribute as usize - 1]),
                // Nor does it answer its release threshold, even in the exporting process
                // (driver 580 on an H100: probes/capture_side_calls.py).
                POOL_ATTR_RELEASE_THRESHOLD if pool.imported => Err(INVALID_VALUE),
                POOL_ATTR_RELEASE_THRESHOLD => put(value.cast::<u64>(), pool.release_threshold),
                POOL_ATTR_RESERVED_MEM_CURRENT => put(value.cast::<u64>(), arena.reserved),
                POOL_ATTR_RESERVED_MEM_HIGH => put(value.cast::<u64>(), arena.reserved_high),
                // An imported pool does not answer (driver 580 on an H100); a queued free's
                // bytes no longer count (`Pool::queued_free`).
                POOL_ATTR_USED_MEM_CURRENT if pool.imported => Err(INVALID_VALUE),
                POOL_ATTR_USED_MEM_CURRENT => {
                    put(value.cast::<u64>(), arena.used.saturating_sub(pool.queued_free))
                }
                POOL_ATTR_USED_MEM_HIGH => put(value.cast::<u64>(), arena.used_high),
                _ => Err(INVALID_VALUE),
            }
        })
    }

    fn cuMemPoolSetAttribute(pool: Raw, attribute: c_uint, value: *mut c_void) {
        with_sim(|sim| {
            let pool = sim.pool(pool)?;
            match attribute {
                1..=3 => pool.reuse[attribute as usize - 1] = get(value.cast::<c_int>())?,
                POOL_ATTR_RELEASE_THRESHOLD => pool.release_threshold = get(value.cast::<u64>())?,
                POOL_ATTR_RESERVED_MEM_HIGH if get(value.cast::<u64>())? == 0 => {
                    pool.arena.reserved_high = pool.arena.reserved;
                }
                POOL_ATTR_USED_MEM_HIGH if get(value.cast::<u64>())? == 0 => {
                    pool.arena.used_high = pool.arena.used;
                }
                _ => return Err(INVALID_VALUE),
            }
            Ok(())
        })
    }

    fn cuMemPoolSetAccess(pool: Raw, map: *const MemAccessDesc, count: usize) {
        if map.is_null() && count > 0 {
            return Err(INVALID_VALUE);
        }
        let descs: Vec<MemAccessDesc> = (0..count)
            // SAFETY: `map` points to `count` descriptors by the API's contract.
            .map(|i| get(unsafe { map.add(i) }))
            .collect::<Result<_, _>>()?;
        with_sim(|sim| sim.set_access(pool, &descs))
    }

    fn cuMemPoolGetAccess(flags: *mut c_uint, pool: Raw, location: *mut MemLocation) {
        let location = get(location.cast_const())?;
        let access = with_sim(|sim| sim.get_access(pool, location))?;
        put(flags, access)
    }

    fn cuMemPoolTrimTo(pool: Raw, keep: usize) {
        with_sim(|sim| {
            sim.pool(pool)?.arena.trim(keep as u64);
            Ok(())
        })
    }

    fn cuMemPoolExportToShareableHandle(handle: *mut c_void, pool: Raw, handle_type: c_uint, flags: u64) {
        let _ = flags;
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let fd = with_sim(|sim| sim.export_pool(pool, handle_type))?;
        put(handle.cast::<c_int>(), fd)
    }

    fn cuMemPoolImportFromShareableHandle(pool: *mut Raw, handle: *mut c_void, handle_type: c_uint, flags: u64) {
        let _ = flags;
        if pool.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.import_pool(handle as usize as c_int, handle_type))?;
        put(pool, raw)
    }

    fn cuMemPoolExportPointer(data: *mut PoolPtrExportData, ptr: CuDevicePtr) {
        if data.is_null() {
            return Err(INVALID_VALUE);
        }
        let bytes = with_sim(|sim| sim.export_pointer(ptr))?;
        put(data, PoolPtrExportData { reserved: bytes })
    }

    fn cuMemPoolImportPointer(ptr: *mut CuDevicePtr, pool: Raw, data: *mut PoolPtrExportData) {
        let data = get(data.cast_const())?;
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let addr = with_sim(|sim| sim.import_pointer(pool, &data.reserved))?;
        put(ptr, addr)
    }

    fn cuDeviceGetDefaultMemPool(pool: *mut Raw, device: CuDevice) {
        let raw = with_sim(|sim| sim.device(device).map(|d| d.default_pool))?;
        put(pool, raw)
    }

    fn cuDeviceGetMemPool(pool: *mut Raw, device: CuDevice) {
        let raw = with_sim(|sim| sim.device(device).map(|d| d.current_pool))?;
        put(pool, raw)
    }

    fn cuDeviceSetMemPool(device: CuDevice, pool: Raw) {
        with_sim(|sim| {
            let ordinal = sim.device(device)?.ordinal;
            if sim.pool(pool)?.device != Some(ordinal) {
                return Err(INVALID_VALUE);
            }
            sim.devices[ordinal].current_pool = pool;
            Ok(())
        })
    }

    fn cuMemcpy(dst: CuDevicePtr, src: CuDevicePtr, len: usize) {
        memcpy(dst, src, len, None, (false, false))
    }

    fn cuMemcpyAsync(dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Raw) {
        memcpy(dst, src, len, Some(stream), (false, false))
    }

    fn cuMemcpyHtoD_v2(dst: CuDevicePtr, src: *const c_void, len: usize) {
        memcpy(dst, src as usize as u64, len, None, (true, false))
    }

    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CuDevicePtr, len: usize) {
        memcpy(dst as usize as u64, src, len, None, (false, true))
    }

    fn cuMemcpyDtoD_v2(dst: CuDevicePtr, src: CuDevicePtr, len: usize) {
        memcpy(dst, src, len, None, (true, true))
    }

    fn cuMemcpyHtoDAsync_v2(dst: CuDevicePtr, src: *const c_void, len: usize, stream: Raw) {
        memcpy(dst, src as usize as u64, len, Some(stream), (true, false))
    }

    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CuDevicePtr, len: usize, stream: Raw) {
        memcpy(dst as usize as u64, src, len, Some(stream), (false, true))
    }

    fn cuMemcpyDtoDAsync_v2(dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Raw) {
        memcpy(dst, src, len, Some(stream), (true, true))
    }

    fn cuMemsetD8_v2(dst: CuDevicePtr, value: u8, count: usize) {
        memset(dst, u32::from(value), 1, count, None)
    }

    fn cuMemsetD16_v2(dst: CuDevicePtr, value: u16, count: usize) {
        memset(dst, u32::from(value), 2, count, None)
    }

    fn cuMemsetD32_v2(dst: CuDevicePtr, value: u32, count: usize) {
        memset(dst, value, 4, count, None)
    }

    fn cuMemsetD8Async(dst: CuDevicePtr, value: u8, count: usize, stream: Raw) {
        memset(dst, u32::from(value), 1, count, Some(stream))
    }

    fn cuMemsetD16Async(dst: CuDevicePtr, value: u16, count: usize, stream: Raw) {
        memset(dst, u32::from(value), 2, count, Some(stream))
    }

    fn cuMemsetD32Async(dst: CuDevicePtr, value: u32, count: usize, stream: Raw) {
        memset(dst, value, 4, count, Some(stream))
    }
}
