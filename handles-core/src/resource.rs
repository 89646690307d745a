//! The traits `#[derive(ResourceHandle)]` implements.

use crate::{DeleteError, Handle, LiveCount, RawValue, Registry, WeakHandle};

/// A kind of C resource: its raw type, its deleter and its per-type statics.
///
/// The struct that carries `#[derive(ResourceHandle)]` implements this trait. Its fields (owner
/// handles and metadata) live in the handle's heap box next to the raw value, and are dropped
/// only after the deleter has run, so the deleter may still use them.
pub trait Resource: Sized + 'static {
    /// The raw value the C API hands out.
    type Raw: RawValue;

    /// The declared type name, used in `Debug` output and failure reports.
    const NAME: &'static str;

    /// Destroys `raw`. Called exactly once, for owning handles only, when the last strong
    /// handle goes away, and before the fields of `record` are dropped.
    fn delete(raw: Self::Raw, record: &Self) -> Result<(), DeleteError>;

    /// The per-type count of live boxes.
    fn live() -> &'static LiveCount;

    /// The per-type registry of canonical handles, for types declared with `registry`.
    fn registry() -> Option<&'static Registry<Self>> {
        None
    }
}

/// Declares that a resource's raw value may be used, shared and deleted from any thread.
///
/// Handles of a resource are `Send` and `Sync` only if it implements this trait (and its record
/// fields are `Send + Sync`). The opt-in is one line next to the declaration, written by its
/// author, where `#![forbid(unsafe_code)]` and reviewers see it:
///
/// ```
/// # use handles_core::ResourceHandle;
/// # fn close_fd(_: i32, _: &Fd) -> std::io::Result<()> { Ok(()) }
/// #[derive(ResourceHandle)]
/// #[handle(raw = i32, delete = close_fd)]
/// pub struct Fd {}
///
/// // SAFETY: a descriptor may be used and closed from any thread.
/// unsafe impl handles_core::ThreadSafe for Fd {}
/// ```
///
/// # Safety
///
/// The C API must allow the raw value to be passed to any of its functions, including the
/// deleter, from any thread, and concurrently where the handle is shared.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has not opted into thread safety, so its handles are neither `Send` nor `Sync`",
    label = "`{Self}` does not implement `ThreadSafe`",
    note = "if the C API allows the raw value to be used and deleted from any thread, opt in next to the declaration: `unsafe impl handles_core::ThreadSafe for {Self} {{}}`"
)]
pub unsafe trait ThreadSafe: Resource {}

/// A generated strong handle type (`FooHandle`), a thin wrapper around [`Handle<R>`].
pub trait ResourceHandle: Clone + 'static {
    /// The resource the handle refers to.
    type Resource: Resource;
    /// The generated weak type (`FooWeak`).
    type Weak: WeakResourceHandle<Strong = Self>;

    /// Wraps a generic handle.
    fn from_handle(handle: Handle<Self::Resource>) -> Self;
    /// The generic handle inside.
    fn as_handle(&self) -> &Handle<Self::Resource>;
    /// Unwraps the generic handle.
    fn into_handle(self) -> Handle<Self::Resource>;

    /// The live owning handle registered for `raw`, for types declared with `registry`.
    fn lookup(raw: <Self::Resource as Resource>::Raw) -> Option<Self> {
        let registry = <Self::Resource as Resource>::registry()?;
        registry.lookup(raw).map(Self::from_handle)
    }
}

/// A generated weak handle type (`FooWeak`), a thin wrapper around [`WeakHandle<R>`].
pub trait WeakResourceHandle: Clone + 'static {
    /// The strong type it upgrades to.
    type Strong: ResourceHandle<Weak = Self>;

    /// Wraps a generic weak handle.
    fn from_weak(weak: WeakHandle<<Self::Strong as ResourceHandle>::Resource>) -> Self;
    /// The generic weak handle inside.
    fn as_weak(&self) -> &WeakHandle<<Self::Strong as ResourceHandle>::Resource>;
}

/// The types an `#[owner]` field may have: a handle type, or an optional one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a handle type, so it cannot be an #[owner] field",
    label = "owner fields must be a generated `...Handle` type or an `Option` of one",
    note = "plain values can be stored as metadata: remove `#[owner]`"
)]
pub trait Owner {}

impl<H: ResourceHandle> Owner for H {}
impl<H: ResourceHandle> Owner for Option<H> {}
