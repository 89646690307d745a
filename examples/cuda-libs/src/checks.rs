//! The argument checks the libraries' calls share, made before any call: every buffer holds
//! what the call reads or writes, an output does not overlap an input, and every buffer is
//! reachable from the device the library's code runs on.

use handles_cuda::{ContextHandle, DevicePtrHandle, StreamHandle, memory::AccessGuard};

use crate::error::LibError;

/// The bytes of a `rows`×`cols` f32 matrix (`cols` = 1 for a vector), or an error if that
/// overflows.
pub(crate) fn f32_bytes(rows: usize, cols: usize) -> Result<usize, LibError> {
    rows.checked_mul(cols)
        .and_then(|n| n.checked_mul(4))
        .ok_or(LibError::TooLarge {
            what: "element count",
            value: rows.saturating_mul(cols),
        })
}

/// `Err` unless `buffer` holds at least `bytes` bytes; `what` names the argument and its
/// shape, for the error.
pub(crate) fn require_fits(
    buffer: &DevicePtrHandle,
    bytes: usize,
    what: impl FnOnce() -> String,
) -> Result<(), LibError> {
    if bytes > buffer.size() {
        return Err(LibError::TooSmall {
            what: what(),
            needs: bytes,
            has: buffer.size(),
        });
    }
    Ok(())
}

/// Whether the byte ranges of two buffers do not overlap.
pub(crate) fn disjoint(x: &DevicePtrHandle, y: &DevicePtrHandle) -> bool {
    let end = |buffer: &DevicePtrHandle| buffer.as_cu().saturating_add(buffer.size() as u64);
    end(x) <= y.as_cu() || end(y) <= x.as_cu()
}

/// The ordinal of the device whose work runs in `context`: the context's record names it;
/// for a reference of unknown device, the handle that keeps the same context alive does (a
/// primary context's, found by making the context current).
pub(crate) fn device_of(context: &ContextHandle) -> Result<usize, LibError> {
    if let Some(device) = context.device() {
        return Ok(device);
    }
    context
        .run(|| ContextHandle::current().map_err(LibError::from))?
        .and_then(|current| current.device())
        .ok_or(LibError::UnknownDevice { what: "context" })
}

/// `Err` unless each buffer can be used by work queued on `stream` (see
/// [`DevicePtrHandle::check_accessible_on`]): a library's kernel touching memory it cannot
/// reach faults and poisons its context. The guards keep a revocation of the access from
/// landing before the library's work is queued: hold them until it is.
pub(crate) fn require_reachable<'a>(
    buffers: impl IntoIterator<Item = &'a DevicePtrHandle>,
    stream: &StreamHandle,
) -> Result<Vec<AccessGuard>, LibError> {
    let mut guards = Vec::new();
    for buffer in buffers {
        guards.push(buffer.check_accessible_on(stream)?);
    }
    Ok(guards)
}
