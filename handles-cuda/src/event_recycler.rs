//! Recycling events: released events go back to a per-thread cache and are handed out again,
//! instead of a destroy and a create (opt in, through [`EventRecycler`]).
//!
//! **Exactly the semantics of a fresh event.** A fresh event has never been recorded: a query
//! says it is complete, and a wait on it returns at once. A released event is cached only
//! when it is in that same state for every observer:
//!
//! - its last record has completed, so a query on the new handle sees a completed event, as it
//!   would on a fresh one: `cuEventQuery` says so at release, unless the event was never
//!   reached since it was handed out (no `Deref` to its `EventHandle`, so nothing can have
//!   recorded it), in which case it is still in the state it was handed out in;
//! - no other handle to it exists, strong or weak, so nothing can record on it behind the new
//!   owner's back;
//! - it records no timestamps (a recycled timing event would carry an old timestamp into
//!   `elapsed_ms`) and is not interprocess (another process may hold it).
//!
//! A wait enqueued before the release waited for the record that was the latest when it was
//! enqueued, which had completed; recording the event again later cannot affect it. An event
//! that fails any of these checks is destroyed as usual. The cache is per thread (no lock, no
//! atomics): a release on another thread fills that thread's cache.

use std::cell::RefCell;
use std::ops::Deref;

use crate::context::ContextHandle;
use crate::error::{Error, Result};
use crate::event::{EventFlags, EventHandle};

/// The most events a thread keeps for reuse; more are destroyed.
const CACHED_PER_THREAD: usize = 256;

thread_local! {
    /// Released events, with the raw context and flags they were made with.
    static CACHE: RefCell<Vec<(usize, EventFlags, EventHandle)>> = const { RefCell::new(Vec::new()) };
}

/// Hands out events of one context and one set of flags, reusing released ones.
#[derive(Clone, Debug)]
pub struct EventRecycler {
    context: ContextHandle,
    flags: EventFlags,
}

impl EventRecycler {
    /// A recycler of events created in `context` with `flags`. Timing and interprocess events
    /// are refused: they cannot be reused with the semantics of a fresh event.
    pub fn new(context: &ContextHandle, flags: EventFlags) -> Result<Self> {
        if flags.timing || flags.interprocess {
            return Err(Error::InvalidArgument(
                "only events without timing and not interprocess can be recycled".into(),
            ));
        }
        Ok(EventRecycler {
            context: context.clone(),
            flags,
        })
    }

    /// An event: one this thread released earlier if there is one, else a new one.
    #[inline]
    pub fn acquire(&self) -> Result<RecycledEvent> {
        let context = self.context.as_cu() as usize;
        let reused = CACHE
            .try_with(|cache| {
                let mut cache = cache.try_borrow_mut().ok()?;
                let at = cache
                    .iter()
                    .rposition(|(raw, flags, _)| *raw == context && *flags == self.flags)?;
                Some(cache.swap_remove(at).2)
            })
            .ok()
            .flatten();
        let event = match reused {
            Some(event) => event,
            None => EventHandle::create(&self.context, self.flags)?,
        };
        Ok(RecycledEvent {
            event: Some(event),
            reached: std::cell::Cell::new(false),
        })
    }
}

/// Destroys the events this thread keeps for reuse (which hold their contexts, a green
/// context's too, alive), and returns how many. Threads release their cache when they exit.
pub fn clear_recycled_events() -> usize {
    let taken = CACHE
        .try_with(|cache| cache.try_borrow_mut().map(|mut c| std::mem::take(&mut *c)))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let count = taken.len();
    drop(taken);
    count
}

/// An event from an [`EventRecycler`]: an `EventHandle` (through `Deref`) that goes back to
/// this thread's cache when dropped, if it is in the state of a fresh event (see the module
/// docs); otherwise it is destroyed as usual.
#[derive(Debug)]
pub struct RecycledEvent {
    event: Option<EventHandle>,
    /// Whether the event was reached (through `Deref`) since it was handed out: only then can
    /// it have been recorded, and only then does its release ask the driver.
    reached: std::cell::Cell<bool>,
}

impl RecycledEvent {
    /// The event, no longer recycled: it is destroyed when its last handle drops.
    pub fn into_event(mut self) -> EventHandle {
        self.event.take().expect("present until dropped or taken")
    }
}

impl Deref for RecycledEvent {
    type Target = EventHandle;

    fn deref(&self) -> &EventHandle {
        self.reached.set(true);
        self.event.as_ref().expect("present until dropped or taken")
    }
}

impl Drop for RecycledEvent {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            recycle(event, self.reached.get());
        }
    }
}

/// Puts `event` in this thread's cache if it is in the state of a fresh event, or drops it.
/// An event not `reached` since it was handed out is in the state it was handed out in.
fn recycle(event: EventHandle, reached: bool) {
    // The only handle, strong or weak: nobody else can record on it or see it again.
    if event.strong_count() != 1 || event.weak_count() != 0 {
        return;
    }
    // Its last record completed: a query on the next owner's handle says complete, as on a
    // fresh event. A pending or failed query destroys it instead.
    if reached && event.query() != Ok(true) {
        return;
    }
    let Some(context) = event
        .context()
        .as_ref()
        .map(|context| context.as_cu() as usize)
    else {
        return;
    };
    let flags = event.flags();
    let rejected = CACHE.try_with(|cache| match cache.try_borrow_mut() {
        Ok(mut cache) if cache.len() < CACHED_PER_THREAD => {
            cache.push((context, flags, event));
            None
        }
        _ => Some(event),
    });
    // Dropped outside the cache's borrow (a full cache, or a thread being torn down).
    drop(rejected);
}
