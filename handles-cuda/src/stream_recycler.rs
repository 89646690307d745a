//! Recycling streams: released streams go back to a per-thread cache and are handed out again,
//! instead of a destroy and a create (opt in, through [`StreamRecycler`]). A stream create and
//! destroy costs microseconds; a reuse costs one `cuStreamQuery` and one capture check, at the
//! release.
//!
//! **What a recycled stream carries.** It is handed out only in the state of a fresh stream of
//! the same context, flags and priority (the recycler's key), for every observer:
//!
//! - it is idle: everything queued on it has completed (`cuStreamQuery` at the release), so
//!   work the new owner queues waits for nothing of the old owner's;
//! - it is not being captured into a graph (`cuStreamIsCapturing` at the release);
//! - no other handle to it exists: one strong handle, and no weak handle but the registry's
//!   (so nothing kept from the old owner can queue work on it later). A weak handle kept by a
//!   pending recycled event's record counts: such a stream is destroyed, not cached;
//! - it was created by this crate ([`StreamHandle::create`] through the recycler) and never
//!   lent to cudarc while the old owner had it (a lent stream keeps another handle).
//!
//! Stream attributes set on the raw stream through the driver (an access policy window, a
//! synchronisation policy) are the one thing a recycled stream may carry: this crate sets none,
//! and whoever sets them through the raw value must reset them before the release. A stream
//! that fails any check is destroyed as usual. The cache is per thread (no lock, no atomics).

use std::cell::RefCell;
use std::ops::Deref;

use cudarc::driver::sys;

use crate::context::ContextHandle;
use crate::error::Result;
use crate::stream::{StreamFlags, StreamHandle};

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
    /// [`StreamHandle::create`] takes them).
    pub fn new(context: &ContextHandle, flags: StreamFlags, priority: i32) -> Self {
        StreamRecycler {
            context: context.clone(),
            flags,
            priority,
        }
    }

    fn key(&self) -> Key {
        (self.context.as_cu() as usize, self.flags, self.priority)
    }

    /// A stream in the state of a fresh one: one this thread released earlier if there is
    /// one, else a new one.
    pub fn acquire(&self) -> Result<RecycledStream> {
        let key = self.key();
        let reused = CACHE
            .try_with(|cache| {
                let mut cache = cache.try_borrow_mut().ok()?;
                let at = cache.iter().rposition(|(cached, _)| *cached == key)?;
                Some(cache.swap_remove(at).1)
            })
            .ok()
            .flatten();
        let stream = match reused {
            Some(stream) => stream,
            None => StreamHandle::create(&self.context, self.flags, self.priority)?,
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
    let taken = CACHE
        .try_with(|cache| cache.try_borrow_mut().map(|mut c| std::mem::take(&mut *c)))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
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
        if let Some(stream) = self.stream.take()
            && is_like_fresh(&stream)
        {
            let rejected = CACHE.try_with(|cache| match cache.try_borrow_mut() {
                Ok(mut cache) if cache.len() < CACHED_PER_THREAD => {
                    cache.push((self.key, stream));
                    None
                }
                _ => Some(stream),
            });
            // Dropped outside the cache's borrow (a full cache, or a thread being torn down).
            drop(rejected);
        }
    }
}

/// Whether `stream` can be handed out again as a fresh stream: the only handle (the registry's
/// weak entry aside), idle and not capturing. A failed query counts as no.
fn is_like_fresh(stream: &StreamHandle) -> bool {
    if !stream.is_owning() || stream.strong_count() != 1 || stream.weak_count() != 1 {
        return false;
    }
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let capture = stream.run(|raw| {
        // SAFETY: the stream is alive while `stream` is; `status` is a valid out-pointer.
        unsafe { crate::error::driver!(cuStreamIsCapturing(raw, &mut status)) }
    });
    capture.is_ok()
        && status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        && stream.query() == Ok(true)
}
