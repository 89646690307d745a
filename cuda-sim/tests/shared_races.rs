//! Racecheck (`shared-race`): hazards on shared memory between the threads of one block, with
//! planted bugs and their fixed twins. Each scenario is a raw driver sequence in a child
//! process under the simulator (all checks on, not strict), and the parent test reads its
//! report: the bug must be reported with its kind, hazard and block, the twin with nothing.
//! The launches succeed either way (as on a GPU, where the hazard gives a wrong result at
//! most), so a bug's own output is not checked, and a twin's is.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUresult};

#[macro_use]
mod common;
use common::*;

/// Hand-written kernels, one per planted bug; each takes the fix as its last parameter.
const PTX: &str = "
.version 7.0
.target sm_52
.address_size 64

.extern .shared .align 4 .b8 dyn[];

// Sums in[64 b .. 64 b + 64] into the last element of a shared array, the stride halving
// each step, and stores it to out[b]; `sync` = 0 leaves out the bar.sync between steps.
.visible .entry reduce_last(.param .u64 out, .param .u64 in, .param .u32 sync)
{
    .shared .align 4 .b32 s[64];
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [sync];
    setp.ne.u32 %p2, %r2, 0;
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %ctaid.x;
    shl.b32 %r4, %r3, 6;
    add.u32 %r5, %r4, %r1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    mov.u32 %r7, s;
    shl.b32 %r8, %r1, 2;
    add.u32 %r9, %r7, %r8;
    st.shared.u32 [%r9], %r6;
    bar.sync 0;
    mov.u32 %r10, 32;
    mov.u32 %r12, 64;
LOOP:
    sub.u32 %r11, %r12, %r10;
    setp.lt.u32 %p1, %r1, %r11;
    @%p1 bra NEXT;
    shl.b32 %r13, %r10, 2;
    sub.u32 %r14, %r9, %r13;
    ld.shared.u32 %r15, [%r14];
    ld.shared.u32 %r6, [%r9];
    add.u32 %r6, %r6, %r15;
    st.shared.u32 [%r9], %r6;
NEXT:
    @%p2 bar.sync 0;
    shr.u32 %r10, %r10, 1;
    setp.ne.u32 %p3, %r10, 0;
    @%p3 bra LOOP;
    bar.sync 0;
    setp.ne.u32 %p1, %r1, 63;
    @%p1 bra DONE;
    ld.shared.u32 %r6, [%r9];
    mul.wide.u32 %rd5, %r3, 4;
    add.s64 %rd6, %rd1, %rd5;
    st.global.u32 [%rd6], %r6;
DONE:
    ret;
}

// Through generic addresses of dynamic shared memory: dyn[t] = in[g]; then each thread reads
// dyn[(t + 1) % 64] and overwrites dyn[t] with twice it; out[g] = dyn[t]. `sync` = 0 leaves
// out the bar.sync between the read and the overwrite.
.visible .entry shift_left(.param .u64 out, .param .u64 in, .param .u32 sync)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [sync];
    setp.ne.u32 %p2, %r2, 0;
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %ctaid.x;
    shl.b32 %r4, %r3, 6;
    add.u32 %r5, %r4, %r1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    mov.u64 %rd9, dyn;
    cvta.shared.u64 %rd5, %rd9;
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd5, %rd6;
    st.u32 [%rd7], %r6;
    bar.sync 0;
    add.u32 %r7, %r1, 1;
    and.b32 %r7, %r7, 63;
    mul.wide.u32 %rd8, %r7, 4;
    add.s64 %rd8, %rd5, %rd8;
    ld.u32 %r8, [%rd8];
    @%p2 bar.sync 0;
    shl.b32 %r8, %r8, 1;
    st.u32 [%rd7], %r8;
    bar.sync 0;
    ld.u32 %r9, [%rd7];
    add.s64 %rd10, %rd1, %rd3;
    st.global.u32 [%rd10], %r9;
    ret;
}

// The first `writers` threads store in[g] into one shared word; after bar.sync every thread
// stores the word to out[g].
.visible .entry one_slot(.param .u64 out, .param .u64 in, .param .u32 writers)
{
    .shared .align 4 .b32 word;
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [writers];
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %ctaid.x;
    shl.b32 %r4, %r3, 6;
    add.u32 %r5, %r4, %r1;
    mul.wide.u32 %rd3, %r5, 4;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra WAIT;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    st.shared.u32 [word], %r6;
WAIT:
    bar.sync 0;
    ld.shared.u32 %r7, [word];
    add.s64 %rd5, %rd1, %rd3;
    st.global.u32 [%rd5], %r7;
    ret;
}

// One warp sums in[0..32] in shared memory, halving the stride; `sync` = 0 leaves out the
// bar.warp.sync after the stores and after each step (legacy warp-synchronous code). Lane 0
// stores the sum to out[0].
.visible .entry warp_reduce(.param .u64 out, .param .u64 in, .param .u32 sync)
{
    .shared .align 4 .b32 w[32];
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [sync];
    setp.ne.u32 %p2, %r2, 0;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    mov.u32 %r7, w;
    shl.b32 %r8, %r1, 2;
    add.u32 %r9, %r7, %r8;
    st.shared.u32 [%r9], %r6;
    @%p2 bar.warp.sync -1;
    mov.u32 %r10, 16;
LOOP:
    setp.ge.u32 %p1, %r1, %r10;
    @%p1 bra NEXT;
    shl.b32 %r13, %r10, 2;
    add.u32 %r14, %r9, %r13;
    ld.shared.u32 %r15, [%r14];
    ld.shared.u32 %r6, [%r9];
    add.u32 %r6, %r6, %r15;
    st.shared.u32 [%r9], %r6;
NEXT:
    @%p2 bar.warp.sync -1;
    shr.u32 %r10, %r10, 1;
    setp.ne.u32 %p3, %r10, 0;
    @%p3 bra LOOP;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    ld.shared.u32 %r6, [%r9];
    st.global.u32 [%rd1], %r6;
DONE:
    ret;
}

// s[t] = in[g]; every block but block `skip` waits at bar.sync; out[g] = s[(t + 1) % 64].
.visible .entry neighbour(.param .u64 out, .param .u64 in, .param .u32 skip)
{
    .shared .align 4 .b32 s[64];
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [skip];
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %ctaid.x;
    shl.b32 %r4, %r3, 6;
    add.u32 %r5, %r4, %r1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    mov.u32 %r7, s;
    shl.b32 %r8, %r1, 2;
    add.u32 %r9, %r7, %r8;
    st.shared.u32 [%r9], %r6;
    setp.eq.u32 %p1, %r3, %r2;
    @%p1 bra READ;
    bar.sync 0;
READ:
    add.u32 %r10, %r1, 1;
    and.b32 %r10, %r10, 63;
    shl.b32 %r10, %r10, 2;
    add.u32 %r10, %r7, %r10;
    ld.shared.u32 %r11, [%r10];
    add.s64 %rd5, %rd1, %rd3;
    st.global.u32 [%rd5], %r11;
    ret;
}

// Thread 0 resets a shared counter; every thread adds 1 to it atomically; after bar.sync
// thread 0 stores it to out[b]. `sync` = 0 leaves out the bar.sync after the reset.
.visible .entry count(.param .u64 out, .param .u64 unused, .param .u32 sync)
{
    .shared .align 4 .b32 counter;
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r2, [sync];
    setp.ne.u32 %p2, %r2, 0;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra ADD;
    mov.u32 %r3, 0;
    st.shared.u32 [counter], %r3;
ADD:
    @%p2 bar.sync 0;
    atom.shared.add.u32 %r4, [counter], 1;
    bar.sync 0;
    @%p1 bra DONE;
    ld.shared.u32 %r5, [counter];
    mov.u32 %r6, %ctaid.x;
    mul.wide.u32 %rd2, %r6, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
DONE:
    ret;
}

// Thread 0 resets a shared sum; after bar.sync every thread adds in[g] to it, with
// atom.shared.add when `atomic` is set, else with a plain load, add and store; after bar.sync
// thread 0 stores it to out[b].
.visible .entry accumulate(.param .u64 out, .param .u64 in, .param .u32 atomic)
{
    .shared .align 4 .b32 sum;
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [atomic];
    setp.ne.u32 %p2, %r2, 0;
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %ctaid.x;
    shl.b32 %r4, %r3, 6;
    add.u32 %r5, %r4, %r1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra WAIT;
    mov.u32 %r7, 0;
    st.shared.u32 [sum], %r7;
WAIT:
    bar.sync 0;
    @%p2 bra ATOMIC;
    ld.shared.u32 %r8, [sum];
    add.u32 %r8, %r8, %r6;
    st.shared.u32 [sum], %r8;
    bra ADDED;
ATOMIC:
    atom.shared.add.u32 %r8, [sum], %r6;
ADDED:
    bar.sync 0;
    @%p1 bra DONE;
    ld.shared.u32 %r9, [sum];
    mul.wide.u32 %rd5, %r3, 4;
    add.s64 %rd5, %rd1, %rd5;
    st.global.u32 [%rd5], %r9;
DONE:
    ret;
}

// A tile loader that clamps its row: thread t stores to word min(t / 8, 3) of a shared array,
// so several threads store to each word. `same` = 1 stores in[64 b + that row] (all writers
// of a word store one value, as llama.cpp's quantized matmul tiles do); 0 stores
// in[64 b + t] (each writer its own). Each thread then reads its word back into out.
.visible .entry clamped_rows(.param .u64 out, .param .u64 in, .param .u32 same)
{
    .shared .align 4 .b32 rows[4];
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [same];
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %ctaid.x;
    shl.b32 %r4, %r3, 6;
    shr.u32 %r5, %r1, 3;
    min.u32 %r5, %r5, 3;
    setp.ne.u32 %p1, %r2, 0;
    selp.b32 %r6, %r5, %r1, %p1;
    add.u32 %r7, %r4, %r6;
    mul.wide.u32 %rd3, %r7, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r8, [%rd4];
    shl.b32 %r9, %r5, 2;
    mov.u32 %r10, rows;
    add.u32 %r10, %r10, %r9;
    st.shared.u32 [%r10], %r8;
    bar.sync 0;
    ld.shared.u32 %r11, [%r10];
    add.u32 %r7, %r4, %r1;
    mul.wide.u32 %rd5, %r7, 4;
    add.s64 %rd6, %rd1, %rd5;
    st.global.u32 [%rd6], %r11;
    ret;
}
\0";

/// Threads per block (two warps) unless a kernel says otherwise.
const THREADS: u32 = 64;

fn alloc(bytes: usize) -> sys::CUdeviceptr {
    let mut ptr = 0;
    // SAFETY: a context is current; valid out-pointer.
    unsafe { ok(sys::cuMemAlloc_v2(&mut ptr, bytes)) };
    ptr
}

fn free(ptr: sys::CUdeviceptr) {
    // SAFETY: our own allocation, freed once.
    unsafe { ok(sys::cuMemFree_v2(ptr)) };
}

/// `in[i] = i` for `elements` u32s, and an output buffer of `elements` u32s.
fn buffers(elements: u32) -> (sys::CUdeviceptr, sys::CUdeviceptr) {
    let data: Vec<u32> = (0..elements).collect();
    let (input, output) = (alloc(4 * data.len()), alloc(4 * data.len()));
    // SAFETY: `data` has `elements` u32s; the copies are synchronous.
    unsafe {
        ok(sys::cuMemcpyHtoD_v2(
            input,
            data.as_ptr().cast(),
            4 * data.len(),
        ));
        ok(sys::cuMemsetD32_v2(output, 0, data.len()));
    }
    (input, output)
}

/// The first `elements` u32s at `ptr`.
fn download(ptr: sys::CUdeviceptr, elements: u32) -> Vec<u32> {
    let mut host = vec![0u32; elements as usize];
    // SAFETY: `host` has `elements` u32s; the copy is synchronous.
    unsafe {
        ok(sys::cuMemcpyDtoH_v2(
            host.as_mut_ptr().cast(),
            ptr,
            4 * host.len(),
        ))
    };
    host
}

/// Launches `name` of [`PTX`] with `(out, in, x)` as `blocks` × `threads` with `shared` bytes
/// of dynamic shared memory, waits for it, and returns `blocks * threads` elements of `out`
/// (from `in[i] = i`).
fn run_kernel(name: &std::ffi::CStr, blocks: u32, threads: u32, shared: u32, x: u32) -> Vec<u32> {
    setup();
    let library = load_ptx(PTX).expect("load the kernels");
    let function: sys::CUfunction = kernel(library, name).cast();
    let elements = blocks * threads;
    let (mut input, mut output) = buffers(elements);
    let mut x = x;
    let mut params = [
        (&mut output as *mut u64).cast::<c_void>(),
        (&mut input as *mut u64).cast(),
        (&mut x as *mut u32).cast(),
    ];
    // SAFETY: one argument per kernel parameter, of the right sizes; the legacy stream.
    let status = unsafe {
        sys::cuLaunchKernel(
            function,
            blocks,
            1,
            1,
            threads,
            1,
            1,
            shared,
            std::ptr::null_mut(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(status, CUresult::CUDA_SUCCESS);
    // SAFETY: a context is current.
    unsafe { ok(sys::cuCtxSynchronize()) };
    let got = download(output, elements);
    free(input);
    free(output);
    unload(library);
    got
}

/// The sum of `in[64 b .. 64 b + 64]` for `in[i] = i`.
fn block_sum(block: u32) -> u32 {
    (0..THREADS).map(|t| block * THREADS + t).sum()
}

/// A tree reduction without the `bar.sync` between its steps: a thread reads what another
/// stored in the step before.
fn reduction(fixed: bool) {
    let got = run_kernel(c"reduce_last", 4, THREADS, 0, fixed as u32);
    if fixed {
        let want: Vec<u32> = (0..4).map(block_sum).collect();
        assert_eq!(got[..4], want);
    }
}

planted!(
    reduction_missing_a_barrier_is_a_read_after_write,
    scenario_reduction_without_barrier,
    scenario_reduction_with_barrier,
    reduction,
    "shared-race",
    [
        "kernel reduce_last",
        "RAW hazard",
        "block [0, 0, 0]",
        "thread [32, 0, 0] wrote",
        "thread [48, 0, 0] reads 4 bytes",
        "ld.shared.u32"
    ],
    then teardown()
);

/// Each thread reads its neighbour's slot and overwrites its own without a barrier between:
/// the neighbour's read and this write race (dynamic shared memory, generic addresses).
fn shift_left(fixed: bool) {
    let got = run_kernel(c"shift_left", 2, THREADS, 4 * THREADS, fixed as u32);
    if fixed {
        let want: Vec<u32> = (0..2 * THREADS)
            .map(|g| 2 * ((g / THREADS) * THREADS + (g % THREADS + 1) % THREADS))
            .collect();
        assert_eq!(got, want);
    }
}

planted!(
    overwrite_before_the_neighbour_read_is_a_write_after_read,
    scenario_overwrite_without_barrier,
    scenario_overwrite_after_barrier,
    shift_left,
    "shared-race",
    [
        "kernel shift_left",
        "WAR hazard",
        "thread [0, 0, 0] read",
        "thread [1, 0, 0] writes 4 bytes at shared offset 0x4",
        "st.u32"
    ],
    then teardown()
);

/// Every thread stores into one shared word; the fix lets thread 0 alone store.
fn one_slot(fixed: bool) {
    let writers = if fixed { 1 } else { THREADS };
    let got = run_kernel(c"one_slot", 2, THREADS, 0, writers);
    if fixed {
        let want: Vec<u32> = (0..2 * THREADS).map(|g| g / THREADS * THREADS).collect();
        assert_eq!(got, want);
    }
}

planted!(
    threads_storing_one_word_are_a_write_after_write,
    scenario_one_word_many_writers,
    scenario_one_word_one_writer,
    one_slot,
    "shared-race",
    [
        "kernel one_slot",
        "WAW hazard",
        "thread [0, 0, 0] wrote",
        "thread [1, 0, 0] writes 4 bytes at shared offset 0x0"
    ],
    then teardown()
);

/// Legacy warp-synchronous reduction: no `__syncwarp` between the steps (the lanes of a warp
/// are not in lockstep since sm_70); the fix has one after the stores and after each step.
fn warp_reduction(fixed: bool) {
    let got = run_kernel(c"warp_reduce", 1, 32, 0, fixed as u32);
    if fixed {
        assert_eq!(got[0], (0..32).sum::<u32>());
    }
}

planted!(
    warp_reduction_without_syncwarp_races,
    scenario_warp_reduction_without_syncwarp,
    scenario_warp_reduction_with_syncwarp,
    warp_reduction,
    "shared-race",
    [
        "kernel warp_reduce",
        "hazard on shared memory",
        "thread [0, 0, 0]",
        "with no barrier between them"
    ],
    then teardown()
);

/// Block 37 of 64 skips the `bar.sync` between the stores and the neighbour's read; the fix
/// skips it in no block.
fn one_block_skips(fixed: bool) {
    let skip = if fixed { u32::MAX } else { 37 };
    let got = run_kernel(c"neighbour", 64, THREADS, 0, skip);
    if fixed {
        let want: Vec<u32> = (0..64 * THREADS)
            .map(|g| g / THREADS * THREADS + (g % THREADS + 1) % THREADS)
            .collect();
        assert_eq!(got, want);
    }
}

planted!(
    one_block_of_many_skipping_its_barrier_races,
    scenario_block_37_skips_its_barrier,
    scenario_no_block_skips_its_barrier,
    one_block_skips,
    "shared-race",
    [
        "kernel neighbour",
        "block [37, 0, 0]",
        "hazard on shared memory"
    ],
    then teardown()
);

/// Thread 0 resets a shared counter with a plain store while the others add to it atomically:
/// the fix has a `bar.sync` between the reset and the atomics (which never race each other).
fn counter(fixed: bool) {
    let got = run_kernel(c"count", 3, THREADS, 0, fixed as u32);
    if fixed {
        assert_eq!(got[..3], [THREADS; 3]);
    }
}

planted!(
    plain_reset_against_atomics_races,
    scenario_counter_reset_without_barrier,
    scenario_counter_reset_before_barrier,
    counter,
    "shared-race",
    [
        "kernel count",
        "WAW hazard",
        "thread [0, 0, 0] wrote",
        "thread [1, 0, 0] writes 4 bytes",
        "atom.shared.add.u32"
    ],
    then teardown()
);

/// Every thread adds to a shared sum with a plain load, add and store; the fix uses
/// `atom.shared.add`.
fn accumulate(fixed: bool) {
    let got = run_kernel(c"accumulate", 2, THREADS, 0, fixed as u32);
    if fixed {
        assert_eq!(got[..2], [block_sum(0), block_sum(1)]);
    }
}

planted!(
    plain_read_modify_write_of_a_shared_sum_races,
    scenario_shared_sum_plain,
    scenario_shared_sum_atomic,
    accumulate,
    "shared-race",
    [
        "kernel accumulate",
        "RAW hazard",
        "thread [0, 0, 0] wrote",
        "thread [1, 0, 0] reads 4 bytes"
    ],
    then teardown()
);

#[test]
fn racecheck_can_be_turned_off() {
    use cuda_sim::SimCommand;
    let report = report_with("scenario_reduction_without_barrier", |c| {
        c.sim_check_racecheck(false);
    });
    assert_clean(&report);
}

/// Blocks of the cost workload (`reduce_last` with its barriers, 64 threads a block).
const COST_BLOCKS: u32 = 8192;
/// PTX instructions `reduce_last` executes per block of 64 threads with its barriers, counted
/// from its control flow (guarded-off instructions included): 18 before the loop and 7 per
/// step for every thread (6 steps), 6 more per step for each of the `s` threads that add (`s`
/// = 32, 16, …, 1: 63 in all), 3 after the loop for every thread, then 5 for thread 63 and 1
/// (`ret`) for each other.
const COST_PER_BLOCK: u64 = 18 * 64 + 7 * 6 * 64 + 6 * 63 + 3 * 64 + 5 + 63;
/// Runs of the cost workload per configuration; the fastest counts.
const COST_RUNS: u32 = 3;

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_cost_workload() {
    child();
    let mut best = f64::INFINITY;
    for _ in 0..COST_RUNS {
        let start = std::time::Instant::now();
        let got = run_kernel(c"reduce_last", COST_BLOCKS, THREADS, 0, 1);
        best = best.min(start.elapsed().as_secs_f64());
        assert_eq!(got[0], block_sum(0));
        teardown();
    }
    println!("cost-workload-seconds {best}");
}

/// What each check costs: the cost workload (a shared-memory reduction with global loads and
/// stores, about 37 million PTX instructions) under each check alone, none and all, in
/// interpreter instructions per second (each figure the fastest of [`COST_RUNS`] runs, with
/// the input copy, output copy and module load included). Run it in a release build:
/// `cargo test -p cuda-sim --release --test shared_races -- --ignored --exact check_cost --nocapture`
#[test]
#[ignore = "a measurement: run it by name (see its documentation)"]
fn check_cost() {
    const CHECKS: [&str; 4] = [
        "CUDA_SIM_CHECK_DATA_RACE",
        "CUDA_SIM_CHECK_INITCHECK",
        "CUDA_SIM_CHECK_SYNCCHECK",
        "CUDA_SIM_CHECK_RACECHECK",
    ];
    let instructions = COST_PER_BLOCK * u64::from(COST_BLOCKS);
    println!("{instructions} PTX instructions per run");
    let configurations: [(&str, &[&str]); 6] = [
        ("no check", &[]),
        ("data-race", &CHECKS[0..1]),
        ("initcheck", &CHECKS[1..2]),
        ("synccheck", &CHECKS[2..3]),
        ("racecheck", &CHECKS[3..4]),
        ("all four", &CHECKS),
    ];
    for (label, on) in configurations {
        let (output, _) = run("scenario_cost_workload", |c| {
            for check in CHECKS {
                c.env(check, if on.contains(&check) { "1" } else { "0" });
            }
        });
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{label}: {stdout}");
        let seconds: f64 = stdout
            .lines()
            .find_map(|l| l.split_once("cost-workload-seconds "))
            .and_then(|(_, s)| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("{label}: no time in {stdout}"));
        println!(
            "{label:<12} {seconds:>8.4} s  {:>8.1} M instructions/s",
            instructions as f64 / seconds / 1e6
        );
    }
}

/// Threads that store one value to one word, unordered (a clamped row index), leave the same
/// bytes whichever stores last: no hazard, and the reads after the barrier see the value.
/// Storing each its own value is a write-after-write.
fn clamped_rows(fixed: bool) {
    let got = run_kernel(c"clamped_rows", 2, THREADS, 0, fixed as u32);
    if fixed {
        let want: Vec<u32> = (0..2 * THREADS)
            .map(|g| g / THREADS * THREADS + (g % THREADS / 8).min(3))
            .collect();
        assert_eq!(got, want);
    }
}

planted!(
    threads_storing_their_own_values_to_one_word_race_but_one_value_does_not,
    scenario_clamped_rows_own_values,
    scenario_clamped_rows_one_value,
    clamped_rows,
    "shared-race",
    [
        "kernel clamped_rows",
        "WAW hazard",
        "thread [0, 0, 0] wrote",
        "thread [1, 0, 0] writes 4 bytes at shared offset 0x0"
    ],
    then teardown()
);
