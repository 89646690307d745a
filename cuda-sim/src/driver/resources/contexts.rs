//! Contexts: primary contexts with retain counts, created contexts, and each thread's stack of
//! current contexts.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::errors::{INVALID_CONTEXT, INVALID_VALUE, OUT_OF_MEMORY};
use crate::base::types::{CuResult, Raw};
use crate::order::checker::Stamp;
use crate::{Kind, Sim};

/// A context.
#[derive(Debug)]
pub struct Context {
    pub raw: Raw,
    pub device: usize,
    pub primary: bool,
    /// Retains of a primary context (a created context counts as one).
    pub retains: u64,
    /// The legacy default stream's timeline.
    pub legacy: usize,
    /// Per-thread default streams, by thread.
    pub per_thread: HashMap<u64, usize>,
    /// Timelines of blocking streams (they synchronise with the legacy default stream).
    pub blocking: Vec<usize>,
    /// Timelines of every stream of this context, for `cuCtxSynchronize`.
    pub streams: Vec<usize>,
    /// The green context this context is the `cuCtxFromGreenCtx` view of.
    pub green: Option<Raw>,
    /// Graphs of this context launched on other contexts' streams: their nodes run in this
    /// context (driver-facts, "Graph nodes run in their graph's context"), so
    /// `cuCtxSynchronize` waits for them. `launched` joins the launch stream's clock at the end
    /// of each such launch; `launches_pending` counts those whose last node has not run yet
    /// (queued behind a host function).
    pub launched: Stamp,
    pub launches_pending: u64,
}

impl Context {
    pub fn new(raw: Raw, device: usize, primary: bool, legacy: usize) -> Context {
        Context {
            raw,
            device,
            primary,
            retains: u64::from(!primary),
            legacy,
            per_thread: HashMap::new(),
            blocking: Vec::new(),
            streams: vec![legacy],
            green: None,
            launched: Stamp::default(),
            launches_pending: 0,
        }
    }
}

/// The most contexts one thread's stack holds; a push beyond is refused with
/// `CUDA_ERROR_OUT_OF_MEMORY`.
const DEPTH: usize = 256;

/// A thread's stack of current contexts, in a type without a destructor: a thread-local of the
/// program that is torn down after the simulator's first use on that thread (thread-locals go
/// in the reverse order of their first use) may still make driver calls in its contexts, as it
/// may on a real driver, whose per-thread state outlives them.
#[derive(Clone, Copy)]
struct ContextStack {
    len: usize,
    items: [Raw; DEPTH],
}

impl ContextStack {
    fn as_slice(&self) -> &[Raw] {
        &self.items[..self.len]
    }

    fn push(&mut self, raw: Raw) -> Result<(), CuResult> {
        let slot = self.items.get_mut(self.len).ok_or(OUT_OF_MEMORY)?;
        *slot = raw;
        self.len += 1;
        Ok(())
    }

    fn pop(&mut self) -> Option<Raw> {
        self.len = self.len.checked_sub(1)?;
        Some(self.items[self.len])
    }
}

thread_local! {
    static STACK: RefCell<ContextStack> = const {
        RefCell::new(ContextStack {
            len: 0,
            items: [0; DEPTH],
        })
    };
    static THREAD_ID: u64 = {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

/// The calling thread's current context (0 when none).
pub fn current() -> Raw {
    STACK
        .try_with(|stack| stack.borrow().as_slice().last().copied().unwrap_or(0))
        .unwrap_or(0)
}

/// `cuCtxSetCurrent`: replaces the top of the stack; null pops.
pub fn set_current(raw: Raw) {
    let _ = STACK.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        if raw == 0 {
            stack.pop();
        } else if let Some(top) = stack.len.checked_sub(1) {
            stack.items[top] = raw;
        } else {
            // An empty stack has room.
            let _ = stack.push(raw);
        }
    });
}

/// `cuCtxPushCurrent`: `CUDA_ERROR_OUT_OF_MEMORY` beyond the simulator's depth.
pub fn push(raw: Raw) -> Result<(), CuResult> {
    STACK
        .try_with(|stack| stack.borrow_mut().push(raw))
        .unwrap_or(Err(OUT_OF_MEMORY))
}

pub fn pop() -> Raw {
    STACK
        .try_with(|stack| stack.borrow_mut().pop().unwrap_or(0))
        .unwrap_or(0)
}

/// Removes `raw` from this thread's stack (a destroyed context).
pub fn forget(raw: Raw) {
    let _ = STACK.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        let mut kept = 0;
        for index in 0..stack.len {
            let context = stack.items[index];
            if context != raw {
                stack.items[kept] = context;
                kept += 1;
            }
        }
        stack.len = kept;
    });
}

/// A small id of the calling thread.
pub fn thread_id() -> u64 {
    THREAD_ID.try_with(|id| *id).unwrap_or(0)
}

impl Sim {
    /// A live context, or the error (and violation) for a dead one.
    pub fn context(&mut self, raw: Raw) -> Result<&mut Context, CuResult> {
        if !self.contexts.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::Context, false));
        }
        Ok(self.contexts.get_mut(&raw).expect("checked"))
    }

    /// The check of `cuCtxSetCurrent`/`cuCtxPushCurrent`: a live context, or a destroyed
    /// green context's, which driver 580 accepts (driver-facts: "Green contexts destroyed
    /// while current"); the simulator accepts it too and reports the use, since the driver
    /// was seen to corrupt its heap afterwards.
    pub fn make_current_check(&mut self, raw: Raw) -> Result<(), CuResult> {
        if self.contexts.contains_key(&raw) {
            return Ok(());
        }
        let destroyed_green = self
            .graves
            .get(&raw)
            .is_some_and(|grave| grave.kind == Kind::Context && grave.call == "cuGreenCtxDestroy");
        let error = self.dead_handle(raw, Kind::Context, false);
        if destroyed_green { Ok(()) } else { Err(error) }
    }

    /// The current context, which the call `what` needs: reports `wrong-context` when none
    /// is current or it is no longer usable.
    pub fn require_current(&mut self, what: &str) -> Result<Raw, CuResult> {
        let raw = current();
        if raw == 0 {
            self.checker.violation(
                "wrong-context",
                format!("{what} needs a current context, and none is current"),
            );
            return Err(INVALID_CONTEXT);
        }
        let retains = self.context(raw)?.retains;
        if retains == 0 {
            self.checker.violation(
                "wrong-context",
                format!(
                    "{what} runs in primary context {raw:#x}, which was released (no retain left)"
                ),
            );
            return Err(INVALID_CONTEXT);
        }
        Ok(raw)
    }

    /// The current context's device.
    pub fn current_device(&mut self, what: &str) -> Result<usize, CuResult> {
        let raw = self.require_current(what)?;
        Ok(self.contexts[&raw].device)
    }

    pub fn retain_primary(&mut self, device: i32) -> Result<Raw, CuResult> {
        let raw = self.device(device)?.primary;
        self.contexts.get_mut(&raw).expect("primary").retains += 1;
        Ok(raw)
    }

    pub fn release_primary(&mut self, device: i32) -> Result<(), CuResult> {
        let raw = self.device(device)?.primary;
        let context = self.contexts.get_mut(&raw).expect("primary");
        if context.retains == 0 {
            self.checker.violation(
                "double-destroy",
                format!("primary context of device {device} released more often than retained"),
            );
            return Err(INVALID_CONTEXT);
        }
        context.retains -= 1;
        Ok(())
    }

    pub fn create_context(&mut self, device: i32) -> Result<Raw, CuResult> {
        let ordinal = self.device(device)?.ordinal;
        let raw = self.new_raw(Kind::Context);
        let legacy = self
            .checker
            .timeline(format!("legacy stream of context {raw:#x}"));
        self.contexts
            .insert(raw, Context::new(raw, ordinal, false, legacy));
        // A full stack of current contexts refuses the new one, which is never handed out.
        if let Err(code) = push(raw) {
            self.contexts.remove(&raw);
            return Err(code);
        }
        Ok(raw)
    }

    pub fn destroy_context(&mut self, raw: Raw) -> Result<(), CuResult> {
        let Some(context) = self.contexts.get(&raw) else {
            return Err(self.dead_handle(raw, Kind::Context, true));
        };
        if context.primary || context.green.is_some() {
            // A green context's context goes with `cuGreenCtxDestroy`.
            return Err(INVALID_VALUE);
        }
        self.contexts.remove(&raw);
        self.bury(raw, Kind::Context);
        forget(raw);
        Ok(())
    }

    /// The timelines the host waits for in `cuCtxSynchronize`: the context's streams, and
    /// its graphs launched on other contexts' streams up to the end of each launch.
    pub fn synchronize_context(&mut self, raw: Raw) -> Result<(), CuResult> {
        self.forbid_context_capture(raw)?;
        let context = self.context(raw)?;
        let (timelines, launched) = (context.streams.clone(), context.launched.clone());
        for timeline in timelines {
            self.checker.host_waits(timeline);
        }
        self.checker.host_waits_stamp(&launched);
        self.host_synchronised();
        Ok(())
    }

    /// A launch of a graph of `context` on a stream of another context begins: until its
    /// last node ran (`foreign_launch_done`), the context's synchronisations wait for it.
    pub fn foreign_launch_started(&mut self, context: Raw) {
        if let Some(context) = self.contexts.get_mut(&context) {
            context.launches_pending += 1;
        }
    }

    /// The last node of a launch of a graph of `context` on another context's stream ran on
    /// `timeline` (`None`: the launch stopped early, nothing more of it will run): the
    /// context's synchronisations are ordered after the stream up to here.
    pub fn foreign_launch_done(&mut self, context: Raw, timeline: Option<usize>) {
        let stamp = timeline.map(|timeline| self.checker.stamp(timeline));
        if let Some(context) = self.contexts.get_mut(&context) {
            context.launches_pending = context.launches_pending.saturating_sub(1);
            if let Some(stamp) = stamp {
                context.launched.join(&stamp);
            }
        }
    }

    /// Whether a launch of a graph of `context` (or, with `device`, of any context of that
    /// device) on another context's stream has nodes left to run.
    pub fn foreign_launches_pending(&self, context: Option<Raw>, device: Option<usize>) -> bool {
        self.contexts
            .values()
            .filter(|c| context.is_none_or(|raw| c.raw == raw))
            .filter(|c| device.is_none_or(|d| c.device == d))
            .any(|c| c.launches_pending > 0)
    }
}
