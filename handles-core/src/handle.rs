//! The heap box and the generic strong and weak handles.
//!
//! A handle is a counted reference ([`crate::counted`]) to a [`HandleBox`]: one allocation per
//! resource, one atomic increment per clone, one atomic decrement per drop, the last one
//! included. Whether the handle owns its resource is decided
//! once, at construction, and stored in the box; clone and drop never branch on it. The last
//! drop goes through [`crate::release`], which tears owner chains down iteratively.

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::counted::{Counted, CountedWeak, Uncounted};

use crate::error::drop_without_unwinding;
use crate::release::release;
use crate::report::{DeleteFailure, report};
use crate::{CloseError, DeleteError, RawValue, Registry, Resource, ThreadSafe};

/// How a handle relates to its raw resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// The handle owns the resource: the deleter runs when the last clone drops.
    Owned,
    /// A non-owning reference: nothing is deleted.
    Borrowed,
    /// Nothing is deleted, but an owner value is kept alive until the last clone drops.
    WithOwner,
}

enum Keep<R: Resource> {
    /// An owned resource, and the registry the box was entered in when it was made, if any:
    /// its drop removes the entry from that same registry. Kept rather than asked of
    /// `R::registry()` again, which a hand-written `Resource` may answer differently later;
    /// an entry left behind would name a freed box.
    Owned {
        registry: Option<&'static Registry<R>>,
    },
    Borrowed,
    WithOwner(#[allow(dead_code)] OwnerValue),
    /// An owned resource already deleted by `close`.
    Closed,
}

/// A with-owner value. It is dropped through the iterative release (it may hold the last handle
/// of anything, so dropping it in place could recurse as deep as a chain of such values), and,
/// being the box's last field, only after the record.
struct OwnerValue {
    value: Option<Box<dyn Any + Send + Sync>>,
    /// Whether the value's type has drop glue at all; a plain value skips the bookkeeping.
    needs_drop: bool,
}

impl OwnerValue {
    fn new<O: Any + Send + Sync>(owner: O) -> Self {
        OwnerValue {
            value: Some(Box::new(owner)),
            needs_drop: core::mem::needs_drop::<O>(),
        }
    }
}

impl Drop for OwnerValue {
    #[inline]
    fn drop(&mut self) {
        if let Some(value) = self.value.take()
            && self.needs_drop
        {
            crate::release::release_value(value);
        }
    }
}

/// The heap record behind every handle: the raw value, how it is owned, and the resource's
/// record (owner handles and metadata).
///
/// Field drop order is the point of this type. `Drop` runs the deleter first, while the record's
/// owner handles are still alive; then the record is dropped, and only then any with-owner value
/// (fields drop in declaration order, so `keep` must stay after `record`).
pub struct HandleBox<R: Resource> {
    raw: R::Raw,
    record: R,
    keep: Keep<R>,
}

// SAFETY: the box is shared between threads only if the resource opted in through the unsafe
// `ThreadSafe` trait, whose contract is that the raw value may be used and deleted from any
// thread. The record must itself be `Send + Sync`, and a with-owner value is `Send + Sync` by
// construction.
unsafe impl<R: ThreadSafe + Send + Sync> Send for HandleBox<R> {}
// SAFETY: as for `Send` above; the box is immutable after construction.
unsafe impl<R: ThreadSafe + Send + Sync> Sync for HandleBox<R> {}

impl<R: Resource> HandleBox<R> {
    #[inline(always)]
    fn new(raw: R::Raw, keep: Keep<R>, record: R) -> Self {
        R::live().increment();
        let boxed = HandleBox { raw, record, keep };
        // With-owner boxes are traced by `from_raw_with_owner`, which knows the owner's type.
        #[cfg(feature = "tracing")]
        if !matches!(boxed.keep, Keep::WithOwner(_)) && crate::trace::enabled() {
            crate::trace::create::<R>(&boxed.raw, boxed.ownership(), None);
        }
        boxed
    }

    /// The raw value.
    #[inline(always)]
    pub fn raw(&self) -> R::Raw {
        self.raw
    }

    /// The resource's record: owner handles and metadata.
    #[inline(always)]
    pub fn record(&self) -> &R {
        &self.record
    }

    /// Hands a deleter failure from `Drop` to the report hook; out of line, off the hot path.
    #[cold]
    #[inline(never)]
    fn report_failure(&self, error: DeleteError) {
        report(&DeleteFailure {
            type_name: R::NAME,
            raw: self.raw.to_intptr(),
            raw_value: &self.raw,
            error: &error,
        });
        // The deleter's error type is user code: its `Drop` must not unwind out of here.
        drop_without_unwinding(error);
    }

    /// Whether the box was entered in a registry when it was made.
    #[inline(always)]
    fn is_registered(&self) -> bool {
        matches!(self.keep, Keep::Owned { registry: Some(_) })
    }

    fn ownership(&self) -> Ownership {
        match self.keep {
            Keep::Owned { .. } | Keep::Closed => Ownership::Owned,
            Keep::Borrowed => Ownership::Borrowed,
            Keep::WithOwner(_) => Ownership::WithOwner,
        }
    }

    /// Runs the deleter once, catching a panic. Marks the box closed so `Drop` will not run it.
    fn delete_now(&mut self) -> Result<(), DeleteError> {
        self.keep = Keep::Closed;
        self.run_deleter()
    }

    /// Runs the deleter, catching a panic. Called once per box: by [`HandleBox::delete_now`],
    /// or by `Drop` (which runs once, so it leaves no mark).
    #[inline(always)]
    fn run_deleter(&self) -> Result<(), DeleteError> {
        let (raw, record) = (self.raw, &self.record);
        match catch_unwind(AssertUnwindSafe(|| R::delete(raw, record))) {
            Ok(result) => result,
            Err(payload) => Err(DeleteError::from_panic(payload)),
        }
    }
}

impl<R: Resource> Drop for HandleBox<R> {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(feature = "tracing")]
        if crate::trace::enabled() {
            crate::trace::destroy::<R>(
                &self.raw,
                self.ownership(),
                matches!(self.keep, Keep::Owned { .. }),
            );
        }
        if let Keep::Owned { registry } = self.keep {
            if let Err(error) = self.run_deleter() {
                self.report_failure(error);
            }
            // Before the allocation can be freed (which only follows this drop): the registry's
            // entry is an address counted nowhere, valid while it is there.
            if let Some(registry) = registry {
                registry.unregister(self.raw, core::ptr::from_ref(self));
            }
        }
        // Counted before the fields drop: a field's `Drop` is user code that might panic.
        R::live().decrement();
    }
}

/// A shared handle to a resource of type `R`: the generic type behind every generated
/// `FooHandle`.
pub struct Handle<R: Resource> {
    /// Taken out only by `Drop` (which hands it to [`release`]) and by the methods that consume
    /// the handle without dropping it (`close`, `into_ffi`), through [`Handle::into_inner`].
    inner: ManuallyDrop<Counted<HandleBox<R>>>,
}

impl<R: Resource> Handle<R> {
    #[inline(always)]
    fn new(inner: Counted<HandleBox<R>>) -> Self {
        Handle {
            inner: ManuallyDrop::new(inner),
        }
    }

    /// Moves the reference out without running `Drop`.
    #[inline(always)]
    fn into_inner(self) -> Counted<HandleBox<R>> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the reference is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.inner) }
    }

    /// Takes ownership of `raw`; the deleter runs when the last clone drops. Registers the
    /// handle when the type has a registry.
    ///
    /// # Safety
    ///
    /// - `raw` must be a valid, live resource that nothing else deletes, and `R::delete` must be
    ///   the right way to delete it, exactly once.
    /// - `record` must describe `raw` truthfully: the deleter and every method that trusts the
    ///   record's metadata (a length, a size, a device) rely on it.
    /// - The record's owners must keep alive whatever `raw` needs until the deleter has run.
    #[inline(always)]
    pub unsafe fn from_raw_owned(raw: R::Raw, record: R) -> Self {
        let registry = R::registry();
        let keep = Keep::Owned { registry };
        let handle = Handle::new(Counted::new(HandleBox::new(raw, keep, record)));
        if let Some(registry) = registry {
            registry.register(&handle);
        }
        handle
    }

    /// Takes ownership of `raw` like [`Handle::from_raw_owned`], but never registers it, even
    /// when the type has a registry: a lookup of `raw` does not find this handle. For a
    /// resource its creator keeps private (no code that learns the raw value can reach it).
    ///
    /// # Safety
    ///
    /// - `raw` must be a valid, live resource that nothing else deletes, and `R::delete` must be
    ///   the right way to delete it, exactly once.
    /// - `record` must describe `raw` truthfully: the deleter and every method that trusts the
    ///   record's metadata rely on it.
    /// - The record's owners must keep alive whatever `raw` needs until the deleter has run.
    pub unsafe fn from_raw_owned_unregistered(raw: R::Raw, record: R) -> Self {
        let keep = Keep::Owned { registry: None };
        Handle::new(Counted::new(HandleBox::new(raw, keep, record)))
    }

    /// A non-owning reference to `raw`: this call never makes anything delete it. For a type
    /// with a registry, a raw value that an owning handle already manages returns *that owning
    /// handle* instead (and `record` is dropped), so its owners and metadata come along; the
    /// resource is then deleted when the last clone of the owning handle drops, as before.
    ///
    /// # Safety
    ///
    /// - `raw` must stay valid for as long as any clone of the returned handle is used.
    /// - `record` must describe `raw` truthfully (see [`Handle::from_raw_owned`]).
    pub unsafe fn from_raw_borrowed(raw: R::Raw, record: R) -> Self {
        if let Some(canonical) = R::registry().and_then(|registry| registry.lookup(raw)) {
            #[cfg(feature = "tracing")]
            if crate::trace::enabled() {
                crate::trace::borrow_resolved::<R>(&raw);
            }
            return canonical;
        }
        Handle::new(Counted::new(HandleBox::new(raw, Keep::Borrowed, record)))
    }

    /// A non-owning handle that keeps `owner` alive until the last clone drops; `owner` is
    /// dropped after the record.
    ///
    /// `owner` may be any value, including other handles. A handle that, through its owner
    /// value, owns itself again (for example a stream kept alive by a buffer that the stream's
    /// own owner value keeps) is a reference cycle: like an `Arc` cycle it is never freed, and it
    /// is never undefined behaviour.
    ///
    /// # Safety
    ///
    /// - `raw` must stay valid for as long as `owner` is alive.
    /// - `record` must describe `raw` truthfully (see [`Handle::from_raw_owned`]).
    pub unsafe fn from_raw_with_owner<O>(raw: R::Raw, record: R, owner: O) -> Self
    where
        O: Any + Send + Sync,
    {
        #[cfg(feature = "tracing")]
        if crate::trace::enabled() {
            crate::trace::create::<R>(
                &raw,
                Ownership::WithOwner,
                Some(core::any::type_name::<O>()),
            );
        }
        Handle::new(Counted::new(HandleBox::new(
            raw,
            Keep::WithOwner(OwnerValue::new(owner)),
            record,
        )))
    }

    /// The raw value. Compiles to one load through the box pointer.
    #[inline(always)]
    pub fn raw(&self) -> R::Raw {
        self.inner.get().raw
    }

    /// The raw value as a signed pointer-sized integer.
    #[inline(always)]
    pub fn as_intptr(&self) -> isize {
        self.raw().to_intptr()
    }

    /// The record: owner handles and metadata.
    #[inline(always)]
    pub fn record(&self) -> &R {
        &self.inner.get().record
    }

    /// How this handle relates to its resource.
    pub fn ownership(&self) -> Ownership {
        self.inner.get().ownership()
    }

    /// Whether the resource is deleted when the last clone drops.
    pub fn is_owning(&self) -> bool {
        self.ownership() == Ownership::Owned
    }

    /// The number of strong handles to this box.
    pub fn strong_count(&self) -> usize {
        self.inner.strong_count()
    }

    /// The number of weak handles to this box. A registry's entry is not one (see
    /// [`Handle::is_registered`]).
    pub fn weak_count(&self) -> usize {
        self.inner.weak_count()
    }

    /// Whether this owning handle was entered in its type's registry when it was made: while
    /// a strong handle lives, a lookup of its raw value may then make another one at any time.
    /// `false` for borrowed and with-owner handles, for types without a registry, and for
    /// [`Handle::from_raw_owned_unregistered`].
    pub fn is_registered(&self) -> bool {
        self.inner.get().is_registered()
    }

    /// Whether two handles share one box (not merely the same raw value).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        core::ptr::eq(self.inner.as_ptr(), other.inner.as_ptr())
    }

    /// A weak handle that does not keep the resource alive.
    pub fn downgrade(&self) -> WeakHandle<R> {
        WeakHandle {
            inner: self.inner.downgrade(),
        }
    }

    /// Deletes the resource now if this is the last strong handle, and returns the deleter's
    /// result; otherwise hands the handle back in [`CloseError::StillShared`]. Closing a
    /// borrowed or with-owner handle that is the last one drops it and returns `Ok`. The report
    /// hook is not called: the error is returned instead.
    pub fn close(self) -> Result<(), CloseError<Self>> {
        match self.into_inner().try_last() {
            Ok(mut last) => {
                // The registry's entry is this allocation's address, which identifies our entry.
                let identity = last.as_ptr();
                let boxed = last.get_mut();
                let result = if let Keep::Owned { registry } = boxed.keep {
                    let result = boxed.delete_now();
                    if let Some(registry) = registry {
                        registry.unregister(boxed.raw, identity);
                    }
                    result
                } else {
                    Ok(())
                };
                drop(last);
                result.map_err(CloseError::Deleter)
            }
            Err(inner) => Err(CloseError::StillShared(Handle::new(inner))),
        }
    }

    /// Transfers this strong reference into a raw pointer, for a C user-data slot. Nothing is
    /// dropped until [`Handle::from_ffi`] takes it back.
    pub fn into_ffi(self) -> *const core::ffi::c_void {
        self.into_inner().into_raw().cast()
    }

    /// Takes back a reference transferred by [`Handle::into_ffi`].
    ///
    /// # Safety
    ///
    /// - `ptr` must come from `into_ffi` on a `Handle<R>` of this same `R`.
    /// - Each such pointer may be taken back only once.
    /// - Unless `Handle<R>` is `Send` (the resource implements [`ThreadSafe`] and its record is
    ///   `Send + Sync`), `from_ffi` must run on the thread that called `into_ffi`: otherwise the
    ///   pointer has carried a non-thread-safe handle to another thread.
    pub unsafe fn from_ffi(ptr: *const core::ffi::c_void) -> Self {
        // SAFETY: the caller promises `ptr` came from `into_ffi`, that is `Counted::into_raw` of
        // a `Counted<HandleBox<R>>`, and is taken back once, which is `Counted::from_raw`'s
        // contract, and that it did not cross threads unless the handle is `Send`.
        let inner = unsafe { Counted::from_raw(ptr.cast()) };
        Handle::new(inner)
    }

    /// The number of live boxes of this type (see [`crate::LiveCount`]).
    pub fn live_count() -> Option<usize> {
        R::live().get()
    }

    pub(crate) fn box_ptr(&self) -> *const HandleBox<R> {
        self.inner.as_ptr()
    }

    /// This handle's box as a registry entry: its address, counted nowhere.
    pub(crate) fn registry_entry(&self) -> RegistryEntry<R> {
        RegistryEntry(self.inner.uncounted())
    }
}

/// A registry's entry for one box: the box's address, neither a strong nor a weak reference.
/// It is valid while it is in the registry, which removes it in the box's own drop
/// (`HandleBox`'s `Drop`, or `close`), before the allocation can be freed.
pub(crate) struct RegistryEntry<R: Resource>(Uncounted<HandleBox<R>>);

impl<R: Resource> RegistryEntry<R> {
    /// A strong handle to the box, if one still exists.
    ///
    /// # Safety
    ///
    /// The box's allocation must not be freed before this call returns: the entry is still in
    /// its registry, and the registry's lock (which removing the entry takes) is held.
    pub(crate) unsafe fn upgrade(&self) -> Option<Handle<R>> {
        // SAFETY: the caller's contract is `Uncounted::upgrade`'s.
        unsafe { self.0.upgrade() }.map(Handle::new)
    }

    /// Whether this is the entry of the box at `boxed`.
    pub(crate) fn is_of(&self, boxed: *const HandleBox<R>) -> bool {
        self.0.is_value_at(boxed)
    }
}

impl<R: Resource> Clone for Handle<R> {
    #[inline]
    fn clone(&self) -> Self {
        Handle::new(Counted::clone(&self.inner))
    }
}

impl<R: Resource> Drop for Handle<R> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and `self.inner` is not used after it, so the reference is
        // taken exactly once (the consuming methods go through `into_inner`, which skips `Drop`).
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        // A type without a registry is usually dropped unshared (no weak handle), so its drop
        // first checks for that. A registered box never does: a lookup may upgrade its entry
        // (an address counted nowhere) at any instant, which only the decrement excludes. The
        // box's own answer decides (a hand-written `registry()` may have changed its mind);
        // for a derived type with a registry the first test is a constant `false`.
        let unique_first = R::registry().is_none() && !inner.get().is_registered();
        release(inner, unique_first);
    }
}

impl<R: Resource> PartialEq for Handle<R> {
    fn eq(&self, other: &Self) -> bool {
        self.raw() == other.raw()
    }
}

impl<R: Resource> Eq for Handle<R> {}

impl<R: Resource> Hash for Handle<R> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.raw().hash(state)
    }
}

impl<R: Resource> fmt::Debug for Handle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(R::NAME)
            .field("raw", &self.raw())
            .field("ownership", &self.ownership())
            .field("strong", &self.strong_count())
            .finish()
    }
}

/// A weak reference to a handle's box: does not keep the resource alive, and upgrades only
/// while some strong handle exists.
pub struct WeakHandle<R: Resource> {
    inner: CountedWeak<HandleBox<R>>,
}

impl<R: Resource> WeakHandle<R> {
    /// A weak handle that never upgrades.
    pub fn new() -> Self {
        WeakHandle {
            inner: CountedWeak::new(),
        }
    }

    /// A strong handle, if the resource has not started being deleted. Once the last strong
    /// handle is gone this returns `None` forever, even while the deleter is still running.
    pub fn upgrade(&self) -> Option<Handle<R>> {
        self.inner.upgrade().map(Handle::new)
    }

    /// Whether this weak handle points at the box of `handle`.
    pub fn points_to(&self, handle: &Handle<R>) -> bool {
        core::ptr::eq(self.inner.as_ptr(), handle.box_ptr())
    }

    /// Whether two weak handles point at the same box. A weak handle keeps its box's
    /// allocation, so while both live, equal means the same resource, never a reused address.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        core::ptr::eq(self.inner.as_ptr(), other.inner.as_ptr())
    }
}

impl<R: Resource> Default for WeakHandle<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Resource> Clone for WeakHandle<R> {
    fn clone(&self) -> Self {
        WeakHandle {
            inner: self.inner.clone(),
        }
    }
}

impl<R: Resource> fmt::Debug for WeakHandle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Weak<{}>", R::NAME)
    }
}
