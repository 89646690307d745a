//! Events: record captures the stream's clock, waits and synchronisations join it; elapsed
//! time from logical timestamps. Records and waits are stream operations, so they are
//! captured like the others (see `capture` for captured events).

use crate::base::errors::{INVALID_HANDLE, INVALID_VALUE};
use crate::base::types::{
    CuResult, EVENT_BLOCKING_SYNC, EVENT_DISABLE_TIMING, EVENT_INTERPROCESS, Raw,
};
use crate::order::checker::Stamp;
use crate::resources::streams::Target;
use crate::resources::work::Op;
use crate::{Kind, Sim};

/// An event.
#[derive(Debug)]
pub struct Event {
    pub raw: Raw,
    pub context: Raw,
    pub flags: u32,
    /// The point of the last record: its clock and logical time.
    pub recorded: Option<Stamp>,
    /// Opened from another process's handle (`cuIpcOpenEventHandle`).
    pub imported: bool,
    /// Last recorded in a capture: the session and the event's node (see `capture`).
    pub captured: Option<(u64, Vec<Raw>)>,
}

impl Sim {
    pub fn event(&mut self, raw: Raw) -> Result<&mut Event, CuResult> {
        if !self.events.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::Event, false));
        }
        Ok(self.events.get_mut(&raw).expect("checked"))
    }

    pub fn create_event(&mut self, flags: u32, imported: bool) -> Result<Raw, CuResult> {
        if flags & !(EVENT_BLOCKING_SYNC | EVENT_DISABLE_TIMING | EVENT_INTERPROCESS) != 0 {
            return Err(INVALID_VALUE);
        }
        if flags & EVENT_INTERPROCESS != 0 && flags & EVENT_DISABLE_TIMING == 0 {
            return Err(INVALID_VALUE);
        }
        let context = self.require_current("creating an event")?;
        let raw = self.new_raw(Kind::Event);
        self.events.insert(
            raw,
            Event {
                raw,
                context,
                flags,
                recorded: None,
                imported,
                captured: None,
            },
        );
        Ok(raw)
    }

    pub fn destroy_event(&mut self, raw: Raw) -> Result<(), CuResult> {
        let Some(event) = self.events.remove(&raw) else {
            return Err(self.dead_handle(raw, Kind::Event, true));
        };
        // Destroyed with a record or wait still queued: that work completes, as on the
        // driver (`deferred`); every later use by the program is of a destroyed handle.
        if self.queued_uses(raw) {
            self.deferred.zombies.insert(raw, event);
        }
        self.bury(raw, Kind::Event);
        Ok(())
    }

    /// An event may only be recorded on a stream of its own context (or, by a graph's event
    /// record node, in the graph's context, on whichever stream the graph was launched).
    fn check_event_context(&mut self, raw: Raw, target: Target) -> Result<(), CuResult> {
        let context = self.event(raw)?.context;
        if target.work != context {
            self.checker.violation(
                "wrong-context",
                format!(
                    "event {raw:#x} of context {context:#x} recorded on a stream of context {:#x}",
                    target.work
                ),
            );
            return Err(INVALID_HANDLE);
        }
        Ok(())
    }

    /// `cuEventRecord`: a stream operation (while the stream captures, a fork point: no node).
    pub fn record_event(&mut self, raw: Raw, stream: Raw) -> Result<(), CuResult> {
        self.event(raw)?;
        let target = self.stream(stream, "cuEventRecord")?;
        self.check_event_context(raw, target)?;
        self.submit(target, Op::EventRecord(raw), false)?;
        Ok(())
    }

    /// Records `raw` now as an operation of `target`: the event captures the stream's clock.
    pub fn record_on(&mut self, raw: Raw, target: Target) -> Result<(), CuResult> {
        self.check_event_context(raw, target)?;
        self.enqueue(target);
        let stamp = self.checker.stamp(target.timeline);
        let event = self.event(raw)?;
        event.recorded = Some(stamp);
        event.captured = None;
        Ok(())
    }

    /// `cuEventSynchronize` and a successful `cuEventQuery`.
    pub fn synchronize_event(&mut self, raw: Raw) -> Result<(), CuResult> {
        self.forbid_captured_event(raw, true)?;
        if let Some(stamp) = self.event(raw)?.recorded.clone() {
            self.checker.host_waits_stamp(&stamp);
        }
        self.host_synchronised();
        Ok(())
    }

    /// `cuStreamWaitEvent`: a stream operation; with a captured event, a fork or join of the
    /// capture instead.
    pub fn wait_event(&mut self, stream: Raw, raw: Raw) -> Result<(), CuResult> {
        self.event(raw)?;
        let target = self.stream(stream, "cuStreamWaitEvent")?;
        if self.join_capture(target, raw)? {
            return Ok(());
        }
        self.submit(target, Op::EventWait(raw), false)?;
        Ok(())
    }

    /// `target` waits now for the event's last record.
    pub fn wait_on(&mut self, target: Target, raw: Raw) -> Result<(), CuResult> {
        let recorded = self.event(raw)?.recorded.clone();
        self.enqueue(target);
        if let Some(stamp) = recorded {
            self.checker.wait_stamp(target.timeline, &stamp);
        }
        Ok(())
    }

    pub fn elapsed(&mut self, start: Raw, end: Raw) -> Result<f32, CuResult> {
        let mut stamps = [0u64; 2];
        for raw in [start, end] {
            self.forbid_captured_event(raw, false)?;
            self.not_ready(None, Some(raw))?;
        }
        for (slot, raw) in stamps.iter_mut().zip([start, end]) {
            let event = self.event(raw)?;
            if event.flags & EVENT_DISABLE_TIMING != 0 {
                return Err(INVALID_HANDLE);
            }
            let Some(stamp) = &event.recorded else {
                return Err(INVALID_HANDLE);
            };
            *slot = stamp.time;
        }
        // Logical nanoseconds to milliseconds; negative when `end` was reached first.
        Ok(((stamps[1] as i128 - stamps[0] as i128) as f64 / 1e6) as f32)
    }
}
