//! The simulator's memory keeps every live byte: pool blocks of random sizes, written and
//! read back around the trims that synchronisation makes at the default release threshold,
//! from many threads sharing a few streams; and free space coalesces, so random sizes do not
//! exhaust the device while little is live.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys;

mod common;
use common::*;

/// A small xorshift generator: the scenarios are deterministic per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One live block of the scenario: its address, size and the byte it was filled with.
struct Block {
    ptr: sys::CUdeviceptr,
    size: usize,
    byte: u8,
}

/// Reads `block` back on `stream` and checks every byte.
fn check(block: &Block, stream: sys::CUstream, host: &mut Vec<u8>) {
    host.clear();
    host.resize(block.size, 0);
    // SAFETY: a live allocation of `block.size` bytes; `host` has that many bytes and outlives
    // the synchronised copy.
    unsafe {
        ok(sys::cuMemcpyDtoHAsync_v2(
            host.as_mut_ptr().cast(),
            block.ptr,
            block.size,
            stream,
        ));
        ok(sys::cuStreamSynchronize(stream));
    }
    if let Some(at) = host.iter().position(|&b| b != block.byte) {
        panic!(
            "block {:#x} ({} bytes, filled with {:#04x}) reads {:#04x} at byte {at}",
            block.ptr, block.size, block.byte, host[at]
        );
    }
}

const THREADS: usize = 16;
const STREAMS: usize = 4;
const OPERATIONS: u64 = 100_000;

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_random_pool_sizes_read_back() {
    child();
    let context = setup() as usize;
    let streams: Vec<usize> = (0..STREAMS).map(|_| new_stream() as usize).collect();
    let operations = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (streams, operations) = (&streams, &operations);
            scope.spawn(move || {
                // SAFETY: the primary context retained by `setup` stays alive until the
                // scope ends.
                unsafe { ok(sys::cuCtxSetCurrent(context as sys::CUcontext)) };
                let stream = streams[thread % STREAMS] as sys::CUstream;
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((thread as u64 + 1) * 0x1234_5678));
                let mut live: Vec<Block> = Vec::new();
                let mut host = Vec::new();
                while operations.fetch_add(1, Ordering::Relaxed) < OPERATIONS {
                    match rng.below(8) {
                        // Allocate and fill a block of a random size (1 B to 64 KiB, mostly
                        // small, so that blocks share pages).
                        0..=2 if live.len() < 24 => {
                            let size = if rng.below(4) == 0 {
                                1 + rng.below(65536) as usize
                            } else {
                                1 + rng.below(3000) as usize
                            };
                            let byte = rng.next() as u8;
                            let mut ptr = 0;
                            // SAFETY: valid out-pointer; live stream; the memset covers the
                            // new allocation exactly.
                            unsafe {
                                ok(sys::cuMemAllocAsync(&mut ptr, size, stream));
                                ok(sys::cuMemsetD8Async(ptr, byte, size, stream));
                            }
                            live.push(Block { ptr, size, byte });
                        }
                        // Synchronise: the default release threshold (0) trims the pool.
                        3 => {
                            // SAFETY: a live stream.
                            unsafe { ok(sys::cuStreamSynchronize(stream)) };
                        }
                        // Read a random live block back.
                        4 | 5 if !live.is_empty() => {
                            let index = rng.below(live.len() as u64) as usize;
                            check(&live[index], stream, &mut host);
                        }
                        // Check and free a random block.
                        _ if !live.is_empty() => {
                            let index = rng.below(live.len() as u64) as usize;
                            let block = live.swap_remove(index);
                            check(&block, stream, &mut host);
                            // SAFETY: every use of the block was on `stream`, before this.
                            unsafe { ok(sys::cuMemFreeAsync(block.ptr, stream)) };
                        }
                        _ => {}
                    }
                }
                for block in live {
                    check(&block, stream, &mut host);
                    // SAFETY: as above.
                    unsafe { ok(sys::cuMemFreeAsync(block.ptr, stream)) };
                }
                // SAFETY: a live stream.
                unsafe { ok(sys::cuStreamSynchronize(stream)) };
            });
        }
    });
    for stream in streams {
        destroy_stream(stream as sys::CUstream);
    }
    teardown();
}

#[test]
fn random_pool_sizes_read_back_at_the_default_threshold() {
    let report = report_of("scenario_random_pool_sizes_read_back");
    assert_clean(&report);
    assert!(report.calls["cuMemAllocAsync"] > 10_000);
    assert!(report.calls["cuStreamSynchronize"] > 10_000);
}

/// Synchronous allocations (`cuMemAlloc`, trimmed at every free) next to each other keep
/// their bytes when a neighbour is freed.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_sync_neighbours_keep_their_bytes() {
    child();
    setup();
    let mut rng = Rng(7);
    let mut live: Vec<Block> = Vec::new();
    let mut host = Vec::new();
    for _ in 0..4000 {
        if live.len() < 32 && rng.below(2) == 0 {
            let size = 1 + rng.below(5000) as usize;
            let byte = rng.next() as u8;
            let mut ptr = 0;
            // SAFETY: valid out-pointer; the memset covers the allocation.
            unsafe {
                ok(sys::cuMemAlloc_v2(&mut ptr, size));
                ok(sys::cuMemsetD8_v2(ptr, byte, size));
            }
            live.push(Block { ptr, size, byte });
        } else if !live.is_empty() {
            let block = live.swap_remove(rng.below(live.len() as u64) as usize);
            check(&block, std::ptr::null_mut(), &mut host);
            // SAFETY: a live allocation whose uses were synchronised by `check`.
            unsafe { ok(sys::cuMemFree_v2(block.ptr)) };
        }
    }
    for block in live {
        check(&block, std::ptr::null_mut(), &mut host);
        // SAFETY: as above.
        unsafe { ok(sys::cuMemFree_v2(block.ptr)) };
    }
    teardown();
}

#[test]
fn sync_neighbours_keep_their_bytes() {
    let report = report_of("scenario_sync_neighbours_keep_their_bytes");
    assert_clean(&report);
}

/// Free space coalesces: with 64 MiB of device memory, many rounds of random sizes (each
/// round frees everything) never run out, and a block of nearly the whole memory fits
/// afterwards.
#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_free_space_coalesces() {
    child();
    setup();
    let stream = new_stream();
    let mut rng = Rng(99);
    for _ in 0..200 {
        let mut round = Vec::new();
        let mut total = 0usize;
        while total < 40 << 20 {
            let size = 512 + rng.below(1 << 20) as usize;
            let mut ptr = 0;
            // SAFETY: valid out-pointer; live stream.
            unsafe { ok(sys::cuMemAllocAsync(&mut ptr, size, stream)) };
            round.push(ptr);
            total += size;
        }
        // Free in a random order, so that extents meet from both sides.
        while !round.is_empty() {
            let ptr = round.swap_remove(rng.below(round.len() as u64) as usize);
            // SAFETY: unused allocations of this stream.
            unsafe { ok(sys::cuMemFreeAsync(ptr, stream)) };
        }
        // SAFETY: a live stream.
        unsafe { ok(sys::cuStreamSynchronize(stream)) };
    }
    let mut ptr = 0;
    // SAFETY: valid out-pointer; live stream.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut ptr, 60 << 20, stream));
        ok(sys::cuMemFreeAsync(ptr, stream));
        ok(sys::cuStreamSynchronize(stream));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn free_space_coalesces() {
    let report = report_with("scenario_free_space_coalesces", |command| {
        cuda_sim::SimCommand::sim_memory(command, 64 << 20);
    });
    assert_clean(&report);
}
