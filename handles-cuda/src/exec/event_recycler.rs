//! Recycling events: released events go back to a per-thread cache and are handed out again,
//! instead of a destroy and a create (opt in, through [`EventRecycler`]).
//!
//! **Exactly the semantics of a fresh event.** A fresh event has never been recorded: a query
//! says it is complete, and a wait on it returns at once. An event is handed out again only in
//! that same state for every observer:
//!
//! - its last record has completed, so a query on the new handle sees a completed event, as it
//!   would on a fresh one, and a wait on it returns at once;
//! - no other handle to it exists, strong or weak, so nothing can record on it behind the new
//!   owner's back;
//! - it records no timestamps (a recycled timing event would carry an old timestamp into
//!   `elapsed_ms`) and is not interprocess (another process may hold it).
//!
//! A wait enqueued before the release waited for the record that was the latest when it was
//! enqueued (the driver's rule for `cuStreamWaitEvent`); recording the event again later cannot
//! affect it.
//!
//! **How completion is known without asking the driver at every release.** A released event
//! that was never recorded since it was handed out is still complete: it is *ready* at once, and
//! so is one whose last record the host saw complete through [`RecycledEvent::synchronize`] or
//! [`RecycledEvent::query`] (a request's event, waited for and dropped). One that was recorded
//! otherwise is *pending*: the release costs no driver call, and an acquire that finds
//! no ready event settles pending ones. Records made *by one thread on one stream* complete in
//! the order they were made (a stream runs its work in the order it was queued, and one
//! thread's calls are queued in program order), so when one of them is complete, every earlier
//! one is too, with no query of its own; a binary search with `cuEventQuery` finds the newest
//! completed one among the pending events of that stream and thread. So a thread that records
//! its events on a few streams pays O(log n) queries per batch of n releases. An event
//! recorded through anything the recycler cannot follow (its `EventHandle`, reached through
//! `Deref`, or a stream this crate did not create, whose raw value may name different streams
//! on different threads) is settled by a query of its own. An event still running is left
//! pending, and a new event is created instead: an acquire never blocks.
//!
//! An event that fails any of these checks is destroyed as usual. The cache is per thread (no
//! lock, no atomics): a release on another thread fills that thread's cache.

use std::cell::{Cell, RefCell};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use handles_core::{ResourceHandle, WeakHandle};

use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::event::{EventFlags, EventHandle};
use crate::exec::stream::{Stream, StreamHandle};
use crate::sync::{is_sole_handle, take_cache, with_cache};

/// The most events a thread keeps for reuse, ready and pending together; more are destroyed.
const CACHED_PER_THREAD: usize = 256;

/// A released event, with the raw context and flags it was made with (what an acquire
/// matches on).
struct Cached {
    context: usize,
    flags: EventFlags,
    event: EventHandle,
}

/// A released event whose last record may still be running.
struct Pending {
    cached: Cached,
    last_record: LastRecord,
}

/// What the recycler knows about an event's last record since it was handed out.
#[derive(Clone, Debug, Default)]
enum LastRecord {
    /// Not recorded since it was handed out: still in the state it was handed out in.
    #[default]
    None,
    /// Recorded by [`RecycledEvent::record`] on a stream this crate created.
    Followed(RecordOrder),
    /// Possibly recorded some other way: only a query of its own says whether it completed.
    Unknown,
}

/// Where a record sits in a stream's order: the stream (a weak handle, which keeps the
/// stream's box from being reused, so equal means the same stream), the recording thread, and
/// that thread's count of followed records when it was made.
#[derive(Clone, Debug)]
struct RecordOrder {
    stream: WeakHandle<Stream>,
    thread: u64,
    ticket: u64,
}

impl RecordOrder {
    /// Whether `self` and `other` were queued on the same stream by the same thread: then their
    /// tickets order them on the stream, and a later one completing means the earlier did.
    fn same_sequence(&self, other: &RecordOrder) -> bool {
        self.thread == other.thread && self.stream.ptr_eq(&other.stream)
    }
}

/// This thread's released events.
#[derive(Default)]
struct Cache {
    ready: Vec<Cached>,
    pending: Vec<Pending>,
    /// Tickets and positions of one sequence's pending events, reused by each settling.
    scratch: Vec<(u64, usize)>,
    /// The position of a pending event whose query failed while settling its sequence.
    failed: Option<usize>,
}

impl Cache {
    fn len(&self) -> usize {
        self.ready.len() + self.pending.len()
    }

    /// A ready event of `context` and `flags`, settling pending ones if there is none.
    fn take(&mut self, context: usize, flags: EventFlags) -> Option<EventHandle> {
        if let Some(at) = self
            .ready
            .iter()
            .rposition(|cached| cached.context == context && cached.flags == flags)
        {
            return Some(self.ready.swap_remove(at).event);
        }
        self.settle(context, flags)
    }

    /// Settles pending events and returns one of `context` and `flags` that completed, if any.
    ///
    /// First the records followed on the stream and thread of the newest matching event: they
    /// complete in the order they were queued, so a binary search finds the newest completed
    /// one with O(log n) queries, and it and every earlier one become ready. Failing that, the
    /// oldest matching event is queried on its own.
    fn settle(&mut self, context: usize, flags: EventFlags) -> Option<EventHandle> {
        let matches =
            |pending: &Pending| pending.cached.context == context && pending.cached.flags == flags;
        let newest = self.pending.iter().rposition(matches)?;
        // The sequence found still running, if any: none of its events is queried again below.
        let mut running = None;
        if let LastRecord::Followed(order) = &self.pending[newest].last_record {
            let order = order.clone();
            match self.newest_completed_like(&order) {
                Some(completed) => {
                    self.release_completed(&completed);
                    if let Some(at) = self
                        .ready
                        .iter()
                        .rposition(|cached| cached.context == context && cached.flags == flags)
                    {
                        return Some(self.ready.swap_remove(at).event);
                    }
                }
                None => running = Some(order),
            }
            // A failed query of the sequence's oldest event: that event is not trusted again
            // and is destroyed; the sequence is settled at a later acquire.
            if let Some(at) = self.failed.take() {
                drop(self.pending.swap_remove(at));
                running = None;
            }
        }
        let oldest = self.pending.iter().position(|pending| {
            matches(pending)
                && !matches!((&pending.last_record, &running),
                    (LastRecord::Followed(order), Some(running)) if order.same_sequence(running))
        })?;
        match self.pending[oldest].cached.event.query() {
            Ok(true) => {
                let settled = self.pending.swap_remove(oldest);
                if let LastRecord::Followed(order) = &settled.last_record {
                    self.release_completed(order);
                }
                Some(settled.cached.event)
            }
            // Still running: left pending, but moved to the newest end, so that one event that
            // never completes does not take every later acquire's query.
            Ok(false) => {
                let running = self.pending.remove(oldest);
                self.pending.push(running);
                None
            }
            // A failed query: the event is not trusted again, and is destroyed.
            Err(_) => {
                drop(self.pending.swap_remove(oldest));
                None
            }
        }
    }

    /// The newest completed record among the pending ones followed on the stream and thread of
    /// `order`, found with O(log n) queries over their tickets; `None` if the oldest of them is
    /// still running (then all are). A failed query counts as not completed: such an event is left to
    /// be settled on its own.
    fn newest_completed_like(&mut self, order: &RecordOrder) -> Option<RecordOrder> {
        // A buffer kept across calls, so settling allocates nothing once warm.
        let mut group = std::mem::take(&mut self.scratch);
        group.clear();
        group.extend(self.pending.iter().enumerate().filter_map(|(at, pending)| {
            match &pending.last_record {
                LastRecord::Followed(other) if other.same_sequence(order) => {
                    Some((other.ticket, at))
                }
                _ => None,
            }
        }));
        group.sort_unstable();
        let completed =
            |index: usize| self.pending[group[index].1].cached.event.query() == Ok(true);
        let last = group.len() - 1;
        // The oldest first (if it is running, they all are), then the newest (after a
        // synchronisation all completed, and two queries settle the whole sequence), then a
        // binary search between them.
        let oldest = self.pending[group[0].1].cached.event.query();
        if oldest.is_err() {
            self.failed = Some(group[0].1);
        }
        let newest = if oldest != Ok(true) {
            None
        } else if last == 0 || completed(last) {
            Some(last)
        } else {
            // `lo` completed; `hi` did not.
            let (mut lo, mut hi) = (0, last);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if completed(mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            Some(lo)
        }
        .and_then(|at| match &self.pending[group[at].1].last_record {
            LastRecord::Followed(newest) => Some(newest.clone()),
            _ => None,
        });
        self.scratch = group;
        newest
    }

    /// Makes ready every pending event whose last record was followed on the stream and thread
    /// of `completed`, no later than it: `completed` finished, so they did.
    fn release_completed(&mut self, completed: &RecordOrder) {
        let mut at = 0;
        while at < self.pending.len() {
            let done = matches!(
                &self.pending[at].last_record,
                LastRecord::Followed(order)
                    if order.same_sequence(completed) && order.ticket <= completed.ticket
            );
            if done {
                let settled = self.pending.swap_remove(at);
                self.ready.push(settled.cached);
            } else {
                at += 1;
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());

    /// This thread's number, for [`RecordOrder::thread`].
    static THREAD: u64 = {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };

    /// This thread's count of followed records, for [`RecordOrder::ticket`].
    static TICKETS: Cell<u64> = const { Cell::new(0) };
}

/// Hands out events of one context and one set of flags, reusing released ones.
#[derive(Clone, Debug)]
pub struct EventRecycler {
    context: ContextHandle,
    flags: EventFlags,
}

impl EventRecycler {
    /// A recycler of events created in `context` with `flags`, which it keeps alive (a
    /// non-owning reference is resolved to a handle that does, or refused). Timing and
    /// interprocess events are refused: they cannot be reused with the semantics of a fresh
    /// event.
    pub fn new(context: &ContextHandle, flags: EventFlags) -> Result<Self> {
        if flags.timing || flags.interprocess {
            return Err(Error::BadFlags {
                what: "only events without timing and not interprocess can be recycled",
            });
        }
        Ok(EventRecycler {
            // Cached events outlive the caller's handles: the context must be kept alive.
            context: context.keep_alive()?.into_owned(),
            flags,
        })
    }

    /// An event in the state of a fresh one: one this thread released earlier if there is one
    /// whose last record is known to have completed, else a new one. Never blocks.
    #[inline]
    pub fn acquire(&self) -> Result<RecycledEvent> {
        let context = self.context.as_cu() as usize;
        let reused = with_cache(&CACHE, |cache| cache.take(context, self.flags)).flatten();
        let event = match reused {
            Some(event) => event,
            None => EventHandle::create(&self.context, self.flags)?,
        };
        Ok(RecycledEvent {
            event: Some(event),
            last_record: RefCell::new(LastRecord::None),
        })
    }
}

/// Destroys the events this thread keeps for reuse, ready and pending (they hold their
/// contexts, a green context's too, alive), and returns how many. Threads release their cache
/// when they exit.
pub fn clear_recycled_events() -> usize {
    let taken = take_cache(&CACHE);
    let count = taken.len();
    drop(taken);
    count
}

/// An event from an [`EventRecycler`]: an `EventHandle` (through `Deref`) that goes back to
/// this thread's cache when dropped, if no other handle to it exists; otherwise it is
/// destroyed as usual.
///
/// Record it with [`RecycledEvent::record`], and wait for it or query it with the methods here:
/// then the recycler follows its records, and settles it with the others recorded on the same
/// stream. Reaching the `EventHandle` through `Deref` is allowed and safe, but the event is then
/// settled by a query of its own.
#[derive(Debug)]
pub struct RecycledEvent {
    event: Option<EventHandle>,
    last_record: RefCell<LastRecord>,
}

impl RecycledEvent {
    /// The event, no longer recycled: it is destroyed when its last handle drops.
    pub fn into_event(mut self) -> EventHandle {
        self.event.take().expect("present until dropped or taken")
    }

    /// The event, without marking it reached: for the methods below, which cannot record it.
    fn event(&self) -> &EventHandle {
        self.event.as_ref().expect("present until dropped or taken")
    }

    /// Records the event on `stream` ([`EventHandle::record`]).
    pub fn record(&self, stream: &StreamHandle) -> Result<()> {
        let recorded = self.event().record(stream);
        let followed = recorded.is_ok() && stream.as_handle().is_owning();
        let mut last_record = self.last_record.borrow_mut();
        *last_record = match &*last_record {
            LastRecord::Unknown => LastRecord::Unknown,
            _ if followed => LastRecord::Followed(RecordOrder {
                stream: stream.as_handle().downgrade(),
                thread: THREAD.with(|thread| *thread),
                ticket: TICKETS.with(|tickets| {
                    let ticket = tickets.get();
                    tickets.set(ticket + 1);
                    ticket
                }),
            }),
            // A failed record may have left any state; a stream whose raw value may name
            // another stream on another thread cannot be followed.
            _ => LastRecord::Unknown,
        };
        recorded
    }

    /// Makes work queued on `stream` after this call wait for the event
    /// ([`StreamHandle::wait_event`]); a wait does not change the event.
    pub fn wait_on(&self, stream: &StreamHandle) -> Result<()> {
        stream.wait_event(self.event())
    }

    /// Whether the event's last record completed ([`EventHandle::query`]).
    pub fn query(&self) -> Result<bool> {
        let completed = self.event().query()?;
        if completed {
            self.known_complete();
        }
        Ok(completed)
    }

    /// Blocks until the event's last record completed ([`EventHandle::synchronize`]).
    pub fn synchronize(&self) -> Result<()> {
        self.event().synchronize()?;
        self.known_complete();
        Ok(())
    }

    /// The host saw the event's last record complete: unless the event may have been recorded
    /// some other way (reached through `Deref`), it is back in the state it was handed out in,
    /// and its release makes it ready with no query. Nothing else records it meanwhile: this
    /// handle is not `Sync`, and its methods other than [`Self::record`] record nothing.
    fn known_complete(&self) {
        let mut last_record = self.last_record.borrow_mut();
        if matches!(*last_record, LastRecord::Followed(_)) {
            *last_record = LastRecord::None;
        }
    }
}

impl Deref for RecycledEvent {
    type Target = EventHandle;

    /// The event. Through it the event may be recorded in ways the recycler cannot follow, so
    /// its release will ask the driver whether its last record completed.
    fn deref(&self) -> &EventHandle {
        *self.last_record.borrow_mut() = LastRecord::Unknown;
        self.event()
    }
}

impl Drop for RecycledEvent {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            recycle(event, self.last_record.take());
        }
    }
}

/// Puts `event` in this thread's cache, ready if it was not recorded since it was handed out
/// and pending otherwise, or drops it if another handle to it exists or the cache is full.
fn recycle(event: EventHandle, last_record: LastRecord) {
    // The only handle, strong or weak: nobody else can record on it or see it again.
    if !is_sole_handle(&event) {
        return;
    }
    let Some(context) = event
        .context()
        .as_ref()
        .map(|context| context.as_cu() as usize)
    else {
        return;
    };
    let cached = Cached {
        context,
        flags: event.flags(),
        event,
    };
    let rejected = with_cache(&CACHE, |cache| {
        if cache.len() >= CACHED_PER_THREAD {
            return Some(cached);
        }
        match last_record {
            LastRecord::None => cache.ready.push(cached),
            last_record => cache.pending.push(Pending {
                cached,
                last_record,
            }),
        }
        None
    });
    // Dropped outside the cache's borrow (a full cache, or a thread being torn down).
    drop(rejected);
}
