//! Checks on the generated code's documentation: the safety contracts are part of the API, and
//! a contract that loses a clause is a soundness bug, so they are tested like code.

use crate::{diagnostics::Diagnostics, expand, parse};

fn expand_to_string(input: syn::DeriveInput) -> String {
    let mut diagnostics = Diagnostics::default();
    let declaration = parse::parse(&input, &mut diagnostics).expect("a valid declaration");
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
