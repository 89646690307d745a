//! The decoded form of a PTX function: instructions over register indices, with every
//! immediate and symbol address turned into a (constant or patched) register slot, so that
//! execution does no string work at all.

/// Where the kernel parameter buffer sits in the generic address space: `ld.param` of a kernel
/// parameter, and a generic address taken of one, read at this base plus the offset.
pub(crate) const KPARAM_BASE: u64 = 3 << 48;

/// Index into a frame's register file (`Vec<u64>`).
pub(crate) type R = u32;

/// A scalar type as an instruction names it (`.b*` are folded into `.u*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum T {
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    /// bfloat16: the top half of an f32.
    BF16,
    /// Two f16 in a 32-bit register (lane 0 in the low half).
    F16X2,
    /// Two bf16 in a 32-bit register (lane 0 in the low half).
    BF16X2,
    F32,
    F64,
    Pred,
}

impl T {
    pub(crate) fn from_name(name: &str) -> Option<T> {
        Some(match name {
            "u8" | "b8" => T::U8,
            "u16" | "b16" => T::U16,
            "u32" | "b32" => T::U32,
            "u64" | "b64" => T::U64,
            "s8" => T::S8,
            "s16" => T::S16,
            "s32" => T::S32,
            "s64" => T::S64,
            "f16" => T::F16,
            "bf16" => T::BF16,
            "f16x2" => T::F16X2,
            "bf16x2" => T::BF16X2,
            "f32" => T::F32,
            "f64" => T::F64,
            "pred" => T::Pred,
            _ => return None,
        })
    }
    pub(crate) fn bytes(self) -> u32 {
        match self {
            T::U8 | T::S8 | T::Pred => 1,
            T::U16 | T::S16 | T::F16 | T::BF16 => 2,
            T::U32 | T::S32 | T::F32 | T::F16X2 | T::BF16X2 => 4,
            T::U64 | T::S64 | T::F64 => 8,
        }
    }
    pub(crate) fn bits(self) -> u32 {
        self.bytes() * 8
    }
    pub(crate) fn signed(self) -> bool {
        matches!(self, T::S8 | T::S16 | T::S32 | T::S64)
    }
    pub(crate) fn float(self) -> bool {
        matches!(
            self,
            T::F16 | T::BF16 | T::F16X2 | T::BF16X2 | T::F32 | T::F64
        )
    }
    /// The lane type of a packed pair (`.f16x2`, `.bf16x2`).
    pub(crate) fn lane(self) -> Option<T> {
        match self {
            T::F16X2 => Some(T::F16),
            T::BF16X2 => Some(T::BF16),
            _ => None,
        }
    }
    /// The 16-bit float types and their packed pairs: arithmetic only with `.rn`, no `.sat`
    /// for bf16.
    pub(crate) fn half(self) -> bool {
        matches!(self, T::F16 | T::BF16 | T::F16X2 | T::BF16X2)
    }
    pub(crate) fn int(self) -> bool {
        !self.float() && self != T::Pred
    }
}

/// Floating-point rounding of an arithmetic result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rnd {
    N,
    Z,
    M,
    P,
}

/// Rounding of `cvt`: to an integer value (`.rni` …) or of the float result (`.rn` …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CvtRnd {
    None,
    Int(Rnd),
    Float(Rnd),
}

/// A narrow float format of `cvt`'s packed and saturating forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Narrow {
    F16,
    Bf16,
    E4m3,
    E5m2,
}

/// The shape of a narrow `cvt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NarrowCvt {
    /// `cvt.frnd{.relu}{.satfinite}.{f16,bf16}.f32 d, a`: one f32 to one narrow value.
    One(Narrow),
    /// `cvt.frnd{.relu}{.satfinite}.{f16x2,bf16x2,e4m3x2,e5m2x2}.f32 d, a, b`: `a` into the
    /// upper lane, `b` into the lower one.
    Pair(Narrow),
    /// `cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f16x2 d, a`: each f16 lane to the fp8 byte
    /// at the same position.
    FromF16x2(Narrow),
    /// `cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, a`: each fp8 byte to the f16 lane at the same
    /// position.
    ToF16x2(Narrow),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IOp {
    Add,
    Sub,
    MulLo,
    MulHi,
    MulWide,
    Mul24Lo,
    Mul24Hi,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    /// add/sub with carry: (carry in, carry out)
    AddC(bool, bool),
    /// `add.sat.s32` / `sub.sat.s32`: clamped to the s32 range.
    AddSat,
    SubSat,
    SubC(bool, bool),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IUn {
    Not,
    Neg,
    Abs,
    Popc,
    Clz,
    Brev,
    Bfind(bool),
    Cnot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MadMode {
    Lo,
    Hi,
    Wide,
    Lo24,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    /// `min.NaN`/`max.NaN`: NaN when either operand is NaN.
    MinNan,
    MaxNan,
    Copysign,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FUn {
    Abs,
    Neg,
    Rcp,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Ex2,
    Lg2,
    Tanh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Testp {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Generic,
    Global,
    Shared,
    Local,
    Param,
    Const,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    Inc,
    Dec,
    And,
    Or,
    Xor,
    Exch,
    Cas,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BarRedOp {
    Popc,
    And,
    Or,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Idx,
    Up,
    Down,
    Bfly,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sreg {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    Laneid,
    Warpid,
    Nwarpid,
    Smid,
    Nsmid,
    Gridid,
    Clock,
    ClockHi,
    Clock64,
    Globaltimer,
    GlobaltimerLo,
    GlobaltimerHi,
    LanemaskEq,
    LanemaskLe,
    LanemaskLt,
    LanemaskGe,
    LanemaskGt,
    DynSmem,
    TotalSmem,
    Zero,
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    Nop,
    /// `membar`, `fence`: the interpreter's execution already orders memory; racecheck
    /// takes it as a block-wide ordering point.
    Fence,
    /// `mbarrier.init`: the barrier at shared `addr` expects `count` arrivals.
    MbarInit {
        addr: R,
        count: R,
    },
    /// `mbarrier.arrive[.expect_tx]`: one arrival (after raising the transaction count by
    /// `tx` when `expect`), the state before it in `d`.
    MbarArrive {
        d: R,
        addr: R,
        tx: R,
        expect: bool,
    },
    /// `mbarrier.try_wait.parity`: `p` = whether the phase of parity `parity` completed.
    MbarTryWait {
        p: R,
        addr: R,
        parity: R,
    },
    /// `cp.async.bulk.tensor` in either direction: `Func::tensor_sites[site]`.
    Tensor {
        site: u32,
    },
    /// `ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16`, a warp collective of the whole
    /// warp (`mask`: a constant of all lanes): lanes `8 i .. 8 i + 8` give the addresses of
    /// the eight 16-byte rows of matrix `i`; each lane gets two b16 of each matrix in `d[i]`.
    Ldmatrix {
        n: u8,
        trans: bool,
        d: [R; 4],
        addr: R,
        off: i32,
        mask: R,
    },
    /// `mma.sync.aligned.m16n8k{16,32}.row.col.s32.{s8,u8}.{s8,u8}.s32`, a warp collective of
    /// the whole warp: `Func::mma_sites[site]`.
    Mma {
        site: u32,
        mask: R,
    },
    Mov {
        d: R,
        a: R,
    },
    Special {
        d: R,
        s: Sreg,
    },
    /// `mov.bN d, {a, b, ...}`: `n` parts of `bits` bits, the first the lowest.
    Pack {
        d: R,
        parts: [R; 4],
        n: u8,
        bits: u8,
    },
    /// `mov.bN {a, b, ...}, s`.
    Unpack {
        s: R,
        parts: [R; 4],
        n: u8,
        bits: u8,
    },
    IBin {
        op: IOp,
        t: T,
        d: R,
        a: R,
        b: R,
    },
    IUn {
        op: IUn,
        t: T,
        d: R,
        a: R,
    },
    Mad {
        mode: MadMode,
        t: T,
        cin: bool,
        cout: bool,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    Bfe {
        t: T,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    Bfi {
        t: T,
        d: R,
        f: R,
        base: R,
        pos: R,
        len: R,
    },
    Prmt {
        d: R,
        a: R,
        b: R,
        c: R,
    },
    Lop3 {
        d: R,
        a: R,
        b: R,
        c: R,
        lut: u8,
    },
    FBin {
        op: FOp,
        t: T,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: R,
        a: R,
        b: R,
    },
    Fma {
        t: T,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    FUn {
        op: FUn,
        t: T,
        rnd: Rnd,
        ftz: bool,
        d: R,
        a: R,
    },
    Testp {
        op: Testp,
        t: T,
        d: R,
        a: R,
    },
    Setp {
        cmp: Cmp,
        t: T,
        d: R,
        dn: Option<R>,
        a: R,
        b: R,
        comb: Option<(BoolOp, R, bool)>,
    },
    Selp {
        d: R,
        a: R,
        b: R,
        p: R,
    },
    Slct {
        ct: T,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    Cvt {
        dt: T,
        st: T,
        rnd: CvtRnd,
        sat: bool,
        ftz: bool,
        d: R,
        a: R,
    },
    /// `cvt` to or from a narrow packed format, or with `.relu`/`.satfinite`.
    CvtNarrow {
        cvt: NarrowCvt,
        rnd: Rnd,
        relu: bool,
        satfinite: bool,
        d: R,
        a: R,
        /// The second source of `NarrowCvt::Pair` (else unused).
        b: R,
    },
    /// `to`: generic → space; otherwise space → generic.
    Cvta {
        to: bool,
        space: Space,
        d: R,
        a: R,
    },
    Isspacep {
        space: Space,
        d: R,
        a: R,
    },
    /// `strong`: `.volatile`, `.relaxed` or `.acquire` (racecheck takes it as atomic).
    Ld {
        space: Space,
        t: T,
        n: u8,
        d: [R; 4],
        addr: R,
        off: i32,
        strong: bool,
    },
    /// `strong`: `.volatile`, `.relaxed` or `.release` (racecheck takes it as atomic).
    St {
        space: Space,
        t: T,
        n: u8,
        s: [R; 4],
        addr: R,
        off: i32,
        strong: bool,
    },
    Atom {
        space: Space,
        op: AtomOp,
        t: T,
        d: Option<R>,
        addr: R,
        off: i32,
        b: R,
        c: R,
    },
    Bar {
        id: R,
        count: Option<R>,
    },
    /// `bar.red.{popc.u32,and.pred,or.pred} d, id[, count], {!}p`
    BarRed {
        red: BarRedOp,
        d: R,
        id: R,
        count: Option<R>,
        p: R,
        neg: bool,
    },
    /// `redux.sync.op.type d, a, membermask`
    Redux {
        op: AtomOp,
        t: T,
        d: R,
        a: R,
        mask: R,
    },
    /// Funnel shift `shf.{l,r}.{wrap,clamp}.b32`.
    Shf {
        left: bool,
        wrap: bool,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    /// `sad`: d = c + |a - b|.
    Sad {
        t: T,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    WarpSync {
        mask: R,
    },
    /// `match.any.sync` (`all` false) / `match.all.sync` (`all` true) over `bits`-bit values.
    Match {
        all: bool,
        bits: u8,
        d: R,
        p: Option<R>,
        a: R,
        mask: R,
    },
    /// `dp4a` (`two` false) / `dp2a.lo|hi`: d = c + dot product of byte (or half-word x
    /// byte) lanes; `asig`/`bsig`: the lanes of a / b are signed.
    Dp {
        two: bool,
        hi: bool,
        asig: bool,
        bsig: bool,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    /// `set.cmp{.bool}.dtype.stype`: `truth` (all ones of the integer width, or 1.0 in the
    /// float type) when true, else 0.
    Set {
        cmp: Cmp,
        t: T,
        truth: u32,
        d: R,
        a: R,
        b: R,
        comb: Option<(BoolOp, R, bool)>,
    },
    Shfl {
        mode: ShflMode,
        d: R,
        p: Option<R>,
        a: R,
        b: R,
        c: R,
        mask: R,
    },
    Vote {
        mode: VoteMode,
        d: R,
        a: R,
        neg: bool,
        mask: R,
    },
    Activemask {
        d: R,
    },
    Bra {
        target: u32,
    },
    Call {
        site: u32,
    },
    Ret,
    Exit,
    Trap,
}

/// An instruction with its guard: `guard` is 0 for none, else `(reg << 1 | negated) + 1`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ins {
    pub guard: u32,
    pub op: Op,
}

/// What a register slot is filled with when a frame is created.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Patch {
    /// Address of module variable `i` (from `LaunchArgs::globals`), plus an offset.
    Global(usize, i64),
    /// Offset into the frame's parameter area (`.func` params and call-site `.param`s).
    FParam(u64),
    /// Offset into the frame's local area.
    Local(u64),
    /// Address of static shared variable `i` (`usize::MAX`: the dynamic window) in the
    /// launched entry's layout, plus an offset.
    Shared(usize, i64),
}

#[derive(Clone, Debug)]
pub(crate) enum Callee {
    Func(usize),
    Vprintf,
    /// `__assertfail(message, file, line, function, charSize)`: prints and traps.
    AssertFail,
    /// `cudaGraphSetConditional(handle, value)`: recorded for the launch's graph.
    SetConditional,
    /// Resolved after the whole module is read.
    Named(String),
}

#[derive(Clone, Debug)]
pub(crate) struct CallSite {
    pub callee: Callee,
    /// Frame-relative offsets (in the caller's parameter area) of the argument and return
    /// parameters named at the call.
    pub args: Vec<u64>,
    pub rets: Vec<u64>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Func {
    pub name: String,
    pub is_entry: bool,
    pub has_body: bool,
    pub code: Vec<Ins>,
    /// Source text of each instruction, for fault reports.
    pub text: Vec<String>,
    pub nregs: usize,
    /// Register template: constants filled in, other slots zero.
    pub init: Vec<u64>,
    pub patches: Vec<(R, Patch)>,
    /// (offset, size) of the formal return parameters and arguments in the parameter area.
    pub rets: Vec<(u64, u64)>,
    pub args: Vec<(u64, u64)>,
    pub param_area: u64,
    pub local_size: u64,
    pub calls: Vec<CallSite>,
    /// Static shared variables (indices) this function references.
    pub shared_refs: Vec<usize>,
    /// The operands of its `cp.async.bulk.tensor` instructions.
    pub tensor_sites: Vec<TensorSite>,
    /// The operands of its `mma.sync` instructions.
    pub mma_sites: Vec<MmaSite>,
}

/// One integer `mma.sync.aligned.m16n8k{k}.row.col.s32.{s8,u8}.{s8,u8}.s32`: D = A B + C for
/// a 16 x k A (row-major, 8-bit), a k x 8 B (column-major, 8-bit) and 16 x 8 s32 C and D,
/// spread over the warp's lanes as PTX lays out their fragments.
#[derive(Clone, Debug)]
pub(crate) struct MmaSite {
    /// 16 or 32.
    pub k: u8,
    pub a_signed: bool,
    pub b_signed: bool,
    /// `.satfinite`: sums clamp to the s32 range instead of wrapping.
    pub satfinite: bool,
    pub d: [R; 4],
    /// `k / 8` registers of four 8-bit elements each.
    pub a: [R; 4],
    /// `k / 16` registers.
    pub b: [R; 2],
    pub c: [R; 4],
}

/// One `cp.async.bulk.tensor`: a tile between global memory (through the tensor map at the
/// generic address in `map`) and shared memory at `shared`.
#[derive(Clone, Debug)]
pub(crate) struct TensorSite {
    /// Global to shared (completing `mbar`'s transactions), or shared to global.
    pub load: bool,
    pub map: R,
    pub coords: Vec<R>,
    pub shared: R,
    pub mbar: R,
}
