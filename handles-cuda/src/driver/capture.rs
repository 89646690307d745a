//! Capture state: can a stream be capturing into a graph without this crate knowing?
//!
//! Stream-ordered work through handles is refused on a stream that other code captures: the
//! graph would reference memory no handle keeps alive, and an allocation or a free would
//! become a graph node instead of happening. A stream this crate created and never lent can
//! only be captured by this crate's own `GraphHandle::capture`, so the check is two relaxed
//! loads of the counters here; only while a stream is lent to another library, or a capture
//! runs, does a stream-ordered call ask the driver (`cuStreamIsCapturing`).
//!
//! The counters live here, read by streams, free orders and graphs; the cudarc adapter only
//! counts its loans in and out ([`lent`], [`returned`]).

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::sys::{self, CUstream};

use crate::driver::call::driver;
use crate::driver::capture_sync::CaptureSync;
use crate::error::Result;

/// How many streams are lent to another library (cudarc) now.
static LENT: AtomicUsize = AtomicUsize::new(0);

/// The `GraphHandle::capture`s running now, and the context synchronisations they wait for.
#[cfg(not(handles_cuda_loom))]
static CAPTURES: CaptureSync = CaptureSync::new();
/// As above; loom's atomics (`--cfg handles_cuda_loom`, for the models of single files) have
/// no `const` constructor.
#[cfg(handles_cuda_loom)]
static CAPTURES: std::sync::LazyLock<CaptureSync> = std::sync::LazyLock::new(CaptureSync::new);

/// Counts one stream lent to another library, which can begin a capture on it unseen.
pub(crate) fn lent() {
    LENT.fetch_add(1, Ordering::Relaxed);
}

/// Counts `count` lent streams as given back.
pub(crate) fn returned(count: usize) {
    LENT.fetch_sub(count, Ordering::Relaxed);
}

/// Counts a capture in progress for as long as it lives.
pub(crate) struct CaptureInProgress(());

impl CaptureInProgress {
    /// Counts a capture about to begin; first waits for the crate's context synchronisations
    /// that began before (`capture_sync.rs`): one running while the capture begins would
    /// invalidate it. At most [`SYNC_PATIENCE`]: a synchronisation may wait for device work
    /// that waits for this thread (a host function it is to release), so the capture then goes
    /// ahead, and is invalidated (an error) if the synchronisation is still running.
    pub(crate) fn begin() -> CaptureInProgress {
        let start = std::time::Instant::now();
        // Releases handed over while captures ran go first (within the same patience), so that
        // captures begun back to back on several threads cannot hold them back for ever;
        // except inside a capture's closure, whose own capture holds them back.
        if !in_capture_closure() {
            while RELEASES_WAITING.load(Ordering::Relaxed) != 0 && start.elapsed() < SYNC_PATIENCE {
                std::thread::sleep(std::time::Duration::from_micros(10));
            }
        }
        CAPTURES.begin_capture(|| {
            std::thread::sleep(std::time::Duration::from_micros(10));
            start.elapsed() < SYNC_PATIENCE
        });
        CaptureInProgress(())
    }
}

/// Releases handed to the disposal thread to run once no capture runs, not run yet
/// ([`ReleaseWaiting`]). Only a hint for fairness: exclusion is `CAPTURES`' work.
static RELEASES_WAITING: AtomicUsize = AtomicUsize::new(0);

/// Counts a release waiting for no capture to run, for as long as it lives.
pub(crate) struct ReleaseWaiting(());

impl ReleaseWaiting {
    pub(crate) fn new() -> ReleaseWaiting {
        RELEASES_WAITING.fetch_add(1, Ordering::Relaxed);
        ReleaseWaiting(())
    }
}

impl Drop for ReleaseWaiting {
    fn drop(&mut self) {
        RELEASES_WAITING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a capture waits, as it begins, for context synchronisations under way.
const SYNC_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

impl Drop for CaptureInProgress {
    fn drop(&mut self) {
        CAPTURES.end_capture();
    }
}

/// Runs `sync` (a context synchronisation) if no `GraphHandle::capture` runs, on any thread;
/// a capture about to begin waits for it to return (up to [`SYNC_PATIENCE`]). `None`, without
/// running it, while a capture runs.
pub(crate) fn sync_unless_capturing<T>(sync: impl FnOnce() -> T) -> Option<T> {
    if !CAPTURES.try_begin_sync() {
        return None;
    }
    struct Ends;
    impl Drop for Ends {
        fn drop(&mut self) {
            CAPTURES.end_sync();
        }
    }
    let _ends = Ends;
    Some(sync())
}

thread_local! {
    /// How many `GraphHandle::capture` closures run on this thread now (nested captures count
    /// each).
    static CLOSURES_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts a capture's closure running on this thread for as long as it lives: stream-ordered
/// work through handles on this thread is refused meanwhile (it would run at once, outside
/// the graph), except the capture's own.
pub(crate) struct ClosureOnThisThread(std::marker::PhantomData<*const ()>);

impl ClosureOnThisThread {
    pub(crate) fn begin() -> ClosureOnThisThread {
        CLOSURES_HERE.with(|count| count.set(count.get() + 1));
        ClosureOnThisThread(std::marker::PhantomData)
    }
}

impl Drop for ClosureOnThisThread {
    fn drop(&mut self) {
        CLOSURES_HERE.with(|count| count.set(count.get() - 1));
    }
}

/// Whether a capture's closure runs on this thread now. Read only where a capture runs at all
/// ([`foreign_capture_possible`]), so it costs nothing otherwise.
pub(crate) fn in_capture_closure() -> bool {
    CLOSURES_HERE.with(std::cell::Cell::get) != 0
}

/// Whether some stream may be capturing without this crate knowing: a stream is lent, or a
/// capture runs (two relaxed loads). A relaxed load suffices: a loan or a capture begun by
/// another thread is ordered before this thread's use of that stream only by that use's own
/// synchronisation, which the `unsafe` lending functions make the caller's to provide.
#[inline]
pub(crate) fn foreign_capture_possible() -> bool {
    LENT.load(Ordering::Relaxed) != 0 || CAPTURES.capture_possible()
}

/// Whether `stream` is being captured into a graph now (`cuStreamIsCapturing`; an invalidated
/// capture counts, and so does the legacy stream while a blocking stream of its context
/// captures).
///
/// # Safety
///
/// `stream` must be a live stream, or a default-stream token while a context is current; the
/// driver must be loaded.
pub(crate) unsafe fn is_capturing(stream: CUstream) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller vouches for `stream`; `status` is a valid out-pointer.
    match unsafe { driver!(cuStreamIsCapturing(stream, &mut status)) } {
        Ok(()) => Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE),
        // The legacy stream while a blocking stream of its context captures: work queued on it
        // would join that capture (the driver answers so, and the capture goes on).
        Err(error) if error.code() == Some(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) => {
            Ok(true)
        }
        Err(error) => Err(error),
    }
}

/// This thread's stream-capture mode, relaxed for as long as the guard lives: calls the crate
/// makes behind a user's back (a release that waits, a free's bookkeeping, the disposal
/// thread's markers) must neither be refused nor invalidate a capture because this thread is
/// inside a capture's closure, or another thread captures in global mode. cuda.core's VMM
/// release relaxes the mode for the same reason. The previous mode is put back by
/// [`restore`](Self::restore), which returns the driver's error, or by the drop (a panic
/// included), which reports one to the report hook.
pub(crate) struct RelaxedCaptureMode {
    previous: sys::CUstreamCaptureMode,
    /// The mode is this thread's: the guard stays on it.
    _thread: PhantomData<*const ()>,
}

impl RelaxedCaptureMode {
    /// Relaxes this thread's mode; on an error the mode is unchanged.
    pub(crate) fn enter() -> Result<Self> {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a valid in/out pointer; the call swaps this thread's mode.
        unsafe { driver!(cuThreadExchangeStreamCaptureMode(&mut mode)) }?;
        Ok(RelaxedCaptureMode {
            previous: mode,
            _thread: PhantomData,
        })
    }

    /// Puts this thread's previous mode back.
    pub(crate) fn restore(self) -> Result<()> {
        let guard = ManuallyDrop::new(self);
        guard.exchange_back()
    }

    fn exchange_back(&self) -> Result<()> {
        let mut mode = self.previous;
        // SAFETY: as in `enter`; puts the mode `enter` took out back.
        unsafe { driver!(cuThreadExchangeStreamCaptureMode(&mut mode)) }
    }
}

impl Drop for RelaxedCaptureMode {
    fn drop(&mut self) {
        if let Err(error) = self.exchange_back() {
            handles_core::report_release_failure("stream capture mode", 0, error);
        }
    }
}

/// Relaxed capture mode for a call on a stream outside any capture (a free, an allocation, a
/// query, a wait) while a capture may run ([`foreign_capture_possible`]: two relaxed loads, and
/// `None` when none can): driver 580 refuses such calls, and invalidates the capture, when the
/// calling thread runs a global- or thread-local-mode capture's closure or another thread
/// captures in global mode (an H100: `cuda-sim/probes/capture_side_calls.py`). `None` also
/// when the driver refuses the exchange: the call is then made in the thread's own mode.
#[inline]
pub(crate) fn relaxed_while_capturing() -> Option<RelaxedCaptureMode> {
    if !foreign_capture_possible() {
        return None;
    }
    relaxed_now()
}

/// [`relaxed_while_capturing`]'s exchange, off the common path.
#[cold]
#[inline(never)]
fn relaxed_now() -> Option<RelaxedCaptureMode> {
    RelaxedCaptureMode::enter().ok()
}

/// Puts this thread in relaxed capture mode for good: for the crate's own threads (the
/// disposal and waiter threads), whose queries, waits and frees must never be refused by, nor
/// invalidate, a global-mode capture another thread runs. Best effort: without a driver, or if
/// it refuses, the thread keeps the default mode, as before.
pub(crate) fn relax_this_thread_for_good() {
    // Unit tests start these threads with no driver to call.
    if crate::driver::load::ensure_loaded().is_err() {
        return;
    }
    if let Ok(relaxed) = RelaxedCaptureMode::enter() {
        std::mem::forget(relaxed);
    }
}

/// Runs `call` with this thread's capture mode relaxed ([`RelaxedCaptureMode`]), then restores
/// it. A failed restore is the error returned when `call` succeeded; when `call` failed too,
/// its error is returned and the restore's goes to the report hook.
pub(crate) fn in_relaxed_capture_mode<T>(call: impl FnOnce() -> Result<T>) -> Result<T> {
    let relaxed = RelaxedCaptureMode::enter()?;
    let called = call();
    match (called, relaxed.restore()) {
        (Ok(value), restored) => restored.map(|()| value),
        (Err(error), Ok(())) => Err(error),
        (Err(error), Err(restore)) => {
            handles_core::report_release_failure("stream capture mode", 0, restore);
            Err(error)
        }
    }
}

/// A [`RelaxedCaptureMode`] entered only when first needed (a free's note that prunes, say,
/// which is rare), and left when this is dropped.
#[derive(Default)]
pub(crate) struct RelaxedWhenNeeded(Option<Option<RelaxedCaptureMode>>);

impl RelaxedWhenNeeded {
    /// Relaxes the mode on the first call; whether it is relaxed (`false` when the driver
    /// refused, and for every later call then).
    pub(crate) fn relax(&mut self) -> bool {
        self.0
            .get_or_insert_with(|| RelaxedCaptureMode::enter().ok())
            .is_some()
    }
}
