//! The one context scope: running a driver call with a given context current, and restoring
//! the caller's context on every exit.
//!
//! Many driver calls act on "the current context" of the calling thread. Instead of asking the
//! caller to bind a context first (a hidden precondition), each constructor and deleter that
//! needs one names it, and [`in_context`] makes it current only for the call. The caller's
//! context is restored whether the call returns `Ok`, returns `Err` or unwinds, so a panic in
//! a closure given to `ContextHandle::run` cannot leave a context current that may be
//! destroyed later.
//!
//! The one exception, [`in_context_or_bind`]: a public event constructor called on a thread
//! with *no* context current leaves a primary context current afterwards, kept alive by the
//! thread's primary-context cache (`ContextHandle::leave_current`), instead of making it
//! current and then none again around every call: on a worker thread that makes many events,
//! that is two `cuCtxSetCurrent` fewer per event, as cudarc's calls leave their context
//! current. `clear_primary_cache` makes it not current again before it lets go of the cache.
//! Whenever the caller had a context current, it is restored as above; inside a scope that
//! restores its caller's context afterwards, and for any other context, nothing is left.

use cudarc::driver::sys::{CUcontext, CUdevice};

use crate::driver::call::{driver, out};
use crate::driver::load::ensure_loaded;
use crate::error::{Error, Result};

/// The calling thread's current context, or null.
#[inline]
pub(crate) fn current_raw() -> Result<CUcontext> {
    // SAFETY: callers have loaded the driver; `current` is a valid out-pointer.
    out(|current| unsafe { driver!(cuCtxGetCurrent(current)) })
}

/// Makes `context` (or none, if null) current again after a call that changed it (a call of
/// another library, which made its own context current).
pub(crate) fn restore_current(context: CUcontext) -> Result<()> {
    if current_raw()? != context {
        set_current(context)?;
    }
    Ok(())
}

#[inline]
fn set_current(context: CUcontext) -> Result<()> {
    // SAFETY: `context` is null or a live context kept alive by the caller's handle (the
    // caller's own current context is alive while it is current, which it was until now).
    unsafe { driver!(cuCtxSetCurrent(context)) }
}

std::thread_local! {
    /// How many scopes that restore their caller's context afterwards are open on this thread:
    /// [`in_context`] when it switched contexts, and `ContextHandle::run`. User code runs in
    /// some of them (`run`'s closure, an occupancy query's shared-memory function).
    static RESTORING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// An open scope that restores its caller's context when it ends, counted for its extent (also
/// if it unwinds): the one counter that [`refuse_inside_restoring_scope`] reads.
pub(crate) struct RestoringScope(());

impl RestoringScope {
    #[inline]
    pub(crate) fn enter() -> RestoringScope {
        let _ = RESTORING.try_with(|depth| depth.set(depth.get() + 1));
        RestoringScope(())
    }
}

impl Drop for RestoringScope {
    #[inline]
    fn drop(&mut self) {
        let _ = RESTORING.try_with(|depth| depth.set(depth.get().saturating_sub(1)));
    }
}

/// Refuses a change of the thread's bound context inside a scope that restores its caller's
/// context afterwards: the restore may make current the context the change let go of (a
/// green context bound to the thread, say, destroyed by the change), so the thread would be
/// left in a destroyed context. The one home of that rule, whatever the scope.
pub(crate) fn refuse_inside_restoring_scope() -> Result<()> {
    if restoring_depth() > 0 {
        return Err(Error::WrongContext {
            what: "a thread's bound context cannot change inside a scope that restores its \
                   caller's context afterwards (ContextHandle::run's closure, or a callback \
                   run by a call of this crate in another context)",
        });
    }
    Ok(())
}

/// Makes the caller's context current again when dropped: on the normal path [`Restore::now`]
/// does it and returns the status; while unwinding, `Drop` does it and the status is lost (a
/// drop must not fail), which still leaves the thread in the context it was in.
struct Restore(CUcontext);

impl Restore {
    #[inline]
    fn now(self) -> Result<()> {
        let previous = self.0;
        // The normal path restores here, once; `Drop` is for unwinding only.
        std::mem::forget(self);
        set_current(previous)
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _unwinding = set_current(self.0);
    }
}

/// Runs `call` with `context` current and returns what it returned; the caller's context is
/// current again afterwards, on every exit, unwinding included. If `context` is already
/// current this costs one `cuCtxGetCurrent`.
///
/// The call's own error wins over a failure to restore. If only the restore failed, the
/// call's value is dropped (a handle made inside is destroyed by its own deleter, in the
/// context it was made in) and the restore's error is returned: a failure never leaks what
/// the call made, nor leaves the thread in the wrong context silently.
#[inline(always)]
pub(crate) fn in_context<T, E: From<Error>>(
    context: CUcontext,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    in_context_or_bind(context, None::<fn() -> Result<()>>, call)
}

/// [`in_context`], except on a thread with no context current outside any restoring scope:
/// there `bind`, if given, makes `context` current in a way that keeps it alive while it is
/// (`ContextHandle::leave_current`), and the call runs with it current and leaves it so (see
/// the module docs).
/// Without `bind`, or if it fails, the call runs as [`in_context`] runs it.
#[inline(always)]
pub(crate) fn in_context_or_bind<T, E: From<Error>>(
    context: CUcontext,
    bind: Option<impl FnOnce() -> Result<()>>,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    // A context handle can exist without a driver (an unsafe reference): never let cudarc
    // panic on a missing library.
    ensure_loaded()?;
    let previous = current_raw()?;
    if previous == context {
        return call();
    }
    if let Some(bind) = bind
        && previous.is_null()
        && restoring_depth() == 0
        && bind().is_ok()
    {
        return call();
    }
    in_another_context(previous, context, call)
}

/// How many restoring scopes are open on this thread (0 while its locals are torn down).
#[inline]
fn restoring_depth() -> usize {
    RESTORING.try_with(std::cell::Cell::get).unwrap_or(0)
}

/// [`in_context`] when `context` is not the current one (`previous` is): out of line, so the
/// common case inlines into its caller.
#[inline(never)]
fn in_another_context<T, E: From<Error>>(
    previous: CUcontext,
    context: CUcontext,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    set_current(context)?;
    let restore = Restore(previous);
    let scope = RestoringScope::enter();
    let called = call();
    drop(scope);
    match restore.now() {
        Ok(()) => called,
        // The call's own error wins; only its value is dropped for a failed restore.
        Err(restore) => called.and_then(|value| {
            drop(value);
            Err(restore.into())
        }),
    }
}

/// [`in_context`] for an optional context: without one, runs `call` as it is.
pub(crate) fn in_context_of<T, E: From<Error>>(
    context: Option<CUcontext>,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    match context {
        Some(context) => in_context(context, call),
        None => call(),
    }
}

/// The driver's device id of `context` (`cuCtxGetDevice`, with `context` current).
pub(crate) fn device_of(context: CUcontext) -> Result<CUdevice> {
    in_context(context, || {
        // SAFETY: `context` is current for this call; `device` is a valid out-pointer.
        out(|device| unsafe { driver!(cuCtxGetDevice(device)) })
    })
}

/// A value whose drop may change the calling thread's current context (a cudarc object binds
/// its own context when it is dropped): dropped with the caller's context made current again
/// afterwards, so dropping a handle never leaves another context current. The drop also runs
/// in relaxed capture mode while a capture may run
/// ([`relaxed_while_capturing`](crate::driver::capture::relaxed_while_capturing)): another
/// library's drop frees memory or waits on a stream outside any capture (a cudarc slice's
/// `cuMemFreeAsync`), which driver 580 refuses inside a global-mode capture's closure, and
/// that library swallows the error, a silent leak (found by the safe-API fuzzer: a cudarc
/// slice dropped in a capture's closure).
pub(crate) struct KeepCurrent<T>(Option<T>);

impl<T> KeepCurrent<T> {
    pub(crate) fn new(value: T) -> Self {
        KeepCurrent(Some(value))
    }
}

impl<T> Drop for KeepCurrent<T> {
    fn drop(&mut self) {
        let previous = ensure_loaded().and_then(|()| current_raw());
        let relaxed = crate::driver::capture::relaxed_while_capturing();
        drop(self.0.take());
        drop(relaxed);
        if let Ok(previous) = previous {
            // A failed restore cannot be reported from here; the context the value bound
            // stays current, as it would have without this wrapper.
            let _ = restore_current(previous);
        }
    }
}
