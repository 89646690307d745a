//! GPU tests of virtual memory management, green contexts and pool tuning. They need a CUDA GPU
//! and are ignored by default (run them with `--include-ignored`); `on_the_simulator` runs
//! them again on the simulated driver. None of them returns early.

use std::os::fd::AsRawFd;

use handles_cuda::{
    ContextHandle, DevicePtrHandle, LaunchConfig, MemoryPoolHandle, PoolProps,
    exec::GreenContextHandle,
    memory::{
        AddressReservationHandle, GrowableBuffer, MappingHandle, PhysicalAllocationHandle,
        PoolLocation, ReusePolicy, Sharing, granularity,
    },
};
use handles_tests::kernels::{TestKernels, read_words};
use handles_tests::{Failures, child, serial, stream};

mod simulator;

const MIB: usize = 1 << 20;

/// The growable buffer's reservation: 1 GiB on a GPU; `HANDLES_VMM_BYTES` overrides it (the
/// simulated driver's runs use less, to stay fast).
fn growable_bytes() -> usize {
    std::env::var("HANDLES_VMM_BYTES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(1 << 30)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_growable_buffer_maps_writes_reads_and_unmaps_in_2_mib_chunks() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let total = growable_bytes();
    let buffer = GrowableBuffer::new(0, total, 2 * MIB).unwrap();
    assert_eq!(buffer.capacity(), total);
    assert!(buffer.is_empty());
    let chunk = 2 * MIB;
    let mut slices = Vec::new();
    for index in 0..total / chunk {
        buffer.grow_to((index + 1) * chunk).unwrap();
        // Each chunk gets its index in its first 1024 words, written by a kernel.
        let slice = buffer.slice(index * chunk, 4096).unwrap();
        kernels
            .fill
            .launch(
                &stream,
                &LaunchConfig::linear(1024, 256),
                (&slice, index as u32, 1024),
            )
            .unwrap();
        if index % 64 == 0 {
            slices.push((index, slice));
        }
    }
    assert_eq!(buffer.len(), total);
    assert!(buffer.grow_to(total + 1).is_err(), "past the reservation");
    assert!(buffer.slice(total - 8, 16).is_err(), "past what is mapped");
    // A slice across two chunks keeps both mappings.
    let across = buffer.slice(chunk - 8, 16).unwrap();
    across.memset_async(0xab, 16, &stream).unwrap();
    drop(buffer); // the slices keep their chunks mapped
    for (index, slice) in &slices {
        let values = read_words(slice, &stream);
        assert!(values.iter().all(|&v| v == *index as u32), "chunk {index}");
    }
    let mut bytes = [0u8; 16];
    across.copy_to_host(&mut bytes, &stream).unwrap();
    assert_eq!(bytes, [0xab; 16]);
    drop((slices, across));
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_reservation_dropped_before_its_mappings_stays_valid_until_the_last_one() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let grain = granularity(PoolLocation::Device(0)).unwrap();
    assert!(grain >= 4096 && grain.is_power_of_two(), "{grain}");
    let reservation = AddressReservationHandle::reserve(4 * grain, grain).unwrap();
    let physical =
        PhysicalAllocationHandle::create(PoolLocation::Device(0), grain + 1, Sharing::None)
            .unwrap();
    assert_eq!(physical.size(), 2 * grain, "rounded up to the granularity");
    let other =
        PhysicalAllocationHandle::create(PoolLocation::Device(0), grain, Sharing::None).unwrap();
    let first = MappingHandle::map(&reservation, 0, &physical, 0, 2 * grain, &[0]).unwrap();
    let second = MappingHandle::map(&reservation, 2 * grain, &other, 0, grain, &[0]).unwrap();
    // Bad mappings are refused before the driver: unaligned, past the reservation, from an
    // offset other than 0 (the driver maps only from the start), over a mapped range, with
    // no device to access it.
    assert!(MappingHandle::map(&reservation, 3 * grain, &physical, grain, grain, &[0]).is_err());
    assert!(MappingHandle::map(&reservation, 0, &other, 0, grain, &[0]).is_err());
    assert!(MappingHandle::map(&reservation, 1, &physical, 0, grain, &[0]).is_err());
    assert!(MappingHandle::map(&reservation, 3 * grain, &physical, 0, 2 * grain, &[0]).is_err());
    assert!(MappingHandle::map(&reservation, 0, &physical, 0, grain, &[]).is_err());
    drop((reservation, physical, other));
    let (one, two) = (first.device_ptr(), second.device_ptr());
    drop(first);
    one.memset_async(1, 2 * grain, &stream).unwrap();
    two.memset_async(2, grain, &stream).unwrap();
    let mut bytes = vec![0u8; 2 * grain];
    one.copy_to_host(&mut bytes, &stream).unwrap();
    assert!(bytes.iter().all(|&b| b == 1));
    let mut bytes = vec![0u8; grain];
    two.copy_to_host(&mut bytes, &stream).unwrap();
    assert!(bytes.iter().all(|&b| b == 2));
    drop((one, second, two));
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_unmap_waits_for_the_kernel_that_uses_the_range() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    for round in 0..10u32 {
        let buffer = GrowableBuffer::new(0, 4 * MIB, 2 * MIB).unwrap();
        buffer.grow_to(4 * MIB).unwrap();
        let slice = buffer.slice(0, 4 * MIB).unwrap();
        kernels
            .spin
            .launch(&stream, &LaunchConfig::linear(1, 1), (100_000,))
            .unwrap();
        let n = (4 * MIB / 4) as u32;
        kernels
            .fill
            .launch(&stream, &LaunchConfig::linear(n, 256), (&slice, round, n))
            .unwrap();
        // Every handle drops while the kernels may still run: the unmap must wait.
        drop((slice, buffer));
    }
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn physical_memory_is_shared_with_a_child_process_through_a_descriptor() {
    let _serial = serial();
    if child::role().as_deref() == Some("vmm-importer") {
        return import_in_child();
    }
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let grain = granularity(PoolLocation::Device(0)).unwrap();
    let physical =
        PhysicalAllocationHandle::create(PoolLocation::Device(0), grain, Sharing::PosixFd).unwrap();
    let reservation = AddressReservationHandle::reserve(grain, grain).unwrap();
    let mapping = MappingHandle::map(&reservation, 0, &physical, 0, grain, &[0]).unwrap();
    let pointer = mapping.device_ptr();
    pointer.memset_async(0x5c, grain, &stream).unwrap();
    stream.synchronize().unwrap();
    let fd = physical.export_posix_fd().unwrap();
    // SAFETY: clears close-on-exec on a descriptor we own, so the child inherits it.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
    let output = child::run(
        "physical_memory_is_shared_with_a_child_process_through_a_descriptor",
        "vmm-importer",
        &[
            ("HANDLES_VMM_FD", fd.as_raw_fd().to_string()),
            ("HANDLES_VMM_SIZE", grain.to_string()),
        ],
    );
    child::assert_success(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("child: read the parent's bytes"),
        "{stdout}"
    );
    let unshared =
        PhysicalAllocationHandle::create(PoolLocation::Device(0), grain, Sharing::None).unwrap();
    assert!(unshared.export_posix_fd().is_err(), "not created shareable");
}

fn import_in_child() {
    let fd: i32 = std::env::var("HANDLES_VMM_FD").unwrap().parse().unwrap();
    let size: usize = std::env::var("HANDLES_VMM_SIZE").unwrap().parse().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    // SAFETY: the parent keeps the descriptor open while the child runs.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let physical =
        PhysicalAllocationHandle::import_posix_fd(borrowed, PoolLocation::Device(0), size).unwrap();
    let reservation = AddressReservationHandle::reserve(size, size).unwrap();
    let mapping = MappingHandle::map(&reservation, 0, &physical, 0, size, &[0]).unwrap();
    let mut bytes = vec![0u8; size];
    mapping
        .device_ptr()
        .copy_to_host(&mut bytes, &stream)
        .unwrap();
    assert!(bytes.iter().all(|&b| b == 0x5c));
    println!("child: read the parent's bytes");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_green_context_with_half_the_sms_runs_a_kernel_and_its_stream_keeps_it_alive() {
    let _serial = serial();
    let failures = Failures::watch();
    let kernels = TestKernels::load().unwrap();
    let whole = GreenContextHandle::create(0, 1).unwrap();
    let green = GreenContextHandle::create(0, 64).unwrap();
    assert!(green.sm_count() >= 64, "{}", green.sm_count());
    drop(whole);
    let context = green.context().unwrap();
    // Inside `run`, "the current context" is the green context's handle, which keeps it alive.
    let current = context.run(ContextHandle::current).unwrap().unwrap();
    assert_eq!(current.as_cu(), context.as_cu());
    let made_in_current = context
        .run(|| handles_cuda::EventHandle::create_in_current(Default::default()))
        .unwrap();
    let stream = green.create_stream(0).unwrap();
    let weak = green.downgrade();
    drop((green, context, current));
    assert!(
        weak.upgrade().is_some(),
        "the stream keeps the green context"
    );
    let buffer = DevicePtrHandle::alloc(stream.context().as_ref().unwrap(), 4096 * 4).unwrap();
    kernels
        .fill
        .launch(
            &stream,
            &LaunchConfig::linear(4096, 256),
            (&buffer, 77, 4096),
        )
        .unwrap();
    assert_eq!(read_words(&buffer, &stream), vec![77; 4096]);
    // The buffer (allocated in it) and the library (whose kernel ran in it) hold it too.
    drop((buffer, stream, kernels, made_in_current));
    assert!(weak.upgrade().is_none(), "destroyed with its last holder");
    assert!(GreenContextHandle::create(0, 0).is_err());
    assert!(GreenContextHandle::create(0, u32::MAX).is_err());
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pool_attributes_round_trip_and_trim_lowers_reserved_memory() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    pool.set_release_threshold(u64::MAX).unwrap();
    assert_eq!(pool.release_threshold().unwrap(), u64::MAX);
    let policy = ReusePolicy {
        follow_event_dependencies: false,
        allow_opportunistic: true,
        allow_internal_dependencies: false,
    };
    pool.set_reuse_policy(policy).unwrap();
    assert_eq!(pool.reuse_policy().unwrap(), policy);
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 64 * MIB, &stream).unwrap();
    let used = pool.usage().unwrap();
    assert!(
        used.used >= 64 * MIB as u64 && used.used_high >= used.used,
        "{used:?}"
    );
    drop(buffer);
    stream.synchronize().unwrap();
    let kept = pool.usage().unwrap();
    assert_eq!(kept.used, 0);
    assert!(
        kept.reserved >= 64 * MIB as u64,
        "the threshold keeps it: {kept:?}"
    );
    pool.trim_to(0).unwrap();
    let trimmed = pool.usage().unwrap();
    assert!(
        trimmed.reserved < kept.reserved,
        "{trimmed:?} after {kept:?}"
    );
    pool.reset_high_watermarks().unwrap();
    assert!(pool.usage().unwrap().used_high < used.used_high);

    // The device's current pool: `alloc_async` allocates from it, and it stays alive while
    // current even when the program drops its handle.
    let previous = pool.set_device_current(0).unwrap();
    let raw = pool.as_cu();
    drop(pool);
    let from_current = DevicePtrHandle::alloc_async(MIB, &stream).unwrap();
    let current = MemoryPoolHandle::device_current(0).unwrap();
    assert_eq!(current.as_cu(), raw);
    assert!(current.usage().unwrap().used >= MIB as u64);
    drop(from_current);
    stream.synchronize().unwrap();
    let back = previous.set_device_current(0).unwrap();
    assert_eq!(
        back.as_cu(),
        raw,
        "the pool that was current comes back as a handle"
    );
    let host = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::HostNuma(0),
        ..PoolProps::device(0)
    })
    .unwrap();
    assert!(host.set_device_current(0).is_err(), "only a device pool");
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fabric_sharing_round_trips_or_is_refused_with_an_error() {
    let _serial = serial();
    let failures = Failures::watch();
    let grain = granularity(PoolLocation::Device(0)).unwrap();
    match PhysicalAllocationHandle::create(PoolLocation::Device(0), grain, Sharing::Fabric) {
        Ok(physical) => {
            let handle = physical.export_fabric().unwrap();
            let imported =
                PhysicalAllocationHandle::import_fabric(&handle, PoolLocation::Device(0), grain)
                    .unwrap();
            assert_eq!(imported.size(), grain);
            println!("FABRIC allocations are supported here");
        }
        Err(error) => {
            assert!(
                matches!(error, handles_cuda::Error::Driver { .. }),
                "{error}"
            );
            println!("FABRIC allocations refused, as expected without a fabric: {error}");
        }
    }
    // An allocation not made for FABRIC never exports one.
    let unshared =
        PhysicalAllocationHandle::create(PoolLocation::Device(0), grain, Sharing::None).unwrap();
    assert!(unshared.export_fabric().is_err());
    failures.assert_none();
}

#[test]
#[ignore = "needs two CUDA GPUs"]
fn two_gpus_memsets_and_copies_are_refused_memory_their_device_cannot_reach() {
    let _serial = serial();
    let failures = Failures::watch();
    let near = stream(&ContextHandle::primary(0).unwrap());
    let far = stream(&ContextHandle::primary(1).unwrap());
    let grain = granularity(PoolLocation::Device(0)).unwrap();
    // Device 1's memory, mapped for device 1 only: device 0's work may not touch it, by any
    // path.
    let physical =
        PhysicalAllocationHandle::create(PoolLocation::Device(1), grain, Sharing::None).unwrap();
    let reservation = AddressReservationHandle::reserve(grain, grain).unwrap();
    let only_far = MappingHandle::map(&reservation, 0, &physical, 0, grain, &[1])
        .unwrap()
        .device_ptr();
    assert!(only_far.memset_async(0, 64, &near).is_err());
    let mut bytes = [0u8; 16];
    assert!(only_far.copy_to_host(&mut bytes, &near).is_err());
    only_far.memset_async(5, 64, &far).unwrap();
    only_far.copy_to_host(&mut bytes, &far).unwrap();
    assert_eq!(bytes, [5; 16]);
    // `alloc_async` memory keeps (and is checked against) the pool it came from.
    let pooled = DevicePtrHandle::alloc_async(4096, &near).unwrap();
    assert!(pooled.pool().is_some(), "the device's current pool, kept");
    assert!(pooled.memset_async(0, 64, &far).is_err());
    let local = DevicePtrHandle::alloc_async(4096, &far).unwrap();
    assert!(pooled.copy_to_async(0, &local, 0, 64, &far).is_err());
    near.synchronize().unwrap();
    far.synchronize().unwrap();
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_vmm",
        filters: &[],
        skips: &["two_gpus"],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[("HANDLES_VMM_BYTES", "134217728")],
    }
    .run();
    simulator::SuiteRun {
        label: "gpu_vmm, 2 devices",
        filters: &["two_gpus"],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 2,
        env: &[],
    }
    .run();
}
