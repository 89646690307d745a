//! cudarc's safe driver layer runs on the simulator: contexts and attributes, limits, streams,
//! copies, modules and launches, occupancy, unified (managed) memory. Plus raw
//! `cudarc::driver::sys` sequences for managed memory's error cases, modules' lifecycle, and a
//! function that cannot be modelled returning `CUDA_ERROR_NOT_SUPPORTED`.
//!
//! Each scenario runs in a child process (this test binary, re-executed with the simulator on
//! its library path) and the parent test checks the child's report: no violation and no leak
//! unless the scenario is about them. Scenario functions are ignored and refuse to run alone.

use std::ffi::{CStr, c_int, c_uint, c_void};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, DriverError, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

mod common;
use common::*;

/// The test kernels as text (cudarc's `Ptx::from_src` adds the NUL).
const PTX_SRC: &str = include_str!("../../tests/kernels/test_kernels.ptx");

const NOT_FOUND: DriverError = DriverError(CUresult::CUDA_ERROR_NOT_FOUND);

/// Checks a scenario's report: no violations, no leaks (but the primary context's retains).
fn clean(name: &str) {
    let report = report_of(name);
    println!(
        "{name}: violations {:?}, leaks {:?}",
        kinds(&report),
        report.leaks
    );
    assert!(
        report.violations.is_empty(),
        "{name}: {:#?}",
        report.violations
    );
    assert!(
        report.leaks_without_primary().is_empty(),
        "{name} leaked {:?}",
        report.leaks
    );
}

/// A driver function looked up by name in the loaded driver, to call it with values the
/// `sys` enums cannot hold (bad advice values).
fn driver_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: plain dl calls; the driver is loaded already (cudarc loaded it on the first
    // call), RTLD_NOLOAD only finds it.
    unsafe {
        let mut handle = libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if handle.is_null() {
            handle = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        }
        assert!(!handle.is_null(), "the driver is loaded");
        let symbol = libc::dlsym(handle, name.as_ptr());
        assert!(!symbol.is_null(), "{name:?} is exported");
        symbol
    }
}

/// `cuMemAdvise` with the CUDA 12 signature (cudarc's `cuda-13000` bindings have only `_v2`).
fn advise_v1(ptr: sys::CUdeviceptr, len: usize, advice: c_uint, device: c_int) -> CUresult {
    type Advise = unsafe extern "C" fn(u64, usize, c_uint, c_int) -> CUresult;
    // SAFETY: the symbol is cuMemAdvise, whose C signature this is (advice as its integer).
    let advise: Advise = unsafe { std::mem::transmute(driver_symbol(c"cuMemAdvise")) };
    // SAFETY: the simulator checks the range itself.
    unsafe { advise(ptr, len, advice, device) }
}

/// `cuMemPrefetchAsync` with the CUDA 12 signature `(ptr, count, dstDevice, stream)`.
fn prefetch_v1(
    ptr: sys::CUdeviceptr,
    len: usize,
    device: c_int,
    stream: sys::CUstream,
) -> CUresult {
    type Prefetch = unsafe extern "C" fn(u64, usize, c_int, sys::CUstream) -> CUresult;
    // SAFETY: the symbol is cuMemPrefetchAsync, whose CUDA 12 C signature this is.
    let prefetch: Prefetch = unsafe { std::mem::transmute(driver_symbol(c"cuMemPrefetchAsync")) };
    // SAFETY: the simulator checks the range and stream itself.
    unsafe { prefetch(ptr, len, device, stream) }
}

// ---------------------------------------------------------------------------------------------
// The safe API.

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_safe_context() {
    child();
    use sys::CUdevice_attribute::*;
    let ctx = CudaContext::new(0).unwrap();
    let expected = [
        (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132),
        (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9),
        (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
        (CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
        (CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
        (CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048),
        (
            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            228 * 1024,
        ),
        (
            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            227 * 1024,
        ),
        (CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536),
        (CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 60 << 20),
        (CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 6016),
        (CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 3_201_000),
        (CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1_980_000),
        (CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536),
        (CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 39_321_600),
        (CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
        (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
        (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1),
        (CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0),
        (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
    ];
    for (attribute, value) in expected {
        assert_eq!(ctx.attribute(attribute).unwrap(), value, "{attribute:?}");
    }
    assert!(ctx.name().unwrap().contains("H200"));
    if std::env::var_os("CUDA_SIM_REPORT").is_some() {
        // The simulator's default memory per device (the scenario also runs on a real H200).
        assert_eq!(ctx.total_mem().unwrap(), 1 << 30);
    }

    // Context limits: the H200 defaults, then set and read back.
    use sys::CUlimit::*;
    assert_eq!(ctx.get_limit(CU_LIMIT_STACK_SIZE).unwrap(), 1024);
    assert_eq!(ctx.get_limit(CU_LIMIT_PRINTF_FIFO_SIZE).unwrap(), 8_650_752);
    assert_eq!(
        ctx.get_limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE).unwrap(),
        11_796_480
    );
    assert_eq!(
        ctx.get_limit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH).unwrap_err(),
        DriverError(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT)
    );
    assert_eq!(ctx.get_limit(CU_LIMIT_MALLOC_HEAP_SIZE).unwrap(), 8 << 20);
    ctx.set_limit(CU_LIMIT_STACK_SIZE, 4096).unwrap();
    assert_eq!(ctx.get_limit(CU_LIMIT_STACK_SIZE).unwrap(), 4096);
    // Rounded as the H200 rounds them.
    ctx.set_limit(CU_LIMIT_STACK_SIZE, 1000).unwrap();
    assert_eq!(ctx.get_limit(CU_LIMIT_STACK_SIZE).unwrap(), 1008);
    ctx.set_limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 1 << 20)
        .unwrap();
    assert_eq!(
        ctx.get_limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE).unwrap(),
        3_932_160
    );
    assert!(
        ctx.set_limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 1 << 40)
            .is_err()
    );
    ctx.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, 64 << 20).unwrap();
    assert_eq!(ctx.get_limit(CU_LIMIT_MALLOC_HEAP_SIZE).unwrap(), 64 << 20);
    ctx.set_cache_config(sys::CUfunc_cache::CU_FUNC_CACHE_PREFER_L1)
        .unwrap();

    // Streams and copies.
    let stream = ctx.new_stream().unwrap();
    let other = stream.fork().unwrap();
    let host: Vec<u32> = (0..4096).collect();
    let a = stream.clone_htod(&host).unwrap();
    let mut b = other.alloc_zeros::<u32>(4096).unwrap();
    other.join(&stream).unwrap();
    other.memcpy_dtod(&a, &mut b).unwrap();
    stream.join(&other).unwrap();
    let back = stream.clone_dtoh(&b).unwrap();
    assert_eq!(back, host);
    let zeros = stream.alloc_zeros::<u8>(100).unwrap();
    assert_eq!(stream.clone_dtoh(&zeros).unwrap(), vec![0u8; 100]);
    stream.synchronize().unwrap();
    drop((a, b, zeros));
    ctx.synchronize().unwrap();
}

#[test]
fn safe_context_on_the_simulator() {
    clean("scenario_safe_context");
}

extern "C" fn no_dynamic_shared(_block: c_int) -> usize {
    0
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_safe_module() {
    child();
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let module = ctx.load_module(Ptx::from_src(PTX_SRC)).unwrap();
    let fill = module.load_function("fill_u32").unwrap();
    let add = module.load_function("add_u32").unwrap();
    assert_eq!(
        module.load_function("no_such_kernel").unwrap_err(),
        NOT_FOUND
    );
    // Module variables are not modelled yet.
    assert_eq!(
        module.get_global("no_such_global", &stream).unwrap_err(),
        NOT_FOUND
    );

    let n = 3000u32;
    let mut data = stream.alloc_zeros::<u32>(n as usize).unwrap();
    // SAFETY: fill_u32(dst, value, n) writes n elements of `data`, which has n.
    unsafe {
        stream
            .launch_builder(&fill)
            .arg(&mut data)
            .arg(&7u32)
            .arg(&n)
            .launch(LaunchConfig::for_num_elems(n))
            .unwrap();
        stream
            .launch_builder(&add)
            .arg(&mut data)
            .arg(&5u32)
            .arg(&n)
            .launch(LaunchConfig::for_num_elems(n))
            .unwrap();
    }
    assert_eq!(stream.clone_dtoh(&data).unwrap(), vec![12u32; n as usize]);

    // A cooperative launch: three blocks of 1024 threads are resident at once.
    // SAFETY: as above.
    unsafe {
        stream
            .launch_builder(&fill)
            .arg(&mut data)
            .arg(&1u32)
            .arg(&n)
            .launch_cooperative(LaunchConfig::for_num_elems(n))
            .unwrap();
    }
    assert_eq!(stream.clone_dtoh(&data).unwrap(), vec![1u32; n as usize]);

    // Occupancy, from Hopper's limits (64 warps, 32 blocks, 64 K registers and 228 KiB
    // shared memory per SM; 16 registers per thread; 1 KiB of shared memory reserved per
    // block).
    assert_eq!(
        fill.occupancy_max_active_blocks_per_multiprocessor(256, 0, None)
            .unwrap(),
        8
    );
    assert_eq!(
        fill.occupancy_max_active_blocks_per_multiprocessor(1024, 0, None)
            .unwrap(),
        2
    );
    assert_eq!(
        fill.occupancy_max_active_blocks_per_multiprocessor(32, 0, None)
            .unwrap(),
        32
    );
    assert_eq!(
        fill.occupancy_max_active_blocks_per_multiprocessor(128, 48 << 10, None)
            .unwrap(),
        4
    );
    // Beyond the kernel's dynamic shared memory limit (48 KiB unless raised): none.
    assert_eq!(
        fill.occupancy_max_active_blocks_per_multiprocessor(128, 64 << 10, None)
            .unwrap(),
        0
    );
    let (min_grid, block) = fill
        .occupancy_max_potential_block_size(no_dynamic_shared, 0, 0, None)
        .unwrap();
    assert_eq!((min_grid, block), (2 * 132, 1024));
    let (_, limited) = fill
        .occupancy_max_potential_block_size(no_dynamic_shared, 0, 200, None)
        .unwrap();
    // 128 threads: 16 blocks fill the SM's 2048 threads (200 fits 9, 192 fits 10).
    assert_eq!(limited, 128);
    assert_eq!(
        fill.occupancy_available_dynamic_smem_per_block(2, 256)
            .unwrap(),
        48 << 10
    );
    // As the H200 answers: the SM's shared memory divided, without the per-block reserve.
    assert_eq!(
        fill.occupancy_available_dynamic_smem_per_block(8, 256)
            .unwrap(),
        233_472 / 8
    );
    assert!(
        fill.occupancy_available_dynamic_smem_per_block(40, 32)
            .is_err()
    );
    assert!(
        fill.occupancy_max_active_blocks_per_multiprocessor(0, 0, None)
            .is_err()
    );
    let cluster = LaunchConfig {
        grid_dim: (16, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    assert_eq!(
        fill.occupancy_max_potential_cluster_size(cluster, &stream)
            .unwrap(),
        8
    );
    // Without a cluster dimension: none (as the H200 answers).
    assert_eq!(
        fill.occupancy_max_active_clusters(cluster, &stream)
            .unwrap(),
        0
    );
    stream.synchronize().unwrap();
    drop(data);
    drop((fill, add));
    drop(module);
}

#[test]
fn safe_module_on_the_simulator() {
    let report = report_of("scenario_safe_module");
    for call in [
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuModuleGetGlobal_v2",
        "cuModuleUnload",
        "cuLaunchCooperativeKernel",
    ] {
        assert!(
            report.calls.get(call).is_some_and(|&n| n > 0),
            "{call} was called: {:?}",
            report.calls
        );
    }
    clean("scenario_safe_module");
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_safe_unified() {
    child();
    let ctx: Arc<CudaContext> = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let module = ctx.load_module(Ptx::from_src(PTX_SRC)).unwrap();
    let add = module.load_function("add_u32").unwrap();
    let n = 2048usize;
    // SAFETY: u32 is valid for any bit pattern.
    let mut unified = unsafe { ctx.alloc_unified::<u32>(n, true) }.unwrap();
    // Host access is direct.
    for (i, x) in unified.as_mut_slice().unwrap().iter_mut().enumerate() {
        *x = i as u32;
    }
    unified.prefetch().unwrap();
    // SAFETY: add_u32(data, value, n) touches n elements of `unified`, which has n.
    unsafe {
        stream
            .launch_builder(&add)
            .arg(&mut unified)
            .arg(&5u32)
            .arg(&(n as u32))
            .launch(LaunchConfig::for_num_elems(n as u32))
            .unwrap();
    }
    stream.synchronize().unwrap();
    let expected: Vec<u32> = (0..n as u32).map(|i| i + 5).collect();
    assert_eq!(unified.as_slice().unwrap(), &expected[..]);
    // Copies to and from managed memory.
    assert_eq!(stream.clone_dtoh(&unified).unwrap(), expected);
    let other = ctx.new_stream().unwrap();
    unified
        .attach(&other, sys::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE)
        .unwrap();
    unified.prefetch().unwrap();
    other.memcpy_htod(&vec![9u32; n], &mut unified).unwrap();
    other.synchronize().unwrap();
    assert!(unified.as_slice().unwrap().iter().all(|&x| x == 9));

    // Attached to the host: prefetched to the host.
    // SAFETY: as above.
    let mut host_attached = unsafe { ctx.alloc_unified::<u8>(10_000, false) }.unwrap();
    host_attached.prefetch().unwrap();
    host_attached.as_mut_slice().unwrap().fill(3);
    stream.memset_zeros(&mut host_attached).unwrap();
    stream.synchronize().unwrap();
    assert!(host_attached.as_slice().unwrap().iter().all(|&x| x == 0));
    ctx.synchronize().unwrap();
    drop((unified, host_attached, add, module));
}

#[test]
fn safe_unified_on_the_simulator() {
    let report = report_of("scenario_safe_unified");
    for call in [
        "cuMemAllocManaged",
        "cuMemPrefetchAsync_v2",
        "cuStreamAttachMemAsync",
    ] {
        assert!(
            report.calls.get(call).is_some_and(|&n| n > 0),
            "{call}: {:?}",
            report.calls
        );
    }
    clean("scenario_safe_unified");
}

// ---------------------------------------------------------------------------------------------
// Raw managed memory.

fn managed(size: usize, flags: c_uint) -> (CUresult, sys::CUdeviceptr) {
    let mut ptr = 0;
    // SAFETY: valid out-pointer.
    let status = unsafe { sys::cuMemAllocManaged(&mut ptr, size, flags) };
    (status, ptr)
}

fn device_location(id: c_int) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id,
    }
}

fn range_int(attribute: sys::CUmem_range_attribute, ptr: sys::CUdeviceptr, len: usize) -> c_int {
    let mut value: c_int = 12345;
    // SAFETY: a 4-byte out-buffer, as the attribute needs.
    unsafe {
        ok(sys::cuMemRangeGetAttribute(
            (&raw mut value).cast(),
            4,
            attribute,
            ptr,
            len,
        ))
    };
    value
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_raw_managed() {
    child();
    setup();
    use sys::CUmem_advise::*;
    use sys::CUmem_range_attribute::*;
    const INVALID: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;
    // Flags: exactly one of GLOBAL and HOST; size 0 is invalid.
    assert_eq!(managed(4096, 0).0, INVALID);
    assert_eq!(managed(4096, 3).0, INVALID);
    assert_eq!(managed(4096, 4).0, INVALID);
    assert_eq!(managed(0, 1).0, INVALID);
    let (status, ptr) = managed(4096, 1);
    ok(status);
    let stream = new_stream();
    // SAFETY: `ptr` is a live 4096-byte managed allocation; host access is direct.
    unsafe {
        let mut managed_flag: c_uint = 0;
        let mut memory_type: c_uint = 0;
        let mut ordinal: c_int = -1;
        let mut size: usize = 0;
        use sys::CUpointer_attribute::*;
        ok(sys::cuPointerGetAttribute(
            (&raw mut managed_flag).cast(),
            CU_POINTER_ATTRIBUTE_IS_MANAGED,
            ptr,
        ));
        ok(sys::cuPointerGetAttribute(
            (&raw mut memory_type).cast(),
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr + 100,
        ));
        ok(sys::cuPointerGetAttribute(
            (&raw mut ordinal).cast(),
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        ));
        ok(sys::cuPointerGetAttribute(
            (&raw mut size).cast(),
            CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            ptr + 8,
        ));
        // Managed memory is device memory with IS_MANAGED set, as the H200's driver answers.
        assert_eq!((managed_flag, memory_type, ordinal, size), (1, 2, 0, 4096));
        // cuPointerGetAttributes: the same, and defaults for a pointer in no allocation.
        let mut attributes = [
            CU_POINTER_ATTRIBUTE_IS_MANAGED,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        let (mut m, mut o): (c_uint, c_int) = (7, 7);
        let mut data = [(&raw mut m).cast::<c_void>(), (&raw mut o).cast::<c_void>()];
        ok(sys::cuPointerGetAttributes(
            2,
            attributes.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr,
        ));
        assert_eq!((m, o), (1, 0));
        let local = 0u64;
        ok(sys::cuPointerGetAttributes(
            2,
            attributes.as_mut_ptr(),
            data.as_mut_ptr(),
            (&raw const local) as u64,
        ));
        assert_eq!((m, o), (0, -2));

        // Memsets and copies reach it, and the host reads it directly.
        ok(sys::cuMemsetD32_v2(ptr, 0xabcd_ef01, 1024));
        let words = std::slice::from_raw_parts(ptr as usize as *const u32, 1024);
        assert!(words.iter().all(|&w| w == 0xabcd_ef01));
        let host = vec![0x11u8; 4096];
        ok(sys::cuMemcpyHtoDAsync_v2(
            ptr,
            host.as_ptr().cast(),
            4096,
            stream,
        ));
        let mut back = vec![0u8; 4096];
        ok(sys::cuMemcpyDtoHAsync_v2(
            back.as_mut_ptr().cast(),
            ptr,
            4096,
            stream,
        ));
        ok(sys::cuStreamSynchronize(stream));
        assert_eq!(back, host);

        // Advice, by range. Advice and prefetches cover whole 4 KiB pages: the ranges below
        // are pages of a separate 5-page allocation.
        let (status, region) = managed(5 * 4096, 1);
        ok(status);
        let p = region.next_multiple_of(4096);
        ok(sys::cuMemAdvise_v2(
            p,
            16384,
            CU_MEM_ADVISE_SET_READ_MOSTLY,
            device_location(0),
        ));
        assert_eq!(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, p, 16384), 1);
        ok(sys::cuMemAdvise_v2(
            p + 8192,
            8192,
            CU_MEM_ADVISE_UNSET_READ_MOSTLY,
            device_location(0),
        ));
        assert_eq!(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, p, 16384), 0);
        assert_eq!(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, p, 8192), 1);
        // Within one page: the whole page.
        ok(advise_v1(
            p + 8192,
            100,
            CU_MEM_ADVISE_SET_READ_MOSTLY as c_uint,
            0,
        ));
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, p + 12000, 100),
            1
        );
        ok(advise_v1(
            p,
            8192,
            CU_MEM_ADVISE_SET_PREFERRED_LOCATION as c_uint,
            0,
        ));
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, p, 8192),
            0
        );
        // Not the same over the whole range: CU_DEVICE_INVALID.
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, p, 16384),
            -2
        );
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, p, 4096),
            1
        );
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, p, 4096),
            0
        );
        ok(advise_v1(
            p,
            16384,
            CU_MEM_ADVISE_SET_ACCESSED_BY as c_uint,
            -1,
        ));
        ok(advise_v1(
            p,
            16384,
            CU_MEM_ADVISE_SET_ACCESSED_BY as c_uint,
            0,
        ));
        let mut accessed = [99 as c_int; 3];
        ok(sys::cuMemRangeGetAttribute(
            accessed.as_mut_ptr().cast(),
            12,
            CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
            p,
            16384,
        ));
        // Devices first, then the host, then CU_DEVICE_INVALID: the H200's order.
        assert_eq!(accessed, [0, -1, -2]);
        ok(advise_v1(
            p,
            16384,
            CU_MEM_ADVISE_UNSET_ACCESSED_BY as c_uint,
            -1,
        ));
        // An invalid device is CUDA_ERROR_INVALID_DEVICE; a range past the allocation, an
        // empty one, or one in device memory invalid.
        assert_eq!(
            advise_v1(p, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION as c_uint, 5),
            CUresult::CUDA_ERROR_INVALID_DEVICE
        );
        assert_eq!(
            advise_v1(p, 32768, CU_MEM_ADVISE_SET_READ_MOSTLY as c_uint, 0),
            INVALID
        );
        assert_eq!(
            advise_v1(p, 0, CU_MEM_ADVISE_SET_READ_MOSTLY as c_uint, 0),
            INVALID
        );

        // Prefetches (both signatures) and the last prefetch location.
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, p, 16384),
            -2
        );
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, p, 16384),
            0
        );
        ok(sys::cuMemPrefetchAsync_v2(
            p,
            16384,
            device_location(0),
            0,
            stream,
        ));
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, p, 16384),
            0
        );
        ok(prefetch_v1(p, 1024, -1, stream));
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, p, 4096),
            -1
        );
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, p, 4096),
            2
        );
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID, p, 4096),
            -1
        );
        assert_eq!(
            range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, p, 16384),
            -2
        );
        assert_eq!(
            sys::cuMemPrefetchAsync_v2(p, 4096, device_location(0), 1, stream),
            INVALID
        );
        assert_eq!(
            prefetch_v1(p, 4096, 3, stream),
            CUresult::CUDA_ERROR_INVALID_DEVICE
        );
        assert_eq!(prefetch_v1(p, 0, 0, stream), INVALID);
        let mut attributes = [
            CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
            CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
        ];
        let (mut rm, mut lp): (c_int, c_int) = (9, 9);
        let mut data = [
            (&raw mut rm).cast::<c_void>(),
            (&raw mut lp).cast::<c_void>(),
        ];
        let mut sizes = [4usize, 4];
        ok(sys::cuMemRangeGetAttributes(
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            attributes.as_mut_ptr(),
            2,
            p,
            4096,
        ));
        assert_eq!((rm, lp), (1, -1));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemFree_v2(region));

        // Attaching: whole allocations, one flag.
        ok(sys::cuStreamAttachMemAsync(stream, ptr, 0, 4));
        ok(sys::cuStreamAttachMemAsync(stream, ptr, 4096, 1));
        assert_eq!(sys::cuStreamAttachMemAsync(stream, ptr, 100, 1), INVALID);
        assert_eq!(
            sys::cuStreamAttachMemAsync(stream, ptr + 512, 0, 1),
            INVALID
        );
        assert_eq!(sys::cuStreamAttachMemAsync(stream, ptr, 0, 3), INVALID);
        ok(sys::cuStreamSynchronize(stream));

        // A kernel writes it (launched through a module's function).
        let mut module = std::ptr::null_mut();
        ok(sys::cuModuleLoadData(&mut module, PTX.as_ptr().cast()));
        let mut fill = std::ptr::null_mut();
        ok(sys::cuModuleGetFunction(
            &mut fill,
            module,
            c"fill_u32".as_ptr(),
        ));
        let (mut dst, mut value, mut n) = (ptr, 42u32, 1024u32);
        let mut params = [
            (&raw mut dst).cast::<c_void>(),
            (&raw mut value).cast(),
            (&raw mut n).cast(),
        ];
        ok(sys::cuLaunchKernel(
            fill,
            4,
            1,
            1,
            256,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ));
        ok(sys::cuStreamSynchronize(stream));
        assert!(words.iter().all(|&w| w == 42));
        ok(sys::cuModuleUnload(module));

        // Freed by cuMemFree, ordered after the stream's work by the synchronisation.
        ok(sys::cuMemFree_v2(ptr));
        // Memory reports: managed memory is charged to the device.
        let (_, big) = managed(512 << 20, 2);
        let (mut free, mut total) = (0usize, 0usize);
        ok(sys::cuMemGetInfo_v2(&mut free, &mut total));
        assert!(free <= total - (512 << 20), "free {free} of {total}");
        ok(sys::cuMemFree_v2(big));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn raw_managed_on_the_simulator() {
    clean("scenario_raw_managed");
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_managed_prefetch_out_of_range() {
    child();
    setup();
    let stream = new_stream();
    let (status, ptr) = managed(4096, 1);
    ok(status);
    let mut device = 0;
    // SAFETY: live allocations and stream; the bad ranges are only looked up.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut device, 4096));
        let location = device_location(0);
        // Past the end of the managed allocation.
        assert_eq!(
            sys::cuMemPrefetchAsync_v2(ptr + 1024, 4096, location, 0, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        // Not managed memory.
        assert_eq!(
            prefetch_v1(device, 4096, 0, stream),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemFree_v2(ptr));
        ok(sys::cuMemFree_v2(device));
        // A double free of managed memory.
        assert_eq!(sys::cuMemFree_v2(ptr), CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn managed_prefetch_out_of_range_is_reported() {
    let report = report_of("scenario_managed_prefetch_out_of_range");
    println!("violations {:?}, leaks {:?}", kinds(&report), report.leaks);
    assert_eq!(
        kinds(&report),
        ["out-of-bounds", "out-of-bounds", "double-destroy"]
    );
    assert_message_contains(&report, 0, "past the end");
    assert_message_contains(&report, 1, "not managed");
    assert_no_leaks(&report);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_managed_bad_advice() {
    child();
    setup();
    let (status, ptr) = managed(8192, 1);
    ok(status);
    // Advice values outside 1..=6 are refused.
    assert_eq!(
        advise_v1(ptr, 8192, 0, 0),
        CUresult::CUDA_ERROR_INVALID_VALUE
    );
    assert_eq!(
        advise_v1(ptr, 8192, 7, 0),
        CUresult::CUDA_ERROR_INVALID_VALUE
    );
    ok(advise_v1(ptr, 8192, 1, 0));
    // SAFETY: our own allocation.
    unsafe { ok(sys::cuMemFree_v2(ptr)) };
    teardown();
}

#[test]
fn managed_bad_advice_is_invalid_value() {
    clean("scenario_managed_bad_advice");
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_managed_leak() {
    child();
    setup();
    let (status, _ptr) = managed(4096, 2);
    ok(status);
    teardown();
}

#[test]
fn managed_leak_is_counted() {
    let report = report_of("scenario_managed_leak");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(
        report
            .leaks_without_primary()
            .into_iter()
            .collect::<Vec<_>>(),
        [("managed_allocation".to_string(), 1)]
    );
}

// ---------------------------------------------------------------------------------------------
// Modules and not-supported functions.

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_module_lifecycle() {
    child();
    // SAFETY: plain driver calls; destroyed handles are only looked up.
    unsafe {
        ok(sys::cuInit(0));
        let mut module = std::ptr::null_mut();
        // No current context: wrong context.
        assert_eq!(
            sys::cuModuleLoadData(&mut module, PTX.as_ptr().cast()),
            CUresult::CUDA_ERROR_INVALID_CONTEXT
        );
        setup();
        ok(sys::cuModuleLoadDataEx(
            &mut module,
            PTX.as_ptr().cast(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ));
        let (mut f, mut g) = (std::ptr::null_mut(), std::ptr::null_mut());
        ok(sys::cuModuleGetFunction(
            &mut f,
            module,
            c"add_u32".as_ptr(),
        ));
        ok(sys::cuModuleGetFunction(
            &mut g,
            module,
            c"add_u32".as_ptr(),
        ));
        assert_eq!(f, g, "one function per kernel and context");
        assert_eq!(
            sys::cuModuleGetFunction(&mut g, module, c"nope".as_ptr()),
            CUresult::CUDA_ERROR_NOT_FOUND
        );
        let (mut ptr, mut size) = (0, 0);
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut ptr, &mut size, module, c"nope".as_ptr()),
            CUresult::CUDA_ERROR_NOT_FOUND
        );
        let mut value = 0;
        ok(sys::cuFuncGetAttribute(
            &mut value,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            f,
        ));
        assert_eq!(value, 1024);
        ok(sys::cuModuleUnload(module));
        // Uses after unload.
        assert_eq!(
            sys::cuModuleGetFunction(&mut g, module, c"add_u32".as_ptr()),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(
            sys::cuModuleUnload(module),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        // A module loaded from a file, left loaded: a leak.
        let path = std::env::temp_dir().join(format!("cuda-sim-module-{}.ptx", std::process::id()));
        std::fs::write(&path, PTX_SRC).unwrap();
        let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mut kept = std::ptr::null_mut();
        ok(sys::cuModuleLoad(&mut kept, name.as_ptr()));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            sys::cuModuleLoad(&mut module, c"/no/such/file.ptx".as_ptr()),
            CUresult::CUDA_ERROR_FILE_NOT_FOUND
        );
    }
    teardown();
}

#[test]
fn module_lifecycle_is_checked() {
    let report = report_of("scenario_module_lifecycle");
    println!("violations {:?}, leaks {:?}", kinds(&report), report.leaks);
    assert_eq!(
        kinds(&report),
        ["wrong-context", "destroyed-handle", "double-destroy"]
    );
    assert_eq!(
        report
            .leaks_without_primary()
            .into_iter()
            .collect::<Vec<_>>(),
        [("module".to_string(), 1)]
    );
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_not_supported() {
    child();
    setup();
    const NOT_SUPPORTED: CUresult = CUresult::CUDA_ERROR_NOT_SUPPORTED;
    use std::mem::MaybeUninit;
    // SAFETY: the descriptors are never read: the functions refuse at once (they hold enums,
    // so they cannot even be zeroed).
    unsafe {
        let copy = MaybeUninit::<sys::CUDA_MEMCPY3D>::uninit();
        assert_eq!(sys::cuMemcpy3D_v2(copy.as_ptr()), NOT_SUPPORTED);
        let mut array = std::ptr::null_mut();
        let desc = MaybeUninit::<sys::CUDA_ARRAY_DESCRIPTOR>::uninit();
        assert_eq!(
            sys::cuArrayCreate_v2(&mut array, desc.as_ptr()),
            NOT_SUPPORTED
        );
        let mut memory = std::ptr::null_mut();
        let handle = MaybeUninit::<sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC>::uninit();
        assert_eq!(
            sys::cuImportExternalMemory(&mut memory, handle.as_ptr()),
            NOT_SUPPORTED
        );
        let mut texture = 0;
        let resource = MaybeUninit::<sys::CUDA_RESOURCE_DESC>::uninit();
        assert_eq!(
            sys::cuTexObjectCreate(
                &mut texture,
                resource.as_ptr(),
                std::ptr::null(),
                std::ptr::null()
            ),
            NOT_SUPPORTED
        );
        // cudarc's error names it.
        let error = DriverError(sys::cuMemcpy3D_v2(copy.as_ptr()));
        assert_eq!(
            error.error_name().unwrap().to_str().unwrap(),
            "CUDA_ERROR_NOT_SUPPORTED"
        );
    }
    teardown();
}

#[test]
fn not_supported_functions_answer_801() {
    clean("scenario_not_supported");
}

// ---------------------------------------------------------------------------------------------
// A probe of the real driver (run by hand on a GPU machine, never under the simulator): prints
// the values the simulator models, to compare.

#[test]
#[ignore = "prints what the real driver answers; run by hand on a GPU machine"]
fn probe_real_driver() {
    fn name(status: CUresult) -> String {
        format!("{status:?}")
    }
    macro_rules! show {
        ($label:expr, $value:expr) => {
            println!("probe {} = {:?}", $label, $value)
        };
    }
    // SAFETY: plain driver calls with valid out-pointers; bad arguments are refused by the
    // driver (ranges and handles are looked up, not dereferenced).
    unsafe {
        ok(sys::cuInit(0));
        let mut version = 0;
        ok(sys::cuDriverGetVersion(&mut version));
        show!("driver_version", version);
        let mut ctx_none = std::ptr::null_mut();
        show!(
            "module_load_without_context",
            name(sys::cuModuleLoadData(&mut ctx_none, PTX.as_ptr().cast()))
        );
        let context = setup();
        type GetAttribute = unsafe extern "C" fn(*mut c_int, c_uint, c_int) -> CUresult;
        type GetLimit = unsafe extern "C" fn(*mut usize, c_uint) -> CUresult;
        type SetLimit = unsafe extern "C" fn(c_uint, usize) -> CUresult;
        let get_attribute: GetAttribute =
            std::mem::transmute(driver_symbol(c"cuDeviceGetAttribute"));
        let get_limit: GetLimit = std::mem::transmute(driver_symbol(c"cuCtxGetLimit"));
        let set_limit: SetLimit = std::mem::transmute(driver_symbol(c"cuCtxSetLimit"));
        for attribute in 1..148u32 {
            let mut value = 0;
            let status = get_attribute(&mut value, attribute, 0);
            if status == CUresult::CUDA_SUCCESS {
                println!("probe attribute {attribute} = {value}");
            } else {
                println!("probe attribute {attribute} = {}", name(status));
            }
        }
        for limit in 0..10u32 {
            let mut value = 0usize;
            let status = get_limit(&mut value, limit);
            println!("probe limit {limit} = {value} {}", name(status));
        }
        let set = |limit: u32, value: usize| {
            let status = set_limit(limit, value);
            let mut back = 0usize;
            let read = get_limit(&mut back, limit);
            println!(
                "probe set_limit {limit} {value} = {} -> {back} {}",
                name(status),
                name(read)
            );
        };
        set(0, 4096);
        set(3, 100);
        set(3, 24);
        set(5, 256);
        set(5, 128);
        set(6, 1 << 40);
        set(6, 1 << 20);
        let mut cache = 0u32;
        show!(
            "cache_config",
            (
                name(sys::cuCtxGetCacheConfig((&raw mut cache).cast())),
                cache
            )
        );
        show!("profiler_start", name(sys::cuProfilerStart()));
        show!("profiler_stop", name(sys::cuProfilerStop()));
        let mut mode = 0u32;
        show!(
            "loading_mode",
            (
                name(sys::cuModuleGetLoadingMode((&raw mut mode).cast())),
                mode
            )
        );

        // Modules and occupancy.
        let mut module = std::ptr::null_mut();
        ok(sys::cuModuleLoadData(&mut module, PTX.as_ptr().cast()));
        let mut fill = std::ptr::null_mut();
        ok(sys::cuModuleGetFunction(
            &mut fill,
            module,
            c"fill_u32".as_ptr(),
        ));
        let mut other = std::ptr::null_mut();
        show!(
            "get_function_missing",
            name(sys::cuModuleGetFunction(
                &mut other,
                module,
                c"nope".as_ptr()
            ))
        );
        let (mut gptr, mut gsize) = (0, 0);
        show!(
            "get_global_missing",
            name(sys::cuModuleGetGlobal_v2(
                &mut gptr,
                &mut gsize,
                module,
                c"nope".as_ptr()
            ))
        );
        let mut no_module = std::ptr::null_mut();
        show!(
            "module_load_missing_file",
            name(sys::cuModuleLoad(
                &mut no_module,
                c"/no/such/file.ptx".as_ptr()
            ))
        );
        use sys::CUfunction_attribute::*;
        for (label, attribute) in [
            ("num_regs", CU_FUNC_ATTRIBUTE_NUM_REGS),
            ("shared", CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            (
                "max_dynamic",
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            ),
            ("max_threads", CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        ] {
            let mut value = 0;
            ok(sys::cuFuncGetAttribute(&mut value, attribute, fill));
            show!(format!("func {label}"), value);
        }
        for (block, dynamic) in [
            (256, 0),
            (1024, 0),
            (32, 0),
            (128, 48 << 10),
            (128, 64 << 10),
            (0, 0),
            (2048, 0),
        ] {
            let mut blocks = 0;
            let status =
                sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, fill, block, dynamic);
            show!(
                format!("occupancy blocks {block} {dynamic}"),
                (name(status), blocks)
            );
        }
        for limit in [0, 200] {
            let (mut grid, mut block) = (0, 0);
            let status =
                sys::cuOccupancyMaxPotentialBlockSize(&mut grid, &mut block, fill, None, 0, limit);
            show!(
                format!("occupancy potential limit {limit}"),
                (name(status), grid, block)
            );
        }
        for (blocks, block) in [(2, 256), (8, 256), (40, 32)] {
            let mut dynamic = 0usize;
            let status =
                sys::cuOccupancyAvailableDynamicSMemPerBlock(&mut dynamic, fill, blocks, block);
            show!(
                format!("occupancy available {blocks} {block}"),
                (name(status), dynamic)
            );
        }

        // Managed memory.
        let stream = new_stream();
        for (size, flags) in [(4096, 0), (4096, 3), (4096, 4), (0, 1)] {
            show!(
                format!("alloc_managed {size} {flags}"),
                name(managed(size, flags).0)
            );
        }
        let (status, ptr) = managed(4096, 1);
        ok(status);
        use sys::CUpointer_attribute::*;
        for (label, attribute) in [
            ("context", CU_POINTER_ATTRIBUTE_CONTEXT),
            ("memory_type", CU_POINTER_ATTRIBUTE_MEMORY_TYPE),
            ("is_managed", CU_POINTER_ATTRIBUTE_IS_MANAGED),
            ("ordinal", CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL),
            ("mapped", CU_POINTER_ATTRIBUTE_MAPPED),
            ("range_size", CU_POINTER_ATTRIBUTE_RANGE_SIZE),
            ("sync_memops", CU_POINTER_ATTRIBUTE_SYNC_MEMOPS),
            (
                "legacy_ipc",
                CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
            ),
            ("access_flags", CU_POINTER_ATTRIBUTE_ACCESS_FLAGS),
        ] {
            let mut value = 0u64;
            let status = sys::cuPointerGetAttribute((&raw mut value).cast(), attribute, ptr);
            show!(
                format!("managed pointer {label}"),
                (name(status), value, value == context as u64)
            );
        }
        let mut attributes = [
            CU_POINTER_ATTRIBUTE_IS_MANAGED,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            CU_POINTER_ATTRIBUTE_CONTEXT,
        ];
        let (mut m, mut o, mut t, mut c): (c_uint, c_int, c_uint, u64) = (7, 7, 7, 7);
        let mut data = [
            (&raw mut m).cast::<c_void>(),
            (&raw mut o).cast(),
            (&raw mut t).cast(),
            (&raw mut c).cast(),
        ];
        let local = 0u64;
        let status = sys::cuPointerGetAttributes(
            4,
            attributes.as_mut_ptr(),
            data.as_mut_ptr(),
            (&raw const local) as u64,
        );
        show!(
            "pointer_attributes of a stack address",
            (name(status), m, o, t, c)
        );
        let mut sync_ptr = 0;
        ok(sys::cuMemAlloc_v2(&mut sync_ptr, 4096));
        let mut value = 0u64;
        show!(
            "cumemalloc legacy_ipc",
            (
                name(sys::cuPointerGetAttribute(
                    (&raw mut value).cast(),
                    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                    sync_ptr
                )),
                value
            )
        );
        for advice in [0, 7] {
            show!(
                format!("advise {advice}"),
                name(advise_v1(ptr, 4096, advice, 0))
            );
        }
        show!("advise past the end", name(advise_v1(ptr, 8192, 1, 0)));
        show!("advise count 0", name(advise_v1(ptr, 0, 1, 0)));
        show!("advise device 5", name(advise_v1(ptr, 4096, 3, 5)));
        show!(
            "advise on cuMemAlloc memory",
            name(advise_v1(sync_ptr, 4096, 1, 0))
        );
        show!("accessed_by cpu", name(advise_v1(ptr, 4096, 5, -1)));
        show!("accessed_by 0", name(advise_v1(ptr, 4096, 5, 0)));
        let mut accessed = [99 as c_int; 3];
        let status = sys::cuMemRangeGetAttribute(
            accessed.as_mut_ptr().cast(),
            12,
            sys::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
            ptr,
            4096,
        );
        show!("accessed_by list", (name(status), accessed));
        ok(advise_v1(ptr, 2048, 3, 0));
        use sys::CUmem_range_attribute::*;
        for (label, attribute, len) in [
            (
                "preferred half",
                CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                2048,
            ),
            (
                "preferred whole",
                CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                4096,
            ),
            (
                "preferred type half",
                CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE,
                2048,
            ),
            (
                "last prefetch initial",
                CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                4096,
            ),
            (
                "last prefetch type initial",
                CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE,
                4096,
            ),
        ] {
            let mut value: c_int = 12345;
            let status =
                sys::cuMemRangeGetAttribute((&raw mut value).cast(), 4, attribute, ptr, len);
            show!(format!("range {label}"), (name(status), value));
        }
        show!(
            "prefetch v2 device",
            name(sys::cuMemPrefetchAsync_v2(
                ptr,
                4096,
                device_location(0),
                0,
                stream
            ))
        );
        show!(
            "prefetch v1 cpu 1024",
            name(prefetch_v1(ptr, 1024, -1, stream))
        );
        ok(sys::cuStreamSynchronize(stream));
        for (label, attribute, len) in [
            (
                "last prefetch first",
                CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                1024,
            ),
            (
                "last prefetch whole",
                CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                4096,
            ),
            (
                "last prefetch type first",
                CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE,
                1024,
            ),
            (
                "last prefetch id first",
                CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID,
                1024,
            ),
        ] {
            let mut value: c_int = 12345;
            let status =
                sys::cuMemRangeGetAttribute((&raw mut value).cast(), 4, attribute, ptr, len);
            show!(format!("range {label}"), (name(status), value));
        }
        show!(
            "prefetch past the end",
            name(sys::cuMemPrefetchAsync_v2(
                ptr + 1024,
                4096,
                device_location(0),
                0,
                stream
            ))
        );
        show!(
            "prefetch cuMemAlloc memory",
            name(prefetch_v1(sync_ptr, 4096, 0, stream))
        );
        show!(
            "prefetch v2 flags 1",
            name(sys::cuMemPrefetchAsync_v2(
                ptr,
                4096,
                device_location(0),
                1,
                stream
            ))
        );
        show!(
            "prefetch v1 device 3",
            name(prefetch_v1(ptr, 4096, 3, stream))
        );
        show!("prefetch count 0", name(prefetch_v1(ptr, 0, 0, stream)));
        show!(
            "attach 0 single",
            name(sys::cuStreamAttachMemAsync(stream, ptr, 0, 4))
        );
        show!(
            "attach whole global",
            name(sys::cuStreamAttachMemAsync(stream, ptr, 4096, 1))
        );
        show!(
            "attach 100",
            name(sys::cuStreamAttachMemAsync(stream, ptr, 100, 1))
        );
        show!(
            "attach interior",
            name(sys::cuStreamAttachMemAsync(stream, ptr + 512, 0, 1))
        );
        show!(
            "attach flags 3",
            name(sys::cuStreamAttachMemAsync(stream, ptr, 0, 3))
        );
        show!(
            "attach cuMemAlloc memory",
            name(sys::cuStreamAttachMemAsync(stream, sync_ptr, 0, 1))
        );
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemFree_v2(ptr));
        ok(sys::cuMemFree_v2(sync_ptr));
        // Advice granularity: a 2 MiB allocation, advice on its first 1 KiB.
        let (status, big) = managed(2 << 20, 1);
        ok(status);
        ok(advise_v1(big, 1024, 3, 0));
        for offset in [0usize, 1024, 4096, 8192, 65536, 1 << 20] {
            let mut value: c_int = 12345;
            let status = sys::cuMemRangeGetAttribute(
                (&raw mut value).cast(),
                4,
                CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                big + offset as u64,
                1024,
            );
            show!(
                format!("granularity preferred at {offset}"),
                (name(status), value)
            );
        }
        ok(sys::cuMemFree_v2(big));
        // A managed allocation's base alignment.
        let (_, small) = managed(100, 1);
        let (_, next) = managed(100, 1);
        show!(
            "managed alignment",
            (small % (1 << 21), next.wrapping_sub(small))
        );
        ok(sys::cuMemFree_v2(small));
        ok(sys::cuMemFree_v2(next));
        set(7, 1000);
        set(8, 1);
        set(2, 1 << 20);
        set(1, 1000);
        set(0, 1000);
        let mut dynamic = 0usize;
        show!(
            "occupancy available blocks 0",
            name(sys::cuOccupancyAvailableDynamicSMemPerBlock(
                &mut dynamic,
                fill,
                0,
                256
            ))
        );
        show!(
            "occupancy available block 0",
            name(sys::cuOccupancyAvailableDynamicSMemPerBlock(
                &mut dynamic,
                fill,
                1,
                0
            ))
        );
        show!(
            "occupancy available blocks 32 of 64",
            (
                name(sys::cuOccupancyAvailableDynamicSMemPerBlock(
                    &mut dynamic,
                    fill,
                    32,
                    64
                )),
                dynamic
            )
        );
        let (mut grid, mut block) = (0, 0);
        show!(
            "occupancy potential limit 2000",
            (
                name(sys::cuOccupancyMaxPotentialBlockSize(
                    &mut grid, &mut block, fill, None, 0, 2000
                )),
                grid,
                block
            )
        );
        show!(
            "occupancy potential dynamic 100K",
            (
                name(sys::cuOccupancyMaxPotentialBlockSize(
                    &mut grid,
                    &mut block,
                    fill,
                    None,
                    100 << 10,
                    0
                )),
                grid,
                block
            )
        );
        // Clusters: the largest size, and active clusters of 128-thread blocks.
        for (x, shared) in [
            (0u32, 0u32),
            (1, 0),
            (2, 0),
            (4, 0),
            (8, 0),
            (16, 0),
            (2, 48 << 10),
        ] {
            let mut attribute: sys::CUlaunchAttribute = std::mem::zeroed();
            attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attribute.value.clusterDim =
                sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x, y: 1, z: 1 };
            let config = sys::CUlaunchConfig {
                gridDimX: 64,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: 128,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: shared,
                hStream: stream,
                attrs: if x == 0 {
                    std::ptr::null_mut()
                } else {
                    &mut attribute
                },
                numAttrs: u32::from(x != 0),
            };
            let mut clusters = 0;
            let status = sys::cuOccupancyMaxActiveClusters(&mut clusters, fill, &config);
            let mut size = 0;
            let size_status = sys::cuOccupancyMaxPotentialClusterSize(&mut size, fill, &config);
            show!(
                format!("clusters {x} shared {shared}"),
                (name(status), clusters, name(size_status), size)
            );
        }
        ok(sys::cuModuleUnload(module));
        destroy_stream(stream);
    }
    teardown();
}
