//! Batched copies (`StreamHandle::copy_batch`): many device-to-device copies queued by one
//! call, through `cuMemcpyBatchAsync` where the driver has it and a loop of `cuMemcpyAsync`
//! otherwise. They need a CUDA GPU and are ignored by default; `on_the_simulator` runs them all
//! on the simulated driver twice: as driver 13.0 (the batch function) and as driver 12.7, which
//! lacks it (the loop). On a GPU the loop is exercised on the legacy default stream, which the
//! batch function refuses. None of them returns early.

use cudarc::driver::CudaContext;
use handles_cuda::driver::sys;
use handles_cuda::memory::BatchCopy;
use handles_cuda::{ContextHandle, DeviceBuffer, DevicePtrHandle, Error, MemoryPoolHandle};
use handles_cuda::{PoolProps, StreamHandle};
use handles_tests::{Failures, serial, stream};

mod simulator;

/// Which path a batch on `stream` takes on this driver, for the test's output.
fn path(stream: &StreamHandle) -> &'static str {
    let version = handles_cuda::driver::driver_version().unwrap();
    let legacy = stream.as_cu().is_null() || stream.as_cu() == handles_cuda::exec::LEGACY_STREAM;
    if legacy || version < 13000 {
        "a loop of cuMemcpyAsync"
    } else {
        "cuMemcpyBatchAsync_v2"
    }
}

/// A small deterministic generator (xorshift64*), so that a failure can be replayed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn bytes_of(buffer: &DevicePtrHandle, stream: &StreamHandle) -> Vec<u8> {
    let mut bytes = vec![0; buffer.size()];
    buffer.copy_to_host(&mut bytes, stream).unwrap();
    bytes
}

/// A piece of a round trip: offset in `a`, length, whether it goes to `c` (else `b`), offset there.
type Piece = (usize, usize, bool, usize);

/// The segments of a round trip: `count` pieces of random sizes (1 to 4096 bytes) cut from
/// `a`, each placed somewhere in `b` or `c` (packed in a shuffled order). Returns the pieces
/// as `(offset in a, length, into c?, offset there)` and the sizes `b` and `c` need.
fn segments(random: &mut Random, count: usize) -> (Vec<Piece>, usize, usize) {
    let lengths: Vec<usize> = (0..count).map(|_| 1 + random.below(4096)).collect();
    let mut order: Vec<usize> = (0..count).collect();
    for i in (1..count).rev() {
        order.swap(i, random.below(i + 1));
    }
    let mut starts = vec![0; count];
    let mut offset = 0;
    for (i, length) in lengths.iter().enumerate() {
        starts[i] = offset;
        offset += length;
    }
    let mut placed = vec![(false, 0); count];
    let (mut b_end, mut c_end) = (0, 0);
    for &i in &order {
        let into_c = random.below(2) == 1;
        let end = if into_c { &mut c_end } else { &mut b_end };
        placed[i] = (into_c, *end);
        *end += lengths[i];
    }
    let pieces = (0..count)
        .map(|i| (starts[i], lengths[i], placed[i].0, placed[i].1))
        .collect();
    (pieces, b_end.max(1), c_end.max(1))
}

/// Scatters random bytes of `a` into `b` and `c` with one batch of 64 copies, clears `a`,
/// gathers them back with a second batch, and checks all three buffers byte for byte against
/// the host's model. Returns the three buffers' final contents.
fn round_trip(stream: &StreamHandle, seed: u64) -> [Vec<u8>; 3] {
    let mut random = Random(seed);
    let (pieces, b_size, c_size) = segments(&mut random, 64);
    let a_size: usize = pieces.iter().map(|piece| piece.1).sum();
    let original: Vec<u8> = (0..a_size).map(|_| random.next() as u8).collect();
    let a = DevicePtrHandle::alloc_async(a_size, stream).unwrap();
    let b = DevicePtrHandle::alloc_async(b_size, stream).unwrap();
    let c = DevicePtrHandle::alloc_async(c_size, stream).unwrap();
    a.copy_from_host(&original, stream).unwrap();
    b.memset_async(0, b_size, stream).unwrap();
    c.memset_async(0, c_size, stream).unwrap();
    let side = |into_c: bool| if into_c { &c } else { &b };
    let scatter: Vec<BatchCopy> = pieces
        .iter()
        .map(|&(from, len, into_c, to)| BatchCopy::bytes(&a, from, side(into_c), to, len))
        .collect();
    stream.copy_batch(&scatter).unwrap();
    a.memset_async(0, a_size, stream).unwrap();
    let gather: Vec<BatchCopy> = pieces
        .iter()
        .map(|&(to, len, from_c, from)| BatchCopy::bytes(side(from_c), from, &a, to, len))
        .collect();
    stream.copy_batch(&gather).unwrap();
    let (mut b_model, mut c_model) = (vec![0u8; b_size], vec![0u8; c_size]);
    for &(from, len, into_c, to) in &pieces {
        let model = if into_c { &mut c_model } else { &mut b_model };
        model[to..to + len].copy_from_slice(&original[from..from + len]);
    }
    let contents = [
        bytes_of(&a, stream),
        bytes_of(&b, stream),
        bytes_of(&c, stream),
    ];
    assert!(contents[0] == original, "a came back changed");
    assert!(contents[1] == b_model, "b differs from the model");
    assert!(contents[2] == c_model, "c differs from the model");
    contents
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sixty_four_copies_of_random_sizes_round_trip_exactly() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    for seed in [1, 0x5eed, 0xdead_beef] {
        round_trip(&stream, seed);
    }
    println!(
        "3 round trips of 64 copies each way through {}",
        path(&stream)
    );
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_loop_on_the_legacy_stream_gives_the_same_bytes_as_the_batch() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let batched = stream(&context);
    let legacy = StreamHandle::legacy_in(&context).unwrap();
    for seed in [7, 0xc0ffee] {
        assert_eq!(round_trip(&batched, seed), round_trip(&legacy, seed));
    }
    println!(
        "{} and {} agree byte for byte",
        path(&batched),
        path(&legacy)
    );
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_batch_longer_than_one_call_is_split_and_keeps_every_copy() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    // 2 × 1024 + 7 copies: three calls of the batch function.
    let n = 2 * 1024 + 7;
    let words: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let src = DeviceBuffer::from_slice(&words, &stream).unwrap();
    let dst = DeviceBuffer::<u32>::zeroed(n, &stream).unwrap();
    let copies: Vec<BatchCopy> = (0..n)
        .map(|i| BatchCopy::elements(&src, i, &dst, n - 1 - i, 1).unwrap())
        .collect();
    stream.copy_batch(&copies).unwrap();
    let reversed: Vec<u32> = words.iter().rev().copied().collect();
    assert_eq!(dst.to_vec(&stream).unwrap(), reversed);
    println!("{n} one-element copies through {}", path(&stream));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn typed_buffers_copy_in_elements() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let xs: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
    let src = DeviceBuffer::from_slice(&xs, &stream).unwrap();
    let whole = DeviceBuffer::<f32>::zeroed(1000, &stream).unwrap();
    let halves = DeviceBuffer::<f32>::zeroed(1000, &stream).unwrap();
    let tail = src.slice(900..1000).unwrap();
    let into_tail = DeviceBuffer::<f32>::zeroed(100, &stream).unwrap();
    stream
        .copy_batch(&[
            BatchCopy::all(&src, &whole).unwrap(),
            BatchCopy::elements(&src, 0, &halves, 500, 500).unwrap(),
            BatchCopy::elements(&src, 500, &halves, 0, 500).unwrap(),
            BatchCopy::all(&tail, &into_tail).unwrap(),
        ])
        .unwrap();
    assert_eq!(whole.to_vec(&stream).unwrap(), xs);
    let swapped: Vec<f32> = xs[500..].iter().chain(&xs[..500]).copied().collect();
    assert_eq!(halves.to_vec(&stream).unwrap(), swapped);
    assert_eq!(into_tail.to_vec(&stream).unwrap(), xs[900..]);
    assert_eq!(
        BatchCopy::elements(&src, 990, &whole, 0, 11).unwrap_err(),
        Error::ElementsOutOfRange {
            start: 990,
            count: 11,
            len: 1000
        }
    );
    assert_eq!(
        BatchCopy::all(&src, &into_tail).unwrap_err(),
        Error::LengthMismatch {
            src: 1000,
            dst: 100
        }
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_ranges_overlaps_and_conflicts_are_refused_before_anything_is_queued() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let src = DevicePtrHandle::alloc_async(4096, &stream).unwrap();
    let dst = DevicePtrHandle::alloc_async(4096, &stream).unwrap();
    let spare = DevicePtrHandle::alloc_async(4096, &stream).unwrap();
    src.copy_from_host(&[0xab; 4096], &stream).unwrap();
    dst.memset_async(0, 4096, &stream).unwrap();
    // Valid copies first; the bad one last: nothing of the batch may be queued.
    let valid: Vec<BatchCopy> = (0..8)
        .map(|i| BatchCopy::bytes(&src, i * 256, &dst, i * 256, 256))
        .collect();
    let refused = |bad: BatchCopy| {
        let mut batch = valid.clone();
        batch.push(bad);
        let error = stream.copy_batch(&batch).unwrap_err();
        assert_eq!(bytes_of(&dst, &stream), vec![0; 4096], "nothing copied");
        error
    };
    assert_eq!(
        refused(BatchCopy::bytes(&src, 4000, &dst, 3000, 100)),
        Error::InBatch {
            index: 8,
            cause: Box::new(Error::OutOfRange {
                offset: 4000,
                len: 100,
                size: 4096
            })
        }
    );
    assert_eq!(
        refused(BatchCopy::bytes(&src, 0, &dst, 4090, 7)),
        Error::InBatch {
            index: 8,
            cause: Box::new(Error::OutOfRange {
                offset: 4090,
                len: 7,
                size: 4096
            })
        }
    );
    // A copy within one buffer whose ranges overlap, also through two views of it.
    assert_eq!(
        refused(BatchCopy::bytes(&dst, 3000, &dst, 3100, 200)),
        Error::InBatch {
            index: 8,
            cause: Box::new(Error::Overlap { len: 200 })
        }
    );
    let (front, back) = (dst.view(2048, 1024).unwrap(), dst.view(2560, 1024).unwrap());
    assert_eq!(
        refused(BatchCopy::bytes(&front, 0, &back, 0, 600)),
        Error::InBatch {
            index: 8,
            cause: Box::new(Error::Overlap { len: 600 })
        }
    );
    // Copies that depend on each other: two writing the same bytes, one reading what another
    // writes.
    assert_eq!(
        refused(BatchCopy::bytes(&src, 0, &dst, 300, 10)),
        Error::BatchConflict {
            first: 1,
            second: 8
        }
    );
    assert_eq!(
        refused(BatchCopy::bytes(&dst, 1000, &spare, 0, 10)),
        Error::BatchConflict {
            first: 3,
            second: 8
        }
    );
    assert_eq!(
        refused(BatchCopy::bytes(&spare, 0, &src, 10, 10)),
        Error::BatchConflict {
            first: 0,
            second: 8
        }
    );
    // Reading the same bytes twice is fine, and an empty copy is checked but moves nothing.
    stream
        .copy_batch(&[
            BatchCopy::bytes(&src, 0, &dst, 0, 100),
            BatchCopy::bytes(&src, 0, &dst, 100, 100),
            BatchCopy::bytes(&src, 4096, &dst, 4096, 0),
        ])
        .unwrap();
    let mut expected = vec![0; 4096];
    expected[..200].fill(0xab);
    assert_eq!(bytes_of(&dst, &stream), expected);
    assert!(matches!(
        stream.copy_batch(&[BatchCopy::bytes(&src, 4097, &dst, 0, 0)]),
        Err(Error::InBatch { index: 0, .. })
    ));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn frees_after_a_batch_on_another_stream_are_ordered() {
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let home = stream(&context);
    let other = stream(&context);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0)).unwrap();
    for round in 0..4 {
        let buffers: Vec<DevicePtrHandle> = (0..3)
            .map(|_| DevicePtrHandle::alloc_from_pool(&pool, 1 << 20, &home).unwrap())
            .collect();
        for buffer in &buffers {
            buffer.memset_async(round, 1 << 20, &home).unwrap();
        }
        // `other` must see the memsets before it copies.
        let ready = handles_cuda::EventHandle::create(&context, Default::default()).unwrap();
        ready.record(&home).unwrap();
        other.wait_event(&ready).unwrap();
        let pinned = DevicePtrHandle::alloc_host(&context, 1 << 16).unwrap();
        let view = buffers[2].view(1 << 19, 1 << 16).unwrap();
        let copies: Vec<BatchCopy> = (0..64)
            .map(|i| match i % 4 {
                0 => BatchCopy::bytes(&buffers[0], i * 4096, &buffers[1], i * 4096, 4096),
                1 => BatchCopy::bytes(&buffers[1], (i + 128) * 4096, &buffers[2], i * 4096, 4096),
                2 => BatchCopy::bytes(&view, i * 1024, &pinned, i * 1024, 1024),
                _ => BatchCopy::bytes(&buffers[0], (i + 64) * 4096, &view, 0, 16),
            })
            .collect();
        // Copies 3, 7, ... all write the first 16 bytes of the view: refused as conflicting.
        assert!(matches!(
            other.copy_batch(&copies),
            Err(Error::BatchConflict {
                first: 3,
                second: 7
            })
        ));
        let copies: Vec<BatchCopy> = copies
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 4 != 3 || *i == 3)
            .map(|(_, copy)| copy)
            .collect();
        other.copy_batch(&copies).unwrap();
        // Everything dropped at once: each free must wait for `other`.
        drop(copies);
        drop((buffers, view, pinned));
    }
    home.synchronize().unwrap();
    other.synchronize().unwrap();
    failures.assert_none();
    println!("4 batches on a second stream, every handle dropped at once after each");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_host_memory_takes_part_in_a_batch() {
    let _serial = serial();
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    let pinned_in = DevicePtrHandle::alloc_host(&context, 8192).unwrap();
    let pinned_out = DevicePtrHandle::alloc_host(&context, 8192).unwrap();
    let device = DevicePtrHandle::alloc_async(8192, &stream).unwrap();
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    pinned_in.copy_from_host(&pattern, &stream).unwrap();
    stream
        .copy_batch(&[
            BatchCopy::bytes(&pinned_in, 0, &device, 4096, 4096),
            BatchCopy::bytes(&pinned_in, 4096, &device, 0, 4096),
        ])
        .unwrap();
    stream
        .copy_batch(&[
            BatchCopy::bytes(&device, 0, &pinned_out, 4096, 4096),
            BatchCopy::bytes(&device, 4096, &pinned_out, 0, 4096),
        ])
        .unwrap();
    assert_eq!(bytes_of(&pinned_out, &stream), pattern);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_empty_batch_calls_nothing_and_a_captured_stream_is_refused() {
    let _serial = serial();
    // An empty batch is Ok even on a default-stream token with no context current, where
    // any driver call would need one.
    StreamHandle::legacy().copy_batch(&[]).unwrap();
    let cudarc_context = CudaContext::new(0).unwrap();
    let cudarc_stream = cudarc_context.new_stream().unwrap();
    // SAFETY: the capture below is begun and ended on this thread, and nothing else queues
    // work on the stream meanwhile.
    let stream = unsafe { StreamHandle::from_cudarc(&cudarc_stream) };
    let a = DevicePtrHandle::alloc_async(256, &stream).unwrap();
    let b = DevicePtrHandle::alloc_async(256, &stream).unwrap();
    a.memset_async(7, 256, &stream).unwrap();
    stream.synchronize().unwrap();
    cudarc_stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    assert_eq!(
        stream.copy_batch(&[BatchCopy::bytes(&a, 0, &b, 0, 256)]),
        Err(Error::Capturing)
    );
    stream.copy_batch(&[]).unwrap();
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream is alive and capturing; `graph` is a valid out-pointer.
    let ended = unsafe { sys::cuStreamEndCapture(stream.as_cu(), &mut graph) };
    assert_eq!(ended, sys::CUresult::CUDA_SUCCESS);
    if !graph.is_null() {
        // SAFETY: the graph the capture made, destroyed once.
        let destroyed = unsafe { sys::cuGraphDestroy(graph) };
        assert_eq!(destroyed, sys::CUresult::CUDA_SUCCESS);
    }
    stream
        .copy_batch(&[BatchCopy::bytes(&a, 0, &b, 0, 256)])
        .unwrap();
    stream.synchronize().unwrap();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_batch",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
    simulator::SuiteRun {
        label: "gpu_batch, driver 12.7: the loop",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[("CUDA_SIM_DRIVER_VERSION", "12070")],
    }
    .run();
}
