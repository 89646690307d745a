//! Checks that need the whole declaration: name collisions and field types that cannot be
//! copied into the generated impls.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;

use crate::ast::Declaration;
use crate::diagnostics::Diagnostics;

/// Methods the generated handle type defines or reaches through `Deref`; a field getter or the
/// raw accessor with one of these names would shadow or clash with it.
const GENERATED_METHODS: &[&str] = &[
    "as_handle",
    "as_intptr",
    "clone",
    "close",
    "downgrade",
    "eq",
    "fmt",
    "from_ffi",
    "from_handle",
    "from_raw",
    "from_raw_borrowed",
    "from_raw_with_owner",
    "hash",
    "into_ffi",
    "into_handle",
    "is_owning",
    "live_count",
    "lookup",
    "ownership",
    "ptr_eq",
    "raw",
    "record",
    "strong_count",
];

pub(crate) fn validate(decl: &Declaration<'_>, diagnostics: &mut Diagnostics) {
    check_names(decl, diagnostics);
    check_no_self_in_fields(decl, diagnostics);
}

/// A field type is copied into `impl FooHandle` (getters), where `Self` means the handle type,
/// not the declared struct: reject it rather than let it silently mean something else.
fn check_no_self_in_fields(decl: &Declaration<'_>, diagnostics: &mut Diagnostics) {
    for field in &decl.fields {
        if let Some(span) = find_self(field.ty.to_token_stream()) {
            diagnostics.error(
                span,
                format!(
                    "field types cannot mention `Self`: in the generated handle it would name the handle type, not `{}`; write `{}` instead",
                    decl.ident, decl.ident
                ),
            );
        }
    }
}

fn find_self(tokens: TokenStream) -> Option<proc_macro2::Span> {
    tokens.into_iter().find_map(|tree| match tree {
        TokenTree::Ident(ident) if ident == "Self" => Some(ident.span()),
        TokenTree::Group(group) => find_self(group.stream()),
        _ => None,
    })
}

fn check_names(decl: &Declaration<'_>, diagnostics: &mut Diagnostics) {
    let accessor = &decl.spec.accessor;
    if GENERATED_METHODS.contains(&accessor.to_string().as_str()) {
        diagnostics.error(
            accessor.span(),
            format!(
                "accessor name `{accessor}` collides with a generated method of the handle type"
            ),
        );
    }
    for field in &decl.fields {
        let name = field.ident.to_string();
        let name = name.strip_prefix("r#").unwrap_or(&name).to_owned();
        if GENERATED_METHODS.contains(&name.as_str()) {
            diagnostics.error(
                field.ident.span(),
                format!("field `{name}` would get a getter that collides with the generated method `{name}`; rename the field"),
            );
        }
        if *accessor == name {
            diagnostics.error(
                field.ident.span(),
                format!("field `{name}` collides with the raw accessor `{accessor}`; rename the field or choose another `accessor`"),
            );
        }
    }
}
