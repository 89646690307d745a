//! The one wire form of what crosses a process boundary: the driver's 64-byte token (export
//! data of a pointer, an event handle) followed by a few bytes of this crate's own, each
//! payload of one exact length.

use crate::error::{Error, Result};

/// The driver's tokens are 64 bytes (`CUmemPoolPtrExportData`, `CUipcEventHandle`).
pub(crate) const TOKEN: usize = 64;

/// `token` followed by `tail`, as one payload of `N` bytes; `N` is `TOKEN + tail.len()` at
/// every caller (constants both).
pub(crate) fn join<const N: usize>(token: &[u8; TOKEN], tail: &[u8]) -> [u8; N] {
    let mut bytes = [0; N];
    bytes[..TOKEN].copy_from_slice(token);
    bytes[TOKEN..].copy_from_slice(tail);
    bytes
}

/// The token and the rest of a payload that must be exactly `len` bytes; `what` names the
/// payload in the error.
pub(crate) fn split<'a>(
    bytes: &'a [u8],
    len: usize,
    what: &str,
) -> Result<([u8; TOKEN], &'a [u8])> {
    if bytes.len() != len {
        return Err(Error::BadIpcPayload {
            reason: format!("{what} is {len} bytes, got {}", bytes.len()),
        });
    }
    let mut token = [0; TOKEN];
    token.copy_from_slice(&bytes[..TOKEN]);
    Ok((token, &bytes[TOKEN..]))
}
