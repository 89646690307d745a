//! Collects every error of a declaration, so that all mistakes are reported at once.

use std::fmt::Display;

use proc_macro2::Span;

/// An accumulator of spanned errors.
#[derive(Default)]
pub(crate) struct Diagnostics {
    errors: Option<syn::Error>,
}

impl Diagnostics {
    pub(crate) fn error(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }

    /// `Ok` if nothing was reported, else every error combined.
    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.errors {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }
}
