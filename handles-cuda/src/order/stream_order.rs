//! The ordering rule for stream-ordered frees.
//!
//! A `cuMemFreeAsync` on the deallocation stream ("home") is ordered after work queued on home
//! before it, and after nothing else: the driver may hand the memory to the next allocation
//! while a copy queued on another stream still writes to it. So every safe operation that
//! queues work touching the memory reports the stream it used ([`StreamOrder::record_use`]):
//!
//! - **On home** (the common case) it costs one atomic load and a compare: no event, no lock,
//!   no allocation.
//! - **On another stream** it records a marker event on that stream after the work (one event
//!   per other stream, re-recorded on later uses) under a lock.
//! - **Moving the free** to another stream ([`StreamOrder::move_home`]) turns the old home
//!   into "another stream" with a marker recorded at the move.
//! - **The free** makes home wait for every marker (`cuStreamWaitEvent`), then queues
//!   `cuMemFreeAsync` on home. If a wait cannot be queued, the host waits for the marker
//!   instead; if even that fails, the free is not queued and the deleter reports the error:
//!   leaking is the only sound answer to an ordering the driver refuses.
//! - **A use that cannot be marked** (the event cannot be created or recorded) makes the host
//!   wait for that stream; if even that fails, the memory is marked unorderable and its free
//!   becomes a reported leak. A failed move of the free leaves it where it was.
//!
//! A per-thread default stream means a different stream on every thread, so work on one is
//! identified together with the thread that queued it, and a free from another thread than the
//! one that bound a per-thread home synchronises the home's context first (the free's thread
//! cannot record an event on another thread's per-thread stream); while a capture runs, which
//! that would invalidate, the disposal thread does it, and the free, once none runs.
//!
//! Work that the host already waited for (the synchronous copies) needs no marker.
//!
//! **The race with a concurrent move.** `record_use` reads home *after* its work was queued, and
//! `move_home` publishes the new home *before* it records the marker on the old one, both with
//! `SeqCst`. If `record_use` still reads the old home, its work was queued before the marker was
//! recorded, so the marker covers it; if it reads the new home, it takes the locked path and
//! records its own marker. `tests/loom_stream_order.rs` checks this protocol on every
//! interleaving.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use cudarc::driver::sys::{self, CUdeviceptr};

use crate::driver::call::driver;
use crate::driver::capture::sync_unless_capturing;
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::event::EventHandle;
use crate::exec::stream::StreamHandle;
use crate::order::contexts_used::ContextsUsed;
use crate::order::markers::{Markers, StreamKey};
use crate::order::stream_order_protocol::HomeMirror;
use crate::sync::lock;

struct OrderState {
    /// The deallocation stream (bound to a context if it is a default-stream token).
    home: StreamHandle,
    home_key: StreamKey,
    /// Streams used since the last ordering point, other than home.
    others: Markers,
}

/// Where a stream-ordered free runs, and what it must wait for (see the module docs).
pub(crate) struct StreamOrder {
    mirror: HomeMirror,
    /// Whether the memory was ever used on another stream or moved, or its home is a stream
    /// that other code may capture: until then the free is one `cuMemFreeAsync` on the
    /// mirrored home, without the lock.
    crossed: AtomicBool,
    /// Set when a use could be neither marked nor waited for: the free would be unordered, so
    /// the memory is leaked instead (and the deleter reports it).
    unorderable: AtomicBool,
    state: Mutex<OrderState>,
}

/// The raw stream as the mirror stores it: real streams only (tokens take the locked path).
fn mirror_value(stream: &StreamHandle) -> usize {
    if stream.is_default_token() {
        0
    } else {
        stream.as_cu() as usize
    }
}

impl StreamOrder {
    /// Frees on `home`, which must already be bound ([`StreamHandle::bound`]); called on the
    /// thread that queued the allocation. Fallible only for a default-stream token (it reads
    /// the current context), so call it before allocating.
    #[inline(always)]
    pub(crate) fn new(home: StreamHandle) -> Result<StreamOrder> {
        let home_key = StreamKey::of(&home)?;
        // A home that other code may capture takes the checked path for its free.
        let checked = home.may_be_captured_elsewhere();
        Ok(StreamOrder {
            mirror: HomeMirror::new(mirror_value(&home)),
            crossed: AtomicBool::new(checked),
            unorderable: AtomicBool::new(false),
            state: Mutex::new(OrderState {
                home,
                home_key,
                others: Markers::default(),
            }),
        })
    }

    /// The home stream while the order is still exclusively the creator's (no lock taken).
    pub(crate) fn home_while_creating(&mut self) -> &StreamHandle {
        &self
            .state
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .home
    }

    /// The raw stream the free is queued on, 0 for a default-stream token: for the free and
    /// what follows it, which run when no other handle can move the home.
    #[inline]
    pub(crate) fn home_raw(&self) -> usize {
        self.mirror.raw()
    }

    /// The stream the free will be queued on.
    pub(crate) fn home(&self) -> StreamHandle {
        lock(&self.state).home.clone()
    }

    /// Reports that work touching the memory was queued on `stream` by this thread. Call it
    /// after the work was queued.
    #[inline]
    pub(crate) fn record_use(&self, stream: &StreamHandle) -> Result<()> {
        if !stream.is_default_token() && self.mirror.is_home(stream.as_cu() as usize) {
            return Ok(());
        }
        self.used_on_other(stream)
    }

    #[cold]
    fn used_on_other(&self, stream: &StreamHandle) -> Result<()> {
        let key = StreamKey::of(stream)?;
        let mut state = lock(&self.state);
        if key == state.home_key {
            return Ok(());
        }
        self.crossed.store(true, Ordering::Relaxed);
        let marked = state.others.mark(key, stream);
        // The work is already queued: if it cannot be marked, the host waits for it, and if
        // even that fails the free must never run.
        if let Err(error) = marked {
            if stream.synchronize().is_err() {
                self.unorderable.store(true, Ordering::Relaxed);
            }
            return Err(error);
        }
        Ok(())
    }

    /// Moves the free to `new_home` (already bound), ordered after everything queued on the
    /// old home so far.
    pub(crate) fn move_home(&self, new_home: StreamHandle) -> Result<()> {
        let new_key = StreamKey::of(&new_home)?;
        let mut state = lock(&self.state);
        self.crossed.store(true, Ordering::Relaxed);
        if new_key == state.home_key {
            state.home = new_home;
            return Ok(());
        }
        // Published before the marker is recorded on the old home (see the module docs).
        self.mirror.set_home(mirror_value(&new_home));
        let old_key = state.home_key;
        let on_another_thread = old_key.thread.is_some_and(|t| t != thread::current().id());
        let ordered = if on_another_thread {
            // The old home is another thread's per-thread stream, which this thread cannot
            // record on: wait for everything in its context instead, unless a capture runs,
            // which that would invalidate (the move is refused then).
            state.home.owning_context().and_then(|context| {
                sync_unless_capturing(|| context.synchronize()).unwrap_or(Err(Error::Unordered {
                    what: "the free stays on another thread's per-thread stream: only a \
                           synchronisation of its context could order the move, and a capture \
                           runs, which that would invalidate",
                }))
            })
        } else {
            EventHandle::marker_on(&state.home).map(|marker| {
                let old_home = state.home.clone();
                state.others.replace(old_key, &old_home, marker)
            })
        };
        if let Err(error) = ordered {
            // The free stays where it was, and the mirror says so again.
            self.mirror.set_home(mirror_value(&state.home));
            return Err(error);
        }
        state.others.forget(new_key, &new_home);
        state.home = new_home;
        state.home_key = new_key;
        Ok(())
    }

    /// Queues the free of `raw` on home after every other stream's marker. Runs once, in the
    /// deleter, when no other handle can use the memory any more. `keep` makes what the free
    /// needs alive (the pool), kept until the free is done when it is handed to the disposal
    /// thread ([`Self::order_home`]); `Ok` then means handed over.
    #[inline]
    pub(crate) fn free<K: Send + 'static>(
        &self,
        raw: CUdeviceptr,
        keep: impl FnOnce() -> K,
    ) -> Result<()> {
        // The deleter runs on the thread that dropped the last handle, after every other use
        // (the handle's drop synchronised with them), so relaxed loads see the final values.
        let home_raw = self.home_raw();
        if self.unorderable.load(Ordering::Relaxed) {
            return Err(Error::Unordered {
                what: "a use of this memory on another stream could not be ordered before its \
                       free, so it is leaked rather than freed while that work may still run",
            });
        }
        if !self.crossed.load(Ordering::Relaxed)
            && home_raw != 0
            && !crate::driver::capture::foreign_capture_possible()
        {
            // Used on its real home stream only: nothing to wait for.
            // SAFETY: the handle owns `raw`; home is alive (the locked state holds its handle).
            return unsafe { driver!(cuMemFreeAsync(raw, home_raw as sys::CUstream)) };
        }
        self.free_ordered(raw, keep)
    }

    /// The free of memory that crossed streams, or whose home is a default-stream token.
    #[cold]
    #[inline(never)]
    fn free_ordered<K: Send + 'static>(
        &self,
        raw: CUdeviceptr,
        keep: impl FnOnce() -> K,
    ) -> Result<()> {
        // Left after the lock (declared first).
        let _relaxed = crate::driver::capture::relaxed_while_capturing();
        let state = lock(&self.state);
        // A free queued on a stream that other code captures would become a graph node, run
        // once per launch of that graph (or never): leaked and reported instead.
        state.home.refuse_foreign_capture()?;
        Self::order_home(&state, raw as isize, keep, move |home| {
            // SAFETY: the handle owns `raw`, and no handle can use it any more; home is alive
            // (the caller's state, or the handed-over release, holds its handle) and ordered
            // after every use.
            unsafe { driver!(cuMemFreeAsync(raw, home)) }
        })
    }

    /// Makes home wait for every other stream the memory was used on, then runs `free`, which
    /// queues another library's free on home (a cudarc slice's drop): at once, or on the
    /// disposal thread ([`Self::order_home`]). An error means home could not be ordered:
    /// `free` is dropped unrun, and must then leak what it owns.
    pub(crate) fn order_home_after_uses(
        &self,
        raw: isize,
        free: impl FnOnce() + Send + 'static,
    ) -> Result<()> {
        if self.unorderable.load(Ordering::Relaxed) {
            return Err(Error::Unordered {
                what: "a use of this memory on another stream could not be ordered",
            });
        }
        let state = lock(&self.state);
        // Another library's free on a stream that is being captured would become a graph node,
        // or be refused (invalidating the capture) with the error swallowed: checked whether or
        // not the memory crossed streams, as the legacy stream joins the capture of a blocking
        // stream of its context (found by review: a silent leak before).
        state.home.refuse_foreign_capture()?;
        if !self.crossed.load(Ordering::Relaxed) {
            drop(state);
            free();
            return Ok(());
        }
        Self::order_home(
            &state,
            raw,
            || (),
            move |_| {
                free();
                Ok(())
            },
        )
    }

    /// Orders home after every marker (or the host after each marker it cannot wait for), then
    /// runs `then` on home. A per-thread home of another thread cannot be ordered by this
    /// thread, whose per-thread stream is another stream: the home's context is waited for
    /// first. While a `GraphHandle::capture` runs, on any thread, that synchronisation would
    /// invalidate it (driver 580: `cuda-sim/probes/capture_side_calls.py`), so the wait, the
    /// markers and `then` are handed to the disposal thread, which runs them once none runs
    /// ([`ContextsUsed::release_after_all`]) with what `keep` returns alive until `then`'s work
    /// is done; a failure there goes to the report hook under `raw`.
    fn order_home<K: Send + 'static>(
        state: &OrderState,
        raw: isize,
        keep: impl FnOnce() -> K,
        then: impl FnOnce(sys::CUstream) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        let foreign = state
            .home_key
            .thread
            .is_some_and(|t| t != thread::current().id());
        if foreign {
            let context = state.home.owning_context()?;
            match sync_unless_capturing(|| context.synchronize()) {
                Some(waited) => waited?,
                None => return Self::order_after_captures(state, raw, context, keep(), then),
            }
        }
        Self::wait_markers_then(&state.home, state.others.events(), then)
    }

    /// [`Self::order_home`] for another thread's per-thread home while a capture runs.
    #[cold]
    #[inline(never)]
    fn order_after_captures<K: Send + 'static>(
        state: &OrderState,
        raw: isize,
        context: ContextHandle,
        kept: K,
        then: impl FnOnce(sys::CUstream) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        let home_context = ContextsUsed::new();
        home_context.note(context.as_cu(), || Ok(context.clone()))?;
        // The disposal thread's per-thread stream, in home's context: after the context's
        // work, it is ordered after everything home ran.
        let home = state.home.clone();
        let markers: Vec<EventHandle> = state.others.events().cloned().collect();
        home_context.release_after_all("DevicePtr", raw, move |waited| {
            let done = waited
                .and_then(|()| Self::wait_markers_then(&home, markers.iter(), then))
                .and_then(|()| home.synchronize());
            // What the free needs goes once it is done; if that is not known, never.
            match done {
                Ok(()) => drop(kept),
                Err(_) => std::mem::forget(kept),
            }
            done
        })
    }

    /// Makes `home` wait for each marker (the host waits for one it cannot queue a wait for; if
    /// even that fails, `then` is not run), then runs `then` on it.
    fn wait_markers_then<'a>(
        home: &StreamHandle,
        markers: impl Iterator<Item = &'a EventHandle>,
        then: impl FnOnce(sys::CUstream) -> Result<()>,
    ) -> Result<()> {
        home.run(|home| {
            for marker in markers {
                // SAFETY: `home` and the marker are alive (the marker's handle is held here).
                let waited = unsafe { driver!(cuStreamWaitEvent(home, marker.as_cu(), 0)) };
                if waited.is_err() {
                    // The host waits instead; if it cannot, the memory must not be freed.
                    marker.synchronize()?;
                }
            }
            then(home)
        })
    }
}

impl std::fmt::Debug for StreamOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("StreamOrder")
            .field("home", &state.home_key)
            .field("others", &state.others.len())
            .finish()
    }
}
