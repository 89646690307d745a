//! GPU tests of handles-cuda. They need a CUDA GPU and are ignored by default; run them with
//! `--include-ignored` on a machine that has one (see README, "GPU tests"). None of them
//! returns early: without a GPU they fail.

use std::sync::Arc;

use handles_cuda::driver::sys;
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, MemoryPoolHandle, PoolProps, StreamHandle,
    exec::EventFlags, ipc::IpcPointer, memory::AllocKind,
};
use handles_tests::{Failures, cuda_live_counts, serial, stream};

mod simulator;

#[test]
#[ignore = "needs a CUDA GPU"]
fn primary_context_is_cached_per_thread() {
    let _serial = serial();
    let first = ContextHandle::primary(0).unwrap();
    let second = ContextHandle::primary(0).unwrap();
    assert!(
        first.ptr_eq(&second),
        "a repeated lookup returns the cached handle"
    );
    assert!(first.is_owning());
    assert_eq!(first.device(), Some(0));
    let raw = first.as_cu();
    let other_thread = std::thread::spawn(move || {
        let context = ContextHandle::primary(0).unwrap();
        (context.as_cu() as usize, context.strong_count())
    })
    .join()
    .unwrap();
    assert_eq!(other_thread.0, raw as usize, "the same primary context");
    let current = ContextHandle::current().unwrap();
    // Nothing made a context current on this thread: the handles never need that.
    assert!(current.is_none() || current.unwrap().as_cu() == raw);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn objects_outlive_a_context_dropped_first_and_are_destroyed_before_it() {
    let _serial = serial();
    let failures = Failures::watch();
    let start = cuda_live_counts();
    {
        let context = ContextHandle::primary(0).unwrap();
        let stream = stream(&context);
        let event = EventHandle::create(&context, EventFlags::timing()).unwrap();
        let end = EventHandle::create(&context, EventFlags::timing()).unwrap();
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 1 << 20, &stream).unwrap();
        // The application drops the context and the pool first.
        handles_cuda::exec::clear_primary_cache();
        drop(context);
        drop(pool.clone());
        assert!(stream.context().as_ref().unwrap().strong_count() >= 3);
        event.record(&stream).unwrap();
        buffer.memset_async(0xab, 1 << 20, &stream).unwrap();
        end.record(&stream).unwrap();
        end.synchronize().unwrap();
        assert!(event.elapsed_ms(&end).unwrap() >= 0.0);
        let mut host = vec![0u8; 4096];
        buffer.copy_to_host(&mut host, &stream).unwrap();
        assert!(host.iter().all(|&byte| byte == 0xab));
        assert_eq!(pool.used_bytes().unwrap(), 1 << 20);
        drop(buffer);
        stream.synchronize().unwrap();
        assert_eq!(pool.used_bytes().unwrap(), 0, "the free ran on the stream");
    }
    assert_eq!(cuda_live_counts(), start, "every handle destroyed");
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn borrowed_handles_never_destroy() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let owned = stream(&context);
    // A reference to a raw value this program manages returns the managing handle.
    // SAFETY: `owned` keeps the stream alive.
    let canonical = unsafe {
        StreamHandle::from_raw_borrowed(owned.as_cu(), handles_cuda::exec::Stream { context: None })
    };
    assert!(canonical.ptr_eq(&owned));
    // A stream created outside the handles: the reference must not destroy it.
    let mut raw = std::ptr::null_mut();
    // SAFETY: `context` is made current only for this call; `raw` is a valid out-pointer.
    unsafe {
        assert_eq!(
            sys::cuCtxPushCurrent_v2(context.as_cu()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuStreamCreate(&mut raw, 0),
            sys::CUresult::CUDA_SUCCESS
        );
        let mut popped = std::ptr::null_mut();
        assert_eq!(
            sys::cuCtxPopCurrent_v2(&mut popped),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    // SAFETY: the stream stays alive until we destroy it below.
    let borrowed = unsafe {
        StreamHandle::from_raw_borrowed(raw, handles_cuda::exec::Stream { context: None })
    };
    assert!(!borrowed.is_owning());
    drop(borrowed.clone());
    drop(borrowed);
    // SAFETY: the stream is still ours; query and destroy it.
    unsafe {
        assert_eq!(
            sys::cuStreamQuery(raw),
            sys::CUresult::CUDA_SUCCESS,
            "still alive"
        );
        assert_eq!(sys::cuStreamDestroy_v2(raw), sys::CUresult::CUDA_SUCCESS);
    }
    let device_pool = MemoryPoolHandle::device_current(0).unwrap();
    assert!(!device_pool.is_owning());
    drop(device_pool);
    let again = MemoryPoolHandle::device_current(0).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&again, 256, &owned).unwrap();
    drop(buffer);
    owned.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn with_owner_handles_keep_cudarc_objects_alive() {
    let _serial = serial();
    let failures = Failures::watch();
    let cudarc_context = cudarc::driver::CudaContext::new(0).unwrap();
    let cudarc_stream = cudarc_context.new_stream().unwrap();
    let stream_count = Arc::strong_count(&cudarc_stream);
    // SAFETY: nothing captures the cudarc stream in this test.
    let wrapped = unsafe { StreamHandle::from_cudarc(&cudarc_stream) };
    assert_eq!(wrapped.ownership(), handles_core::Ownership::WithOwner);
    assert_eq!(Arc::strong_count(&cudarc_stream), stream_count + 1);
    let slice = cudarc_stream.alloc_zeros::<u32>(1024).unwrap();
    let buffer = DevicePtrHandle::from_cudarc_slice(slice).unwrap();
    assert_eq!(buffer.size(), 4096);
    let weak_stream = Arc::downgrade(&cudarc_stream);
    drop(cudarc_stream);
    drop(cudarc_context);
    assert!(
        weak_stream.upgrade().is_some(),
        "the handles keep the cudarc stream alive"
    );
    let mut host = vec![1u8; 4096];
    buffer.copy_to_host(&mut host, &wrapped).unwrap();
    assert!(host.iter().all(|&byte| byte == 0));
    drop(buffer);
    drop(wrapped);
    assert!(
        weak_stream.upgrade().is_none(),
        "released with the last handle"
    );
    let context = ContextHandle::primary(0).unwrap();
    let back = context.to_cudarc().unwrap();
    assert_eq!(back.cu_ctx(), context.as_cu());
    failures.assert_none();
}

/// A cudarc slice of one thread's per-thread stream, moved to another thread and wrapped there
/// while its allocation and zeroing still wait behind held work of the first thread's stream
/// (cudarc's event tracking on, then off): the wrapped handle's first use, on another stream,
/// comes after that zeroing. `CU_STREAM_PER_THREAD` names the calling thread's stream, so a
/// synchronisation of it on the wrapping thread would not wait for the first thread's work.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_per_thread_slice_wrapped_on_another_thread_waits_for_its_work() {
    use std::time::Duration;
    let _serial = serial();
    let failures = Failures::watch();
    let cudarc = cudarc::driver::CudaContext::new(0).unwrap();
    let context = ContextHandle::from_cudarc(&cudarc);
    let ours = stream(&context);
    for tracking in [true, false] {
        if !tracking {
            // SAFETY: the one slice made after this is used only through this crate's handle,
            // which orders its uses, and by cudarc's own zeroing before the wrap.
            unsafe { cudarc.disable_event_tracking() };
        }
        let (sender, slices) = std::sync::mpsc::channel();
        let maker = {
            let cudarc = cudarc.clone();
            std::thread::spawn(move || {
                cudarc.bind_to_thread().unwrap();
                let per_thread = StreamHandle::per_thread();
                let gate = handles_tests::Gate::hold(&per_thread);
                let slice = cudarc.per_thread_stream().alloc_zeros::<u8>(4096).unwrap();
                sender.send(slice).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                drop(gate);
                per_thread.synchronize().unwrap();
            })
        };
        let slice = slices.recv().unwrap();
        cudarc.bind_to_thread().unwrap();
        let data = DevicePtrHandle::from_cudarc_slice(slice).unwrap();
        data.memset_async(7, 4096, &ours).unwrap();
        let mut back = vec![0u8; 4096];
        data.copy_to_host(&mut back, &ours).unwrap();
        maker.join().unwrap();
        assert!(
            back.iter().all(|&b| b == 7),
            "tracking {tracking}: the zeroing ran after the wrapped handle's memset"
        );
        drop(data);
    }
    context.synchronize().unwrap();
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn deallocation_stream_can_be_read_and_replaced() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let (first, second) = (stream(&context), stream(&context));
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &first).unwrap();
    assert_eq!(buffer.deallocation_stream().unwrap(), first);
    buffer.set_deallocation_stream(&second).unwrap();
    assert_eq!(buffer.deallocation_stream().unwrap(), second);
    // A default-stream token is bound to the context current when it is set: none here.
    assert!(
        buffer
            .set_deallocation_stream(&StreamHandle::legacy())
            .is_err()
    );
    buffer
        .set_deallocation_stream(&StreamHandle::legacy_in(&context).unwrap())
        .unwrap();
    buffer.set_deallocation_stream(&second).unwrap();
    first.synchronize().unwrap();
    drop(buffer);
    second.synchronize().unwrap();
    assert_eq!(pool.used_bytes().unwrap(), 0);
    let synchronous = DevicePtrHandle::alloc(&context, 4096).unwrap();
    assert_eq!(synchronous.kind(), AllocKind::Synchronous);
    assert!(synchronous.set_deallocation_stream(&second).is_err());
    failures.assert_none();
}

/// Makes a second, non-primary context on device 0 current, standing in for "another device's
/// context", and returns it for destruction.
fn make_foreign_context_current() -> sys::CUcontext {
    let mut foreign = std::ptr::null_mut();
    // SAFETY: creating a context with default parameters on device 0; it becomes current.
    unsafe {
        assert_eq!(
            sys::cuCtxCreate_v4(&mut foreign, std::ptr::null_mut(), 0, 0),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    foreign
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn frees_run_in_the_right_context_whatever_is_current() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let on_token =
        DevicePtrHandle::alloc_from_pool(&pool, 4096, &StreamHandle::legacy_in(&context).unwrap())
            .unwrap();
    let on_stream = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream(&context)).unwrap();
    let synchronous = DevicePtrHandle::alloc(&context, 4096).unwrap();
    let host = DevicePtrHandle::alloc_host(&context, 4096).unwrap();
    let foreign = make_foreign_context_current();
    drop(on_token);
    drop(synchronous);
    let mut after_drop = std::ptr::null_mut();
    // SAFETY: `after_drop` is a valid out-pointer.
    let asked = unsafe { sys::cuCtxGetCurrent(&mut after_drop) };
    assert_eq!(asked, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(after_drop, foreign, "the caller's context is restored");
    assert!(
        ContextHandle::current().is_err(),
        "a context no handle can keep alive is refused"
    );
    // SAFETY: clearing the current context and destroying our own foreign context.
    unsafe {
        assert_eq!(
            sys::cuCtxSetCurrent(std::ptr::null_mut()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    drop(on_stream);
    drop(host);
    assert!(
        ContextHandle::current().unwrap().is_none(),
        "still no context current"
    );
    context.synchronize().unwrap();
    assert_eq!(pool.used_bytes().unwrap(), 0, "both pool frees ran");
    // SAFETY: the foreign context is ours and nothing uses it any more.
    unsafe {
        assert_eq!(sys::cuCtxDestroy_v2(foreign), sys::CUresult::CUDA_SUCCESS);
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_input_returns_errors_and_leaks_nothing() {
    let _serial = serial();
    let start = cuda_live_counts();
    let count = handles_cuda::driver::device_count().unwrap();
    assert!(matches!(
        ContextHandle::primary(count + 3),
        Err(Error::NoSuchDevice { ordinal, count: c }) if ordinal == count + 3 && c == count
    ));
    assert!(matches!(
        MemoryPoolHandle::create(&PoolProps::device(count)),
        Err(Error::NoSuchDevice { .. })
    ));
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let (free_before, _) = context.mem_get_info().unwrap();
    let impossible = DevicePtrHandle::alloc_from_pool(&pool, 1 << 62, &stream);
    assert!(
        matches!(
            impossible,
            Err(Error::Driver {
                code: sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                ..
            })
        ),
        "{impossible:?}"
    );
    assert!(DevicePtrHandle::alloc(&context, 1 << 62).is_err());
    assert!(DevicePtrHandle::alloc_async(1 << 62, &stream).is_err());
    assert!(matches!(
        DevicePtrHandle::alloc_from_pool(&pool, 0, &stream),
        Err(Error::ZeroSize { .. })
    ));
    let (free_after, _) = context.mem_get_info().unwrap();
    assert!(
        free_after + (4 << 20) >= free_before,
        "{free_before} -> {free_after}"
    );
    // Malformed IPC input.
    let ipc_pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })
    .unwrap();
    let garbage = IpcPointer {
        export_data: [0x5a; 64],
        size: 4096,
    };
    assert!(DevicePtrHandle::import_ipc(&ipc_pool, &garbage, &stream).is_err());
    assert_eq!(
        handles_cuda::ipc::cached_imports(),
        0,
        "a failed import caches nothing"
    );
    let not_ipc = DevicePtrHandle::alloc_from_pool(&pool, 64, &stream).unwrap();
    assert!(
        matches!(not_ipc.export_ipc(), Err(Error::NotExportable { .. })),
        "a non-IPC pool cannot export"
    );
    let plain_event = EventHandle::create(&context, EventFlags::default()).unwrap();
    assert!(plain_event.export_ipc().is_err());
    let bad_token = handles_cuda::ipc::IpcEventHandle {
        token: [0x11; 64],
        blocking_sync: false,
    };
    assert!(EventHandle::import_ipc(&context, &bad_token).is_err());
    assert!(
        EventHandle::create(
            &context,
            EventFlags {
                timing: true,
                interprocess: true,
                blocking_sync: false
            }
        )
        .is_err()
    );
    drop((not_ipc, plain_event, ipc_pool, pool, stream, context));
    handles_cuda::exec::clear_primary_cache();
    assert_eq!(cuda_live_counts(), start);
}

/// A use reported on a default-stream token while no context is current names no stream: it
/// is refused, and the memory is ordered, viewed and freed as before (it was once marked
/// unorderable, its free refused and its pool kept: a leak for bad input).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_use_reported_on_a_token_with_no_context_is_refused_and_loses_nothing() {
    let _serial = serial();
    let failures = Failures::watch();
    let start = cuda_live_counts();
    // A fresh thread, on which nothing made a context current.
    std::thread::spawn(|| {
        assert!(ContextHandle::current().unwrap().is_none());
        let context = ContextHandle::primary(0).unwrap();
        let stream = stream(&context);
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
        for token in [StreamHandle::legacy(), StreamHandle::per_thread()] {
            let refused = buffer.record_use(&token);
            assert!(
                matches!(refused, Err(Error::NoCurrentContext { .. })),
                "{refused:?}"
            );
        }
        assert!(ContextHandle::current().unwrap().is_none());
        // Still ordered and usable: work on it, then its free on its stream.
        buffer.memset_async(0x5a, 4096, &stream).unwrap();
        let mut host = vec![0u8; 4096];
        buffer.copy_to_host(&mut host, &stream).unwrap();
        assert!(host.iter().all(|&byte| byte == 0x5a));
        drop(buffer);
        stream.synchronize().unwrap();
        assert_eq!(pool.used_bytes().unwrap(), 0, "the free ran on the stream");
        // Bound to a context, the same tokens are reported as uses.
        let bound = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
        context
            .run(|| {
                bound.record_use(&StreamHandle::legacy())?;
                bound.record_use(&StreamHandle::per_thread())
            })
            .unwrap();
        drop(bound);
        context.synchronize().unwrap();
        assert_eq!(pool.used_bytes().unwrap(), 0);
        // A green context has no per-thread stream: that token names none there either.
        let green = handles_cuda::exec::GreenContextHandle::create(0, 16).unwrap();
        let green_context = green.context().unwrap();
        let in_green = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream).unwrap();
        let refused = green_context.run(|| in_green.record_use(&StreamHandle::per_thread()));
        assert!(
            matches!(refused, Err(Error::WrongContext { .. })),
            "{refused:?}"
        );
        drop(in_green);
        stream.synchronize().unwrap();
        assert_eq!(pool.used_bytes().unwrap(), 0, "the free ran on the stream");
        drop((green_context, green));
        drop((pool, stream, context));
        handles_cuda::exec::clear_primary_cache();
    })
    .join()
    .unwrap();
    assert_eq!(cuda_live_counts(), start, "every handle destroyed");
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn no_leaks_device_memory_and_live_counts_return() {
    let _serial = serial();
    let failures = Failures::watch();
    let start = cuda_live_counts();
    let context = ContextHandle::primary(0).unwrap();
    context.synchronize().unwrap();
    let (free_before, _) = context.mem_get_info().unwrap();
    for round in 0..3 {
        let stream = stream(&context);
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        let pooled: Vec<_> = (0..64)
            .map(|i| DevicePtrHandle::alloc_from_pool(&pool, (i + 1) << 16, &stream).unwrap())
            .collect();
        let big: Vec<_> = (0..4)
            .map(|_| DevicePtrHandle::alloc(&context, 64 << 20).unwrap())
            .collect();
        let events: Vec<_> = (0..16)
            .map(|_| EventHandle::create(&context, EventFlags::default()).unwrap())
            .collect();
        for event in &events {
            event.record(&stream).unwrap();
        }
        let (free_during, _) = context.mem_get_info().unwrap();
        assert!(
            free_during + (256 << 20) <= free_before,
            "round {round}: memory in use"
        );
        drop((pooled, big, events, pool));
        stream.synchronize().unwrap();
    }
    context.synchronize().unwrap();
    let (free_after, _) = context.mem_get_info().unwrap();
    assert!(
        free_after + (2 << 20) >= free_before,
        "device memory leaked: {free_before} before, {free_after} after"
    );
    drop(context);
    handles_cuda::exec::clear_primary_cache();
    assert_eq!(cuda_live_counts(), start);
    failures.assert_none();
}

#[test]
#[ignore = "needs two CUDA GPUs"]
fn two_gpus_pool_peer_access_is_revoked_before_destroy() {
    let _serial = serial();
    let failures = Failures::watch();
    assert!(
        handles_cuda::driver::device_count().unwrap() >= 2,
        "this test needs two GPUs"
    );
    // The deleter's revoke, run on a live pool: one call per peer, and it takes effect.
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    pool.set_peer_access(1, true).unwrap();
    assert_eq!(pool.revoke_peer_access().unwrap(), 1, "device 1 revoked");
    assert!(!pool.peer_access(1).unwrap());
    assert!(
        pool.peer_access(0).unwrap(),
        "the owning device keeps its access"
    );
    drop(pool);
    // Recycled pool handles never come back with a peer's access.
    for _ in 0..50 {
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        assert!(
            !pool.peer_access(1).unwrap(),
            "a new pool inherited peer access"
        );
        pool.set_peer_access(1, true).unwrap();
        assert!(pool.peer_access(1).unwrap());
        pool.close().expect("revoke and destroy succeed");
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn query_and_wait_event_order_work_across_streams() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let (first, second) = (stream(&context), stream(&context));
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 1 << 20, &first).unwrap();
    let done = EventHandle::create(&context, EventFlags::default()).unwrap();
    assert!(
        done.query().unwrap(),
        "an event never recorded counts as complete"
    );
    buffer.memset_async(0x5a, 1 << 20, &first).unwrap();
    done.record(&first).unwrap();
    second.wait_event(&done).unwrap();
    let mut host = vec![0u8; 1 << 20];
    buffer.copy_to_host(&mut host, &second).unwrap();
    assert!(
        host.iter().all(|&byte| byte == 0x5a),
        "the wait ordered the read after the memset"
    );
    assert!(done.query().unwrap());
    assert!(first.query().unwrap() && second.query().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn copies_at_offsets_and_between_buffers_move_the_right_bytes() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let (first, second) = (stream(&context), stream(&context));
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let source = DevicePtrHandle::alloc_from_pool(&pool, 8192, &first).unwrap();
    let target = DevicePtrHandle::alloc_from_pool(&pool, 8192, &second).unwrap();
    let data: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    source.memset_async(0, 8192, &first).unwrap();
    target.memset_async(0xee, 8192, &second).unwrap();
    source.copy_from_host_at(1024, &data, &first).unwrap();
    // A device-to-device copy on a third stream, after both buffers' work.
    let third = stream(&context);
    first.synchronize().unwrap();
    second.synchronize().unwrap();
    source
        .copy_to_async(1024, &target, 2048, 4096, &third)
        .unwrap();
    let mut back = vec![0u8; 4096];
    target.copy_to_host_at(2048, &mut back, &third).unwrap();
    assert_eq!(back, data);
    let mut edge = [0u8; 16];
    target
        .copy_to_host_at(2048 - 16, &mut edge, &third)
        .unwrap();
    assert_eq!(
        edge, [0xee; 16],
        "bytes before the copied range are untouched"
    );
    assert!(
        target.copy_to_host_at(8192 - 8, &mut edge, &third).is_err(),
        "past the end"
    );
    assert!(
        source.copy_to_async(0, &source, 100, 200, &third).is_err(),
        "overlapping"
    );
    assert!(
        source.memset_at_async(usize::MAX, 0, 2, &third).is_err(),
        "offset overflow"
    );
    // Both buffers are freed after the copy on `third`, although it is neither's home.
    drop((source, target));
    context.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_buffer_used_on_other_streams_is_freed_after_them() {
    let _serial = serial();
    let failures = Failures::watch();
    let start = cuda_live_counts();
    {
        let context = ContextHandle::primary(0).unwrap();
        let streams: Vec<_> = (0..4).map(|_| stream(&context)).collect();
        let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
        for round in 0..50 {
            let buffer =
                DevicePtrHandle::alloc_from_pool(&pool, 1 << 22, &streams[round % 4]).unwrap();
            // Each stream writes its own quarter: the streams race for the free, not the bytes.
            for (i, other) in streams.iter().enumerate() {
                buffer
                    .memset_at_async(i << 20, i as u8, 1 << 20, other)
                    .unwrap();
            }
            if round % 2 == 0 {
                buffer
                    .set_deallocation_stream(&streams[(round + 1) % 4])
                    .unwrap();
            }
            // Freed on its deallocation stream after the work on all four streams.
        }
        context.synchronize().unwrap();
        assert_eq!(pool.used_bytes().unwrap(), 0);
    }
    handles_cuda::exec::clear_primary_cache();
    assert_eq!(cuda_live_counts(), start);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn contexts_are_owned_or_refused_and_to_cudarc_leaves_the_current_one() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    // SAFETY: clears this thread's current context; nothing of ours depends on it.
    unsafe {
        assert_eq!(
            sys::cuCtxSetCurrent(std::ptr::null_mut()),
            sys::CUresult::CUDA_SUCCESS
        )
    };
    let cudarc = context.to_cudarc().unwrap();
    assert_eq!(cudarc.cu_ctx(), context.as_cu());
    assert!(
        ContextHandle::current().unwrap().is_none(),
        "to_cudarc left a context current"
    );

    // A current primary context is retained by what is made in it.
    // SAFETY: the primary context is alive (held by `context`).
    unsafe {
        assert_eq!(
            sys::cuCtxSetCurrent(context.as_cu()),
            sys::CUresult::CUDA_SUCCESS
        )
    };
    let event = EventHandle::create_in_current(EventFlags::default()).unwrap();
    assert!(event.context().as_ref().unwrap().ptr_eq(&context));
    // A foreign context current: refused, not borrowed.
    let foreign = make_foreign_context_current();
    assert!(EventHandle::create_in_current(EventFlags::default()).is_err());
    assert!(DevicePtrHandle::alloc_async(64, &StreamHandle::legacy()).is_err());
    // SAFETY: our own context; nothing refers to it.
    unsafe {
        assert_eq!(sys::cuCtxDestroy_v2(foreign), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(
            sys::cuCtxSetCurrent(std::ptr::null_mut()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_per_thread_stream_allocation_dropped_on_another_thread_is_freed_in_order() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    let buffers: Vec<DevicePtrHandle> = std::thread::scope(|scope| {
        (0..4)
            .map(|i| {
                let (context, pool) = (context.clone(), pool.clone());
                scope.spawn(move || {
                    // SAFETY: the context is alive for this thread's work (held here).
                    let status = unsafe { sys::cuCtxSetCurrent(context.as_cu()) };
                    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
                    let per_thread = StreamHandle::per_thread();
                    let buffer =
                        DevicePtrHandle::alloc_from_pool(&pool, 1 << 22, &per_thread).unwrap();
                    buffer.memset_async(i as u8, 1 << 22, &per_thread).unwrap();
                    buffer
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|join| join.join().unwrap())
            .collect()
    });
    // Dropped here: the main thread's per-thread stream knows nothing of the allocating
    // threads' work, so each free first waits for the context.
    drop(buffers);
    context.synchronize().unwrap();
    assert_eq!(pool.used_bytes().unwrap(), 0);
    failures.assert_none();
}

/// A thread that used the per-thread default stream inside `ContextHandle::run` (which makes
/// no context current again on return), launched a kernel there and handed its buffer out
/// exits within 30 s, and the buffer is freed in order from this thread. (An earlier build of
/// the why_handles example, doing the same, hung in that thread's exit on the H200 three times
/// in a row; neither this test nor later builds of the example reproduced it.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_thread_that_used_the_per_thread_stream_inside_run_exits() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let kernels = handles_tests::kernels::TestKernels::load().unwrap();
    let (sent, received) = std::sync::mpsc::channel();
    let worker = {
        let (context, add_one) = (context.clone(), kernels.add_one.clone());
        std::thread::spawn(move || {
            context.run(|| {
                let per_thread = StreamHandle::per_thread();
                let buffer = DevicePtrHandle::alloc_async(4096 * 4, &per_thread)?;
                buffer.memset_async(0, 4096 * 4, &per_thread)?;
                let config = handles_cuda::LaunchConfig::linear(4096, 256);
                add_one.launch(&per_thread, &config, (&buffer, 4096))?;
                Ok::<_, Error>(buffer)
            })
        })
    };
    std::thread::spawn(move || {
        let _ = sent.send(worker.join());
    });
    let buffer = received
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the thread exited within 30 s")
        .expect("the thread did not panic")
        .unwrap();
    drop(buffer);
    context.synchronize().unwrap();
    drop(kernels);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_legacy_stream_allocation_keeps_the_current_primary_context_alive() {
    let _serial = serial();
    let failures = Failures::watch();
    {
        let context = ContextHandle::primary(0).unwrap();
        // SAFETY: the primary context is alive (held by `context`).
        unsafe {
            assert_eq!(
                sys::cuCtxSetCurrent(context.as_cu()),
                sys::CUresult::CUDA_SUCCESS
            )
        };
        let buffer = DevicePtrHandle::alloc_async(1 << 16, &StreamHandle::legacy()).unwrap();
        let home = buffer.deallocation_stream().unwrap();
        assert!(
            home.context().as_ref().unwrap().ptr_eq(&context),
            "bound to an owner"
        );
        // SAFETY: clears the current context; the buffer holds its own.
        unsafe {
            assert_eq!(
                sys::cuCtxSetCurrent(std::ptr::null_mut()),
                sys::CUresult::CUDA_SUCCESS
            )
        };
        drop(context);
        handles_cuda::exec::clear_primary_cache();
        buffer.memset_async(1, 1 << 16, &home).unwrap();
        drop(buffer); // freed on the legacy stream of the context it keeps alive
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_driver_version_is_checked_and_elapsed_time_works() {
    let _serial = serial();
    let version = handles_cuda::driver::driver_version().unwrap();
    println!("driver version {version}");
    assert!(version >= handles_cuda::driver::MIN_DRIVER_VERSION);
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let (start, end) = (
        EventHandle::create(&context, EventFlags::timing()).unwrap(),
        EventHandle::create(&context, EventFlags::timing()).unwrap(),
    );
    start.record(&stream).unwrap();
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    assert!(start.elapsed_ms(&end).unwrap() >= 0.0);
}

/// GPU tests that cannot run on the simulator, with the reason; the launcher skips them by
/// name and prints why. Empty: every test of this file runs there.
const NOT_SIMULATED: &[(&str, &str)] = &[];

/// Runs every GPU test of this file on the simulated driver (cuda-sim) in a child
/// process: the one-device tests first, then `two_gpus` with two simulated devices. Runs
/// without a GPU; on a GPU machine it still uses the simulator, never the real driver.
#[test]
#[ignore = "needs a CUDA GPU"]
fn recycled_events_behave_like_fresh_ones() {
    let _serial = serial();
    let failures = Failures::watch();
    handles_cuda::exec::clear_recycled_events();
    let context = ContextHandle::primary(0).unwrap();
    let (a, b) = (stream(&context), stream(&context));
    let kernels = handles_tests::kernels::TestKernels::load().unwrap();
    let config = handles_cuda::LaunchConfig::linear(1, 1);
    let recycler = handles_cuda::exec::EventRecycler::new(&context, EventFlags::default()).unwrap();
    assert!(handles_cuda::exec::EventRecycler::new(&context, EventFlags::timing()).is_err());

    // Released complete and unshared: handed out again, and it looks fresh (complete).
    let first = recycler.acquire().unwrap();
    let raw = first.as_cu();
    first.record(&a).unwrap();
    a.synchronize().unwrap();
    // `b` waits for the completed record, before the release.
    first.wait_on(&b).unwrap();
    drop(first);
    let again = recycler.acquire().unwrap();
    assert_eq!(again.as_cu(), raw, "the released event is reused");
    assert!(
        again.query().unwrap(),
        "a reused event is complete, like a fresh one"
    );
    // Recording it again behind a long kernel does not hold back `b`'s earlier wait.
    kernels.spin.launch(&a, &config, (200_000_000,)).unwrap();
    again.record(&a).unwrap();
    b.synchronize().unwrap();
    let b_done = b.query().unwrap();
    assert!(b_done, "a wait enqueued before the release is unaffected");

    // Released while its record is pending (on a GPU the spin is still running): kept, but
    // never handed out with that record; the acquire makes a new event instead. (The
    // simulated driver has run the spin already: then the event is complete and reused.)
    let pending = !again.query().unwrap();
    let again_raw = again.as_cu();
    drop(again);
    let other = recycler.acquire().unwrap();
    assert!(other.query().unwrap(), "the event handed out looks fresh");
    if pending {
        // The pending event still exists, so a new event cannot have its raw value.
        assert_ne!(
            other.as_cu(),
            again_raw,
            "a pending event is not handed out"
        );
    } else {
        assert_eq!(other.as_cu(), again_raw, "a complete event is reused");
    }
    // Once its record completed, the pending event is handed out again.
    a.synchronize().unwrap();
    if pending {
        let settled = recycler.acquire().unwrap();
        assert_eq!(
            settled.as_cu(),
            again_raw,
            "settled once its record completed"
        );
        assert!(settled.query().unwrap());
    }
    // Shared (a clone or a weak handle escaped): never reused.
    let escaped = other.clone();
    let other_raw = other.as_cu();
    drop(other);
    let third = recycler.acquire().unwrap();
    assert_ne!(third.as_cu(), other_raw);
    drop(escaped);
    a.synchronize().unwrap();
    // Many acquire/release pairs reuse one event.
    drop(third);
    let reused = recycler.acquire().unwrap().as_cu();
    for _ in 0..1000 {
        assert_eq!(recycler.acquire().unwrap().as_cu(), reused);
    }
    // The thread's cache can be emptied (it holds its events' contexts).
    let live = EventHandle::live_count().unwrap();
    let cleared = handles_cuda::exec::clear_recycled_events();
    assert!(cleared >= 1);
    assert_eq!(EventHandle::live_count().unwrap(), live - cleared);
    failures.assert_none();
}

/// Recycled events recorded on one stream are settled together, by stream order: the newest
/// one completing makes the earlier ones reusable with no query of their own. A completion on
/// another stream, or of an event reached through `Deref`, says nothing about the others.
#[test]
#[ignore = "needs a CUDA GPU"]
fn recycled_events_are_settled_in_stream_order_only() {
    let _serial = serial();
    let failures = Failures::watch();
    handles_cuda::exec::clear_recycled_events();
    let context = ContextHandle::primary(0).unwrap();
    let (a, b) = (stream(&context), stream(&context));
    let kernels = handles_tests::kernels::TestKernels::load().unwrap();
    let config = handles_cuda::LaunchConfig::linear(1, 1);
    let recycler = handles_cuda::exec::EventRecycler::new(&context, EventFlags::default()).unwrap();

    // A batch recorded on `a`, released, then `a` drained: every one of them comes back.
    let batch: Vec<_> = (0..8).map(|_| recycler.acquire().unwrap()).collect();
    for event in &batch {
        event.record(&a).unwrap();
    }
    let raws: std::collections::HashSet<_> = batch.iter().map(|event| event.as_cu()).collect();
    drop(batch);
    a.synchronize().unwrap();
    let live = EventHandle::live_count().unwrap();
    let again: Vec<_> = (0..8).map(|_| recycler.acquire().unwrap()).collect();
    assert_eq!(
        EventHandle::live_count().unwrap(),
        live,
        "all eight reused, none created"
    );
    for event in &again {
        assert!(raws.contains(&event.as_cu()));
        assert!(event.query().unwrap(), "each looks fresh");
    }
    drop(again);
    handles_cuda::exec::clear_recycled_events();

    // `slow` is recorded on `a` behind a long kernel, `fast` on `b`, and released after it:
    // `fast` completing must not make `slow` reusable. Likewise `reached`, recorded on `a`
    // through its `EventHandle`.
    let slow = recycler.acquire().unwrap();
    let reached = recycler.acquire().unwrap();
    let fast = recycler.acquire().unwrap();
    kernels.spin.launch(&a, &config, (200_000_000,)).unwrap();
    slow.record(&a).unwrap();
    (*reached).record(&a).unwrap();
    fast.record(&b).unwrap();
    b.synchronize().unwrap();
    let slow_pending = !slow.query().unwrap();
    let (slow_raw, reached_raw) = (slow.as_cu(), reached.as_cu());
    drop(slow);
    drop(reached);
    drop(fast);
    let first = recycler.acquire().unwrap();
    assert!(first.query().unwrap(), "the event handed out looks fresh");
    let second = recycler.acquire().unwrap();
    assert!(second.query().unwrap(), "the event handed out looks fresh");
    if slow_pending {
        // On a GPU the spin still runs: neither `slow` nor `reached` is handed out.
        for event in [&first, &second] {
            assert_ne!(
                event.as_cu(),
                slow_raw,
                "an unfinished record is never reused"
            );
            assert_ne!(
                event.as_cu(),
                reached_raw,
                "an unfinished record is never reused"
            );
        }
    }
    a.synchronize().unwrap();
    drop((first, second));
    handles_cuda::exec::clear_recycled_events();
    failures.assert_none();
}

/// Recycled streams come back only idle, unshared and of the same key; a busy or shared one is
/// destroyed (or left to its other handles).
#[test]
#[ignore = "needs a CUDA GPU"]
fn recycled_streams_behave_like_fresh_ones() {
    use handles_cuda::{StreamFlags, exec::StreamRecycler};
    let _serial = serial();
    let failures = Failures::watch();
    handles_cuda::exec::clear_recycled_streams();
    let context = ContextHandle::primary(0).unwrap();
    let kernels = handles_tests::kernels::TestKernels::load().unwrap();
    let config = handles_cuda::LaunchConfig::linear(1, 1);
    let flags = StreamFlags { non_blocking: true };
    let recycler = StreamRecycler::new(&context, flags, 0).unwrap();

    // Idle and unshared: handed out again, idle; never under another key.
    let first = recycler.acquire().unwrap();
    let raw = first.as_cu();
    kernels.spin.launch(&first, &config, (1_000,)).unwrap();
    first.synchronize().unwrap();
    drop(first);
    let other_priority = StreamRecycler::new(&context, flags, -1)
        .unwrap()
        .acquire()
        .unwrap();
    assert_ne!(
        other_priority.as_cu(),
        raw,
        "another priority is another key"
    );
    let blocking = StreamRecycler::new(&context, StreamFlags::default(), 0)
        .unwrap()
        .acquire()
        .unwrap();
    assert_ne!(blocking.as_cu(), raw, "other flags are another key");
    let again = recycler.acquire().unwrap();
    assert_eq!(again.as_cu(), raw, "the released stream is reused");
    assert!(again.query().unwrap(), "a reused stream is idle");
    drop((other_priority, blocking));

    // Busy when acquired again (on a GPU the spin still runs): kept, and a new stream is made
    // instead; handed out once idle. (On the simulated driver the spin has run already: then
    // it is idle and handed out at once.)
    kernels
        .spin
        .launch(&again, &config, (200_000_000,))
        .unwrap();
    drop(again);
    let while_busy = recycler.acquire().unwrap();
    let busy = while_busy.as_cu() != raw;
    assert!(while_busy.query().unwrap(), "the stream handed out is idle");
    if busy {
        context.synchronize().unwrap();
        let idle = recycler.acquire().unwrap();
        assert_eq!(idle.as_cu(), raw, "handed out once idle");
        assert!(idle.query().unwrap());
    }
    drop(while_busy);
    context.synchronize().unwrap();

    // Recycled streams are not registered: a lookup by raw value never reaches one, and a weak
    // handle an old owner kept makes the recycler let it go, never hand it out.
    let looked_up = recycler.acquire().unwrap();
    let looked_up_raw = looked_up.as_cu();
    assert!(
        StreamHandle::lookup(looked_up_raw).is_none(),
        "not registered"
    );
    let spy = looked_up.downgrade();
    drop(looked_up);
    let fresh = recycler.acquire().unwrap();
    assert!(
        spy.upgrade().is_none_or(|old| old.as_cu() != fresh.as_cu()),
        "an old owner's weak handle never reaches the next owner's stream"
    );
    drop((spy, fresh));

    // Shared: a clone, or a buffer homed on it, keeps it from the cache.
    let shared = recycler.acquire().unwrap();
    let clone = StreamHandle::clone(&shared);
    let shared_raw = shared.as_cu();
    drop(shared);
    let next = recycler.acquire().unwrap();
    assert_ne!(
        next.as_cu(),
        shared_raw,
        "a shared stream is not handed out"
    );
    drop(clone);
    let pool = handles_cuda::MemoryPoolHandle::device_default(0).unwrap();
    let buffer = handles_cuda::DevicePtrHandle::alloc_from_pool(&pool, 256, &next).unwrap();
    let homed_raw = next.as_cu();
    drop(next);
    let after = recycler.acquire().unwrap();
    assert_ne!(
        after.as_cu(),
        homed_raw,
        "a stream a buffer is homed on is not handed out"
    );
    drop(buffer);
    drop(after);

    // Many acquire/release pairs reuse one stream; the cache can be emptied.
    let reused = recycler.acquire().unwrap().as_cu();
    for _ in 0..100 {
        assert_eq!(recycler.acquire().unwrap().as_cu(), reused);
    }
    let live = StreamHandle::live_count().unwrap();
    let cleared = handles_cuda::exec::clear_recycled_streams();
    assert!(cleared >= 1);
    assert_eq!(StreamHandle::live_count().unwrap(), live - cleared);
    failures.assert_none();
}

/// The calling thread's current context, straight from the driver.
fn raw_current() -> sys::CUcontext {
    let mut current = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let status = unsafe { sys::cuCtxGetCurrent(&mut current) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    current
}

/// `bind_to_thread` leaves a context current on its thread and keeps it alive there: with
/// every other handle of the context dropped, the thread still works in it (an event made in
/// the current context resolves to the bound handle), and `unbind_thread` leaves no context
/// current. Runs on a fresh thread, which starts with no context current.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_bound_context_stays_current_and_alive_on_its_thread() {
    let _serial = serial();
    let failures = Failures::watch();
    std::thread::spawn(|| {
        // Loads and initialises the driver; makes nothing current.
        let context = ContextHandle::primary(0).unwrap();
        assert!(
            raw_current().is_null(),
            "a new thread starts with no context current"
        );
        let raw = context.as_cu();
        // Without a binding, work in a context leaves the thread as it was.
        drop(StreamHandle::create(&context, Default::default(), 0).unwrap());
        assert!(raw_current().is_null());
        context.bind_to_thread().unwrap();
        assert_eq!(raw_current(), raw);
        drop(EventHandle::create(&context, EventFlags::default()).unwrap());
        assert_eq!(
            raw_current(),
            raw,
            "work in the bound context leaves it current"
        );
        let strong = context.strong_count();
        handles_cuda::exec::clear_primary_cache();
        drop(context);
        let event = EventHandle::create_in_current(EventFlags::default()).unwrap();
        let kept = event.context().clone().expect("made in a context");
        assert_eq!(kept.as_cu(), raw);
        assert!(strong >= 2, "the binding holds a handle of its own");
        event.synchronize().unwrap();
        drop((kept, event));
        ContextHandle::unbind_thread().unwrap();
        assert!(
            raw_current().is_null(),
            "unbinding leaves no context current"
        );
        ContextHandle::unbind_thread().unwrap();
    })
    .join()
    .unwrap();
    failures.assert_none();
}

/// An event made on a thread with no context current leaves its primary context current
/// (`driver/current.rs`), kept alive by the thread's primary cache with every other handle of
/// it gone, until `clear_primary_cache`, which makes no context current again. A thread that
/// had another context current has it current again afterwards; a green context is never
/// left current, and inside `ContextHandle::run` nothing is left.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_made_with_no_context_current_leaves_its_primary_context_current() {
    let _serial = serial();
    let failures = Failures::watch();
    std::thread::spawn(|| {
        let context = ContextHandle::primary(0).unwrap();
        let raw = context.as_cu();
        assert!(raw_current().is_null(), "a new thread starts with none");
        let event = EventHandle::create(&context, EventFlags::default()).unwrap();
        assert_eq!(
            raw_current(),
            raw,
            "the event's primary context is left current"
        );
        drop((event, context));
        // The thread's primary cache keeps it alive while it is current.
        let event = EventHandle::create_in_current(EventFlags::default()).unwrap();
        let kept = event.context().clone().expect("made in a context");
        assert_eq!(kept.as_cu(), raw);
        drop((kept, event));
        handles_cuda::exec::clear_primary_cache();
        assert!(raw_current().is_null(), "cleared with the cache");
        // With a green context current, the caller's context is restored; a green context's
        // own event leaves nothing current on a thread that had none.
        let context = ContextHandle::primary(0).unwrap();
        let green = handles_cuda::exec::GreenContextHandle::create(0, 16).unwrap();
        let green_context = green.context().unwrap();
        green_context.bind_to_thread().unwrap();
        drop(EventHandle::create(&context, EventFlags::default()).unwrap());
        assert_eq!(raw_current(), green_context.as_cu(), "the caller's context");
        ContextHandle::unbind_thread().unwrap();
        assert!(raw_current().is_null());
        drop(EventHandle::create(&green_context, EventFlags::default()).unwrap());
        assert!(
            raw_current().is_null(),
            "a green context is not left current"
        );
        // Inside `run`, which restores its caller's context (none), nothing is left.
        let inside = green_context.run(|| {
            // SAFETY: makes no context current; `run` restores its own afterwards.
            let status = unsafe { sys::cuCtxSetCurrent(std::ptr::null_mut()) };
            assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
            let event = EventHandle::create(&context, EventFlags::default())?;
            assert!(raw_current().is_null(), "not left current inside run");
            Ok::<_, Error>(event)
        });
        drop(inside.unwrap());
        assert!(raw_current().is_null());
        drop((green_context, green, context));
        handles_cuda::exec::clear_primary_cache();
    })
    .join()
    .unwrap();
    failures.assert_none();
}

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu",
        filters: &[],
        skips: &["two_gpus"],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
    simulator::SuiteRun {
        label: "gpu, 2 devices",
        filters: &["two_gpus"],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 2,
        env: &[],
    }
    .run();
}
