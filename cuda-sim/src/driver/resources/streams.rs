//! Streams: created streams with flags and priorities, and the default-stream tokens (null and
//! `CU_STREAM_LEGACY` name the current context's legacy stream, `CU_STREAM_PER_THREAD` the
//! calling thread's, which a green context does not have). Work runs at once; the checker
//! orders it as if it were asynchronous.

use crate::base::errors::{INVALID_CONTEXT, INVALID_HANDLE, INVALID_VALUE};
use crate::base::types::{CuResult, Raw, STREAM_LEGACY, STREAM_NON_BLOCKING, STREAM_PER_THREAD};
use crate::order::checker::{NodeTag, Use};
use crate::resources::contexts;
use crate::{Kind, Sim};

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
    /// The stream's context (which its implicit synchronisation follows).
    pub context: Raw,
    pub device: usize,
    /// `None` for created streams; the token otherwise.
    pub token: Option<Raw>,
    /// The context the work runs in: the stream's, except for the nodes of a graph launched
    /// on another context's stream, which run in the graph's context (measured on driver
    /// 580: driver-facts, "Graph nodes run in their graph's context").
    pub work: Raw,
    /// That context's device.
    pub work_device: usize,
    /// The graph node the work is, within a launch whose nodes are ordered by their edges.
    pub node: Option<NodeTag>,
}

impl Target {
    /// The same stream, running work of `context` (of `device`): a graph's nodes.
    pub fn running(self, context: Raw, device: usize) -> Target {
        Target {
            work: context,
            work_device: device,
            ..self
        }
    }

    /// The same stream, running graph node `node` (or a plain stream operation for `None`).
    pub fn in_node(self, node: Option<NodeTag>) -> Target {
        Target { node, ..self }
    }
}

pub const LEAST_PRIORITY: i32 = 0;
pub const GREATEST_PRIORITY: i32 = -5;

impl Sim {
    /// Resolves a stream argument of the call `what`.
    pub fn stream(&mut self, raw: Raw, what: &str) -> Result<Target, CuResult> {
        if raw == 0 || raw == STREAM_LEGACY || raw == STREAM_PER_THREAD {
            let context = self.require_current(&format!("{what} on a default-stream token"))?;
            if raw == STREAM_PER_THREAD && self.contexts[&context].green.is_some() {
                // A green context has no per-thread default stream: driver 580 answers
                // `cuStreamIsCapturing(CU_STREAM_PER_THREAD)` with CUDA_ERROR_INVALID_HANDLE
                // while a green context's context is current (measured twice on an H200:
                // `cuda_rules.rs` D8, `review23b.rs`). Every other call on the token is
                // refused the same way here; the documentation names only the null and
                // legacy tokens for green contexts (`cuStreamGetGreenCtx`), and
                // `probes/green_per_thread.py` prints what the driver answers for each.
                return Err(INVALID_HANDLE);
            }
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
                work: context,
                work_device: device,
                node: None,
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
            work: context,
            work_device: ctx.device,
            node: None,
        })
    }

    /// The timelines whose earlier work `target`'s next operation follows implicitly: the
    /// legacy stream follows its context's blocking streams, and they follow it.
    pub fn implicit(&self, target: Target) -> Vec<usize> {
        let context = &self.contexts[&target.context];
        if target.timeline == context.legacy {
            context.blocking.clone()
        } else if context.blocking.contains(&target.timeline) {
            vec![context.legacy]
        } else {
            Vec::new()
        }
    }

    /// Orders one operation on `target` (with the legacy stream's implicit synchronisation)
    /// and returns its use record.
    pub fn enqueue(&mut self, target: Target) -> Use {
        let implicit = self.implicit(target);
        let mut operation = self.checker.enqueue(target.timeline, &implicit);
        operation.device = Some(target.work_device);
        operation.node = target.node;
        operation
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
        let raw = match self.free_streams.pop() {
            Some(raw) => {
                self.graves.remove(&raw);
                raw
            }
            None => self.new_raw(Kind::Stream),
        };
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
        if self.config.reuse_streams {
            self.free_streams.push(raw);
        }
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
