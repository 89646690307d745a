//! CUDA contexts: the device's primary context, the current context, and references.

use std::cell::RefCell;

use cudarc::driver::sys::{CUcontext, CUdevice};
use handles_core::{CacheSlot, ResourceHandle, WeakCache};

use crate::driver::call::{deleter_status, driver, out};
use crate::driver::current::{
    RestoringScope, current_raw, in_context, refuse_inside_restoring_scope,
};
use crate::driver::load::{self, ensure_loaded};
use crate::error::{Error, Result};
use crate::sync::{take_cache, with_cache};

/// A CUDA context.
///
/// Ownership: a handle from [`ContextHandle::primary`] owns one retain of the device's primary
/// context and releases it when its last clone drops. There is one such handle per device in
/// the process at a time (threads share it), so the registry maps the raw context to it. [`ContextHandle::current`] and
/// references made with `from_raw_borrowed` own nothing. Keeps alive: nothing; streams,
/// events and pools keep their context alive.
#[derive(ResourceHandle)]
#[handle(raw = CUcontext, accessor = as_cu, delete = release_primary, registry)]
pub struct Context {
    /// The device ordinal, when known.
    #[handle(copy)]
    pub device: Option<usize>,
    /// The driver's device id whose primary context this handle retains; `None` for contexts
    /// this handle does not own.
    #[handle(copy)]
    pub primary_of: Option<CUdevice>,
    /// The process-wide primary-context cache entry, released after the retain is.
    primary_slot: Option<CacheSlot<usize, ContextHandle>>,
    /// The SMs work in this context may use, for a green context's share of its device
    /// (`None`: the whole device).
    #[handle(copy)]
    pub sm_count: Option<u32>,
}

impl Context {
    /// The record of a reference to a context this program does not own (for
    /// `ContextHandle::from_raw_borrowed`): a known or unknown device, and no retain.
    pub fn reference(device: Option<usize>) -> Context {
        Context {
            device,
            primary_of: None,
            primary_slot: None,
            sm_count: None,
        }
    }

    /// The record of a green context's context: a reference to `sm_count` SMs of `device`.
    pub(crate) fn green_share(device: usize, sm_count: u32) -> Context {
        Context {
            sm_count: Some(sm_count),
            ..Context::reference(Some(device))
        }
    }
}

/// One retained primary context per device for the whole process, shared by every thread
/// (each thread also keeps a clone in its own cache, below). A single box per device means a
/// single registry entry per device, however many threads use it.
static PRIMARIES: WeakCache<usize, ContextHandle> = WeakCache::new();
// SAFETY: the CUDA driver API lets contexts be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for Context {}

fn release_primary(_: CUcontext, context: &Context) -> Result<()> {
    let Some(device) = context.primary_of else {
        return Ok(());
    };
    // SAFETY: this handle holds one retain of `device`'s primary context, released once here.
    deleter_status(unsafe { driver!(cuDevicePrimaryCtxRelease_v2(device)) })
}

thread_local! {
    /// Per-thread cache of primary-context handles, indexed by ordinal: a repeated lookup is
    /// a thread-local read and one reference-count increment, with no driver call.
    static PRIMARY: RefCell<Vec<Option<ContextHandle>>> = const { RefCell::new(Vec::new()) };

    /// The contexts [`ContextHandle::run`] made current on this thread, innermost last: while
    /// one runs, work on "the current context" resolves to its handle (a green context's
    /// handle is not in the registry, and is not a primary context, yet keeps it alive).
    static RUNNING: RefCell<Vec<ContextHandle>> = const { RefCell::new(Vec::new()) };

    /// The context [`ContextHandle::bind_to_thread`] made current on this thread, kept alive
    /// for as long as it is bound.
    static BOUND: RefCell<Bound> = const { RefCell::new(Bound(None)) };
    /// The primary context an event constructor left current on this thread, which had none
    /// current (`ContextHandle::leave_current`); 0 if none, or once an explicit binding or
    /// [`clear_primary_cache`] took over.
    static LEFT_CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `call` in whatever context is current, resolved first to a handle that keeps it alive
/// for the call ([`ContextHandle::current`]: refused with `Err` if nothing can, such as a
/// primary context another library released while leaving it current); with no context
/// current, in the primary context of the device `ordinal` names (asked only then), made
/// current for the call. The one home of "a call in the current context resolves it first",
/// for calls that need *a* context but name none (kernel attributes, tensor-map encoding).
pub(crate) fn in_current_or_primary<T>(
    ordinal: impl FnOnce() -> Result<usize>,
    call: impl FnOnce() -> Result<T>,
) -> Result<T> {
    match ContextHandle::current()? {
        Some(current) => {
            let called = call();
            drop(current);
            called
        }
        None => {
            ContextHandle::with_primary(ordinal()?, |context| in_context(context.as_cu(), call))?
        }
    }
}

/// The bound context of a thread. Still bound when the thread exits, it is dropped on the
/// disposal thread: its release may need a current context (a green context's does), and the
/// driver's per-thread state may already be gone while thread-locals are torn down.
struct Bound(Option<ContextHandle>);

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(context) = self.0.take() {
            crate::exec::disposal::dispose(Box::new(context));
        }
    }
}

/// An entry on this thread's [`RUNNING`] stack for the extent of a [`ContextHandle::run`] call,
/// removed when dropped (also if the call unwinds). A non-owning reference is not entered:
/// nothing must resolve to it.
struct Running(bool);

impl Running {
    fn enter(context: &ContextHandle) -> Running {
        if context.ownership() == handles_core::Ownership::Borrowed {
            return Running(false);
        }
        let entered = with_cache(&RUNNING, |running| running.push(context.clone()));
        Running(entered.is_some())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0 {
            let left = with_cache(&RUNNING, Vec::pop).flatten();
            // Dropped after the borrow ends: it may be the context's last handle.
            drop(left);
        }
    }
}

impl ContextHandle {
    /// The primary context of device `ordinal`, retained. Cached per thread: only the first
    /// lookup on each thread calls the driver; later ones cost one reference-count increment.
    pub fn primary(ordinal: usize) -> Result<ContextHandle> {
        Self::with_primary(ordinal, ContextHandle::clone)
    }

    /// Runs `f` with device `ordinal`'s primary context, borrowed from this thread's cache:
    /// after the first call on a thread this is a thread-local read, with no reference-count
    /// traffic and no driver call.
    #[inline]
    pub fn with_primary<R>(ordinal: usize, f: impl FnOnce(&ContextHandle) -> R) -> Result<R> {
        let mut f = Some(f);
        let hit = PRIMARY.try_with(|cache| {
            let cache = cache.try_borrow().ok()?;
            match cache.get(ordinal) {
                Some(Some(context)) => f.take().map(|f| f(context)),
                _ => None,
            }
        });
        if let Ok(Some(result)) = hit {
            return Ok(result);
        }
        let context = Self::retain_and_cache(ordinal)?;
        let f = f.take().expect("not called on a cache miss");
        Ok(f(&context))
    }

    /// The cache-miss path: retains the primary context and caches the handle for this thread.
    #[cold]
    fn retain_and_cache(ordinal: usize) -> Result<ContextHandle> {
        let context = Self::retain_primary(ordinal)?;
        // During thread teardown the cache is gone, and inside `with_primary` it is borrowed;
        // the handle is then simply not cached.
        with_cache(&PRIMARY, |cache| {
            if cache.len() <= ordinal {
                cache.resize(ordinal + 1, None);
            }
            cache[ordinal] = Some(context.clone());
        });
        Ok(context)
    }

    fn retain_primary(ordinal: usize) -> Result<ContextHandle> {
        let device = load::device(ordinal)?;
        PRIMARIES.get_or_try_insert_with(ordinal, |slot| {
            // SAFETY: the driver is loaded and `device` is valid; `raw` is a valid out-pointer.
            let raw = out(|raw| unsafe { driver!(cuDevicePrimaryCtxRetain(raw, device)) })?;
            let record = Context {
                device: Some(ordinal),
                primary_of: Some(device),
                primary_slot: Some(slot),
                sm_count: None,
            };
            // SAFETY: we hold exactly one retain, which `release_primary` gives back.
            Ok(unsafe { ContextHandle::from_raw(raw, record) })
        })
    }

    /// An owning handle for the context `raw`, so that whatever is made in it can keep it
    /// alive: the handle that manages it if this program made one, or a retain of the primary
    /// context if `raw` is a device's primary context. Any other context (one made by another
    /// library, which may destroy it at any time) is refused with an error rather than
    /// referenced without a claim on its lifetime.
    pub(crate) fn owning(raw: CUcontext) -> Result<ContextHandle> {
        if raw.is_null() {
            return Err(Error::NoCurrentContext {
                what: "no context is current on this thread",
            });
        }
        if let Some(managed) = ContextHandle::lookup(raw) {
            return Ok(managed);
        }
        let running = with_cache(&RUNNING, |running| {
            running.iter().rev().find(|run| run.as_cu() == raw).cloned()
        })
        .flatten();
        if let Some(running) = running {
            return Ok(running);
        }
        let bound = with_cache(&BOUND, |bound| {
            bound
                .0
                .as_ref()
                .filter(|bound| bound.as_cu() == raw)
                .cloned()
        })
        .flatten();
        if let Some(bound) = bound {
            return Ok(bound);
        }
        // Nothing is asked of `raw` itself: it may be a context another library destroyed or
        // released while leaving it current. Only an active primary context can be `raw`, so
        // each device's primary state is asked first (which avoids creating a primary context,
        // and keeping it in the per-thread cache, just to compare).
        for ordinal in 0..load::device_count()? {
            let device = load::device(ordinal)?;
            let (mut flags, mut active) = (0, 0);
            // SAFETY: `device` is a valid device; both are valid out-pointers.
            unsafe { driver!(cuDevicePrimaryCtxGetState(device, &mut flags, &mut active)) }?;
            if active != 0 {
                let primary = ContextHandle::primary(ordinal)?;
                if primary.as_cu() == raw {
                    return Ok(primary);
                }
            }
        }
        Err(Error::WrongContext {
            what: "the context is neither managed by a handle nor a device's primary context, so \
                   nothing here can keep it alive; wrap it with `ContextHandle::from_cudarc` or \
                   make the work's context explicit",
        })
    }

    /// A handle that keeps this context alive, for a new object to own: this handle unless it
    /// is a non-owning reference (made by the `unsafe` `from_raw_borrowed`); then the handle
    /// that manages the same context, or a retain of the device's primary context if that is
    /// what it is. Any other context is refused: nothing here could keep it alive, so an
    /// object made in it could be destroyed after it. This handle comes back borrowed, so a
    /// caller that stores it pays one clone (`into_owned`), not a clone and a drop.
    pub(crate) fn keep_alive(&self) -> Result<std::borrow::Cow<'_, ContextHandle>> {
        match self.ownership() {
            handles_core::Ownership::Borrowed => {
                // Without a driver that is the error to report, whatever the reference holds.
                ensure_loaded()?;
                ContextHandle::owning(self.as_cu()).map(std::borrow::Cow::Owned)
            }
            _ => Ok(std::borrow::Cow::Borrowed(self)),
        }
    }

    /// The calling thread's current context, as a handle that keeps it alive: the handle
    /// that manages it, the handle [`ContextHandle::run`] made current (a green context's
    /// too), or a retain of the device's primary context. `None` when no context
    /// is current. A context no handle here can keep alive (another library's own context) is
    /// refused with `Err`: a handle to it could outlive it. Wrap such a context with
    /// `ContextHandle::from_cudarc`, or name the context explicitly.
    pub fn current() -> Result<Option<ContextHandle>> {
        ensure_loaded()?;
        let raw = current_raw()?;
        if raw.is_null() {
            return Ok(None);
        }
        ContextHandle::owning(raw).map(Some)
    }

    /// Runs `call` with this context current on the calling thread, then makes the caller's
    /// context current again: for calls of other CUDA libraries (cuBLAS, cuDNN, NCCL) that
    /// act on the current context. If restoring the caller's context fails, what `call`
    /// returned is dropped (so a handle made inside is destroyed by its own deleter) and the
    /// restore's error is returned. The caller's context is restored on every exit, also when
    /// `call` panics.
    pub fn run<T, E: From<Error>>(&self, call: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let _scope = RestoringScope::enter();
        in_context(self.as_cu(), || {
            let _running = Running::enter(self);
            call()
        })
    }

    /// Makes this context current on the calling thread and leaves it current, as
    /// `cudaSetDevice` or cudarc's `bind_to_thread` do: every later call of this crate that
    /// needs this context then finds it current (one `cuCtxGetCurrent`) instead of making it
    /// current and restoring the caller's context afterwards (two `cuCtxSetCurrent` more). For
    /// a worker thread that makes many events, streams or allocations in one context.
    ///
    /// The thread keeps a handle of the context while it is bound, so the context outlives its
    /// binding even if every other handle is dropped; binding another context, or
    /// [`ContextHandle::unbind_thread`], or the thread's exit releases it. A non-owning
    /// reference is resolved to the handle that manages its context, or refused (nothing
    /// could keep it alive while current). Refused inside [`ContextHandle::run`] and inside any
    /// callback this crate runs in another context, which restore their caller's context
    /// afterwards (`Error::WrongContext`).
    pub fn bind_to_thread(&self) -> Result<()> {
        refuse_inside_restoring_scope()?;
        let context = self.keep_alive()?.into_owned();
        let raw = context.as_cu();
        // Kept first, made current second: a thread whose locals are being torn down cannot
        // keep it, and is refused before anything changed.
        let Some(replaced) = with_cache(&BOUND, |bound| bound.0.replace(context)) else {
            return Err(Error::NothingMade {
                what: "the thread is exiting: no context can be bound to it",
            });
        };
        // Dropped outside the borrow: it may be the previous context's last handle.
        drop(replaced);
        // SAFETY: the context is alive, and stays so while bound: the thread keeps its handle.
        unsafe { driver!(cuCtxSetCurrent(raw)) }?;
        // The explicit binding takes over from one an event constructor left, once made.
        let _ = LEFT_CURRENT.try_with(|left| left.set(0));
        Ok(())
    }

    /// Undoes [`ContextHandle::bind_to_thread`] on the calling thread: if the bound context is
    /// still current, no context is current afterwards; the thread's handle of it is dropped.
    /// Does nothing if no context is bound. Refused where
    /// [`ContextHandle::bind_to_thread`] is.
    pub fn unbind_thread() -> Result<()> {
        refuse_inside_restoring_scope()?;
        let Some(bound) = with_cache(&BOUND, |bound| bound.0.take()).flatten() else {
            return Ok(());
        };
        ensure_loaded()?;
        if current_raw()? == bound.as_cu() {
            // SAFETY: making no context current is always allowed.
            unsafe { driver!(cuCtxSetCurrent(std::ptr::null_mut())) }?;
        }
        drop(bound);
        Ok(())
    }

    /// Blocks until all work in this context has completed.
    pub fn synchronize(&self) -> Result<()> {
        in_context(self.as_cu(), || {
            // SAFETY: the context is current for this call and kept alive by `self`.
            unsafe { driver!(cuCtxSynchronize()) }
        })
    }

    /// Free and total device memory as seen from this context, in bytes.
    pub fn mem_get_info(&self) -> Result<(usize, usize)> {
        in_context(self.as_cu(), load::mem_get_info)
    }
}

/// Drops this thread's cached primary-context handles (each releases its retain if nothing
/// else holds it). Threads release their cache automatically when they exit. A primary
/// context an event constructor left current on this thread (see [`EventHandle::create`]) is
/// made not current first, if it still is; if that fails, its handle is kept for the rest of
/// the process (it must not be released while current) and the failure goes to the report
/// hook.
///
/// [`EventHandle::create`]: crate::EventHandle::create
///
/// Inside a scope that restores its caller's context afterwards (`ContextHandle::run`'s
/// closure), the context left current may be made current again by that restore: its handle
/// stays cached, and it stays left current, until a clear outside any such scope.
pub fn clear_primary_cache() {
    let mut cache = take_cache(&PRIMARY);
    let left = LEFT_CURRENT.try_with(std::cell::Cell::get).unwrap_or(0);
    if left != 0 && refuse_inside_restoring_scope().is_err() {
        let kept: Vec<Option<ContextHandle>> = cache
            .iter_mut()
            .map(|slot| slot.take_if(|cached| cached.as_cu() as usize == left))
            .collect();
        if let Some(unkept) = with_cache(&PRIMARY, |fresh| std::mem::replace(fresh, kept.clone())) {
            drop(unkept);
        } else {
            // Nowhere to keep it: never released while it may be current.
            std::mem::forget(kept);
        }
        drop(cache);
        return;
    }
    let _ = LEFT_CURRENT.try_with(|left| left.set(0));
    if left != 0 {
        let cleared = ensure_loaded().and_then(|()| match current_raw()? == left as CUcontext {
            // SAFETY: making no context current is always allowed.
            true => unsafe { driver!(cuCtxSetCurrent(std::ptr::null_mut())) },
            false => Ok(()),
        });
        if let Err(error) = cleared {
            let kept = cache
                .iter()
                .flatten()
                .find(|cached| cached.as_cu() as usize == left);
            std::mem::forget(kept.cloned());
            handles_core::report_release_failure("Context", left as isize, error);
        }
    }
    drop(cache);
}

impl ContextHandle {
    /// Makes this context current on a thread that has none current, and leaves it so (the
    /// exception of `driver/current.rs`): a primary context only, whose handle this thread's
    /// primary cache then holds, so that it stays alive while current, until
    /// [`clear_primary_cache`] (which makes no context current again if it still is) or the
    /// thread's exit. `Err`, with nothing changed, for any other context, or when the cache
    /// cannot hold it (during the thread's teardown, or inside `with_primary`).
    pub(crate) fn leave_current(&self) -> Result<()> {
        let raw = self.as_cu();
        let cached = match (self.primary_of(), self.device()) {
            (Some(_), Some(ordinal)) => with_cache(&PRIMARY, |cache| {
                if cache.len() <= ordinal {
                    cache.resize(ordinal + 1, None);
                }
                let slot = &mut cache[ordinal];
                match slot {
                    Some(cached) => cached.as_cu() == raw,
                    None => {
                        *slot = Some(self.clone());
                        true
                    }
                }
            }),
            _ => None,
        };
        if cached != Some(true)
            || LEFT_CURRENT
                .try_with(|left| left.set(raw as usize))
                .is_err()
        {
            return Err(Error::NothingMade {
                what: "only a primary context that this thread's cache holds is left current",
            });
        }
        // SAFETY: the context is alive, and stays so while it may be current: this thread's
        // cache holds a handle of it until `clear_primary_cache` outside any restoring scope,
        // which makes it not current first (or keeps the handle for good if it cannot), or
        // until the thread's exit, after which the thread makes no more calls in it.
        unsafe { driver!(cuCtxSetCurrent(raw)) }
    }
}
