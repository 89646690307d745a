//! A PTX interpreter: parses PTX text (as NVRTC emits it) into a compact IR and runs kernels
//! on the CPU, with every global access checked by the caller-supplied [`Memory`].
//!
//! * Device pointers are host addresses: a global access at `A` reads or writes host memory
//!   at `A`, only after [`Memory::check`] approved the range; otherwise the kernel stops with
//!   [`Fault::OutOfBounds`].
//! * Shared, local and parameter memory live inside the interpreter. Their generic addresses
//!   are tagged windows above 2^48 (shared `1<<48`, local `2<<48`, kernel parameters `3<<48`,
//!   call parameters `4<<48`), which cannot collide with host user-space addresses.
//! * Blocks run in parallel on `LaunchArgs::workers` threads; the threads of a block are
//!   interleaved cooperatively (each runs until `bar.sync`, a warp collective or its end).
//!   With fewer blocks than workers, a kernel without barriers, warp collectives,
//!   `activemask` and shared memory has the warps of each block spread over all workers.
//! * Device `printf` output is ordered by block, then by thread within the block (the GPU's
//!   order is unspecified).
//! * Static shared memory is laid out per entry: only the `.shared` variables the entry and
//!   the functions it calls reference (NVRTC declares them all at module scope), so an
//!   access outside the entry's own static + dynamic window faults.

#![deny(missing_docs)]
#![allow(clippy::too_many_arguments, clippy::needless_range_loop)]

mod decode;
mod exec;
mod fmath;
mod footprint;
mod ialu;
mod ir;
mod lex;
mod lowp;
mod memory;
mod parse;
mod printf;
mod racecheck;
mod scope;
mod tma;
mod warp;

pub use footprint::{Access, Span};
pub use tma::TensorMapDesc;

/// The interpreter's conversions between `f32` and the 16-bit floats (`f16`, `bf16`), for
/// code outside it that must round exactly as `cvt` does (the simulated cuBLAS): one home for
/// the rounding rule.
pub mod convert {
    /// `f16` bits to `f32` (exact).
    pub fn f16_to_f32(h: u16) -> f32 {
        crate::fmath::f16_to_f32(h)
    }

    /// `f32` to `f16` bits, rounded to nearest even (`cvt.rn.f16.f32`).
    pub fn f32_to_f16(x: f32) -> u16 {
        crate::fmath::f32_to_f16(x)
    }

    /// `bf16` bits to `f32` (exact).
    pub fn bf16_to_f32(h: u16) -> f32 {
        crate::lowp::bf16_to_f32(h)
    }

    /// `f32` to `bf16` bits, rounded to nearest even (`cvt.rn.bf16.f32`).
    pub fn f32_to_bf16(x: f32) -> u16 {
        crate::lowp::to_bf16(f64::from(x), crate::ir::Rnd::N)
    }
}

use std::collections::HashMap;

/// One kernel parameter: where it lies in the parameter buffer, and how many bytes it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// Byte offset in the parameter buffer.
    pub offset: usize,
    /// Bytes of the parameter.
    pub size: usize,
}

/// One `.visible .entry` (or `.weak .entry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name, as the host looks it up.
    pub name: String,
    /// Its parameters, in order.
    pub params: Vec<Param>,
}

impl Entry {
    /// Bytes of the parameter buffer (end of the last parameter).
    pub fn param_bytes(&self) -> usize {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }

    /// The parameter sizes.
    pub fn sizes(&self) -> Vec<usize> {
        self.params.iter().map(|p| p.size).collect()
    }
}

/// State space of a module variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// `.global`: device memory, readable and writable by kernels and the host.
    Global,
    /// `.const`: constant memory, read-only for kernels.
    Const,
}

/// A module-scope `.global` or `.const` variable (also function-scope ones, which are
/// module variables too). `init` has `size` bytes: the initialiser, zero-filled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalVar {
    /// The variable's name (`cuModuleGetGlobal` looks it up).
    pub name: String,
    /// Its state space.
    pub space: Space,
    /// Bytes.
    pub size: u64,
    /// Alignment in bytes.
    pub align: u64,
    /// The initial contents, `size` bytes.
    pub init: Vec<u8>,
}

/// Why a module cannot be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// The text is not PTX, or is malformed.
    Invalid(String),
    /// Valid PTX using something this interpreter does not implement (named).
    NotSupported(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Invalid(s) => write!(f, "invalid PTX: {s}"),
            LoadError::NotSupported(s) => write!(f, "not supported: {s}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// A parsed PTX module.
pub struct Module {
    /// The PTX ISA version of its `.version` directive, (major, minor).
    pub version: (u32, u32),
    /// The visible entries, in the order of the text.
    pub entries: Vec<Entry>,
    /// The module variables, in the order of the text.
    pub globals: Vec<GlobalVar>,
    funcs: Vec<ir::Func>,
    entry_funcs: Vec<usize>,
    shared_layouts: Vec<SharedLayout>,
}

/// Static shared memory of one entry.
pub(crate) struct SharedLayout {
    /// Offset of each static `.shared` variable of the module (meaningful for those the
    /// entry references).
    pub(crate) offsets: Vec<u64>,
    pub(crate) static_bytes: u64,
    /// Where dynamic shared memory starts.
    pub(crate) dyn_base: u64,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("entries", &self.entries)
            .field("globals", &self.globals)
            .field("functions", &self.funcs.len())
            .finish()
    }
}

impl Module {
    /// Parses and decodes PTX text. Anything not implemented is `NotSupported` here, never
    /// a wrong result later.
    pub fn parse(text: &str) -> Result<Module, LoadError> {
        parse::parse_module(text)
    }

    /// Index of the entry called `name` in `entries`.
    pub fn entry(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.name == name)
    }

    /// Bytes of static shared memory a block of this entry uses: the `.shared` variables
    /// that the entry and the functions it calls reference.
    pub fn shared_static_bytes(&self, entry: usize) -> u64 {
        self.shared_layouts.get(entry).map_or(0, |l| l.static_bytes)
    }

    /// Bytes of local memory per thread: the entry's `.local` variables plus the deepest
    /// chain of calls' (each frame 16-byte aligned; recursion counted once).
    pub fn local_bytes(&self, entry: usize) -> u64 {
        let Some(&f) = self.entry_funcs.get(entry) else {
            return 0;
        };
        let mut memo = HashMap::new();
        self.stack_bytes(f, &mut memo)
    }

    fn stack_bytes(&self, f: usize, memo: &mut HashMap<usize, u64>) -> u64 {
        if let Some(&v) = memo.get(&f) {
            return v;
        }
        let own = self.funcs[f].local_size.next_multiple_of(16);
        memo.insert(f, own); // cycle guard
        let deepest = self.funcs[f]
            .calls
            .iter()
            .filter_map(|c| match c.callee {
                ir::Callee::Func(g) => Some(g),
                _ => None,
            })
            .map(|g| self.stack_bytes(g, memo))
            .max()
            .unwrap_or(0);
        let total = own.saturating_add(deepest);
        memo.insert(f, total);
        total
    }

    /// Bytes of all `.const` variables of the module.
    pub fn const_bytes(&self) -> u64 {
        self.globals
            .iter()
            .filter(|g| g.space == Space::Const)
            .map(|g| g.size)
            .sum()
    }
}

/// What the simulator supplies: the address check. Must be Sync (blocks run on several
/// threads).
pub trait Memory: Sync {
    /// `Some(region)` when [addr, addr+len) lies inside one live region (an allocation or a
    /// module variable) that may be accessed this way; `None` otherwise. `region` is a small
    /// index (< regions()).
    fn check(&self, addr: u64, len: u64, write: bool) -> Option<usize>;
    /// How many regions there are: every index `check` returns is below it.
    fn regions(&self) -> usize;
    /// Optional: the bounds `[start, end)` of region `region`, so that the interpreter can
    /// skip `check` for later accesses that fall inside a region `check` already approved.
    ///
    /// Returning `Some((start, end))` promises that, for the whole launch, whenever
    /// `check(a, l, w)` returned `Some(region)`, `check(a2, l2, w)` (same `w`) would return
    /// `Some(region)` for every `[a2, a2 + l2)` inside `[start, end)`. The default, `None`,
    /// makes the interpreter call `check` for every access.
    fn region_bounds(&self, region: usize) -> Option<(u64, u64)> {
        let _ = region;
        None
    }
    /// Optional: sorted, disjoint `[start, end)` ranges of global memory never written
    /// before the launch. Loads touching them are listed in
    /// [`Outcome::uninitialised_reads`]. The default, none, records nothing.
    fn uninitialised(&self) -> &[(u64, u64)] {
        &[]
    }
}

/// One launch: the entry, its shape, its arguments and where the module variables live.
pub struct LaunchArgs<'a> {
    /// Index into `Module::entries`.
    pub entry: usize,
    /// Blocks in x, y and z.
    pub grid: [u32; 3],
    /// Threads per block in x, y and z.
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory per block.
    pub dynamic_shared: u32,
    /// The parameter buffer laid out as `Entry::params` says.
    pub params: &'a [u8],
    /// Device (= host) address of each `Module::globals[i]`.
    pub globals: &'a [u64],
    /// CPU threads to use (>= 1).
    pub workers: usize,
    /// Check barriers and warp collectives as compute-sanitizer's synccheck does on sm_70
    /// and later: a warp collective whose executing lane is not in its own member mask, or
    /// whose mask names a live lane that waits elsewhere (another warp collective, a block
    /// barrier) so the warp cannot go on, is [`Fault::BadWarpMask`]; threads of a block
    /// waiting at different barriers (or a barrier and a warp collective) so the block
    /// cannot finish is [`Fault::BarrierDivergence`]. Exited and absent lanes named by a
    /// mask, and exited threads at a block barrier, are fine (a barrier waits only for the
    /// threads that have not exited). Off: a block that cannot finish is
    /// [`Fault::Deadlock`], and a lane outside its own mask is not checked.
    pub synccheck: bool,
    /// Look for shared-memory hazards between the threads of a block, as
    /// compute-sanitizer's racecheck does: [`Outcome::shared_race`]. The launch itself runs
    /// as without it.
    pub racecheck: bool,
}

/// What a launch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Regions touched, and whether written (each region once, by region index).
    pub touched: Vec<(usize, bool)>,
    /// The global bytes the launch's threads loaded, stored and updated atomically, merged
    /// into ranges: sorted by kind of access, then address (see [`Span`]).
    pub footprint: Vec<Span>,
    /// The loads that touched [`Memory::uninitialised`] memory, merged into ranges the same
    /// way (each range's witness is the first such load of its lowest part). The bytes the
    /// launch itself stored are not subtracted: the caller does that with `footprint`.
    pub uninitialised_reads: Vec<Span>,
    /// Device printf output: by block, then by thread within a block.
    pub printf: String,
    /// `cudaGraphSetConditional(handle, value)` calls, as `(handle, value)`: by block, then
    /// by thread within a block, in each thread's order (the last one of a handle wins).
    pub conditional_sets: Vec<(u64, u32)>,
    /// (`LaunchArgs::racecheck`) the first shared-memory hazard of the launch's lowest
    /// block that had one, and how many racing accesses all blocks made.
    pub shared_race: Option<SharedRace>,
    /// The instructions the launch's threads issued, guarded-off ones included (for a fault,
    /// up to it): what the simulated driver turns into the launch's duration.
    pub instructions: u64,
}

/// A shared-memory hazard: two threads of one block touched the same bytes of `.shared`
/// memory, at least one with a plain (non-atomic) store, with no barrier (block barrier,
/// `bar.warp.sync` naming both, fence) between the two accesses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedRace {
    /// Read after write, write after read, or write after write (the order the simulator
    /// ran them in; on a GPU either may come first).
    pub hazard: Hazard,
    /// The block's index.
    pub block: [u32; 3],
    /// The thread of the earlier access.
    pub first: [u32; 3],
    /// The thread of the later access.
    pub second: [u32; 3],
    /// The lowest racing byte's offset in the block's shared memory window.
    pub offset: u64,
    /// How many bytes of the later access race (from `offset`).
    pub bytes: u64,
    /// The later access's instruction, as text.
    pub pc_text: String,
    /// Racing accesses in the whole launch (each counted once, at its first racing byte).
    pub count: u64,
}

/// The kind of a [`SharedRace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hazard {
    /// A load of bytes another thread stored.
    ReadAfterWrite,
    /// A store to bytes another thread loaded.
    WriteAfterRead,
    /// A store to bytes another thread stored.
    WriteAfterWrite,
}

impl Hazard {
    /// `RAW`, `WAR` or `WAW`.
    pub fn abbreviation(self) -> &'static str {
        match self {
            Hazard::ReadAfterWrite => "RAW",
            Hazard::WriteAfterRead => "WAR",
            Hazard::WriteAfterWrite => "WAW",
        }
    }
}

/// Why a launch stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// An access that `Memory::check` (or the bounds of shared, local or parameter memory)
    /// refused; nothing was read or written by it.
    OutOfBounds {
        /// The block's index.
        block: [u32; 3],
        /// The thread's index in its block.
        thread: [u32; 3],
        /// The address accessed.
        addr: u64,
        /// Bytes accessed.
        len: u64,
        /// A store (or atomic), not a load.
        write: bool,
        /// The instruction, as text.
        pc_text: String,
    },
    /// A global, shared, local or atomic access whose address is not a multiple of its
    /// size (or of the vector's total size); nothing was read or written by it.
    Misaligned {
        /// The block's index.
        block: [u32; 3],
        /// The thread's index in its block.
        thread: [u32; 3],
        /// The address accessed.
        addr: u64,
        /// Bytes accessed.
        len: u64,
        /// A store (or atomic), not a load.
        write: bool,
        /// The instruction, as text.
        pc_text: String,
    },
    /// A device-side `assert()` failed (`__assertfail`): the driver reports
    /// `CUDA_ERROR_ASSERT`. The message is also in the printf output.
    Assert {
        /// The block's index.
        block: [u32; 3],
        /// The thread's index in its block.
        thread: [u32; 3],
        /// The line CUDA prints (`file:line: function: block: [..], thread: [..] Assertion
        /// `expr` failed.`), without the final newline.
        message: String,
    },
    /// Something met at run time that is not implemented.
    NotSupported(String),
    /// A hardware exception: `trap`, `brkpt`, call-stack overflow, a thread running past
    /// the end of its function.
    Trap {
        /// The block's index.
        block: [u32; 3],
        /// The thread's index in its block.
        thread: [u32; 3],
        /// The instruction (or what happened), as text.
        pc_text: String,
    },
    /// E.g. `bar.sync` not reached by all threads of a block (with `LaunchArgs::synccheck`
    /// off; on, this is [`Fault::BarrierDivergence`]).
    Deadlock(String),
    /// (`LaunchArgs::synccheck`) a block barrier reached by some threads of a block while
    /// others wait at another barrier or collective, so the block cannot finish.
    BarrierDivergence {
        /// The block's index.
        block: [u32; 3],
        /// One thread waiting at the barrier.
        thread: [u32; 3],
        /// The barrier's instruction, as text.
        pc_text: String,
        /// Who waits where, and who exited.
        detail: String,
    },
    /// (`LaunchArgs::synccheck`) a warp collective (`bar.warp.sync`, `shfl.sync`,
    /// `vote.sync`, `match.sync`, `redux.sync`) whose executing lane is not in its own
    /// member mask, or whose mask names a live lane that waits at another warp collective or
    /// a block barrier, so that the warp cannot go on.
    BadWarpMask {
        /// The block's index.
        block: [u32; 3],
        /// The thread whose mask it is.
        thread: [u32; 3],
        /// The member mask.
        mask: u32,
        /// What is wrong with it.
        detail: String,
        /// The instruction, as text.
        pc_text: String,
    },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::OutOfBounds {
                block,
                thread,
                addr,
                len,
                write,
                pc_text,
            } => write!(
                f,
                "out-of-bounds {} of {len} bytes at {addr:#x} by block {block:?} thread {thread:?}: {pc_text}",
                if *write { "write" } else { "read" }
            ),
            Fault::Misaligned {
                block,
                thread,
                addr,
                len,
                write,
                pc_text,
            } => write!(
                f,
                "misaligned {} of {len} bytes at {addr:#x} by block {block:?} thread {thread:?}: {pc_text}",
                if *write { "write" } else { "read" }
            ),
            Fault::Assert {
                block,
                thread,
                message,
            } => write!(
                f,
                "assertion failed in block {block:?} thread {thread:?}: {message}"
            ),
            Fault::NotSupported(s) => write!(f, "not supported: {s}"),
            Fault::Trap {
                block,
                thread,
                pc_text,
            } => write!(
                f,
                "hardware exception in block {block:?} thread {thread:?}: {pc_text}"
            ),
            Fault::Deadlock(s) => write!(f, "deadlock: {s}"),
            Fault::BarrierDivergence {
                block,
                thread,
                pc_text,
                detail,
            } => write!(
                f,
                "divergent barrier in block {block:?} (thread {thread:?} at {pc_text}): {detail}"
            ),
            Fault::BadWarpMask {
                block,
                thread,
                mask,
                detail,
                pc_text,
            } => write!(
                f,
                "member mask {mask:#010x} of block {block:?} thread {thread:?}: {detail}: {pc_text}"
            ),
        }
    }
}

impl std::error::Error for Fault {}

/// Runs one launch. On a fault, the `Outcome` still lists what was touched before it.
///
/// Integer division by zero does not fault (as on the GPU): the quotient is all ones, the
/// remainder the dividend.
// The fault comes with what the launch did before it (touched regions, printf, condition
// sets), once per launch: boxing it would buy nothing.
#[allow(clippy::result_large_err)]
pub fn run(
    module: &Module,
    memory: &dyn Memory,
    args: &LaunchArgs,
) -> Result<Outcome, (Fault, Outcome)> {
    exec::run(module, memory, args)
}
