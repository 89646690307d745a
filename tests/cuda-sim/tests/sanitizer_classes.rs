//! The compute-sanitizer classes beyond memcheck and the data-race check: hardware exceptions
//! (`device-exception`), synccheck (`barrier-divergence`, `bad-warp-mask`) and initcheck
//! (`uninitialized-read`, and `unused-allocation` notes). Each planted bug has a correct twin
//! that differs only in the fix; the bug must be reported with its kind, the twin with
//! nothing. Each scenario is a raw driver sequence in a child process under the simulator
//! (not strict, so that it runs to its end), and the parent test reads its report.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUresult};

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

fn load_ptx(text: &str) -> Result<sys::CUlibrary, CUresult> {
    let mut library = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX; no options.
    let status = unsafe {
        sys::cuLibraryLoadData(
            &mut library,
            text.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    match status {
        CUresult::CUDA_SUCCESS => Ok(library),
        error => Err(error),
    }
}

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

/// A planted bug, its twin, and the parent test that checks both: the bug reports exactly
/// one violation of `kind` whose message contains each needle, the twin nothing.
macro_rules! planted {
    ($test:ident, $bug:ident, $twin:ident, $body:ident, $kind:expr, [$($needle:expr),* $(,)?]) => {
        #[test]
        #[ignore = "runs under the simulator from a parent test in this file"]
        fn $bug() {
            child();
            $body(false);
            teardown();
        }

        #[test]
        #[ignore = "runs under the simulator from a parent test in this file"]
        fn $twin() {
            child();
            $body(true);
            teardown();
        }

        #[test]
        fn $test() {
            let report = report_of(stringify!($bug));
            assert_eq!(kinds(&report), [$kind], "{:?}", report.violations);
            for needle in [$($needle),*] {
                assert_message_contains(&report, 0, needle);
            }
            assert_no_leaks(&report);
            assert_clean(&report_of(stringify!($twin)));
        }
    };
}

/// The status a launch must return: launch failed for the bug, success for the twin.
fn expect(fixed: bool, status: CUresult) {
    let want = if fixed {
        CUresult::CUDA_SUCCESS
    } else {
        CUresult::CUDA_ERROR_LAUNCH_FAILED
    };
    assert_eq!(status, want);
}

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
    ]
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
    ["kernel brkpt_at", "thread [9, 0, 0]", "brkpt;"]
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
    ["thread [31, 0, 0]"]
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

/// Threads 16..32 of the only warp exit before `bar.sync 0`; the fix lets every thread reach it.
fn barrier_after_exit(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let limit = if fixed { 32 } else { 16 };
    expect(fixed, launch(c"bar_exit", 32, buf, limit, None));
    free(buf);
}

planted!(
    barrier_after_partial_warp_exit_is_divergent,
    scenario_bar_exit,
    scenario_bar_no_exit,
    barrier_after_exit,
    "barrier-divergence",
    ["kernel bar_exit", "bar.sync 0", "exited"]
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
    ["kernel two_bars", "bar.sync", "waits at"]
);

/// `shfl.sync` with a full mask in a block of 16 threads; the fix uses `0xffff`.
fn shuffle_mask(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let mask = if fixed { 0xffff } else { 0xffff_ffff };
    expect(fixed, launch(c"shfl", 16, buf, mask, None));
    free(buf);
}

planted!(
    full_shuffle_mask_in_a_half_warp_is_bad,
    scenario_shfl_full_mask,
    scenario_shfl_half_mask,
    shuffle_mask,
    "bad-warp-mask",
    ["kernel shfl", "0xffffffff", "not in the warp", "shfl.sync"]
);

/// `vote.sync` with a full mask after lanes 16..32 exited; the fix uses `0xffff`.
fn vote_mask(fixed: bool) {
    setup();
    let buf = alloc(BYTES);
    let mask = if fixed { 0xffff } else { 0xffff_ffff };
    expect(fixed, launch(c"vote", 32, buf, mask, None));
    free(buf);
}

planted!(
    vote_naming_exited_lanes_is_bad,
    scenario_vote_exited,
    scenario_vote_present,
    vote_mask,
    "bad-warp-mask",
    ["kernel vote", "0xffff0000 have exited"]
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
    ]
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
    ]
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
    let mut host = vec![0u32; N as usize];
    // SAFETY: `host` has `N` u32s; the copy is synchronous.
    unsafe { ok(sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), dst, BYTES)) };
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
    ]
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
    ["kernel copy_n", "cuMemAllocAsync call #"]
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
    let (output, report) = run("scenario_shfl_full_mask", |c| {
        c.sim_check_synccheck(false);
    });
    // Without synccheck, the mask is taken as naming the lanes there: the launch passes,
    // and the scenario's expectation of a failure fails.
    assert!(!output.status.success());
    assert!(report.expect("a report").violations.is_empty());
}
