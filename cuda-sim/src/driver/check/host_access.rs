//! The program's own loads and stores through pointers into managed memory and pinned host
//! memory (`cuMemHostAlloc`, `cuMemAllocHost`, mapped or not), seen by page protection, for
//! the data-race check (`races`).
//!
//! Such an allocation lies in whole pages of its own (`Sim::alloc_managed`,
//! `Sim::alloc_sync`). When a device
//! operation (kernel, copy, memset) touched one and the host's clock does not cover that
//! operation, the allocation is *guarded* between driver calls: read-only when every such
//! operation only read it (a host write then races), inaccessible when one wrote or updated
//! it atomically (any host access races). Every driver call lifts the guards when it takes the
//! simulator's lock, so the simulator's own execution of device work never faults, and sets
//! them again, for the operations the host's clock still does not cover, when it lets go.
//!
//! A host access to a guarded page raises `SIGSEGV`. The handler (installed once, at `cuInit`,
//! with the previous action kept and called for every other fault) looks the address up in a
//! fixed table of atomics, notes the address, whether it was a write and the thread, lifts the
//! guard and returns: the access then runs. The next driver call of any thread (or the exit)
//! turns each note into a **data race** when the address lies in the footprint of a guarding
//! operation that conflicts with it (a write against anything, a read against a write or an
//! atomic update): page granularity never invents a race. Accesses from a program's host
//! function (ordered on its stream, which the host's clock does not show) are not noted.

use cuda_sim_ptx::Access;

use crate::Sim;
use crate::order::checker::{Clock, HOST, Use, covers};
use crate::order::page_guard::{self, NO_ACCESS, READ_ONLY, guard, installed, take_notes, unguard};
use crate::resources::memory::AllocKind;

/// Installs the page guards' `SIGSEGV` handler (`page_guard::install`); a program's host
/// functions' accesses go unnoted (`deferred::start_hosts` marks their threads quiet).
pub fn install() {
    page_guard::install();
}

/// Whether the host's accesses are ordered after `operation`: its clock covers it, or a host
/// function started after it on its stream (`Races::host_visible`).
fn seen(host: &Clock, visible: &Clock, operation: &Use) -> bool {
    covers(host, operation.timeline, operation.epoch)
        || covers(visible, operation.timeline, operation.epoch)
}

impl Sim {
    /// A host function starts on `timeline` (its operation was just enqueued): the host's
    /// accesses may be ordered after what precedes it there.
    pub fn host_function_runs(&mut self, timeline: usize) {
        if self.races.enabled() {
            let clock = self.checker.clock(timeline).clone();
            crate::order::checker::join(&mut self.races.host_visible, &clock);
        }
    }

    /// At the start of a driver call (and at exit): reports the faults noted since the last
    /// one, then lifts every guard.
    pub fn host_access_begin(&mut self) {
        if !installed() {
            return;
        }
        for (addr, write, thread) in take_notes() {
            self.report_host_access(addr, write, thread);
        }
        for slot in std::mem::take(&mut self.races.watched.guarded) {
            unguard(slot);
        }
    }

    /// At the end of a driver call: forgets the operations the host's clock now covers and
    /// guards the allocations touched by the others.
    pub fn host_access_end(&mut self) {
        if !installed() || self.races.host_pending.is_empty() {
            return;
        }
        let host = self.checker.clock(HOST).clone();
        let visible = &self.races.host_visible;
        self.races
            .host_pending
            .retain(|p| !seen(&host, visible, &p.op.operation));
        let mut guards: Vec<(usize, u8)> = Vec::new();
        for pending in &self.races.host_pending {
            let Some(&(slot, _)) = self.races.watched.by_base.get(&pending.alloc) else {
                continue;
            };
            let wanted = if pending.writes() {
                NO_ACCESS
            } else {
                READ_ONLY
            };
            match guards.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, g)) => *g = (*g).max(wanted),
                None => guards.push((slot, wanted)),
            }
        }
        for &(slot, wanted) in &guards {
            guard(slot, wanted);
            self.races.watched.guarded.push(slot);
        }
    }

    /// Turns one noted fault into data races with the guarding operations it conflicts with.
    fn report_host_access(&mut self, addr: u64, write: bool, thread: i32) {
        let Some((&base, _)) = self
            .races
            .watched
            .by_base
            .iter()
            .find(|(base, (_, len))| (**base..**base + *len).contains(&addr))
        else {
            return;
        };
        let (size, kind) = self.allocs.get(&base).map_or((0, "managed"), |a| {
            (
                a.size,
                if a.kind == AllocKind::Host {
                    "pinned host"
                } else {
                    "managed"
                },
            )
        });
        let host = self.checker.clock(HOST).clone();
        let visible = &self.races.host_visible;
        let access = if write { Access::Write } else { Access::Read };
        let mut messages = Vec::new();
        for pending in &mut self.races.host_pending {
            if pending.alloc != base
                || pending.reported
                || seen(&host, visible, &pending.op.operation)
            {
                continue;
            }
            let Some(touch) = pending.touching(addr, access) else {
                continue;
            };
            pending.reported = true;
            messages.push(format!(
                "host thread {thread} {} {addr:#x} (through a pointer) of the {size}-byte {kind} allocation at {base:#x}, which {} (call #{}) on {}, {}, {} [{:#x}, {:#x}): no synchronisation orders them",
                if write { "writes" } else { "reads" },
                pending.op.operation.call,
                pending.op.operation.seq,
                pending.op.stream,
                crate::order::races::describe(&pending.op, &touch, addr, addr + 1),
                crate::order::races::verbs(touch.access).1,
                touch.start,
                touch.end,
            ));
        }
        for message in messages {
            self.checker.violation("data-race", message);
        }
    }
}
