//! The page guards behind `host_access`: a fixed table of guarded page ranges, the `SIGSEGV`
//! handler that notes a host access to one and lifts its guard, and the notes it leaves for
//! the next driver call. Only atomics, `mprotect`, `gettid` and `sigaction` run in the
//! handler. Knows nothing of the simulator's state: `host_access` decides what to guard and
//! what a note means.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicU64, Ordering};

use crate::base::sys::{self, SigAction};

/// How many managed allocations can be guarded at once; later ones are not (fewer races
/// found, never a false one).
const SLOTS: usize = 256;
/// How many faults can wait for the next driver call; more are dropped.
const NOTES: usize = 64;

/// A slot's guard: none, read-only, or no access.
const UNGUARDED: u8 = 0;
pub(crate) const READ_ONLY: u8 = 1;
pub(crate) const NO_ACCESS: u8 = 2;

/// One managed allocation's pages `[start, end)` and its guard. `end == 0`: a free slot.
struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    guard: AtomicU8,
}

/// A fault on a guarded page. `state`: 0 free, 1 being written, 2 ready.
struct Note {
    state: AtomicU8,
    addr: AtomicU64,
    write: AtomicU8,
    thread: AtomicI32,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        start: AtomicU64::new(0),
        end: AtomicU64::new(0),
        guard: AtomicU8::new(UNGUARDED),
    }
}; SLOTS];

static FAULTS: [Note; NOTES] = [const {
    Note {
        state: AtomicU8::new(0),
        addr: AtomicU64::new(0),
        write: AtomicU8::new(0),
        thread: AtomicI32::new(0),
    }
}; NOTES];

/// The `SIGSEGV` action before ours, called for every fault that is not on a guarded page.
static PREVIOUS: OnceLock<SigAction> = OnceLock::new();
/// Threads whose accesses go unnoted (a program's host function: ordered on its stream,
/// which the host's clock does not show), by kernel thread id; 0 is a free slot. A table of
/// atomics, so that the handler reads it without thread-local storage (whose first use in a
/// thread may allocate in a `dlopen`ed library: not async-signal-safe).
static QUIET: [AtomicI32; QUIET_SLOTS] = [const { AtomicI32::new(0) }; QUIET_SLOTS];
/// Threads that can run host functions at once with their accesses unnoted; past that, a
/// host function's accesses are noted like any host thread's.
const QUIET_SLOTS: usize = 256;

/// The calling thread's accesses go unnoted until [`quiet_end`] with the returned slot
/// (`None`: the table is full, and they are noted).
pub fn quiet_begin() -> Option<usize> {
    let tid = sys::thread_id();
    QUIET.iter().position(|slot| {
        slot.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// Ends [`quiet_begin`]'s slot.
pub fn quiet_end(slot: Option<usize>) {
    if let Some(slot) = slot {
        QUIET[slot].store(0, Ordering::Release);
    }
}

/// Whether thread `tid`'s accesses go unnoted (async-signal-safe: atomic loads only).
fn quiet(tid: i32) -> bool {
    QUIET.iter().any(|slot| slot.load(Ordering::Acquire) == tid)
}

/// Whether the handler is installed (guards are only ever set when it is).
pub fn installed() -> bool {
    PREVIOUS.get().is_some()
}

/// Installs the `SIGSEGV` handler once (Linux x86_64 only: the layouts of `struct
/// sigaction` and `ucontext_t` it relies on are that platform's).
/// Threads between [`quiet_begin`] and [`quiet_end`] go unnoted.
pub fn install() {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) || installed() {
        return;
    }
    let Some(previous) = sys::current_action(sys::SIGSEGV) else {
        return;
    };
    if PREVIOUS.set(previous).is_err() {
        return;
    }
    let action = SigAction {
        handler: on_segv as extern "C" fn(c_int, *mut c_void, *mut c_void) as usize,
        mask: [0; 16],
        flags: sys::SA_SIGINFO | sys::SA_ONSTACK,
        restorer: 0,
    };
    if sys::set_action(sys::SIGSEGV, &action).is_none() {
        eprintln!(
            "cuda-sim: cannot install the SIGSEGV handler: host accesses to managed memory are not checked"
        );
    }
}

/// Takes a free slot for the pages `[start, start + len)`.
fn claim(start: u64, len: u64) -> Option<usize> {
    for (index, slot) in TABLE.iter().enumerate() {
        if slot.end.load(Ordering::Acquire) == 0 {
            slot.guard.store(UNGUARDED, Ordering::Release);
            slot.start.store(start, Ordering::Release);
            slot.end.store(start + len, Ordering::Release);
            return Some(index);
        }
    }
    None
}

/// Frees a slot (its allocation is gone; its guard was lifted).
fn release(index: usize) {
    if let Some(slot) = TABLE.get(index) {
        unguard(index);
        slot.end.store(0, Ordering::Release);
        slot.start.store(0, Ordering::Release);
    }
}

/// Protects a slot's pages: the guard is published before the protection, so a fault always
/// finds it.
pub(crate) fn guard(index: usize, guard: u8) {
    let Some(slot) = TABLE.get(index) else {
        return;
    };
    let (start, end) = (
        slot.start.load(Ordering::Acquire),
        slot.end.load(Ordering::Acquire),
    );
    slot.guard.store(guard, Ordering::Release);
    let prot = if guard == READ_ONLY {
        sys::PROT_READ
    } else {
        sys::PROT_NOTHING
    };
    if !sys::protect(start as usize, (end - start) as usize, prot) {
        slot.guard.store(UNGUARDED, Ordering::Release);
    }
}

/// Makes a slot's pages readable and writable again, then clears its guard (so a fault that
/// still finds the guard set has its pages made accessible again, harmlessly). The pages are
/// made accessible whatever the guard reads: a handler that lifted the guard may store
/// `UNGUARDED` after a driver call guarded the pages again, and a driver call must still start
/// with every page accessible.
pub(crate) fn unguard(index: usize) {
    let Some(slot) = TABLE.get(index) else {
        return;
    };
    let (start, end) = (
        slot.start.load(Ordering::Acquire),
        slot.end.load(Ordering::Acquire),
    );
    if end > start {
        sys::protect(start as usize, (end - start) as usize, sys::PROT_READ_WRITE);
    }
    slot.guard.store(UNGUARDED, Ordering::Release);
}

/// Whether the faulting access was a write: bit 1 of the page-fault error code.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn fault_is_write(context: *mut c_void) -> bool {
    if context.is_null() {
        return false;
    }
    // SAFETY: with SA_SIGINFO the kernel passes the interrupted thread's `ucontext_t` as the
    // third argument. On Linux x86_64 it is `uc_flags` (8 bytes), `uc_link` (8), `uc_stack`
    // (24), then `uc_mcontext`, whose general registers (`gregs`, 23 of 8 bytes) come first;
    // `REG_ERR` is register 19. So the error code is the aligned u64 at byte 40 + 19 * 8.
    let error = unsafe { context.cast::<u8>().add(40 + 19 * 8).cast::<u64>().read() };
    error & 2 != 0
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn fault_is_write(_context: *mut c_void) -> bool {
    false
}

/// Notes a fault for the next driver call; dropped when every note is taken.
fn note(addr: u64, write: bool) {
    for note in &FAULTS {
        if note
            .state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            note.addr.store(addr, Ordering::Relaxed);
            note.write.store(u8::from(write), Ordering::Relaxed);
            note.thread.store(sys::thread_id(), Ordering::Relaxed);
            note.state.store(2, Ordering::Release);
            return;
        }
    }
}

/// The `SIGSEGV` handler. Async-signal-safe: atomics, `mprotect`, `gettid`, `sigaction` and
/// the previous handler only; no allocation, no lock, no panic.
extern "C" fn on_segv(signal: c_int, info: *mut c_void, context: *mut c_void) {
    // Only a protection fault (`si_code` SEGV_ACCERR) can be a guarded page's: a SIGSEGV sent
    // by a process (`kill`, `tgkill`: `si_code` ≤ 0, no address) or a fault on an unmapped
    // address goes to the previous action as it is.
    let (code, addr) = if info.is_null() {
        (0, None)
    } else {
        // SAFETY: with SA_SIGINFO the second argument is the `siginfo_t` of the signal; on
        // Linux x86_64 it begins with `si_signo`, `si_errno` and `si_code` (three `int`s:
        // `si_code` at byte 8), and for a fault `si_addr` (the faulting address) is the
        // pointer at byte 16, after padding.
        let (code, addr) = unsafe {
            (
                info.cast::<u8>().add(8).cast::<i32>().read(),
                info.cast::<u8>().add(16).cast::<u64>().read(),
            )
        };
        (code, (code == sys::SEGV_ACCERR).then_some(addr))
    };
    if let Some(addr) = addr {
        for slot in &TABLE {
            let (start, end) = (
                slot.start.load(Ordering::Acquire),
                slot.end.load(Ordering::Acquire),
            );
            if end == 0 || addr < start || addr >= end {
                continue;
            }
            let guard = slot.guard.load(Ordering::Acquire);
            if guard == UNGUARDED {
                // Lifted meanwhile, or left inaccessible by a lift that lost a race with a new
                // guard: the pages are made accessible (idempotent; at worst a race is missed)
                // and the access runs again, never a fault loop.
                sys::protect(start as usize, (end - start) as usize, sys::PROT_READ_WRITE);
                return;
            }
            let write = guard == READ_ONLY || fault_is_write(context);
            if !quiet(sys::thread_id()) {
                note(addr, write);
            }
            if !sys::protect(start as usize, (end - start) as usize, sys::PROT_READ_WRITE) {
                break;
            }
            slot.guard.store(UNGUARDED, Ordering::Release);
            return;
        }
    }
    let Some(previous) = PREVIOUS.get() else {
        return;
    };
    match previous.handler {
        // SIG_DFL, SIG_IGN: the previous action comes back; a fault happens again under it
        // when the access runs again, a signal a process sent (`si_code` ≤ 0) is sent again.
        0 | 1 => {
            sys::restore_action(signal, previous);
            if code <= 0 {
                sys::raise_signal(signal);
            }
        }
        handler if previous.flags & sys::SA_SIGINFO != 0 => {
            // SAFETY: the previous action was installed with SA_SIGINFO, so its handler is a
            // `void (*)(int, siginfo_t *, void *)`; it gets this signal's own arguments.
            let handler: extern "C" fn(c_int, *mut c_void, *mut c_void) =
                unsafe { std::mem::transmute::<usize, _>(handler) };
            handler(signal, info, context);
        }
        handler => {
            // SAFETY: without SA_SIGINFO the previous handler is a `void (*)(int)` (neither
            // SIG_DFL nor SIG_IGN, matched above).
            let handler: extern "C" fn(c_int) = unsafe { std::mem::transmute::<usize, _>(handler) };
            handler(signal);
        }
    }
}

/// The faults noted since the last call: `(address, write, thread)`.
pub(crate) fn take_notes() -> Vec<(u64, bool, i32)> {
    let mut notes = Vec::new();
    for note in &FAULTS {
        if note.state.load(Ordering::Acquire) == 2 {
            notes.push((
                note.addr.load(Ordering::Relaxed),
                note.write.load(Ordering::Relaxed) != 0,
                note.thread.load(Ordering::Relaxed),
            ));
            note.state.store(0, Ordering::Release);
        }
    }
    notes
}

/// The managed allocations a driver call may guard: slot by base address, with the pages'
/// length.
#[derive(Debug, Default)]
pub struct Watched {
    pub(crate) by_base: std::collections::HashMap<u64, (usize, u64)>,
    /// Slots guarded now.
    pub(crate) guarded: Vec<usize>,
}

impl Watched {
    /// Watches the managed allocation at `base` (`len` bytes of whole pages).
    pub fn watch(&mut self, base: u64, len: u64) {
        if !installed() {
            return;
        }
        if let Some(slot) = claim(base, len) {
            self.by_base.insert(base, (slot, len));
        }
    }

    /// Stops watching the allocation at `base` (freed).
    pub fn forget(&mut self, base: u64) {
        if let Some((slot, _)) = self.by_base.remove(&base) {
            self.guarded.retain(|&s| s != slot);
            release(slot);
        }
    }

    /// Whether the allocation at `base` is watched.
    pub fn contains(&self, base: u64) -> bool {
        self.by_base.contains_key(&base)
    }
}
