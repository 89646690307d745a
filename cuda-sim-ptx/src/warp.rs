//! Warp collectives (`shfl.sync`, `vote.sync`, `redux.sync`, `bar.warp.sync`) and block
//! barriers (`bar.sync`, `bar.red`): performed once every participating thread waits there.
//!
//! The rules are sm_70's and later's: a block barrier waits for the threads of the block
//! that have not exited; a warp collective waits for the lanes its member mask names that
//! have not exited (lanes the warp does not have are ignored); `bar.warp.sync` instructions
//! at different places in the code synchronise with each other when their masks are equal
//! (each other collective matches only its own instruction).

use crate::Fault;
use crate::exec::{Loc, St, Thread, W};
use crate::ir::*;
use crate::memory::atom_apply;
use crate::racecheck::SharedAccess;

impl<'m> W<'m> {
    /// Resolves the warp collectives of one warp that can proceed. Returns whether any did;
    /// with synccheck on, a lane outside its own member mask is a fault.
    pub(crate) fn resolve_warp(
        &mut self,
        lanes: &mut [Thread],
        shared: &mut [u8],
    ) -> Result<bool, Fault> {
        let module = self.module;
        let mut progress = false;
        let mut done = 0u32;
        for first in 0..lanes.len() {
            if lanes[first].state != St::Warp || done & (1 << first) != 0 {
                continue;
            }
            let group = self.group_of(lanes, first);
            done |= group;
            let (func, pc) = (lanes[first].func, lanes[first].pc);
            let op = module.funcs[func as usize].code[pc as usize].op;
            let Some(mask_reg) = member_mask(op) else {
                continue;
            };
            if self.args.synccheck {
                self.check_own_lanes(lanes, group, mask_reg)?;
            }
            if missing(lanes, group, mask_reg) != 0 {
                continue;
            }
            if let (Op::WarpSync { .. }, Some(race)) = (op, self.race.as_mut()) {
                let lins: Vec<u32> = (0..lanes.len())
                    .filter(|&i| group & (1 << i) != 0)
                    .map(|i| lanes[i].lin)
                    .collect();
                race.warp_sync(&lins);
            }
            match op {
                Op::Shfl {
                    mode,
                    d,
                    p,
                    a,
                    b,
                    c,
                    ..
                } => {
                    let vals: Vec<u64> = lanes
                        .iter()
                        .map(|l| {
                            if l.state == St::Warp {
                                l.regs[a as usize]
                            } else {
                                0
                            }
                        })
                        .collect();
                    for i in 0..lanes.len() {
                        if group & (1 << i) == 0 {
                            continue;
                        }
                        let r = &lanes[i].regs;
                        let lane = i as i32;
                        let bval = (r[b as usize] & 0x1f) as i32;
                        let cv = r[c as usize];
                        let clamp = (cv & 0x1f) as i32;
                        let seg = ((cv >> 8) & 0x1f) as i32;
                        let max_lane = (lane & seg) | (clamp & !seg);
                        let min_lane = lane & seg;
                        let (j, pval) = match mode {
                            ShflMode::Up => (lane - bval, lane - bval >= max_lane),
                            ShflMode::Down => (lane + bval, lane + bval <= max_lane),
                            ShflMode::Bfly => (lane ^ bval, (lane ^ bval) <= max_lane),
                            ShflMode::Idx => {
                                let j = min_lane | (bval & !seg);
                                (j, j <= max_lane)
                            }
                        };
                        let j = if pval { j } else { lane };
                        let v = if j >= 0 && (j as usize) < lanes.len() && group & (1 << j) != 0 {
                            vals[j as usize]
                        } else {
                            vals[i]
                        };
                        lanes[i].regs[d as usize] = v & 0xffff_ffff;
                        if let Some(p) = p {
                            lanes[i].regs[p as usize] = pval as u64;
                        }
                    }
                }
                Op::Match {
                    all,
                    bits,
                    d,
                    p,
                    a,
                    mask,
                } => {
                    let vm = if bits == 64 { !0u64 } else { 0xffff_ffff };
                    let vals: Vec<u64> = lanes.iter().map(|l| l.regs[a as usize] & vm).collect();
                    for i in 0..lanes.len() {
                        if group & (1 << i) == 0 {
                            continue;
                        }
                        let m = lanes[i].regs[mask as usize] as u32 & group;
                        let mut same = 0u32;
                        for j in 0..lanes.len() {
                            if m & (1 << j) != 0 && vals[j] == vals[i] {
                                same |= 1 << j;
                            }
                        }
                        let (dv, pv) = if !all {
                            (same, true)
                        } else if same == m {
                            (m, true)
                        } else {
                            (0, false)
                        };
                        lanes[i].regs[d as usize] = dv as u64;
                        if let Some(p) = p {
                            lanes[i].regs[p as usize] = pv as u64;
                        }
                    }
                }
                Op::Redux { op, t, d, a, mask } => {
                    for i in 0..lanes.len() {
                        if group & (1 << i) == 0 {
                            continue;
                        }
                        let m = lanes[i].regs[mask as usize] as u32 & group;
                        let mut acc: Option<u64> = None;
                        for j in 0..lanes.len() {
                            if m & (1 << j) != 0 {
                                let v = lanes[j].regs[a as usize] & 0xffff_ffff;
                                acc = Some(match acc {
                                    None => v,
                                    Some(x) => atom_apply(op, t, x, v, 0),
                                });
                            }
                        }
                        lanes[i].regs[d as usize] = acc.unwrap_or(0);
                    }
                }
                Op::Vote {
                    mode,
                    d,
                    a,
                    neg,
                    mask,
                } => {
                    let mut ballot = 0u32;
                    for i in 0..lanes.len() {
                        if group & (1 << i) != 0 && ((lanes[i].regs[a as usize] & 1 == 1) ^ neg) {
                            ballot |= 1 << i;
                        }
                    }
                    for i in 0..lanes.len() {
                        if group & (1 << i) == 0 {
                            continue;
                        }
                        let m = lanes[i].regs[mask as usize] as u32 & group;
                        let b = ballot & m;
                        lanes[i].regs[d as usize] = match mode {
                            VoteMode::Ballot => b as u64,
                            VoteMode::All => (b == m) as u64,
                            VoteMode::Any => (b != 0) as u64,
                            VoteMode::Uni => (b == 0 || b == m) as u64,
                        };
                    }
                }
                Op::Ldmatrix {
                    n,
                    trans,
                    d,
                    addr,
                    off,
                    ..
                } => self.ldmatrix(lanes, group, shared, (n, trans, d, addr, off))?,
                Op::Mma { site, .. } => {
                    let site = &module.funcs[func as usize].mma_sites[site as usize];
                    mma(lanes, group, site);
                }
                _ => {}
            }
            for i in 0..lanes.len() {
                if group & (1 << i) != 0 {
                    lanes[i].state = St::Ready;
                    lanes[i].pc += 1;
                }
            }
            progress = true;
        }
        Ok(progress)
    }

    /// `ldmatrix`: lanes `8 i .. 8 i + 8` of `group` give the row addresses of matrix `i`
    /// (16 bytes each, in shared memory); lane `t` gets, of each matrix, the b16 pair at row
    /// `t / 4`, columns `2 (t % 4)` and the next (`trans`: column `t / 4`, rows `2 (t % 4)` and
    /// the next), the first in the low half. A row whose lane has exited reads as zeros.
    fn ldmatrix(
        &mut self,
        lanes: &mut [Thread],
        group: u32,
        shared: &mut [u8],
        (n, trans, d, addr, off): (u8, bool, [R; 4], R, i32),
    ) -> Result<(), Fault> {
        let mut rows = [[[0u16; 8]; 8]; 4];
        for (i, matrix) in rows.iter_mut().enumerate().take(n as usize) {
            for (r, row) in matrix.iter_mut().enumerate() {
                let lane = 8 * i + r;
                if lane >= lanes.len() || group & (1 << lane) == 0 {
                    continue;
                }
                let th = &lanes[lane];
                let at = th.regs[addr as usize].wrapping_add(off as i64 as u64);
                let loc = self.locate(th, shared.len(), Space::Shared, at, 16, 16, false)?;
                let Loc::Shared(o) = loc else {
                    continue;
                };
                self.note_shared(th, th.pc as usize, o, 16, SharedAccess::Read);
                for (c, v) in row.iter_mut().enumerate() {
                    *v = u16::from_le_bytes([shared[o + 2 * c], shared[o + 2 * c + 1]]);
                }
            }
        }
        for (t, lane) in lanes.iter_mut().enumerate() {
            if group & (1 << t) == 0 {
                continue;
            }
            for (i, matrix) in rows.iter().enumerate().take(n as usize) {
                let (a, b) = if trans {
                    (matrix[2 * (t % 4)][t / 4], matrix[2 * (t % 4) + 1][t / 4])
                } else {
                    (matrix[t / 4][2 * (t % 4)], matrix[t / 4][2 * (t % 4) + 1])
                };
                lane.regs[d[i] as usize] = u64::from(a) | u64::from(b) << 16;
            }
        }
        Ok(())
    }

    /// The lanes waiting at the same warp collective as lane `first` (which waits at one):
    /// those at the same instruction, or for `bar.warp.sync`, those at any `bar.warp.sync`
    /// with the same member mask.
    fn group_of(&self, lanes: &[Thread], first: usize) -> u32 {
        let op_of = |l: &Thread| self.module.funcs[l.func as usize].code[l.pc as usize].op;
        let sync_mask = |l: &Thread| match op_of(l) {
            Op::WarpSync { mask } => Some(l.regs[mask as usize] as u32),
            _ => None,
        };
        let lead = &lanes[first];
        let lead_sync = sync_mask(lead);
        let mut group = 0u32;
        for (i, l) in lanes.iter().enumerate() {
            let same = match lead_sync {
                Some(m) => sync_mask(l) == Some(m),
                None => l.func == lead.func && l.pc == lead.pc,
            };
            if l.state == St::Warp && same {
                group |= 1 << i;
            }
        }
        group
    }

    /// Synccheck: each lane of `group` (waiting at one warp collective) must be in its own
    /// member mask (PTX leaves the collective undefined otherwise).
    fn check_own_lanes(&self, lanes: &[Thread], group: u32, mask_reg: R) -> Result<(), Fault> {
        for (i, lane) in lanes.iter().enumerate() {
            let mask = lane.regs[mask_reg as usize] as u32;
            if group & (1 << i) != 0 && mask & (1 << i) == 0 {
                return Err(Fault::BadWarpMask {
                    block: self.ctaid,
                    thread: lane.tid,
                    mask,
                    detail: format!(
                        "the executing lane {i} is not in it (PTX leaves the collective undefined)"
                    ),
                    pc_text: self.pc_text(lane),
                });
            }
        }
        Ok(())
    }

    /// Synccheck, for a block that cannot go on: a warp collective whose member mask names
    /// a live lane waiting elsewhere (another warp collective or a block barrier).
    fn stuck_warp(&self, threads: &[Thread]) -> Option<Fault> {
        for lanes in threads.chunks(32) {
            for (first, lane) in lanes.iter().enumerate() {
                if lane.state != St::Warp {
                    continue;
                }
                let op = self.module.funcs[lane.func as usize].code[lane.pc as usize].op;
                let Some(mask_reg) = member_mask(op) else {
                    continue;
                };
                let group = self.group_of(lanes, first);
                let absent = missing(lanes, group, mask_reg);
                let Some(other) = lanes
                    .iter()
                    .enumerate()
                    .find(|&(j, _)| absent & (1 << j) != 0)
                    .map(|(_, t)| t)
                else {
                    continue;
                };
                let place = if other.state == St::Bar {
                    "the block barrier"
                } else {
                    "the warp collective"
                };
                return Some(Fault::BadWarpMask {
                    block: self.ctaid,
                    thread: lane.tid,
                    mask: lane.regs[mask_reg as usize] as u32,
                    detail: format!(
                        "lanes {absent:#010x} it names are live but never reach this collective: thread {:?} waits at {place} `{}`",
                        other.tid,
                        self.pc_text(other)
                    ),
                    pc_text: self.pc_text(lane),
                });
            }
        }
        None
    }

    /// Synccheck: why the block cannot finish, naming a thread at a block barrier.
    fn divergence(&self, threads: &[Thread]) -> Option<Fault> {
        let waiting = threads.iter().find(|t| t.state == St::Bar)?;
        let count = |st: St| threads.iter().filter(|t| t.state == st).count();
        let mut detail = format!(
            "{} threads wait at block barriers, {} at warp collectives, {} exited",
            count(St::Bar),
            count(St::Warp),
            count(St::Exited)
        );
        let pc_text = self.pc_text(waiting);
        if let Some(other) = threads.iter().find(|t| {
            matches!(t.state, St::Bar | St::Warp) && (t.func, t.pc) != (waiting.func, waiting.pc)
        }) {
            detail.push_str(&format!(
                "; thread {:?} waits at `{}`",
                other.tid,
                self.pc_text(other)
            ));
        }
        if let Some(gone) = threads.iter().find(|t| t.state == St::Exited) {
            detail.push_str(&format!("; thread {:?} exited", gone.tid));
        }
        Some(Fault::BarrierDivergence {
            block: self.ctaid,
            thread: waiting.tid,
            pc_text,
            detail,
        })
    }

    pub(crate) fn run_block(
        &mut self,
        threads: &mut [Thread],
        shared: &mut [u8],
    ) -> Result<(), Fault> {
        let n = threads.len();
        loop {
            for w in 0..threads.len().div_ceil(32) {
                let lanes = &mut threads[w * 32..((w + 1) * 32).min(n)];
                for i in 0..lanes.len() {
                    if lanes[i].state == St::Ready {
                        self.run_thread(&mut lanes[i], shared)?;
                        if lanes[i].state == St::Exited {
                            self.live_mask[w] &= !(1 << i);
                        }
                    }
                }
            }
            let live = threads.iter().filter(|t| t.state != St::Exited).count();
            if live == 0 {
                return Ok(());
            }
            // Threads that yielded in a long loop are still ready: another round.
            let mut progress = threads.iter().any(|t| t.state == St::Ready);
            for w in 0..threads.len().div_ceil(32) {
                let lanes = &mut threads[w * 32..((w + 1) * 32).min(n)];
                progress |= self.resolve_warp(lanes, shared)?;
            }
            if !progress {
                progress = self.release_barriers(threads, live);
            }
            if !progress {
                if self.args.synccheck
                    && let Some(fault) = self
                        .stuck_warp(threads)
                        .or_else(|| self.divergence(threads))
                {
                    return Err(fault);
                }
                let at_bar = threads.iter().filter(|t| t.state == St::Bar).count();
                let at_warp = threads.iter().filter(|t| t.state == St::Warp).count();
                return Err(Fault::Deadlock(format!(
                    "block {:?}: {live} threads alive, {at_bar} waiting at bar.sync, {at_warp} at warp \
                     collectives that cannot complete",
                    self.ctaid
                )));
            }
        }
    }

    /// Releases the block barriers every participant reached: the threads of the block that
    /// have not exited (`live`), or the barrier's thread count.
    pub(crate) fn release_barriers(&mut self, threads: &mut [Thread], live: usize) -> bool {
        let module = self.module;
        let mut ids: Vec<(u64, Option<u64>, usize)> = Vec::new();
        for t in threads.iter() {
            if t.state != St::Bar {
                continue;
            }
            let (id, count) = match module.funcs[t.func as usize].code[t.pc as usize].op {
                Op::Bar { id, count } | Op::BarRed { id, count, .. } => (id, count),
                _ => continue,
            };
            {
                let idv = t.regs[id as usize] & 0xffff_ffff;
                let cnt = count.map(|c| t.regs[c as usize] & 0xffff_ffff);
                match ids.iter_mut().find(|e| e.0 == idv) {
                    Some(e) => e.2 += 1,
                    None => ids.push((idv, cnt, 1)),
                }
            }
        }
        let mut progress = false;
        for (idv, cnt, waiting) in ids {
            let need = cnt.map_or(live, |c| (c as usize).min(live));
            if waiting >= need {
                self.order_shared();
                // Reductions of `bar.red` over the threads released together.
                let (mut popc, mut all, mut any) = (0u64, true, false);
                let at_id = |t: &Thread| -> Option<Op> {
                    if t.state != St::Bar {
                        return None;
                    }
                    let op = module.funcs[t.func as usize].code[t.pc as usize].op;
                    match op {
                        Op::Bar { id, .. } | Op::BarRed { id, .. }
                            if t.regs[id as usize] & 0xffff_ffff == idv =>
                        {
                            Some(op)
                        }
                        _ => None,
                    }
                };
                for t in threads.iter() {
                    if let Some(Op::BarRed { p, neg, .. }) = at_id(t) {
                        let v = (t.regs[p as usize] & 1 == 1) ^ neg;
                        popc += v as u64;
                        all &= v;
                        any |= v;
                    }
                }
                for t in threads.iter_mut() {
                    let Some(op) = at_id(t) else { continue };
                    if let Op::BarRed { red, d, .. } = op {
                        t.regs[d as usize] = match red {
                            BarRedOp::Popc => popc,
                            BarRedOp::And => all as u64,
                            BarRedOp::Or => any as u64,
                        };
                    }
                    t.state = St::Ready;
                    t.pc += 1;
                }
                progress = true;
            }
        }
        progress
    }
}

/// The member-mask register of a warp collective.
fn member_mask(op: Op) -> Option<R> {
    match op {
        Op::WarpSync { mask }
        | Op::Shfl { mask, .. }
        | Op::Vote { mask, .. }
        | Op::Redux { mask, .. }
        | Op::Match { mask, .. }
        | Op::Ldmatrix { mask, .. }
        | Op::Mma { mask, .. } => Some(mask),
        _ => None,
    }
}

/// The lanes that the member masks of the lanes `group` (waiting at one collective) name
/// but that are neither in the group nor exited: the collective waits for them.
fn missing(lanes: &[Thread], group: u32, mask_reg: R) -> u32 {
    let mut out = 0u32;
    for i in 0..lanes.len() {
        if group & (1 << i) == 0 {
            continue;
        }
        let m = lanes[i].regs[mask_reg as usize] as u32;
        for j in 0..lanes.len() {
            if m & (1 << j) != 0 && group & (1 << j) == 0 && lanes[j].state != St::Exited {
                out |= 1 << j;
            }
        }
    }
    out
}

/// `mma.sync` on integers: D = A B + C, each lane holding its fragments as PTX lays them out
/// (lane `t`: group `g = t / 4`, `q = t % 4`). A (16 x k, row-major): register `j` holds four
/// elements of row `g + 8 (j % 2)`, columns `4 q + 16 (j / 2)` onwards. B (k x 8): register
/// `j` holds four elements of column `g`, rows `4 q + 16 j` onwards. C and D (16 x 8, s32):
/// register `j` is row `g + 8 (j / 2)`, column `2 q + j % 2`. Lanes the warp does not have
/// (or that exited) give zeros.
fn mma(lanes: &mut [Thread], group: u32, site: &MmaSite) {
    let k = site.k as usize;
    let mut a = [[0i64; 32]; 16];
    let mut b = [[0i64; 8]; 32];
    let mut c = [[0i64; 8]; 16];
    let byte = |v: u64, e: usize, signed: bool| {
        let x = (v >> (8 * e)) as u8;
        if signed { x as i8 as i64 } else { x as i64 }
    };
    for (t, lane) in lanes.iter().enumerate() {
        if group & (1 << t) == 0 {
            continue;
        }
        let (g, q) = (t / 4, t % 4);
        for j in 0..k / 8 {
            let v = lane.regs[site.a[j] as usize];
            for e in 0..4 {
                a[g + 8 * (j % 2)][4 * q + 16 * (j / 2) + e] = byte(v, e, site.a_signed);
            }
        }
        for j in 0..k / 16 {
            let v = lane.regs[site.b[j] as usize];
            for e in 0..4 {
                b[4 * q + 16 * j + e][g] = byte(v, e, site.b_signed);
            }
        }
        for j in 0..4 {
            c[g + 8 * (j / 2)][2 * q + j % 2] = lane.regs[site.c[j] as usize] as u32 as i32 as i64;
        }
    }
    for (t, lane) in lanes.iter_mut().enumerate() {
        if group & (1 << t) == 0 {
            continue;
        }
        let (g, q) = (t / 4, t % 4);
        for j in 0..4 {
            let (row, col) = (g + 8 * (j / 2), 2 * q + j % 2);
            let sum: i64 = c[row][col] + (0..k).map(|x| a[row][x] * b[x][col]).sum::<i64>();
            let v = if site.satfinite {
                sum.clamp(i32::MIN as i64, i32::MAX as i64) as i32
            } else {
                sum as i32
            };
            lane.regs[site.d[j] as usize] = v as u32 as u64;
        }
    }
}
