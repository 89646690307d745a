//! Virtual memory management, pool attributes and the device's current pool, and green
//! contexts on the simulator. As in `selftest.rs`, each scenario drives raw
//! `cudarc::driver::sys` calls in a child process (this test binary, re-executed with the
//! simulator on its library path), and the parent test reads the child's report.

use std::ffi::c_void;

use cuda_sim::{Report, SimCommand};
use cudarc::driver::sys::{self, CUresult};

mod common;
use common::*;

const MIB: usize = 1 << 20;
const GRANULARITY: usize = 2 * MIB;
const POSIX_FD: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

fn device_location(id: i32) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id,
    }
}

/// Pinned device memory of device 0 with the given requested handle types.
fn prop(handle_types: sys::CUmemAllocationHandleType) -> sys::CUmemAllocationProp {
    // SAFETY: all-zero is the documented default of the struct.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = handle_types;
    prop.location = device_location(0);
    prop
}

fn granularity(prop: &sys::CUmemAllocationProp) -> Result<usize, CUresult> {
    let mut value = 0;
    // SAFETY: valid pointers.
    let status = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut value,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    };
    match status {
        CUresult::CUDA_SUCCESS => Ok(value),
        error => Err(error),
    }
}

fn create(size: usize, handle_types: sys::CUmemAllocationHandleType) -> u64 {
    let mut handle = 0;
    // SAFETY: valid pointers.
    unsafe { ok(sys::cuMemCreate(&mut handle, size, &prop(handle_types), 0)) };
    handle
}

fn reserve(size: usize) -> sys::CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: valid out-pointer.
    unsafe { ok(sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0)) };
    ptr
}

fn read_write(ptr: sys::CUdeviceptr, size: usize) {
    let desc = sys::CUmemAccessDesc {
        location: device_location(0),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: one descriptor.
    unsafe { ok(sys::cuMemSetAccess(ptr, size, &desc, 1)) };
}

/// Reserves `size` bytes, maps one new allocation of that size there, and grants access.
fn mapped(size: usize) -> (sys::CUdeviceptr, u64) {
    let ptr = reserve(size);
    let handle = create(
        size,
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
    );
    // SAFETY: our own reservation and handle.
    unsafe { ok(sys::cuMemMap(ptr, size, 0, handle, 0)) };
    read_write(ptr, size);
    (ptr, handle)
}

/// Unmaps, releases and frees what `mapped` made.
fn unmapped((ptr, handle): (sys::CUdeviceptr, u64), size: usize) {
    // SAFETY: our own mapping, handle and reservation.
    unsafe {
        ok(sys::cuMemUnmap(ptr, size));
        ok(sys::cuMemRelease(handle));
        ok(sys::cuMemAddressFree(ptr, size));
    }
}

fn read(ptr: sys::CUdeviceptr, len: usize) -> Vec<u8> {
    let mut host = vec![0u8; len];
    // SAFETY: `host` has room for `len` bytes.
    unsafe { ok(sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), ptr, len)) };
    host
}

/// Launches `fill_u32`/`add_u32` (`(ptr, value, n)`) over `n` threads; returns the status.
fn launch(kernel: sys::CUkernel, stream: sys::CUstream, ptr: u64, value: u32, n: u32) -> CUresult {
    let (mut ptr, mut value, mut n) = (ptr, value, n);
    let mut params = [
        (&mut ptr as *mut u64).cast::<c_void>(),
        (&mut value as *mut u32).cast(),
        (&mut n as *mut u32).cast(),
    ];
    // SAFETY: one pointer per kernel parameter, each to a value of the parameter's size.
    unsafe {
        sys::cuLaunchKernel(
            kernel as sys::CUfunction,
            n.div_ceil(128),
            1,
            1,
            128,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_granularity() {
    child();
    setup();
    let none = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    assert_eq!(granularity(&prop(none)), Ok(GRANULARITY));
    assert_eq!(granularity(&prop(POSIX_FD)), Ok(GRANULARITY));
    let mut minimum = 0;
    // SAFETY: valid pointers.
    unsafe {
        ok(sys::cuMemGetAllocationGranularity(
            &mut minimum,
            &prop(none),
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        ))
    };
    assert_eq!(minimum, GRANULARITY);
    let mut host = prop(none);
    host.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA;
    assert_eq!(granularity(&host), Ok(GRANULARITY));
    let mut bad = prop(none);
    bad.location.id = 7;
    assert_eq!(granularity(&bad), Err(CUresult::CUDA_ERROR_INVALID_DEVICE));
    bad.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_INVALID;
    assert_eq!(granularity(&bad), Err(CUresult::CUDA_ERROR_INVALID_VALUE));
    let win32 = prop(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_WIN32);
    assert_eq!(granularity(&win32), Err(CUresult::CUDA_ERROR_INVALID_VALUE));
    let fabric = prop(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC);
    assert_eq!(
        granularity(&fabric),
        Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
    );
    // Sizes must be multiples of the granularity.
    let mut handle = 0;
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(
            sys::cuMemCreate(&mut handle, MIB, &prop(none), 0),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        let mut ptr = 0;
        assert_eq!(
            sys::cuMemAddressReserve(&mut ptr, GRANULARITY + 4096, 0, 0, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
    }
    teardown();
}

/// A 1 GiB reservation (the whole default device memory) in 512 mappings of 2 MiB: filled
/// with one memset across all mappings, read back at both ends and across a boundary, touched
/// by a kernel across a boundary, unmapped in one call and released (half of the handles
/// before the unmap, so that their memory lives on in the mapping).
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_gib_in_chunks() {
    child();
    setup();
    let total = 1 << 30;
    let chunks = total / GRANULARITY;
    let stream = new_stream();
    let library = load();
    let add = kernel(library, c"add_u32");
    // SAFETY: valid pointers throughout; every range is our own mapping.
    unsafe {
        let base = reserve(total);
        assert_eq!(base as usize % GRANULARITY, 0);
        let none = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        let handles: Vec<u64> = (0..chunks).map(|_| create(GRANULARITY, none)).collect();
        let (mut free, mut all) = (0, 0);
        ok(sys::cuMemGetInfo_v2(&mut free, &mut all));
        assert_eq!((free, all), (0, total), "physical memory counts as used");
        let mut more = 0;
        assert_eq!(
            sys::cuMemCreate(&mut more, GRANULARITY, &prop(none), 0),
            CUresult::CUDA_ERROR_OUT_OF_MEMORY
        );
        for (i, &handle) in handles.iter().enumerate() {
            ok(sys::cuMemMap(
                base + (i * GRANULARITY) as u64,
                GRANULARITY,
                0,
                handle,
                0,
            ));
        }
        // Overlapping an existing mapping, or beyond the allocation, is refused.
        assert_eq!(
            sys::cuMemMap(base, GRANULARITY, 0, handles[1], 0),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        read_write(base, total);
        let mut flags = 0;
        ok(sys::cuMemGetAccess(&mut flags, &device_location(0), base));
        assert_eq!(flags, 3);
        for handle in handles.iter().step_by(2) {
            ok(sys::cuMemRelease(*handle));
        }
        ok(sys::cuMemsetD32Async(base, 0x01020304, total / 4, stream));
        let boundary = base + GRANULARITY as u64;
        ok(launch(add, stream, boundary - 512, 1, 256));
        ok(sys::cuStreamSynchronize(stream));
        let word = 0x01020304u32.to_le_bytes();
        let first = read(base, 4096);
        assert!(first.chunks(4).all(|w| w == word));
        let last = read(base + (total - 4096) as u64, 4096);
        assert!(last.chunks(4).all(|w| w == word));
        let across = read(boundary - 1024, 2048);
        let words: Vec<u32> = across
            .chunks(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        assert!(words[..128].iter().all(|&w| w == 0x01020304));
        assert!(words[128..384].iter().all(|&w| w == 0x01020305), "kernel");
        assert!(words[384..].iter().all(|&w| w == 0x01020304));
        ok(sys::cuMemUnmap(base, total));
        for handle in handles.iter().skip(1).step_by(2) {
            ok(sys::cuMemRelease(*handle));
        }
        ok(sys::cuMemGetInfo_v2(&mut free, &mut all));
        assert_eq!(free, total, "unmapped and released memory is free again");
        ok(sys::cuMemAddressFree(base, total));
        ok(sys::cuLibraryUnload(library));
    }
    destroy_stream(stream);
    teardown();
}

/// A mapping touched before `cuMemSetAccess`, after `cuMemUnmap`, and a touch of a reserved
/// but unmapped range.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_bad_touches() {
    child();
    setup();
    let stream = new_stream();
    // SAFETY: valid pointers; the bad calls are refused by the simulator before any byte moves.
    unsafe {
        let ptr = reserve(2 * GRANULARITY);
        let handle = create(
            GRANULARITY,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        );
        ok(sys::cuMemMap(ptr, GRANULARITY, 0, handle, 0));
        let mut flags = 9;
        ok(sys::cuMemGetAccess(&mut flags, &device_location(0), ptr));
        assert_eq!(flags, 0, "no access until cuMemSetAccess");
        assert_ne!(
            sys::cuMemsetD8Async(ptr, 1, 16, stream),
            CUresult::CUDA_SUCCESS
        );
        read_write(ptr, GRANULARITY);
        ok(sys::cuMemsetD8Async(ptr, 1, 16, stream));
        assert_ne!(
            sys::cuMemsetD8Async(ptr + GRANULARITY as u64, 1, 16, stream),
            CUresult::CUDA_SUCCESS,
            "reserved but not mapped"
        );
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemUnmap(ptr, GRANULARITY));
        assert_ne!(
            sys::cuMemsetD8Async(ptr, 1, 16, stream),
            CUresult::CUDA_SUCCESS
        );
        ok(sys::cuMemRelease(handle));
        ok(sys::cuMemAddressFree(ptr, 2 * GRANULARITY));
    }
    destroy_stream(stream);
    teardown();
}

/// The shape of the fuzzer's S4 program (`tests/fuzz-corpus/open/s4_…`), on 2 devices: a
/// physical allocation of device 1, mapped with read-write access for device 0 only. Work on
/// a stream of device 0 (a copy to the host, a kernel) has access and passes; the same work on
/// a stream of device 1, the owner, has none and is refused (`no-access`) until device 1 is
/// granted access too, after which its copy passes.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_peer_mapping() {
    child();
    let mut contexts = [std::ptr::null_mut(); 2];
    // SAFETY: plain driver calls on our own handles with valid pointers; the refused calls are
    // refused before any byte moves, and `host` outlives every copy into it (each stream is
    // synchronised before it is read or dropped).
    unsafe {
        ok(sys::cuInit(0));
        for (device, context) in contexts.iter_mut().enumerate() {
            ok(sys::cuDevicePrimaryCtxRetain(context, device as i32));
        }
        let mut on_device_1 = prop(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE);
        on_device_1.location = device_location(1);
        let mut handle = 0;
        ok(sys::cuMemCreate(&mut handle, GRANULARITY, &on_device_1, 0));
        let ptr = reserve(GRANULARITY);
        ok(sys::cuMemMap(ptr, GRANULARITY, 0, handle, 0));
        read_write(ptr, GRANULARITY); // device 0 only
        let mut flags = 9;
        ok(sys::cuMemGetAccess(&mut flags, &device_location(1), ptr));
        assert_eq!(flags, 0, "the owner has no access until granted");

        let library = load();
        let fill = kernel(library, c"fill_u32");
        let mut host = vec![0u8; 64];
        ok(sys::cuCtxSetCurrent(contexts[0]));
        let stream_0 = new_stream();
        ok(launch(fill, stream_0, ptr, 5, 16));
        ok(sys::cuMemcpyDtoHAsync_v2(
            host.as_mut_ptr().cast(),
            ptr,
            host.len(),
            stream_0,
        ));
        ok(sys::cuStreamSynchronize(stream_0));
        assert_eq!(&host[..4], 5u32.to_le_bytes(), "device 0's kernel wrote it");

        ok(sys::cuCtxSetCurrent(contexts[1]));
        let stream_1 = new_stream();
        assert_ne!(
            sys::cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), ptr, host.len(), stream_1),
            CUresult::CUDA_SUCCESS,
            "device 1 has no access to its own memory's mapping"
        );
        assert_ne!(launch(fill, stream_1, ptr, 6, 16), CUresult::CUDA_SUCCESS);
        let desc = sys::CUmemAccessDesc {
            location: device_location(1),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        ok(sys::cuMemSetAccess(ptr, GRANULARITY, &desc, 1));
        ok(sys::cuMemcpyDtoHAsync_v2(
            host.as_mut_ptr().cast(),
            ptr,
            host.len(),
            stream_1,
        ));
        ok(sys::cuStreamSynchronize(stream_1));
        assert_eq!(
            &host[..4],
            5u32.to_le_bytes(),
            "device 1's kernel was refused"
        );
        destroy_stream(stream_1);

        ok(sys::cuCtxSetCurrent(contexts[0]));
        destroy_stream(stream_0);
        unload(library);
        ok(sys::cuMemUnmap(ptr, GRANULARITY));
        ok(sys::cuMemRelease(handle));
        ok(sys::cuMemAddressFree(ptr, GRANULARITY));
        ok(sys::cuCtxSetCurrent(std::ptr::null_mut()));
        for device in 0..2 {
            ok(sys::cuDevicePrimaryCtxRelease_v2(device));
        }
    }
}

/// Memset on a stream, then unmap: before (`ordered`) or without synchronising the stream.
fn unmap_after_work(ordered: bool) {
    child();
    setup();
    let stream = new_stream();
    let mapping = mapped(GRANULARITY);
    // SAFETY: our own mapping and stream.
    unsafe {
        ok(sys::cuMemsetD32Async(mapping.0, 7, GRANULARITY / 4, stream));
        if ordered {
            ok(sys::cuStreamSynchronize(stream));
        }
        ok(sys::cuMemUnmap(mapping.0, GRANULARITY));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuMemRelease(mapping.1));
        ok(sys::cuMemAddressFree(mapping.0, GRANULARITY));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_unordered_unmap() {
    unmap_after_work(false);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_ordered_unmap() {
    unmap_after_work(true);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_free_while_mapped() {
    child();
    setup();
    let mapping = mapped(GRANULARITY);
    // SAFETY: our own mapping and reservation.
    unsafe {
        assert_eq!(
            sys::cuMemAddressFree(mapping.0, GRANULARITY),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
    }
    unmapped(mapping, GRANULARITY);
    // SAFETY: deliberately frees the reservation again.
    unsafe {
        assert_eq!(
            sys::cuMemAddressFree(mapping.0, GRANULARITY),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
    }
    teardown();
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 253) as u8).collect()
}

/// Exports an allocation to a descriptor, imports it back in this process (the same memory,
/// seen through two mappings) and in a child process, which reads the bytes and writes its
/// own.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_export_import() {
    child();
    setup();
    let len = 65536;
    // SAFETY: valid pointers; every mapping is our own.
    unsafe {
        let handle = create(GRANULARITY, POSIX_FD);
        let mut fd: i32 = -1;
        assert_eq!(
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut i32).cast(),
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
                0
            ),
            CUresult::CUDA_ERROR_NOT_SUPPORTED
        );
        ok(sys::cuMemExportToShareableHandle(
            (&mut fd as *mut i32).cast(),
            handle,
            POSIX_FD,
            0,
        ));
        assert!(fd >= 0);
        let plain = create(
            GRANULARITY,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        );
        let mut other: i32 = -1;
        assert_eq!(
            sys::cuMemExportToShareableHandle((&mut other as *mut i32).cast(), plain, POSIX_FD, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "not requested at creation"
        );
        ok(sys::cuMemRelease(plain));
        let mut imported = 0;
        ok(sys::cuMemImportFromShareableHandle(
            &mut imported,
            fd as isize as *mut c_void,
            POSIX_FD,
        ));
        assert_ne!(imported, handle);
        let mut props: sys::CUmemAllocationProp = std::mem::zeroed();
        ok(sys::cuMemGetAllocationPropertiesFromHandle(
            &mut props, imported,
        ));
        assert_eq!(props.requestedHandleTypes, POSIX_FD);
        assert_eq!(props.location.id, 0);
        let (a, b) = (reserve(GRANULARITY), reserve(GRANULARITY));
        ok(sys::cuMemMap(a, GRANULARITY, 0, handle, 0));
        ok(sys::cuMemMap(b, GRANULARITY, 0, imported, 0));
        read_write(a, GRANULARITY);
        read_write(b, GRANULARITY);
        let bytes = pattern(len);
        ok(sys::cuMemcpyHtoD_v2(a, bytes.as_ptr().cast(), len));
        assert!(read(b, len) == bytes, "one allocation behind both handles");
        let mut retained = 0;
        ok(sys::cuMemRetainAllocationHandle(
            &mut retained,
            (b + 4096) as usize as *mut c_void,
        ));
        ok(sys::cuMemRelease(retained));

        let flags = libc::fcntl(fd, libc::F_GETFD);
        assert_eq!(libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC), 0);
        let report =
            std::env::temp_dir().join(format!("cuda-sim-vmm-importer-{}.json", std::process::id()));
        let output = cuda_sim::command(std::env::current_exe().unwrap())
            .args([
                "scenario_importer",
                "--exact",
                "--include-ignored",
                "--nocapture",
            ])
            .env(MARKER, "importer")
            .env("VMM_FD", fd.to_string())
            .sim_report(&report)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let child_report = Report::read(&report).unwrap();
        let _ = std::fs::remove_file(&report);
        assert!(child_report.violations.is_empty(), "{child_report:?}");
        assert!(
            child_report.leaks_without_primary().is_empty(),
            "{child_report:?}"
        );
        assert!(
            read(a, len).iter().all(|&b| b == 0xee),
            "the importer's bytes"
        );
        libc::close(fd);
        ok(sys::cuMemUnmap(a, GRANULARITY));
        ok(sys::cuMemUnmap(b, GRANULARITY));
        ok(sys::cuMemRelease(handle));
        ok(sys::cuMemRelease(imported));
        ok(sys::cuMemAddressFree(a, GRANULARITY));
        ok(sys::cuMemAddressFree(b, GRANULARITY));
    }
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_importer() {
    child();
    setup();
    let fd: i32 = std::env::var("VMM_FD").unwrap().parse().unwrap();
    let len = 65536;
    // SAFETY: the descriptor was inherited from the parent; valid pointers throughout.
    unsafe {
        let mut handle = 0;
        assert_eq!(
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                fd as isize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
            ),
            CUresult::CUDA_ERROR_NOT_SUPPORTED
        );
        ok(sys::cuMemImportFromShareableHandle(
            &mut handle,
            fd as isize as *mut c_void,
            POSIX_FD,
        ));
        let ptr = reserve(GRANULARITY);
        ok(sys::cuMemMap(ptr, GRANULARITY, 0, handle, 0));
        read_write(ptr, GRANULARITY);
        assert!(read(ptr, len) == pattern(len), "the exporter's bytes");
        ok(sys::cuMemsetD8_v2(ptr, 0xee, len));
        // A memset of device memory may return before it is done.
        ok(sys::cuStreamSynchronize(LEGACY));
        unmapped((ptr, handle), GRANULARITY);
    }
    teardown();
}

fn pool_attribute(pool: sys::CUmemoryPool, attribute: sys::CUmemPool_attribute) -> u64 {
    let mut value = 0u64;
    // SAFETY: every attribute read here is a 64-bit one.
    unsafe {
        ok(sys::cuMemPoolGetAttribute(
            pool,
            attribute,
            (&mut value as *mut u64).cast(),
        ))
    };
    value
}

fn set_pool_attribute(
    pool: sys::CUmemoryPool,
    attribute: sys::CUmemPool_attribute,
    mut value: u64,
) -> CUresult {
    // SAFETY: a 64-bit value, as the attributes set here take.
    unsafe { sys::cuMemPoolSetAttribute(pool, attribute, (&mut value as *mut u64).cast()) }
}

/// Pool attributes round-trip, the figures follow allocations, frees and trims, and the
/// device's current pool serves `cuMemAllocAsync`.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_pool_attributes() {
    use sys::CUmemPool_attribute::*;
    child();
    setup();
    let stream = new_stream();
    // SAFETY: valid pointers; all allocations are our own.
    unsafe {
        let mut props: sys::CUmemPoolProps = std::mem::zeroed();
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location = device_location(0);
        let mut pool = std::ptr::null_mut();
        ok(sys::cuMemPoolCreate(&mut pool, &props));

        ok(set_pool_attribute(
            pool,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            u64::MAX,
        ));
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD),
            u64::MAX
        );
        for flag in [
            CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
        ] {
            let mut value: i32 = 0;
            ok(sys::cuMemPoolSetAttribute(
                pool,
                flag,
                (&mut value as *mut i32).cast(),
            ));
            value = 7;
            ok(sys::cuMemPoolGetAttribute(
                pool,
                flag,
                (&mut value as *mut i32).cast(),
            ));
            assert_eq!(value, 0, "{flag:?}");
        }

        // The device's current pool serves cuMemAllocAsync.
        let (mut default, mut current) = (std::ptr::null_mut(), std::ptr::null_mut());
        ok(sys::cuDeviceGetDefaultMemPool(&mut default, 0));
        ok(sys::cuDeviceGetMemPool(&mut current, 0));
        assert_eq!(current, default);
        ok(sys::cuDeviceSetMemPool(0, pool));
        ok(sys::cuDeviceGetMemPool(&mut current, 0));
        assert_eq!(current, pool);
        let ptrs: Vec<u64> = (0..4)
            .map(|_| {
                let mut ptr = 0;
                ok(sys::cuMemAllocAsync(&mut ptr, MIB, stream));
                ptr
            })
            .collect();
        let mut owner: sys::CUmemoryPool = std::ptr::null_mut();
        ok(sys::cuPointerGetAttribute(
            (&mut owner as *mut sys::CUmemoryPool).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            ptrs[0],
        ));
        assert_eq!(owner, pool);
        ok(sys::cuDeviceSetMemPool(0, default));

        let mib = MIB as u64;
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            4 * mib
        );
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            4 * mib
        );
        let (mut free, mut total) = (0, 0);
        ok(sys::cuMemGetInfo_v2(&mut free, &mut total));
        assert_eq!((total - free) as u64, 4 * mib);
        ok(sys::cuMemFreeAsync(ptrs[0], stream));
        ok(sys::cuMemFreeAsync(ptrs[1], stream));
        ok(sys::cuStreamSynchronize(stream));
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            2 * mib
        );
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            4 * mib,
            "kept below the release threshold"
        );
        ok(sys::cuMemPoolTrimTo(pool, 0));
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            2 * mib,
            "trimmed to what is in use"
        );
        ok(sys::cuMemGetInfo_v2(&mut free, &mut total));
        assert_eq!((total - free) as u64, 2 * mib);
        assert_eq!(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 4 * mib);
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
            4 * mib
        );
        ok(set_pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0));
        ok(set_pool_attribute(
            pool,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            0,
        ));
        assert_eq!(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 2 * mib);
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
            2 * mib
        );
        for read_only in [
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
        ] {
            assert_eq!(
                set_pool_attribute(pool, read_only, 0),
                CUresult::CUDA_ERROR_INVALID_VALUE
            );
        }
        assert_eq!(
            set_pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, 5),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "a high-water mark can only be reset"
        );
        // Release threshold 0: memory goes back at the next synchronisation.
        ok(set_pool_attribute(
            pool,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            0,
        ));
        ok(sys::cuMemFreeAsync(ptrs[2], stream));
        ok(sys::cuMemFreeAsync(ptrs[3], stream));
        ok(sys::cuStreamSynchronize(stream));
        assert_eq!(
            pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            0
        );
        ok(sys::cuMemPoolDestroy(pool));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_green_context() {
    child();
    let primary = setup();
    let library = load();
    let fill = kernel(library, c"fill_u32");
    let (green, context) = green_context();
    // SAFETY: valid pointers; every allocation and stream is our own.
    unsafe {
        let mut stream = std::ptr::null_mut();
        assert_eq!(
            sys::cuGreenCtxStreamCreate(&mut stream, green, 0, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "green streams must be non-blocking"
        );
        ok(sys::cuGreenCtxStreamCreate(&mut stream, green, 1, 0));
        let mut owner = std::ptr::null_mut();
        ok(sys::cuStreamGetCtx(stream, &mut owner));
        assert_eq!(owner, context);
        ok(sys::cuCtxSetCurrent(context));
        let n = 1000;
        let mut ptr = 0;
        ok(sys::cuMemAllocAsync(&mut ptr, 4 * n, stream));
        ok(launch(fill, stream, ptr, 77, n as u32));
        ok(sys::cuStreamSynchronize(stream));
        let bytes = read(ptr, 4 * n);
        assert!(
            bytes
                .chunks(4)
                .all(|w| u32::from_le_bytes(w.try_into().unwrap()) == 77)
        );
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuCtxSynchronize());
        ok(sys::cuStreamDestroy_v2(stream));
        ok(sys::cuCtxSetCurrent(primary));
        ok(sys::cuGreenCtxDestroy(green));
        ok(sys::cuLibraryUnload(library));
    }
    teardown();
}

/// A green context destroyed while its stream lives: reported at the destroy and at the
/// stream's next use; a second destroy is a double destroy.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_green_destroyed_with_stream() {
    child();
    setup();
    let (green, _) = green_context();
    // SAFETY: deliberately misuses our own handles; the simulator only looks values up.
    unsafe {
        let mut stream = std::ptr::null_mut();
        ok(sys::cuGreenCtxStreamCreate(&mut stream, green, 1, 0));
        ok(sys::cuGreenCtxDestroy(green));
        assert_ne!(sys::cuStreamSynchronize(stream), CUresult::CUDA_SUCCESS);
        ok(sys::cuStreamDestroy_v2(stream));
        assert_ne!(sys::cuGreenCtxDestroy(green), CUresult::CUDA_SUCCESS);
    }
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_no_green_contexts() {
    child();
    setup();
    // SAFETY: valid pointers.
    unsafe {
        let mut all: sys::CUdevResource = std::mem::zeroed();
        assert_eq!(
            sys::cuDeviceGetDevResource(
                0,
                &mut all,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM
            ),
            CUresult::CUDA_ERROR_NOT_SUPPORTED
        );
        let mut green = std::ptr::null_mut();
        assert_eq!(
            sys::cuGreenCtxCreate(&mut green, std::ptr::null_mut(), 0, 1),
            CUresult::CUDA_ERROR_NOT_SUPPORTED
        );
    }
    teardown();
}

/// One of each new resource type left at exit: a handle never released, a reservation never
/// freed with a mapping never unmapped (its handle released), and a green context.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_leaks() {
    child();
    setup();
    create(
        GRANULARITY,
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
    );
    let (_, handle) = mapped(GRANULARITY);
    // SAFETY: our own handle; its memory stays mapped.
    unsafe { ok(sys::cuMemRelease(handle)) };
    green_context();
    teardown();
}

#[test]
fn vmm_pools_and_green_contexts_work() {
    for name in [
        "scenario_granularity",
        "scenario_gib_in_chunks",
        "scenario_ordered_unmap",
        "scenario_export_import",
        "scenario_pool_attributes",
        "scenario_green_context",
    ] {
        let report = report_of(name);
        assert!(report.violations.is_empty(), "{name}: {report:?}");
        assert!(
            report.leaks_without_primary().is_empty(),
            "{name}: {:?}",
            report.leaks
        );
    }
}

#[test]
fn vmm_and_green_context_misuse_is_reported() {
    let expected: [(&str, &[&str]); 4] = [
        (
            "scenario_bad_touches",
            &["no-access", "out-of-bounds", "use-after-free"],
        ),
        ("scenario_unordered_unmap", &["unordered-unmap"]),
        (
            "scenario_free_while_mapped",
            &["free-while-mapped", "double-destroy"],
        ),
        (
            "scenario_green_destroyed_with_stream",
            &["destroyed-handle", "destroyed-handle", "double-destroy"],
        ),
    ];
    for (name, kinds_expected) in expected {
        let report = report_of(name);
        assert_eq!(kinds(&report), kinds_expected, "{name}: {report:?}");
    }
    let report = report_of("scenario_unordered_unmap");
    let message = &report.violations[0].message;
    assert!(
        message.contains("cuMemUnmap") && message.contains("cuMemsetD32Async"),
        "{message}"
    );
}

/// S4: a mapping's access is checked for the device doing the work, not the device that owns
/// the memory: device 0, granted access to device 1's memory, copies and launches on it;
/// device 1, not granted, is refused (a copy, then a kernel) until it is.
#[test]
fn a_mapping_is_checked_against_the_working_devices_access() {
    let report = report_with("scenario_peer_mapping", |command| {
        command.sim_devices(2);
    });
    assert_eq!(
        kinds(&report),
        ["no-access", "no-access"],
        "{:?}",
        report.violations
    );
    assert_eq!(
        calls(&report),
        ["cuMemcpyDtoHAsync_v2", "cuLaunchKernel"],
        "{:?}",
        report.violations
    );
    assert_message_contains(&report, 0, "no access granted to device 1");
    assert_no_leaks(&report);
}

#[test]
fn green_contexts_can_be_switched_off() {
    let report = report_with("scenario_no_green_contexts", |command| {
        command.sim_no_green_contexts();
    });
    assert!(report.violations.is_empty(), "{report:?}");
}

#[test]
fn vmm_and_green_contexts_leak_by_type() {
    let report = report_of("scenario_leaks");
    assert!(report.violations.is_empty(), "{report:?}");
    let leaks = report.leaks_without_primary();
    let expected: Vec<(&str, u64)> = vec![
        ("green_context", 1),
        ("mapping", 1),
        ("physical_allocation", 1),
        ("reservation", 1),
    ];
    let found: Vec<(&str, u64)> = leaks.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(found, expected);
}
