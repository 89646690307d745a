//! Checks that need the whole declaration: name collisions and keys that need each other.

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
    check_registry(decl, diagnostics);
    check_names(decl, diagnostics);
}

fn check_registry(decl: &Declaration<'_>, diagnostics: &mut Diagnostics) {
    if let (Some(registry), None) = (decl.spec.registry, decl.spec.send_sync) {
        diagnostics.error(
            registry,
            "`registry` needs `unsafe_send_sync`: the registry is a process-wide static shared by all threads",
        );
    }
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
