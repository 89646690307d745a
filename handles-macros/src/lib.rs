//! `#[derive(ResourceHandle)]`: declares a C resource and generates its handle types.
//!
//! Use it through `handles_core`, which re-exports it. The pipeline is one file per stage:
//! `parse.rs` reads the struct and its attributes into the `ast.rs` model, collecting every
//! mistake; `validate.rs` checks the model as a whole; `expand.rs` writes the generated items,
//! one function per item. A declaration with errors gets `fallback.rs` instead: the errors and
//! stand-ins for the generated names, so that its errors are all the compile reports.
#![deny(missing_docs)]

mod ast;
mod diagnostics;
mod expand;
mod fallback;
mod parse;
#[cfg(test)]
mod tests;
mod validate;

use proc_macro::TokenStream;

/// Declares a resource and generates `<Name>Handle`, `<Name>Weak` and `<Name>Box`.
///
/// ```text
/// #[derive(ResourceHandle)]
/// #[handle(raw = *mut c_void, accessor = as_ptr, delete = unmap)]
/// pub struct Mapping {
///     #[owner] file: MemFdHandle,
///     #[handle(copy)] len: usize,
/// }
/// // SAFETY: mappings may be used and unmapped from any thread.
/// unsafe impl ThreadSafe for Mapping {}
/// ```
///
/// Keys of `#[handle(...)]`:
/// - `raw = Type` (required): the raw value's type.
/// - `accessor = name`: the raw accessor's name (default `as_raw`).
/// - `delete = path`: the deleter, `fn(Raw, &Name) -> Result<(), E>`; without it the type has
///   no owning constructor.
/// - `registry`: keeps a per-type map from raw value to the owning handle (needs the
///   thread-safety opt-in, `unsafe impl ThreadSafe for Name {}`, written by the author).
/// - `crate = path`: where `handles_core` is, if it was renamed.
///
/// Field attributes: `#[owner]` marks a field holding a handle (or `Option` of one) that the
/// resource depends on; `#[handle(copy)]` makes a `Copy` field's getter return the value
/// instead of a reference; `#[handle(skip)]` generates no getter (private state, reached
/// through `record()`, whose name is then free for a method of the author's).
#[proc_macro_derive(ResourceHandle, attributes(handle, owner))]
pub fn derive_resource_handle(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    derive(&input).into()
}

/// The whole derive: the generated items, or the errors and the fallback.
fn derive(input: &syn::DeriveInput) -> proc_macro2::TokenStream {
    let mut diagnostics = diagnostics::Diagnostics::default();
    let parse::Parsed { declaration, krate } = parse::parse(input, &mut diagnostics);
    if let Some(declaration) = &declaration {
        validate::validate(declaration, &mut diagnostics);
    }
    match (diagnostics.finish(), declaration) {
        (Ok(()), Some(declaration)) => expand::expand(&declaration),
        (Err(errors), _) => fallback::fallback(input, krate.as_ref(), errors),
        (Ok(()), None) => unreachable!("a missing declaration is always reported"),
    }
}
