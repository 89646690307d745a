//! Adversarial safe programs (a review of the kept reach answer, 2026-12-05): a buffer whose
//! reach was found fixed on one device, then used from another device with access granted,
//! revoked, through views, graphs, copies and memsets; and memory of an imported pool (R9:
//! it passed from every device before the import learned its device). Each runs as a child
//! process on the strict simulator (any violation aborts it) and must finish clean, with no
//! leak.

mod simulator;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use handles_cuda::graph::GraphHandle;
use handles_cuda::memory::PoolLocation;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, LaunchConfig, MemoryPoolHandle, PoolProps, StreamHandle,
};
use handles_tests::kernels::{TestKernels, read_words};
use handles_tests::{Failures, gate, stream};
use simulator::{in_scenario, strict_clean};

const N: u32 = 64;
const BYTES: usize = N as usize * 4;

fn unreachable<T: std::fmt::Debug>(result: handles_cuda::Result<T>, what: &str) {
    assert!(
        matches!(result, Err(Error::Unreachable { device: 0, .. })),
        "{what}: expected Unreachable from device 0, got {result:?}"
    );
}

/// What most scenarios here start from, in a scenario child: the report hook watched, the test
/// kernels, both devices' primary contexts and a stream on each.
struct TwoDevices {
    failures: Failures,
    kernels: TestKernels,
    c0: ContextHandle,
    c1: ContextHandle,
    s0: StreamHandle,
    s1: StreamHandle,
}

impl TwoDevices {
    fn new() -> Self {
        in_scenario();
        let failures = Failures::watch();
        let kernels = TestKernels::load().unwrap();
        let c0 = ContextHandle::primary(0).unwrap();
        let c1 = ContextHandle::primary(1).unwrap();
        let (s0, s1) = (stream(&c0), stream(&c1));
        TwoDevices {
            failures,
            kernels,
            c0,
            c1,
            s0,
            s1,
        }
    }
}

/// Ends a scenario: both streams drained, then `last` dropped, the disposal thread flushed,
/// and nothing reported.
fn finish(s0: &StreamHandle, s1: &StreamHandle, last: impl Sized, failures: Failures) {
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    drop(last);
    assert!(handles_cuda::exec::flush_disposals(Duration::from_secs(10)));
    failures.assert_none();
}

/// Opens `open` after `ms` on another thread.
fn open_later(open: &Arc<AtomicBool>, ms: u64) -> std::thread::JoinHandle<()> {
    let open = Arc::clone(open);
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        open.store(true, Ordering::SeqCst);
    })
}

// ---------------------------------------------------------------------------------------------
// R1: a buffer of device 1's pool (and views, view of view), fixed on 1 by a launch there,
// then used from device 0: refused, granted and run, revoked and refused again; kernels,
// copies and memsets; then used on 1 again.

#[test]
fn r1_fixed_on_one_then_used_from_zero_grant_and_revoke() {
    strict_clean("r1_fixed_on_one_then_used_from_zero_grant_and_revoke", "2");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r1_fixed_on_one_then_used_from_zero_grant_and_revoke() {
    let TwoDevices {
        failures,
        kernels,
        c0,
        s0,
        s1,
        ..
    } = TwoDevices::new();
    let far_pool = MemoryPoolHandle::create(&PoolProps::device(1)).unwrap();
    let far = DevicePtrHandle::alloc_from_pool(&far_pool, BYTES, &s1).unwrap();
    let near = DevicePtrHandle::alloc(&c0, BYTES).unwrap();
    let config = LaunchConfig::linear(N, 64);
    let half = LaunchConfig::linear(N / 2, 32);
    // Fixed on 1: the buffer, a view, a view of the view.
    kernels.fill.launch(&s1, &config, (&far, 1, N)).unwrap();
    let view = far.view(0, BYTES / 2).unwrap();
    let view2 = view.view(0, BYTES / 4).unwrap();
    kernels.fill.launch(&s1, &half, (&view, 1, N / 2)).unwrap();
    kernels
        .fill
        .launch(&s1, &LaunchConfig::linear(N / 4, 16), (&view2, 1, N / 4))
        .unwrap();
    far.memset_async(0, BYTES, &s1).unwrap();
    s1.synchronize().unwrap();
    for round in 0..3 {
        // No access.
        unreachable(kernels.fill.launch(&s0, &config, (&far, 2, N)), "far");
        unreachable(kernels.fill.launch(&s0, &half, (&view, 2, N / 2)), "view");
        unreachable(
            kernels
                .fill
                .launch(&s0, &LaunchConfig::linear(N / 4, 16), (&view2, 2, N / 4)),
            "view2",
        );
        unreachable(far.memset_async(3, BYTES, &s0), "memset far on 0");
        unreachable(view2.memset_async(3, BYTES / 4, &s0), "memset view2 on 0");
        unreachable(
            far.copy_to_async(0, &near, 0, BYTES, &s0),
            "copy far->near on 0",
        );
        unreachable(
            near.copy_to_async(0, &far, 0, BYTES, &s0),
            "copy near->far on 0",
        );
        unreachable(
            kernels.copy.launch(&s0, &config, (&near, &far, N)),
            "copy kernel far->near",
        );
        // Granted.
        far_pool.set_peer_access(0, true).unwrap();
        kernels
            .fill
            .launch(&s0, &config, (&far, 10 + round, N))
            .unwrap();
        kernels.copy.launch(&s0, &config, (&near, &far, N)).unwrap();
        view2.memset_async(0, BYTES / 4, &s0).unwrap();
        far.copy_to_async(0, &near, 0, BYTES / 2, &s0).unwrap();
        s0.synchronize().unwrap();
        let mut expected = vec![10 + round; N as usize];
        for word in expected.iter_mut().take(N as usize / 4) {
            *word = 0;
        }
        assert_eq!(read_words(&near, &s0), expected);
        // Revoked.
        far_pool.set_peer_access(0, false).unwrap();
        unreachable(
            kernels.fill.launch(&s0, &config, (&far, 2, N)),
            "far after revoke",
        );
        unreachable(
            kernels.fill.launch(&s0, &half, (&view, 2, N / 2)),
            "view after revoke",
        );
        unreachable(far.memset_async(3, BYTES, &s0), "memset after revoke");
        // Still fixed on 1.
        kernels.fill.launch(&s1, &config, (&far, 5, N)).unwrap();
        view.memset_async(0, BYTES / 2, &s1).unwrap();
        s1.synchronize().unwrap();
    }
    drop((view2, view, far, near, far_pool));
    finish(&s0, &s1, (), failures);
}

// ---------------------------------------------------------------------------------------------
// R2: a revocation while device 0's launch on the far buffer (fixed on 1) is held back: the
// revocation must wait for it (a kernel touching the pool after PROT_NONE is a violation).

#[test]
fn r2_revocation_waits_for_held_back_use_of_buffer_fixed_elsewhere() {
    strict_clean(
        "r2_revocation_waits_for_held_back_use_of_buffer_fixed_elsewhere",
        "2",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r2_revocation_waits_for_held_back_use_of_buffer_fixed_elsewhere() {
    let TwoDevices {
        failures,
        kernels,
        c0,
        s0,
        s1,
        ..
    } = TwoDevices::new();
    let far_pool = MemoryPoolHandle::create(&PoolProps::device(1)).unwrap();
    let config = LaunchConfig::linear(N, 64);
    for round in 0..4u32 {
        let far = DevicePtrHandle::alloc_from_pool(&far_pool, BYTES, &s1).unwrap();
        let view = far.view(0, BYTES).unwrap();
        let near = DevicePtrHandle::alloc(&c0, BYTES).unwrap();
        // Fixed on 1 (buffer and view).
        kernels.fill.launch(&s1, &config, (&far, 1, N)).unwrap();
        kernels.fill.launch(&s1, &config, (&view, 1, N)).unwrap();
        s1.synchronize().unwrap();
        far_pool.set_peer_access(0, true).unwrap();
        let open = gate(&s0);
        match round {
            0 => kernels.fill.launch(&s0, &config, (&far, 2, N)).unwrap(),
            1 => kernels.fill.launch(&s0, &config, (&view, 2, N)).unwrap(),
            2 => far.copy_to_async(0, &near, 0, BYTES, &s0).unwrap(),
            _ => view.memset_async(7, BYTES, &s0).unwrap(),
        }
        let opener = open_later(&open, 50);
        // Must wait for the held-back work on device 0.
        far_pool.set_peer_access(0, false).unwrap();
        opener.join().unwrap();
        s0.synchronize().unwrap();
        unreachable(
            kernels.fill.launch(&s0, &config, (&far, 2, N)),
            "after revoke",
        );
        drop((view, far, near));
    }
    finish(&s0, &s1, far_pool, failures);
}

// ---------------------------------------------------------------------------------------------
// R3: a graph of device 0 whose kernel nodes use the far buffer (fixed on 1) and a view of it:
// launched with access, access revoked (the launch refused), granted and relaunched, revoked
// while a launch is held back. And a graph of device 1 with the same buffer (its plan skips
// it), launched whatever device 0's access.

#[test]
fn r3_graph_using_buffer_fixed_elsewhere() {
    strict_clean("r3_graph_using_buffer_fixed_elsewhere", "2");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r3_graph_using_buffer_fixed_elsewhere() {
    let TwoDevices {
        failures,
        kernels,
        c0,
        c1,
        s0,
        s1,
    } = TwoDevices::new();
    let far_pool = MemoryPoolHandle::create(&PoolProps::device(1)).unwrap();
    let far = DevicePtrHandle::alloc_from_pool(&far_pool, BYTES, &s1).unwrap();
    let view = far.view(BYTES / 2, BYTES / 2).unwrap();
    let config = LaunchConfig::linear(N, 64);
    let half = LaunchConfig::linear(N / 2, 32);
    kernels.fill.launch(&s1, &config, (&far, 1, N)).unwrap();
    kernels.fill.launch(&s1, &half, (&view, 1, N / 2)).unwrap();
    s1.synchronize().unwrap();
    // A graph of device 1 (plan leaves the far buffer out).
    let g1 = GraphHandle::create(&c1).unwrap();
    g1.add_kernel_node(&[], &kernels.add_one, &config, (&far, N))
        .unwrap();
    let e1 = g1.instantiate().unwrap();
    // A graph of device 0: built with access.
    far_pool.set_peer_access(0, true).unwrap();
    let g0 = GraphHandle::create(&c0).unwrap();
    let a = g0
        .add_kernel_node(&[], &kernels.fill, &config, (&far, 3, N))
        .unwrap();
    let b = g0
        .add_kernel_node(&[a], &kernels.add_one, &half, (&view, N / 2))
        .unwrap();
    g0.add_memset_node(&[b], &view, 0, 0, 4).unwrap();
    let e0 = g0.instantiate().unwrap();
    e0.launch(&s0).unwrap();
    s0.synchronize().unwrap();
    e1.launch(&s1).unwrap();
    s1.synchronize().unwrap();
    let mut expected = vec![4u32; N as usize];
    for word in expected.iter_mut().skip(N as usize / 2) {
        *word = 5;
    }
    expected[N as usize / 2] = 1;
    assert_eq!(read_words(&far, &s1), expected);
    for _ in 0..3 {
        far_pool.set_peer_access(0, false).unwrap();
        unreachable(e0.launch(&s0), "graph launch after revoke");
        e1.launch(&s1).unwrap();
        s1.synchronize().unwrap();
        far_pool.set_peer_access(0, true).unwrap();
        e0.launch(&s0).unwrap();
        s0.synchronize().unwrap();
        // Held back, then revoked: the revocation waits.
        let open = gate(&s0);
        e0.launch(&s0).unwrap();
        let opener = open_later(&open, 50);
        far_pool.set_peer_access(0, false).unwrap();
        opener.join().unwrap();
        s0.synchronize().unwrap();
        unreachable(e0.launch(&s0), "graph launch after second revoke");
        far_pool.set_peer_access(0, true).unwrap();
    }
    far_pool.set_peer_access(0, false).unwrap();
    drop((e0, g0, e1, g1, view, far, far_pool));
    finish(&s0, &s1, (), failures);
}

// ---------------------------------------------------------------------------------------------
// R4: host-pool memory (never fixed): used from device 0 and 1 with access, revoked on 0
// while device 0's work is held back, then refused on 0 and still run on 1; a host view open
// refuses uses.

#[test]
fn r4_host_pool_buffer_grant_revoke_across_devices() {
    strict_clean("r4_host_pool_buffer_grant_revoke_across_devices", "2");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r4_host_pool_buffer_grant_revoke_across_devices() {
    let TwoDevices {
        failures,
        kernels,
        s0,
        s1,
        ..
    } = TwoDevices::new();
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ..PoolProps::device(1)
    })
    .unwrap();
    pool.set_peer_access(0, true).unwrap();
    pool.set_peer_access(1, true).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, BYTES, &s1).unwrap();
    let view = buffer.view(0, BYTES).unwrap();
    let config = LaunchConfig::linear(N, 64);
    kernels.fill.launch(&s1, &config, (&buffer, 1, N)).unwrap();
    kernels.fill.launch(&s1, &config, (&view, 1, N)).unwrap();
    s1.synchronize().unwrap();
    for _ in 0..3 {
        let open = gate(&s0);
        kernels.add_one.launch(&s0, &config, (&view, N)).unwrap();
        let opener = open_later(&open, 50);
        pool.set_peer_access(0, false).unwrap();
        opener.join().unwrap();
        s0.synchronize().unwrap();
        unreachable(
            kernels.fill.launch(&s0, &config, (&buffer, 2, N)),
            "host pool",
        );
        unreachable(
            kernels.fill.launch(&s0, &config, (&view, 2, N)),
            "host pool view",
        );
        kernels.add_one.launch(&s1, &config, (&buffer, N)).unwrap();
        s1.synchronize().unwrap();
        {
            let host = buffer.host_view().unwrap();
            assert!(matches!(
                kernels.add_one.launch(&s1, &config, (&view, N)),
                Err(Error::HostAccessActive { .. })
            ));
            drop(host);
        }
        pool.set_peer_access(0, true).unwrap();
    }
    drop((view, buffer, pool));
    finish(&s0, &s1, (), failures);
}

// ---------------------------------------------------------------------------------------------
// R5: device 1's current (default) pool, via alloc_async, fixed on 1; device 0's access granted
// and revoked through another handle of the same pool (`device_default(1)`), while device 0's
// use is held back.

#[test]
fn r5_default_pool_revoked_through_another_handle() {
    strict_clean("r5_default_pool_revoked_through_another_handle", "2");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r5_default_pool_revoked_through_another_handle() {
    let TwoDevices {
        failures,
        kernels,
        s0,
        s1,
        ..
    } = TwoDevices::new();
    let config = LaunchConfig::linear(N, 64);
    for _ in 0..3 {
        let far = DevicePtrHandle::alloc_async(BYTES, &s1).unwrap();
        kernels.fill.launch(&s1, &config, (&far, 1, N)).unwrap();
        s1.synchronize().unwrap();
        let other = MemoryPoolHandle::device_default(1).unwrap();
        other.set_peer_access(0, true).unwrap();
        let open = gate(&s0);
        kernels.add_one.launch(&s0, &config, (&far, N)).unwrap();
        let opener = open_later(&open, 50);
        MemoryPoolHandle::device_default(1)
            .unwrap()
            .set_peer_access(0, false)
            .unwrap();
        opener.join().unwrap();
        s0.synchronize().unwrap();
        unreachable(
            kernels.fill.launch(&s0, &config, (&far, 2, N)),
            "default pool",
        );
        assert_eq!(read_words(&far, &s1), vec![2; N as usize]);
        drop(far);
    }
    finish(&s0, &s1, (), failures);
}

// ---------------------------------------------------------------------------------------------
// R6: many threads race the first reach checks of fresh buffers from both devices (one thread
// per device), with device 0's access toggled by a third; every launch either is refused or
// runs with access (strict: a touch without access aborts).

#[test]
fn r6_racing_first_checks_from_two_devices() {
    strict_clean("r6_racing_first_checks_from_two_devices", "2");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r6_racing_first_checks_from_two_devices() {
    in_scenario();
    let failures = Failures::watch();
    let kernels = Arc::new(TestKernels::load().unwrap());
    let c0 = ContextHandle::primary(0).unwrap();
    let c1 = ContextHandle::primary(1).unwrap();
    let s0 = stream(&c0);
    let s1 = stream(&c1);
    let far_pool = MemoryPoolHandle::create(&PoolProps::device(1)).unwrap();
    let config = LaunchConfig::linear(N, 64);
    let stop = Arc::new(AtomicBool::new(false));
    let toggler = {
        let pool = far_pool.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut on = false;
            while !stop.load(Ordering::SeqCst) {
                on = !on;
                pool.set_peer_access(0, on).unwrap();
                std::thread::sleep(Duration::from_micros(300));
            }
            pool.set_peer_access(0, false).unwrap();
        })
    };
    let mut refused = 0;
    let mut ran = 0;
    for _ in 0..60 {
        let far = DevicePtrHandle::alloc_from_pool(&far_pool, BYTES, &s1).unwrap();
        s1.synchronize().unwrap();
        let view = far.view(0, BYTES).unwrap();
        let (a, b) = (far.clone(), view.clone());
        let s0c = s0.clone();
        // Device 0's first checks (guards dropped at once: nothing queued).
        let t0 = std::thread::spawn(move || {
            let mut outcomes = Vec::new();
            for buffer in [&b, &a, &b] {
                outcomes.push(buffer.check_accessible_on(&s0c).map(drop).is_ok());
            }
            outcomes
        });
        let (a1, b1) = (far.clone(), view.clone());
        let k1 = Arc::clone(&kernels);
        let s1c = s1.clone();
        let t1 = std::thread::spawn(move || {
            for buffer in [&a1, &b1, &a1] {
                k1.add_one.launch(&s1c, &config, (buffer, N)).unwrap();
            }
        });
        t0.join().unwrap();
        t1.join().unwrap();
        s1.synchronize().unwrap();
        // Then launches on device 0 (refused, or run with access while the toggler's
        // revocation waits for them), then on 1 again.
        for buffer in [&view, &far] {
            match kernels.add_one.launch(&s0, &config, (buffer, N)) {
                Ok(()) => ran += 1,
                Err(Error::Unreachable { device: 0, .. } | Error::Revoking) => refused += 1,
                Err(other) => panic!("{other:?}"),
            }
        }
        s0.synchronize().unwrap();
        kernels.add_one.launch(&s1, &config, (&view, N)).unwrap();
        s1.synchronize().unwrap();
        drop((view, far));
    }
    stop.store(true, Ordering::SeqCst);
    toggler.join().unwrap();
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    println!("R6: {ran} ran, {refused} refused on device 0");
    drop(far_pool);
    assert!(handles_cuda::exec::flush_disposals(Duration::from_secs(10)));
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// R7: default-stream tokens through run_bound: an unbound token with no current context is
// refused; with a current context, copies and launches run; `legacy_in` bound works from a
// thread with no current context; the per-thread token of a green context is refused.

#[test]
fn r7_default_stream_tokens() {
    strict_clean("r7_default_stream_tokens", "1");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r7_default_stream_tokens() {
    in_scenario();
    let failures = Failures::watch();
    let kernels = TestKernels::load().unwrap();
    let context = ContextHandle::primary(0).unwrap();
    let buffer = DevicePtrHandle::alloc(&context, BYTES).unwrap();
    let config = LaunchConfig::linear(N, 64);
    let results = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let legacy = StreamHandle::legacy();
                let per_thread = StreamHandle::per_thread();
                let none_current = ContextHandle::current().unwrap().is_none();
                let a = buffer.memset_async(1, BYTES, &legacy);
                let b = kernels.fill.launch(&per_thread, &config, (&buffer, 1, N));
                let bound = StreamHandle::legacy_in(&context).unwrap();
                let c = buffer.memset_async(1, BYTES, &bound);
                let d = kernels.fill.launch(&bound, &config, (&buffer, 9, N));
                let e = bound.synchronize();
                let mut bytes = vec![0u8; BYTES];
                let f = buffer.copy_to_host(&mut bytes, &bound);
                (
                    none_current,
                    format!("{a:?}"),
                    format!("{b:?}"),
                    c,
                    d,
                    e,
                    f,
                    bytes,
                )
            })
            .join()
            .unwrap()
    });
    assert!(results.0, "a fresh thread has no current context");
    assert!(
        results.1.contains("NoCurrentContext") && results.2.contains("NoCurrentContext"),
        "unbound tokens on a thread with no current context: memset {}, launch {}",
        results.1,
        results.2
    );
    assert!(results.3.is_ok() && results.4.is_ok() && results.5.is_ok() && results.6.is_ok());
    assert_eq!(
        handles_tests::kernels::words(&results.7),
        vec![9; N as usize]
    );
    failures.assert_none();
}

// ---------------------------------------------------------------------------------------------
// R8: a buffer of device 1's pool first used from device 0 (access granted), so that the first
// reach check of its record is made from device 0: then revoked (refused), held back and
// revoked (the revocation waits), a view made after, and used on device 1.

#[test]
fn r8_first_used_from_the_granted_device() {
    strict_clean("r8_first_used_from_the_granted_device", "2");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r8_first_used_from_the_granted_device() {
    let TwoDevices {
        failures,
        kernels,
        s0,
        s1,
        ..
    } = TwoDevices::new();
    let far_pool = MemoryPoolHandle::create(&PoolProps::device(1)).unwrap();
    let config = LaunchConfig::linear(N, 64);
    for round in 0..3u32 {
        far_pool.set_peer_access(0, true).unwrap();
        // Allocated on device 0's stream or device 1's.
        let far = match round {
            1 => DevicePtrHandle::alloc_from_pool(&far_pool, BYTES, &s0).unwrap(),
            _ => DevicePtrHandle::alloc_from_pool(&far_pool, BYTES, &s1).unwrap(),
        };
        s1.synchronize().unwrap();
        s0.synchronize().unwrap();
        let view = far.view(0, BYTES).unwrap();
        kernels.fill.launch(&s0, &config, (&view, 1, N)).unwrap();
        kernels.fill.launch(&s0, &config, (&far, 1, N)).unwrap();
        far.memset_async(0, 4, &s0).unwrap();
        s0.synchronize().unwrap();
        far_pool.set_peer_access(0, false).unwrap();
        unreachable(kernels.fill.launch(&s0, &config, (&far, 2, N)), "R8 far");
        unreachable(kernels.fill.launch(&s0, &config, (&view, 2, N)), "R8 view");
        let view2 = far.view(4, 4).unwrap();
        unreachable(view2.memset_async(1, 4, &s0), "R8 view2");
        far_pool.set_peer_access(0, true).unwrap();
        let open = gate(&s0);
        kernels.add_one.launch(&s0, &config, (&view, N)).unwrap();
        let opener = open_later(&open, 50);
        far_pool.set_peer_access(0, false).unwrap();
        opener.join().unwrap();
        s0.synchronize().unwrap();
        unreachable(
            kernels.fill.launch(&s0, &config, (&far, 2, N)),
            "R8 far again",
        );
        kernels.add_one.launch(&s1, &config, (&view2, 1)).unwrap();
        s1.synchronize().unwrap();
        let mut expected = vec![2u32; N as usize];
        // memset word 0 to 0, add_one on all (held back), add_one on word 1 (view2).
        expected[0] = 1;
        expected[1] = 3;
        assert_eq!(read_words(&far, &s1), expected);
        drop((view2, view, far));
    }
    finish(&s0, &s1, far_pool, failures);
}

// ---------------------------------------------------------------------------------------------
// R9 (pre-existing rule, not the kept answer): memory imported through an imported pool of
// device 1 (whose location the record does not know), used by a kernel on device 0, which
// was granted no access to either pool.

#[test]
fn r9_imported_pool_memory_used_from_a_device_without_access() {
    strict_clean(
        "r9_imported_pool_memory_used_from_a_device_without_access",
        "2",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r9_imported_pool_memory_used_from_a_device_without_access() {
    use std::os::fd::AsFd;
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    let c0 = ContextHandle::primary(0).unwrap();
    let c1 = ContextHandle::primary(1).unwrap();
    let s0 = stream(&c0);
    let s1 = stream(&c1);
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(1)
    })
    .unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, BYTES, &s1).unwrap();
    s1.synchronize().unwrap();
    let exported = buffer.export_ipc().unwrap();
    let imported_pool =
        MemoryPoolHandle::import_posix_fd(pool.export_posix_fd().unwrap().as_fd(), 1).unwrap();
    let imported = DevicePtrHandle::import_ipc(&imported_pool, &exported, &s1).unwrap();
    println!(
        "R9 peer access of device 0: pool {:?}, imported pool {:?}",
        pool.peer_access(0),
        imported_pool.peer_access(0)
    );
    let config = LaunchConfig::linear(N, 64);
    let launched = kernels.fill.launch(&s0, &config, (&imported, 4, N));
    s0.synchronize().unwrap();
    assert!(
        matches!(launched, Err(Error::Unreachable { .. })),
        "a kernel on device 0 was let use device 1's imported pool memory with no access: \
         {launched:?}"
    );
    // The import learned the device its memory lives on: there it runs, checked once.
    assert_eq!(imported_pool.location(), Some(PoolLocation::Device(1)));
    let revoked = imported_pool.set_peer_access(1, false);
    assert!(
        matches!(revoked, Err(Error::InvalidArgument(_))),
        "the access of the device holding the memory is not revocable: {revoked:?}"
    );
    kernels
        .fill
        .launch(&s1, &config, (&imported, 5, N))
        .unwrap();
    assert_eq!(read_words(&imported, &s1), vec![5; N as usize]);
    drop((imported, imported_pool, buffer, pool));
    s1.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// R10: memory of an imported host pool, whose location the import cannot learn (no device
// reaches it until this process grants one): every device's use asks the driver and is
// refused until granted. (Granted, a same-process import of one's own host pool is still
// refused device writes by driver 580, which the simulator reports: cross-process use is
// what `gpu_process.rs` covers.)

#[test]
fn r10_imported_host_pool_memory_needs_a_grant_on_every_device() {
    strict_clean(
        "r10_imported_host_pool_memory_needs_a_grant_on_every_device",
        "2",
    );
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_r10_imported_host_pool_memory_needs_a_grant_on_every_device() {
    use std::os::fd::AsFd;
    let TwoDevices {
        failures,
        kernels,
        s0,
        s1,
        ..
    } = TwoDevices::new();
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ipc: true,
        max_size: 0,
        device: 0,
    })
    .unwrap();
    pool.set_peer_access(0, true).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, BYTES, &s0).unwrap();
    s0.synchronize().unwrap();
    let exported = buffer.export_ipc().unwrap();
    let imported_pool =
        MemoryPoolHandle::import_posix_fd(pool.export_posix_fd().unwrap().as_fd(), 0).unwrap();
    assert_eq!(
        imported_pool.location(),
        None,
        "a host pool's import has no device"
    );
    let imported = DevicePtrHandle::import_ipc(&imported_pool, &exported, &s0).unwrap();
    let view = imported.view(0, BYTES / 2).unwrap();
    let config = LaunchConfig::linear(N, 64);
    for _ in 0..2 {
        unreachable(
            kernels.fill.launch(&s0, &config, (&imported, 1, N)),
            "a kernel on the import, device 0",
        );
        unreachable(
            imported.memset_async(0, BYTES, &s0),
            "a memset on the import, device 0",
        );
        let refused = kernels.fill.launch(&s1, &config, (&view, 1, N / 2));
        assert!(
            matches!(refused, Err(Error::Unreachable { device: 1, .. })),
            "a kernel on a view of the import, device 1: {refused:?}"
        );
    }
    drop((view, imported, imported_pool, buffer, pool));
    s0.synchronize().unwrap();
    failures.assert_none();
}
