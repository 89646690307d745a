//! Checks on the generated code's documentation: the safety contracts are part of the API, and
//! a contract that loses a clause is a soundness bug, so they are tested like code.

use crate::{diagnostics::Diagnostics, expand, parse};

fn expand_to_string(input: syn::DeriveInput) -> String {
    let mut diagnostics = Diagnostics::default();
    let declaration = parse::parse(&input, &mut diagnostics)
        .declaration
        .expect("a valid declaration");
    diagnostics.finish().expect("no errors");
    expand::expand(&declaration).to_string()
}

fn registered_mapping() -> String {
    expand_to_string(syn::parse_quote! {
        #[handle(raw = *mut c_void, delete = unmap, registry)]
        pub struct Mapping {
            #[owner]
            file: FileHandle,
            #[handle(copy)]
            len: ::core::primitive::usize,
        }
    })
}

#[test]
fn owning_constructor_contract_names_every_clause() {
    let code = registered_mapping();
    for clause in [
        "`raw` must be a live resource that nothing else deletes",
        "`record` must describe `raw` truthfully",
        "The record's owners must keep alive whatever `raw` needs",
    ] {
        assert!(code.contains(clause), "missing from `from_raw`: {clause}");
    }
}

#[test]
fn borrowed_constructor_says_it_may_return_the_owning_handle() {
    let code = registered_mapping();
    assert!(code.contains("that *owning* handle"), "{code}");
    assert!(!code.contains("it is never deleted through this handle"));
}

#[test]
fn from_ffi_contract_covers_threads() {
    let code = registered_mapping();
    assert!(code.contains("must run on the thread that"), "{code}");
}

#[test]
fn generated_code_names_primitives_by_full_path_and_marks_impls_derived() {
    let code = registered_mapping();
    assert!(code.contains(":: core :: primitive :: bool"));
    let unqualified = code.replace(":: core :: primitive ::", "");
    for primitive in ["bool", "usize", "str"] {
        let named_bare = code
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .filter(|token| *token == primitive)
            .count();
        let named_qualified = code
            .matches(&format!(":: core :: primitive :: {primitive}"))
            .count();
        assert_eq!(
            named_bare, named_qualified,
            "unqualified `{primitive}` in {unqualified}"
        );
    }
    assert!(code.contains("automatically_derived"));
    assert!(
        !code.contains("unsafe impl"),
        "the opt-in is never generated"
    );
}

/// The whole derive's output, valid or not.
fn derive_to_string(input: syn::DeriveInput) -> String {
    crate::derive(&input).to_string()
}

fn misspelled_key() -> String {
    derive_to_string(syn::parse_quote! {
        #[handle(raw = u32, acessor = as_id)]
        pub(crate) struct Thing {
            #[handle(copy)]
            len: usize,
        }
    })
}

#[test]
fn fallback_defines_the_generated_names_with_the_struct_visibility() {
    let code = misspelled_key();
    for name in ["ThingHandle", "ThingWeak", "ThingBox"] {
        let alias = format!("pub (crate) type {name} = __thing_declaration_errors :: {name} ;");
        assert!(code.contains(&alias), "no `{alias}` in {code}");
    }
    assert_eq!(
        code.matches("# [doc = \"Not generated: the `#[derive(ResourceHandle)]` declaration of `Thing` has errors.\"]")
            .count(),
        3,
        "{code}"
    );
    // Nothing of the real expansion: no methods that could clash or fail.
    assert!(
        !code.contains("fn as_id") && !code.contains("fn len"),
        "{code}"
    );
}

#[test]
fn fallback_keeps_every_error_inside_its_module() {
    let code = derive_to_string(syn::parse_quote! {
        #[handle(raw = u32, delet = free, acessor = as_id, colour = red)]
        struct Thing {}
    });
    let module = "mod __thing_declaration_errors {";
    let inside = &code[code.find(module).expect("the error module") + module.len()..];
    // The module holds only the errors: the first item after it is the first alias.
    let inside = &inside[..inside.find("# [doc").expect("the aliases after the module")];
    assert_eq!(
        inside.matches(":: core :: compile_error !").count(),
        3,
        "{code}"
    );
    assert_eq!(code.matches("compile_error").count(), 3, "{code}");
    for key in ["delet", "acessor", "colour"] {
        assert!(inside.contains(&format!("unknown key `{key}`")), "{inside}");
    }
}

#[test]
fn fallback_contains_no_code_that_could_panic() {
    let inputs: [syn::DeriveInput; 4] = [
        syn::parse_quote! {
            #[handle(raw = u32, accessor = close)]
            pub struct Thing {}
        },
        syn::parse_quote! {
            #[handle(delete = free)]
            pub struct Thing {}
        },
        syn::parse_quote! { pub enum Thing { A } },
        syn::parse_quote! {
            #[handle(raw = u32)]
            pub struct Thing { #[owner(weak)] parent: ThingHandle }
        },
    ];
    for input in inputs {
        let code = derive_to_string(input);
        assert!(code.contains("compile_error"), "{code}");
        for word in code.split(|c: char| !c.is_alphanumeric() && c != '_') {
            assert!(
                ![
                    "panic",
                    "unreachable",
                    "unimplemented",
                    "todo",
                    "loop",
                    "abort"
                ]
                .contains(&word),
                "`{word}` in {code}"
            );
        }
    }
}

#[test]
fn fallback_implements_resource_where_the_crate_path_is_known() {
    let implements = |input: syn::DeriveInput| {
        let code = derive_to_string(input);
        assert!(code.contains("compile_error"), "{code}");
        [
            ":: handles_core :: Resource for Thing",
            ":: renamed :: Resource for Thing",
        ]
        .into_iter()
        .find(|impl_| code.contains(impl_))
    };
    let default = Some(":: handles_core :: Resource for Thing");
    let renamed = Some(":: renamed :: Resource for Thing");
    // A mistake that cannot have been about the crate path keeps the default.
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(raw = u32, delet = f)]
            struct Thing {}
        )),
        default
    );
    assert_eq!(
        implements(syn::parse_quote!(
            struct Thing {}
        )),
        default
    );
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(raw = u32, accessor = raw)]
            struct Thing {}
        )),
        default
    );
    // A given path is used even when `raw` is missing.
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(crate = ::renamed)]
            struct Thing {}
        )),
        renamed
    );
    // A mistake that may have meant another crate path: no impl rather than a wrong path.
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(raw = u32, krate = ::renamed)]
            struct Thing {}
        )),
        None
    );
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(raw = u32, path = ::renamed)]
            struct Thing {}
        )),
        None
    );
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(raw = u32, crate = 7)]
            struct Thing {}
        )),
        None
    );
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(= u32)]
            struct Thing {}
        )),
        None
    );
    // A generic struct would need arguments the impl cannot know.
    assert_eq!(
        implements(syn::parse_quote!(
            #[handle(raw = u32)]
            struct Thing<T> {
                t: T,
            }
        )),
        None
    );
}

#[test]
fn fallback_resource_impl_deletes_nothing_and_has_an_error_raw_type() {
    let code = misspelled_key();
    assert!(
        code.contains("type Raw = __thing_declaration_errors :: ThingHandle ;"),
        "{code}"
    );
    assert!(
        code.contains("{ :: handles_core :: __private :: Result :: Ok (()) }"),
        "{code}"
    );
    assert!(
        !code.contains("registry") && !code.contains("assert_owner"),
        "{code}"
    );
}

#[test]
fn a_valid_declaration_gets_no_fallback() {
    let code = registered_mapping();
    assert!(!code.contains("declaration_errors") && !code.contains("compile_error"));
}
