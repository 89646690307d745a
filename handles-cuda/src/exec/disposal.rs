//! The disposal thread: values whose drop must not run where they are let go (in a driver
//! callback, or while a thread's locals are torn down) are dropped there instead, each under
//! `catch_unwind`.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, SyncSender, channel, sync_channel};
use std::sync::{Mutex, OnceLock};

/// Something to drop on the disposal thread.
pub(crate) type Disposal = Box<dyn Send + 'static>;

/// The disposal thread's channel; `None` if the thread could not be started.
static DISPOSAL: OnceLock<Option<Mutex<Sender<Disposal>>>> = OnceLock::new();

thread_local! {
    /// Set on the disposal thread, which must not wait for itself in [`flush`].
    static ON_DISPOSAL_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Tells [`flush`] that everything handed over before it has been dropped: the thread drops
/// values in the order they were sent.
struct Marker(SyncSender<()>);

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Returns once every value handed to [`dispose`] before this call has been dropped (at once
/// if the thread never started, or when called on the disposal thread itself, from a drop).
pub(crate) fn flush() {
    if ON_DISPOSAL_THREAD.get() {
        return;
    }
    let Some(Some(sender)) = DISPOSAL.get() else {
        return;
    };
    let (done, wait) = sync_channel(1);
    if crate::sync::lock(sender)
        .send(Box::new(Marker(done)))
        .is_ok()
    {
        // An `Err` means the thread ended, dropping what it had queued, the marker included.
        let _ = wait.recv();
    }
}

/// Drops `value` on the disposal thread, never in the caller (a host function, say). If the thread
/// cannot be started (the system refuses a thread), the value is leaked and the leak reported.
pub(crate) fn dispose(value: Disposal) {
    let sender = DISPOSAL.get_or_init(|| {
        let (sender, receiver) = channel::<Disposal>();
        std::thread::Builder::new()
            .name("handles-cuda-disposal".into())
            .spawn(move || {
                ON_DISPOSAL_THREAD.set(true);
                // Each value is dropped as the only handle of whatever it holds; a panicking
                // `Drop` must not end the thread.
                for value in receiver {
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
                        handles_core::report_panic(
                            "a value dropped on the disposal thread",
                            0,
                            payload,
                        );
                    }
                }
            })
            .ok()
            .map(|_| Mutex::new(sender))
    });
    let refused = match sender {
        Some(sender) => crate::sync::lock(sender).send(value).err().map(|e| e.0),
        None => Some(value),
    };
    if let Some(value) = refused {
        std::mem::forget(value);
        handles_core::report_panic(
            "a value for the disposal thread (leaked: no disposal thread)",
            0,
            Box::new("the disposal thread could not be started"),
        );
    }
}

#[cfg(test)]
mod tests {
    //! The barrier's promise (also under miri, which checks the hand-off between threads).

    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Counts its drop after a pause, so that a flush that does not wait sees it missing.
    struct Slow(Arc<AtomicUsize>);

    impl Drop for Slow {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(20));
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Calls `flush` from its own drop, on the disposal thread: it must return, not wait for
    /// itself.
    struct Reentrant(Arc<AtomicUsize>);

    impl Drop for Reentrant {
        fn drop(&mut self) {
            flush();
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn flush_returns_after_every_earlier_value_was_dropped() {
        let dropped = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            dispose(Box::new(Slow(dropped.clone())));
        }
        dispose(Box::new(Reentrant(dropped.clone())));
        flush();
        assert_eq!(dropped.load(Ordering::SeqCst), 4);
    }
}
