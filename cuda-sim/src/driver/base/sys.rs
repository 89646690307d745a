//! The few C library functions the simulator needs, declared directly (the driver has no
//! crate dependencies), with safe wrappers.

use std::ffi::{c_char, c_int, c_long, c_void};

unsafe extern "C" {
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: c_long,
    ) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
    fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    fn memfd_create(name: *const c_char, flags: u32) -> c_int;
    fn ftruncate(fd: c_int, len: c_long) -> c_int;
    fn fallocate(fd: c_int, mode: c_int, off: c_long, len: c_long) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn pread(fd: c_int, buf: *mut c_void, count: usize, off: c_long) -> isize;
    fn atexit(callback: extern "C" fn()) -> c_int;
    fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
    fn sigaction(signum: c_int, act: *const SigAction, old: *mut SigAction) -> c_int;
    fn gettid() -> c_int;
    fn raise(signal: c_int) -> c_int;
}

/// glibc's `struct sigaction` on Linux x86_64: the handler (or `sa_sigaction`), the mask
/// (`sigset_t`, 1,024 bits), the flags and the restorer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SigAction {
    pub handler: usize,
    pub mask: [u64; 16],
    pub flags: c_int,
    pub restorer: usize,
}

/// `SIGSEGV`.
pub const SIGSEGV: c_int = 11;
/// `SA_SIGINFO`: the handler takes `(signal, siginfo, ucontext)`.
pub const SA_SIGINFO: c_int = 4;
/// `si_code` of a SIGSEGV for an access the page's protection forbids.
pub const SEGV_ACCERR: i32 = 2;
/// `SA_ONSTACK`: the handler runs on the thread's alternate stack when it has one (Rust's
/// stack-overflow detection needs it).
pub const SA_ONSTACK: c_int = 0x0800_0000;
/// `PROT_READ`.
pub const PROT_READ: c_int = 1;
/// `PROT_READ | PROT_WRITE`.
pub const PROT_READ_WRITE: c_int = 3;
/// `PROT_NONE`.
pub const PROT_NOTHING: c_int = 0;

/// Sets the protection of the pages `[addr, addr + len)` (page-aligned); whether it worked.
/// Async-signal-safe.
pub fn protect(addr: usize, len: usize, prot: c_int) -> bool {
    // SAFETY: callers pass whole pages of a managed allocation, which lies in pages of its
    // own inside a mapping this simulator made; changing their protection affects no other
    // allocation and no memory Rust owns.
    unsafe { mprotect(addr as *mut c_void, len, prot) == 0 }
}

/// Installs `action` for `signal`, returning the previous action.
pub fn set_action(signal: c_int, action: &SigAction) -> Option<SigAction> {
    let mut old = SigAction {
        handler: 0,
        mask: [0; 16],
        flags: 0,
        restorer: 0,
    };
    // SAFETY: both pointers are valid for a `struct sigaction` (same layout as glibc's).
    (unsafe { sigaction(signal, action, &mut old) } == 0).then_some(old)
}

/// The action installed now for `signal`.
pub fn current_action(signal: c_int) -> Option<SigAction> {
    let mut old = SigAction {
        handler: 0,
        mask: [0; 16],
        flags: 0,
        restorer: 0,
    };
    // SAFETY: a null new action only reads the current one into `old`, a valid
    // `struct sigaction`.
    (unsafe { sigaction(signal, std::ptr::null(), &mut old) } == 0).then_some(old)
}

/// Restores `action` for `signal` from a signal handler (async-signal-safe).
pub fn restore_action(signal: c_int, action: &SigAction) {
    // SAFETY: `action` is a valid `struct sigaction`; the old action is not asked for.
    unsafe { sigaction(signal, action, std::ptr::null_mut()) };
}

/// Sends `signal` to the calling thread (async-signal-safe; from a handler of that signal it
/// is delivered once the handler returns).
pub fn raise_signal(signal: c_int) {
    // SAFETY: `raise` has no preconditions.
    unsafe { raise(signal) };
}

/// The calling thread's kernel id (async-signal-safe).
pub fn thread_id() -> i32 {
    // SAFETY: `gettid` has no preconditions.
    unsafe { gettid() }
}

const PROT_NONE: c_int = 0;
const PROT_RW: c_int = 3;
const MAP_SHARED: c_int = 0x01;
const MAP_PRIVATE: c_int = 0x02;
const MAP_FIXED: c_int = 0x10;
const MAP_ANONYMOUS: c_int = 0x20;
const MAP_NORESERVE: c_int = 0x4000;
const MADV_DONTNEED: c_int = 4;
const MFD_CLOEXEC: u32 = 1;
const F_DUPFD_CLOEXEC: c_int = 1030;
const FALLOC_FL_KEEP_SIZE: c_int = 1;
const FALLOC_FL_PUNCH_HOLE: c_int = 2;
const MAP_FAILED: usize = usize::MAX;

/// Reserves `len` bytes of readable and writable address space, backed by `fd` (shared) or
/// by anonymous memory; pages are only committed when touched.
pub fn map(len: usize, fd: Option<i32>) -> Option<usize> {
    let (flags, fd) = match fd {
        Some(fd) => (MAP_SHARED | MAP_NORESERVE, fd),
        None => (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1),
    };
    // SAFETY: a fresh mapping at an address of the kernel's choosing; nothing is overwritten.
    let addr = unsafe { mmap(std::ptr::null_mut(), len, PROT_RW, flags, fd, 0) };
    (addr as usize != MAP_FAILED).then_some(addr as usize)
}

/// Reserves `len` bytes of inaccessible, uncommitted address space at an address of the
/// kernel's choosing (`hint` is only a hint).
pub fn reserve(len: usize, hint: usize) -> Option<usize> {
    let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    // SAFETY: without MAP_FIXED the kernel never places the mapping over an existing one.
    let addr = unsafe { mmap(hint as *mut c_void, len, PROT_NONE, flags, -1, 0) };
    (addr as usize != MAP_FAILED).then_some(addr as usize)
}

/// Maps `[offset, offset + len)` of `fd` readable and writable at exactly `addr`, replacing
/// what was there (a range of a reservation this simulator made).
pub fn map_fixed(addr: usize, len: usize, fd: i32, offset: u64) -> bool {
    let flags = MAP_SHARED | MAP_FIXED;
    // SAFETY: the caller passes a range inside one of its own inaccessible reservations, so
    // nothing the program or the simulator uses is replaced.
    let result = unsafe {
        mmap(
            addr as *mut c_void,
            len,
            PROT_RW,
            flags,
            fd,
            offset as c_long,
        )
    };
    result as usize == addr
}

/// Replaces `[addr, addr + len)` with inaccessible, uncommitted address space, so that the
/// range is never handed out again (raw pointers of freed memory stay unique).
pub fn retire(addr: usize, len: usize) {
    let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED;
    // SAFETY: the range is a mapping this simulator made and no longer hands out.
    let result = unsafe { mmap(addr as *mut c_void, len, PROT_NONE, flags, -1, 0) };
    if result as usize == MAP_FAILED {
        // SAFETY: as above; unmapping is the fallback.
        unsafe { munmap(addr as *mut c_void, len) };
    }
}

/// Gives the pages of `[addr, addr + len)` back to the system (they read as zero, or as the
/// file's content for shared mappings, afterwards).
pub fn discard(addr: usize, len: usize, fd: Option<(i32, u64)>) {
    match fd {
        Some((fd, offset)) => {
            // SAFETY: punching a hole in a memory file this simulator created.
            unsafe {
                fallocate(
                    fd,
                    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    offset as c_long,
                    len as c_long,
                )
            };
        }
        None => {
            // SAFETY: the range lies in a private anonymous mapping of this simulator.
            unsafe { madvise(addr as *mut c_void, len, MADV_DONTNEED) };
        }
    }
}

/// A new memory file of `len` bytes (sparse), close-on-exec.
pub fn memfd(len: u64) -> Option<i32> {
    memfd_named(c"cuda-sim-pool", len)
}

/// A new memory file of `len` bytes (sparse), close-on-exec, named `name` (the name shows in
/// `/proc/<pid>/fd/<fd>`, which is how an importer recognises the simulator's files).
pub fn memfd_named(name: &std::ffi::CStr, len: u64) -> Option<i32> {
    // SAFETY: the name is NUL-terminated; the flags are valid.
    let fd = unsafe { memfd_create(name.as_ptr(), MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the descriptor just created.
    if unsafe { ftruncate(fd, len as c_long) } != 0 {
        close_fd(fd);
        return None;
    }
    Some(fd)
}

/// A close-on-exec duplicate of `fd`.
pub fn dup(fd: i32) -> Option<i32> {
    // SAFETY: duplicating a descriptor has no memory effects.
    let new = unsafe { fcntl(fd, F_DUPFD_CLOEXEC, 0) };
    (new >= 0).then_some(new)
}

/// Closes `fd`.
pub fn close_fd(fd: i32) {
    // SAFETY: the simulator closes only descriptors it owns.
    unsafe { close(fd) };
}

/// Reads `buf.len()` bytes at `offset` of `fd`.
pub fn read_at(fd: i32, buf: &mut [u8], offset: u64) -> bool {
    // SAFETY: `buf` is valid for writes of its length.
    let read = unsafe { pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset as c_long) };
    read == buf.len() as isize
}

/// Registers `callback` to run at process exit.
pub fn at_exit(callback: extern "C" fn()) {
    // SAFETY: `callback` is a plain function that lives as long as the library.
    unsafe { atexit(callback) };
}
