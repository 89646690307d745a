//! Host functions run asynchronously, as on the GPU: `cuLaunchHostFunc` (and a host node of
//! a graph) starts the function on a thread of its own, and the stream is busy until it
//! returns. Work submitted to a busy stream is queued in order and runs when the function has
//! returned; an event recorded behind it is pending (`cuEventQuery` answers
//! `CUDA_ERROR_NOT_READY`), a stream that waits for a pending event is busy too, and the host's
//! synchronisations wait (`cuStreamSynchronize`, `cuEventSynchronize`, `cuCtxSynchronize`,
//! synchronous copies, `cuMemFree`). Everything else still runs at once on the calling
//! thread, so a program without host functions behaves as before.
//!
//! A stream destroyed while busy is gone at once, as on the driver; its queued work stays
//! queued on its timeline and runs when due (its context's synchronisation still waits for it).
//!
//! The legacy default stream and its context's blocking streams follow each other: work
//! submitted to one of them while another is busy waits behind a barrier queued at the end of
//! each busy one, as the driver's implicit synchronisation orders it.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::ffi::c_void;

use crate::base::errors::NOT_READY;
use crate::base::types::{CuResult, Raw};
use crate::order::checker::Use;
use crate::resources::memory::AllocKind;
use crate::resources::streams::Target;
use crate::resources::work::{HostCall, Op};
use crate::{Sim, notify_idle, with_sim};

std::thread_local! {
    /// Set while this thread runs a program's host function.
    static IN_HOST_FUNCTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is running a program's host function, from which the driver forbids
/// CUDA calls ("host functions must not make any CUDA API calls").
pub fn in_host_function() -> bool {
    IN_HOST_FUNCTION
        .try_with(std::cell::Cell::get)
        .unwrap_or(false)
}

/// One queued piece of work, with the stream it was submitted to.
#[derive(Debug)]
pub enum Queued {
    Op(Target, Op),
    /// A record of the event, its `generation`-th.
    Record(Target, Raw, u64),
    /// A wait for the event's records up to `generation` (the last one issued before it).
    Wait(Target, Raw, u64),
    /// `cuMemFreeAsync` of this address.
    Free(Target, u64),
    /// The end of the work that a later submission to a stream following this one implicitly
    /// (the legacy stream and a blocking stream) waits for: passed when it runs.
    Barrier(u64),
    /// Waits until these barriers passed.
    AfterBarriers(Vec<u64>),
}

/// A busy stream: a host function in flight, and the work behind it.
#[derive(Debug, Default)]
pub struct Queue {
    pub host_running: bool,
    pub ops: VecDeque<Queued>,
}

/// The simulator's deferred work.
#[derive(Debug, Default)]
pub struct Deferred {
    /// Busy streams by timeline.
    pub queues: HashMap<usize, Queue>,
    /// The generation of each event's last record issued (every record counts), and of the
    /// last one that ran: a record is pending while the two differ. A wait refers to the
    /// last record issued before it, as the driver's does; a record overtaken by a later one
    /// that already ran changes nothing when it runs.
    pub issued: HashMap<Raw, u64>,
    pub done: HashMap<Raw, u64>,
    /// The generations of each event's records that are queued and have not run. A wait is
    /// bound to the record it names: a later record that runs first (on an idle stream, say)
    /// completes the event for `cuEventQuery` but does not release the wait, as driver 580
    /// does (`probes/event_rerecord.h200.txt`).
    pub queued_records: HashMap<Raw, BTreeSet<u64>>,
    /// Imports whose `cuMemFreeAsync` is queued.
    pub free_queued: HashSet<u64>,
    /// Events destroyed while a queued record or wait still names them: the driver lets an
    /// event go while such work is pending and completes it; the state lives here until then.
    pub zombies: HashMap<Raw, crate::resources::events::Event>,
    /// Imports imported again while their free was queued: the queued free leaves the new
    /// import mapped, as driver 580 does (driver-facts: "Re-import while the previous
    /// import's free is still queued").
    pub reimported: HashMap<u64, u32>,
    /// The last barrier's number, and the barriers passed that a queue still waits for.
    pub barriers: u64,
    pub passed: HashSet<u64>,
}

impl Sim {
    /// Whether `timeline` has a host function in flight or work queued.
    pub fn is_busy(&self, timeline: usize) -> bool {
        self.deferred
            .queues
            .get(&timeline)
            .is_some_and(|q| q.host_running || !q.ops.is_empty())
    }

    /// Whether a record of `event` is queued and has not run.
    pub fn record_pending(&self, event: Raw) -> bool {
        let issued = self.deferred.issued.get(&event).copied().unwrap_or(0);
        self.deferred.done.get(&event).copied().unwrap_or(0) < issued
    }

    /// Whether the record of `event` that a wait names (`generation`) has run: not whether a
    /// later one has.
    fn reached(&self, event: Raw, generation: u64) -> bool {
        !self
            .deferred
            .queued_records
            .get(&event)
            .is_some_and(|queued| queued.contains(&generation))
    }

    /// Whether any stream of `context` (or, with `device`, of any context of that device) is
    /// busy.
    pub fn busy_in(&self, context: Option<Raw>, device: Option<usize>) -> bool {
        self.contexts
            .values()
            .filter(|c| context.is_none_or(|raw| c.raw == raw))
            .filter(|c| device.is_none_or(|d| c.device == d))
            .any(|c| c.streams.iter().any(|&t| self.is_busy(t)))
    }

    /// Whether `target`'s stream, or a stream it follows implicitly (the legacy stream
    /// follows the blocking ones), still has queued work: what a synchronous call waits for
    /// first. Non-blocking streams are not waited for.
    pub fn follows_busy(&self, target: Target) -> bool {
        self.is_busy(target.timeline) || self.implicit(target).iter().any(|&t| self.is_busy(t))
    }

    /// Makes `target`'s next submission wait for the work queued on the busy streams it
    /// follows implicitly (the legacy stream and the blocking streams of its context): a
    /// barrier at the end of each, and a wait for them on `target`, which is then busy.
    pub fn follow_implicitly(&mut self, target: Target) {
        let mut waits = Vec::new();
        for timeline in self.implicit(target) {
            if timeline == target.timeline || !self.is_busy(timeline) {
                continue;
            }
            self.deferred.barriers += 1;
            let barrier = self.deferred.barriers;
            let queue = self.deferred.queues.entry(timeline).or_default();
            queue.ops.push_back(Queued::Barrier(barrier));
            waits.push(barrier);
        }
        if !waits.is_empty() {
            let queue = self.deferred.queues.entry(target.timeline).or_default();
            queue.ops.push_back(Queued::AfterBarriers(waits));
        }
    }

    /// Executes `op` on `target` now, or queues it behind the stream's pending work (or
    /// behind the pending record of the event it waits for, or the work of a busy stream it
    /// follows implicitly).
    pub fn run_or_defer(&mut self, target: Target, op: Op) -> Result<Vec<HostCall>, CuResult> {
        self.follow_implicitly(target);
        let busy = self.is_busy(target.timeline);
        let item = match op {
            Op::EventRecord(event) => {
                let generation = {
                    let issued = self.deferred.issued.entry(event).or_default();
                    *issued += 1;
                    *issued
                };
                if !busy {
                    let calls = self.execute(target, &op);
                    self.deferred.done.insert(event, generation);
                    return calls;
                }
                self.deferred
                    .queued_records
                    .entry(event)
                    .or_default()
                    .insert(generation);
                Queued::Record(target, event, generation)
            }
            Op::EventWait(event) => {
                let generation = self.deferred.issued.get(&event).copied().unwrap_or(0);
                if !busy && self.reached(event, generation) {
                    return self.execute(target, &op);
                }
                Queued::Wait(target, event, generation)
            }
            op if !busy => return self.execute(target, &op),
            op => {
                // Refused at the call, as the driver refuses it, not when it would run.
                self.refuse_import_writes(&op)?;
                Queued::Op(target, self.stage_pageable(op))
            }
        };
        self.deferred
            .queues
            .entry(target.timeline)
            .or_default()
            .ops
            .push_back(item);
        Ok(Vec::new())
    }

    /// A queued copy from pageable host memory takes its bytes now: the program may reuse
    /// the buffer as soon as the call returns, as the driver allows.
    fn stage_pageable(&self, op: Op) -> Op {
        match op {
            Op::Memcpy {
                dst,
                src,
                len,
                device,
            } if src != 0 && self.alloc_at(src).is_none() && !device.1 => {
                // SAFETY: a pageable host buffer of `len` bytes, by the API's contract for the
                // call that issued the copy (which has not returned yet).
                let data =
                    unsafe { std::slice::from_raw_parts(src as usize as *const u8, len) }.to_vec();
                Op::Upload {
                    dst,
                    data,
                    device: device.0,
                }
            }
            op => op,
        }
    }

    /// Whether `op` copies into pageable host memory: such a copy completes before the call
    /// that issues it returns, asynchronous or not, as the driver's does.
    pub fn copies_into_pageable(&self, op: &Op) -> bool {
        matches!(op, Op::Memcpy { dst, device, .. }
            if !device.0 && *dst != 0 && self.alloc_at(*dst).is_none())
    }

    /// Whether the call issuing `op` on `target` must wait for the stream's queued work: a
    /// copy into pageable host memory ([`Sim::copies_into_pageable`]), and the work of the busy
    /// streams it follows implicitly.
    pub fn must_wait(&self, target: Target, op: &Op) -> bool {
        self.copies_into_pageable(op) && self.follows_busy(target)
    }

    /// Marks `timeline` busy with a host function that is about to start.
    pub fn host_started(&mut self, timeline: usize) {
        self.deferred
            .queues
            .entry(timeline)
            .or_default()
            .host_running = true;
    }

    /// Whether queued work still records or waits for `event`.
    pub fn queued_uses(&self, event: Raw) -> bool {
        self.deferred.queues.values().any(|queue| {
            queue.ops.iter().any(|item| {
                matches!(item, Queued::Record(_, e, _) | Queued::Wait(_, e, _) if *e == event)
            })
        })
    }

    /// Puts a destroyed event that queued work names back for that work; returns whether it
    /// did.
    fn revive(&mut self, event: Raw) -> bool {
        match self.deferred.zombies.remove(&event) {
            Some(state) => {
                self.events.insert(event, state);
                true
            }
            None => false,
        }
    }

    /// Undoes `revive` once the work ran: the event stays for queued work that still names
    /// it, and is gone once none does.
    fn lay_to_rest(&mut self, event: Raw, revived: bool) {
        if !revived {
            return;
        }
        if let Some(state) = self.events.remove(&event)
            && self.queued_uses(event)
        {
            self.deferred.zombies.insert(event, state);
        }
    }

    /// `cuMemFreeAsync` on a busy stream (see [`Sim::follow_implicitly`]): checked now, run in
    /// order later.
    pub fn defer_free(&mut self, target: Target, addr: u64, kind: AllocKind) {
        if kind == AllocKind::Import {
            self.deferred.free_queued.insert(addr);
        }
        self.count_queued_free(addr, true);
        self.deferred
            .queues
            .entry(target.timeline)
            .or_default()
            .ops
            .push_back(Queued::Free(target, addr));
    }

    /// Counts a pool allocation's free as queued (`queued`) or as run, in its pool's
    /// `queued_free`.
    fn count_queued_free(&mut self, addr: u64, queued: bool) {
        let Some((pool, block)) = self
            .allocs
            .get(&addr)
            .filter(|alloc| alloc.kind == AllocKind::Pool)
            .and_then(|alloc| Some((alloc.pool?, alloc.block)))
        else {
            return;
        };
        if let Some(pool) = self.pools.get_mut(&pool) {
            pool.queued_free = if queued {
                pool.queued_free + block
            } else {
                pool.queued_free.saturating_sub(block)
            };
        }
    }

    /// A re-import of `addr` while its free is queued: the mapping stays for the new import.
    /// Returns whether it was such a re-import.
    pub fn reimport(&mut self, addr: u64) -> bool {
        if self.deferred.free_queued.remove(&addr) {
            *self.deferred.reimported.entry(addr).or_default() += 1;
            return true;
        }
        false
    }

    /// Runs queued work whose stream and events allow it, until nothing more can run; returns
    /// the host functions that became due, with their timelines.
    pub fn pump(&mut self) -> Vec<(usize, HostCall)> {
        let mut started = Vec::new();
        loop {
            let mut progressed = false;
            let mut timelines: Vec<usize> = self.deferred.queues.keys().copied().collect();
            timelines.sort_unstable();
            for timeline in timelines {
                while let Some(item) = self.next_runnable(timeline) {
                    progressed = true;
                    // Errors of queued work surface as violations (recorded by the checks), as
                    // the driver reports asynchronous errors later.
                    match item {
                        Queued::Op(target, op) => {
                            if let Ok(calls) = self.execute(target, &op) {
                                for call in calls {
                                    started.push((timeline, call));
                                }
                            }
                        }
                        Queued::Record(target, event, generation) => {
                            let revived = self.revive(event);
                            if let Some(queued) = self.deferred.queued_records.get_mut(&event) {
                                queued.remove(&generation);
                                if queued.is_empty() {
                                    self.deferred.queued_records.remove(&event);
                                }
                            }
                            let latest_ran = self.deferred.done.get(&event).copied().unwrap_or(0);
                            if latest_ran < generation {
                                let _ = self.execute(target, &Op::EventRecord(event));
                                self.deferred.done.insert(event, generation);
                            } else {
                                // Overtaken by a later record that already ran.
                                self.enqueue(target);
                            }
                            self.lay_to_rest(event, revived);
                        }
                        Queued::Wait(target, event, _) => {
                            let revived = self.revive(event);
                            let _ = self.execute(target, &Op::EventWait(event));
                            self.lay_to_rest(event, revived);
                        }
                        Queued::Free(target, addr) => {
                            if let Some(n) = self.deferred.reimported.get_mut(&addr)
                                && *n > 0
                            {
                                *n -= 1;
                                continue;
                            }
                            self.deferred.free_queued.remove(&addr);
                            self.count_queued_free(addr, false);
                            let _ = self.free_now(target, addr);
                        }
                        Queued::Barrier(barrier) => {
                            self.deferred.passed.insert(barrier);
                        }
                        Queued::AfterBarriers(barriers) => {
                            for barrier in barriers {
                                self.deferred.passed.remove(&barrier);
                            }
                        }
                    }
                }
            }
            if !progressed {
                break;
            }
        }
        self.deferred
            .queues
            .retain(|_, q| q.host_running || !q.ops.is_empty());
        self.deferred.reimported.retain(|_, n| *n > 0);
        started
    }

    /// The next queued item of `timeline` that may run now.
    fn next_runnable(&mut self, timeline: usize) -> Option<Queued> {
        let queue = self.deferred.queues.get(&timeline)?;
        if queue.host_running {
            return None;
        }
        match queue.ops.front()? {
            &Queued::Wait(_, event, generation) if !self.reached(event, generation) => None,
            Queued::AfterBarriers(barriers)
                if !barriers.iter().all(|b| self.deferred.passed.contains(b)) =>
            {
                None
            }
            _ => self.deferred.queues.get_mut(&timeline)?.ops.pop_front(),
        }
    }

    /// The host function of `timeline` returned.
    fn host_finished(&mut self, timeline: usize) {
        if let Some(queue) = self.deferred.queues.get_mut(&timeline) {
            queue.host_running = false;
        }
    }

    /// `cuStreamQuery`/`cuEventQuery` of pending work.
    pub fn not_ready(&self, timeline: Option<usize>, event: Option<Raw>) -> Result<(), CuResult> {
        if timeline.is_some_and(|t| self.is_busy(t))
            || event.is_some_and(|e| self.record_pending(e))
        {
            return Err(NOT_READY);
        }
        Ok(())
    }

    /// The operation a queued free runs as (its stream's next operation).
    pub fn free_operation(&mut self, target: Target) -> Use {
        self.enqueue(target)
    }
}

/// Starts each host function on a thread of its own; when one returns, the work queued behind
/// it runs, and so on.
pub fn start_hosts(calls: Vec<(usize, HostCall)>) {
    for (timeline, (function, data)) in calls {
        std::thread::spawn(move || {
            IN_HOST_FUNCTION.with(|flag| flag.set(true));
            // Its accesses to managed memory are ordered on its stream: not the host's.
            let quiet = crate::order::page_guard::quiet_begin();
            // SAFETY: the program's host function with the program's data, from
            // `cuLaunchHostFunc` or a host node; called once, outside the simulator's lock,
            // as the driver calls it from a thread of its own.
            unsafe { function(data as *mut c_void) };
            crate::order::page_guard::quiet_end(quiet);
            IN_HOST_FUNCTION.with(|flag| flag.set(false));
            let more = with_sim(|sim| {
                sim.host_finished(timeline);
                Ok(sim.pump())
            })
            .unwrap_or_default();
            notify_idle();
            start_hosts(more);
        });
    }
}
