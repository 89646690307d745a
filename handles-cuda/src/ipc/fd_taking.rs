//! Taking a descriptor from another process without a socket: `pidfd_open` on the process,
//! then `pidfd_getfd` for the descriptor number it announced (Linux 5.6 or newer).
//!
//! Who may take from whom is in [`take_fd`]'s documentation, the public face of this file.

use std::os::fd::OwnedFd;

use rustix::process::{PTracer, Pid, PidfdFlags, PidfdGetfdFlags};

use crate::error::{Error, Result};

/// A duplicate of descriptor `fd` of process `pid`, taken with `pidfd_open` and `pidfd_getfd`:
/// for an exporter that announced its pid and a descriptor number (an IPC pool's, say) by
/// other means than a Unix socket. The new descriptor is close-on-exec; the exporter's is
/// untouched and must stay open until this returns.
///
/// # Who may take from whom
///
/// `pidfd_getfd` asks the kernel for the same rights as a debugger attaching to the process
/// (`PTRACE_MODE_ATTACH_REALCREDS`): the caller's real user and group ids must equal each of
/// the exporter's (real, effective and saved), its permitted capabilities must include the
/// exporter's, and the exporter must be dumpable; a caller with `CAP_SYS_PTRACE` passes all
/// three. On top of that, Yama's `kernel.yama.ptrace_scope` decides:
///
/// | `ptrace_scope` | who may take |
/// |---|---|
/// | 0 | any process of the same user |
/// | 1 (most distributions) | an ancestor of the exporter (a server that started its workers, say), or the one process the exporter named with [`allow_fd_taking_by`], or a holder of `CAP_SYS_PTRACE` |
/// | 2 | only holders of `CAP_SYS_PTRACE` |
/// | 3 | nobody |
///
/// A refusal is [`Error::FdTake`] with `EPERM`; a kernel without the calls gives `ENOSYS`, a
/// process that has exited `ESRCH`, and a descriptor number it has not open `EBADF`. Nothing
/// changes in the exporter: the taker gets a new descriptor for the same open file (as
/// `SCM_RIGHTS` would give), close-on-exec, and the exporter's stays open.
///
/// # Errors
///
/// [`Error::FdTake`] with the failing call and its errno: `ENOSYS` (Linux older than 5.6),
/// `EPERM` (no ptrace-attach rights over `pid`: see above for who may take from whom, and
/// [`allow_fd_taking_by`] for the exporter's opt-in), `ESRCH` (no such process), `EBADF` (no
/// such descriptor in it, or `fd` is negative), `EINVAL` (`pid` is 0 or above `i32::MAX`).
pub fn take_fd(pid: u32, fd: i32) -> Result<OwnedFd> {
    let failed = |call, errno: rustix::io::Errno| Error::FdTake {
        call,
        pid,
        fd,
        errno: errno.raw_os_error(),
    };
    let target = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or(Error::FdTake {
            call: "pidfd_open",
            pid,
            fd,
            errno: libc::EINVAL,
        })?;
    let pidfd = rustix::process::pidfd_open(target, PidfdFlags::empty())
        .map_err(|e| failed("pidfd_open", e))?;
    if fd < 0 {
        // The kernel's answer for a negative number, given without the call (rustix takes
        // only descriptor numbers that can exist).
        return Err(failed("pidfd_getfd", rustix::io::Errno::BADF));
    }
    rustix::process::pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty())
        .map_err(|e| failed("pidfd_getfd", e))
}

/// The exporter's opt-in under Yama's `ptrace_scope` 1: lets process `pid` (which need not be
/// an ancestor) take this process's descriptors with [`take_fd`], as if it were its parent
/// (`prctl(PR_SET_PTRACER, pid)`). One process at a time: a later call replaces it, and
/// [`disallow_fd_taking`] clears it. The other rules (same user, or `CAP_SYS_PTRACE`) still
/// apply.
///
/// Returns `Ok(true)` once registered, and `Ok(false)` on a kernel without Yama, where there
/// is no such restriction to lift.
///
/// # Errors
///
/// `prctl`'s error: `EINVAL` for a `pid` that is not a live process (with Yama present), or a
/// `pid` of 0 or above `i32::MAX`.
pub fn allow_fd_taking_by(pid: u32) -> std::io::Result<bool> {
    let tracer = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    set_ptracer(PTracer::ProcessID(tracer))
}

/// Clears what [`allow_fd_taking_by`] registered (`prctl(PR_SET_PTRACER, 0)`): only ancestors
/// may take again. `Ok(false)` on a kernel without Yama.
pub fn disallow_fd_taking() -> std::io::Result<bool> {
    set_ptracer(PTracer::None)
}

fn set_ptracer(tracer: PTracer) -> std::io::Result<bool> {
    match rustix::process::set_ptracer(tracer) {
        Ok(()) => Ok(true),
        // Without Yama, PR_SET_PTRACER is unknown to the kernel: nothing restricts taking.
        Err(rustix::io::Errno::INVAL) if !std::path::Path::new(YAMA).exists() => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

/// Where Yama's settings live when it is active.
const YAMA: &str = "/proc/sys/kernel/yama";
