//! The checks `CublasHandle::sgemm` and `all_reduce_sum_f32` make before calling their
//! library, on the simulated driver. The libraries are not there, and the handles are
//! stand-ins: a call that reached cuBLAS or NCCL would fail, so an `Ok` shows that none was
//! made.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{on_simulator, stand_in};
use handles_cuda::{
    ContextHandle, DevicePtrHandle, MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
    exec::Context,
};
use handles_cuda_libs::{
    Cublas, CublasHandle, LibError, NcclComm, NcclCommHandle, all_reduce_sum_f32,
};

/// A stream of device `ordinal`'s primary context.
fn stream_of(ordinal: usize) -> StreamHandle {
    let context = ContextHandle::primary(ordinal).unwrap();
    StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap()
}

/// A stand-in cuBLAS handle on `stream`, recorded in `context`.
fn cublas_on(stream: &StreamHandle, context: ContextHandle) -> CublasHandle {
    let stream = stream.clone();
    // SAFETY: a stand-in raw value that nothing dereferences (no test here reaches cuBLAS);
    // the handle owns and deletes nothing; its record holds live handles.
    unsafe { CublasHandle::from_raw_borrowed(stand_in(), Cublas { stream, context }) }
}

/// A stand-in NCCL communicator of one rank on `stream`.
fn comm_on(stream: &StreamHandle) -> NcclCommHandle {
    let context = stream.context().clone().unwrap();
    // SAFETY: as for `cublas_on` (no test here reaches NCCL).
    unsafe {
        NcclCommHandle::from_raw_borrowed(stand_in(), NcclComm::new(stream.clone(), context, 0, 1))
    }
}

/// A synchronous allocation of `bytes` in `stream`'s context.
fn buffer(stream: &StreamHandle, bytes: usize) -> DevicePtrHandle {
    DevicePtrHandle::alloc(stream.context().as_ref().unwrap(), bytes).unwrap()
}

/// A buffer of device 1's pool, which device 0 has no access to, and a stream of device 0.
fn far_buffer_and_near_stream() -> (DevicePtrHandle, StreamHandle) {
    let pool = MemoryPoolHandle::create(&PoolProps::device(1)).unwrap();
    let far = DevicePtrHandle::alloc_from_pool(&pool, 64, &stream_of(1)).unwrap();
    (far, stream_of(0))
}

/// Whether a call was refused because a buffer is not accessible from the call's device.
fn is_unreachable(result: Result<(), LibError>) -> bool {
    match result {
        Err(LibError::Cuda(handles_cuda::Error::Unreachable { pool, .. })) => pool,
        _ => false,
    }
}

#[test]
fn sgemm_with_m_or_n_zero_calls_nothing() {
    on_simulator("sgemm_with_m_or_n_zero_calls_nothing", 1, || {
        let stream = stream_of(0);
        let cublas = cublas_on(&stream, stream.context().clone().unwrap());
        let [a, b, c] = [0; 3].map(|_| buffer(&stream, 64));
        for shape in [(0, 4, 4), (4, 0, 4), (0, 0, 0)] {
            cublas.sgemm(shape, &a, &b, &c).unwrap();
        }
    });
}

#[test]
fn sgemm_with_k_zero_zeroes_c() {
    on_simulator("sgemm_with_k_zero_zeroes_c", 1, || {
        let stream = stream_of(0);
        let cublas = cublas_on(&stream, stream.context().clone().unwrap());
        let (m, n) = (3, 5);
        let [a, b] = [0; 2].map(|_| buffer(&stream, 4));
        let c = buffer(&stream, m * n * 4);
        c.memset_async(0xab, m * n * 4, &stream).unwrap();
        cublas.sgemm((m, n, 0), &a, &b, &c).unwrap();
        let mut host = vec![0xffu8; m * n * 4];
        c.copy_to_host(&mut host, &stream).unwrap();
        assert!(host.iter().all(|&byte| byte == 0), "C = {host:?}");
    });
}

#[test]
fn all_reduce_with_a_communicator_listed_twice_is_an_error() {
    on_simulator(
        "all_reduce_with_a_communicator_listed_twice_is_an_error",
        1,
        || {
            let stream = stream_of(0);
            let comm = comm_on(&stream);
            let [s0, s1, r0, r1] = [0; 4].map(|_| buffer(&stream, 16));
            let (sent, result) = mpsc::channel();
            // A deadlock must fail the test, not hang it: the call runs on a thread of its own.
            let call = std::thread::spawn(move || {
                let comms = [comm.clone(), comm];
                let _ = sent.send(all_reduce_sum_f32(&comms, &[&s0, &s1], &[&r0, &r1], 4));
            });
            let result = result
                .recv_timeout(Duration::from_secs(5))
                .expect("all_reduce_sum_f32 did not return within 5 s: it deadlocked");
            assert!(matches!(result, Err(LibError::DuplicateComm)), "{result:?}");
            call.join().unwrap();
        },
    );
}

#[test]
fn sgemm_refuses_memory_its_device_cannot_reach() {
    on_simulator("sgemm_refuses_memory_its_device_cannot_reach", 2, || {
        let (far, stream) = far_buffer_and_near_stream();
        let [x, y] = [0; 2].map(|_| buffer(&stream, 64));
        let context = stream.context().clone().unwrap();
        // A record whose context is a reference of unknown device: the device is found.
        // SAFETY: `context`, alive until the end, keeps the referenced context alive.
        let unknown =
            unsafe { ContextHandle::from_raw_borrowed(context.as_cu(), Context::reference(None)) };
        for cublas in [
            cublas_on(&stream, context.clone()),
            cublas_on(&stream, unknown),
        ] {
            for shape in [(4, 4, 4), (4, 4, 0)] {
                assert!(is_unreachable(cublas.sgemm(shape, &far, &x, &y)), "far A");
                assert!(is_unreachable(cublas.sgemm(shape, &x, &far, &y)), "far B");
                assert!(is_unreachable(cublas.sgemm(shape, &x, &y, &far)), "far C");
            }
            // With every buffer reachable, the same handle zeroes C (k = 0).
            cublas.sgemm((4, 4, 0), &x, &x, &y).unwrap();
        }
    });
}

#[test]
fn all_reduce_refuses_memory_its_device_cannot_reach() {
    on_simulator(
        "all_reduce_refuses_memory_its_device_cannot_reach",
        2,
        || {
            let (far, stream) = far_buffer_and_near_stream();
            let near = buffer(&stream, 64);
            let comm = [comm_on(&stream)];
            assert!(
                is_unreachable(all_reduce_sum_f32(&comm, &[&far], &[&near], 4)),
                "far send"
            );
            assert!(
                is_unreachable(all_reduce_sum_f32(&comm, &[&near], &[&far], 4)),
                "far receive"
            );
        },
    );
}

#[test]
fn sgemm_refuses_small_and_overlapping_buffers_with_their_values() {
    on_simulator(
        "sgemm_refuses_small_and_overlapping_buffers_with_their_values",
        1,
        || {
            let stream = stream_of(0);
            let cublas = cublas_on(&stream, stream.context().clone().unwrap());
            let (m, n, k) = (4, 3, 2);
            let a = buffer(&stream, m * k * 4);
            let b = buffer(&stream, k * n * 4);
            let small = buffer(&stream, m * n * 4 - 4);
            match cublas.sgemm((m, n, k), &a, &b, &small) {
                Err(LibError::TooSmall { what, needs, has }) => {
                    assert_eq!((what.as_str(), needs, has), ("C (4x3 f32)", 48, 44));
                }
                other => panic!("expected TooSmall, got {other:?}"),
            }
            // C is A itself (big enough for both): refused before cuBLAS.
            let both = buffer(&stream, m * n * 4);
            assert!(matches!(
                cublas.sgemm((m, n, k), &both, &b, &both),
                Err(LibError::Overlap { output: "C" })
            ));
            assert!(matches!(
                cublas.sgemm((usize::MAX, 2, 2), &a, &b, &both),
                Err(LibError::TooLarge {
                    what: "element count",
                    ..
                })
            ));
        },
    );
}
