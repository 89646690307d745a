//! Streams: created streams with flags and priorities, and the default-stream tokens (null and
//! `CU_STREAM_LEGACY` name the current context's legacy stream, `CU_STREAM_PER_THREAD` the
//! calling thread's). Work runs at once; the checker orders it as if it were asynchronous.

use super::checker::Use;
use super::contexts;
use super::errors::{INVALID_CONTEXT, INVALID_VALUE};
use super::types::{CuResult, Raw, STREAM_LEGACY, STREAM_NON_BLOCKING, STREAM_PER_THREAD};
use super::{Kind, Sim};

/// A created stream.
#[derive(Debug)]
pub struct Stream {
    pub raw: Raw,
    pub context: Raw,
    pub flags: u32,
    pub priority: i32,
    pub timeline: usize,
}

/// A stream argument, resolved.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub timeline: usize,
    pub context: Raw,
    pub device: usize,
    /// `None` for created streams; the token otherwise.
    pub token: Option<Raw>,
}

pub const LEAST_PRIORITY: i32 = 0;
pub const GREATEST_PRIORITY: i32 = -5;

impl Sim {
    /// Resolves a stream argument of the call `what`.
    pub fn stream(&mut self, raw: Raw, what: &str) -> Result<Target, CuResult> {
        if raw == 0 || raw == STREAM_LEGACY || raw == STREAM_PER_THREAD {
            let context = self.require_current(&format!("{what} on a default-stream token"))?;
            let thread = contexts::thread_id();
            let label = format!("per-thread stream of thread {thread} in context {context:#x}");
            let existing = self.contexts[&context].per_thread.get(&thread).copied();
            let timeline = if raw == STREAM_PER_THREAD {
                match existing {
                    Some(timeline) => timeline,
                    None => {
                        let timeline = self.checker.timeline(label);
                        let ctx = self.contexts.get_mut(&context).expect("current");
                        ctx.per_thread.insert(thread, timeline);
                        ctx.blocking.push(timeline);
                        ctx.streams.push(timeline);
                        timeline
                    }
                }
            } else {
                self.contexts[&context].legacy
            };
            let device = self.contexts[&context].device;
            return Ok(Target {
                timeline,
                context,
                device,
                token: Some(raw),
            });
        }
        let Some(stream) = self.streams.get(&raw) else {
            return Err(self.dead_handle(raw, Kind::Stream, false));
        };
        let (timeline, context) = (stream.timeline, stream.context);
        let Some(ctx) = self.contexts.get(&context) else {
            self.checker.violation(
                "destroyed-handle",
                format!("{what} uses stream {raw:#x}, whose context {context:#x} was destroyed"),
            );
            return Err(INVALID_CONTEXT);
        };
        Ok(Target {
            timeline,
            context,
            device: ctx.device,
            token: None,
        })
    }

    /// Orders one operation on `target` (with the legacy stream's implicit synchronisation)
    /// and returns its use record.
    pub fn enqueue(&mut self, target: Target) -> Use {
        let context = &self.contexts[&target.context];
        let implicit: Vec<usize> = if target.timeline == context.legacy {
            context.blocking.clone()
        } else if context.blocking.contains(&target.timeline) {
            vec![context.legacy]
        } else {
            Vec::new()
        };
        self.checker.enqueue(target.timeline, &implicit)
    }

    pub fn create_stream(&mut self, flags: u32, priority: i32) -> Result<Raw, CuResult> {
        if flags & !STREAM_NON_BLOCKING != 0 {
            return Err(INVALID_VALUE);
        }
        let context = self.require_current("creating a stream")?;
        self.create_stream_in(context, flags, priority)
    }

    /// A new stream of `context` (live), whether or not it is current.
    pub fn create_stream_in(
        &mut self,
        context: Raw,
        flags: u32,
        priority: i32,
    ) -> Result<Raw, CuResult> {
        if flags & !STREAM_NON_BLOCKING != 0 {
            return Err(INVALID_VALUE);
        }
        let raw = self.new_raw(Kind::Stream);
        let timeline = self.checker.timeline(format!("stream {raw:#x}"));
        let ctx = self.contexts.get_mut(&context).expect("current");
        ctx.streams.push(timeline);
        if flags & STREAM_NON_BLOCKING == 0 {
            ctx.blocking.push(timeline);
        }
        self.streams.insert(
            raw,
            Stream {
                raw,
                context,
                flags,
                priority: priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY),
                timeline,
            },
        );
        Ok(raw)
    }

    pub fn destroy_stream(&mut self, raw: Raw) -> Result<(), CuResult> {
        let Some(stream) = self.streams.remove(&raw) else {
            return Err(self.dead_handle(raw, Kind::Stream, true));
        };
        if let Some(ctx) = self.contexts.get_mut(&stream.context) {
            ctx.blocking.retain(|&t| t != stream.timeline);
        }
        self.abandon_capture(stream.timeline);
        self.bury(raw, Kind::Stream);
        Ok(())
    }

    /// `cuStreamSynchronize` (and a successful `cuStreamQuery`): the host has seen all work.
    pub fn synchronize_stream(&mut self, raw: Raw, what: &str) -> Result<(), CuResult> {
        let target = self.stream(raw, what)?;
        self.forbid_capture(target)?;
        self.checker.host_waits(target.timeline);
        self.host_synchronised();
        Ok(())
    }
}
