//! Running a driver call in a given context and restoring the caller's context afterwards.
//!
//! Many driver calls act on "the current context" of the calling thread. Instead of asking the
//! caller to bind a context first (a hidden precondition), each constructor and deleter that
//! needs one names it, and these helpers make it current only for the duration of the call.

use cudarc::driver::sys::CUcontext;

use crate::driver::call::{driver, out};
use crate::error::Result;
use crate::exec::context::ContextHandle;

/// The calling thread's current context, or null.
#[inline]
pub(crate) fn current_raw() -> Result<CUcontext> {
    // SAFETY: callers have loaded the driver; `current` is a valid out-pointer.
    out(|current| unsafe { driver!(cuCtxGetCurrent(current)) })
}

/// Makes `context` (or none, if null) current again after a call that changed it.
pub(crate) fn restore_current(context: CUcontext) -> Result<()> {
    if current_raw()? != context {
        set_current(context)?;
    }
    Ok(())
}

#[inline]
fn set_current(context: CUcontext) -> Result<()> {
    // SAFETY: `context` is null or a live context kept alive by the caller's handle.
    unsafe { driver!(cuCtxSetCurrent(context)) }
}

/// Creates a resource in `context` and wraps it in its handle, restoring the caller's context.
///
/// `create` runs with `context` current and makes the raw resource; `wrap` makes the handle
/// that owns it, after the caller's context is restored. If `context` is already current this
/// costs one `cuCtxGetCurrent`. If restoring the caller's context fails, the new handle is
/// dropped, so its real deleter destroys what `create` made, and the restore error is
/// returned: a failure never leaks the new resource nor leaves the thread in the wrong context
/// silently.
pub(crate) fn create_in<R, H>(
    context: &ContextHandle,
    create: impl FnOnce() -> Result<R>,
    wrap: impl FnOnce(R) -> H,
) -> Result<H> {
    // A context handle can exist without a driver (an unsafe reference): never let cudarc
    // panic on a missing library.
    crate::driver::load::ensure_loaded()?;
    let context = context.as_cu();
    let previous = current_raw()?;
    if previous == context {
        return create().map(wrap);
    }
    set_current(context)?;
    let created = create();
    match (created, set_current(previous)) {
        (Ok(raw), Ok(())) => Ok(wrap(raw)),
        (Ok(raw), Err(restore)) => {
            drop(wrap(raw));
            Err(restore)
        }
        (Err(error), _) => Err(error),
    }
}

/// Runs `call` with `context` current, restoring the caller's context afterwards. For calls
/// that create nothing (deleters, synchronisation): the call's own status wins over a restore
/// failure.
pub(crate) fn in_context(context: CUcontext, call: impl FnOnce() -> Result<()>) -> Result<()> {
    let previous = current_raw()?;
    if previous == context {
        return call();
    }
    set_current(context)?;
    let called = call();
    let restored = set_current(previous);
    called.and(restored)
}

/// [`in_context`] for a handle's optional context: without one, runs `call` as it is.
pub(crate) fn in_context_of(
    context: Option<&ContextHandle>,
    call: impl FnOnce() -> Result<()>,
) -> Result<()> {
    match context {
        Some(context) => in_context(context.as_cu(), call),
        None => call(),
    }
}
