//! Interprocess events: the token that names an event in another process, its export and its
//! import.

use cudarc::driver::sys;

use crate::driver::call::{driver, out};
use crate::driver::current::{in_context, in_context_of};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::event::{Event, EventFlags, EventHandle, RecordCount};
use crate::exec::stream_progress::RecordStamps;
use crate::ipc::token::{self, TOKEN};

/// The 64-byte token that names an interprocess event in another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcEventHandle {
    /// The driver's 64-byte token (`CUipcEventHandle`).
    pub token: [u8; TOKEN],
    /// Whether the exported event blocks the host in `synchronize` (`CU_EVENT_BLOCKING_SYNC`),
    /// which the driver's token does not carry: the importer's handle reports the same flags.
    pub blocking_sync: bool,
}

impl IpcEventHandle {
    /// The length of [`IpcEventHandle::to_bytes`]: the token and one flags byte.
    pub const LEN: usize = 65;

    /// The bytes to send to another process.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        token::join(&self.token, &[u8::from(self.blocking_sync)])
    }

    /// Parses bytes made by [`IpcEventHandle::to_bytes`] in another process: exactly 65 bytes,
    /// the last one 0 or 1. Whether the token names a live event only the driver can tell, at
    /// import.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (token, tail) = token::split(bytes, Self::LEN, "an IPC event handle")?;
        let blocking_sync = match tail[0] {
            0 => false,
            1 => true,
            other => {
                return Err(Error::BadIpcPayload {
                    reason: format!("an IPC event handle's flags byte is 0 or 1, got {other}"),
                });
            }
        };
        Ok(IpcEventHandle {
            token,
            blocking_sync,
        })
    }
}

impl EventHandle {
    /// The token another process passes to [`EventHandle::import_ipc`]. The event must have
    /// been created with `interprocess` set.
    pub fn export_ipc(&self) -> Result<IpcEventHandle> {
        if !self.flags().interprocess {
            return Err(Error::NotExportable {
                what: "only events created with `interprocess` can be exported",
            });
        }
        // SAFETY: an all-zero token is a valid value of this plain byte struct.
        let mut token: sys::CUipcEventHandle = unsafe { std::mem::zeroed() };
        let raw = self.as_cu();
        let export = || {
            // SAFETY: the event is alive; `token` is a valid out-pointer.
            unsafe { driver!(cuIpcGetEventHandle(&mut token, raw)) }
        };
        // The driver wants a current context for the export.
        in_context_of(self.context().as_ref().map(ContextHandle::as_cu), export)?;
        Ok(IpcEventHandle {
            token: token.reserved.map(|byte| byte as u8),
            blocking_sync: self.flags().blocking_sync,
        })
    }

    /// Opens an event exported by another process, in `context`. The returned handle owns the
    /// opened event and keeps `context` alive. A malformed or stale token returns `Err`.
    pub fn import_ipc(context: &ContextHandle, token: &IpcEventHandle) -> Result<Self> {
        let context = &context.keep_alive()?;
        let raw_token = sys::CUipcEventHandle {
            reserved: token.token.map(|byte| byte as std::ffi::c_char),
        };
        let flags = EventFlags {
            timing: false,
            blocking_sync: token.blocking_sync,
            interprocess: true,
        };
        let record = Event {
            context: Some(context.clone().into_owned()),
            flags,
            device: context.device(),
            records: RecordCount::new(true),
            stamps: RecordStamps::default(),
        };
        in_context(context.as_cu(), || {
            // SAFETY: a context is current; `raw` is a valid out-pointer and the token is
            // passed by value.
            let raw = out(|raw| unsafe { driver!(cuIpcOpenEventHandle(raw, raw_token)) })?;
            // SAFETY: the opened event is ours to destroy with `cuEventDestroy`.
            Ok(unsafe { EventHandle::from_raw(raw, record) })
        })
    }
}
