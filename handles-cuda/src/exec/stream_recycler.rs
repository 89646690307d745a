//! Recycling streams: released streams go back to a per-thread cache and are handed out again,
//! instead of a destroy and a create (opt in, through [`StreamRecycler`]). A stream create and
//! destroy costs microseconds; a reuse costs one `cuStreamQuery` and one capture check, at the
//! release.
//!
//! **What a recycled stream carries.** It is handed out only in the state of a fresh stream of
//! the same context, flags and priority (the recycler's key), checked when it is handed out:
//!
//! - it is idle: everything queued on it has completed (`cuStreamQuery`), so work the new owner
//!   queues waits for nothing of the old owner's; one still busy stays cached, and a new stream
//!   is made instead;
//! - it is not being captured into a graph (`cuStreamIsCapturing`);
//! - no other handle to it exists, strong or weak: the check both recyclers share
//!   (`sync::is_sole_handle`). Recycled streams are not registered, so a lookup of the raw
//!   value never finds one, and a weak handle an old owner kept makes the recycler let go of
//!   the stream instead of handing it out: it can never upgrade to the next owner's stream;
//! - it was created by this crate through the recycler, in a context the recycler keeps alive,
//!   and never lent to cudarc while the old owner had it (a lent stream keeps another handle).
//!
//! Stream attributes set on the raw stream through the driver (an access policy window, a
//! synchronisation policy) are the one thing a recycled stream may carry: this crate sets none,
//! and whoever sets them through the raw value must reset them before the release. A stream
//! that fails a check is dropped (destroyed, if the cache held the last handle). The cache is
//! per thread (no lock, no atomics); caches of long-lived threads keep their streams' contexts
//! alive until [`clear_recycled_streams`] runs on that thread or the thread exits.

use std::cell::RefCell;
use std::ops::Deref;

use crate::error::Result;
use crate::exec::context::ContextHandle;
use crate::exec::stream::{StreamFlags, StreamHandle};
use crate::sync::{is_sole_handle, take_cache, with_cache};

/// The most streams a thread keeps for reuse; more are destroyed.
const CACHED_PER_THREAD: usize = 64;

/// What a cached stream was made with: the raw context, the flags and the priority.
type Key = (usize, StreamFlags, i32);

thread_local! {
    static CACHE: RefCell<Vec<(Key, StreamHandle)>> = const { RefCell::new(Vec::new()) };
}

/// Hands out streams of one context, one set of flags and one priority, reusing released ones.
#[derive(Clone, Debug)]
pub struct StreamRecycler {
    context: ContextHandle,
    flags: StreamFlags,
    priority: i32,
}

impl StreamRecycler {
    /// A recycler of streams created in `context` with `flags` and `priority` (as
    /// [`StreamHandle::create`] takes them). It keeps the context alive (a non-owning
    /// reference is resolved to a handle that does, or refused).
    pub fn new(context: &ContextHandle, flags: StreamFlags, priority: i32) -> Result<Self> {
        Ok(StreamRecycler {
            context: context.keep_alive()?.into_owned(),
            flags,
            priority,
        })
    }

    fn key(&self) -> Key {
        (self.context.as_cu() as usize, self.flags, self.priority)
    }

    /// A stream in the state of a fresh one: the one this thread released most recently, if
    /// it passes the checks of the module docs, else a new one. Never blocks.
    pub fn acquire(&self) -> Result<RecycledStream> {
        let key = self.key();
        let candidate = with_cache(&CACHE, |cache| {
            let at = cache.iter().rposition(|(cached, _)| *cached == key)?;
            Some(cache.remove(at).1)
        })
        .flatten();
        let reused = candidate.and_then(|stream| match check(&stream) {
            Check::Fresh => Some(stream),
            // Kept for a later acquire, at the oldest end, so the next one tries another (or
            // dropped by `with` if the cache cannot be reached).
            Check::Busy => {
                with_cache(&CACHE, |cache| cache.insert(0, (key, stream)));
                None
            }
            Check::Unusable => None,
        });
        let stream = match reused {
            Some(stream) => stream,
            None => StreamHandle::create_unregistered(&self.context, self.flags, self.priority)?,
        };
        Ok(RecycledStream {
            stream: Some(stream),
            key,
        })
    }
}

/// Destroys the streams this thread keeps for reuse (they hold their contexts alive), and
/// returns how many. Threads release their cache when they exit.
pub fn clear_recycled_streams() -> usize {
    let taken = take_cache(&CACHE);
    let count = taken.len();
    drop(taken);
    count
}

/// A stream from a [`StreamRecycler`]: a `StreamHandle` (through `Deref`) that goes back to
/// this thread's cache when dropped, if it is in the state of a fresh stream (see the module
/// docs); otherwise it is destroyed as usual.
#[derive(Debug)]
pub struct RecycledStream {
    stream: Option<StreamHandle>,
    key: Key,
}

impl RecycledStream {
    /// The stream, no longer recycled: it is destroyed when its last handle drops.
    pub fn into_stream(mut self) -> StreamHandle {
        self.stream.take().expect("present until dropped or taken")
    }
}

impl Deref for RecycledStream {
    type Target = StreamHandle;

    fn deref(&self) -> &StreamHandle {
        self.stream
            .as_ref()
            .expect("present until dropped or taken")
    }
}

impl Drop for RecycledStream {
    fn drop(&mut self) {
        // Only the cheap check here; the driver is asked when the stream is handed out again.
        if let Some(stream) = self.stream.take()
            && stream.is_owning()
            && is_sole_handle(&stream)
        {
            let key = self.key;
            let rejected = with_cache(&CACHE, |cache| {
                if cache.len() >= CACHED_PER_THREAD {
                    return Some(stream);
                }
                cache.push((key, stream));
                None
            });
            // Dropped outside the cache's borrow (a full cache, or a thread being torn down).
            drop(rejected);
        }
    }
}

/// What a cached stream is fit for.
enum Check {
    /// Idle, not capturing, and the only strong handle: handed out.
    Fresh,
    /// Still running work: kept for later.
    Busy,
    /// Shared, capturing, or a failed query: let go.
    Unusable,
}

/// Checks a cached stream before it is handed out again.
fn check(stream: &StreamHandle) -> Check {
    if !is_sole_handle(stream) {
        return Check::Unusable;
    }
    if stream.is_capturing() != Ok(false) {
        return Check::Unusable;
    }
    // `acquire` may be called inside a capture's closure.
    let _relaxed = crate::driver::capture::relaxed_while_capturing();
    match stream.query() {
        Ok(true) => Check::Fresh,
        Ok(false) => Check::Busy,
        Err(_) => Check::Unusable,
    }
}
