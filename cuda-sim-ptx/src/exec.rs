//! Execution: blocks on worker threads, the threads of a block interleaved cooperatively
//! (each runs until a barrier, a warp collective or its end), memory spaces and faults.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::fmath;
use crate::footprint::{Access, Recorder, Span, merge};
use crate::ialu::*;
use crate::ir::*;
use crate::memory::*;
use crate::racecheck::{Shadow, SharedAccess};
use crate::{Fault, LaunchArgs, Memory, Module, Outcome, SharedRace};

/// Generic-address windows (host user space is below 2^47, so these never collide with it).
pub(crate) const SHARED_BASE: u64 = 1 << 48;
pub(crate) const LOCAL_BASE: u64 = 2 << 48;
pub(crate) const FPARAM_BASE: u64 = 4 << 48;
const WINDOW: u64 = 1 << 48;

/// Virtual clock ticks per read of `%clock`/`%clock64`/`%globaltimer`.
const CLOCK_STEP: u64 = 4096;
const MAX_CALL_DEPTH: usize = 4096;
/// Backward branches a thread takes before it yields to the other threads of its block.
const YIELD_AFTER_LOOPS: u32 = 1 << 16;
const MAX_BLOCK_THREADS: u64 = 1024;
/// More than any GPU offers (228 KiB on sm_90), small enough to allocate per worker.
const MAX_DYNAMIC_SHARED: u32 = 16 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum St {
    Ready,
    Bar,
    Warp,
    Exited,
}

pub(crate) struct Frame {
    func: u32,
    ret_pc: u32,
    regs: Vec<u64>,
    pbase: usize,
    lbase: usize,
    site: u32,
}

pub(crate) struct Thread {
    pub(crate) pc: u32,
    pub(crate) func: u32,
    pub(crate) regs: Vec<u64>,
    pub(crate) frames: Vec<Frame>,
    pub(crate) pstack: Vec<u8>,
    pub(crate) local: Vec<u8>,
    pub(crate) pbase: usize,
    pub(crate) lbase: usize,
    pub(crate) carry: bool,
    pub(crate) clock: u64,
    pub(crate) state: St,
    pub(crate) tid: [u32; 3],
    pub(crate) lin: u32,
    pub(crate) printf: String,
    pub(crate) conditional_sets: Vec<(u64, u32)>,
}

impl Thread {
    fn new() -> Thread {
        Thread {
            pc: 0,
            func: 0,
            regs: Vec::new(),
            frames: Vec::new(),
            pstack: Vec::new(),
            local: Vec::new(),
            pbase: 0,
            lbase: 0,
            carry: false,
            clock: 0,
            state: St::Ready,
            tid: [0; 3],
            lin: 0,
            printf: String::new(),
            conditional_sets: Vec::new(),
        }
    }
}

/// Where a checked access lands.
#[derive(Clone, Copy)]
pub(crate) enum Loc {
    Host(u64),
    Shared(usize),
    Local(usize),
    KParam(usize),
    FParam(usize),
}

/// Per-worker state.
pub(crate) struct W<'m> {
    pub(crate) module: &'m Module,
    pub(crate) mem: &'m dyn Memory,
    pub(crate) args: &'m LaunchArgs<'m>,
    /// Register templates per function, with module-variable addresses filled in.
    pub(crate) prep: Vec<Vec<u64>>,
    pub(crate) ctaid: [u32; 3],
    pub(crate) block_lin: u64,
    pub(crate) touched: Vec<u8>,
    /// The global bytes this worker's threads loaded, stored and updated atomically.
    pub(crate) footprint: Recorder,
    /// `Memory::uninitialised`: sorted, disjoint ranges never written before the launch.
    pub(crate) watch: &'m [(u64, u64)],
    /// The loads of this worker's threads that touched `watch`.
    pub(crate) unread: Recorder,
    pub(crate) live_mask: Vec<u32>,
    pub(crate) dyn_smem: u64,
    pub(crate) total_smem: u64,
    /// The last regions `Memory::check` approved for reads (`[0]`) and for writes (`[1]`),
    /// from `Memory::region_bounds`.
    pub(crate) cache: [RegionCache; 2],
    /// (`LaunchArgs::racecheck`, with shared memory) the shadow of the block's shared
    /// memory.
    pub(crate) race: Option<Shadow>,
    /// Instructions this worker's threads issued (guarded-off ones included, as a GPU issues
    /// them), for the launch's duration in logical time.
    pub(crate) instructions: u64,
}

/// Regions per `RegionCache`.
const CACHED_REGIONS: usize = 4;

/// Bounds `[start, end)` of the last few regions `Memory::check` approved for one kind of
/// access: accesses inside them need no new check.
#[derive(Clone, Copy)]
pub(crate) struct RegionCache {
    bounds: [(u64, u64); CACHED_REGIONS],
    /// The entry to replace next.
    next: usize,
}

impl RegionCache {
    /// Contains nothing.
    const EMPTY: RegionCache = RegionCache {
        bounds: [(1, 0); CACHED_REGIONS],
        next: 0,
    };

    /// Whether `[addr, addr + len)` lies inside one of the regions.
    #[inline]
    fn contains(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.bounds.iter().any(|&(s, e)| addr >= s && end <= e)
    }

    fn insert(&mut self, start: u64, end: u64) {
        self.bounds[self.next] = (start, end);
        self.next = (self.next + 1) % CACHED_REGIONS;
    }
}

impl<'m> W<'m> {
    /// Notes a global access in the footprint, and a load touching `watch` in `unread`.
    #[inline]
    pub(crate) fn note_global(&mut self, access: Access, addr: u64, len: u64, tid: [u32; 3]) {
        self.footprint.note(access, addr, len, self.ctaid, tid);
        if access == Access::Read && !self.watch.is_empty() {
            let end = addr.saturating_add(len);
            let i = self.watch.partition_point(|&(_, e)| e <= addr);
            if self.watch.get(i).is_some_and(|&(s, _)| s < end) {
                self.unread.note(Access::Read, addr, len, self.ctaid, tid);
            }
        }
    }

    pub(crate) fn fault_oob(&self, th: &Thread, addr: u64, len: u64, write: bool) -> Fault {
        let f = &self.module.funcs[th.func as usize];
        Fault::OutOfBounds {
            block: self.ctaid,
            thread: th.tid,
            addr,
            len,
            write,
            pc_text: f.text.get(th.pc as usize).cloned().unwrap_or_default(),
        }
    }
    pub(crate) fn trap(&self, th: &Thread) -> Fault {
        let f = &self.module.funcs[th.func as usize];
        Fault::Trap {
            block: self.ctaid,
            thread: th.tid,
            pc_text: f.text.get(th.pc as usize).cloned().unwrap_or_default(),
        }
    }

    /// Racecheck: thread `th`, at `pc` of its function, made `access` to `len` bytes at
    /// shared offset `off`.
    #[inline]
    pub(crate) fn note_shared(
        &mut self,
        th: &Thread,
        pc: usize,
        off: usize,
        len: u64,
        access: SharedAccess,
    ) {
        if let Some(race) = self.race.as_mut() {
            let module = self.module;
            race.access(th.lin, off, len as usize, access, || {
                let f = &module.funcs[th.func as usize];
                f.text.get(pc).cloned().unwrap_or_default()
            });
        }
    }

    /// Racecheck: a block-wide ordering point (a released barrier, a fence, an mbarrier).
    #[inline]
    pub(crate) fn order_shared(&mut self) {
        if let Some(race) = self.race.as_mut() {
            race.order_all();
        }
    }

    /// The instruction text at thread `th`'s pc.
    pub(crate) fn pc_text(&self, th: &Thread) -> String {
        let f = &self.module.funcs[th.func as usize];
        f.text.get(th.pc as usize).cloned().unwrap_or_default()
    }

    /// Whether an access of `len` bytes (a power of two) at `addr` in `space` is a global
    /// one, aligned, inside a region lately approved for this kind of access: then
    /// `locate` would return `Loc::Host(addr)` without a fault (and it is already marked as
    /// touched), since `Memory::region_bounds` promises that `check` would approve it.
    #[inline]
    fn cached_global(&self, space: Space, addr: u64, len: u64, write: bool) -> bool {
        let global = match space {
            Space::Global | Space::Const => true,
            Space::Generic => addr >> 48 == 0,
            _ => false,
        };
        global && addr & (len - 1) == 0 && self.cache[write as usize].contains(addr, len)
    }

    /// Checks an access of `len` bytes (aligned to `align`) in `space` at `addr`: a load
    /// (`write` false) or a store.
    pub(crate) fn locate(
        &mut self,
        th: &Thread,
        shared_len: usize,
        space: Space,
        addr: u64,
        len: u64,
        align: u64,
        write: bool,
    ) -> Result<Loc, Fault> {
        let access = if write { Access::Write } else { Access::Read };
        self.locate_as(th, shared_len, space, addr, len, align, access)
    }

    /// Checks an access of `len` bytes (aligned to `align`) in `space` at `addr`, made as
    /// `access`; a global one is noted in the worker's footprint.
    pub(crate) fn locate_as(
        &mut self,
        th: &Thread,
        shared_len: usize,
        space: Space,
        addr: u64,
        len: u64,
        align: u64,
        access: Access,
    ) -> Result<Loc, Fault> {
        let write = access != Access::Read;
        let (space, off) = match space {
            Space::Global | Space::Const => (Space::Global, addr),
            Space::Shared => (
                Space::Shared,
                if addr >> 48 == 1 {
                    addr - SHARED_BASE
                } else {
                    addr
                },
            ),
            Space::Local => (
                Space::Local,
                if addr >> 48 == 2 {
                    addr - LOCAL_BASE
                } else {
                    addr
                },
            ),
            Space::Param => {
                if addr >> 48 == 3 {
                    (Space::Param, addr)
                } else if addr >> 48 == 4 {
                    (Space::Generic, addr - FPARAM_BASE)
                } else {
                    (Space::Generic, addr)
                }
            }
            Space::Generic => match addr >> 48 {
                0 => (Space::Global, addr),
                1 => (Space::Shared, addr - SHARED_BASE),
                2 => (Space::Local, addr - LOCAL_BASE),
                3 => (Space::Param, addr),
                4 => (Space::Generic, addr - FPARAM_BASE),
                _ => return Err(self.fault_oob(th, addr, len, write)),
            },
        };
        if !addr.is_multiple_of(align) {
            let Fault::OutOfBounds {
                block,
                thread,
                addr,
                len,
                write,
                pc_text,
            } = self.fault_oob(th, addr, len, write)
            else {
                return Err(self.trap(th));
            };
            return Err(Fault::Misaligned {
                block,
                thread,
                addr,
                len,
                write,
                pc_text,
            });
        }
        let in_range =
            |off: u64, size: usize| off.checked_add(len).is_some_and(|e| e <= size as u64);
        match space {
            Space::Global => {
                // Inside a region lately approved for this kind of access (already marked as
                // touched): `Memory::region_bounds` promises `check` would approve it.
                if self.cache[write as usize].contains(addr, len) {
                    self.note_global(access, addr, len, th.tid);
                    return Ok(Loc::Host(addr));
                }
                match self.mem.check(addr, len, write) {
                    Some(region) => {
                        self.note_global(access, addr, len, th.tid);
                        if region >= self.touched.len() {
                            self.touched.resize(region + 1, 0);
                        }
                        self.touched[region] |= if write { 3 } else { 1 };
                        if let Some((start, end)) = self.mem.region_bounds(region) {
                            self.cache[write as usize].insert(start, end);
                        }
                        Ok(Loc::Host(addr))
                    }
                    None => Err(self.fault_oob(th, addr, len, write)),
                }
            }
            Space::Shared if in_range(off, shared_len) => Ok(Loc::Shared(off as usize)),
            Space::Local if in_range(off, th.local.len()) => Ok(Loc::Local(off as usize)),
            Space::Param => {
                let o = addr - KPARAM_BASE;
                if !write && in_range(o, self.args.params.len()) {
                    Ok(Loc::KParam(o as usize))
                } else {
                    Err(self.fault_oob(th, addr, len, write))
                }
            }
            // Frame parameter area (stack of `.param` spaces).
            Space::Generic if in_range(off, th.pstack.len()) => Ok(Loc::FParam(off as usize)),
            _ => Err(self.fault_oob(th, addr, len, write)),
        }
    }
}

impl<'m> W<'m> {
    fn special(&self, th: &mut Thread, s: Sreg) -> u64 {
        let a = self.args;
        match s {
            Sreg::Tid(d) => th.tid[d as usize] as u64,
            Sreg::Ntid(d) => a.block[d as usize] as u64,
            Sreg::Ctaid(d) => self.ctaid[d as usize] as u64,
            Sreg::Nctaid(d) => a.grid[d as usize] as u64,
            Sreg::Laneid => (th.lin % 32) as u64,
            Sreg::Warpid => (th.lin / 32) as u64,
            Sreg::Nwarpid => 64,
            Sreg::Smid => self.block_lin % 132,
            Sreg::Nsmid => 132,
            Sreg::Gridid => 1,
            Sreg::Clock | Sreg::Clock64 | Sreg::ClockHi => {
                th.clock += CLOCK_STEP;
                match s {
                    Sreg::Clock => th.clock & 0xffff_ffff,
                    Sreg::ClockHi => th.clock >> 32,
                    _ => th.clock,
                }
            }
            Sreg::Globaltimer | Sreg::GlobaltimerLo | Sreg::GlobaltimerHi => {
                th.clock += CLOCK_STEP;
                let t = 1_000_000_000u64 + th.clock;
                match s {
                    Sreg::GlobaltimerLo => t & 0xffff_ffff,
                    Sreg::GlobaltimerHi => t >> 32,
                    _ => t,
                }
            }
            Sreg::LanemaskEq => 1 << (th.lin % 32),
            Sreg::LanemaskLt => (1 << (th.lin % 32)) - 1,
            Sreg::LanemaskLe => (2u64 << (th.lin % 32)) - 1,
            Sreg::LanemaskGe => !((1u64 << (th.lin % 32)) - 1) & 0xffff_ffff,
            Sreg::LanemaskGt => !((2u64 << (th.lin % 32)) - 1) & 0xffff_ffff,
            Sreg::DynSmem => self.dyn_smem,
            Sreg::TotalSmem => self.total_smem,
            Sreg::Zero => 0,
        }
    }

    fn load(&mut self, th: &Thread, shared: &[u8], loc: Loc, size: u32) -> u64 {
        match loc {
            Loc::Host(a) => host_load(a, size),
            Loc::Shared(o) => rd_bytes(shared, o, size),
            Loc::Local(o) => rd_bytes(&th.local, o, size),
            Loc::KParam(o) => rd_bytes(self.args.params, o, size),
            Loc::FParam(o) => rd_bytes(&th.pstack, o, size),
        }
    }

    fn store(&mut self, th: &mut Thread, shared: &mut [u8], loc: Loc, size: u32, v: u64) {
        match loc {
            Loc::Host(a) => host_store(a, size, v),
            Loc::Shared(o) => wr_bytes(shared, o, size, v),
            Loc::Local(o) => wr_bytes(&mut th.local, o, size, v),
            Loc::KParam(_) => {}
            Loc::FParam(o) => wr_bytes(&mut th.pstack, o, size, v),
        }
    }

    /// Reads `size` bytes at a generic address, for printf.
    pub(crate) fn read_generic(
        &mut self,
        th: &Thread,
        shared: &[u8],
        addr: u64,
        size: u32,
    ) -> Result<u64, Fault> {
        let loc = self.locate(
            th,
            shared.len(),
            Space::Generic,
            addr,
            size as u64,
            1,
            false,
        )?;
        Ok(match loc {
            Loc::Host(a) => {
                // Unaligned printf arguments are read byte by byte.
                let mut v = 0u64;
                for k in 0..size as u64 {
                    v |= host_load(a + k, 1) << (8 * k);
                }
                v
            }
            other => self.load(th, shared, other, size),
        })
    }

    fn new_frame_regs(&self, func: usize, pbase: usize, lbase: usize) -> Vec<u64> {
        let mut regs = self.prep[func].clone();
        for (r, p) in &self.module.funcs[func].patches {
            match p {
                // Frame parameters and locals are addressed by their offset in the thread's
                // parameter / local stack.
                Patch::FParam(o) => regs[*r as usize] = (pbase as u64).wrapping_add(*o),
                Patch::Local(o) => regs[*r as usize] = (lbase as u64).wrapping_add(*o),
                Patch::Global(..) | Patch::Shared(..) => {}
            }
        }
        regs
    }

    /// Runs `th` until it exits or reaches a barrier or warp collective.
    pub(crate) fn run_thread(&mut self, th: &mut Thread, shared: &mut [u8]) -> Result<(), Fault> {
        let module = self.module;
        let mut func = &module.funcs[th.func as usize];
        let mut code: &[Ins] = &func.code;
        let mut pc = th.pc as usize;
        let mut budget = YIELD_AFTER_LOOPS;
        macro_rules! fault {
            ($e:expr) => {{
                th.pc = pc as u32;
                return Err($e);
            }};
        }
        loop {
            self.instructions += 1;
            let Some(ins) = code.get(pc) else {
                th.pc = pc as u32;
                // Past the last instruction: the GPU would run whatever follows (an illegal
                // instruction, at best).
                return Err(Fault::Trap {
                    block: self.ctaid,
                    thread: th.tid,
                    pc_text: format!("ran past the end of function {}", func.name),
                });
            };
            if ins.guard != 0 {
                let g = ins.guard - 1;
                if (th.regs[(g >> 1) as usize] & 1) as u32 == (g & 1) {
                    pc += 1;
                    continue;
                }
            }
            let regs = &mut th.regs;
            match ins.op {
                Op::Nop => {}
                Op::Fence => self.order_shared(),
                Op::Mov { d, a } => regs[d as usize] = regs[a as usize],
                Op::Special { d, s } => {
                    let v = self.special(th, s);
                    th.regs[d as usize] = v;
                }
                Op::Pack { d, parts, n, bits } => {
                    let mut v = 0u64;
                    for k in 0..n as usize {
                        v |= (regs[parts[k] as usize] & mask(bits as u32))
                            << (k as u32 * bits as u32);
                    }
                    regs[d as usize] = v;
                }
                Op::Unpack { s, parts, n, bits } => {
                    let v = regs[s as usize];
                    for k in 0..n as usize {
                        regs[parts[k] as usize] =
                            (v >> (k as u32 * bits as u32)) & mask(bits as u32);
                    }
                }
                Op::IBin { op, t, d, a, b } => {
                    let (av, bv) = (regs[a as usize], regs[b as usize]);
                    // The common cases inline (the same results as `ibin`).
                    let v = match (op, t) {
                        (IOp::Add, T::U64 | T::S64) => av.wrapping_add(bv),
                        (IOp::Add, T::U32 | T::S32) => av.wrapping_add(bv) & 0xffff_ffff,
                        (IOp::Sub, T::U64 | T::S64) => av.wrapping_sub(bv),
                        (IOp::Sub, T::U32 | T::S32) => av.wrapping_sub(bv) & 0xffff_ffff,
                        (IOp::And, T::U64 | T::S64) => av & bv,
                        (IOp::And, T::U32 | T::S32) => av & bv & 0xffff_ffff,
                        (IOp::Or, T::U64 | T::S64) => av | bv,
                        (IOp::Or, T::U32 | T::S32) => (av | bv) & 0xffff_ffff,
                        (IOp::Xor, T::U64 | T::S64) => av ^ bv,
                        (IOp::Xor, T::U32 | T::S32) => (av ^ bv) & 0xffff_ffff,
                        (IOp::Shl, T::U64 | T::S64) => {
                            let n = bv as u32;
                            if n >= 64 { 0 } else { av << n }
                        }
                        (IOp::Shl, T::U32 | T::S32) => {
                            let n = bv as u32;
                            if n >= 32 { 0 } else { (av << n) & 0xffff_ffff }
                        }
                        (IOp::MulLo, T::U64 | T::S64) => av.wrapping_mul(bv),
                        (IOp::MulLo, T::U32 | T::S32) => av.wrapping_mul(bv) & 0xffff_ffff,
                        (IOp::Rem, T::U64) => {
                            if bv == 0 {
                                av
                            } else {
                                av % bv
                            }
                        }
                        (IOp::Rem, T::U32) => {
                            let (x, y) = (av as u32, bv as u32);
                            (if y == 0 { x } else { x % y }) as u64
                        }
                        _ => ibin(op, t, av, bv, &mut th.carry),
                    };
                    th.regs[d as usize] = v;
                }
                Op::IUn { op, t, d, a } => regs[d as usize] = iun(op, t, regs[a as usize]),
                Op::Mad {
                    mode,
                    t,
                    cin,
                    cout,
                    d,
                    a,
                    b,
                    c,
                } => {
                    let (av, bv, cv) = (regs[a as usize], regs[b as usize], regs[c as usize]);
                    let mut unused = false;
                    let (prod, rt) = match mode {
                        MadMode::Lo => (ibin(IOp::MulLo, t, av, bv, &mut unused), t),
                        MadMode::Hi => (ibin(IOp::MulHi, t, av, bv, &mut unused), t),
                        MadMode::Lo24 => (ibin(IOp::Mul24Lo, t, av, bv, &mut unused), t),
                        MadMode::Wide => (
                            ibin(IOp::MulWide, t, av, bv, &mut unused),
                            if t.signed() { T::S64 } else { T::U64 },
                        ),
                    };
                    let v = if cin || cout {
                        ibin(IOp::AddC(cin, cout), rt, prod, cv, &mut th.carry)
                    } else {
                        prod.wrapping_add(cv) & mask(rt.bits())
                    };
                    th.regs[d as usize] = v;
                }
                Op::Bfe { t, d, a, b, c } => {
                    regs[d as usize] = bfe(t, regs[a as usize], regs[b as usize], regs[c as usize])
                }
                Op::Bfi {
                    t,
                    d,
                    f,
                    base,
                    pos,
                    len,
                } => {
                    regs[d as usize] = bfi(
                        t,
                        regs[f as usize],
                        regs[base as usize],
                        regs[pos as usize],
                        regs[len as usize],
                    )
                }
                Op::Prmt { d, a, b, c } => {
                    regs[d as usize] = prmt(regs[a as usize], regs[b as usize], regs[c as usize])
                }
                Op::Lop3 { d, a, b, c, lut } => {
                    regs[d as usize] =
                        lop3(regs[a as usize], regs[b as usize], regs[c as usize], lut)
                }
                Op::FBin {
                    op,
                    t,
                    rnd,
                    ftz,
                    sat,
                    d,
                    a,
                    b,
                } => {
                    let (av, bv) = (regs[a as usize], regs[b as usize]);
                    regs[d as usize] = if t == T::F32 && rnd == Rnd::N && !ftz && !sat {
                        // The common case inline (the same result as `fmath::fbin`).
                        let (x, y) = (f32::from_bits(av as u32), f32::from_bits(bv as u32));
                        let r = match op {
                            FOp::Add => Some(x + y),
                            FOp::Sub => Some(x + -y),
                            FOp::Mul => Some(x * y),
                            _ => None,
                        };
                        match r {
                            Some(r) if r.is_nan() => 0x7fff_ffff,
                            Some(r) => r.to_bits() as u64,
                            None => fmath::fbin(op, t, rnd, ftz, sat, av, bv),
                        }
                    } else {
                        fmath::fbin(op, t, rnd, ftz, sat, av, bv)
                    }
                }
                Op::Fma {
                    t,
                    rnd,
                    ftz,
                    sat,
                    d,
                    a,
                    b,
                    c,
                } => {
                    regs[d as usize] = fmath::fma(
                        t,
                        rnd,
                        ftz,
                        sat,
                        regs[a as usize],
                        regs[b as usize],
                        regs[c as usize],
                    )
                }
                Op::FUn {
                    op,
                    t,
                    rnd,
                    ftz,
                    d,
                    a,
                } => regs[d as usize] = fmath::fun(op, t, rnd, ftz, regs[a as usize]),
                Op::Testp { op, t, d, a } => {
                    regs[d as usize] = fmath::testp(op, t, regs[a as usize]) as u64
                }
                Op::Set {
                    cmp,
                    t,
                    truth,
                    d,
                    a,
                    b,
                    comb,
                } => {
                    let mut r = compare(cmp, t, regs[a as usize], regs[b as usize]);
                    if let Some((bop, c, neg)) = comb {
                        let cv = (regs[c as usize] & 1 == 1) ^ neg;
                        r = match bop {
                            BoolOp::And => r && cv,
                            BoolOp::Or => r || cv,
                            BoolOp::Xor => r ^ cv,
                        };
                    }
                    regs[d as usize] = if r { truth as u64 } else { 0 };
                }
                Op::Dp {
                    two,
                    hi,
                    asig,
                    bsig,
                    d,
                    a,
                    b,
                    c,
                } => {
                    let (av, bv) = (regs[a as usize] as u32, regs[b as usize] as u32);
                    let lane = |v: u32, k: u32, bits: u32, sig: bool| -> i64 {
                        let x = (v >> (k * bits)) & ((1u32 << bits) - 1);
                        if sig { sext(x as u64, bits) } else { x as i64 }
                    };
                    let mut acc = regs[c as usize] as u32 as i64;
                    if two {
                        for k in 0..2 {
                            acc += lane(av, k, 16, asig) * lane(bv, k + 2 * hi as u32, 8, bsig);
                        }
                    } else {
                        for k in 0..4 {
                            acc += lane(av, k, 8, asig) * lane(bv, k, 8, bsig);
                        }
                    }
                    regs[d as usize] = acc as u64 & 0xffff_ffff;
                }
                Op::Setp {
                    cmp,
                    t,
                    d,
                    dn,
                    a,
                    b,
                    comb,
                } => {
                    let (av, bv) = (regs[a as usize], regs[b as usize]);
                    // The common cases inline (the same results as `compare`).
                    let r = match (cmp, t) {
                        (Cmp::Eq, T::U64 | T::S64) => av == bv,
                        (Cmp::Ne, T::U64 | T::S64) => av != bv,
                        (Cmp::Eq, T::U32 | T::S32) => av as u32 == bv as u32,
                        (Cmp::Ne, T::U32 | T::S32) => av as u32 != bv as u32,
                        (Cmp::Lt | Cmp::Lo, T::U64) | (Cmp::Lo, T::S64) => av < bv,
                        (Cmp::Lt | Cmp::Lo, T::U32) | (Cmp::Lo, T::S32) => (av as u32) < bv as u32,
                        (Cmp::Lt, T::S64) => (av as i64) < bv as i64,
                        (Cmp::Lt, T::S32) => (av as i32) < bv as i32,
                        (Cmp::Ge, T::S32) => av as i32 >= bv as i32,
                        (Cmp::Ge | Cmp::Hs, T::U32) => av as u32 >= bv as u32,
                        _ => compare(cmp, t, av, bv),
                    };
                    let (p, q) = match comb {
                        None => (r, !r),
                        Some((bop, c, neg)) => {
                            let cv = (regs[c as usize] & 1 == 1) ^ neg;
                            let f = |x: bool| match bop {
                                BoolOp::And => x && cv,
                                BoolOp::Or => x || cv,
                                BoolOp::Xor => x ^ cv,
                            };
                            (f(r), f(!r))
                        }
                    };
                    regs[d as usize] = p as u64;
                    if let Some(dn) = dn {
                        regs[dn as usize] = q as u64;
                    }
                }
                Op::Selp { d, a, b, p } => {
                    regs[d as usize] = if regs[p as usize] & 1 == 1 {
                        regs[a as usize]
                    } else {
                        regs[b as usize]
                    }
                }
                Op::Slct { ct, d, a, b, c } => {
                    let cv = regs[c as usize];
                    let pick_a = if ct == T::F32 {
                        f32::from_bits(cv as u32) >= 0.0
                    } else {
                        cv as u32 as i32 >= 0
                    };
                    regs[d as usize] = if pick_a {
                        regs[a as usize]
                    } else {
                        regs[b as usize]
                    };
                }
                Op::Cvt {
                    dt,
                    st,
                    rnd,
                    sat,
                    ftz,
                    d,
                    a,
                } => {
                    let v = regs[a as usize];
                    // The common integer cases inline (the same results as `fmath::cvt`).
                    regs[d as usize] = match (dt, st, sat) {
                        (T::U32 | T::S32, T::U64 | T::S64 | T::U32 | T::S32, false)
                        | (T::U64 | T::S64, T::U32, false) => v & 0xffff_ffff,
                        (T::U64 | T::S64, T::S32, false) => v as u32 as i32 as i64 as u64,
                        _ => fmath::cvt(dt, st, rnd, sat, ftz, v),
                    };
                }
                Op::CvtNarrow {
                    cvt,
                    rnd,
                    relu,
                    satfinite,
                    d,
                    a,
                    b,
                } => {
                    regs[d as usize] = fmath::cvt_narrow(
                        cvt,
                        rnd,
                        relu,
                        satfinite,
                        regs[a as usize],
                        regs[b as usize],
                    )
                }
                Op::Cvta { to, space, d, a } => {
                    let v = regs[a as usize];
                    let base = match space {
                        Space::Shared => SHARED_BASE,
                        Space::Local => LOCAL_BASE,
                        // Global and const are identity; kernel parameters are already tagged.
                        _ => 0,
                    };
                    regs[d as usize] = if to {
                        if base != 0 && v >= base && v < base + WINDOW {
                            v - base
                        } else {
                            v
                        }
                    } else if space == Space::Param && v >> 48 != 3 {
                        FPARAM_BASE + v
                    } else {
                        v.wrapping_add(base)
                    };
                }
                Op::Isspacep { space, d, a } => {
                    let tag = regs[a as usize] >> 48;
                    regs[d as usize] = match space {
                        Space::Global | Space::Const => tag == 0,
                        Space::Shared => tag == 1,
                        Space::Local => tag == 2,
                        Space::Param => tag == 3 || tag == 4,
                        Space::Generic => true,
                    } as u64;
                }
                Op::Ld {
                    space,
                    t,
                    n,
                    d,
                    addr,
                    off,
                    strong,
                } => {
                    let kind = if strong {
                        SharedAccess::StrongRead
                    } else {
                        SharedAccess::Read
                    };
                    let at = regs[addr as usize].wrapping_add(off as i64 as u64);
                    let size = t.bytes();
                    if n == 1 && self.cached_global(space, at, size as u64, false) {
                        // The common case: a scalar load inside the region of the last one.
                        self.note_global(Access::Read, at, size as u64, th.tid);
                        let mut v = host_load(at, size);
                        if t.signed() {
                            v = sext(v, size * 8) as u64;
                        }
                        th.regs[d[0] as usize] = v;
                        pc += 1;
                        continue;
                    }
                    if n == 1
                        && let Some(o) = shared_offset(space, at, size as u64, shared.len())
                    {
                        // A scalar shared load inside the block's window.
                        self.note_shared(th, pc, o, size as u64, kind);
                        let mut v = rd_bytes(shared, o, size);
                        if t.signed() {
                            v = sext(v, size * 8) as u64;
                        }
                        th.regs[d[0] as usize] = v;
                        pc += 1;
                        continue;
                    }
                    let total = size as u64 * n as u64;
                    th.pc = pc as u32; // for the fault report
                    let loc = match self.locate(th, shared.len(), space, at, total, total, false) {
                        Ok(l) => l,
                        Err(e) => fault!(e),
                    };
                    if let Loc::Shared(o) = loc {
                        self.note_shared(th, pc, o, total, kind);
                    }
                    for k in 0..n as usize {
                        let l = match loc {
                            Loc::Host(x) => Loc::Host(x + (k as u64) * size as u64),
                            Loc::Shared(x) => Loc::Shared(x + k * size as usize),
                            Loc::Local(x) => Loc::Local(x + k * size as usize),
                            Loc::KParam(x) => Loc::KParam(x + k * size as usize),
                            Loc::FParam(x) => Loc::FParam(x + k * size as usize),
                        };
                        let mut v = self.load(th, shared, l, size);
                        if t.signed() {
                            v = sext(v, size * 8) as u64;
                        }
                        th.regs[d[k] as usize] = v;
                    }
                }
                Op::St {
                    space,
                    t,
                    n,
                    s,
                    addr,
                    off,
                    strong,
                } => {
                    let kind = if strong {
                        SharedAccess::AtomicWrite
                    } else {
                        SharedAccess::Write
                    };
                    let at = regs[addr as usize].wrapping_add(off as i64 as u64);
                    let size = t.bytes();
                    if n == 1 && self.cached_global(space, at, size as u64, true) {
                        // The common case: a scalar store inside the region of the last one.
                        self.footprint
                            .note(Access::Write, at, size as u64, self.ctaid, th.tid);
                        host_store(at, size, regs[s[0] as usize]);
                        pc += 1;
                        continue;
                    }
                    if n == 1
                        && let Some(o) = shared_offset(space, at, size as u64, shared.len())
                    {
                        // A scalar shared store inside the block's window.
                        let v = regs[s[0] as usize];
                        let kind = if kind == SharedAccess::Write
                            && self.race.is_some()
                            && rd_bytes(shared, o, size) == low_bytes(v, size)
                        {
                            SharedAccess::WriteSame
                        } else {
                            kind
                        };
                        wr_bytes(shared, o, size, v);
                        self.note_shared(th, pc, o, size as u64, kind);
                        pc += 1;
                        continue;
                    }
                    let total = size as u64 * n as u64;
                    th.pc = pc as u32; // for the fault report
                    let loc = match self.locate(th, shared.len(), space, at, total, total, true) {
                        Ok(l) => l,
                        Err(e) => fault!(e),
                    };
                    if let Loc::Shared(o) = loc {
                        let same = (0..n as usize).all(|k| {
                            rd_bytes(shared, o + k * size as usize, size)
                                == low_bytes(th.regs[s[k] as usize], size)
                        });
                        let kind = if kind == SharedAccess::Write && same {
                            SharedAccess::WriteSame
                        } else {
                            kind
                        };
                        self.note_shared(th, pc, o, total, kind);
                    }
                    for k in 0..n as usize {
                        let l = match loc {
                            Loc::Host(x) => Loc::Host(x + (k as u64) * size as u64),
                            Loc::Shared(x) => Loc::Shared(x + k * size as usize),
                            Loc::Local(x) => Loc::Local(x + k * size as usize),
                            Loc::KParam(x) => Loc::KParam(x + k * size as usize),
                            Loc::FParam(x) => Loc::FParam(x + k * size as usize),
                        };
                        let v = th.regs[s[k] as usize];
                        self.store(th, shared, l, size, v);
                    }
                }
                Op::Atom {
                    space,
                    op,
                    t,
                    d,
                    addr,
                    off,
                    b,
                    c,
                } => {
                    let at = regs[addr as usize].wrapping_add(off as i64 as u64);
                    let (bv, cv) = (regs[b as usize], regs[c as usize]);
                    let size = t.bytes();
                    th.pc = pc as u32; // for the fault report
                    let loc = match self.locate_as(
                        th,
                        shared.len(),
                        space,
                        at,
                        size as u64,
                        size as u64,
                        Access::Atomic,
                    ) {
                        Ok(l) => l,
                        Err(e) => fault!(e),
                    };
                    let old = match loc {
                        Loc::Host(x) if op == AtomOp::Cas && size == 2 => host_cas16(x, bv, cv),
                        Loc::Host(x) => host_atomic(x, t, op, bv, cv),
                        Loc::KParam(_) => fault!(self.fault_oob(th, at, size as u64, true)),
                        other => {
                            if let Loc::Shared(o) = other {
                                self.note_shared(th, pc, o, size as u64, SharedAccess::AtomicWrite);
                            }
                            let old = self.load(th, shared, other, size);
                            self.store(th, shared, other, size, atom_apply(op, t, old, bv, cv));
                            old
                        }
                    };
                    if let Some(d) = d {
                        th.regs[d as usize] = if t.signed() {
                            sext(old, size * 8) as u64 & mask(size * 8)
                        } else {
                            old
                        };
                    }
                }
                Op::Bar { .. } | Op::BarRed { .. } => {
                    th.pc = pc as u32;
                    th.state = St::Bar;
                    return Ok(());
                }
                Op::MbarInit { addr, count } => {
                    let (at, n) = (regs[addr as usize], regs[count as usize] & 0xffff_ffff);
                    th.pc = pc as u32;
                    if let Err(e) = self.mbar_init(th, shared, at, n) {
                        fault!(e);
                    }
                }
                Op::MbarArrive {
                    d,
                    addr,
                    tx,
                    expect,
                } => {
                    let at = regs[addr as usize];
                    let bytes = if expect { regs[tx as usize] } else { 0 };
                    th.pc = pc as u32;
                    self.order_shared();
                    match self.mbar_arrive(th, shared, at, bytes) {
                        Ok(state) => th.regs[d as usize] = state,
                        Err(e) => fault!(e),
                    }
                }
                Op::MbarTryWait { p, addr, parity } => {
                    let (at, parity) = (regs[addr as usize], regs[parity as usize]);
                    th.pc = pc as u32;
                    match self.mbar_test(th, shared, at, parity) {
                        Ok(true) => {
                            self.order_shared();
                            th.regs[p as usize] = 1;
                        }
                        Ok(false) => {
                            // Not yet: let the other threads of the block run (the copy or
                            // the arrival this thread waits for is theirs to make).
                            th.regs[p as usize] = 0;
                            th.pc = pc as u32 + 1;
                            return Ok(());
                        }
                        Err(e) => fault!(e),
                    }
                }
                Op::Tensor { site } => {
                    th.pc = pc as u32;
                    let site = &func.tensor_sites[site as usize];
                    if let Err(e) = self.tensor_copy(th, shared, site) {
                        fault!(e);
                    }
                }
                Op::Shf {
                    left,
                    wrap,
                    d,
                    a,
                    b,
                    c,
                } => {
                    let wide =
                        ((regs[b as usize] & 0xffff_ffff) << 32) | (regs[a as usize] & 0xffff_ffff);
                    let cv = regs[c as usize] as u32;
                    let n = if wrap { cv & 31 } else { cv.min(32) };
                    regs[d as usize] = if left {
                        (wide << n) >> 32
                    } else {
                        (wide >> n) & 0xffff_ffff
                    };
                }
                Op::Sad { t, d, a, b, c } => {
                    let bits = t.bits();
                    let (av, bv) = (regs[a as usize], regs[b as usize]);
                    let diff = if t.signed() {
                        (sext(av, bits) as i128 - sext(bv, bits) as i128).unsigned_abs() as u64
                    } else {
                        (av & mask(bits)).abs_diff(bv & mask(bits))
                    };
                    regs[d as usize] = regs[c as usize].wrapping_add(diff) & mask(bits);
                }
                Op::WarpSync { .. }
                | Op::Shfl { .. }
                | Op::Vote { .. }
                | Op::Redux { .. }
                | Op::Match { .. }
                | Op::Ldmatrix { .. }
                | Op::Mma { .. } => {
                    th.pc = pc as u32;
                    th.state = St::Warp;
                    return Ok(());
                }
                Op::Activemask { d } => {
                    regs[d as usize] = self.live_mask[(th.lin / 32) as usize] as u64;
                }
                Op::Bra { target } => {
                    if (target as usize) <= pc {
                        // A loop: after many iterations let the other threads of the block
                        // run, so that a thread spinning on memory another thread will write
                        // (without a barrier) cannot starve it.
                        budget -= 1;
                        if budget == 0 {
                            th.pc = target;
                            return Ok(());
                        }
                    }
                    pc = target as usize;
                    continue;
                }
                Op::Call { site } => {
                    let cs = &func.calls[site as usize];
                    match &cs.callee {
                        Callee::Func(callee) => {
                            let callee = *callee;
                            let cf = &module.funcs[callee];
                            if th.frames.len() >= MAX_CALL_DEPTH {
                                fault!(self.trap(th));
                            }
                            let pbase = th.pstack.len().next_multiple_of(16);
                            th.pstack.resize(pbase + cf.param_area as usize, 0);
                            for (k, &(off, size)) in cf.args.iter().enumerate() {
                                let src = th.pbase + cs.args[k] as usize;
                                let dst = pbase + off as usize;
                                if src + size as usize > pbase {
                                    fault!(self.trap(th));
                                }
                                th.pstack.copy_within(src..src + size as usize, dst);
                            }
                            let lbase = th.local.len().next_multiple_of(16);
                            th.local.resize(lbase + cf.local_size as usize, 0);
                            let new_regs = self.new_frame_regs(callee, pbase, lbase);
                            let old_regs = std::mem::replace(&mut th.regs, new_regs);
                            th.frames.push(Frame {
                                func: th.func,
                                ret_pc: pc as u32 + 1,
                                regs: old_regs,
                                pbase: th.pbase,
                                lbase: th.lbase,
                                site,
                            });
                            th.func = callee as u32;
                            th.pbase = pbase;
                            th.lbase = lbase;
                            func = cf;
                            code = &func.code;
                            pc = 0;
                            continue;
                        }
                        Callee::Vprintf => {
                            let rd = |th: &Thread, k: usize| -> Option<u64> {
                                let o = th.pbase + *cs.args.get(k)? as usize;
                                th.pstack.get(o..o + 8).map(|b| rd_bytes(b, 0, 8))
                            };
                            let (Some(fmt), Some(argp)) = (rd(th, 0), rd(th, 1)) else {
                                fault!(self.trap(th));
                            };
                            th.pc = pc as u32;
                            let out = {
                                let thr: &Thread = th;
                                let mut rd = |addr: u64, size: u32| {
                                    self.read_generic(thr, shared, addr, size)
                                };
                                crate::printf::vprintf(&mut rd, fmt, argp)?
                            };
                            let len = out.len() as u64;
                            th.printf.push_str(&out);
                            if let Some(&r) = cs.rets.first() {
                                let o = th.pbase + r as usize;
                                if o + 4 <= th.pstack.len() {
                                    wr_bytes(&mut th.pstack, o, 4, len);
                                }
                            }
                        }
                        Callee::AssertFail => {
                            let rd = |th: &Thread, k: usize| -> Option<u64> {
                                let o = th.pbase + *cs.args.get(k)? as usize;
                                let size = if k == 2 { 4 } else { 8 };
                                th.pstack
                                    .get(o..o + size)
                                    .map(|b| rd_bytes(b, 0, size as u32))
                            };
                            let (msg, file, line, fun) =
                                (rd(th, 0), rd(th, 1), rd(th, 2), rd(th, 3));
                            th.pc = pc as u32;
                            let text = {
                                let thr: &Thread = th;
                                let mut rs = |a: Option<u64>| -> String {
                                    let mut out = Vec::new();
                                    let Some(mut a) = a.filter(|&a| a != 0) else {
                                        return String::new();
                                    };
                                    while out.len() < 4096 {
                                        match self.read_generic(thr, shared, a, 1) {
                                            Ok(0) | Err(_) => break,
                                            Ok(b) => out.push(b as u8),
                                        }
                                        a += 1;
                                    }
                                    String::from_utf8_lossy(&out).into_owned()
                                };
                                let (m, f, fu) = (rs(msg), rs(file), rs(fun));
                                format!(
                                    "{f}:{}: {fu}: block: [{},{},{}], thread: [{},{},{}] Assertion `{m}` failed.\n",
                                    line.unwrap_or(0),
                                    self.ctaid[0],
                                    self.ctaid[1],
                                    self.ctaid[2],
                                    thr.tid[0],
                                    thr.tid[1],
                                    thr.tid[2]
                                )
                            };
                            th.printf.push_str(&text);
                            fault!(Fault::Assert {
                                block: self.ctaid,
                                thread: th.tid,
                                message: text.trim_end_matches('\n').to_string(),
                            });
                        }
                        Callee::SetConditional => {
                            let at = |k: usize| {
                                cs.args.get(k).map(|&o| th.pbase.saturating_add(o as usize))
                            };
                            let read = |at: Option<usize>, size: usize| {
                                at.and_then(|o| th.pstack.get(o..o.checked_add(size)?))
                                    .map(|b| rd_bytes(b, 0, size as u32))
                            };
                            let (Some(handle), Some(value)) = (read(at(0), 8), read(at(1), 4))
                            else {
                                fault!(self.trap(th));
                            };
                            th.conditional_sets.push((handle, value as u32));
                        }
                        Callee::Named(n) => {
                            fault!(Fault::NotSupported(format!(
                                "call to unresolved function {n}"
                            )))
                        }
                    }
                }
                Op::Ret => {
                    let Some(frame) = th.frames.pop() else {
                        th.state = St::Exited;
                        th.pc = pc as u32;
                        return Ok(());
                    };
                    let caller = &module.funcs[frame.func as usize];
                    let cs = &caller.calls[frame.site as usize];
                    for (k, &(off, size)) in func.rets.iter().enumerate() {
                        let Some(&dst_off) = cs.rets.get(k) else {
                            break;
                        };
                        let src = th.pbase + off as usize;
                        let dst = frame.pbase + dst_off as usize;
                        if dst + size as usize > th.pbase {
                            fault!(self.trap(th));
                        }
                        th.pstack.copy_within(src..src + size as usize, dst);
                    }
                    th.pstack.truncate(th.pbase);
                    th.local.truncate(th.lbase);
                    th.regs = frame.regs;
                    th.func = frame.func;
                    th.pbase = frame.pbase;
                    th.lbase = frame.lbase;
                    func = caller;
                    code = &func.code;
                    pc = frame.ret_pc as usize;
                    continue;
                }
                Op::Exit => {
                    th.state = St::Exited;
                    th.pc = pc as u32;
                    return Ok(());
                }
                Op::Trap => fault!(self.trap(th)),
            }
            pc += 1;
        }
    }
}

/// The offset in shared memory of an aligned `.shared` access of `len` bytes (a power of
/// two) at `addr` inside a window of `shared_len` bytes: where `W::locate` would put it
/// (`Loc::Shared`) without a fault. `None`: leave it to `locate`.
#[inline]
/// The low `size` bytes of `v`, as a load of them returns them.
fn low_bytes(v: u64, size: u32) -> u64 {
    if size >= 8 {
        v
    } else {
        v & ((1u64 << (size * 8)) - 1)
    }
}

fn shared_offset(space: Space, addr: u64, len: u64, shared_len: usize) -> Option<usize> {
    if space != Space::Shared || addr & (len - 1) != 0 {
        return None;
    }
    let off = if addr >> 48 == 1 {
        addr - SHARED_BASE
    } else {
        addr
    };
    off.checked_add(len)
        .is_some_and(|e| e <= shared_len as u64)
        .then_some(off as usize)
}

/// The result of `setp`/`set`'s comparison.
fn compare(cmp: Cmp, t: T, av: u64, bv: u64) -> bool {
    match t {
        T::F32 => cmp_f(
            cmp,
            f32::from_bits(av as u32) as f64,
            f32::from_bits(bv as u32) as f64,
        ),
        T::F64 => cmp_f(cmp, f64::from_bits(av), f64::from_bits(bv)),
        T::F16 | T::BF16 => cmp_f(cmp, fmath::as_float(t, av), fmath::as_float(t, bv)),
        _ => cmp_int(cmp, t, av, bv),
    }
}

/// The index of block `b` (linear, x fastest).
fn block_index(args: &LaunchArgs, b: u64) -> [u32; 3] {
    let (gx, gy) = (args.grid[0] as u64, args.grid[1] as u64);
    [
        (b % gx) as u32,
        ((b / gx) % gy) as u32,
        (b / (gx * gy)) as u32,
    ]
}

/// Resets `threads` to the start of the entry.
fn init_threads(
    threads: &mut [Thread],
    entry_regs: &[u64],
    ef: &Func,
    entry_func: usize,
    args: &LaunchArgs,
) {
    let (bx, by) = (args.block[0], args.block[1]);
    for (i, t) in threads.iter_mut().enumerate() {
        let i = i as u32;
        t.pc = 0;
        t.func = entry_func as u32;
        t.regs.clear();
        t.regs.extend_from_slice(entry_regs);
        t.frames.clear();
        t.pstack.clear();
        t.pstack.resize(ef.param_area as usize, 0);
        t.local.clear();
        t.local.resize(ef.local_size as usize, 0);
        t.pbase = 0;
        t.lbase = 0;
        t.carry = false;
        t.clock = 0;
        t.state = St::Ready;
        t.tid = [i % bx, (i / bx) % by, i / (bx * by)];
        t.lin = i;
        t.printf.clear();
        t.conditional_sets.clear();
    }
}

/// Whether the threads of a block never wait for each other: neither the entry nor any
/// function it calls (transitively) has a barrier, a warp collective or `activemask`.
fn threads_independent(module: &Module, entry_func: usize) -> bool {
    let mut seen = vec![false; module.funcs.len()];
    let mut todo = vec![entry_func];
    while let Some(f) = todo.pop() {
        if std::mem::replace(&mut seen[f], true) {
            continue;
        }
        let func = &module.funcs[f];
        let collective = func.code.iter().any(|ins| {
            matches!(
                ins.op,
                Op::Bar { .. }
                    | Op::BarRed { .. }
                    | Op::WarpSync { .. }
                    | Op::Shfl { .. }
                    | Op::Vote { .. }
                    | Op::Redux { .. }
                    | Op::Match { .. }
                    | Op::Ldmatrix { .. }
                    | Op::Mma { .. }
                    | Op::Activemask { .. }
            )
        });
        if collective {
            return false;
        }
        for cs in &func.calls {
            if let Callee::Func(g) = cs.callee {
                todo.push(g);
            }
        }
    }
    true
}

/// Runs one block whose threads are independent (see `threads_independent`) on all the
/// workers `ws`: warps are handed out in order; a warp whose threads yielded (long loops)
/// goes back to the end of the queue. Returns the fault of the lowest faulting thread (by
/// linear index): warps below the lowest faulting one always run, later ones may not.
/// Used only without shared memory, so each worker gets an empty shared window.
fn run_block_spread(
    ws: &mut [W],
    threads: &mut [Thread],
    ctaid: [u32; 3],
    b: u64,
) -> Option<(u32, Fault)> {
    let warps: Vec<Mutex<&mut [Thread]>> = threads.chunks_mut(32).map(Mutex::new).collect();
    let queue = Mutex::new((0..warps.len()).collect::<std::collections::VecDeque<usize>>());
    let fault_warp = AtomicUsize::new(usize::MAX);
    let fault: Mutex<Option<(u32, Fault)>> = Mutex::new(None);
    let work = |w: &mut W| {
        w.ctaid = ctaid;
        w.block_lin = b;
        let mut shared: [u8; 0] = [];
        loop {
            let next = queue.lock().ok().and_then(|mut q| q.pop_front());
            let Some(k) = next else { break };
            if k > fault_warp.load(Ordering::Acquire) {
                continue;
            }
            let Ok(mut lanes) = warps[k].lock() else {
                break;
            };
            let mut again = false;
            for t in lanes.iter_mut() {
                if t.state != St::Ready {
                    continue;
                }
                if let Err(f) = w.run_thread(t, &mut shared) {
                    fault_warp.fetch_min(k, Ordering::AcqRel);
                    if let Ok(mut g) = fault.lock()
                        && g.as_ref().is_none_or(|(lin, _)| t.lin < *lin)
                    {
                        *g = Some((t.lin, f));
                    }
                    again = false;
                    break;
                }
                again |= t.state == St::Ready;
            }
            drop(lanes);
            if again && let Ok(mut q) = queue.lock() {
                q.push_back(k);
            }
        }
    };
    let (first, rest) = ws.split_first_mut()?;
    std::thread::scope(|s| {
        for w in rest {
            s.spawn(|| work(w));
        }
        work(first);
    });
    fault.into_inner().ok().flatten()
}

struct WorkerResult {
    touched: Vec<u8>,
    footprint: Vec<Span>,
    unread: Vec<Span>,
    printf: Vec<(u64, String)>,
    /// Conditional sets by block.
    sets: Vec<(u64, Vec<(u64, u32)>)>,
    fault: Option<(u64, Fault)>,
    /// Racecheck: the first hazard (with its block's linear index) and the racing accesses.
    race: Option<(u64, SharedRace)>,
    races: u64,
    instructions: u64,
}

// The fault comes with what the launch did before it (touched regions, printf, condition
// sets), once per launch: boxing it would buy nothing.
#[allow(clippy::result_large_err)]
pub(crate) fn run(
    module: &Module,
    memory: &dyn Memory,
    args: &LaunchArgs,
) -> Result<Outcome, (Fault, Outcome)> {
    let empty = || Outcome {
        touched: Vec::new(),
        footprint: Vec::new(),
        uninitialised_reads: Vec::new(),
        printf: String::new(),
        conditional_sets: Vec::new(),
        shared_race: None,
        instructions: 0,
    };
    let Some(&entry_func) = module.entry_funcs.get(args.entry) else {
        return Err((
            Fault::NotSupported(format!("no entry {}", args.entry)),
            empty(),
        ));
    };
    let nthreads = args
        .block
        .iter()
        .fold(1u64, |a, &x| a.saturating_mul(x as u64));
    let nblocks = args
        .grid
        .iter()
        .fold(1u64, |a, &x| a.saturating_mul(x as u64));
    if nthreads == 0 || nblocks == 0 {
        return Ok(empty());
    }
    // The GPU's limits (checked by the driver before a launch; repeated here so that no
    // input can make the interpreter overflow or allocate without bound).
    if args.grid[0] >= 1 << 31 || args.grid[1] > 65535 || args.grid[2] > 65535 {
        return Err((
            Fault::NotSupported(format!("grid {:?} beyond the GPU's limits", args.grid)),
            empty(),
        ));
    }
    if args.block[2] > 64 || args.dynamic_shared > MAX_DYNAMIC_SHARED {
        return Err((
            Fault::NotSupported(format!(
                "block {:?} with {} bytes of dynamic shared memory beyond the GPU's limits",
                args.block, args.dynamic_shared
            )),
            empty(),
        ));
    }
    if nthreads > MAX_BLOCK_THREADS {
        return Err((
            Fault::NotSupported(format!("blocks of {nthreads} threads (at most 1024)")),
            empty(),
        ));
    }
    let layout = &module.shared_layouts[args.entry];
    // Templates with module-variable and shared-variable addresses.
    let prep: Vec<Vec<u64>> = module
        .funcs
        .iter()
        .map(|f| {
            let mut regs = f.init.clone();
            for (r, p) in &f.patches {
                match p {
                    Patch::Global(i, off) => {
                        regs[*r as usize] = args
                            .globals
                            .get(*i)
                            .copied()
                            .unwrap_or(0)
                            .wrapping_add(*off as u64);
                    }
                    Patch::Shared(i, off) => {
                        let base = match layout.offsets.get(*i) {
                            Some(&o) => o,
                            None => layout.dyn_base,
                        };
                        regs[*r as usize] = base.wrapping_add(*off as u64);
                    }
                    _ => {}
                }
            }
            regs
        })
        .collect();
    let dyn_smem = args.dynamic_shared as u64;
    let shared_bytes = if module.funcs.is_empty() {
        0
    } else {
        layout.dyn_base + dyn_smem
    };
    let total_smem = shared_bytes;
    let next = AtomicUsize::new(0);
    let fault_at = AtomicU64::new(u64::MAX);
    let results = Mutex::new(Vec::new());
    let new_w = || W {
        module,
        mem: memory,
        args,
        prep: prep.clone(),
        ctaid: [0; 3],
        block_lin: 0,
        touched: vec![0; memory.regions()],
        footprint: Recorder::new(),
        watch: memory.uninitialised(),
        unread: Recorder::new(),
        live_mask: vec![0; (nthreads as usize).div_ceil(32)],
        dyn_smem,
        total_smem,
        cache: [RegionCache::EMPTY; 2],
        race: (args.racecheck && shared_bytes > 0)
            .then(|| Shadow::new(shared_bytes as usize, args.block)),
        instructions: 0,
    };
    let ef = &module.funcs[entry_func];
    let all_workers = args.workers.clamp(1, 64);
    // Fewer blocks than workers, no barrier or warp collective, no shared memory: the
    // threads of each block are spread over the workers (by warps).
    if (nblocks as usize) < all_workers
        && nthreads > 32
        && shared_bytes == 0
        && threads_independent(module, entry_func)
    {
        let mut ws: Vec<W> = (0..all_workers).map(|_| new_w()).collect();
        let entry_regs = ws[0].new_frame_regs(entry_func, 0, 0);
        let mut threads: Vec<Thread> = (0..nthreads).map(|_| Thread::new()).collect();
        let mut res = WorkerResult {
            touched: Vec::new(),
            footprint: Vec::new(),
            unread: Vec::new(),
            printf: Vec::new(),
            sets: Vec::new(),
            fault: None,
            race: None,
            races: 0,
            instructions: 0,
        };
        for b in 0..nblocks {
            let ctaid = block_index(args, b);
            init_threads(&mut threads, &entry_regs, ef, entry_func, args);
            let fault = run_block_spread(&mut ws, &mut threads, ctaid, b);
            let upto = fault.as_ref().map_or(u32::MAX, |(lin, _)| *lin);
            let mut text = String::new();
            let mut sets = Vec::new();
            for t in threads.iter().filter(|t| t.lin <= upto) {
                text.push_str(&t.printf);
                sets.extend_from_slice(&t.conditional_sets);
            }
            if !text.is_empty() {
                res.printf.push((b, text));
            }
            if !sets.is_empty() {
                res.sets.push((b, sets));
            }
            if let Some((_, f)) = fault {
                fault_at.fetch_min(b, Ordering::AcqRel);
                res.fault = Some((b, f));
                break;
            }
        }
        let mut all = vec![res];
        for w in ws {
            all.push(WorkerResult {
                touched: w.touched,
                footprint: w.footprint.finish(),
                unread: w.unread.finish(),
                printf: Vec::new(),
                sets: Vec::new(),
                fault: None,
                race: None,
                races: 0,
                instructions: w.instructions,
            });
        }
        if let Ok(mut r) = results.lock() {
            *r = all;
        }
    } else {
        let workers = all_workers.min(nblocks.min(64) as usize);
        let work = || {
            let mut w = new_w();
            let entry_regs = w.new_frame_regs(entry_func, 0, 0);
            let mut threads: Vec<Thread> = (0..nthreads).map(|_| Thread::new()).collect();
            let mut shared = vec![0u8; shared_bytes as usize];
            let mut res = WorkerResult {
                touched: Vec::new(),
                footprint: Vec::new(),
                unread: Vec::new(),
                printf: Vec::new(),
                sets: Vec::new(),
                fault: None,
                race: None,
                races: 0,
                instructions: 0,
            };
            loop {
                let b = next.fetch_add(1, Ordering::Relaxed) as u64;
                if b >= nblocks || b > fault_at.load(Ordering::Acquire) {
                    break;
                }
                w.ctaid = block_index(args, b);
                w.block_lin = b;
                if let Some(race) = w.race.as_mut() {
                    race.start_block(w.ctaid, b);
                }
                shared.fill(0);
                for (i, m) in w.live_mask.iter_mut().enumerate() {
                    let n = (nthreads as usize - i * 32).min(32);
                    *m = if n == 32 { !0 } else { (1u32 << n) - 1 };
                }
                init_threads(&mut threads, &entry_regs, ef, entry_func, args);
                let r = w.run_block(&mut threads, &mut shared);
                let mut text = String::new();
                let mut sets = Vec::new();
                for t in &threads {
                    text.push_str(&t.printf);
                    sets.extend_from_slice(&t.conditional_sets);
                }
                if !text.is_empty() {
                    res.printf.push((b, text));
                }
                if !sets.is_empty() {
                    res.sets.push((b, sets));
                }
                if let Err(f) = r {
                    fault_at.fetch_min(b, Ordering::AcqRel);
                    res.fault = Some((b, f));
                    break;
                }
            }
            res.touched = w.touched;
            res.footprint = w.footprint.finish();
            res.unread = w.unread.finish();
            res.instructions = w.instructions;
            if let Some(race) = w.race {
                res.race = race.found;
                res.races = race.count;
            }
            if let Ok(mut all) = results.lock() {
                all.push(res);
            }
        };
        std::thread::scope(|s| {
            for _ in 1..workers {
                s.spawn(work);
            }
            work();
        });
    }
    let all = results.into_inner().unwrap_or_default();
    let limit = fault_at.load(Ordering::Acquire);
    let mut touched_bits = vec![0u8; memory.regions()];
    let mut printf: Vec<(u64, String)> = Vec::new();
    let mut sets: Vec<(u64, Vec<(u64, u32)>)> = Vec::new();
    let mut fault: Option<(u64, Fault)> = None;
    let mut footprint: Vec<Span> = Vec::new();
    let mut unread: Vec<Span> = Vec::new();
    let mut shared_race: Option<(u64, SharedRace)> = None;
    let mut races = 0;
    let mut instructions = 0;
    for r in all {
        races += r.races;
        instructions += r.instructions;
        if let Some((b, race)) = r.race
            && b <= limit
            && shared_race.as_ref().is_none_or(|(rb, _)| b < *rb)
        {
            shared_race = Some((b, race));
        }
        footprint.extend(r.footprint);
        unread.extend(r.unread);
        for (i, &t) in r.touched.iter().enumerate() {
            if i >= touched_bits.len() {
                touched_bits.resize(i + 1, 0);
            }
            touched_bits[i] |= t;
        }
        printf.extend(r.printf.into_iter().filter(|(b, _)| *b <= limit));
        sets.extend(r.sets.into_iter().filter(|(b, _)| *b <= limit));
        if let Some((b, f)) = r.fault
            && fault.as_ref().is_none_or(|(fb, _)| b < *fb)
        {
            fault = Some((b, f));
        }
    }
    merge(&mut footprint);
    merge(&mut unread);
    printf.sort_by_key(|(b, _)| *b);
    sets.sort_by_key(|(b, _)| *b);
    let outcome = Outcome {
        touched: touched_bits
            .iter()
            .enumerate()
            .filter(|(_, t)| **t != 0)
            .map(|(i, t)| (i, *t & 2 != 0))
            .collect(),
        footprint,
        uninitialised_reads: unread,
        printf: printf.into_iter().map(|(_, s)| s).collect(),
        conditional_sets: sets.into_iter().flat_map(|(_, s)| s).collect(),
        shared_race: shared_race.map(|(_, race)| SharedRace {
            count: races,
            ..race
        }),
        instructions,
    };
    match fault {
        Some((_, f)) => Err((f, outcome)),
        None => Ok(outcome),
    }
}
