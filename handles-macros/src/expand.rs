//! Writes the generated items, one function per item.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::Ident;

use crate::ast::Declaration;

/// The names of the generated types.
pub(crate) struct Names {
    pub handle: Ident,
    pub weak: Ident,
    pub boxed: Ident,
}

impl Names {
    /// The names generated for the struct `ident`; the fallback uses the same ones.
    pub(crate) fn new(ident: &Ident) -> Self {
        Self {
            handle: format_ident!("{}Handle", ident),
            weak: format_ident!("{}Weak", ident),
            boxed: format_ident!("{}Box", ident),
        }
    }
}

pub(crate) fn expand(decl: &Declaration<'_>) -> TokenStream {
    let names = Names::new(decl.ident);
    let items = [
        owner_checks(decl),
        resource_impl(decl),
        registry_check(decl),
        type_definitions(decl, &names),
        constructors(decl, &names),
        accessors(decl, &names),
        sharing_methods(decl, &names),
        value_trait_impls(decl, &names),
        handle_trait_impls(decl, &names),
        weak_methods(decl, &names),
    ];
    quote!(#(#items)*)
}

/// `const` assertions that every `#[owner]` field has a handle type, spanned at the type.
fn owner_checks(decl: &Declaration<'_>) -> TokenStream {
    let krate = &decl.spec.krate;
    let checks = decl.fields.iter().filter(|field| field.owner).map(|field| {
        let ty = field.ty;
        quote_spanned!(syn::spanned::Spanned::span(ty)=> #krate::__private::assert_owner::<#ty>();)
    });
    quote!(const _: () = { #(#checks)* };)
}

fn resource_impl(decl: &Declaration<'_>) -> TokenStream {
    let Declaration { ident, spec, .. } = decl;
    let (krate, raw) = (&spec.krate, &spec.raw);
    let name = ident.to_string();
    let delete = match &spec.delete {
        // Spanned at the deleter, so a wrong signature is reported there; the helper's name is
        // the note that says what the signature must be.
        Some(deleter) => quote_spanned! {syn::spanned::Spanned::span(deleter)=>
            #krate::__private::deleters_take_the_raw_value_and_a_shared_self::<Self, _, _>(
                #deleter, raw, record,
            )
        },
        None => quote! {
            let _ = (raw, record);
            #krate::__private::Result::Ok(())
        },
    };
    let registry = spec.registry.map(|_| {
        quote! {
            fn registry() -> #krate::__private::Option<&'static #krate::Registry<Self>> {
                static REGISTRY: #krate::Registry<#ident> = #krate::Registry::new();
                #krate::__private::Option::Some(&REGISTRY)
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #krate::Resource for #ident {
            type Raw = #raw;
            const NAME: &'static ::core::primitive::str = #name;

            #[inline]
            fn delete(
                raw: Self::Raw,
                record: &Self,
            ) -> #krate::__private::Result<(), #krate::DeleteError> {
                #delete
            }

            fn live() -> &'static #krate::LiveCount {
                static LIVE: #krate::LiveCount = #krate::LiveCount::new();
                &LIVE
            }

            #registry
        }
    }
}

/// A type with a registry shares it between threads, so it must have opted into thread safety
/// (`unsafe impl ThreadSafe`, written by the declaration's author); checked at the key.
fn registry_check(decl: &Declaration<'_>) -> TokenStream {
    let (krate, ident) = (&decl.spec.krate, decl.ident);
    decl.spec.registry.map_or_else(TokenStream::new, |span| {
        quote_spanned! {span=>
            const _: () = #krate::__private::registry_needs_thread_safe::<#ident>();
        }
    })
}

fn type_definitions(decl: &Declaration<'_>, names: &Names) -> TokenStream {
    let (krate, ident, vis) = (&decl.spec.krate, decl.ident, decl.vis);
    let Names {
        handle,
        weak,
        boxed,
    } = names;
    let handle_doc = format!(
        "A shared handle to a [`{ident}`] resource. Clones share one heap box; whether the \
         resource is deleted when the last clone drops depends on how it was constructed \
         (see [`{handle}::ownership`])."
    );
    let weak_doc = format!(
        "A weak handle to a [`{ident}`] resource: upgrades to a [`{handle}`] while one lives."
    );
    let boxed_doc =
        format!("The heap box behind a [`{handle}`]: the raw value and its [`{ident}`] record.");
    quote! {
        #[doc = #handle_doc]
        #[repr(transparent)]
        #vis struct #handle(#krate::Handle<#ident>);

        #[doc = #weak_doc]
        #[repr(transparent)]
        #vis struct #weak(#krate::WeakHandle<#ident>);

        #[doc = #boxed_doc]
        #vis type #boxed = #krate::HandleBox<#ident>;
    }
}

fn constructors(decl: &Declaration<'_>, names: &Names) -> TokenStream {
    let Declaration {
        ident, vis, spec, ..
    } = decl;
    let (krate, raw, handle) = (&spec.krate, &spec.raw, &names.handle);
    let owned = spec.delete.as_ref().map(|deleter| {
        let doc = format!(
            "Takes ownership of `raw`: `{}` deletes it when the last clone drops, before the \
             record's owners are released.",
            quote!(#deleter).to_string().replace(' ', "")
        );
        quote! {
            #[doc = #doc]
            ///
            /// # Safety
            ///
            /// - `raw` must be a live resource that nothing else deletes, and the deleter must be
            ///   the right way to delete it, exactly once.
            /// - `record` must describe `raw` truthfully: the deleter and every method that
            ///   trusts the record's metadata (a length, a size) rely on it.
            /// - The record's owners must keep alive whatever `raw` needs until the deleter ran.
            #[inline]
            #vis unsafe fn from_raw(raw: #raw, record: #ident) -> Self {
                // SAFETY: forwarded from this function's contract.
                Self(unsafe { #krate::Handle::from_raw_owned(raw, record) })
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #handle {
            #owned

            /// A non-owning reference to `raw`, which this call never causes to be deleted. If
            /// the type has a registry and an owning handle manages `raw`, that *owning* handle
            /// is returned instead (its owners and metadata come along, `record` is dropped),
            /// and the resource is deleted when its last clone drops, as before.
            ///
            /// # Safety
            ///
            /// - `raw` must stay valid while any clone of the returned handle is used.
            /// - `record` must describe `raw` truthfully: methods that trust the record's
            ///   metadata (a length, a size) rely on it.
            #[inline]
            #vis unsafe fn from_raw_borrowed(raw: #raw, record: #ident) -> Self {
                // SAFETY: forwarded from this function's contract.
                Self(unsafe { #krate::Handle::from_raw_borrowed(raw, record) })
            }

            /// A non-owning handle that keeps `owner` alive until the last clone drops; `owner`
            /// is dropped after the record. An owner value that leads back to this handle forms
            /// a reference cycle, which is never freed (and is never undefined behaviour).
            ///
            /// # Safety
            ///
            /// - `raw` must stay valid for as long as `owner` lives.
            /// - `record` must describe `raw` truthfully: methods that trust the record's
            ///   metadata (a length, a size) rely on it.
            #[inline]
            #vis unsafe fn from_raw_with_owner<O>(raw: #raw, record: #ident, owner: O) -> Self
            where
                O: #krate::__private::Any + #krate::__private::Send + #krate::__private::Sync,
            {
                // SAFETY: forwarded from this function's contract.
                Self(unsafe { #krate::Handle::from_raw_with_owner(raw, record, owner) })
            }
        }
    }
}

fn accessors(decl: &Declaration<'_>, names: &Names) -> TokenStream {
    let Declaration { vis, spec, .. } = decl;
    let (krate, raw, accessor, handle) = (&spec.krate, &spec.raw, &spec.accessor, &names.handle);
    let getters = decl
        .fields
        .iter()
        .filter(|field| !field.options.skip)
        .map(|field| {
            // A getter is as visible as its field: the handle exposes exactly what the record does.
            let (name, ty, vis) = (field.ident, field.ty, field.vis);
            let doc = if field.owner {
                format!("The `{name}` owner this resource keeps alive.")
            } else {
                format!("The `{name}` metadata recorded at creation.")
            };
            if field.options.copy {
                let check = quote_spanned! {syn::spanned::Spanned::span(ty)=>
                    const { #krate::__private::fields_marked_copy_must_be_copy::<#ty>() };
                };
                quote! {
                    #[doc = #doc]
                    #[inline]
                    #vis fn #name(&self) -> #ty {
                        #check
                        self.0.record().#name
                    }
                }
            } else {
                quote! {
                    #[doc = #doc]
                    #[inline]
                    #vis fn #name(&self) -> &#ty {
                        &self.0.record().#name
                    }
                }
            }
        });
    quote! {
        // Getters a program does not call are not dead code of its own making.
        #[allow(dead_code)]
        #[automatically_derived]
        impl #handle {
            /// The raw resource value. Do not delete it: the handle decides that.
            #[inline(always)]
            #vis fn #accessor(&self) -> #raw {
                self.0.raw()
            }

            #(#getters)*
        }
    }
}

fn sharing_methods(decl: &Declaration<'_>, names: &Names) -> TokenStream {
    let Declaration { vis, spec, .. } = decl;
    let (krate, raw) = (&spec.krate, &spec.raw);
    let Names { handle, weak, .. } = names;
    let lookup = spec.registry.map(|_| {
        quote! {
            /// The live owning handle that manages `raw`, if this program created one.
            #vis fn lookup(raw: #raw) -> #krate::__private::Option<Self> {
                <Self as #krate::ResourceHandle>::lookup(raw)
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #handle {
            /// A weak handle to the same box.
            #[inline]
            #vis fn downgrade(&self) -> #weak {
                #weak(self.0.downgrade())
            }

            /// Deletes the resource now if this is the last strong handle and returns the
            /// deleter's result; otherwise hands the handle back.
            #vis fn close(self) -> #krate::__private::Result<(), #krate::CloseError<Self>> {
                self.0.close().map_err(|error| match error {
                    #krate::CloseError::StillShared(inner) => #krate::CloseError::StillShared(Self(inner)),
                    #krate::CloseError::Deleter(error) => #krate::CloseError::Deleter(error),
                })
            }

            /// Moves this strong reference into a raw pointer for a C user-data slot.
            #vis fn into_ffi(self) -> *const #krate::__private::c_void {
                self.0.into_ffi()
            }

            /// Takes back a reference moved out by `into_ffi`.
            ///
            /// # Safety
            ///
            /// - `ptr` must come from `into_ffi` on this same handle type.
            /// - Each such pointer may be taken back only once.
            /// - Unless this handle type is `Send`, `from_ffi` must run on the thread that
            ///   called `into_ffi`.
            #vis unsafe fn from_ffi(ptr: *const #krate::__private::c_void) -> Self {
                // SAFETY: forwarded from this function's contract.
                Self(unsafe { #krate::Handle::from_ffi(ptr) })
            }

            /// The number of live boxes of this type; `None` unless `handles-core` is built
            /// with the `live-count` feature.
            #vis fn live_count() -> #krate::__private::Option<::core::primitive::usize> {
                #krate::Handle::<<Self as #krate::ResourceHandle>::Resource>::live_count()
            }

            #lookup
        }
    }
}

fn value_trait_impls(decl: &Declaration<'_>, names: &Names) -> TokenStream {
    let krate = &decl.spec.krate;
    let Names { handle, weak, .. } = names;
    let p = quote!(#krate::__private);
    quote! {
        #[automatically_derived]
        impl #p::Clone for #handle {
            #[inline]
            fn clone(&self) -> Self {
                Self(#p::Clone::clone(&self.0))
            }
        }

        #[automatically_derived]
        impl #p::PartialEq for #handle {
            #[inline]
            fn eq(&self, other: &Self) -> ::core::primitive::bool {
                self.0 == other.0
            }
        }

        #[automatically_derived]
        impl #p::Eq for #handle {}

        #[automatically_derived]
        impl #p::Hash for #handle {
            fn hash<H: #p::Hasher>(&self, state: &mut H) {
                #p::Hash::hash(&self.0, state)
            }
        }

        #[automatically_derived]
        impl #p::fmt::Debug for #handle {
            fn fmt(&self, f: &mut #p::fmt::Formatter<'_>) -> #p::fmt::Result {
                #p::fmt::Debug::fmt(&self.0, f)
            }
        }

        #[automatically_derived]
        impl #p::Deref for #handle {
            type Target = #krate::Handle<<Self as #krate::ResourceHandle>::Resource>;

            #[inline(always)]
            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }

        #[automatically_derived]
        impl #p::Clone for #weak {
            fn clone(&self) -> Self {
                Self(#p::Clone::clone(&self.0))
            }
        }

        #[automatically_derived]
        impl #p::fmt::Debug for #weak {
            fn fmt(&self, f: &mut #p::fmt::Formatter<'_>) -> #p::fmt::Result {
                #p::fmt::Debug::fmt(&self.0, f)
            }
        }

        #[automatically_derived]
        impl ::core::default::Default for #weak {
            fn default() -> Self {
                Self(#krate::WeakHandle::new())
            }
        }
    }
}

fn handle_trait_impls(decl: &Declaration<'_>, names: &Names) -> TokenStream {
    let (krate, ident) = (&decl.spec.krate, decl.ident);
    let Names { handle, weak, .. } = names;
    quote! {
        #[automatically_derived]
        impl #krate::ResourceHandle for #handle {
            type Resource = #ident;
            type Weak = #weak;

            #[inline]
            fn from_handle(handle: #krate::Handle<#ident>) -> Self {
                Self(handle)
            }

            #[inline]
            fn as_handle(&self) -> &#krate::Handle<#ident> {
                &self.0
            }

            #[inline]
            fn into_handle(self) -> #krate::Handle<#ident> {
                self.0
            }
        }

        #[automatically_derived]
        impl #krate::WeakResourceHandle for #weak {
            type Strong = #handle;

            fn from_weak(weak: #krate::WeakHandle<#ident>) -> Self {
                Self(weak)
            }

            fn as_weak(&self) -> &#krate::WeakHandle<#ident> {
                &self.0
            }
        }
    }
}

fn weak_methods(decl: &Declaration<'_>, names: &Names) -> TokenStream {
    let (krate, vis) = (&decl.spec.krate, decl.vis);
    let Names { handle, weak, .. } = names;
    quote! {
        #[automatically_derived]
        impl #weak {
            /// A strong handle, unless the resource's last strong handle is already gone.
            #[inline]
            #vis fn upgrade(&self) -> #krate::__private::Option<#handle> {
                self.0.upgrade().map(#handle)
            }
        }
    }
}
