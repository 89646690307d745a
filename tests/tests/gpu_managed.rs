//! Managed memory, pinned-host pools and safe host views: a kernel and the host share managed
//! and pinned buffers, with prefetches on each side; a host view waits for the work queued on
//! its memory and refuses new work while it lives. GPU tests, ignored by default;
//! `on_the_simulator` runs them all again on the simulated driver (strict mode), where kernels
//! run at launch, so the waits are already over: the GPU run is where they are real.

use handles_cuda::graph::{CaptureMode, GraphHandle};
use handles_cuda::memory::{Advice, Attach, PoolLocation};
use handles_cuda::{
    ContextHandle, DeviceBuffer, DevicePtrHandle, Error, LaunchConfig, MemoryPoolHandle, PoolProps,
};
use handles_tests::kernels::TestKernels;
use handles_tests::{Failures, serial, stream};

mod simulator;

const N: u32 = 1 << 16;

/// `N` u32s of managed memory, set to their index through a host view.
fn managed_indices(context: &ContextHandle) -> DeviceBuffer<u32> {
    let buffer = DeviceBuffer::<u32>::alloc_managed(context, N as usize, Attach::Global).unwrap();
    for (i, value) in buffer.host_view_mut().unwrap().iter_mut().enumerate() {
        *value = i as u32;
    }
    buffer
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_and_the_host_share_managed_memory_with_prefetches() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let buffer = managed_indices(&context);
    buffer
        .advise(Advice::SetPreferredLocation(PoolLocation::Device(0)))
        .unwrap();
    buffer
        .advise(Advice::SetAccessedBy(PoolLocation::Device(0)))
        .unwrap();
    buffer.prefetch(PoolLocation::Device(0), &stream).unwrap();
    let config = LaunchConfig::linear(N, 256);
    kernels
        .add_one
        .launch(&stream, &config, (buffer.as_bytes(), N))
        .unwrap();
    buffer.prefetch(PoolLocation::Host, &stream).unwrap();
    {
        let view = buffer.host_view().unwrap();
        assert_eq!(view.len(), N as usize);
        assert!(
            view.iter().enumerate().all(|(i, &v)| v == i as u32 + 1),
            "the kernel's writes through the view"
        );
    }
    // Advice has its unset forms; read-mostly data is read by the device and the host alike.
    buffer.advise(Advice::UnsetPreferredLocation).unwrap();
    buffer
        .advise(Advice::UnsetAccessedBy(PoolLocation::Device(0)))
        .unwrap();
    buffer.advise(Advice::SetReadMostly).unwrap();
    buffer.attach(&stream, Attach::Single).unwrap();
    let copy = DeviceBuffer::<u32>::zeroed(N as usize, &stream).unwrap();
    buffer.copy_to_device(&copy, &stream).unwrap();
    buffer.advise(Advice::UnsetReadMostly).unwrap();
    buffer.attach(&stream, Attach::Global).unwrap();
    assert_eq!(copy.to_vec(&stream).unwrap()[..3], [1, 2, 3]);
    // A part of the buffer prefetches its own range; device memory is not managed.
    let tail = buffer.slice(N as usize / 2..N as usize).unwrap();
    tail.prefetch(PoolLocation::Device(0), &stream).unwrap();
    assert_eq!(
        copy.prefetch(PoolLocation::Host, &stream),
        Err(Error::NotManaged)
    );
    assert_eq!(copy.advise(Advice::SetReadMostly), Err(Error::NotManaged));
    assert!(matches!(
        DevicePtrHandle::alloc_managed(&context, 64, Attach::Single),
        Err(Error::BadFlags { .. })
    ));
    assert_eq!(
        buffer.as_bytes().kind(),
        handles_cuda::memory::AllocKind::Managed
    );
    drop((tail, buffer));
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_view_waits_for_running_work_and_refuses_new_work() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let buffer = managed_indices(&context);
    let config = LaunchConfig::linear(N, 256);
    // The fill runs after a long spin (about 0.1 s on an H200): the view must wait for it.
    kernels
        .spin
        .launch(&stream, &LaunchConfig::linear(1, 1), (200_000_000,))
        .unwrap();
    kernels
        .fill
        .launch(&stream, &config, (buffer.as_bytes(), 7, N))
        .unwrap();
    let started = std::time::Instant::now();
    let view = buffer.host_view().unwrap();
    println!(
        "the host view waited {:?} for the kernel",
        started.elapsed()
    );
    assert!(
        view.iter().all(|&v| v == 7),
        "the view saw the final values"
    );
    // While it lives: launches, copies and memsets of the memory (through a part of it too)
    // are refused; shared views coexist; a mutable one is refused.
    let refused = Err(Error::HostAccessActive { mutable: false });
    assert_eq!(
        kernels
            .add_one
            .launch(&stream, &config, (buffer.as_bytes(), N)),
        refused
    );
    let part = buffer.slice(0..16).unwrap();
    assert_eq!(part.as_bytes().memset_async(0, 4, &stream), refused);
    assert_eq!(part.to_vec(&stream).map(drop), refused);
    let second = part.host_view().unwrap();
    assert_eq!(second[..], [7; 16]);
    assert_eq!(
        buffer.host_view_mut().map(drop),
        Err(Error::HostAccessActive { mutable: false })
    );
    drop((view, second));
    // A graph captured on the buffer is refused at launch while a mutable view lives, and
    // runs after it.
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        capture.launch(&kernels.add_one, &config, (buffer.as_bytes(), N))
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    {
        let mut view = buffer.host_view_mut().unwrap();
        view.fill(1);
        assert_eq!(
            exec.launch(&stream),
            Err(Error::HostAccessActive { mutable: true })
        );
        assert_eq!(
            buffer.host_view().map(drop),
            Err(Error::HostAccessActive { mutable: true })
        );
    }
    kernels
        .spin
        .launch(&stream, &LaunchConfig::linear(1, 1), (100_000_000,))
        .unwrap();
    exec.launch(&stream).unwrap();
    assert!(
        buffer.host_view().unwrap().iter().all(|&v| v == 2),
        "the graph's kernel ran before the view"
    );
    drop((exec, graph, part, buffer));
    stream.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_memory_from_a_host_pool_and_alloc_host_is_viewed_after_a_kernel() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let kernels = TestKernels::load().unwrap();
    let config = LaunchConfig::linear(N, 256);
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ..PoolProps::device(0)
    })
    .unwrap();
    let pooled = DeviceBuffer::<u32>::alloc_from_pool(&pool, N as usize, &stream).unwrap();
    // A host pool's memory is the host's until the device is granted access: a kernel on it
    // would fault (CUDA_ERROR_ILLEGAL_ADDRESS on the H200), so the launch is refused first.
    assert!(!pool.peer_access(0).unwrap());
    assert!(matches!(
        kernels
            .fill
            .launch(&stream, &config, (pooled.as_bytes(), 1, N)),
        Err(Error::Unreachable {
            device: 0,
            owner: None,
            pool: true
        })
    ));
    pool.set_peer_access(0, true).unwrap();
    let host = DeviceBuffer::<u32>::alloc_host(&context, N as usize).unwrap();
    for (buffer, value) in [(&pooled, 5), (&host, 6)] {
        kernels
            .spin
            .launch(&stream, &LaunchConfig::linear(1, 1), (50_000_000,))
            .unwrap();
        kernels
            .fill
            .launch(&stream, &config, (buffer.as_bytes(), value, N))
            .unwrap();
        let mut view = buffer.host_view_mut().unwrap();
        assert!(view.iter().all(|&v| v == value), "the kernel's values");
        view[0] = 100;
        drop(view);
        kernels
            .add_one
            .launch(&stream, &config, (buffer.as_bytes(), N))
            .unwrap();
        let view = buffer.host_view().unwrap();
        assert_eq!(view[..2], [101, value + 1]);
    }
    // Device memory has no host view.
    let device = DeviceBuffer::<u32>::zeroed(16, &stream).unwrap();
    assert!(matches!(
        device.host_view().map(drop),
        Err(Error::NotHostAccessible { .. })
    ));
    drop((pooled, host, device, pool));
    stream.synchronize().unwrap();
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_managed",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
