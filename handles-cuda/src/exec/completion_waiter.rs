//! The waiter thread: it polls the events of pending completions for their first moments, so
//! that a completion due soon resolves about as fast as a thread blocked in
//! `cuEventSynchronize` would return, instead of when the notifier's host function runs
//! (about 20 µs after the event on driver 580).
//!
//! A query answers for an event's most recent record, so the waiter polls an event only while
//! the record awaited is that one: [`EventHandle::record`] first hands the event's watches to
//! the notifier (whose stream wait names the record as of that moment), and an event that
//! can be recorded in other ways (by a graph's record node, or another process) is never
//! polled. A watch not resolved within [`POLL_FOR`] is handed to the notifier too, while its
//! context has fewer than `BUSY_NOTIFIERS_PER_CONTEXT` notifiers waiting; beyond that the
//! waiter goes on polling it, less and less often (a quarter of its age apart, at most
//! [`LONGEST_GAP`]; at most [`WAITING_POLLS`] polls a second for all of them together, but
//! never more than its age apart; on a grid that makes watches of about one age due
//! together), and parks between polls. A watch whose completion is dropped is let go of at
//! the next round. The thread parks once it has had nothing to poll for [`IDLE_SPIN`]: a long
//! wait costs the CPU at most those spans and a few polls.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::exec::completion_notifier::{Room, hand_over};
use crate::exec::completion_protocol::Shared;
use crate::exec::context::ContextHandle;
use crate::exec::event::{EventHandle, RERECORD};
use crate::exec::spin_credit::SpinCredit;
use crate::sync::lock;

/// How long the waiter polls one completion's event before the notifier takes it over.
pub(crate) const POLL_FOR: Duration = Duration::from_micros(200);

/// The longest gap between two polls of a watch that waits for room at the notifier.
pub(crate) const LONGEST_GAP: Duration = Duration::from_millis(5);

/// The most polls a second of all the watches waiting for room at the notifier together: with
/// more of them, each is polled less often (a query costs 0.1–0.3 µs on an H100, so they take
/// a few percent of a core at most).
const WAITING_POLLS: u32 = 50_000;

/// The shortest gap for which the waiter parks until the next poll rather than spinning.
const PARK_FROM: Duration = Duration::from_micros(50);

/// How long the waiter spins with nothing to poll before it parks.
const IDLE_SPIN: Duration = Duration::from_micros(100);

/// How long a completion's first poll spins on its state, while the waiter polls the event,
/// before it parks its task: a wait this short resolves on the polling thread itself, with no
/// wake-up of a parked thread (a blocking `cuEventSynchronize` of a short memset takes about
/// 7 µs on an H200, 11 µs at p99).
pub(crate) const SPIN_FOR: Duration = Duration::from_micros(20);

/// Whether first polls spin: completions resolved within [`SPIN_FOR`] earn credit, spins that
/// saw nothing resolve spend it.
#[cfg(not(handles_cuda_loom))]
pub(crate) static SPIN_CREDIT: SpinCredit = SpinCredit::new();
/// As above; loom's atomics (`--cfg handles_cuda_loom`, for the models of single files) have
/// no `const` constructor.
#[cfg(handles_cuda_loom)]
pub(crate) static SPIN_CREDIT: std::sync::LazyLock<SpinCredit> =
    std::sync::LazyLock::new(SpinCredit::new);

/// A completion the waiter polls for.
struct Watch {
    event: EventHandle,
    context: ContextHandle,
    shared: Arc<Shared>,
    /// When the watch began, and when it is polled next.
    since: Instant,
    next: Instant,
}

/// The watches being polled. Taken by the waiter for each round of queries, and by a record
/// of a watched event, which hands its watches over before it is made.
static WATCHES: Mutex<Vec<Watch>> = Mutex::new(Vec::new());

/// Watches added since the waiter's last round: [`watch`] adds here, under a lock the waiter
/// holds only to move them into [`WATCHES`], so adding a watch never waits for a round of
/// queries. (The waiter takes `WATCHES` again as soon as a round ends; a thread blocked on it
/// waited for the last watch to expire: on an H100, 10,000 completions took 219 µs each to
/// queue.) Whoever holds both takes `WATCHES` first.
static INCOMING: Mutex<Vec<Watch>> = Mutex::new(Vec::new());

/// Threads waiting for [`WATCHES`] to hand watches over (a record of a watched event,
/// `clear_notifiers`): the waiter leaves the lock free between rounds until none is.
static WAITING_FOR_WATCHES: AtomicUsize = AtomicUsize::new(0);

/// Set when a watch is added, so that the idle waiter looks without taking the lock.
static ADDED: AtomicBool = AtomicBool::new(false);

/// The waiter thread, started by the first watch; `None` if it could not be started.
static WAITER: OnceLock<Option<std::thread::Thread>> = OnceLock::new();

/// Has the waiter poll `event` for `shared` from `since` (now); `false` if it does not (the
/// event may be recorded without notice, or no waiter thread could be started), and the
/// caller hands it to the notifier instead.
pub(crate) fn watch(
    event: &EventHandle,
    context: &ContextHandle,
    shared: &Arc<Shared>,
    since: Instant,
) -> bool {
    let Some(waiter) = WAITER.get_or_init(start) else {
        return false;
    };
    {
        let mut incoming = lock(&INCOMING);
        if !(**event).record().records.watch() {
            return false;
        }
        incoming.push(Watch {
            event: event.clone(),
            context: context.clone(),
            shared: Arc::clone(shared),
            since,
            next: since,
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

/// The waiter's loop: a round of queries while there are watches, spinning while one is due
/// within [`PARK_FROM`] and parking until the next is due otherwise; spinning a while when
/// there are none, then parking until a watch is added. A waker run here may have left a
/// primary context current and cached on this thread (an event made by the task it ran): the
/// cache is cleared after each round, as no other code could clear it.
fn run() {
    crate::driver::capture::relax_this_thread_for_good();
    let mut idle_since = Instant::now();
    loop {
        ADDED.store(false, Ordering::Relaxed);
        let next = poll_round();
        crate::exec::context::clear_primary_cache();
        // A thread waiting to hand watches over gets the lock before the next round.
        while WAITING_FOR_WATCHES.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
        if let Some(next) = next {
            idle_since = Instant::now();
            let wait = next.saturating_duration_since(idle_since);
            if wait >= PARK_FROM && !ADDED.load(Ordering::Acquire) {
                // Woken early by a watch added meanwhile (`watch` unparks).
                std::thread::park_timeout(wait);
            } else {
                std::hint::spin_loop();
            }
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

/// Held by a round of the waiter from before it takes its watches until it has dropped their
/// handles, and by [`settle`]: `clear_notifiers` returns only once no round holds any handle.
static ROUND: Mutex<()> = Mutex::new(());

/// What became of a watch taken out of the list, for after the watches' lock.
enum Outcome {
    /// Its event completed (or the hand-over's fallback wait returned): resolve it.
    Resolve,
    /// Handed to a notifier, or dropped by its task: nothing more to do.
    Nothing,
    /// Neither the hand-over nor the wait worked: left pending, and reported.
    Report(crate::error::Error),
    /// No room at the notifier: the waiter goes on polling it.
    Waiting,
}

/// One query of every watched event that is due; resolves the completed ones, hands over
/// those past their first moments while there is room at the notifier (and lets go of those
/// whose completion was dropped, due or not: nothing awaits them), and sets when the others
/// are polled next. Returns when the next watch is due, if any is left.
fn poll_round() -> Option<Instant> {
    let round = lock(&ROUND);
    let mut done = Vec::new();
    let next = {
        let mut watches = lock(&WATCHES);
        watches.append(&mut lock(&INCOMING));
        let now = Instant::now();
        // Watches waiting for room are polled at most `WAITING_POLLS` times a second in all.
        let waiting = watches
            .iter()
            .filter(|watch| watch.next > watch.since)
            .count();
        let spacing = Duration::from_secs(1) / WAITING_POLLS * waiting as u32;
        // Contexts found with no room this round: not asked again until the next.
        let mut full: Vec<usize> = Vec::new();
        let mut next: Option<Instant> = None;
        let mut i = 0;
        while i < watches.len() {
            let watch = &mut watches[i];
            let dropped = Arc::strong_count(&watch.shared) == 1;
            if !dropped && watch.next > now {
                next = Some(next.map_or(watch.next, |next| next.min(watch.next)));
                i += 1;
                continue;
            }
            let queried = if dropped {
                Ok(false)
            } else {
                watch.event.query()
            };
            let complete = matches!(queried, Ok(true));
            if complete && now < watch.since + SPIN_FOR {
                SPIN_CREDIT.earn();
            }
            let age = now.saturating_duration_since(watch.since);
            let context = watch.context.as_cu() as usize;
            // An error of the query is the notifier's to meet: the watch is handed over.
            let outcome = if complete {
                Some(Outcome::Resolve)
            } else if dropped {
                Some(Outcome::Nothing)
            } else if queried.is_err() {
                Some(hand_over_or_wait(watch, Room::Beyond))
            } else if age >= POLL_FOR && !full.contains(&context) {
                match hand_over_or_wait(watch, Room::Within) {
                    Outcome::Waiting => {
                        full.push(context);
                        None
                    }
                    outcome => Some(outcome),
                }
            } else {
                None
            };
            match outcome {
                Some(outcome) => {
                    let watch = watches.swap_remove(i);
                    // Unwatched only now, under the lock: a record of the event that saw the
                    // watch waits for this lock, so it comes after the hand-over.
                    (*watch.event).record().records.unwatch();
                    done.push((watch, outcome));
                }
                None => {
                    // Polled again at once in its first moments; then, with no room at the
                    // notifier, a quarter of its age later (at most `LONGEST_GAP`), or later
                    // still when many wait, but never more than its age later (so a young
                    // watch is polled a few times before the spacing applies), on a grid
                    // shared with watches of about its age.
                    if age >= POLL_FOR {
                        let gap = (age / 4).min(LONGEST_GAP).max(spacing.min(age));
                        watch.next = on_grid(now + gap);
                    }
                    next = Some(next.map_or(watch.next, |next| next.min(watch.next)));
                    i += 1;
                }
            }
        }
        next
    };
    finish(done, Some(round));
    next
}

/// `at` rounded up to a grid whose step is the largest power of two of nanoseconds within
/// half its distance from now, at least 1 µs: watches of about the same age then fall due
/// together and are polled in one round, so the waiter wakes about as often for a thousand
/// of them as for one.
fn on_grid(at: Instant) -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    if at <= origin {
        return at;
    }
    let now = Instant::now();
    let half = at.saturating_duration_since(now).as_nanos() / 2;
    let step = match half.checked_ilog2() {
        Some(bits) => (1u128 << bits).max(1024),
        None => 1024,
    };
    let offset = at.saturating_duration_since(origin).as_nanos();
    let rounded = u64::try_from(offset.div_ceil(step) * step).unwrap_or(u64::MAX);
    origin
        .checked_add(Duration::from_nanos(rounded))
        .unwrap_or(at)
}

/// Hands `watch` to a notifier (`Waiting` if `room` allows none now); if that fails, waits
/// for the event here (its record cannot change meanwhile: the caller holds the watches'
/// lock). If even the wait fails, the completion is left pending (it never resolves early) and
/// the failure is to be reported.
fn hand_over_or_wait(watch: &Watch, room: Room) -> Outcome {
    match hand_over(&watch.event, &watch.context, &watch.shared, room) {
        Ok(true) => Outcome::Nothing,
        Ok(false) => Outcome::Waiting,
        Err(error) => match watch.event.synchronize() {
            Ok(()) => Outcome::Resolve,
            Err(_) => Outcome::Report(error),
        },
    }
}

/// After the watches' lock: drops each watch's handles (the waiter's go before a completion
/// resolves, so a task that sees it resolved by the waiter finds nothing of its event kept
/// here), ends the round, then resolves, reports and wakes (a report hook and a waker may run
/// any code, and each waker runs under `catch_unwind`: a panic is reported, the waiter goes
/// on).
fn finish(done: Vec<(Watch, Outcome)>, round: Option<std::sync::MutexGuard<'_, ()>>) {
    let mut after = Vec::new();
    for (watch, outcome) in done {
        let Watch {
            event,
            context,
            shared,
            ..
        } = watch;
        let raw = event.as_cu() as isize;
        drop((event, context));
        after.push((shared, raw, outcome));
    }
    drop(round);
    for (shared, raw, outcome) in after {
        match outcome {
            Outcome::Resolve => {
                if let Some(waker) = shared.complete() {
                    let woken =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
                    if let Err(payload) = woken {
                        handles_core::report_panic("a completion's waker", 0, payload);
                    }
                }
            }
            Outcome::Report(error) => {
                handles_core::report_release_failure("Completion", raw, error)
            }
            Outcome::Nothing | Outcome::Waiting => {}
        }
    }
}

/// Run by a record of a watched event before it is made: hands its watches to the notifier.
fn hand_over_watches_of(event: &EventHandle) {
    hand_over_where(|watch| watch.event.ptr_eq(event), None);
}

/// Resolves or hands over every watch now (for `clear_notifiers`): afterwards the waiter keeps
/// nothing, and no round of it holds a handle. Every watch gets a notifier, room or not: a
/// wait here, under the watches' lock, would hold back every record of a watched event and
/// the waiter itself until the event completes, which may take what they hold back.
pub(crate) fn settle() {
    let round = lock(&ROUND);
    hand_over_where(|_| true, Some(round));
}

/// Hands the watches `pick` selects to the notifier, under the watches' lock (no record of
/// their events can come between); see [`finish`] for what follows.
fn hand_over_where(
    pick: impl FnMut(&mut Watch) -> bool,
    round: Option<std::sync::MutexGuard<'_, ()>>,
) {
    let done: Vec<(Watch, Outcome)> = {
        let mut watches = {
            WAITING_FOR_WATCHES.fetch_add(1, Ordering::AcqRel);
            let watches = lock(&WATCHES);
            WAITING_FOR_WATCHES.fetch_sub(1, Ordering::AcqRel);
            watches
        };
        watches.append(&mut lock(&INCOMING));
        let handed: Vec<Watch> = watches.extract_if(.., pick).collect();
        handed
            .into_iter()
            .map(|watch| {
                // A dropped completion needs no notifier: nothing awaits it.
                let outcome = if Arc::strong_count(&watch.shared) == 1 {
                    Outcome::Nothing
                } else {
                    hand_over_or_wait(&watch, Room::Beyond)
                };
                (*watch.event).record().records.unwatch();
                (watch, outcome)
            })
            .collect()
    };
    finish(done, round);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_fall_on_a_grid_no_finer_than_a_microsecond_nor_later_than_half_the_gap() {
        for gap_us in [0u64, 1, 3, 50, 99, 1_000, 5_000] {
            let gap = Duration::from_micros(gap_us);
            let at = Instant::now() + gap;
            let due = on_grid(at);
            assert!(due >= at, "{gap:?}: due before asked");
            let late = due - at;
            assert!(
                late <= (gap / 2).max(Duration::from_nanos(1024)),
                "{gap:?}: {late:?} late"
            );
        }
        // Two watches asking for times a few microseconds apart, 4 ms ahead, fall due together.
        let now = Instant::now();
        let (a, b) = (
            on_grid(now + Duration::from_micros(4_000)),
            on_grid(now + Duration::from_micros(4_003)),
        );
        let apart = if a > b { a - b } else { b - a };
        assert!(apart <= Duration::from_millis(2), "{apart:?} apart");
    }
}
