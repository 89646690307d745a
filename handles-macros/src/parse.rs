//! Reads the struct and its `#[handle(...)]` and `#[owner]` attributes into a [`Declaration`].
//!
//! A small hand-written parser: each key is read as `name` or `name = tokens`, and the tokens
//! are then parsed as the type the key expects. Every problem is recorded and parsing goes on,
//! so one compile shows all of them.

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, Ident, Path, Token, Type};

use crate::ast::{Declaration, Field, FieldOptions, Spec};
use crate::diagnostics::Diagnostics;

/// The keys `#[handle(...)]` accepts on the struct.
const KEYS: &[&str] = &["raw", "accessor", "delete", "registry", "crate"];

/// The keys `#[handle(...)]` accepts on a field.
const FIELD_KEYS: &[&str] = &["copy", "skip"];

/// One `key` or `key = value` item, before its value is interpreted.
struct Item {
    key: Ident,
    value: Option<TokenStream>,
}

/// The keys read so far, each with the span where it first appeared.
#[derive(Default)]
struct SpecBuilder {
    seen: HashMap<String, Span>,
    raw: Option<Type>,
    accessor: Option<Ident>,
    delete: Option<Path>,
    registry: Option<Span>,
    krate: Option<Path>,
    /// A mistake that may have been an attempt at `crate = path`: then the default path is a
    /// guess that the fallback must not rely on.
    krate_in_doubt: bool,
}

/// What [`parse`] read.
pub(crate) struct Parsed<'a> {
    /// The declaration, whenever its spec could be read (even if a field had problems, so that
    /// validation can report its own findings in the same compile).
    pub declaration: Option<Declaration<'a>>,
    /// The path to the runtime crate for the fallback: the `crate` key's, or the default unless
    /// a mistake in `#[handle(...)]` may have been meant to name another.
    pub krate: Option<TokenStream>,
}

/// Parses the whole input, recording every problem in `diagnostics`.
pub(crate) fn parse<'a>(input: &'a DeriveInput, diagnostics: &mut Diagnostics) -> Parsed<'a> {
    let (spec, krate) = parse_spec(input, diagnostics);
    let fields = parse_fields(input, diagnostics);
    if !input.generics.params.is_empty() {
        diagnostics.error(
            input.generics.span(),
            "#[derive(ResourceHandle)] does not support generic parameters: a resource has one concrete raw type",
        );
    }
    let declaration = spec.map(|spec| Declaration {
        vis: &input.vis,
        ident: &input.ident,
        spec,
        fields,
    });
    Parsed { declaration, krate }
}

fn default_krate() -> Path {
    syn::parse_quote!(::handles_core)
}

/// The spec, if it could be read, and the crate path for the fallback.
fn parse_spec(
    input: &DeriveInput,
    diagnostics: &mut Diagnostics,
) -> (Option<Spec>, Option<TokenStream>) {
    let attrs: Vec<&Attribute> = input
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("handle"))
        .collect();
    if attrs.is_empty() {
        diagnostics.error(
            input.ident.span(),
            "missing #[handle(raw = ...)] attribute: #[derive(ResourceHandle)] needs at least the raw type",
        );
        return (None, Some(default_krate().into_token_stream()));
    }
    let mut builder = SpecBuilder::default();
    for attr in &attrs {
        match attr.parse_args_with(parse_items) {
            Ok(items) => {
                for item in items {
                    builder.accept(item, diagnostics);
                }
            }
            Err(error) => {
                // Which keys it held is unknown.
                builder.krate_in_doubt = true;
                diagnostics.push(error);
            }
        }
    }
    // A path given with `crate = ...` is the author's; the default is trusted unless a mistake
    // may have been an attempt to give another.
    let trusted = builder.krate.is_some() || !builder.krate_in_doubt;
    let krate = builder.krate.unwrap_or_else(default_krate);
    let fallback_krate = trusted.then(|| krate.to_token_stream());
    let Some(raw) = builder.raw else {
        diagnostics.error(
            attrs[0].path().span(),
            "missing `raw = Type` in #[handle(...)]: the type of the raw resource value",
        );
        return (None, fallback_krate);
    };
    let spec = Spec {
        raw,
        accessor: builder
            .accessor
            .unwrap_or_else(|| Ident::new("as_raw", Span::call_site())),
        delete: builder.delete,
        registry: builder.registry,
        krate,
    };
    (Some(spec), fallback_krate)
}

/// Reads `key`, `key = value`, ... where a value runs to the next comma outside `<...>`.
fn parse_items(input: ParseStream<'_>) -> syn::Result<Vec<Item>> {
    let mut items = Vec::new();
    while !input.is_empty() {
        let key = input.call(Ident::parse_any)?;
        let value = if input.peek(Token![=]) {
            let eq: Token![=] = input.parse()?;
            let tokens = value_tokens(input)?;
            if tokens.is_empty() {
                return Err(syn::Error::new(
                    eq.span,
                    format!("expected a value after `{key} =`"),
                ));
            }
            Some(tokens)
        } else {
            None
        };
        items.push(Item { key, value });
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(items)
}

fn value_tokens(input: ParseStream<'_>) -> syn::Result<TokenStream> {
    let mut tokens = TokenStream::new();
    let mut angle_depth = 0usize;
    let mut after_dash = false;
    loop {
        let at_separator = angle_depth == 0 && input.peek(Token![,]);
        if input.is_empty() || at_separator {
            break;
        }
        let tree: TokenTree = input.parse()?;
        if let TokenTree::Punct(punct) = &tree {
            match punct.as_char() {
                '<' => angle_depth += 1,
                // `->` in a function-pointer type is not a closing angle bracket.
                '>' if !after_dash => angle_depth = angle_depth.saturating_sub(1),
                _ => {}
            }
            after_dash = punct.as_char() == '-';
        } else {
            after_dash = false;
        }
        tokens.extend([tree]);
    }
    Ok(tokens)
}

impl SpecBuilder {
    fn accept(&mut self, item: Item, diagnostics: &mut Diagnostics) {
        let name = item.key.unraw().to_string();
        if name == "unsafe_send_sync" {
            // An `unsafe impl` written by the macro would be invisible to
            // `#![forbid(unsafe_code)]`, so the opt-in is the author's own line.
            diagnostics.error(
                item.key.span(),
                "`unsafe_send_sync` is not a key: opt into thread safety with your own line next to the declaration, `unsafe impl handles_core::ThreadSafe for YourType {}`, so that `unsafe_code` lints and reviewers see it",
            );
            return;
        }
        if !KEYS.contains(&name.as_str()) {
            // `krate = ...` or `colour = ...` may have meant the crate; `delet` did not.
            if nearest_key(&name, KEYS).is_none_or(|key| key == "crate") {
                self.krate_in_doubt = true;
            }
            diagnostics.error(
                item.key.span(),
                unknown_key_message(&name, KEYS, "#[handle]"),
            );
            return;
        }
        if let Some(first) = self.seen.get(&name) {
            let mut error = syn::Error::new(
                item.key.span(),
                format!("duplicate `{name}` key in #[handle]"),
            );
            error.combine(syn::Error::new(
                *first,
                format!("`{name}` first given here"),
            ));
            diagnostics.push(error);
            return;
        }
        self.seen.insert(name.clone(), item.key.span());
        match name.as_str() {
            "raw" => self.raw = typed_value(&item, diagnostics),
            "accessor" => self.accessor = typed_value(&item, diagnostics),
            "delete" => self.delete = typed_value(&item, diagnostics),
            "crate" => {
                self.krate = typed_value(&item, diagnostics);
                self.krate_in_doubt |= self.krate.is_none();
            }
            "registry" => self.registry = flag(&item, diagnostics),
            _ => unreachable!("every key in KEYS is handled"),
        }
    }
}

fn typed_value<T: syn::parse::Parse>(item: &Item, diagnostics: &mut Diagnostics) -> Option<T> {
    let Some(tokens) = &item.value else {
        diagnostics.error(
            item.key.span(),
            format!("`{}` needs a value: `{} = ...`", item.key, item.key),
        );
        return None;
    };
    match T::parse.parse2(tokens.clone()) {
        Ok(value) => Some(value),
        Err(error) => {
            diagnostics.push(error);
            None
        }
    }
}

fn flag(item: &Item, diagnostics: &mut Diagnostics) -> Option<Span> {
    if let Some(tokens) = &item.value {
        diagnostics.error(
            tokens.span(),
            format!("`{}` is a flag and takes no value", item.key),
        );
    }
    Some(item.key.span())
}

/// The key that `name` is probably a misspelling of.
fn nearest_key<'k>(name: &str, keys: &[&'k str]) -> Option<&'k str> {
    keys.iter()
        .map(|key| (strsim::damerau_levenshtein(name, key), *key))
        .filter(|(distance, key)| *distance <= (key.len() / 3).max(2) || key.contains(name))
        .min()
        .map(|(_, key)| key)
}

fn unknown_key_message(name: &str, keys: &[&str], place: &str) -> String {
    let known = keys.join("`, `");
    match nearest_key(name, keys) {
        Some(key) => format!("unknown key `{name}` in {place}; did you mean `{key}`?"),
        None => format!("unknown key `{name}` in {place}; expected one of `{known}`"),
    }
}

fn parse_fields<'a>(input: &'a DeriveInput, diagnostics: &mut Diagnostics) -> Vec<Field<'a>> {
    let data = match &input.data {
        Data::Struct(data) => data,
        Data::Enum(data) => {
            diagnostics.error(
                data.enum_token.span,
                "#[derive(ResourceHandle)] needs a struct with named fields; enums are not supported",
            );
            return Vec::new();
        }
        Data::Union(data) => {
            diagnostics.error(
                data.union_token.span,
                "#[derive(ResourceHandle)] needs a struct with named fields; unions are not supported",
            );
            return Vec::new();
        }
    };
    match &data.fields {
        Fields::Named(named) => named
            .named
            .iter()
            .map(|field| Field {
                vis: &field.vis,
                ident: field.ident.as_ref().expect("named fields have names"),
                ty: &field.ty,
                owner: is_owner(&field.attrs, diagnostics),
                options: field_options(&field.attrs, diagnostics),
            })
            .collect(),
        Fields::Unnamed(unnamed) => {
            diagnostics.error(
                unnamed.span(),
                "#[derive(ResourceHandle)] does not support tuple structs: name the fields, which become getters",
            );
            Vec::new()
        }
        Fields::Unit => Vec::new(),
    }
}

fn is_owner(attrs: &[Attribute], diagnostics: &mut Diagnostics) -> bool {
    let mut first: Option<&Attribute> = None;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("owner")) {
        if let Err(error) = attr.meta.require_path_only() {
            diagnostics.error(error.span(), "#[owner] takes no arguments");
        }
        if let Some(first) = first {
            let mut error = syn::Error::new(attr.span(), "duplicate #[owner] attribute");
            error.combine(syn::Error::new(first.span(), "first #[owner] here"));
            diagnostics.push(error);
        }
        first.get_or_insert(attr);
    }
    first.is_some()
}

/// Reads a field's `#[handle(...)]`: `copy` (the getter returns the value) or `skip` (no
/// getter: private state the author reaches through `record()`).
fn field_options(attrs: &[Attribute], diagnostics: &mut Diagnostics) -> FieldOptions {
    let mut options = FieldOptions::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("handle")) {
        let items = match attr.parse_args_with(parse_items) {
            Ok(items) => items,
            Err(error) => {
                diagnostics.push(error);
                continue;
            }
        };
        for item in items {
            let name = item.key.unraw().to_string();
            let slot = match name.as_str() {
                "copy" => &mut options.copy,
                "skip" => &mut options.skip,
                _ => {
                    diagnostics.error(
                        item.key.span(),
                        unknown_key_message(&name, FIELD_KEYS, "a field's #[handle]"),
                    );
                    continue;
                }
            };
            if *slot {
                diagnostics.error(item.key.span(), format!("duplicate `{name}` on this field"));
            } else {
                *slot = flag(&item, diagnostics).is_some();
            }
            if options.copy && options.skip {
                diagnostics.error(
                    item.key.span(),
                    "`copy` and `skip` exclude each other: a skipped field has no getter",
                );
            }
        }
    }
    options
}
