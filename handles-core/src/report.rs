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
    /// The raw value that was being deleted, as an integer.
    pub raw: isize,
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
    let mut slot = HOOK
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    slot.replace(Arc::new(hook)).is_some()
}

/// Restores the default hook (one line on stderr).
pub fn reset_report_hook() {
    let mut slot = HOOK
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *slot = None;
}

/// Hands a failure to the installed hook, or prints it. Never panics: a panicking hook is
/// caught and the failure is printed instead, so nothing is lost and nothing aborts.
pub(crate) fn report(failure: &DeleteFailure<'_>) {
    let hook = HOOK
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    let delivered = match hook {
        Some(hook) => catch_unwind(AssertUnwindSafe(|| hook(failure))).is_ok(),
        None => false,
    };
    if !delivered {
        print_failure(failure);
    }
}

fn print_failure(failure: &DeleteFailure<'_>) {
    // `eprintln!` panics if stderr is closed; a report must never panic, so write by hand.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "handles: failed to delete {} {:#x}: {}",
        failure.type_name,
        failure.raw,
        failure.error
    );
}
