//! Host functions: Rust closures that the driver runs on a thread of its own once the work
//! queued before them on a stream completes (`cuLaunchHostFunc`), and the same closures as
//! graph nodes (`graph::GraphHandle::add_host_node`).
//!
//! The driver forbids CUDA calls from a host function (it may fail or deadlock), and a panic
//! must never unwind into the driver's C frame. So:
//!
//! - The closure runs under `catch_unwind`; a panic is handed to the report hook
//!   (`handles_core::report_panic_of`) and the stream goes on; its payload is dropped on the
//!   disposal thread, as the captures are.
//! - The closure is `FnMut`, called through a reference: what it captured is not dropped in the
//!   host function but sent to a disposal thread of this crate (started on first use), where
//!   dropping a captured handle may call the driver. Capturing a handle to keep it alive until
//!   the stream reaches the function is the intended use. Only what the closure itself moves
//!   out and drops, or a call it makes, would run in the host function: that is the caller's to
//!   avoid, and the checking simulator reports it as a violation.
//! - A stream that another library is capturing is refused (`Error::Capturing`): captured, a
//!   one-shot function would become a graph node that runs once per replay.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::driver::call::driver;
use crate::error::Result;
use crate::exec::stream::StreamHandle;

/// What a stream's host function owns: the closure, called once.
type OneShot = Box<dyn FnMut() + Send + 'static>;

use crate::exec::disposal::dispose;

/// Runs `call` under `catch_unwind`, reporting a panic as `what`: the one way a closure runs
/// inside a host function (a stream's or a graph host node's). Nothing of the closure's is
/// dropped here: a panic's payload is any value the closure chose (`panic_any(handle)`), whose
/// drop may call the driver, so it goes to the disposal thread like the captures do.
pub(crate) fn run_caught(what: &'static str, data: *mut c_void, call: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(call)) {
        handles_core::report_panic_of(what, data as isize, &*payload);
        dispose(Box::new(payload));
    }
}

/// The host function of [`StreamHandle::launch_host`]: calls the closure once, then sends it
/// (and what it captured) to the disposal thread.
unsafe extern "C" fn run_once(data: *mut c_void) {
    // The driver calls a host function exactly once per `cuLaunchHostFunc` that succeeded
    // (the stream is not captured: refused before the call), so this is the only use of the
    // box made by `launch_host`.
    // SAFETY: `data` is the `Box<OneShot>` that `launch_host` leaked for this one call.
    let mut call: Box<OneShot> = unsafe { Box::from_raw(data.cast::<OneShot>()) };
    run_caught("host function", data, || (*call)());
    dispose(call);
}

impl StreamHandle {
    /// Runs `f` on a driver thread once the work queued on this stream before it completes;
    /// work queued after it waits for it (`cuLaunchHostFunc`). For cheap host-side
    /// bookkeeping: signalling, counting, waking a task.
    ///
    /// `f` must not call CUDA, through this crate or any other: the driver forbids it (the call
    /// may fail or deadlock), and the checking simulator reports it. What `f` captures is not
    /// dropped in the host function but on a thread of this crate, so capturing handles to keep
    /// them alive until the stream gets here is fine. A panic in `f` is caught and reported
    /// (`handles_core::report_panic`), and the stream goes on.
    ///
    /// Refused with [`Error::Capturing`](crate::Error::Capturing) while another library
    /// captures the stream, and with [`Error::OutsideCapture`](crate::Error::OutsideCapture)
    /// inside a capture's closure; on `Err`, `f` is dropped here and never runs.
    pub fn launch_host<F: FnMut() + Send + 'static>(&self, f: F) -> Result<()> {
        self.refuse_if_captured()?;
        self.queue_host(f)
    }

    /// [`Self::launch_host`] after the caller checked the stream's capture state (the
    /// crate's own host functions, which go ahead inside a capture's closure).
    pub(crate) fn queue_host<F: FnMut() + Send + 'static>(&self, f: F) -> Result<()> {
        let data = Box::into_raw(Box::new(Box::new(f) as OneShot)).cast::<c_void>();
        let queued = self.queue(|raw_stream| {
            // SAFETY: the stream is alive; `run_once` takes ownership of `data`, the box
            // leaked above, when the driver calls it, which it does once (the stream is not
            // being captured, so the call is not turned into a graph node).
            unsafe { driver!(cuLaunchHostFunc(raw_stream, Some(run_once), data)) }
        });
        if !queued.queued {
            // SAFETY: the driver did not take `data`, so this is its only owner.
            drop(unsafe { Box::from_raw(data.cast::<OneShot>()) });
        }
        queued.status
    }
}

#[cfg(test)]
mod tests {
    //! The host functions' side of the driver's contract, played by the test (also under miri,
    //! which checks the box's ownership and the thread hand-off): the driver calls `run_once`
    //! once with the pointer `launch_host` passed.

    use super::*;
    use std::sync::Arc;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// The pointer `launch_host` gives the driver for `f`.
    fn leaked<F: FnMut() + Send + 'static>(f: F) -> *mut c_void {
        Box::into_raw(Box::new(Box::new(f) as OneShot)).cast()
    }

    /// Counts its drops and the threads they ran on.
    struct Tracked(Arc<Mutex<Vec<std::thread::ThreadId>>>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            crate::sync::lock(&self.0).push(std::thread::current().id());
        }
    }

    #[test]
    fn a_host_function_runs_once_catches_its_panic_and_drops_its_captures_elsewhere() {
        let _hook = crate::exec::disposal::tests::REPORT_HOOK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let reports = Arc::new(Mutex::new(Vec::new()));
        let sink = reports.clone();
        handles_core::set_report_hook(move |failure| {
            crate::sync::lock(&sink).push(format!("{}: {}", failure.type_name, failure.error));
        });
        let calls = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(Mutex::new(Vec::new()));
        let (seen, tracked) = (calls.clone(), Tracked(drops.clone()));
        let data = leaked(move || {
            let _keep = &tracked;
            seen.fetch_add(1, Ordering::SeqCst);
        });
        // SAFETY: `data` is the box made for this one call, as the driver would pass it.
        unsafe { run_once(data) };
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let start = Instant::now();
        while crate::sync::lock(&drops).is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "captures never dropped"
            );
            std::thread::yield_now();
        }
        let dropped_on = crate::sync::lock(&drops)[0];
        assert_ne!(
            dropped_on,
            std::thread::current().id(),
            "dropped in the host function"
        );

        let data = leaked(|| panic!("on purpose"));
        // SAFETY: as above.
        unsafe { run_once(data) };
        let reports = crate::sync::lock(&reports).clone();
        handles_core::reset_report_hook();
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(reports[0], "host function: panicked: on purpose");
    }
}
