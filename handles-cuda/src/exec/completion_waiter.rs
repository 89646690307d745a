//! The waiter thread: it polls the events of pending completions for their first moments, so
//! that a completion due soon resolves about as fast as a thread blocked in
//! `cuEventSynchronize` would return, instead of when the notifier's host function runs
//! (about 20 µs after the event on driver 580).
//!
//! A query answers for an event's most recent record, so the waiter polls an event only while
//! the record awaited is that one: [`EventHandle::record`] first hands the event's watches to
//! the notifier (whose stream wait names the record as of that moment), and an event that
//! can be recorded in other ways (by a graph's record node, or another process) is never
//! polled. A watch not resolved within [`POLL_FOR`] is handed to the notifier too, and the
//! thread parks once it has had nothing to poll for [`IDLE_SPIN`]: a long wait costs the CPU
//! at most those two spans.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::exec::completion_notifier::hand_over;
use crate::exec::completion_protocol::Shared;
use crate::exec::context::ContextHandle;
use crate::exec::event::{EventHandle, RERECORD};
use crate::sync::lock;

/// How long the waiter polls one completion's event before the notifier takes it over.
pub(crate) const POLL_FOR: Duration = Duration::from_micros(200);

/// How long the waiter spins with nothing to poll before it parks.
const IDLE_SPIN: Duration = Duration::from_micros(100);

/// A completion the waiter polls for.
struct Watch {
    event: EventHandle,
    context: ContextHandle,
    shared: Arc<Shared>,
    until: Instant,
}

/// The watches being polled. Taken by the waiter for each round of queries, and by a record
/// of a watched event, which hands its watches over before it is made.
static WATCHES: Mutex<Vec<Watch>> = Mutex::new(Vec::new());

/// Set when a watch is added, so that the idle waiter looks without taking the lock.
static ADDED: AtomicBool = AtomicBool::new(false);

/// The waiter thread, started by the first watch; `None` if it could not be started.
static WAITER: OnceLock<Option<std::thread::Thread>> = OnceLock::new();

/// Has the waiter poll `event` for `shared`; `false` if it does not (the event may be recorded
/// without notice, or no waiter thread could be started), and the caller hands it to the
/// notifier instead.
pub(crate) fn watch(event: &EventHandle, context: &ContextHandle, shared: &Arc<Shared>) -> bool {
    let Some(waiter) = WAITER.get_or_init(start) else {
        return false;
    };
    {
        let mut watches = lock(&WATCHES);
        if !(**event).record().records.watch() {
            return false;
        }
        watches.push(Watch {
            event: event.clone(),
            context: context.clone(),
            shared: Arc::clone(shared),
            until: Instant::now() + POLL_FOR,
        });
    }
    ADDED.store(true, Ordering::Release);
    waiter.unpark();
    true
}

/// Starts the waiter thread (named `handles-waiter`) and installs the hand-over that records run first.
fn start() -> Option<std::thread::Thread> {
    let _ = RERECORD.set(hand_over_watches_of);
    std::thread::Builder::new()
        .name("handles-waiter".into())
        .spawn(run)
        .ok()
        .map(|handle| handle.thread().clone())
}

/// The waiter's loop: a round of queries while there are watches, spinning a while when there
/// are none, then parking until a watch is added.
fn run() {
    let mut idle_since = Instant::now();
    loop {
        ADDED.store(false, Ordering::Relaxed);
        if poll_round() {
            idle_since = Instant::now();
            std::hint::spin_loop();
            continue;
        }
        if ADDED.load(Ordering::Acquire) {
            continue;
        }
        if idle_since.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
            continue;
        }
        std::thread::park();
        idle_since = Instant::now();
    }
}

/// One query of every watched event; resolves the completed ones, and hands over those past
/// their time (or whose completion was dropped: nothing awaits them, and they go). Returns
/// whether any watch is left.
fn poll_round() -> bool {
    let mut done = Vec::new();
    let mut woken = Vec::new();
    let left = {
        let mut watches = lock(&WATCHES);
        let now = Instant::now();
        let mut i = 0;
        while i < watches.len() {
            let watch = &watches[i];
            let dropped = Arc::strong_count(&watch.shared) == 1;
            let queried = if dropped {
                Ok(false)
            } else {
                watch.event.query()
            };
            let complete = matches!(queried, Ok(true));
            // An error of the query is the notifier's to meet: the watch is handed over.
            if dropped || complete || queried.is_err() || now >= watch.until {
                let watch = watches.swap_remove(i);
                if !complete && !dropped {
                    woken.extend(hand_over_or_keep(&watch));
                }
                // Unwatched only now, under the lock: a record of the event that saw the
                // watch waits for this lock, so it comes after the hand-over.
                (*watch.event).record().records.unwatch();
                done.push((watch, complete));
            } else {
                i += 1;
            }
        }
        !watches.is_empty()
    };
    // Dropped, then resolved and woken, after the lock: a waker and the last handles may run
    // any code. The waiter's handles go first, so a task that sees its completion resolved
    // finds nothing of its event kept here.
    for (watch, complete) in done {
        let Watch {
            event,
            context,
            shared,
            ..
        } = watch;
        drop((event, context));
        if complete {
            woken.extend(shared.complete());
        }
    }
    wake_all(woken);
    left
}

/// Hands `watch` to a notifier; if that fails, waits for the event here (its record cannot
/// change meanwhile: the caller holds the watches' lock) and returns the completion's waker
/// to wake after the lock. If even the wait fails, the completion is left pending (it never
/// resolves early) and the failure is reported.
fn hand_over_or_keep(watch: &Watch) -> Option<std::task::Waker> {
    let Err(error) = hand_over(&watch.event, &watch.context, &watch.shared) else {
        return None;
    };
    match watch.event.synchronize() {
        Ok(()) => watch.shared.complete(),
        Err(_) => {
            handles_core::report_release_failure("Completion", watch.event.as_cu() as isize, error);
            None
        }
    }
}

/// Wakes each task, each under `catch_unwind`: a waker's panic is reported, and the waiter
/// goes on.
fn wake_all(wakers: Vec<std::task::Waker>) {
    for waker in wakers {
        let woken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
        if let Err(payload) = woken {
            handles_core::report_panic("a completion's waker", 0, payload);
        }
    }
}

/// Run by a record of a watched event before it is made: hands its watches to the notifier.
fn hand_over_watches_of(event: &EventHandle) {
    hand_over_where(|watch| watch.event.ptr_eq(event));
}

/// Resolves or hands over every watch now (for `clear_notifiers`): afterwards the waiter keeps
/// nothing.
pub(crate) fn settle() {
    hand_over_where(|_| true);
}

/// Hands the watches `pick` selects to the notifier, under the watches' lock (no record of
/// their events can come between); they are dropped, and any completion resolved here woken,
/// after it.
fn hand_over_where(pick: impl FnMut(&mut Watch) -> bool) {
    let mut woken = Vec::new();
    let handed: Vec<Watch> = {
        let mut watches = lock(&WATCHES);
        let handed: Vec<Watch> = watches.extract_if(.., pick).collect();
        for watch in &handed {
            woken.extend(hand_over_or_keep(watch));
            (*watch.event).record().records.unwatch();
        }
        handed
    };
    drop(handed);
    wake_all(woken);
}
