//! CUDA events: owned in a context, context-free, and interprocess (IPC) events.

use cudarc::driver::sys::{self, CUevent};
use handles_core::ResourceHandle;

use crate::context::ContextHandle;
use crate::driver::ensure_loaded;
use crate::error::{Error, Result, check, deleter_status};
use crate::scope::{current_raw, in_context_of, in_context_or_undo};
use crate::stream::StreamHandle;

/// A CUDA event, with the flags it was created with.
///
/// Ownership: every constructor here owns the event and destroys it when the last clone
/// drops; `from_raw_borrowed` references own nothing. Keeps alive: its context, when created
/// in one. Events are not registered: creating one is the hottest path of the crate (a few
/// hundred nanoseconds in the driver), and a registry lock would add a third to it.
#[derive(ResourceHandle)]
#[handle(raw = CUevent, accessor = as_cu, delete = destroy_event)]
pub struct Event {
    /// The context the event was created in, when created through a context handle.
    #[owner]
    pub context: Option<ContextHandle>,
    /// The flags the event was created with.
    #[handle(copy)]
    pub flags: EventFlags,
    /// The device ordinal of the creating context, when known.
    #[handle(copy)]
    pub device: Option<usize>,
}
// SAFETY: the CUDA driver API lets events be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for Event {}

fn destroy_event(raw: CUevent, _: &Event) -> Result<()> {
    // SAFETY: the handle owns `raw` and this deleter runs once.
    deleter_status(check("cuEventDestroy", unsafe {
        sys::cuEventDestroy_v2(raw)
    }))
}

/// Event creation flags. The default is timing off, spinning waits, not interprocess.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventFlags {
    /// Record timestamps, so `elapsed_ms` works (off by default: it makes events costlier).
    pub timing: bool,
    /// Host waits block the thread instead of spinning (`CU_EVENT_BLOCKING_SYNC`).
    pub blocking_sync: bool,
    /// The event can be shared with other processes (`CU_EVENT_INTERPROCESS`; needs timing off).
    pub interprocess: bool,
}

impl EventFlags {
    /// Flags of an event that records timestamps.
    pub fn timing() -> Self {
        EventFlags {
            timing: true,
            ..Self::default()
        }
    }

    fn to_raw(self) -> Result<u32> {
        if self.interprocess && self.timing {
            return Err(Error::InvalidArgument(
                "an interprocess event must be created with timing disabled".into(),
            ));
        }
        let mut raw = 0;
        if !self.timing {
            raw |= sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        }
        if self.blocking_sync {
            raw |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        if self.interprocess {
            raw |= sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32;
        }
        Ok(raw)
    }
}

/// The 64-byte token that names an interprocess event in another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcEventHandle {
    /// The driver's 64-byte token (`CUipcEventHandle`).
    pub token: [u8; 64],
    /// Whether the exported event blocks the host in `synchronize` (`CU_EVENT_BLOCKING_SYNC`),
    /// which the driver's token does not carry: the importer's handle reports the same flags.
    pub blocking_sync: bool,
}

impl IpcEventHandle {
    /// The length of [`IpcEventHandle::to_bytes`]: the token and one flags byte.
    pub const LEN: usize = 65;

    /// The bytes to send to another process.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut bytes = [0; Self::LEN];
        bytes[..64].copy_from_slice(&self.token);
        bytes[64] = u8::from(self.blocking_sync);
        bytes
    }

    /// Parses bytes made by [`IpcEventHandle::to_bytes`] in another process: exactly 65 bytes,
    /// the last one 0 or 1. Whether the token names a live event only the driver can tell, at
    /// import.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let Ok(bytes): std::result::Result<[u8; Self::LEN], _> = bytes.try_into() else {
            return Err(Error::InvalidArgument(format!(
                "an IPC event handle is {} bytes, got {}",
                Self::LEN,
                bytes.len()
            )));
        };
        let blocking_sync = match bytes[64] {
            0 => false,
            1 => true,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "an IPC event handle's flags byte is 0 or 1, got {other}"
                )));
            }
        };
        let mut token = [0; 64];
        token.copy_from_slice(&bytes[..64]);
        Ok(IpcEventHandle {
            token,
            blocking_sync,
        })
    }
}

/// Whether `cuEventElapsedTime_v2` (CUDA 12.8) can be called: probed once.
fn elapsed_time_v2_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        crate::driver::driver_version().is_ok_and(|version| version >= 12080)
            && crate::driver::has_function(c"cuEventElapsedTime_v2")
    })
}

fn create_raw(flags: u32) -> Result<CUevent> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: a context is current (the caller checked); `raw` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut raw, flags)
    })?;
    Ok(raw)
}

fn undo_create(raw: CUevent) {
    // SAFETY: undoing our own creation; nothing else has seen `raw`.
    let _ = unsafe { sys::cuEventDestroy_v2(raw) };
}

impl EventHandle {
    /// Creates an event in `context`, which it keeps alive.
    pub fn create(context: &ContextHandle, flags: EventFlags) -> Result<Self> {
        let raw_flags = flags.to_raw()?;
        let raw = in_context_or_undo(context.as_cu(), || create_raw(raw_flags), undo_create)?;
        let record = Event {
            context: Some(context.clone()),
            flags,
            device: context.device(),
        };
        // SAFETY: a fresh event owned by nobody else; `destroy_event` destroys it.
        Ok(unsafe { EventHandle::from_raw(raw, record) })
    }

    /// Creates an event in the context current on this thread, which it keeps alive: a
    /// context made by this crate, or a device's primary context (retained). Fails if none is
    /// current, or if the current context is one no handle can keep alive.
    pub fn create_in_current(flags: EventFlags) -> Result<Self> {
        ensure_loaded()?;
        flags.to_raw()?;
        // The event keeps its context alive, so the current context must be one a handle can
        // own; a context another library may destroy first is refused.
        let context = ContextHandle::owning(current_raw()?)?;
        Self::create(&context, flags)
    }

    /// Records the event on `stream`.
    pub fn record(&self, stream: &StreamHandle) -> Result<()> {
        let event = self.as_cu();
        stream.run(|raw_stream| {
            // SAFETY: both the event and the stream are alive while their handles are.
            check("cuEventRecord", unsafe {
                sys::cuEventRecord(event, raw_stream)
            })
        })
    }

    /// Whether the work captured by the last `record` has completed (`cuEventQuery`), without
    /// blocking. An event never recorded counts as completed.
    pub fn query(&self) -> Result<bool> {
        ensure_loaded()?;
        // SAFETY: the event is alive while `self` is.
        match unsafe { sys::cuEventQuery(self.as_cu()) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            status => check("cuEventQuery", status).map(|()| false),
        }
    }

    /// A fresh event (no timing), recorded on `stream` now: work queued later anywhere can be
    /// ordered after everything queued on `stream` so far by waiting for it. It keeps the
    /// stream's context alive.
    pub(crate) fn marker_on(stream: &StreamHandle) -> Result<EventHandle> {
        let context = stream.owning_context()?;
        let marker = EventHandle::create(&context, EventFlags::default())?;
        marker.record(stream)?;
        Ok(marker)
    }

    /// Blocks until the work captured by the last `record` has completed.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the event is alive while `self` is.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.as_cu())
        })
    }

    /// Milliseconds between `self` (recorded first) and `end`; both need timing enabled.
    pub fn elapsed_ms(&self, end: &EventHandle) -> Result<f32> {
        if !self.flags().timing || !end.flags().timing {
            return Err(Error::InvalidArgument(
                "elapsed_ms needs two events created with timing enabled".into(),
            ));
        }
        let mut ms = 0.0;
        let (start, end) = (self.as_cu(), end.as_cu());
        if elapsed_time_v2_available() {
            // SAFETY: both events are alive; `ms` is a valid out-pointer; the driver exports
            // the function (probed).
            check("cuEventElapsedTime_v2", unsafe {
                sys::cuEventElapsedTime_v2(&mut ms, start, end)
            })?;
        } else if let Some(elapsed) =
            // SAFETY: the signature of `cuEventElapsedTime` in every driver that exports it.
            unsafe {
                crate::driver::function::<
                    unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult,
                >(c"cuEventElapsedTime")
            }
        {
            // SAFETY: both events are alive; `ms` is a valid out-pointer.
            check("cuEventElapsedTime", unsafe {
                elapsed(&mut ms, start, end)
            })?;
        } else {
            return Err(Error::DriverTooOld {
                version: crate::driver::driver_version()?,
                needed: "elapsed_ms needs cuEventElapsedTime_v2 (CUDA 12.8) or cuEventElapsedTime",
            });
        }
        Ok(ms)
    }

    /// The token another process passes to [`EventHandle::import_ipc`]. The event must have
    /// been created with `interprocess` set.
    pub fn export_ipc(&self) -> Result<IpcEventHandle> {
        if !self.flags().interprocess {
            return Err(Error::InvalidArgument(
                "only events created with `interprocess` can be exported".into(),
            ));
        }
        // SAFETY: an all-zero token is a valid value of this plain byte struct.
        let mut token: sys::CUipcEventHandle = unsafe { std::mem::zeroed() };
        let raw = self.as_cu();
        let export = || {
            // SAFETY: the event is alive; `token` is a valid out-pointer.
            check("cuIpcGetEventHandle", unsafe {
                sys::cuIpcGetEventHandle(&mut token, raw)
            })
        };
        // The driver wants a current context for the export.
        in_context_of(self.context().as_ref(), export)?;
        Ok(IpcEventHandle {
            token: token.reserved.map(|byte| byte as u8),
            blocking_sync: self.flags().blocking_sync,
        })
    }

    /// Opens an event exported by another process, in `context`. The returned handle owns the
    /// opened event and keeps `context` alive. A malformed or stale token returns `Err`.
    pub fn import_ipc(context: &ContextHandle, token: &IpcEventHandle) -> Result<Self> {
        let raw_token = sys::CUipcEventHandle {
            reserved: token.token.map(|byte| byte as std::ffi::c_char),
        };
        let raw = in_context_or_undo(
            context.as_cu(),
            || {
                let mut raw = std::ptr::null_mut();
                // SAFETY: a context is current; `raw` is a valid out-pointer and the token is
                // passed by value.
                check("cuIpcOpenEventHandle", unsafe {
                    sys::cuIpcOpenEventHandle(&mut raw, raw_token)
                })?;
                Ok(raw)
            },
            undo_create,
        )?;
        let record = Event {
            context: Some(context.clone()),
            flags: EventFlags {
                timing: false,
                blocking_sync: token.blocking_sync,
                interprocess: true,
            },
            device: context.device(),
        };
        // SAFETY: the opened event is ours to destroy with `cuEventDestroy`.
        Ok(unsafe { EventHandle::from_raw(raw, record) })
    }
}
