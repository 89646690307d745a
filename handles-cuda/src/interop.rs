//! Interoperation with cudarc's safe types: wrap a `CudaContext`, `CudaStream` or `CudaSlice`
//! as a handle that keeps the cudarc object alive, and hand handles back to cudarc where its
//! API allows.
//!
//! # Guide
//!
//! | to | use |
//! |---|---|
//! | use a cudarc context or stream with this crate | [`ContextHandle::from_cudarc`], [`StreamHandle::from_cudarc`] (`unsafe`: see its contract on captures) |
//! | take over a `CudaSlice` | [`DevicePtrHandle::from_cudarc_slice`]: the handle keeps the slice, and frees it once, after its uses |
//! | give cudarc a handle's context or stream | [`ContextHandle::to_cudarc`], [`StreamHandle::to_cudarc`]: the handle stays alive while cudarc's wrapper does |
//! | name the exact cudarc this crate was built with | [`cudarc`] |
//!
//! The caller's current context is left as it was by every conversion.

use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr as _};

use crate::driver::call::{driver, driver_error};
use crate::driver::capture;
use crate::driver::current::{KeepCurrent, current_raw, in_context, restore_current};
use crate::driver::load::ensure_loaded;
use crate::error::{Error, Result};
use crate::exec::context::{Context, ContextHandle};
use crate::exec::event::EventHandle;
use crate::exec::stream::{PER_THREAD_STREAM, Stream, StreamHandle};
use crate::memory::device_ptr::{DevicePtrHandle, Owner, drop_owner_in};
use crate::order::contexts_used::ContextsUsed;
use crate::sync::lock;

/// The cudarc this crate is built on, for matching versions in code that uses both.
pub use cudarc;

/// cudarc streams this crate knows about, by raw stream: those wrapped by
/// [`StreamHandle::from_cudarc`] (`keep: None`: cudarc owns them) and those lent to cudarc by
/// [`StreamHandle::to_cudarc`] (`keep`: the handle kept alive for as long as cudarc's wrapper
/// lives). An entry whose wrapper is gone is dead; dead entries are swept by every call that
/// touches the table.
static STREAMS: Mutex<Vec<KnownStream>> = Mutex::new(Vec::new());

struct KnownStream {
    raw: usize,
    cudarc: Weak<CudaStream>,
    keep: Option<StreamHandle>,
}

/// Removes the dead entries and returns them, to be dropped after the lock is released (a
/// kept handle's drop destroys its stream, a driver call). A loan whose cudarc wrapper is gone
/// but whose stream is still capturing stays, and stays counted: cudarc's wrapper of a
/// borrowed stream ends nothing when dropped, so a capture begun through it outlives it.
fn sweep(table: &mut Vec<KnownStream>) -> Vec<KnownStream> {
    let (live, dead): (Vec<_>, Vec<_>) = std::mem::take(table)
        .into_iter()
        .partition(|known| known.cudarc.strong_count() > 0 || still_capturing(known));
    *table = live;
    let returned = dead.iter().filter(|known| known.keep.is_some()).count();
    capture::returned(returned);
    dead
}

/// Whether a lent stream whose cudarc wrapper is gone is still being captured. Asked only of
/// a stream this crate owns (the kept handle keeps it alive; a lent reference's stream may be
/// gone by now, and must not be passed to the driver again). A failed query counts as not
/// capturing, so a context in an error state cannot keep the loan, and its stream, forever.
fn still_capturing(known: &KnownStream) -> bool {
    match &known.keep {
        Some(stream) if stream.is_owning() => stream.is_capturing().unwrap_or(false),
        _ => false,
    }
}

fn streams() -> std::sync::MutexGuard<'static, Vec<KnownStream>> {
    lock(&STREAMS)
}

impl ContextHandle {
    /// Wraps a cudarc context. The handle keeps `context` alive (with-owner, dropped with the
    /// caller's context current again: cudarc binds its own when it drops) and never
    /// releases it itself.
    pub fn from_cudarc(context: &Arc<CudaContext>) -> Self {
        let record = Context::reference(Some(context.ordinal()));
        // SAFETY: the raw context is valid while the cudarc context lives, and the handle
        // keeps it alive.
        unsafe {
            ContextHandle::from_raw_with_owner(
                context.cu_ctx(),
                record,
                KeepCurrent::new(context.clone()),
            )
        }
    }

    /// A cudarc context for the same device's primary context. cudarc retains the primary
    /// context itself, so the result is independent of this handle. Fails for contexts that
    /// are not known to be a device's primary context.
    pub fn to_cudarc(&self) -> Result<Arc<CudaContext>> {
        ensure_loaded()?;
        let Some(ordinal) = self.device() else {
            return Err(Error::WrongContext {
                what: "this context's device is unknown; only primary contexts convert to cudarc",
            });
        };
        // cudarc makes the context it returns current on this thread; the caller's current
        // context is put back, whatever cudarc did.
        let previous = current_raw()?;
        let made = CudaContext::new(ordinal);
        restore_current(previous)?;
        let context = made.map_err(|error| driver_error("cudarc CudaContext::new", error.0))?;
        if context.cu_ctx() != self.as_cu() {
            return Err(Error::WrongContext {
                what: "this is not the device's primary context",
            });
        }
        Ok(context)
    }
}

impl StreamHandle {
    /// Wraps a cudarc stream. The handle keeps `stream` (and so its context) alive and never
    /// destroys it itself.
    ///
    /// # Safety
    ///
    /// No capture may be begun on this stream (through cudarc or any other code outside this
    /// crate) while work is being queued on it through handles-cuda from another thread. The
    /// handles check the stream's capture state before each stream-ordered call and refuse it
    /// (a free is leaked, and reported, rather than captured), but a capture begun by another
    /// thread between that check and the call would capture work whose memory the graph does
    /// not keep alive. A capture begun and ended by the thread that queues the work is always
    /// detected.
    pub unsafe fn from_cudarc(stream: &Arc<CudaStream>) -> Self {
        let record = Stream {
            context: Some(ContextHandle::from_cudarc(stream.context())),
        };
        let raw = stream.cu_stream();
        let dead = {
            let mut table = streams();
            let dead = sweep(&mut table);
            table.push(KnownStream {
                raw: raw as usize,
                cudarc: Arc::downgrade(stream),
                keep: None,
            });
            dead
        };
        drop(dead);
        // SAFETY: the raw stream is valid while the cudarc stream lives, and the handle keeps
        // it alive.
        unsafe { StreamHandle::from_raw_with_owner(raw, record, KeepCurrent::new(stream.clone())) }
    }

    /// A cudarc stream for this stream, in cudarc's context for this stream's context (which
    /// must be a device's primary context, see [`ContextHandle::to_cudarc`]).
    ///
    /// - A stream wrapped by [`StreamHandle::from_cudarc`] gives back cudarc's own stream.
    /// - A default-stream token gives cudarc's default (legacy) or per-thread stream of the
    ///   token's context, or of the current context for a token bound to none.
    /// - Any other stream (one this crate created, a reference, a with-owner wrapper) is *lent*
    ///   to cudarc: the result wraps it without owning it, and a clone of this handle is kept
    ///   alive for as long as the result (or any clone of it) is. cudarc's wrapper cannot hold
    ///   our handle itself, so the clone is kept in a table and dropped by the first call of
    ///   this function, of [`StreamHandle::from_cudarc`] or of
    ///   [`StreamHandle::release_cudarc_loans`] after the last clone of the result is dropped:
    ///   until then the stream is not destroyed. Lending the same stream again while the first
    ///   result lives returns that same result.
    ///
    /// Work queued through cudarc and work queued through handles on the same stream are
    /// ordered by the stream, as usual; across streams ordering is the caller's to arrange.
    ///
    /// # Safety
    ///
    /// No capture may be begun on the returned stream (or this one) (through cudarc or any other code outside this
    /// crate) while work is being queued on it through handles-cuda from another thread. The
    /// handles check the stream's capture state before each stream-ordered call and refuse it
    /// (a free is leaked, and reported, rather than captured), but a capture begun by another
    /// thread between that check and the call would capture work whose memory the graph does
    /// not keep alive. A capture begun and ended by the thread that queues the work is always
    /// detected.
    pub unsafe fn to_cudarc(&self) -> Result<Arc<CudaStream>> {
        ensure_loaded()?;
        let raw = self.as_cu();
        let (found, dead) = {
            let mut table = streams();
            let dead = sweep(&mut table);
            let found = table
                .iter()
                .filter(|known| known.raw == raw as usize)
                .find_map(|known| known.cudarc.upgrade())
                .filter(|cudarc| cudarc.cu_stream() == raw);
            (found, dead)
        };
        drop(dead);
        // A live cudarc wrapper of the same raw stream is the same live stream as ours (live
        // streams have distinct raw values).
        if let Some(found) = found {
            return Ok(found);
        }
        let context = match self.context() {
            Some(context) => context.clone(),
            None if self.is_default_token() => {
                ContextHandle::current()?.ok_or(Error::NoCurrentContext {
                    what: "this default-stream token is bound to no context and none is current",
                })?
            }
            None => {
                return Err(Error::WrongContext {
                    what: "this stream's context is unknown, so cudarc cannot wrap it",
                });
            }
        };
        let cudarc_context = context.to_cudarc()?;
        if self.is_default_token() {
            return Ok(if raw == PER_THREAD_STREAM {
                cudarc_context.per_thread_stream()
            } else {
                cudarc_context.default_stream()
            });
        }
        // SAFETY: `raw` is a live stream of `context` (the handle's record says so), and the
        // table entry below keeps a clone of this handle, so the stream, until no clone of the
        // returned wrapper is left.
        let lent = unsafe { cudarc_context.wrap_borrowed_stream(raw) };
        streams().push(KnownStream {
            raw: raw as usize,
            cudarc: Arc::downgrade(&lent),
            keep: Some(self.clone()),
        });
        capture::lent();
        Ok(lent)
    }

    /// Drops the handles kept alive for cudarc wrappers returned by
    /// [`StreamHandle::to_cudarc`] that have since been dropped, and returns how many it
    /// dropped (destroying each stream whose last handle that was). Streams still in use by
    /// cudarc stay alive.
    pub fn release_cudarc_loans() -> usize {
        let dead = sweep(&mut streams());
        let count = dead.iter().filter(|known| known.keep.is_some()).count();
        drop(dead);
        count
    }

    /// A cudarc stream wrapping this one without owning it, in a cudarc context of the
    /// caller's choice (for contexts that [`ContextHandle::to_cudarc`] refuses). Prefer
    /// [`StreamHandle::to_cudarc`], which finds the context and keeps this stream alive.
    ///
    /// # Safety
    ///
    /// - `context` must be the context this stream belongs to.
    /// - This handle (or a clone) must stay alive until the returned cudarc stream and every
    ///   clone of it (including those held inside cudarc objects, such as slices allocated on
    ///   it) have been dropped.
    /// - The capture clause of [`StreamHandle::to_cudarc`].
    pub unsafe fn to_cudarc_borrowed(&self, context: &Arc<CudaContext>) -> Arc<CudaStream> {
        // SAFETY: forwarded from this function's contract.
        unsafe { context.wrap_borrowed_stream(self.as_cu()) }
    }
}

/// Blocks until the work cudarc queued on a slice of `stream` is done, in relaxed capture mode
/// (a capture's closure, or another thread's global capture, must neither refuse these calls nor
/// be invalidated by them), and never on a stream being captured (the wait would invalidate
/// that capture: refused then, with [`Error::Unordered`]).
///
/// A slice of the per-thread stream may have been made on another thread and sent here, its
/// work queued on that thread's per-thread stream, which `CU_STREAM_PER_THREAD` does not name
/// on this one (and cudarc orders nothing between per-thread streams). The context's legacy
/// stream follows every blocking stream of it, per-thread ones included, so a marker recorded
/// there completes after that work; a context synchronisation would invalidate every capture
/// in the context, the legacy marker only one on a blocking stream, which it is asked about
/// first. While a `GraphHandle::capture` runs (which may begin on a blocking stream between
/// the question and the record) the wrap is refused, as the move of a free off another
/// thread's per-thread stream is.
fn wait_for_slice_work(stream: &Arc<CudaStream>) -> Result<()> {
    let context = ContextHandle::from_cudarc(stream.context());
    let relaxed = capture::relaxed_while_capturing();
    let waited = if stream.cu_stream() == PER_THREAD_STREAM {
        let legacy = StreamHandle::legacy_in(&context)?;
        capture::sync_unless_capturing(|| {
            refuse_if_capturing(&context, legacy.as_cu())?;
            EventHandle::marker_on(&legacy)?.synchronize()
        })
        .unwrap_or(Err(Error::Unordered {
            what: "a slice of cudarc's per-thread stream may hold work queued by another \
                   thread, which only a marker on its context's legacy stream waits for, and a \
                   capture runs, which a capture of a blocking stream could make that marker \
                   join: wrap it once no capture runs",
        }))
    } else {
        let raw = stream.cu_stream();
        refuse_if_capturing(&context, raw).and_then(|()| {
            in_context(context.as_cu(), || {
                // SAFETY: the caller's slice keeps its stream alive for the call (a default
                // token names `context`'s stream, current for the call).
                unsafe { driver!(cuStreamSynchronize(raw)) }
            })
        })
    };
    drop(relaxed);
    waited
}

/// Refuses a wait for `raw` (a stream of `context`, or a default-stream token of it) while it
/// is being captured (the legacy stream: while a blocking stream of the context is), which the
/// wait would invalidate.
fn refuse_if_capturing(context: &ContextHandle, raw: CUstream) -> Result<()> {
    let capturing = in_context(context.as_cu(), || {
        // SAFETY: `raw` is a live stream of `context` (the caller's slice keeps it) or a
        // default-stream token, with `context` current for the call; the driver is loaded (the
        // caller asked it).
        unsafe { capture::is_capturing(raw) }
    })?;
    if capturing {
        return Err(Error::Unordered {
            what: "the slice's work cannot be waited for while its stream (or, for a per-thread \
                   slice, a blocking stream of its context) is being captured: wrap it once the \
                   capture ended",
        });
    }
    Ok(())
}

/// Drops a slice whose work [`wait_for_slice_work`] could not wait for, once it can: its
/// context is synchronised first (on the disposal thread once no capture runs, if one runs
/// now), so cudarc's free, queued on whichever thread drops it, comes after that work. The
/// drop is the one of every foreign value ([`drop_owner_in`]: its context current, relaxed). If the wait fails, the slice is
/// leaked, and reported.
fn drop_after_its_work<T: Send + Sync + 'static>(
    slice: CudaSlice<T>,
    raw: cudarc::driver::sys::CUdeviceptr,
    stream: &Arc<CudaStream>,
) {
    const WHAT: &str = "cudarc slice (not wrapped)";
    let context = ContextHandle::from_cudarc(stream.context());
    let in_context = context.clone();
    let used = ContextsUsed::new();
    // Leaked unless the release runs after a successful wait: dropped unrun (the process
    // exits with the release still waiting), or after a failed wait.
    let slice = std::mem::ManuallyDrop::new(slice);
    let release = move |waited: Result<()>| {
        waited?;
        let owner: Owner = KeepCurrent::new(Box::new(std::mem::ManuallyDrop::into_inner(slice)));
        drop_owner_in(owner, Some(in_context));
        Ok(())
    };
    let released = used
        .note(context.as_cu(), || Ok(context.clone()))
        .and_then(|()| used.release_after_all(WHAT, raw as isize, release));
    if let Err(error) = released {
        handles_core::report_release_failure(WHAT, raw as isize, error);
    }
}

impl DevicePtrHandle {
    /// Wraps a cudarc slice, and returns the slice's stream with it: the stream cudarc orders
    /// the memory's work on and frees it on. [`StreamHandle::to_cudarc`] on the returned stream
    /// gives back cudarc's stream. See [`DevicePtrHandle::from_cudarc_slice`].
    ///
    /// # Safety
    ///
    /// The capture clause of [`StreamHandle::from_cudarc`], for the returned stream.
    pub unsafe fn from_cudarc_slice_with_stream<T: Send + Sync + 'static>(
        slice: CudaSlice<T>,
    ) -> Result<(Self, StreamHandle)> {
        // SAFETY: forwarded from this function's contract.
        let stream = unsafe { StreamHandle::from_cudarc(slice.stream()) };
        Ok((Self::from_cudarc_slice(slice)?, stream))
    }

    /// Wraps a cudarc slice. The handle keeps `slice` (and its stream and context) alive and
    /// never frees the memory itself: cudarc frees it, on the slice's stream, when the last
    /// handle drops the slice. Work the safe methods queue on other streams is ordered before
    /// that free: the slice's stream first waits for it (if it cannot, the slice is leaked
    /// rather than freed while that work may run, and the leak is reported through the report
    /// hook). The slice's stream is the handle's
    /// [`DevicePtrHandle::deallocation_stream`].
    ///
    /// The work cudarc queued on the slice before (its `alloc_zeros` memset, copies, kernels)
    /// is complete when this returns: the slice's stream, made to wait for the slice's pending
    /// writes, is synchronised, so the handle's first use on any stream reads what cudarc
    /// wrote, as a use through cudarc's own API on another stream would. A slice of the
    /// per-thread stream may hold work another thread queued (a slice sent between threads):
    /// a marker on its context's legacy stream, which follows every per-thread stream, is
    /// waited for instead. The wait is refused with [`Error::Unordered`] while the stream it
    /// would wait on is being captured, and for a per-thread slice while a
    /// [`GraphHandle::capture`](crate::graph::GraphHandle::capture) runs; the slice is then
    /// dropped (cudarc frees it) once its work is done.
    pub fn from_cudarc_slice<T: Send + Sync + 'static>(slice: CudaSlice<T>) -> Result<Self> {
        ensure_loaded()?;
        let size = slice.num_bytes();
        let cudarc_stream = slice.stream().clone();
        // Asking for the pointer orders `stream` after pending writes, as cudarc requires.
        let raw = {
            let (raw, sync) = slice.device_ptr(&cudarc_stream);
            drop(sync);
            raw
        };
        // cudarc's work on the slice is done before this crate's streams touch it.
        if let Err(refused) = wait_for_slice_work(&cudarc_stream) {
            drop_after_its_work(slice, raw, &cudarc_stream);
            return Err(refused);
        }
        // SAFETY: the home stream is used only for this crate's ordering of the slice's free
        // (a wait queued before cudarc's own free); it is checked for a capture first, and a
        // capture cudarc begins concurrently would capture cudarc's own free too, which is
        // cudarc's stream discipline, not work whose memory this crate keeps.
        let home = unsafe { StreamHandle::from_cudarc(&cudarc_stream) };
        let record = DevicePtrHandle::foreign_record(size, home, Box::new(slice))?;
        // SAFETY: the memory is valid while the slice lives, and the record holds the slice
        // until the handle's last clone is gone; the record describes `size` bytes truthfully.
        // The handle owns the release: its deleter orders cudarc's free after every use, or
        // leaks the slice and reports why.
        Ok(unsafe { DevicePtrHandle::from_raw(raw, record) })
    }
}
