//! The disposal thread: values whose drop must not run where they are let go (in a driver
//! callback, or while a thread's locals are torn down) are dropped there instead, each under
//! `catch_unwind`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};

/// Something to drop on the disposal thread.
pub(crate) type Disposal = Box<dyn Send + 'static>;

/// The disposal thread's channel; `None` if the thread could not be started.
static DISPOSAL: OnceLock<Option<Mutex<Sender<Disposal>>>> = OnceLock::new();

/// Drops `value` on the disposal thread, never in the caller (a host function, say). If the thread
/// cannot be started (the system refuses a thread), the value is leaked and the leak reported.
pub(crate) fn dispose(value: Disposal) {
    let sender = DISPOSAL.get_or_init(|| {
        let (sender, receiver) = channel::<Disposal>();
        std::thread::Builder::new()
            .name("handles-cuda-disposal".into())
            .spawn(move || {
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
