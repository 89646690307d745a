//! The notifier of a completion that is not resolved by the waiter thread's first moments of
//! polling (see `completion_waiter.rs`): a small private *notifier* stream of the event's
//! context waits for the event (`cuStreamWaitEvent`: its most recent record at that moment)
//! and then runs a host function that marks the shared state done and wakes the task. A
//! notifier is picked among the context's notifiers that are idle, or made when none is, so a
//! pending completion never holds back another; a context keeps at most
//! [`NOTIFIERS_PER_CONTEXT`] idle ones.
//!
//! The awaited event is kept in the notifier table (not in the host function, whose captures
//! are dropped on the disposal thread) until its host function has run: the completion lets go
//! of it when it resolves (or is dropped after its host function ran), the table drops the
//! events of completions dropped early once their host functions have run, and
//! [`clear_notifiers`] drops the rest after waiting for them, so nothing the table kept
//! outlives that call.
//!
//! The host function calls `Waker::wake_by_ref` on the driver's thread and hands the waker to
//! the disposal thread to be dropped. Wakers of the usual executors (tokio, async-std,
//! `futures`' executors) only schedule the task; a waker that calls CUDA itself breaks the
//! host-function rule (see `StreamHandle::launch_host`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::driver::call::driver;
use crate::error::{Error, Result};
use crate::exec::completion_protocol::Shared;
use crate::exec::context::ContextHandle;
use crate::exec::event::EventHandle;
use crate::exec::notifier_count::{LetGoOnDrop, NotifierCount};
use crate::exec::stream::{StreamFlags, StreamHandle};
use crate::sync::lock;

/// The most idle notifier streams one context keeps (each pending completion holds one more).
pub const NOTIFIERS_PER_CONTEXT: usize = 16;

/// The most busy notifier streams (a host function waiting behind a pending event) a context
/// has for the completions the waiter hands over when their first moments pass: beyond this
/// the waiter goes on polling them. On driver 580 `cuStreamCreate` blocks once about 30 streams
/// of a context have a host function waiting behind a pending event, until the GPU gets
/// there, and holds back other threads' driver calls meanwhile (`gpu_bench contention`).
pub const BUSY_NOTIFIERS_PER_CONTEXT: usize = 16;

/// Whether a hand-over may make a notifier stream when the context has
/// [`BUSY_NOTIFIERS_PER_CONTEXT`] busy ones already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// No: the caller goes on polling instead (the waiter, for a watch whose time is up).
    Within,
    /// Yes: the caller cannot poll the event (it is recorded again, or recorded without
    /// notice, or the waiter is cleared).
    Beyond,
}

/// The notifier streams of one context, and the events awaited on them whose host functions
/// may not have run yet.
struct Notifiers {
    context: ContextHandle,
    streams: Vec<Notifier>,
    /// Each awaited event, by the address of its completion's shared state, kept until that
    /// completion's host function has run (the notifier has passed its wait by then).
    awaited: HashMap<usize, (Arc<Shared>, EventHandle)>,
    /// The size at which the entries of completions dropped early are looked for next
    /// (doubling, so that looking costs O(1) per completion).
    prune_at: usize,
}

/// A notifier stream and the number of its completions whose host functions have not run:
/// idle at 0. Kept by the table, so that finding an idle stream asks the driver nothing (a
/// query of every stream at each hand-over was quadratic in the completions pending at once).
struct Notifier {
    stream: StreamHandle,
    pending: Arc<NotifierCount>,
}

/// The fewest awaited events at which the table looks for those it can let go of.
const PRUNE_FROM: usize = 64;

/// The key of a completion's entry in its context's `awaited`.
fn key(shared: &Arc<Shared>) -> usize {
    Arc::as_ptr(shared) as usize
}

/// The notifier streams, by context. Cleared by [`clear_notifiers`].
static NOTIFIERS: Mutex<Vec<Notifiers>> = Mutex::new(Vec::new());

/// Makes a notifier of `context` wait for `event`'s most recent record and then resolve
/// `shared`; the table keeps the event until the host function has run. Returns `false`, with
/// nothing done, when `room` is [`Room::Within`] and the context's busy notifiers are at the
/// limit.
pub(crate) fn hand_over(
    event: &EventHandle,
    context: &ContextHandle,
    shared: &Arc<Shared>,
    room: Room,
) -> Result<bool> {
    let Some((notifier, pending)) = notifier(context, room)? else {
        return Ok(false);
    };
    // Nothing queued yet: the stream is idle again.
    let idle_again = |error| {
        pending.let_go();
        error
    };
    notifier.refuse_foreign_capture().map_err(idle_again)?;
    let waited = notifier.queue(|raw_stream| {
        // SAFETY: the stream and the event are alive (handles held).
        unsafe { driver!(cuStreamWaitEvent(raw_stream, event.as_cu(), 0)) }
    });
    if !waited.queued {
        waited.status.map_err(idle_again)?;
        pending.let_go();
        return Err(Error::NothingMade {
            what: "the notifier's stream wait was not queued",
        });
    }
    let wake = Arc::clone(shared);
    let passed = Arc::clone(&pending);
    let queued = notifier.queue_host(move || {
        // The wait has passed: later completions may queue behind this host function, which
        // lets go of the count when it ends, even by a waker's panic.
        let _idle_after = LetGoOnDrop(&passed);
        wake.mark_passed();
        if let Some(waker) = wake.complete() {
            waker.wake_by_ref();
            // Dropped on the disposal thread, never in the host function.
            crate::exec::disposal::dispose(Box::new(waker));
        }
    });
    if let Err(error) = waited.status.and(queued) {
        // A wait may be queued with no host function behind it: the stream is never used
        // again (it would hold a later completion back), and goes once its work is done.
        retire(context, &pending);
        return Err(error);
    }
    // The event stays alive until the notifier has passed its wait, however early the
    // program drops its handles: the table keeps it until the host function has run.
    keep_awaited(context, Arc::clone(shared), event.clone())?;
    Ok(true)
}

/// Lets go of the event kept for `shared` in `context`'s entry, once its host function has
/// run (dropped here, after the table's lock); nothing if it has not, or was never queued.
pub(crate) fn let_go(context: usize, shared: &Arc<Shared>) {
    if !shared.passed() {
        return;
    }
    let released = lock(&NOTIFIERS)
        .iter_mut()
        .find(|entry| entry.context.as_cu() as usize == context)
        .and_then(|entry| entry.awaited.remove(&key(shared)));
    drop(released);
}

/// An idle notifier stream of `context` (no completion's host function still to run on it),
/// claimed with its count, or else a new one: a completion never queues behind another's wait
/// (an unrelated pending event would hold it back, and a program whose held-back events are
/// released by the task awaiting the later one would deadlock); behind a host function that
/// has started, it waits only for that function's end. Idle streams beyond
/// [`NOTIFIERS_PER_CONTEXT`] are let go of (after the table's lock), so the table keeps at most
/// that many idle ones, plus one per completion pending at once. `None` when no stream is idle,
/// `room` is [`Room::Within`] and [`BUSY_NOTIFIERS_PER_CONTEXT`] are busy. No driver call is
/// made but the new stream's.
fn notifier(
    context: &ContextHandle,
    room: Room,
) -> Result<Option<(StreamHandle, Arc<NotifierCount>)>> {
    let mut surplus = Vec::new();
    let found = {
        let mut all = lock(&NOTIFIERS);
        let streams = &mut entry(&mut all, context)?.streams;
        let mut found = None;
        let mut idle = 0;
        let mut i = 0;
        while i < streams.len() {
            if found.is_none() && streams[i].pending.take_if_idle() {
                found = Some((streams[i].stream.clone(), Arc::clone(&streams[i].pending)));
                i += 1;
            } else if !streams[i].pending.idle() {
                i += 1;
            } else if idle >= NOTIFIERS_PER_CONTEXT {
                surplus.push(streams.swap_remove(i).stream);
            } else {
                idle += 1;
                i += 1;
            }
        }
        match found {
            Some(found) => Some(found),
            // None is idle (a stream that became idle since was not counted: it is taken
            // next time).
            None if room == Room::Within && streams.len() >= BUSY_NOTIFIERS_PER_CONTEXT => None,
            None => {
                let stream = StreamHandle::create(context, StreamFlags { non_blocking: true }, 0)?;
                let pending = Arc::new(NotifierCount::taken());
                streams.push(Notifier {
                    stream: stream.clone(),
                    pending: Arc::clone(&pending),
                });
                Some((stream, pending))
            }
        }
    };
    // Dropped on the disposal thread: a stream's release may wait for its context, and the
    // caller may hold the waiter's lock, under which no report hook may run.
    if !surplus.is_empty() {
        crate::exec::disposal::dispose(Box::new(surplus));
    }
    Ok(found)
}

/// Takes the notifier stream counted by `pending` out of `context`'s entry, for good (on the
/// disposal thread: its release may wait for its work).
fn retire(context: &ContextHandle, pending: &Arc<NotifierCount>) {
    let retired = {
        let mut all = lock(&NOTIFIERS);
        all.iter_mut()
            .find(|entry| entry.context == *context)
            .and_then(|entry| {
                let at = entry
                    .streams
                    .iter()
                    .position(|notifier| Arc::ptr_eq(&notifier.pending, pending))?;
                Some(entry.streams.swap_remove(at).stream)
            })
    };
    if let Some(stream) = retired {
        crate::exec::disposal::dispose(Box::new(stream));
    }
}

/// The table's entry of `context`, made if it has none.
fn entry<'a>(all: &'a mut Vec<Notifiers>, context: &ContextHandle) -> Result<&'a mut Notifiers> {
    let index = match all.iter().position(|entry| entry.context == *context) {
        Some(index) => index,
        None => {
            all.push(Notifiers {
                context: context.keep_alive()?.into_owned(),
                streams: Vec::new(),
                awaited: HashMap::new(),
                prune_at: PRUNE_FROM,
            });
            all.len() - 1
        }
    };
    Ok(&mut all[index])
}

/// Keeps `event` in `context`'s entry until the host function of `shared` has run; once the
/// entry has grown to twice what it held after the last look, lets go of the events of
/// completions whose host functions have run (dropped here, after the table's lock: the
/// caller's thread, never a host function).
fn keep_awaited(context: &ContextHandle, shared: Arc<Shared>, event: EventHandle) -> Result<()> {
    let passed: Vec<_> = {
        let mut all = lock(&NOTIFIERS);
        let entry = entry(&mut all, context)?;
        // The host function may have run already, and the completion let go of nothing: the
        // event is not kept then.
        if shared.passed() {
            drop(all);
            drop(event);
            return Ok(());
        }
        entry.awaited.insert(key(&shared), (shared, event));
        if entry.awaited.len() < entry.prune_at {
            return Ok(());
        }
        let passed = entry
            .awaited
            .extract_if(|_, (shared, _)| shared.passed())
            .collect();
        entry.prune_at = (2 * entry.awaited.len()).max(PRUNE_FROM);
        passed
    };
    drop(passed);
    Ok(())
}

/// Destroys the notifier streams of every context, after waiting for their pending
/// completions, and releases the contexts they kept and the awaited events; returns how many
/// streams there were (see `clear_notifiers`, which settles the waiter first).
pub(crate) fn clear() -> usize {
    let all = std::mem::take(&mut *lock(&NOTIFIERS));
    // Each stream's pending completions run first: destroying a busy stream is left to the
    // driver's care otherwise, and the futures' promise is to resolve after their records.
    // A stream that cannot be waited for is still released (its work stays queued).
    for entry in &all {
        for notifier in &entry.streams {
            let _ = notifier.stream.synchronize();
        }
    }
    all.iter().map(|entry| entry.streams.len()).sum()
}
