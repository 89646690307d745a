//! Errors of deletion and of explicit `close`.

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Why a deleter did not complete: it returned an error, or it panicked.
///
/// Deleters return their own error types; the runtime boxes the error only on the failure path,
/// so a successful delete allocates nothing. Use [`DeleteError::downcast_ref`] to get the
/// deleter's own type back.
#[derive(Debug)]
pub enum DeleteError {
    /// The deleter returned `Err`.
    Failed(Box<dyn StdError + Send + Sync + 'static>),
    /// The deleter panicked; the payload's message, when it was a string.
    Panicked(String),
}

impl DeleteError {
    /// Boxes a deleter's error.
    pub fn new<E: Into<Box<dyn StdError + Send + Sync + 'static>>>(error: E) -> Self {
        DeleteError::Failed(error.into())
    }

    /// Describes a caught panic payload, then drops the payload without letting its `Drop`
    /// unwind (a payload is any type, and its `Drop` may panic).
    #[cold]
    #[inline(never)]
    pub(crate) fn from_panic(payload: Box<dyn Any + Send>) -> Self {
        let message = panic_message(&*payload);
        drop_without_unwinding(payload);
        DeleteError::Panicked(message)
    }

    /// The deleter's error as its concrete type, if it returned one of type `E`.
    pub fn downcast_ref<E: StdError + 'static>(&self) -> Option<&E> {
        match self {
            DeleteError::Failed(error) => error.downcast_ref::<E>(),
            DeleteError::Panicked(_) => None,
        }
    }

    /// Whether the deleter panicked rather than returning an error.
    pub fn is_panic(&self) -> bool {
        matches!(self, DeleteError::Panicked(_))
    }
}

impl fmt::Display for DeleteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeleteError::Failed(error) => fmt::Display::fmt(error, f),
            DeleteError::Panicked(message) => write!(f, "deleter panicked: {message}"),
        }
    }
}

impl StdError for DeleteError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            DeleteError::Failed(error) => Some(&**error),
            DeleteError::Panicked(_) => None,
        }
    }
}

/// Drops `value`, catching a panic from its `Drop`. The caught panic's payload is dropped the
/// same way; a chain of payloads whose `Drop`s keep panicking is leaked after a few rounds,
/// because leaking a payload is the price of never unwinding out of a handle's `Drop`, which
/// would abort a thread that is already unwinding.
pub(crate) fn drop_without_unwinding<T>(value: T) {
    let mut payload = match catch_unwind(AssertUnwindSafe(move || drop(value))) {
        Ok(()) => return,
        Err(payload) => payload,
    };
    for _ in 0..4 {
        payload = match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(next) => next,
        };
    }
    std::mem::forget(payload);
}

/// A panic payload's message: its text if it is a string, else a fixed phrase. Reads the
/// payload only; dropping it is the caller's.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&'static str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// Why [`close`](crate::Handle::close) did not delete the resource cleanly.
pub enum CloseError<H> {
    /// Other strong handles still exist; the handle is handed back unchanged.
    StillShared(H),
    /// This was the last handle and the deleter ran, but it failed or panicked. The resource is
    /// gone from the runtime's point of view (its owners have been released); the error says
    /// what the C API reported.
    Deleter(DeleteError),
}

impl<H> CloseError<H> {
    /// The handle handed back when others still share the resource.
    pub fn into_handle(self) -> Option<H> {
        match self {
            CloseError::StillShared(handle) => Some(handle),
            CloseError::Deleter(_) => None,
        }
    }
}

impl<H> fmt::Debug for CloseError<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseError::StillShared(_) => f.write_str("StillShared(..)"),
            CloseError::Deleter(error) => f.debug_tuple("Deleter").field(error).finish(),
        }
    }
}

impl<H> fmt::Display for CloseError<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseError::StillShared(_) => {
                f.write_str("the resource is still shared by other handles")
            }
            CloseError::Deleter(error) => write!(f, "deleting the resource failed: {error}"),
        }
    }
}

impl<H> StdError for CloseError<H> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            CloseError::StillShared(_) => None,
            CloseError::Deleter(error) => Some(error),
        }
    }
}
