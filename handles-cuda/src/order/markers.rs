//! Marker events: one per stream some memory was used on, re-recorded after each later use
//! there, so that whatever must come after those uses (a stream-ordered free on another stream,
//! a host view, a host free) waits for exactly them, and for nothing else in their contexts.
//!
//! The one home of "which stream did this work go to" ([`StreamKey`]) and of "find this
//! stream's marker or make one, and record it" ([`Markers::mark`]); `stream_order.rs` and
//! `memory/host_access.rs` keep a [`Markers`] each, under their own lock.

use std::thread;

use cudarc::driver::sys::CUcontext;

use crate::driver::current::current_raw;
use crate::error::Result;
use crate::exec::event::EventHandle;
use crate::exec::stream::{PER_THREAD_STREAM, StreamHandle, StreamWeak};
use crate::exec::stream_generation::GENERATIONS;
use handles_core::{ResourceHandle, WeakResourceHandle};

/// Which stream work went to: the raw stream, and for default-stream tokens the context it
/// resolved in and, for the per-thread token, the thread that queued it. Addresses are kept
/// as integers: the key identifies, it is never used to call the driver.
///
/// A real stream's address names it only while the stream lives: `cuStreamDestroy` returns
/// with work still queued, and driver 580 hands the address to the next stream it creates
/// (seen on the H200: a marker re-recorded on the new stream lost the old one's pending
/// memset). So the key of a stream this crate owns carries its address's generation, which
/// the stream's deleter moves on before destroying it (`exec/stream_generation.rs`); a stream
/// destroyed by others (borrowed, or cudarc's) is told apart by the handle its work was
/// queued through instead ([`Marker::via`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct StreamKey {
    raw: usize,
    generation: u64,
    context: usize,
    pub(crate) thread: Option<thread::ThreadId>,
}

impl StreamKey {
    /// The key of work queued on `stream` by the calling thread now.
    #[inline(always)]
    pub(crate) fn of(stream: &StreamHandle) -> Result<StreamKey> {
        if !stream.is_default_token() {
            let raw = stream.as_cu() as usize;
            return Ok(StreamKey {
                raw,
                generation: GENERATIONS.of(raw),
                context: 0,
                thread: None,
            });
        }
        Self::of_token(stream)
    }

    /// [`Self::of`] for a default-stream token.
    #[cold]
    fn of_token(stream: &StreamHandle) -> Result<StreamKey> {
        let raw = stream.as_cu();
        let context: CUcontext = match stream.context() {
            Some(context) => context.as_cu(),
            None => current_raw()?,
        };
        let thread = (raw == PER_THREAD_STREAM).then(|| thread::current().id());
        Ok(StreamKey {
            raw: raw as usize,
            generation: 0,
            context: context as usize,
            thread,
        })
    }
}

/// A stream the memory was used on, with a marker recorded after its latest use there.
struct Marker {
    key: StreamKey,
    /// For a real stream this crate does not own, the handle the marker was recorded
    /// through: a later use matches only through the same box, which the weak reference keeps
    /// from being reused (see [`StreamKey`]). `None` for owned streams, whose key carries a
    /// generation, and for default-stream tokens, which the key alone names for as long as
    /// their context lives. (A weak reference to an owned stream would keep a recycler from
    /// taking it back.)
    via: Option<StreamWeak>,
    event: EventHandle,
}

impl Marker {
    fn covers(&self, key: StreamKey, stream: &StreamHandle) -> bool {
        self.key == key
            && self
                .via
                .as_ref()
                .is_none_or(|via| via.as_weak().points_to(stream.as_handle()))
    }
}

/// Markers beyond this many are pruned of the completed ones before another is added: memory
/// used on many short-lived streams keeps one marker per stream with work still pending.
const PRUNE_AT: usize = 8;

/// The markers of the streams some memory was used on (see the module docs).
#[derive(Default)]
pub(crate) struct Markers {
    markers: Vec<Marker>,
    /// How many markers the next push prunes at (at least [`PRUNE_AT`]).
    prune_at: usize,
}

impl Markers {
    /// Records `key`'s marker on `stream` (the calling thread's work there, `key` being
    /// [`StreamKey::of`] it) after the work queued so far, making the marker on first use.
    pub(crate) fn mark(&mut self, key: StreamKey, stream: &StreamHandle) -> Result<()> {
        match self
            .markers
            .iter()
            .find(|marker| marker.covers(key, stream))
        {
            Some(marker) => marker.event.record(stream),
            None => self.ensure(key, stream),
        }
    }

    /// Makes `key`'s marker (recorded on `stream` now) unless it has one: what may switch
    /// contexts or fail for a lack of resources happens here, before the work is queued, so
    /// that [`Self::mark`] after it is a record only. (Unless another thread's push pruned the
    /// marker in between, its event being complete: then `mark` makes a fresh one after the
    /// work, and a failure there falls back to the caller's context note.)
    pub(crate) fn ensure(&mut self, key: StreamKey, stream: &StreamHandle) -> Result<()> {
        if self.markers.iter().any(|marker| marker.covers(key, stream)) {
            return Ok(());
        }
        let event = EventHandle::marker_on(stream)?;
        self.push(key, stream, event);
        Ok(())
    }

    /// Keeps `event` (already recorded on `stream`) as its marker, replacing an older one.
    pub(crate) fn replace(&mut self, key: StreamKey, stream: &StreamHandle, event: EventHandle) {
        self.forget(key, stream);
        self.push(key, stream, event);
    }

    /// Forgets `stream`'s marker: what it covers is ordered another way now. A marker of
    /// another stream that had the same address stays.
    pub(crate) fn forget(&mut self, key: StreamKey, stream: &StreamHandle) {
        self.markers.retain(|marker| !marker.covers(key, stream));
    }

    fn push(&mut self, key: StreamKey, stream: &StreamHandle, event: EventHandle) {
        if self.markers.len() >= self.prune_at.max(PRUNE_AT) {
            // A completed marker covers nothing that can still run; one whose query fails is
            // kept, and waited for like the others. The next pruning waits for twice as many
            // markers as are left, so each push queries a bounded number on average.
            self.markers
                .retain(|marker| !matches!(marker.event.query(), Ok(true)));
            self.prune_at = 2 * self.markers.len();
        }
        let foreign = !stream.is_default_token() && !stream.as_handle().is_owning();
        let via = foreign.then(|| stream.downgrade());
        self.markers.push(Marker { key, via, event });
    }

    /// The markers, one per stream.
    pub(crate) fn events(&self) -> impl Iterator<Item = &EventHandle> {
        self.markers.iter().map(|marker| &marker.event)
    }

    /// How many streams have a marker.
    pub(crate) fn len(&self) -> usize {
        self.markers.len()
    }

    /// Blocks until the work each marker covers has completed.
    pub(crate) fn host_waits(&self) -> Result<()> {
        // A drop or a host view inside a capture's closure waits here too.
        let _relaxed = crate::driver::capture::relaxed_while_capturing();
        self.events().try_for_each(EventHandle::synchronize)
    }
}
