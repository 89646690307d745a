//! What the derive emits for a declaration with errors: the errors, and stand-ins for the
//! generated names, so that the rest of the crate reports those errors and nothing else (as
//! `thiserror` emits a fallback impl for an invalid input).
//!
//! The stand-ins are aliases of an *error type*, not opaque structs. An opaque `FooHandle`
//! would turn every method call, getter, inherent `impl FooHandle` and `#[owner]` bound of the
//! crate into an error of its own; uses of an error type are silent. The error type comes from
//! a path that cannot resolve, `__foo_declaration_errors::FooHandle`, through a module that
//! holds the `compile_error!`s: rustc (since 1.95, this crate's `rust-version`, rust-lang/rust
//! PR 149484) does not report lookups that fail in a module which contains a `compile_error!`,
//! so that path gives the error type without a message. The module is the derive's own, so
//! the user's module keeps its usual reports about names the derive would never have made.
//!
//! The struct also implements `Resource`, with the error type as its raw type, so that the
//! author's `unsafe impl ThreadSafe for Foo {}` and uses of `Handle<Foo>` find the impl. The
//! only body is a deleter that deletes nothing: no code here can panic, and none can run, since
//! the crate does not compile.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::DeriveInput;
use syn::ext::IdentExt;

use crate::expand::Names;

/// The errors, the three generated type names and, where `krate` is known and the struct has
/// no generics, the `Resource` impl.
pub(crate) fn fallback(
    input: &DeriveInput,
    krate: Option<&TokenStream>,
    errors: syn::Error,
) -> TokenStream {
    let (ident, vis) = (&input.ident, &input.vis);
    let Names {
        handle,
        weak,
        boxed,
    } = Names::new(ident);
    // Snake case, which `non_snake_case` accepts without an `allow` (one that a `forbid` in
    // the user's crate would reject).
    let module = format_ident!(
        "__{}_declaration_errors",
        ident.unraw().to_string().to_lowercase(),
        span = ident.span()
    );
    let errors = errors.into_compile_error();
    let doc = format!(
        "Not generated: the `#[derive(ResourceHandle)]` declaration of `{ident}` has errors."
    );
    let resource = krate
        .filter(|_| input.generics.params.is_empty())
        .map(|krate| {
            let name = ident.to_string();
            quote! {
                #[automatically_derived]
                impl #krate::Resource for #ident {
                    type Raw = #module::#handle;
                    const NAME: &'static ::core::primitive::str = #name;

                    fn delete(
                        _: Self::Raw,
                        _: &Self,
                    ) -> #krate::__private::Result<(), #krate::DeleteError> {
                        #krate::__private::Result::Ok(())
                    }

                    fn live() -> &'static #krate::LiveCount {
                        static LIVE: #krate::LiveCount = #krate::LiveCount::new();
                        &LIVE
                    }
                }
            }
        });
    quote! {
        mod #module {
            #errors
        }

        #[doc = #doc]
        #vis type #handle = #module::#handle;

        #[doc = #doc]
        #vis type #weak = #module::#weak;

        #[doc = #doc]
        #vis type #boxed = #module::#boxed;

        #resource
    }
}
