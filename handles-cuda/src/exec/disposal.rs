//! The disposal thread: values whose drop must not run where they are let go (in a driver
//! callback, or while a thread's locals are torn down) are dropped there instead, each under
//! `catch_unwind`.
//!
//! What is queued is counted, so that the queue can be flushed ([`flush_disposals`]: wait until
//! everything queued before the call is dropped) and so that nothing is lost at exit: the first
//! value queued registers an `atexit` handler that flushes the queue when the process exits
//! (`main` returns or `exit` is called), and reports whatever could not be dropped in time as
//! a leak. A host function ends (so a `synchronize` returns) before its captures are dropped:
//! without the flush, a program that synchronises, drops its handles and returns from `main`
//! would exit with them still queued, unreported.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Something to drop on the disposal thread.
pub(crate) type Disposal = Box<dyn Send + 'static>;

/// How long the exit handler waits for the queue before it reports what is left as leaked.
#[cfg_attr(miri, allow(dead_code))]
const AT_EXIT_PATIENCE: Duration = Duration::from_secs(10);

/// The disposal thread: its channel, its id, and the counts of what was queued and dropped.
struct Thread {
    sender: Mutex<Sender<Disposal>>,
    id: ThreadId,
    counts: Mutex<Counts>,
    dropped: Condvar,
}

/// Values queued and values dropped since the thread started.
#[derive(Clone, Copy)]
struct Counts {
    queued: u64,
    dropped: u64,
}

/// The disposal thread; `None` if it could not be started.
static DISPOSAL: OnceLock<Option<Thread>> = OnceLock::new();

/// The disposal thread, started on first use.
fn thread() -> Option<&'static Thread> {
    DISPOSAL
        .get_or_init(|| {
            let (sender, receiver) = channel::<Disposal>();
            let handle = std::thread::Builder::new()
                .name("handles-cuda-disposal".into())
                .spawn(move || {
                    for value in receiver {
                        drop_one(value);
                    }
                })
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
                    dropped: 0,
                }),
                dropped: Condvar::new(),
            })
        })
        .as_ref()
}

/// Drops one value on the disposal thread, as the only handle of whatever it holds; a panicking
/// `Drop` must not end the thread. Then counts it.
fn drop_one(value: Disposal) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        handles_core::report_panic("a value dropped on the disposal thread", 0, payload);
    }
    if let Some(Some(thread)) = DISPOSAL.get() {
        lock(&thread.counts).dropped += 1;
        thread.dropped.notify_all();
    }
}

/// Drops `value` on the disposal thread, never in the caller (a host function, say). If the thread
/// cannot be started (the system refuses a thread), the value is leaked and the leak reported.
pub(crate) fn dispose(value: Disposal) {
    let refused = match thread() {
        Some(thread) => {
            // Counted before it is sent, under the lock the count is read with, so a flush
            // never misses a value queued before it.
            let mut counts = lock(&thread.counts);
            match lock(&thread.sender).send(value) {
                Ok(()) => {
                    counts.queued += 1;
                    None
                }
                Err(refused) => Some(refused.0),
            }
        }
        None => Some(value),
    };
    if let Some(value) = refused {
        std::mem::forget(value);
        handles_core::report_panic(
            "a value for the disposal thread (leaked: no disposal thread)",
            0,
            Box::new("the disposal thread could not be started"),
        );
    }
}

/// Blocks until every value handed to this crate's disposal thread before the call has been
/// dropped: what host functions captured (a stream's `launch_host` closure, after it ran, and
/// its panic payload), the wakers of event completions, and the contexts threads left bound
/// when they exited. A host function ends before its captures are dropped, so after a
/// `synchronize` they may still be alive; this waits for them. Returns `true` if the queue was
/// flushed, `false` if `timeout` passed first (or if called on the disposal thread itself,
/// which would wait for itself).
///
/// The crate also flushes the queue when the process exits, and reports anything left then.
pub fn flush_disposals(timeout: Duration) -> bool {
    let Some(Some(thread)) = DISPOSAL.get() else {
        return true;
    };
    if std::thread::current().id() == thread.id {
        return false;
    }
    let deadline = Instant::now() + timeout;
    let mut counts = lock(&thread.counts);
    let target = counts.queued;
    while counts.dropped < target {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        counts = thread
            .dropped
            .wait_timeout(counts, left)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
    true
}

/// The `atexit` handler: flushes the queue, and reports what is still queued as a leak.
#[cfg_attr(miri, allow(dead_code))]
extern "C" fn flush_at_exit() {
    let _ = catch_unwind(|| {
        if flush_disposals(AT_EXIT_PATIENCE) {
            return;
        }
        let Some(Some(thread)) = DISPOSAL.get() else {
            return;
        };
        let counts = *lock(&thread.counts);
        let left = counts.queued.saturating_sub(counts.dropped);
        if left > 0 {
            handles_core::report_panic(
                "values on the disposal thread at exit (leaked)",
                left as isize,
                Box::new(format!(
                    "{left} value(s) handed to the disposal thread were not dropped before the \
                     process exited"
                )),
            );
        }
    });
}
