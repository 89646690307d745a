//! The parsed declaration that validation and expansion work on.

use proc_macro2::Span;
use syn::{Ident, Path, Type, Visibility};

/// A `#[derive(ResourceHandle)]` struct, fully parsed.
pub(crate) struct Declaration<'a> {
    pub vis: &'a Visibility,
    /// The struct's name; the generated types are named after it.
    pub ident: &'a Ident,
    pub spec: Spec,
    pub fields: Vec<Field<'a>>,
}

/// The keys of `#[handle(...)]`.
pub(crate) struct Spec {
    pub raw: Type,
    pub accessor: Ident,
    pub delete: Option<Path>,
    /// The span of `registry`, when present.
    pub registry: Option<Span>,
    /// The path to the runtime crate.
    pub krate: Path,
}

/// One named field of the struct.
pub(crate) struct Field<'a> {
    /// The field's visibility, which its getter gets too.
    pub vis: &'a Visibility,
    pub ident: &'a Ident,
    pub ty: &'a Type,
    /// Marked `#[owner]`: a handle the resource depends on.
    pub owner: bool,
    /// The field's `#[handle(...)]` keys.
    pub options: FieldOptions,
}

/// A field's `#[handle(...)]` keys.
#[derive(Clone, Copy, Default)]
pub(crate) struct FieldOptions {
    /// `copy`: the getter returns the value, not a reference.
    pub copy: bool,
    /// `skip`: no getter.
    pub skip: bool,
}
