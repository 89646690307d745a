//! Racecheck: shared-memory hazards between the threads of one block, FastTrack style.
//!
//! Each byte of the block's shared window has a shadow cell: the last store (thread, the
//! thread's warp clock, the block epoch, atomic or not) and the plain loads since it (the
//! last reader with its clock, and one reader of another warp). Ordering is
//! happens-before, never the interpreter's schedule:
//!
//! * the block epoch grows at every released block barrier (whatever its thread count: a
//!   barrier that orders only its participants is taken as ordering everyone, which can
//!   only miss races), at every fence (`membar`, `fence`: a flag protocol between threads
//!   is then never reported) and at every mbarrier arrival or completed wait; an access of
//!   an earlier epoch is ordered before every later one;
//! * within one epoch, lanes of one warp are ordered by `bar.warp.sync` (`__syncwarp`):
//!   each thread keeps a vector clock over the 32 lanes of its warp, joined across the
//!   lanes a `bar.warp.sync` releases together; lanes of different warps are not ordered;
//! * warp collectives (`shfl.sync`, `vote.sync`, …) order nothing, and neither does the
//!   interpreter's lockstep-free schedule.
//!
//! Two atomic (or strong: `.volatile`, `.relaxed`, `.acquire`, `.release`) accesses never
//! race; an atomic against a plain one does. Memory is one cell per byte of shared memory
//! (up to [`MAX_SHADOWED`] bytes) and one 32-entry clock per thread, whatever the launch
//! does.

use crate::{Hazard, SharedRace};

/// No thread.
const NONE: u16 = u16::MAX;
/// Bytes of shared memory the shadow covers: more than any GPU offers (228 KiB on sm_90);
/// accesses beyond it are not checked.
pub(crate) const MAX_SHADOWED: usize = 1 << 20;

/// What one access does to shared memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SharedAccess {
    /// A plain load.
    Read,
    /// A strong (`.volatile`, `.relaxed`, `.acquire`) load.
    StrongRead,
    /// A plain store.
    Write,
    /// A plain store of the bytes that shared memory already holds there. Against a store
    /// of another thread that nothing orders it with, it is no hazard: whichever runs last,
    /// the bytes are the same, and so is what any load reads (llama.cpp-style tile loaders
    /// clamp their row index, so that several threads store one value to one word). Nor
    /// is it one against a load. It counts as a store (for later accesses) only where it
    /// is ordered after the last one; otherwise that store stays the one recorded.
    WriteSame,
    /// An atomic, or a strong store.
    AtomicWrite,
}

/// The shadow of one byte.
#[derive(Clone, Copy)]
struct Cell {
    /// Block epoch of the last store (0: none in this block).
    w_epoch: u32,
    /// The storing thread's own warp clock at the store.
    w_clock: u32,
    /// The storing thread (linear index in the block).
    w_lin: u16,
    /// The store was atomic (or strong).
    w_atomic: bool,
    /// Block epoch of the loads recorded below.
    r_epoch: u32,
    /// The last reader's own warp clock at its load.
    r_clock: u32,
    /// The last plain reader since the store, or `NONE`.
    r_lin: u16,
    /// A reader since the store of another warp than `r_lin`'s, or `NONE`.
    r_other: u16,
}

impl Cell {
    const EMPTY: Cell = Cell {
        w_epoch: 0,
        w_clock: 0,
        w_lin: NONE,
        w_atomic: false,
        r_epoch: 0,
        r_clock: 0,
        r_lin: NONE,
        r_other: NONE,
    };
}

/// The racecheck state of one worker: the shadow of its block's shared memory, the warp
/// clocks of the block's threads, and the first hazard it found.
pub(crate) struct Shadow {
    cells: Vec<Cell>,
    /// Per thread (by linear index): its vector clock over the lanes of its warp.
    clocks: Vec<[u32; 32]>,
    /// The current block epoch (≥ 1; cells of earlier epochs are ordered before it).
    epoch: u32,
    /// Threads per block in x, y and z.
    dims: [u32; 3],
    /// The block running now.
    block: [u32; 3],
    /// Its linear index.
    block_lin: u64,
    /// The first hazard found, with its block's linear index (a worker runs its blocks in
    /// increasing order, so this is its lowest block with one).
    pub(crate) found: Option<(u64, SharedRace)>,
    /// Racing accesses found.
    pub(crate) count: u64,
}

impl Shadow {
    /// The shadow of a `shared_bytes` window for blocks of `dims` threads.
    pub(crate) fn new(shared_bytes: usize, dims: [u32; 3]) -> Shadow {
        let threads = dims.iter().map(|&d| d as usize).product::<usize>();
        Shadow {
            cells: vec![Cell::EMPTY; shared_bytes.min(MAX_SHADOWED)],
            clocks: vec![[0; 32]; threads],
            epoch: 1,
            dims,
            block: [0; 3],
            block_lin: 0,
            found: None,
            count: 0,
        }
    }

    /// A new block starts: everything before is ordered before it; no lane has synchronised
    /// with another yet.
    pub(crate) fn start_block(&mut self, block: [u32; 3], block_lin: u64) {
        self.block = block;
        self.block_lin = block_lin;
        self.order_all();
        for (lin, clock) in self.clocks.iter_mut().enumerate() {
            *clock = [0; 32];
            clock[lin % 32] = 1;
        }
    }

    /// A block-wide ordering point: every access so far is ordered before every later one.
    pub(crate) fn order_all(&mut self) {
        if self.epoch == u32::MAX {
            // Start again: forget every cell (all are ordered before what follows anyway).
            self.cells.fill(Cell::EMPTY);
            self.epoch = 1;
        } else {
            self.epoch += 1;
        }
    }

    /// `bar.warp.sync` released the threads `lins` (lanes of one warp) together: each is
    /// ordered after what the others did before it.
    pub(crate) fn warp_sync(&mut self, lins: &[u32]) {
        let mut join = [0u32; 32];
        for &lin in lins {
            if let Some(clock) = self.clocks.get(lin as usize) {
                for (j, c) in join.iter_mut().zip(clock) {
                    *j = (*j).max(*c);
                }
            }
        }
        for &lin in lins {
            if let Some(clock) = self.clocks.get_mut(lin as usize) {
                *clock = join;
                clock[lin as usize % 32] += 1;
            }
        }
    }

    /// The thread index of linear index `lin`.
    fn tid(&self, lin: u32) -> [u32; 3] {
        let [bx, by, _] = self.dims;
        let (bx, by) = (bx.max(1), by.max(1));
        [lin % bx, (lin / bx) % by, lin / (bx * by)]
    }

    /// Thread `lin` made `access` to `len` bytes at shared offset `off` (the instruction's
    /// text from `pc_text`, asked for only when the access races).
    pub(crate) fn access(
        &mut self,
        lin: u32,
        off: usize,
        len: usize,
        access: SharedAccess,
        pc_text: impl FnOnce() -> String,
    ) {
        let end = off.saturating_add(len).min(self.cells.len());
        if off >= end {
            return;
        }
        let epoch = self.epoch;
        let Some(mine) = self.clocks.get(lin as usize).copied() else {
            return;
        };
        let (write, atomic) = match access {
            SharedAccess::Read => (false, false),
            SharedAccess::StrongRead => (false, true),
            SharedAccess::Write | SharedAccess::WriteSame => (true, false),
            SharedAccess::AtomicWrite => (true, true),
        };
        // Whether the access of thread `other` (its clock `clock`, at `at`) is ordered
        // before this one.
        let ordered = |other: u16, clock: u32, at: u32| {
            at != epoch
                || other == NONE
                || u32::from(other) == lin
                || u32::from(other) / 32 == lin / 32 && clock <= mine[usize::from(other) % 32]
        };
        let me = lin as u16;
        // (hazard, the other thread, first racing byte, racing bytes)
        let mut race: Option<(Hazard, u16, usize, u64)> = None;
        let same = access == SharedAccess::WriteSame;
        for (o, c) in self.cells[off..end].iter_mut().enumerate() {
            if same {
                // No hazard either way; recorded as the last store only when ordered after
                // the one recorded (an unordered one stays: it wrote these bytes too).
                if ordered(c.w_lin, c.w_clock, c.w_epoch) {
                    // The loads since stay: a later store of other bytes races with them
                    // as it would have without this one.
                    c.w_epoch = epoch;
                    c.w_clock = mine[lin as usize % 32];
                    c.w_lin = me;
                    c.w_atomic = false;
                }
                continue;
            }
            let mut hit = None;
            let both_atomic = atomic && c.w_atomic;
            if !both_atomic && !ordered(c.w_lin, c.w_clock, c.w_epoch) {
                let hazard = if write {
                    Hazard::WriteAfterWrite
                } else {
                    Hazard::ReadAfterWrite
                };
                hit = Some((hazard, c.w_lin));
            } else if write && c.r_epoch == epoch {
                if !ordered(c.r_lin, c.r_clock, c.r_epoch) {
                    hit = Some((Hazard::WriteAfterRead, c.r_lin));
                } else if c.r_other != NONE && u32::from(c.r_other) / 32 != lin / 32 {
                    hit = Some((Hazard::WriteAfterRead, c.r_other));
                }
            }
            if write {
                let clock = mine[lin as usize % 32];
                // An atomic after this thread's own plain store, with no synchronisation
                // between them, keeps the store's plainness: whoever is unordered with one
                // is unordered with the other.
                let plain_before = !c.w_atomic
                    && u32::from(c.w_lin) == lin
                    && c.w_epoch == epoch
                    && c.w_clock == clock;
                *c = Cell {
                    w_epoch: epoch,
                    w_clock: clock,
                    w_lin: me,
                    w_atomic: atomic && !plain_before,
                    r_epoch: epoch,
                    ..Cell::EMPTY
                };
            } else if !atomic {
                if c.r_epoch != epoch || c.r_lin == NONE {
                    c.r_other = NONE;
                } else if u32::from(c.r_lin) / 32 != lin / 32 {
                    c.r_other = c.r_lin;
                }
                c.r_epoch = epoch;
                c.r_lin = me;
                c.r_clock = mine[lin as usize % 32];
            }
            if let Some((hazard, other)) = hit {
                match &mut race {
                    Some((_, _, _, bytes)) => *bytes += 1,
                    None => race = Some((hazard, other, off + o, 1)),
                }
            }
        }
        let Some((hazard, other, at, bytes)) = race else {
            return;
        };
        self.count += 1;
        if self.found.is_none() {
            let found = SharedRace {
                hazard,
                block: self.block,
                first: self.tid(u32::from(other)),
                second: self.tid(lin),
                offset: at as u64,
                bytes,
                pc_text: pc_text(),
                count: 0,
            };
            self.found = Some((self.block_lin, found));
        }
    }
}
