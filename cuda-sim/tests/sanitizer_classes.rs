//! The compute-sanitizer classes beyond the data-race check and racecheck: memcheck
//! (`out-of-bounds`, `misaligned`, `use-after-free`), hardware exceptions (`device-exception`),
//! synccheck (`barrier-divergence`, `bad-warp-mask`) and initcheck (`uninitialized-read`, and
//! `unused-allocation` notes). Each planted bug has a correct twin that differs only in the
//! fix; the bug must be reported with its kind, the twin with nothing. Programs that are
//! correct on sm_70 and later (and that an older synccheck rule reported) are kept as pairs of
//! correct programs that must not be reported. Each scenario is a raw driver sequence in a child process under the simulator
//! (not strict, so that it runs to its end), and the parent test reads its report.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUresult};

#[macro_use]
mod common;
use common::*;

/// Hand-written kernels, one per planted bug (`%r1` is the thread's index in its block).
const PTX: &str = "
.version 7.0
.target sm_52
.address_size 64

// out[i] = in[i] for the n first threads of the grid.
.visible .entry copy_n(.param .u64 out, .param .u64 in, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    add.s64 %rd5, %rd1, %rd3;
    st.global.u32 [%rd5], %r6;
DONE:
    ret;
}

// Threads at or past `limit` leave; the others wait at bar.sync 0, then store their index.
.visible .entry bar_exit(.param .u64 buf, .param .u32 limit)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [limit];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    bar.sync 0;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
DONE:
    ret;
}

// Threads below `odd` wait at bar.sync 1, the others at bar.sync 0.
.visible .entry two_bars(.param .u64 buf, .param .u32 odd)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [odd];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, %r2;
    @%p1 bra OTHER;
    bar.sync 0;
    bra STORE;
OTHER:
    bar.sync 1;
STORE:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}

// buf[i] = the index of lane i ^ 1, by shfl.sync with member mask `mask`.
.visible .entry shfl(.param .u64 buf, .param .u32 mask)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [mask];
    mov.u32 %r1, %tid.x;
    shfl.sync.bfly.b32 %r3, %r1, 1, 31, %r2;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}

// Lanes from 16 leave; the others take a ballot with member mask `mask`.
.visible .entry vote(.param .u64 buf, .param .u32 mask)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [mask];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 16;
    @%p1 bra DONE;
    vote.sync.ballot.b32 %r3, 1, %r2;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
DONE:
    ret;
}

// out[i] = value for the n first threads of the grid.
.visible .entry fill_n(.param .u64 out, .param .u64 value, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [value];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    cvt.u32.u64 %r6, %rd2;
    st.global.u32 [%rd4], %r6;
DONE:
    ret;
}

// Each thread loads the u64 at buf + offset and stores it at buf + 8 * (i + 1).
.visible .entry load_u64(.param .u64 buf, .param .u32 offset)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [offset];
    mov.u32 %r1, %tid.x;
    cvt.u64.u32 %rd2, %r2;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.u64 %rd4, [%rd3];
    add.u32 %r3, %r1, 1;
    mul.wide.u32 %rd5, %r3, 8;
    add.s64 %rd6, %rd1, %rd5;
    st.global.u64 [%rd6], %rd4;
    ret;
}

// Thread 0 stores its index into element `index` of a 32-element shared array, reads it
// back and stores it to buf[0].
.visible .entry shared_at(.param .u64 buf, .param .u32 index)
{
    .shared .align 4 .b32 arr[32];
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [index];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r3, arr;
    shl.b32 %r4, %r2, 2;
    add.u32 %r3, %r3, %r4;
    st.shared.u32 [%r3], %r1;
    ld.shared.u32 %r5, [%r3];
    st.global.u32 [%rd1], %r5;
DONE:
    ret;
}

// bar.warp.sync with member mask `mask`, then every thread stores its index.
.visible .entry warp_sync(.param .u64 buf, .param .u32 mask)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [mask];
    mov.u32 %r1, %tid.x;
    bar.warp.sync %r2;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}

// Lanes below `split` reach one bar.warp.sync -1, the others another one; then every thread
// stores its index.
.visible .entry warp_sync_split(.param .u64 buf, .param .u32 split)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [split];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, %r2;
    @%p1 bra LOW;
    bar.warp.sync -1;
    bra STORE;
LOW:
    bar.warp.sync -1;
STORE:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}

// Lanes below `split` take shfl.sync (full mask) then vote.sync (full mask); the others only
// the vote. buf[i] = the ballot.
.visible .entry shfl_vote(.param .u64 buf, .param .u32 split)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [split];
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %r1;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra VOTE;
    shfl.sync.bfly.b32 %r3, %r1, 1, 31, -1;
VOTE:
    vote.sync.ballot.b32 %r4, 1, -1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}

// Lanes from `split` wait at bar.sync 0; the others take shfl.sync (full mask) first.
// buf[i] = the index of lane i ^ 1 (or i, for lanes that skipped the shuffle).
.visible .entry shfl_bar(.param .u64 buf, .param .u32 split)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [split];
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %r1;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra WAIT;
    shfl.sync.bfly.b32 %r3, %r1, 1, 31, -1;
WAIT:
    bar.sync 0;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}

// Thread `who` executes `trap`; every thread stores its index.
.visible .entry trap_at(.param .u64 buf, .param .u32 who)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [who];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, %r2;
    @%p1 trap;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}

// Thread `who` executes `brkpt`; every thread stores its index.
.visible .entry brkpt_at(.param .u64 buf, .param .u32 who)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r2, [who];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, %r2;
    @%p1 brkpt;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}
\0";

/// A kernel calling device-side `malloc` (which the simulator does not model).
const MALLOC_PTX: &str = "
.version 7.0
.target sm_52
.address_size 64

.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);

.visible .entry grab()
{
    .reg .b64 %rd<3>;
    mov.u64 %rd1, 64;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd1;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd2, [retval0];
    }
    ret;
}
\0";

/// Elements (u32) of the buffers.
const N: u32 = 256;
/// Bytes of a buffer of `N` elements.
const BYTES: usize = 4 * N as usize;

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

fn memset(ptr: sys::CUdeviceptr, value: u32) {
    // SAFETY: a live allocation of `N` u32s.
    unsafe { ok(sys::cuMemsetD32_v2(ptr, value, N as usize)) };
}

fn upload(ptr: sys::CUdeviceptr, elements: u32) {
    let data = vec![7u32; elements as usize];
    // SAFETY: `data` has `elements` u32s; the copy is synchronous.
    unsafe {
        ok(sys::cuMemcpyHtoD_v2(
            ptr,
            data.as_ptr().cast(),
            4 * elements as usize,
        ))
    };
}

/// The first `elements` u32s at `ptr`.
fn download(ptr: sys::CUdeviceptr, elements: usize) -> Vec<u32> {
    let mut host = vec![0u32; elements];
    // SAFETY: `host` has `elements` u32s; the copy is synchronous.
    unsafe {
        ok(sys::cuMemcpyDtoH_v2(
            host.as_mut_ptr().cast(),
            ptr,
            4 * elements,
        ))
    };
    host
}

/// Launches `name` of [`PTX`] as one block of `threads` with `(ptr, x)`, or `(ptr, x, n)`
/// when `n` is given; returns the status.
fn launch(name: &std::ffi::CStr, threads: u32, ptr: u64, x: u64, n: Option<u32>) -> CUresult {
    let library = load_ptx(PTX).expect("load the kernels");
    let kernel = kernel(library, name);
    let three = n.is_some();
    let (mut ptr, mut x64, mut x32, mut n) = (ptr, x, x as u32, n.unwrap_or(0));
    let status = if three {
        let mut params = [
            (&mut ptr as *mut u64).cast::<c_void>(),
            (&mut x64 as *mut u64).cast(),
            (&mut n as *mut u32).cast(),
        ];
        launch_1d(
            kernel.cast(),
            threads.div_ceil(128),
            threads.min(128),
            std::ptr::null_mut(),
            &mut params,
        )
    } else {
        let mut params = [
            (&mut ptr as *mut u64).cast::<c_void>(),
            (&mut x32 as *mut u32).cast(),
        ];
        launch_1d(kernel.cast(), 1, threads, std::ptr::null_mut(), &mut params)
    };
    // SAFETY: a context is current.
    unsafe { ok(sys::cuCtxSynchronize()) };
    unload(library);
    status
}

/// Two correct programs (kept from a rule that reported them, or a pair whose difference
/// is not a bug on sm_70 and later), and the parent test that checks that neither is
/// reported.
macro_rules! correct {
    ($test:ident, $first:ident, $second:ident, $body:ident) => {
        #[test]
        #[ignore = "runs under the simulator from a parent test in this file"]
        fn $first() {
            child();
            $body(false);
            teardown();
        }

        #[test]
        #[ignore = "runs under the simulator from a parent test in this file"]
        fn $second() {
            child();
            $body(true);
            teardown();
        }

        #[test]
        fn $test() {
            assert_clean(&report_of(stringify!($first)));
            assert_clean(&report_of(stringify!($second)));
        }
    };
}

/// The status a launch must return: `error` for the bug, success for the twin.
fn expect_error(fixed: bool, error: CUresult, status: CUresult) {
    let want = if fixed { CUresult::CUDA_SUCCESS } else { error };
    assert_eq!(status, want);
}

/// The status a launch must return: launch failed for the bug, success for the twin.
fn expect(fixed: bool, status: CUresult) {
    expect_error(fixed, CUresult::CUDA_ERROR_LAUNCH_FAILED, status);
}

// ---- Memcheck --------------------------------------------------------------------------------

/// A kernel stores one element past the end of its buffer; the fix stores `N`.
fn store_one_past(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let n = if fixed { N } else { N + 1 };
    expect_error(
        fixed,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        launch(c"fill_n", N + 1, buf, 7, Some(n)),
    );
    free(buf);
}

planted!(
    store_one_past_the_end_is_out_of_bounds,
    scenario_store_one_past,
    scenario_store_to_the_end,
    store_one_past,
    "out-of-bounds",
    [
        "kernel fill_n",
        "writes 4 bytes",
        "0 bytes past the end of the 1024-byte allocation"
    ],
    then teardown()
);

/// An 8-byte load at offset 4; the fix loads at offset 8.
fn misaligned_load(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    memset(buf, 0);
    let offset = if fixed { 8 } else { 4 };
    expect_error(
        fixed,
        CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
        launch(c"load_u64", 32, buf, offset, None),
    );
    free(buf);
}

planted!(
    misaligned_eight_byte_load_is_reported,
    scenario_misaligned_load,
    scenario_aligned_load,
    misaligned_load,
    "misaligned",
    ["kernel load_u64", "reads 8 bytes", "not a multiple of 8"],
    then teardown()
);

/// A kernel writes a buffer freed before the launch; the fix frees it after.
fn launch_after_free(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    if !fixed {
        free(buf);
    }
    expect_error(
        fixed,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        launch(c"fill_n", N, buf, 7, Some(N)),
    );
    if fixed {
        assert_eq!(download(buf, N as usize), vec![7; N as usize]);
        free(buf);
    }
}

planted!(
    kernel_writing_freed_memory_is_a_use_after_free,
    scenario_write_freed,
    scenario_write_then_free,
    launch_after_free,
    "use-after-free",
    ["kernel fill_n", "freed by cuMemFree_v2"],
    then teardown()
);

/// A store to element 256 of a 32-element shared array; the fix stores to element 31.
fn shared_out_of_bounds(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let index = if fixed { 31 } else { 256 };
    expect_error(
        fixed,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        launch(c"shared_at", 32, buf, index, None),
    );
    if fixed {
        assert_eq!(download(buf, 1), [0]);
    }
    free(buf);
}

planted!(
    shared_store_past_the_array_is_out_of_bounds,
    scenario_shared_past_the_array,
    scenario_shared_inside_the_array,
    shared_out_of_bounds,
    "out-of-bounds",
    ["kernel shared_at", "writes 4 bytes", "st.shared.u32"],
    then teardown()
);

// ---- Hardware exceptions -------------------------------------------------------------------

/// Thread 5 traps; the fix names no thread.
fn trap(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let who = if fixed { u64::from(u32::MAX) } else { 5 };
    expect(fixed, launch(c"trap_at", 32, buf, who, None));
    free(buf);
}

planted!(
    trap_is_a_device_exception,
    scenario_trap,
    scenario_no_trap,
    trap,
    "device-exception",
    [
        "kernel trap_at",
        "thread [5, 0, 0]",
        "trap;",
        "CUDA_ERROR_LAUNCH_FAILED"
    ],
    then teardown()
);

/// Thread 9 hits a breakpoint; the fix names no thread.
fn brkpt(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let who = if fixed { u64::from(u32::MAX) } else { 9 };
    expect(fixed, launch(c"brkpt_at", 32, buf, who, None));
    free(buf);
}

planted!(
    brkpt_is_a_device_exception,
    scenario_brkpt,
    scenario_no_brkpt,
    brkpt,
    "device-exception",
    ["kernel brkpt_at", "thread [9, 0, 0]", "brkpt;"],
    then teardown()
);

/// The last thread of the block traps, after the others stored; the fix names no thread.
fn trap_in_last_thread(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let who = if fixed { u64::from(u32::MAX) } else { 31 };
    expect(fixed, launch(c"trap_at", 32, buf, who, None));
    free(buf);
}

planted!(
    trap_in_the_last_thread_is_a_device_exception,
    scenario_trap_last,
    scenario_no_trap_last,
    trap_in_last_thread,
    "device-exception",
    ["thread [31, 0, 0]"],
    then teardown()
);

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_device_malloc() {
    child();
    setup();
    assert_eq!(
        load_ptx(MALLOC_PTX).unwrap_err(),
        CUresult::CUDA_ERROR_NOT_SUPPORTED
    );
    teardown();
}

#[test]
fn device_malloc_is_refused_at_load_naming_it() {
    let (output, report) = run("scenario_device_malloc", |_| {});
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("malloc"), "{stderr}");
    assert_clean(&report.expect("a report"));
}

// ---- Synccheck -------------------------------------------------------------------------------

/// Threads 16..32 of the only warp exit before `bar.sync 0`, which then waits for the others
/// only (sm_70 and later): correct, as is every thread reaching it.
fn barrier_after_exit(all: bool) {
    setup();
    let buf = alloc(BYTES);
    memset(buf, u32::MAX);
    let limit = if all { 32 } else { 16 };
    ok(launch(c"bar_exit", 32, buf, limit, None));
    let got = download(buf, 32);
    for (i, &v) in got.iter().enumerate() {
        assert_eq!(
            v,
            if i < limit as usize {
                i as u32
            } else {
                u32::MAX
            }
        );
    }
    free(buf);
}

correct!(
    barrier_after_partial_warp_exit_is_fine,
    scenario_bar_exit,
    scenario_bar_no_exit,
    barrier_after_exit
);

/// Thread 0 waits at `bar.sync 1`, the others at `bar.sync 0`: the block cannot finish.
fn two_barriers(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let odd = if fixed { 0 } else { 1 };
    expect(fixed, launch(c"two_bars", 64, buf, odd, None));
    free(buf);
}

planted!(
    different_barriers_are_divergent,
    scenario_two_bars,
    scenario_one_bar,
    two_barriers,
    "barrier-divergence",
    ["kernel two_bars", "bar.sync", "waits at"],
    then teardown()
);

/// `shfl.sync` with a full mask in a block of 16 threads (the absent lanes are ignored), or
/// with `0xffff`: both correct.
fn shuffle_mask(half: bool) {
    setup();
    let buf = alloc(BYTES);
    let mask = if half { 0xffff } else { 0xffff_ffff };
    ok(launch(c"shfl", 16, buf, mask, None));
    let want: Vec<u32> = (0..16).map(|i| i ^ 1).collect();
    assert_eq!(download(buf, 16), want);
    free(buf);
}

correct!(
    full_shuffle_mask_in_a_half_warp_is_fine,
    scenario_shfl_full_mask,
    scenario_shfl_half_mask,
    shuffle_mask
);

/// `vote.sync` with a full mask after lanes 16..32 exited (exited lanes are ignored), or with
/// `0xffff`: both correct.
fn vote_mask(present: bool) {
    setup();
    let buf = alloc(BYTES);
    let mask = if present { 0xffff } else { 0xffff_ffff };
    ok(launch(c"vote", 32, buf, mask, None));
    assert_eq!(download(buf, 16), vec![0xffff; 16]);
    free(buf);
}

correct!(
    vote_naming_exited_lanes_is_fine,
    scenario_vote_exited,
    scenario_vote_present,
    vote_mask
);

/// Lane 0 runs `bar.warp.sync` with a mask that leaves it out; the fix names every lane.
fn warp_sync_without_self(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let mask = if fixed { 0xffff_ffff } else { 0xffff_fffe };
    expect(fixed, launch(c"warp_sync", 32, buf, mask, None));
    free(buf);
}

planted!(
    warp_sync_outside_its_own_mask_is_bad,
    scenario_warp_sync_without_self,
    scenario_warp_sync_with_self,
    warp_sync_without_self,
    "bad-warp-mask",
    [
        "kernel warp_sync",
        "thread [0, 0, 0]",
        "0xfffffffe",
        "lane 0 is not in it"
    ],
    then teardown()
);

/// Lane 0 takes `vote.sync` with a mask that leaves it out; the fix names lanes 0..16.
fn vote_without_self(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let mask = if fixed { 0xffff } else { 0xfffe };
    expect(fixed, launch(c"vote", 32, buf, mask, None));
    free(buf);
}

planted!(
    vote_outside_its_own_mask_is_bad,
    scenario_vote_without_self,
    scenario_vote_with_self,
    vote_without_self,
    "bad-warp-mask",
    ["kernel vote", "0x0000fffe", "lane 0 is not in it"],
    then teardown()
);

/// The two halves of a warp at two different `bar.warp.sync -1`, or all lanes at one: both
/// synchronise the whole warp on sm_70 and later.
fn warp_sync_split(together: bool) {
    setup();
    let buf = alloc(BYTES);
    let split = if together { 0 } else { 16 };
    ok(launch(c"warp_sync_split", 32, buf, split, None));
    assert_eq!(download(buf, 32), (0..32).collect::<Vec<u32>>());
    free(buf);
}

correct!(
    warp_sync_at_two_places_is_fine,
    scenario_warp_sync_two_places,
    scenario_warp_sync_one_place,
    warp_sync_split
);

/// Lanes 16..32 skip a full-mask `shfl.sync` and wait at the `vote.sync` after it, which the
/// other lanes cannot reach: the warp cannot go on (PTX: each collective waits for every
/// non-exited lane of its mask at the same collective). The fix: every lane shuffles.
fn shuffle_skipped(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let split = if fixed { 32 } else { 16 };
    expect(fixed, launch(c"shfl_vote", 32, buf, split, None));
    if fixed {
        assert_eq!(download(buf, 32), vec![u32::MAX; 32]);
    }
    free(buf);
}

planted!(
    lanes_at_another_collective_are_a_bad_mask,
    scenario_shfl_skipped,
    scenario_shfl_by_all,
    shuffle_skipped,
    "bad-warp-mask",
    [
        "kernel shfl_vote",
        "0xffffffff",
        "never reach this collective",
        "vote.sync"
    ],
    then teardown()
);

/// Lanes 16..32 wait at `bar.sync 0` while the others' full-mask `shfl.sync` waits for them:
/// neither can go on. The fix: every lane shuffles, then waits at the barrier.
fn shuffle_against_barrier(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let split = if fixed { 32 } else { 16 };
    expect(fixed, launch(c"shfl_bar", 32, buf, split, None));
    if fixed {
        let want: Vec<u32> = (0..32).map(|i| i ^ 1).collect();
        assert_eq!(download(buf, 32), want);
    }
    free(buf);
}

planted!(
    shuffle_naming_lanes_at_a_barrier_is_a_bad_mask,
    scenario_shfl_against_bar,
    scenario_shfl_before_bar,
    shuffle_against_barrier,
    "bad-warp-mask",
    ["kernel shfl_bar", "0xffff0000", "block barrier `bar.sync 0"],
    then teardown()
);

// ---- Initcheck -------------------------------------------------------------------------------

/// A kernel reads a buffer never written; the fix memsets it first.
fn read_unwritten(fixed: bool) {
    setup();
    let (src, dst) = (alloc(BYTES), alloc(BYTES));
    if fixed {
        memset(src, 3);
    }
    ok(launch(c"copy_n", N, dst, src, Some(N)));
    free(src);
    free(dst);
}

planted!(
    kernel_reading_unwritten_memory_is_reported,
    scenario_read_unwritten,
    scenario_read_memset,
    read_unwritten,
    "uninitialized-read",
    [
        "kernel copy_n",
        "block [0, 0, 0], thread [0, 0, 0]",
        "reads 1024 bytes never written",
        "of the 1024-byte allocation",
        "cuMemAlloc_v2 call #"
    ],
    then teardown()
);

/// A kernel reads one element past what was copied in; the fix copies all of them.
fn read_past_copy(fixed: bool) {
    setup();
    let (src, dst) = (alloc(BYTES), alloc(BYTES));
    upload(src, if fixed { N } else { N - 1 });
    ok(launch(c"copy_n", N, dst, src, Some(N)));
    free(src);
    free(dst);
}

planted!(
    kernel_reading_one_past_the_copy_is_reported,
    scenario_read_past_copy,
    scenario_read_whole_copy,
    read_past_copy,
    "uninitialized-read",
    [
        "thread [127, 0, 0]",
        "block [1, 0, 0]",
        "reads 4 bytes never written"
    ],
    then teardown()
);

/// A kernel writes half of a fresh buffer and the host copies all of it back; the fix has the
/// kernel write all of it. (A later kernel reading what an earlier one wrote is fine.)
fn copy_back_half_written(fixed: bool) {
    setup();
    let (src, dst) = (alloc(BYTES), alloc(BYTES));
    memset(src, 1);
    let n = if fixed { N } else { N / 2 };
    ok(launch(c"copy_n", N, dst, src, Some(n)));
    let again = alloc(BYTES);
    ok(launch(c"copy_n", n, again, dst, Some(n)));
    download(dst, N as usize);
    free(src);
    free(dst);
    free(again);
}

planted!(
    copy_out_of_half_written_memory_is_reported,
    scenario_copy_back_half,
    scenario_copy_back_whole,
    copy_back_half_written,
    "uninitialized-read",
    [
        "cuMemcpyDtoH_v2 (call #",
        "512 bytes of which were never written"
    ],
    then teardown()
);

/// A pool block freed and handed out again starts uninitialised; the fix memsets it again.
fn pool_reuse(fixed: bool) {
    setup();
    let dst = alloc(BYTES);
    let stream = std::ptr::null_mut();
    let mut first = 0;
    let mut second = 0;
    // SAFETY: a context is current; the default pool; the legacy stream orders everything.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut first, BYTES, stream));
        ok(sys::cuMemsetD32Async(first, 1, N as usize, stream));
        ok(sys::cuMemFreeAsync(first, stream));
        ok(sys::cuMemAllocAsync(&mut second, BYTES, stream));
        if fixed {
            ok(sys::cuMemsetD32Async(second, 1, N as usize, stream));
        }
    }
    ok(launch(c"copy_n", N, dst, second, Some(N)));
    // SAFETY: our own pool allocation, freed once.
    unsafe {
        ok(sys::cuMemFreeAsync(second, stream));
        ok(sys::cuCtxSynchronize());
    }
    free(dst);
}

planted!(
    reused_pool_memory_starts_uninitialised,
    scenario_pool_reuse,
    scenario_pool_reuse_memset,
    pool_reuse,
    "uninitialized-read",
    ["kernel copy_n", "cuMemAllocAsync call #"],
    then teardown()
);

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_unused_allocation() {
    child();
    setup();
    let used = alloc(BYTES);
    memset(used, 0);
    let unused = alloc(BYTES);
    free(unused);
    free(used);
    teardown();
}

#[test]
fn unused_allocations_are_notes_not_violations() {
    // Strict: a note must not abort the run.
    let report = report_with("scenario_unused_allocation", |c| {
        c.env("CUDA_SIM_STRICT", "1");
    });
    assert_clean(&report);
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
    assert_eq!(report.notes[0].kind, "unused-allocation");
    assert!(report.notes[0].message.contains("1024-byte allocation"));
}

#[test]
fn each_check_can_be_turned_off() {
    use cuda_sim::SimCommand;
    let quiet = report_with("scenario_read_unwritten", |c| {
        c.sim_check_initcheck(false);
    });
    assert_clean(&quiet);
    assert!(quiet.notes.is_empty());
    let (output, report) = run("scenario_warp_sync_without_self", |c| {
        c.sim_check_synccheck(false);
    });
    // Without synccheck, a lane outside its own mask is not checked: the launch passes,
    // and the scenario's expectation of a failure fails.
    assert!(!output.status.success());
    assert!(report.expect("a report").violations.is_empty());
}
