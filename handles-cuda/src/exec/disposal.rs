//! The disposal thread: values whose drop must not run where they are let go (in a driver
//! callback, or while a thread's locals are torn down) are dropped there instead, each under
//! `catch_unwind`; and releases that must wait for the device ([`Deferred`]: a pool whose
//! memory's frees are still queued) are tried there, polled until they can run, so that no
//! dropping thread blocks on work it does not own.
//!
//! What is queued is counted, so that the queue can be flushed ([`flush_disposals`]: wait until
//! everything queued before the call is dropped or released) and so that nothing is lost at
//! exit: the first value queued registers an `atexit` handler that flushes the queue when the
//! process exits (`main` returns or `exit` is called), and reports whatever could not be
//! dropped or released in time as a leak. A host function ends (so a `synchronize` returns)
//! before its captures are dropped: without the flush, a program that synchronises, drops its
//! handles and returns from `main` would exit with them still queued, unreported.
//!
//! A deferred release is polled, not waited for: the thread keeps dropping values while one
//! waits, so a release whose wait depends on a later disposal does not deadlock it (a pool's
//! one fallback still blocks the thread: a stream no marker could be recorded on is waited
//! for). It polls at most every
//! [`MAX_PAUSE`], starting at [`MIN_PAUSE`] after each new release.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use cudarc::driver::sys;

use crate::driver::capture::in_capture_closure;
use crate::error::{Error, Result};
use crate::sync::lock;

/// Something to drop on the disposal thread.
pub(crate) type Disposal = Box<dyn Send + 'static>;

/// A release that must wait until the device has finished some work, tried on the disposal
/// thread until it is done.
pub(crate) trait Deferred: Send + 'static {
    /// Releases the resource if the work it waits for has finished, and says whether the
    /// release is over: `true` once it ran, or failed and was reported (then nothing is tried
    /// again); `false` to be tried again later. Should not block on the device: every other
    /// disposal waits meanwhile.
    fn try_release(&mut self) -> bool;

    /// Whether the release gives memory back to the driver (a pool's destruction, a free that
    /// waited for a capture to end): an allocation the driver refuses for memory waits for
    /// these ([`retry_refused_memory`]), and for nothing else queued.
    fn gives_memory(&self) -> bool {
        false
    }
}

/// What the disposal thread is handed.
enum Job {
    Drop(Disposal),
    Release(Box<dyn Deferred>),
}

/// The first pause between polls of waiting releases, doubled up to [`MAX_PAUSE`] while none
/// finishes.
const MIN_PAUSE: Duration = Duration::from_micros(20);
/// The longest pause between polls of waiting releases.
const MAX_PAUSE: Duration = Duration::from_millis(2);

/// How long the exit handler waits for the queue before it reports what is left as leaked.
#[cfg_attr(miri, allow(dead_code))]
const AT_EXIT_PATIENCE: Duration = Duration::from_secs(10);

/// How long, in all, a call the driver refused for memory waits for queued releases to give
/// memory back ([`retry_refused_memory`]).
const MEMORY_PATIENCE: Duration = Duration::from_secs(2);

/// The disposal thread: its channel, its id, and the counts of what was queued and done.
struct Thread {
    sender: Mutex<Sender<Job>>,
    id: ThreadId,
    counts: Mutex<Counts>,
    progress: Condvar,
}

/// What the thread was handed and what it has done, for [`flush_disposals`]. Jobs are numbered
/// in the order they are queued, which is the order the thread takes them in; drops finish in
/// that order, releases may finish later and out of order.
struct Counts {
    /// Jobs queued since the thread started (the next job's number).
    queued: u64,
    /// Jobs taken and handled: every job numbered below this was dropped, or is a release in
    /// `waiting` or over.
    taken: u64,
    /// The numbers of releases taken and not over yet.
    waiting: BTreeSet<u64>,
    /// Releases that give memory back ([`Deferred::gives_memory`]) queued and not over.
    memory_left: u64,
    /// Such releases over since the thread started.
    memory_done: u64,
}

impl Counts {
    /// Whether every job numbered below `target` is done.
    fn done_below(&self, target: u64) -> bool {
        self.taken >= target && self.waiting.range(..target).next().is_none()
    }

    /// Jobs queued and not done.
    fn left(&self) -> u64 {
        self.queued.saturating_sub(self.taken) + self.waiting.len() as u64
    }
}

impl Thread {
    /// Waits, with `counts` locked, until `over` holds of them (`true`) or `deadline` passes
    /// (`false`); no deadline waits as long as it takes.
    fn wait_for(
        &self,
        mut counts: MutexGuard<'_, Counts>,
        deadline: Option<Instant>,
        over: impl Fn(&Counts) -> bool,
    ) -> bool {
        while !over(&counts) {
            let left = deadline.map_or(Duration::from_secs(3600), |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                return false;
            }
            counts = self
                .progress
                .wait_timeout(counts, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        true
    }
}

/// The disposal thread; `None` if it could not be started.
static DISPOSAL: OnceLock<Option<Thread>> = OnceLock::new();

/// The disposal thread, started on first use.
fn thread() -> Option<&'static Thread> {
    DISPOSAL
        .get_or_init(|| {
            let (sender, receiver) = channel::<Job>();
            let handle = std::thread::Builder::new()
                .name("handles-cuda-disposal".into())
                .spawn(move || serve(receiver))
                .ok()?;
            // Registered once the driver is in use (only what a driver call made is queued), so
            // after the driver's own exit handlers and run before them: the queue is flushed
            // while the driver still works.
            // Miri has no `atexit`; its runs of the hand-off test everything but the exit hook.
            #[cfg(not(miri))]
            // SAFETY: `flush_at_exit` is an `extern "C" fn()` that never unwinds (it catches).
            let _ = unsafe { libc::atexit(flush_at_exit) };
            Some(Thread {
                sender: Mutex::new(sender),
                id: handle.thread().id(),
                counts: Mutex::new(Counts {
                    queued: 0,
                    taken: 0,
                    waiting: BTreeSet::new(),
                    memory_left: 0,
                    memory_done: 0,
                }),
                progress: Condvar::new(),
            })
        })
        .as_ref()
}

/// The disposal thread's loop: drops what it is handed, and polls the waiting releases
/// between jobs (blocking for the next job only while none waits). Ends when every sender is
/// gone and nothing waits.
fn serve(receiver: Receiver<Job>) {
    // What it drops and releases calls the driver (frees, queries, markers): never refused by,
    // nor invalidating, a global-mode capture of another thread. Miri has no driver.
    #[cfg(not(miri))]
    crate::driver::capture::relax_this_thread_for_good();
    let mut waiting: Vec<(u64, Box<dyn Deferred>)> = Vec::new();
    let mut pause = MIN_PAUSE;
    let mut open = true;
    loop {
        let job = if waiting.is_empty() {
            match receiver.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        } else if open {
            match receiver.recv_timeout(pause) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    None
                }
            }
        } else {
            std::thread::sleep(pause);
            None
        };
        match job {
            Some(Job::Drop(value)) => {
                caught("a value dropped on the disposal thread", || drop(value));
                counted(|counts| counts.taken += 1);
            }
            Some(Job::Release(release)) => {
                let number = counted(|counts| {
                    counts.waiting.insert(counts.taken);
                    counts.taken += 1;
                    counts.taken - 1
                });
                waiting.push((number.unwrap_or(0), release));
                pause = MIN_PAUSE;
            }
            None => pause = (pause * 2).min(MAX_PAUSE),
        }
        let mut i = 0;
        while i < waiting.len() {
            let release = &mut waiting[i].1;
            // A release that panics is over: it is reported and never tried again.
            let over = caught("a release on the disposal thread", || release.try_release())
                .unwrap_or(true);
            if over {
                let (number, release) = waiting.swap_remove(i);
                let memory = u64::from(release.gives_memory());
                caught("a release on the disposal thread", || drop(release));
                counted(|counts| {
                    counts.memory_left = counts.memory_left.saturating_sub(memory);
                    counts.memory_done += memory;
                    counts.waiting.remove(&number)
                });
            } else {
                i += 1;
            }
        }
    }
}

/// Runs `step` under `catch_unwind`: a panicking `Drop` or release must not end the thread. A
/// panic is reported, naming `what`, and gives `None`.
fn caught<T>(what: &'static str, step: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(step)) {
        Ok(value) => Some(value),
        Err(payload) => {
            handles_core::report_panic(what, 0, payload);
            None
        }
    }
}

/// Updates the counts (a job taken, a release over) and wakes the flushes waiting on them.
fn counted<T>(update: impl FnOnce(&mut Counts) -> T) -> Option<T> {
    let Some(Some(thread)) = DISPOSAL.get() else {
        return None;
    };
    let updated = update(&mut lock(&thread.counts));
    thread.progress.notify_all();
    Some(updated)
}

/// Drops `value` on the disposal thread, never in the caller (a host function, say). If the thread
/// cannot be started (the system refuses a thread), the value is leaked and the leak reported.
pub(crate) fn dispose(value: Disposal) {
    hand_over(Job::Drop(value));
}

/// Hands `release` to the disposal thread, which tries it until it is over (see [`Deferred`]).
/// If the thread cannot be started, the resource is leaked and the leak reported.
pub(crate) fn defer(release: Box<dyn Deferred>) {
    hand_over(Job::Release(release));
}

fn hand_over(job: Job) {
    let memory = matches!(&job, Job::Release(release) if release.gives_memory());
    let refused = match thread() {
        Some(thread) => {
            // Counted before it is sent, under the lock the count is read with, so a flush
            // never misses a job queued before it.
            let mut counts = lock(&thread.counts);
            match lock(&thread.sender).send(job) {
                Ok(()) => {
                    counts.queued += 1;
                    counts.memory_left += u64::from(memory);
                    None
                }
                Err(refused) => Some(refused.0),
            }
        }
        None => Some(job),
    };
    if let Some(job) = refused {
        std::mem::forget(job);
        handles_core::report_panic(
            "a value for the disposal thread (leaked: no disposal thread)",
            0,
            Box::new("the disposal thread could not be started"),
        );
    }
}

/// Blocks until every value handed to this crate's disposal thread before the call has been
/// dropped or released: what host functions captured (a stream's `launch_host` closure, after
/// it ran, and its panic payload), the wakers of event completions, the contexts threads left
/// bound when they exited, the pools whose destruction waits for their memory's frees, and the
/// releases that wait for whole contexts made while a capture ran (which wait for no capture
/// to run: called inside a capture's closure after one, it returns `false` at the timeout). A
/// host function ends before its captures are dropped, so after a `synchronize` they may still
/// be alive; this waits for them. Returns `true` if the queue was
/// flushed, `false` if `timeout` passed first (or if called on the disposal thread itself,
/// which would wait for itself). Called in a host function, it waits in vain for what is
/// queued behind that host function (a pool whose free waits on its stream): give it a
/// timeout there.
///
/// The crate also flushes the queue when the process exits, and reports anything left then.
pub fn flush_disposals(timeout: Duration) -> bool {
    let Some(Some(thread)) = DISPOSAL.get() else {
        return true;
    };
    if std::thread::current().id() == thread.id {
        return false;
    }
    // A timeout too long to add to now waits without a deadline.
    let deadline = Instant::now().checked_add(timeout);
    let counts = lock(&thread.counts);
    let target = counts.queued;
    thread.wait_for(counts, deadline, |counts| counts.done_below(target))
}

/// Runs `call`, which asks the driver for memory. While the driver refuses it
/// (`CUDA_ERROR_OUT_OF_MEMORY`) and a release that gives memory back ([`Deferred::gives_memory`])
/// ends, it is called again, for at most [`MEMORY_PATIENCE`] in all: a dropped pool gives its
/// memory back only when the disposal thread destroys it, once the frees of its memory ran,
/// and memory dropped while a capture ran is freed there once none runs. The refusal is
/// returned at once when no such release is pending (on any device: one pending elsewhere
/// makes a refusal wait until it ends, at most the patience), inside a capture's closure
/// (what it would wait for may need the capture to end), and on the disposal thread itself.
#[inline(always)]
pub(crate) fn retry_refused_memory<T>(mut call: impl FnMut() -> Result<T>) -> Result<T> {
    match call() {
        Err(error) => retry_after_refusal(error, call),
        done => done,
    }
}

/// [`retry_refused_memory`] after the first call failed with `refused`: other errors are
/// returned at once. For a hot path that tests its own call's failure first.
#[cold]
#[inline(never)]
pub(crate) fn retry_after_refusal<T>(
    mut refused: Error,
    mut call: impl FnMut() -> Result<T>,
) -> Result<T> {
    let is_out_of_memory =
        |error: &Error| error.code() == Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    if !is_out_of_memory(&refused) {
        return Err(refused);
    }
    let deadline = Instant::now() + MEMORY_PATIENCE;
    while memory_given_back_before(deadline) {
        match call() {
            Err(error) if is_out_of_memory(&error) => refused = error,
            done => return done,
        }
    }
    Err(refused)
}

/// Waits until a release that gives memory back is over (run, or given up), or `deadline`
/// passes: `true` if one is. `false` at once when none is pending, inside a capture's closure,
/// and on the disposal thread itself, which would wait for itself.
fn memory_given_back_before(deadline: Instant) -> bool {
    let Some(Some(thread)) = DISPOSAL.get() else {
        return false;
    };
    if std::thread::current().id() == thread.id || in_capture_closure() {
        return false;
    }
    let counts = lock(&thread.counts);
    let done = counts.memory_done;
    if counts.memory_left == 0 {
        return false;
    }
    thread.wait_for(counts, Some(deadline), |counts| counts.memory_done != done)
}

/// The `atexit` handler: flushes the queue, and reports what is still queued as a leak.
#[cfg_attr(miri, allow(dead_code))]
extern "C" fn flush_at_exit() {
    let _ = catch_unwind(|| {
        let Some(Some(thread)) = DISPOSAL.get() else {
            return;
        };
        // A value dropped during a flush may hand over more (a pool its last pointer kept):
        // flushed again until nothing is left or the patience is spent.
        let deadline = Instant::now() + AT_EXIT_PATIENCE;
        while lock(&thread.counts).left() > 0 {
            let patience = deadline.saturating_duration_since(Instant::now());
            if patience.is_zero() || !flush_disposals(patience) {
                break;
            }
        }
        let left = lock(&thread.counts).left();
        if left > 0 {
            handles_core::report_panic(
                "values on the disposal thread at exit (leaked)",
                left as isize,
                Box::new(format!(
                    "{left} value(s) handed to the disposal thread were not dropped or released \
                     before the process exited"
                )),
            );
        }
    });
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use super::{Deferred, defer, dispose, flush_disposals};

    /// Held by the unit tests that report through the process-wide report hook, or install
    /// one: one at a time, so that none sees another's reports.
    pub(crate) static REPORT_HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Released once `ready` is set; counts its tries and its release.
    struct Gated {
        ready: Arc<AtomicBool>,
        tries: Arc<AtomicUsize>,
        released: Arc<AtomicBool>,
    }

    impl Deferred for Gated {
        fn try_release(&mut self) -> bool {
            self.tries.fetch_add(1, Ordering::SeqCst);
            if !self.ready.load(Ordering::SeqCst) {
                return false;
            }
            self.released.store(true, Ordering::SeqCst);
            true
        }

        fn gives_memory(&self) -> bool {
            true
        }
    }

    /// A deferred release is tried until it is over, a flush waits for it, and values handed
    /// over while it waits are still dropped (the thread polls, never blocks on it).
    #[test]
    fn a_deferred_release_is_polled_and_flushed_without_holding_up_drops() {
        let ready = Arc::new(AtomicBool::new(false));
        let tries = Arc::new(AtomicUsize::new(0));
        let released = Arc::new(AtomicBool::new(false));
        defer(Box::new(Gated {
            ready: Arc::clone(&ready),
            tries: Arc::clone(&tries),
            released: Arc::clone(&released),
        }));
        let dropped = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        dispose(Box::new(Flag(Arc::clone(&dropped))));
        while !dropped.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        assert!(!flush_disposals(Duration::from_millis(20)));
        assert!(!released.load(Ordering::SeqCst));
        assert!(tries.load(Ordering::SeqCst) >= 1);
        ready.store(true, Ordering::SeqCst);
        assert!(flush_disposals(Duration::from_secs(60)));
        assert!(released.load(Ordering::SeqCst));
    }

    /// A call refused for memory is called again once a release queued before it is over, and
    /// not before; any other error is returned at once, from the one call.
    #[test]
    fn a_refusal_for_memory_is_retried_once_a_queued_release_is_over() {
        use crate::error::Error;
        use cudarc::driver::sys::CUresult;
        let refusal = |code| Error::Driver {
            call: "cuMemAllocFromPoolAsync",
            code,
            name: "a test's refusal",
        };
        let calls = AtomicUsize::new(0);
        let other = super::retry_refused_memory(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(refusal(CUresult::CUDA_ERROR_INVALID_VALUE))
        });
        assert_eq!(
            other.unwrap_err().code(),
            Some(CUresult::CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let (ready, released) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        defer(Box::new(Gated {
            ready: Arc::clone(&ready),
            tries: Arc::new(AtomicUsize::new(0)),
            released: Arc::clone(&released),
        }));
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ready.store(true, Ordering::SeqCst);
        });
        calls.store(0, Ordering::SeqCst);
        let retried = super::retry_refused_memory(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            match released.load(Ordering::SeqCst) {
                true => Ok(()),
                false => Err(refusal(CUresult::CUDA_ERROR_OUT_OF_MEMORY)),
            }
        });
        opener.join().unwrap();
        assert!(retried.is_ok(), "refused after the release: {retried:?}");
        assert!(calls.load(Ordering::SeqCst) >= 2);
    }

    /// A release that panics is over: the thread goes on, and a flush does not wait for it.
    #[test]
    fn a_panicking_release_ends_and_is_counted() {
        let _hook = REPORT_HOOK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        struct Panics;
        impl Deferred for Panics {
            fn try_release(&mut self) -> bool {
                panic!("a release that panics");
            }
        }
        defer(Box::new(Panics));
        assert!(flush_disposals(Duration::from_secs(60)));
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&dropped);
        defer(Box::new(Gated {
            ready: Arc::new(AtomicBool::new(true)),
            tries: Arc::new(AtomicUsize::new(0)),
            released: flag,
        }));
        assert!(flush_disposals(Duration::from_secs(60)));
        assert!(dropped.load(Ordering::SeqCst));
    }
}
