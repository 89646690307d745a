//! The process-wide hook that receives deleter failures from `Drop`.
//!
//! `Drop` cannot return an error and must not panic, yet a failed `cuMemFreeAsync` or `munmap`
//! must not vanish. Every such failure is handed to one replaceable hook. The default hook writes
//! one line to stderr. Explicit [`close`](crate::Handle::close) returns the error instead and
//! does not call the hook.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, RwLock};

use crate::DeleteError;

/// One deleter failure, as given to the report hook.
#[derive(Debug)]
pub struct DeleteFailure<'a> {
    /// The resource type's name, as declared.
    pub type_name: &'static str,
    /// The raw value that was being deleted, as an integer (see [`crate::RawValue::to_intptr`]).
    pub raw: isize,
    /// The same raw value, printable as the C API shows it: integers in decimal, pointers in
    /// hex.
    pub raw_value: &'a dyn std::fmt::Debug,
    /// What went wrong.
    pub error: &'a DeleteError,
}

type Hook = Arc<dyn Fn(&DeleteFailure<'_>) + Send + Sync + 'static>;

static HOOK: RwLock<Option<Hook>> = RwLock::new(None);

/// Replaces the process-wide report hook and returns `true` if a custom hook was installed
/// before. The hook may run on any thread that drops a handle, possibly while that thread is
/// unwinding; it must not block on locks that a dropping thread may hold.
pub fn set_report_hook<F>(hook: F) -> bool
where
    F: Fn(&DeleteFailure<'_>) + Send + Sync + 'static,
{
    let previous = HOOK
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .replace(Arc::new(hook));
    // The old hook is dropped after the lock is released: dropping it can release handles it
    // captured, whose deleters may fail and report, which takes the lock again.
    let had_custom_hook = previous.is_some();
    drop(previous);
    had_custom_hook
}

/// Restores the default hook (one line on stderr).
pub fn reset_report_hook() {
    let previous = HOOK
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    // Dropped outside the lock, as in `set_report_hook`.
    drop(previous);
}

/// Reports a panic caught where no caller can receive it, such as a callback that a C library
/// runs on a thread of its own, through the same hook as deleter failures: `type_name` names
/// what panicked, `raw` the value it was running for, and the error says "panicked: " and the
/// payload's message. Never unwinds, and drops the payload without letting its `Drop` unwind.
pub fn report_panic(type_name: &'static str, raw: isize, payload: Box<dyn std::any::Any + Send>) {
    report_panic_of(type_name, raw, &*payload);
    crate::error::drop_without_unwinding(payload);
}

/// [`report_panic`] without taking the payload: reports it and leaves its drop to the caller,
/// for a caller on a thread where the payload must not be dropped (a C library's callback
/// thread, where a payload that owns a handle would run its deleter: the caller hands it to a
/// thread of its own instead). Never unwinds.
pub fn report_panic_of(type_name: &'static str, raw: isize, payload: &(dyn std::any::Any + Send)) {
    let message = crate::error::panic_message(payload);
    report_release_failure(type_name, raw, CaughtPanic(message));
}

/// Reports a release that failed outside a deleter (a thread's cache letting go of what it
/// held, say) through the same hook as a deleter's failure, with `raw` shown in hex. Never
/// unwinds.
pub fn report_release_failure(
    type_name: &'static str,
    raw: isize,
    error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) {
    let error = DeleteError::new(error);
    report(&DeleteFailure {
        type_name,
        raw,
        raw_value: &format_args!("{raw:#x}"),
        error: &error,
    });
}

/// A panic caught outside a deleter, as [`report_panic`] reports it.
#[derive(Debug)]
struct CaughtPanic(String);

impl std::fmt::Display for CaughtPanic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "panicked: {}", self.0)
    }
}

impl std::error::Error for CaughtPanic {}

/// Hands a failure to the installed hook, or prints it. Never unwinds: a panicking hook is
/// caught and the failure is printed instead, and a panic while printing (the error's `Display`
/// is user code) is caught too, so nothing aborts a thread that is already unwinding.
pub(crate) fn report(failure: &DeleteFailure<'_>) {
    let hook = HOOK
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    let delivered = match &hook {
        Some(hook) => quietly(|| hook(failure)),
        None => false,
    };
    if !delivered {
        quietly(|| print_failure(failure));
    }
    // The last clone of a replaced hook may be dropped here; its `Drop` is user code too.
    crate::error::drop_without_unwinding(hook);
}

/// Runs `f`, catching a panic; `true` if it returned normally. A caught payload is dropped
/// without unwinding.
fn quietly(f: impl FnOnce()) -> bool {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => true,
        Err(payload) => {
            crate::error::drop_without_unwinding(payload);
            false
        }
    }
}

fn print_failure(failure: &DeleteFailure<'_>) {
    // The error is formatted first, on its own: its `Display` is user code and may panic, and
    // the line must still come out whole.
    let error = match catch_unwind(AssertUnwindSafe(|| failure.error.to_string())) {
        Ok(text) => text,
        Err(payload) => {
            crate::error::drop_without_unwinding(payload);
            "(the error's Display implementation panicked)".to_owned()
        }
    };
    // `eprintln!` panics if stderr is closed; a report must never panic, so write by hand.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "handles: failed to delete {} {:?}: {error}",
        failure.type_name,
        failure.raw_value,
    );
}
