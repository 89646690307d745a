//! Instruction decoding: one PTX instruction (opcode with modifiers, operands) to `ir::Op`.
//! Every modifier must be understood; anything else is `LoadError::NotSupported(opcode)`.

use crate::LoadError;
use crate::ir::*;
use crate::lex::parse_int;
use crate::scope::{FnCtx, Name, Opd};
use std::collections::HashMap;

/// Bits of an immediate for an operand of type `t`.
pub(crate) fn imm_bits(s: &str, neg: bool, t: T) -> Option<u64> {
    let hex_f = s.strip_prefix("0f").or_else(|| s.strip_prefix("0F"));
    let hex_d = s.strip_prefix("0d").or_else(|| s.strip_prefix("0D"));
    let as_f64: Option<f64> = if let Some(h) = hex_f.filter(|h| h.len() == 8) {
        Some(f32::from_bits(u32::from_str_radix(h, 16).ok()?) as f64)
    } else if let Some(h) = hex_d.filter(|h| h.len() == 16) {
        Some(f64::from_bits(u64::from_str_radix(h, 16).ok()?))
    } else if !s.starts_with("0x")
        && !s.starts_with("0X")
        && (s.contains('.') || s.contains(['e', 'E']))
    {
        Some(s.parse::<f64>().ok()?)
    } else {
        None
    };
    if let Some(v) = as_f64 {
        // Exact bit patterns for the type written: keep NaN payloads of `0f`/`0d` literals.
        let v = if neg { -v } else { v };
        return Some(match t {
            T::F32 => {
                if let (Some(h), false) = (hex_f, neg) {
                    u32::from_str_radix(h, 16).ok()? as u64
                } else {
                    (v as f32).to_bits() as u64
                }
            }
            T::F64 => {
                if let (Some(h), false) = (hex_d, neg) {
                    u64::from_str_radix(h, 16).ok()?
                } else {
                    v.to_bits()
                }
            }
            T::F16 => crate::lowp::to_f16(v, Rnd::N) as u64,
            T::BF16 => crate::lowp::to_bf16(v, Rnd::N) as u64,
            // A float literal for an integer operand: its bits.
            _ => {
                if let Some(h) = hex_f {
                    u32::from_str_radix(h, 16).ok()? as u64
                } else {
                    v.to_bits()
                }
            }
        });
    }
    let v = parse_int(s)?;
    let v = if neg { v.wrapping_neg() } else { v };
    Some(match t {
        T::F32 => ((if neg {
            -(parse_int(s)? as f64)
        } else {
            v as f64
        }) as f32)
            .to_bits() as u64,
        T::F64 => (if neg {
            -(parse_int(s)? as f64)
        } else {
            v as f64
        })
        .to_bits(),
        // An integer literal for a 16-bit float operand: its value, rounded once.
        T::F16 | T::BF16 => {
            let x = if neg {
                -(parse_int(s)? as f64)
            } else {
                v as f64
            };
            if t == T::F16 {
                crate::lowp::to_f16(x, Rnd::N) as u64
            } else {
                crate::lowp::to_bf16(x, Rnd::N) as u64
            }
        }
        T::Pred => (v != 0) as u64,
        _ => v,
    })
}

/// Instruction names `decode_op` handles (modifiers decide the rest).
pub(crate) const KNOWN: &[&str] = &[
    "mov",
    "add",
    "sub",
    "addc",
    "subc",
    "mul",
    "mul24",
    "div",
    "rem",
    "min",
    "max",
    "and",
    "or",
    "xor",
    "shl",
    "shr",
    "copysign",
    "mad",
    "madc",
    "mad24",
    "fma",
    "abs",
    "neg",
    "not",
    "cnot",
    "popc",
    "clz",
    "brev",
    "bfind",
    "rcp",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "ex2",
    "lg2",
    "tanh",
    "bfe",
    "bfi",
    "prmt",
    "lop3",
    "testp",
    "setp",
    "selp",
    "slct",
    "cvt",
    "cvta",
    "isspacep",
    "ld",
    "ldu",
    "st",
    "atom",
    "red",
    "bar",
    "barrier",
    "membar",
    "fence",
    "nanosleep",
    "prefetch",
    "prefetchu",
    "pmevent",
    "shfl",
    "vote",
    "activemask",
    "bra",
    "brx",
    "call",
    "ret",
    "exit",
    "trap",
    "brkpt",
    "redux",
    "shf",
    "sad",
    "dp4a",
    "dp2a",
    "set",
    "match",
    "mbarrier",
    "cp",
    "griddepcontrol",
    "ldmatrix",
    "mma",
];

fn ns(op: &str) -> LoadError {
    LoadError::NotSupported(op.to_string())
}

struct Cx<'p, 'a, 'f> {
    module_names: &'p HashMap<&'a str, Name>,
    f: &'f mut FnCtx<'a>,
    op: &'a str,
    pre: Vec<Op>,
}

fn special(name: &str) -> Option<Sreg> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((base, d)) = name.split_once('.') {
        let d = dim(d)?;
        return Some(match base {
            "%tid" => Sreg::Tid(d),
            "%ntid" => Sreg::Ntid(d),
            "%ctaid" => Sreg::Ctaid(d),
            "%nctaid" => Sreg::Nctaid(d),
            _ => return None,
        });
    }
    Some(match name {
        "%laneid" => Sreg::Laneid,
        "%warpid" => Sreg::Warpid,
        "%nwarpid" => Sreg::Nwarpid,
        "%smid" => Sreg::Smid,
        "%nsmid" => Sreg::Nsmid,
        "%gridid" => Sreg::Gridid,
        "%clock" => Sreg::Clock,
        "%clock_hi" => Sreg::ClockHi,
        "%clock64" => Sreg::Clock64,
        "%globaltimer" => Sreg::Globaltimer,
        "%globaltimer_lo" => Sreg::GlobaltimerLo,
        "%globaltimer_hi" => Sreg::GlobaltimerHi,
        "%lanemask_eq" => Sreg::LanemaskEq,
        "%lanemask_le" => Sreg::LanemaskLe,
        "%lanemask_lt" => Sreg::LanemaskLt,
        "%lanemask_ge" => Sreg::LanemaskGe,
        "%lanemask_gt" => Sreg::LanemaskGt,
        "%dynamic_smem_size" => Sreg::DynSmem,
        "%total_smem_size" | "%aggr_smem_size" => Sreg::TotalSmem,
        n if n.starts_with("%envreg") => Sreg::Zero,
        _ => return None,
    })
}

impl<'p, 'a, 'f> Cx<'p, 'a, 'f> {
    fn inv(&self, msg: &str) -> LoadError {
        LoadError::Invalid(format!("{}: {}: {msg}", self.f.f.name, self.op))
    }
    fn name(&self, n: &str) -> Option<Name> {
        self.f
            .lookup(n)
            .or_else(|| self.module_names.get(n).copied())
    }
    /// Register slot holding the address of a symbol (plus `off`).
    fn sym_slot(&mut self, n: Name, off: i64) -> Result<R, LoadError> {
        Ok(match n {
            Name::Reg(_) => return Err(self.inv("register used as an address symbol")),
            Name::KParam(o) => self.f.konst((KPARAM_BASE + o).wrapping_add(off as u64)),
            Name::FParam(o) => self.f.patched(Patch::FParam(o.wrapping_add(off as u64))),
            Name::Local(o) => self.f.patched(Patch::Local(o.wrapping_add(off as u64))),
            Name::Shared(u64::MAX) => self.f.patched(Patch::Shared(usize::MAX, off)),
            Name::Shared(i) => {
                let i = i as usize;
                if !self.f.f.shared_refs.contains(&i) {
                    self.f.f.shared_refs.push(i);
                }
                self.f.patched(Patch::Shared(i, off))
            }
            Name::Global(i) => self.f.patched(Patch::Global(i, off)),
            Name::Func(_) => return Err(ns("function address (indirect call)")),
        })
    }
    fn src(&mut self, o: &Opd<'a>, t: T) -> Result<R, LoadError> {
        match o {
            Opd::Name(n) => {
                if let Some(nm) = self.name(n) {
                    return match nm {
                        Name::Reg(r) => Ok(r),
                        other => self.sym_slot(other, 0),
                    };
                }
                // The predefined constant (PTX ISA 5.4.3): threads in a warp.
                if *n == "WARP_SZ" {
                    return Ok(self.f.konst(32));
                }
                if let Some(s) = special(n) {
                    let d = self.f.new_reg();
                    self.pre.push(Op::Special { d, s });
                    return Ok(d);
                }
                if n.starts_with('%') {
                    return Err(ns(&format!("special register {n}")));
                }
                Err(self.inv(&format!("unknown name {n}")))
            }
            Opd::SymOff(n, off) => {
                let nm = self
                    .name(n)
                    .ok_or_else(|| self.inv(&format!("unknown name {n}")))?;
                self.sym_slot(nm, *off)
            }
            Opd::Imm(s, neg) => {
                let v =
                    imm_bits(s, *neg, t).ok_or_else(|| self.inv(&format!("bad immediate {s}")))?;
                Ok(self.f.konst(v))
            }
            _ => Err(self.inv("bad source operand")),
        }
    }
    fn dst(&mut self, o: &Opd<'a>) -> Result<R, LoadError> {
        match o {
            Opd::Name("_") => Ok(self.sink()),
            Opd::Name(n) => match self.f.lookup(n) {
                Some(Name::Reg(r)) => Ok(r),
                _ => Err(self.inv(&format!("{n} is not a register"))),
            },
            _ => Err(self.inv("bad destination operand")),
        }
    }
    fn sink(&mut self) -> R {
        match self.f.sink {
            Some(r) => r,
            None => {
                let r = self.f.new_reg();
                self.f.sink = Some(r);
                r
            }
        }
    }
    fn addr(&mut self, o: &Opd<'a>) -> Result<(R, i32), LoadError> {
        let Opd::Addr(base, off) = o else {
            return Err(self.inv("expected [address]"));
        };
        let off32 = i32::try_from(*off).map_err(|_| self.inv("address offset too large"));
        match base {
            None => Ok((self.f.konst(*off as u64), 0)),
            Some(n) => match self.name(n) {
                Some(Name::Reg(r)) => Ok((r, off32?)),
                Some(other) => Ok((self.sym_slot(other, *off)?, 0)),
                None => Err(self.inv(&format!("unknown name {n}"))),
            },
        }
    }
    fn nops(&self, ops: &[Opd], n: usize) -> Result<(), LoadError> {
        if ops.len() == n {
            Ok(())
        } else {
            Err(self.inv(&format!("expected {n} operands")))
        }
    }
}

/// Removes `w` from the modifiers, saying whether it was there.
fn take(m: &mut Vec<&str>, w: &str) -> bool {
    if let Some(i) = m.iter().position(|x| *x == w) {
        m.remove(i);
        true
    } else {
        false
    }
}

fn take_any(m: &mut Vec<&str>, ws: &[&str]) -> bool {
    let mut any = false;
    for w in ws {
        any |= take(m, w);
    }
    any
}

/// Removes and returns the last type modifier.
fn take_type(m: &mut Vec<&str>) -> Option<T> {
    let i = m.iter().rposition(|w| T::from_name(w).is_some())?;
    T::from_name(m.remove(i))
}

fn take_rnd(m: &mut Vec<&str>) -> Option<Rnd> {
    for (w, r) in [
        ("rn", Rnd::N),
        ("rz", Rnd::Z),
        ("rm", Rnd::M),
        ("rp", Rnd::P),
    ] {
        if take(m, w) {
            return Some(r);
        }
    }
    None
}

fn take_space(m: &mut Vec<&str>) -> Space {
    for (w, s) in [
        ("global", Space::Global),
        ("shared", Space::Shared),
        ("local", Space::Local),
        ("param", Space::Param),
        ("const", Space::Const),
    ] {
        if take(m, w) {
            return s;
        }
    }
    // `.shared::cta` is `.shared`; `.shared::cluster` is not supported.
    if take(m, "shared::cta") {
        return Space::Shared;
    }
    Space::Generic
}

fn cmp_of(w: &str) -> Option<Cmp> {
    Some(match w {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        "lo" => Cmp::Lo,
        "ls" => Cmp::Ls,
        "hi" => Cmp::Hi,
        "hs" => Cmp::Hs,
        "equ" => Cmp::Equ,
        "neu" => Cmp::Neu,
        "ltu" => Cmp::Ltu,
        "leu" => Cmp::Leu,
        "gtu" => Cmp::Gtu,
        "geu" => Cmp::Geu,
        "num" => Cmp::Num,
        "nan" => Cmp::Nan,
        _ => return None,
    })
}

/// The narrow `cvt` named by the type words of `m` (removed from it), if any:
/// `.dtype.atype` among `e4m3x2`, `e5m2x2`, `f16x2`, `bf16x2` and `f32`, or a scalar
/// `.f16`/`.bf16` from `.f32` with `.relu` or `.satfinite` (`modified`).
fn narrow_cvt(m: &mut Vec<&str>, modified: bool) -> Option<NarrowCvt> {
    let f8 = |w: &str| match w {
        "e4m3x2" => Some(Narrow::E4m3),
        "e5m2x2" => Some(Narrow::E5m2),
        _ => None,
    };
    let ty = |w: &&str| T::from_name(w).is_some() || f8(w).is_some();
    let pos: Vec<usize> = (0..m.len()).filter(|&i| ty(&m[i])).collect();
    let [di, si] = pos[..] else { return None };
    let (dw, sw) = (m[di], m[si]);
    let cvt = match (dw, sw) {
        (d, "f32") if f8(d).is_some() => NarrowCvt::Pair(f8(d)?),
        (d, "f16x2") if f8(d).is_some() => NarrowCvt::FromF16x2(f8(d)?),
        ("f16x2", s) if f8(s).is_some() => NarrowCvt::ToF16x2(f8(s)?),
        ("f16x2", "f32") => NarrowCvt::Pair(Narrow::F16),
        ("bf16x2", "f32") => NarrowCvt::Pair(Narrow::Bf16),
        ("f16", "f32") if modified => NarrowCvt::One(Narrow::F16),
        ("bf16", "f32") if modified => NarrowCvt::One(Narrow::Bf16),
        _ => return None,
    };
    m.remove(si);
    m.remove(di);
    Some(cvt)
}

/// Decodes a narrow `cvt` (its type words already taken): `.rn` (or `.rz` for f16/bf16
/// results from f32) is required, as is `.satfinite` for fp8 results.
fn cvt_narrow<'a>(
    cx: &mut Cx<'_, 'a, '_>,
    opcode: &str,
    m: &mut Vec<&'a str>,
    ops: &[Opd<'a>],
    cvt: NarrowCvt,
    relu: bool,
    satfinite: bool,
) -> Result<Op, LoadError> {
    let rnd = take_rnd(m).ok_or_else(|| ns(opcode))?;
    let ok = match cvt {
        NarrowCvt::One(_) | NarrowCvt::Pair(Narrow::F16 | Narrow::Bf16) => {
            matches!(rnd, Rnd::N | Rnd::Z)
        }
        NarrowCvt::Pair(_) | NarrowCvt::FromF16x2(_) => rnd == Rnd::N && satfinite,
        NarrowCvt::ToF16x2(_) => rnd == Rnd::N && !satfinite,
    };
    if !ok {
        return Err(ns(opcode));
    }
    let (a, b) = match cvt {
        NarrowCvt::Pair(_) => {
            cx.nops(ops, 3)?;
            let a = cx.src(&ops[1], T::F32)?;
            (a, cx.src(&ops[2], T::F32)?)
        }
        NarrowCvt::One(_) => {
            cx.nops(ops, 2)?;
            let a = cx.src(&ops[1], T::F32)?;
            (a, a)
        }
        NarrowCvt::FromF16x2(_) => {
            cx.nops(ops, 2)?;
            let a = cx.src(&ops[1], T::U32)?;
            (a, a)
        }
        NarrowCvt::ToF16x2(_) => {
            cx.nops(ops, 2)?;
            let a = cx.src(&ops[1], T::U16)?;
            (a, a)
        }
    };
    Ok(Op::CvtNarrow {
        cvt,
        rnd,
        relu,
        satfinite,
        d: cx.dst(&ops[0])?,
        a,
        b,
    })
}

pub(crate) fn decode<'a>(
    module_names: &HashMap<&'a str, Name>,
    f: &mut FnCtx<'a>,
    opcode: &'a str,
    ops: &[Opd<'a>],
    guard: u32,
    text: String,
) -> Result<(), LoadError> {
    let mut parts = opcode.split('.');
    let base = parts.next().unwrap_or("");
    let mut m: Vec<&str> = parts.collect();
    let mut cx = Cx {
        module_names,
        f,
        op: opcode,
        pre: Vec::new(),
    };
    let op = decode_op(&mut cx, base, &mut m, ops)?;
    if !m.is_empty() {
        return Err(ns(opcode));
    }
    let Cx { f, pre, .. } = cx;
    for pre_op in pre {
        f.f.code.push(Ins {
            guard: 0,
            op: pre_op,
        });
        f.f.text.push(text.clone());
    }
    if let Op::Bra { .. } = op {
        let label = match ops.first() {
            Some(Opd::Name(l)) => *l,
            _ => return Err(LoadError::Invalid(format!("{opcode}: expected a label"))),
        };
        f.fixups.push((f.f.code.len(), label));
    }
    f.f.code.push(Ins { guard, op });
    f.f.text.push(text);
    Ok(())
}

fn decode_op<'a>(
    cx: &mut Cx<'_, 'a, '_>,
    base: &str,
    m: &mut Vec<&'a str>,
    ops: &[Opd<'a>],
) -> Result<Op, LoadError> {
    let opcode = cx.op;
    let o = |i: usize| {
        ops.get(i)
            .ok_or_else(|| LoadError::Invalid(format!("{opcode}: missing operand")))
    };
    Ok(match base {
        "mov" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            cx.nops(ops, 2)?;
            match (&ops[0], &ops[1]) {
                (Opd::Vec(parts), src) => {
                    let s = cx.src(src, t)?;
                    let n = parts.len();
                    if !matches!(n, 2 | 4) || t.bits() % n as u32 != 0 {
                        return Err(ns(opcode));
                    }
                    let mut rs = [0; 4];
                    for (k, part) in parts.iter().enumerate() {
                        rs[k] = cx.dst(part)?;
                    }
                    Op::Unpack {
                        s,
                        parts: rs,
                        n: n as u8,
                        bits: (t.bits() / n as u32) as u8,
                    }
                }
                (d, Opd::Vec(parts)) => {
                    let d = cx.dst(d)?;
                    let n = parts.len();
                    if !matches!(n, 2 | 4) || t.bits() % n as u32 != 0 {
                        return Err(ns(opcode));
                    }
                    let pt = match t.bits() / n as u32 {
                        8 => T::U8,
                        16 => T::U16,
                        _ => T::U32,
                    };
                    let mut rs = [0; 4];
                    for (k, part) in parts.iter().enumerate() {
                        rs[k] = cx.src(part, pt)?;
                    }
                    Op::Pack {
                        d,
                        parts: rs,
                        n: n as u8,
                        bits: (t.bits() / n as u32) as u8,
                    }
                }
                (d, Opd::Name(n)) if cx.name(n).is_none() && special(n).is_some() => {
                    let d = cx.dst(d)?;
                    Op::Special {
                        d,
                        s: special(n).unwrap_or(Sreg::Zero),
                    }
                }
                (d, s) => {
                    let a = cx.src(s, t)?;
                    Op::Mov { d: cx.dst(d)?, a }
                }
            }
        }
        "add" | "sub" | "addc" | "subc" | "mul" | "mul24" | "div" | "rem" | "min" | "max"
        | "and" | "or" | "xor" | "shl" | "shr" | "copysign" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            cx.nops(ops, 3)?;
            if t.float() {
                if t.half() && !matches!(base, "add" | "sub" | "mul" | "min" | "max") {
                    return Err(ns(opcode));
                }
                let rnd = take_rnd(m);
                let approx = take_any(m, &["approx", "full"]);
                let ftz = take(m, "ftz");
                let sat = take(m, "sat");
                let nan = matches!(base, "min" | "max") && take(m, "NaN");
                if t.half() && rnd.is_some_and(|r| r != Rnd::N)
                    || matches!(t, T::BF16 | T::BF16X2) && (ftz || sat)
                {
                    // 16-bit arithmetic rounds to nearest only; bf16 has no .ftz/.sat.
                    return Err(ns(opcode));
                }
                let fop = match base {
                    "add" => FOp::Add,
                    "sub" => FOp::Sub,
                    "mul" => FOp::Mul,
                    "div" => FOp::Div,
                    "min" if nan => FOp::MinNan,
                    "max" if nan => FOp::MaxNan,
                    "min" => FOp::Min,
                    "max" => FOp::Max,
                    "copysign" => FOp::Copysign,
                    _ => return Err(ns(opcode)),
                };
                if fop == FOp::Div && rnd.is_none() && !approx && t == T::F32 {
                    return Err(ns(opcode)); // div.f32 needs a rounding or .approx/.full
                }
                let a = cx.src(o(1)?, t)?;
                let b = cx.src(o(2)?, t)?;
                let d = cx.dst(o(0)?)?;
                return Ok(Op::FBin {
                    op: fop,
                    t,
                    rnd: rnd.unwrap_or(Rnd::N),
                    ftz,
                    sat,
                    d,
                    a,
                    b,
                });
            }
            let cc = take(m, "cc");
            let isat = take(m, "sat");
            if isat && !(matches!(base, "add" | "sub") && t == T::S32 && !cc) {
                return Err(ns(opcode));
            }
            let iop = match base {
                "add" if isat => IOp::AddSat,
                "sub" if isat => IOp::SubSat,
                "add" if cc => IOp::AddC(false, true),
                "addc" => IOp::AddC(true, cc),
                "sub" if cc => IOp::SubC(false, true),
                "subc" => IOp::SubC(true, cc),
                "add" => IOp::Add,
                "sub" => IOp::Sub,
                "mul" => {
                    if take(m, "lo") {
                        IOp::MulLo
                    } else if take(m, "hi") {
                        IOp::MulHi
                    } else if take(m, "wide") {
                        IOp::MulWide
                    } else {
                        return Err(ns(opcode));
                    }
                }
                "mul24" => {
                    if take(m, "lo") {
                        IOp::Mul24Lo
                    } else if take(m, "hi") {
                        IOp::Mul24Hi
                    } else {
                        return Err(ns(opcode));
                    }
                }
                "div" => IOp::Div,
                "rem" => IOp::Rem,
                "min" => IOp::Min,
                "max" => IOp::Max,
                "and" => IOp::And,
                "or" => IOp::Or,
                "xor" => IOp::Xor,
                "shl" => IOp::Shl,
                "shr" => IOp::Shr,
                _ => return Err(ns(opcode)),
            };
            if cc && !matches!(t.bits(), 32 | 64) {
                return Err(ns(opcode));
            }
            if matches!(iop, IOp::MulWide) && t.bits() > 32
                || t == T::Pred && !matches!(iop, IOp::And | IOp::Or | IOp::Xor)
            {
                return Err(ns(opcode));
            }
            let bt = if matches!(iop, IOp::Shl | IOp::Shr) {
                T::U32
            } else {
                t
            };
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, bt)?;
            let d = cx.dst(o(0)?)?;
            Op::IBin {
                op: iop,
                t,
                d,
                a,
                b,
            }
        }
        "mad" | "madc" | "mad24" | "fma" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            cx.nops(ops, 4)?;
            if t.float() {
                if base == "madc" || base == "mad24" {
                    return Err(ns(opcode));
                }
                let rnd = take_rnd(m).unwrap_or(Rnd::N);
                let ftz = take(m, "ftz");
                let sat = take(m, "sat");
                if rnd != Rnd::N && t != T::F32 || matches!(t, T::BF16 | T::BF16X2) && (ftz || sat)
                {
                    // Only f32 fma is rounded exactly in a directed mode; bf16 has no
                    // .ftz/.sat.
                    return Err(ns(opcode));
                }
                let a = cx.src(o(1)?, t)?;
                let b = cx.src(o(2)?, t)?;
                let c = cx.src(o(3)?, t)?;
                let d = cx.dst(o(0)?)?;
                return Ok(Op::Fma {
                    t,
                    rnd,
                    ftz,
                    sat,
                    d,
                    a,
                    b,
                    c,
                });
            }
            if base == "fma" {
                return Err(ns(opcode));
            }
            let cout = take(m, "cc");
            let cin = base == "madc";
            let mode = if base == "mad24" {
                if take(m, "lo") {
                    MadMode::Lo24
                } else {
                    return Err(ns(opcode));
                }
            } else if take(m, "lo") {
                MadMode::Lo
            } else if take(m, "hi") {
                MadMode::Hi
            } else if take(m, "wide") {
                MadMode::Wide
            } else {
                return Err(ns(opcode));
            };
            if mode == MadMode::Wide && t.bits() > 32 || t == T::Pred {
                return Err(ns(opcode));
            }
            let ct = if mode == MadMode::Wide {
                if t.signed() { T::S64 } else { T::U64 }
            } else {
                t
            };
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, t)?;
            let c = cx.src(o(3)?, ct)?;
            let d = cx.dst(o(0)?)?;
            Op::Mad {
                mode,
                t,
                cin,
                cout,
                d,
                a,
                b,
                c,
            }
        }
        "abs" | "neg" | "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" | "rcp" | "sqrt"
        | "rsqrt" | "sin" | "cos" | "ex2" | "lg2" | "tanh" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            cx.nops(ops, 2)?;
            if t.float() {
                if t.half() && !matches!(base, "abs" | "neg") {
                    return Err(ns(opcode));
                }
                let rnd = take_rnd(m);
                let approx = take(m, "approx");
                let ftz = take(m, "ftz");
                let fop = match base {
                    "abs" => FUn::Abs,
                    "neg" => FUn::Neg,
                    "rcp" => FUn::Rcp,
                    "sqrt" => FUn::Sqrt,
                    "rsqrt" if approx => FUn::Rsqrt,
                    "sin" if approx => FUn::Sin,
                    "cos" if approx => FUn::Cos,
                    "ex2" if approx => FUn::Ex2,
                    "lg2" if approx => FUn::Lg2,
                    "tanh" if approx => FUn::Tanh,
                    _ => return Err(ns(opcode)),
                };
                if matches!(fop, FUn::Rcp | FUn::Sqrt) && rnd.is_none() && !approx {
                    return Err(ns(opcode));
                }
                let a = cx.src(o(1)?, t)?;
                let d = cx.dst(o(0)?)?;
                return Ok(Op::FUn {
                    op: fop,
                    t,
                    rnd: rnd.unwrap_or(Rnd::N),
                    ftz,
                    d,
                    a,
                });
            }
            let iop = match base {
                "abs" => IUn::Abs,
                "neg" => IUn::Neg,
                "not" => IUn::Not,
                "cnot" => IUn::Cnot,
                "popc" => IUn::Popc,
                "clz" => IUn::Clz,
                "brev" => IUn::Brev,
                "bfind" => IUn::Bfind(take(m, "shiftamt")),
                _ => return Err(ns(opcode)),
            };
            let a = cx.src(o(1)?, t)?;
            let d = cx.dst(o(0)?)?;
            Op::IUn { op: iop, t, d, a }
        }
        "bfe" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            cx.nops(ops, 4)?;
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, T::U32)?;
            let c = cx.src(o(3)?, T::U32)?;
            Op::Bfe {
                t,
                d: cx.dst(o(0)?)?,
                a,
                b,
                c,
            }
        }
        "bfi" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            cx.nops(ops, 5)?;
            let fld = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, t)?;
            let pos = cx.src(o(3)?, T::U32)?;
            let len = cx.src(o(4)?, T::U32)?;
            Op::Bfi {
                t,
                d: cx.dst(o(0)?)?,
                f: fld,
                base: b,
                pos,
                len,
            }
        }
        "prmt" => {
            if take_type(m) != Some(T::U32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 4)?;
            let a = cx.src(o(1)?, T::U32)?;
            let b = cx.src(o(2)?, T::U32)?;
            let c = cx.src(o(3)?, T::U32)?;
            Op::Prmt {
                d: cx.dst(o(0)?)?,
                a,
                b,
                c,
            }
        }
        "lop3" => {
            if take_type(m) != Some(T::U32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 5)?;
            let lut = match &ops[4] {
                Opd::Imm(s, false) => parse_int(s)
                    .filter(|v| *v < 256)
                    .ok_or_else(|| ns(opcode))?,
                _ => return Err(ns(opcode)),
            } as u8;
            let a = cx.src(o(1)?, T::U32)?;
            let b = cx.src(o(2)?, T::U32)?;
            let c = cx.src(o(3)?, T::U32)?;
            Op::Lop3 {
                d: cx.dst(o(0)?)?,
                a,
                b,
                c,
                lut,
            }
        }
        "testp" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            let op = if take(m, "finite") {
                Testp::Finite
            } else if take(m, "infinite") {
                Testp::Infinite
            } else if take(m, "number") {
                Testp::Number
            } else if take(m, "notanumber") {
                Testp::NotANumber
            } else if take(m, "normal") {
                Testp::Normal
            } else if take(m, "subnormal") {
                Testp::Subnormal
            } else {
                return Err(ns(opcode));
            };
            if !matches!(t, T::F32 | T::F64) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 2)?;
            let a = cx.src(o(1)?, t)?;
            Op::Testp {
                op,
                t,
                d: cx.dst(o(0)?)?,
                a,
            }
        }
        "setp" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            if m.is_empty() || t.lane().is_some() {
                return Err(ns(opcode));
            }
            let cmp = cmp_of(m.remove(0)).ok_or_else(|| ns(opcode))?;
            let bop = if take(m, "and") {
                Some(BoolOp::And)
            } else if take(m, "or") {
                Some(BoolOp::Or)
            } else if take(m, "xor") {
                Some(BoolOp::Xor)
            } else {
                None
            };
            take(m, "ftz");
            let (d, dn) = match o(0)? {
                Opd::Pair(a, b) => {
                    let a = cx.dst(&Opd::Name(a))?;
                    (a, Some(cx.dst(&Opd::Name(b))?))
                }
                other => (cx.dst(other)?, None),
            };
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, t)?;
            let comb = match bop {
                None => {
                    cx.nops(ops, 3)?;
                    None
                }
                Some(bop) => {
                    cx.nops(ops, 4)?;
                    let (r, neg) = match &ops[3] {
                        Opd::NotName(n) => (cx.src(&Opd::Name(n), T::Pred)?, true),
                        other => (cx.src(other, T::Pred)?, false),
                    };
                    Some((bop, r, neg))
                }
            };
            Op::Setp {
                cmp,
                t,
                d,
                dn,
                a,
                b,
                comb,
            }
        }
        "selp" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            cx.nops(ops, 4)?;
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, t)?;
            let p = cx.src(o(3)?, T::Pred)?;
            Op::Selp {
                d: cx.dst(o(0)?)?,
                a,
                b,
                p,
            }
        }
        "slct" => {
            let ct = take_type(m).ok_or_else(|| ns(opcode))?;
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            take(m, "ftz");
            if !matches!(ct, T::S32 | T::F32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 4)?;
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, t)?;
            let c = cx.src(o(3)?, ct)?;
            Op::Slct {
                ct,
                d: cx.dst(o(0)?)?,
                a,
                b,
                c,
            }
        }
        "cvt" => {
            let relu = take(m, "relu");
            let satfinite = take(m, "satfinite");
            if let Some(cvt) = narrow_cvt(m, relu || satfinite) {
                return cvt_narrow(cx, opcode, m, ops, cvt, relu, satfinite);
            }
            if relu || satfinite {
                return Err(ns(opcode));
            }
            let st = take_type(m).ok_or_else(|| ns(opcode))?;
            let dt = take_type(m).ok_or_else(|| ns(opcode))?;
            if dt.lane().is_some() || st.lane().is_some() {
                return Err(ns(opcode));
            }
            let mut rnd = CvtRnd::None;
            for (w, r) in [
                ("rni", CvtRnd::Int(Rnd::N)),
                ("rzi", CvtRnd::Int(Rnd::Z)),
                ("rmi", CvtRnd::Int(Rnd::M)),
                ("rpi", CvtRnd::Int(Rnd::P)),
            ] {
                if take(m, w) {
                    rnd = r;
                }
            }
            if let Some(r) = take_rnd(m) {
                rnd = CvtRnd::Float(r);
            }
            let ftz = take(m, "ftz");
            let sat = take(m, "sat");
            if dt == T::Pred || st == T::Pred {
                return Err(ns(opcode));
            }
            cx.nops(ops, 2)?;
            let a = cx.src(o(1)?, st)?;
            Op::Cvt {
                dt,
                st,
                rnd,
                sat,
                ftz,
                d: cx.dst(o(0)?)?,
                a,
            }
        }
        "cvta" | "isspacep" => {
            let to = take(m, "to");
            let space = take_space(m);
            if matches!(space, Space::Generic) {
                return Err(ns(opcode));
            }
            if base == "cvta" {
                let t = take_type(m);
                if !matches!(t, Some(T::U64 | T::U32)) {
                    return Err(ns(opcode));
                }
            }
            cx.nops(ops, 2)?;
            let a = cx.src(o(1)?, T::U64)?;
            let d = cx.dst(o(0)?)?;
            if base == "cvta" {
                Op::Cvta { to, space, d, a }
            } else {
                Op::Isspacep { space, d, a }
            }
        }
        "ld" | "ldu" | "st" => {
            let is_ld = base != "st";
            let strong = m
                .iter()
                .any(|w| matches!(*w, "volatile" | "relaxed" | "acquire" | "release"));
            take_any(
                m,
                &[
                    "weak", "volatile", "relaxed", "acquire", "release", "gpu", "cta", "sys",
                ],
            );
            let space = take_space(m);
            take_any(m, &["nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt"]);
            m.retain(|w| {
                !(w.starts_with("L1::") || w.starts_with("L2::") && *w != "L2::cache_hint")
            });
            let n = if take(m, "v2") {
                2
            } else if take(m, "v4") {
                4
            } else {
                1
            };
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            if t == T::Pred {
                return Err(ns(opcode));
            }
            cx.nops(ops, 2)?;
            let (vals, aop) = if is_ld {
                (&ops[0], &ops[1])
            } else {
                (&ops[1], &ops[0])
            };
            let (addr, off) = cx.addr(aop)?;
            let mut rs = [0; 4];
            match vals {
                Opd::Vec(v) if v.len() == n as usize && n > 1 => {
                    for (k, x) in v.iter().enumerate() {
                        rs[k] = if is_ld { cx.dst(x)? } else { cx.src(x, t)? };
                    }
                }
                x if n == 1 => rs[0] = if is_ld { cx.dst(x)? } else { cx.src(x, t)? },
                _ => return Err(cx.inv("vector operand does not match")),
            }
            if is_ld {
                Op::Ld {
                    space,
                    t,
                    n,
                    d: rs,
                    addr,
                    off,
                    strong,
                }
            } else {
                Op::St {
                    space,
                    t,
                    n,
                    s: rs,
                    addr,
                    off,
                    strong,
                }
            }
        }
        "atom" | "red" => {
            take_any(
                m,
                &[
                    "relaxed", "acquire", "release", "acq_rel", "gpu", "cta", "sys",
                ],
            );
            let noftz = take(m, "noftz");
            let space = take_space(m);
            if !matches!(space, Space::Global | Space::Shared | Space::Generic) {
                return Err(ns(opcode));
            }
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            let aop = [
                ("add", AtomOp::Add),
                ("min", AtomOp::Min),
                ("max", AtomOp::Max),
                ("inc", AtomOp::Inc),
                ("dec", AtomOp::Dec),
                ("and", AtomOp::And),
                ("or", AtomOp::Or),
                ("xor", AtomOp::Xor),
                ("exch", AtomOp::Exch),
                ("cas", AtomOp::Cas),
            ]
            .into_iter()
            .find(|(w, _)| take(m, w))
            .map(|(_, a)| a)
            .ok_or_else(|| ns(opcode))?;
            let ok = match t {
                T::U32 | T::S32 | T::U64 | T::S64 => true,
                // atomicCAS on unsigned short.
                T::U16 => aop == AtomOp::Cas && base == "atom",
                T::F32 | T::F64 => {
                    matches!(aop, AtomOp::Add | AtomOp::Exch | AtomOp::Min | AtomOp::Max)
                }
                // `atom.add.noftz.{f16,bf16}{,x2}`: the 16-bit float adds (`.noftz` required).
                T::F16 | T::BF16 | T::F16X2 | T::BF16X2 => aop == AtomOp::Add && noftz,
                _ => false,
            };
            if !ok || (aop == AtomOp::Cas && base == "red") {
                return Err(ns(opcode));
            }
            let k = if base == "atom" { 1 } else { 0 };
            let want = k + 2 + (aop == AtomOp::Cas) as usize;
            cx.nops(ops, want)?;
            let (addr, off) = cx.addr(o(k)?)?;
            let b = cx.src(o(k + 1)?, t)?;
            let c = if aop == AtomOp::Cas {
                cx.src(o(k + 2)?, t)?
            } else {
                b
            };
            let d = if k == 1 { Some(cx.dst(o(0)?)?) } else { None };
            Op::Atom {
                space,
                op: aop,
                t,
                d,
                addr,
                off,
                b,
                c,
            }
        }
        "bar" | "barrier" if m.contains(&"red") => {
            take_any(m, &["cta", "aligned", "red"]);
            let red = if take(m, "popc") {
                if take_type(m) != Some(T::U32) {
                    return Err(ns(opcode));
                }
                BarRedOp::Popc
            } else if take(m, "and") || take(m, "or") {
                if take_type(m) != Some(T::Pred) {
                    return Err(ns(opcode));
                }
                if opcode.contains(".and") {
                    BarRedOp::And
                } else {
                    BarRedOp::Or
                }
            } else {
                return Err(ns(opcode));
            };
            if ops.len() != 3 && ops.len() != 4 {
                return Err(cx.inv("expected 3 or 4 operands"));
            }
            let id = cx.src(o(1)?, T::U32)?;
            let count = if ops.len() == 4 {
                Some(cx.src(o(2)?, T::U32)?)
            } else {
                None
            };
            let (p, neg) = match ops.last() {
                Some(Opd::NotName(n)) => (cx.src(&Opd::Name(n), T::Pred)?, true),
                Some(other) => (cx.src(other, T::Pred)?, false),
                None => return Err(cx.inv("missing predicate")),
            };
            Op::BarRed {
                red,
                d: cx.dst(o(0)?)?,
                id,
                count,
                p,
                neg,
            }
        }
        "redux" => {
            if !take(m, "sync") {
                return Err(ns(opcode));
            }
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            let op = [
                ("add", AtomOp::Add),
                ("min", AtomOp::Min),
                ("max", AtomOp::Max),
                ("and", AtomOp::And),
                ("or", AtomOp::Or),
                ("xor", AtomOp::Xor),
            ]
            .into_iter()
            .find(|(w, _)| take(m, w))
            .map(|(_, a)| a)
            .ok_or_else(|| ns(opcode))?;
            if !matches!(t, T::U32 | T::S32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 3)?;
            let a = cx.src(o(1)?, t)?;
            let mask = cx.src(o(2)?, T::U32)?;
            Op::Redux {
                op,
                t,
                d: cx.dst(o(0)?)?,
                a,
                mask,
            }
        }
        "shf" => {
            let left = take(m, "l");
            if !left && !take(m, "r") {
                return Err(ns(opcode));
            }
            let wrap = take(m, "wrap");
            if !wrap && !take(m, "clamp") {
                return Err(ns(opcode));
            }
            if take_type(m) != Some(T::U32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 4)?;
            let a = cx.src(o(1)?, T::U32)?;
            let b = cx.src(o(2)?, T::U32)?;
            let c = cx.src(o(3)?, T::U32)?;
            Op::Shf {
                left,
                wrap,
                d: cx.dst(o(0)?)?,
                a,
                b,
                c,
            }
        }
        "dp4a" | "dp2a" => {
            let two = base == "dp2a";
            let hi = two && take(m, "hi");
            if two && !hi && !take(m, "lo") {
                return Err(ns(opcode));
            }
            let bt = take_type(m).ok_or_else(|| ns(opcode))?;
            let at = take_type(m).ok_or_else(|| ns(opcode))?;
            if !matches!(at, T::U32 | T::S32) || !matches!(bt, T::U32 | T::S32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 4)?;
            let a = cx.src(o(1)?, at)?;
            let b = cx.src(o(2)?, bt)?;
            let ct = if at == T::S32 || bt == T::S32 {
                T::S32
            } else {
                T::U32
            };
            let c = cx.src(o(3)?, ct)?;
            Op::Dp {
                two,
                hi,
                asig: at == T::S32,
                bsig: bt == T::S32,
                d: cx.dst(o(0)?)?,
                a,
                b,
                c,
            }
        }
        "set" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            let dt = take_type(m).ok_or_else(|| ns(opcode))?;
            // The value written when the comparison holds: all ones of an integer type, 1.0
            // of a float type.
            let truth = match dt {
                T::U32 | T::S32 => 0xffff_ffff,
                T::U16 | T::S16 => 0xffff,
                T::F32 => 1.0f32.to_bits(),
                T::F16 => 0x3c00,
                T::BF16 => 0x3f80,
                _ => return Err(ns(opcode)),
            };
            if t == T::Pred || t.lane().is_some() {
                return Err(ns(opcode));
            }
            if m.is_empty() {
                return Err(ns(opcode));
            }
            let cmp = cmp_of(m.remove(0)).ok_or_else(|| ns(opcode))?;
            let bop = if take(m, "and") {
                Some(BoolOp::And)
            } else if take(m, "or") {
                Some(BoolOp::Or)
            } else if take(m, "xor") {
                Some(BoolOp::Xor)
            } else {
                None
            };
            take(m, "ftz");
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, t)?;
            let comb = match bop {
                None => {
                    cx.nops(ops, 3)?;
                    None
                }
                Some(bop) => {
                    cx.nops(ops, 4)?;
                    let (r, neg) = match &ops[3] {
                        Opd::NotName(n) => (cx.src(&Opd::Name(n), T::Pred)?, true),
                        other => (cx.src(other, T::Pred)?, false),
                    };
                    Some((bop, r, neg))
                }
            };
            Op::Set {
                cmp,
                t,
                truth,
                d: cx.dst(o(0)?)?,
                a,
                b,
                comb,
            }
        }
        "match" => {
            if !take(m, "sync") {
                return Err(ns(opcode));
            }
            let all = take(m, "all");
            if !all && !take(m, "any") {
                return Err(ns(opcode));
            }
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            if !matches!(t, T::U32 | T::U64) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 3)?;
            let (d, p) = match o(0)? {
                Opd::Pair(a, b) if all => {
                    let a = cx.dst(&Opd::Name(a))?;
                    (a, Some(cx.dst(&Opd::Name(b))?))
                }
                other => (cx.dst(other)?, None),
            };
            let a = cx.src(o(1)?, t)?;
            let mask = cx.src(o(2)?, T::U32)?;
            Op::Match {
                all,
                bits: t.bits() as u8,
                d,
                p,
                a,
                mask,
            }
        }
        "sad" => {
            let t = take_type(m).ok_or_else(|| ns(opcode))?;
            if !t.int() {
                return Err(ns(opcode));
            }
            cx.nops(ops, 4)?;
            let a = cx.src(o(1)?, t)?;
            let b = cx.src(o(2)?, t)?;
            let c = cx.src(o(3)?, t)?;
            Op::Sad {
                t,
                d: cx.dst(o(0)?)?,
                a,
                b,
                c,
            }
        }
        "bar" | "barrier" => {
            take_any(m, &["cta", "aligned"]);
            if take(m, "warp") {
                if !take(m, "sync") {
                    return Err(ns(opcode));
                }
                cx.nops(ops, 1)?;
                return Ok(Op::WarpSync {
                    mask: cx.src(o(0)?, T::U32)?,
                });
            }
            if !(take(m, "sync") || base == "bar" && m.is_empty()) {
                return Err(ns(opcode));
            }
            if ops.is_empty() || ops.len() > 2 {
                return Err(cx.inv("expected 1 or 2 operands"));
            }
            let id = cx.src(o(0)?, T::U32)?;
            let count = if ops.len() == 2 {
                Some(cx.src(o(1)?, T::U32)?)
            } else {
                None
            };
            Op::Bar { id, count }
        }
        "membar" | "fence" => {
            m.clear(); // all orderings are satisfied by the interpreter's execution
            Op::Fence
        }
        "nanosleep" | "prefetch" | "prefetchu" | "pmevent" => {
            m.clear();
            Op::Nop
        }
        "shfl" => {
            if !take(m, "sync") {
                return Err(ns(opcode));
            }
            let mode = if take(m, "idx") {
                ShflMode::Idx
            } else if take(m, "up") {
                ShflMode::Up
            } else if take(m, "down") {
                ShflMode::Down
            } else if take(m, "bfly") {
                ShflMode::Bfly
            } else {
                return Err(ns(opcode));
            };
            if take_type(m) != Some(T::U32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 5)?;
            let (d, p) = match o(0)? {
                Opd::Pair(a, b) => {
                    let a = cx.dst(&Opd::Name(a))?;
                    (a, Some(cx.dst(&Opd::Name(b))?))
                }
                other => (cx.dst(other)?, None),
            };
            let a = cx.src(o(1)?, T::U32)?;
            let b = cx.src(o(2)?, T::U32)?;
            let c = cx.src(o(3)?, T::U32)?;
            let mask = cx.src(o(4)?, T::U32)?;
            Op::Shfl {
                mode,
                d,
                p,
                a,
                b,
                c,
                mask,
            }
        }
        "vote" => {
            let sync = take(m, "sync");
            let mode = if take(m, "all") {
                VoteMode::All
            } else if take(m, "any") {
                VoteMode::Any
            } else if take(m, "uni") {
                VoteMode::Uni
            } else if take(m, "ballot") {
                VoteMode::Ballot
            } else {
                return Err(ns(opcode));
            };
            let t = take_type(m);
            let okt = if mode == VoteMode::Ballot {
                t == Some(T::U32)
            } else {
                t == Some(T::Pred)
            };
            if !okt {
                return Err(ns(opcode));
            }
            cx.nops(ops, if sync { 3 } else { 2 })?;
            let (a, neg) = match o(1)? {
                Opd::NotName(n) => (cx.src(&Opd::Name(n), T::Pred)?, true),
                other => (cx.src(other, T::Pred)?, false),
            };
            let mask = if sync {
                cx.src(o(2)?, T::U32)?
            } else {
                cx.f.konst(0xffff_ffff)
            };
            Op::Vote {
                mode,
                d: cx.dst(o(0)?)?,
                a,
                neg,
                mask,
            }
        }
        "activemask" => {
            if take_type(m) != Some(T::U32) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 1)?;
            Op::Activemask { d: cx.dst(o(0)?)? }
        }
        "bra" | "brx" => {
            if base == "brx" {
                return Err(ns(opcode));
            }
            take(m, "uni");
            cx.nops(ops, 1)?;
            Op::Bra { target: 0 }
        }
        "call" => {
            take(m, "uni");
            let (rets, name, args): (&[&str], &str, &[&str]) = match ops {
                [Opd::Paren(r), Opd::Name(n), Opd::Paren(a)] => (r, n, a),
                [Opd::Paren(r), Opd::Name(n)] => (r, n, &[]),
                [Opd::Name(n), Opd::Paren(a)] => (&[], n, a),
                [Opd::Name(n)] => (&[], n, &[]),
                _ => return Err(ns(&format!("{opcode} (this operand form)"))),
            };
            let off_of = |cx: &Cx, s: &str| match cx.f.lookup(s) {
                Some(Name::FParam(o)) => Ok(o),
                _ => Err(ns(&format!("call argument {s} (only .param variables)"))),
            };
            let mut site = CallSite {
                callee: Callee::Named(name.to_string()),
                args: vec![],
                rets: vec![],
            };
            for a in args {
                site.args.push(off_of(cx, a)?);
            }
            for r in rets {
                site.rets.push(off_of(cx, r)?);
            }
            match cx.name(name) {
                Some(Name::Func(_)) => {}
                _ => return Err(cx.inv(&format!("call to undeclared function {name}"))),
            }
            cx.f.f.calls.push(site);
            Op::Call {
                site: (cx.f.f.calls.len() - 1) as u32,
            }
        }
        "ret" => {
            take(m, "uni");
            Op::Ret
        }
        "exit" => Op::Exit,
        "trap" | "brkpt" => Op::Trap,
        "griddepcontrol" => {
            // Launches run one after another: the previous grid has completed, and its
            // memory is visible, before a dependent one starts.
            if !(take(m, "wait") || take(m, "launch_dependents")) {
                return Err(ns(opcode));
            }
            cx.nops(ops, 0)?;
            Op::Nop
        }
        "mbarrier" => decode_mbarrier(cx, m, ops)?,
        "cp" => decode_bulk(cx, m, ops)?,
        "ldmatrix" => decode_ldmatrix(cx, m, ops)?,
        "mma" => decode_mma(cx, m, ops)?,
        _ => return Err(ns(opcode)),
    })
}

/// The shared address of an mbarrier operand (`[reg]` or `[symbol]`, no offset).
fn shared_addr<'a>(cx: &mut Cx<'_, 'a, '_>, o: &Opd<'a>) -> Result<R, LoadError> {
    match cx.addr(o)? {
        (r, 0) => Ok(r),
        _ => Err(ns(&format!("{} (an address offset)", cx.op))),
    }
}

/// `mbarrier.init`, `mbarrier.arrive[.expect_tx]`, `mbarrier.try_wait.parity` on
/// `.shared::cta` (or `.shared`) 64-bit barriers.
fn decode_mbarrier<'a>(
    cx: &mut Cx<'_, 'a, '_>,
    m: &mut Vec<&'a str>,
    ops: &[Opd<'a>],
) -> Result<Op, LoadError> {
    let opcode = cx.op;
    take_any(m, &["release", "acquire", "relaxed", "cta"]);
    if !matches!(take_space(m), Space::Shared) || !take(m, "b64") {
        return Err(ns(opcode));
    }
    if take(m, "init") {
        cx.nops(ops, 2)?;
        let addr = shared_addr(cx, &ops[0])?;
        let count = cx.src(&ops[1], T::U32)?;
        return Ok(Op::MbarInit { addr, count });
    }
    if take(m, "arrive") {
        let expect = take(m, "expect_tx");
        cx.nops(ops, if expect { 3 } else { 2 })?;
        let d = cx.dst(&ops[0])?;
        let addr = shared_addr(cx, &ops[1])?;
        let tx = if expect {
            cx.src(&ops[2], T::U32)?
        } else {
            cx.f.konst(0)
        };
        return Ok(Op::MbarArrive {
            d,
            addr,
            tx,
            expect,
        });
    }
    if take(m, "try_wait") || take(m, "test_wait") {
        if !take(m, "parity") {
            return Err(ns(opcode));
        }
        cx.nops(ops, 3)?;
        let p = cx.dst(&ops[0])?;
        let addr = shared_addr(cx, &ops[1])?;
        let parity = cx.src(&ops[2], T::U32)?;
        return Ok(Op::MbarTryWait { p, addr, parity });
    }
    Err(ns(opcode))
}

/// `cp.async.bulk.tensor.Nd` (tile mode, global to `shared::cluster` with an mbarrier, or
/// `shared::cta` to global with a bulk group; the im2col modes are not supported),
/// `cp.async.bulk.commit_group` and
/// `cp.async.bulk.wait_group[.read]`.
fn decode_bulk<'a>(
    cx: &mut Cx<'_, 'a, '_>,
    m: &mut Vec<&'a str>,
    ops: &[Opd<'a>],
) -> Result<Op, LoadError> {
    let opcode = cx.op;
    if !(take(m, "async") && take(m, "bulk")) {
        return Err(ns(opcode));
    }
    if take(m, "commit_group") {
        cx.nops(ops, 0)?;
        // Copies complete when they are issued.
        return Ok(Op::Nop);
    }
    if take(m, "wait_group") {
        take(m, "read");
        cx.nops(ops, 1)?;
        return Ok(Op::Nop);
    }
    if !take(m, "tensor") {
        return Err(ns(opcode));
    }
    let rank = ["1d", "2d", "3d", "4d", "5d"]
        .iter()
        .position(|w| take(m, w))
        .ok_or_else(|| ns(opcode))?
        + 1;
    // The im2col modes (`.im2col`, `.im2col::w`, ...) are valid PTX that is not interpreted.
    if m.iter().any(|w| w.starts_with("im2col")) {
        return Err(ns(opcode));
    }
    take(m, "tile");
    let load = if take(m, "shared::cluster") {
        if !(take(m, "global") && take(m, "mbarrier::complete_tx::bytes")) {
            return Err(ns(opcode));
        }
        true
    } else if take(m, "global") {
        if !(take(m, "shared::cta") && take(m, "bulk_group")) {
            return Err(ns(opcode));
        }
        false
    } else {
        return Err(ns(opcode));
    };
    let (tensor, shared, mbar) = match (load, ops) {
        (true, [dst, tensor, mbar]) => (tensor, dst, Some(mbar)),
        (false, [tensor, src]) => (tensor, src, None),
        _ => return Err(cx.inv("unexpected operands")),
    };
    let Opd::Tensor(map, coords) = tensor else {
        return Err(cx.inv("expected [tensor map, {coordinates}]"));
    };
    if coords.len() != rank {
        return Err(cx.inv("coordinates do not match the dimension"));
    }
    let map = cx.src(&Opd::Name(map), T::U64)?;
    let coords = coords
        .iter()
        .map(|c| cx.src(c, T::S32))
        .collect::<Result<Vec<_>, _>>()?;
    let shared = shared_addr(cx, shared)?;
    let mbar = match mbar {
        Some(mbar) => shared_addr(cx, mbar)?,
        None => cx.f.konst(0),
    };
    cx.f.f.tensor_sites.push(TensorSite {
        load,
        map,
        coords,
        shared,
        mbar,
    });
    Ok(Op::Tensor {
        site: (cx.f.f.tensor_sites.len() - 1) as u32,
    })
}

/// The registers of a `{…}` operand of exactly `n` registers, as destinations or as sources
/// of type `t`.
fn reg_list<'a>(
    cx: &mut Cx<'_, 'a, '_>,
    o: &Opd<'a>,
    n: usize,
    dst: bool,
    t: T,
) -> Result<Vec<R>, LoadError> {
    match o {
        Opd::Vec(v) if v.len() == n => v
            .iter()
            .map(|x| if dst { cx.dst(x) } else { cx.src(x, t) })
            .collect(),
        x if n == 1 => Ok(vec![if dst { cx.dst(x)? } else { cx.src(x, t)? }]),
        _ => Err(cx.inv(&format!("expected {{…}} of {n} registers"))),
    }
}

/// `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans][.shared[::cta]].b16 d, [addr]`.
fn decode_ldmatrix<'a>(
    cx: &mut Cx<'_, 'a, '_>,
    m: &mut Vec<&'a str>,
    ops: &[Opd<'a>],
) -> Result<Op, LoadError> {
    let opcode = cx.op;
    if !(take(m, "sync") && take(m, "aligned") && take(m, "m8n8") && take(m, "b16")) {
        return Err(ns(opcode));
    }
    let n = if take(m, "x1") {
        1
    } else if take(m, "x2") {
        2
    } else if take(m, "x4") {
        4
    } else {
        return Err(ns(opcode));
    };
    let trans = take(m, "trans");
    take_any(m, &["shared", "shared::cta"]);
    if !m.is_empty() {
        return Err(ns(opcode));
    }
    cx.nops(ops, 2)?;
    let regs = reg_list(cx, &ops[0], n as usize, true, T::U32)?;
    let (addr, off) = cx.addr(&ops[1])?;
    let mut d = [0; 4];
    d[..regs.len()].copy_from_slice(&regs);
    let mask = cx.f.konst(0xffff_ffff);
    Ok(Op::Ldmatrix {
        n,
        trans,
        d,
        addr,
        off,
        mask,
    })
}

/// `mma.sync.aligned.m16n8k{16,32}.row.col[.satfinite].s32.{s8,u8}.{s8,u8}.s32 d, a, b, c`:
/// the integer shapes (quantized matrix products); the others are not interpreted.
fn decode_mma<'a>(
    cx: &mut Cx<'_, 'a, '_>,
    m: &mut Vec<&'a str>,
    ops: &[Opd<'a>],
) -> Result<Op, LoadError> {
    let opcode = cx.op;
    if !(take(m, "sync") && take(m, "aligned") && take(m, "row") && take(m, "col")) {
        return Err(ns(opcode));
    }
    let k = if take(m, "m16n8k16") {
        16
    } else if take(m, "m16n8k32") {
        32
    } else {
        return Err(ns(opcode));
    };
    let satfinite = take(m, "satfinite");
    // The types in order: D, A, B, C.
    let types: Vec<&str> = std::mem::take(m);
    let signed = |w: &str| match w {
        "s8" => Some(true),
        "u8" => Some(false),
        _ => None,
    };
    let [dt, at, bt, ct] = types.as_slice() else {
        return Err(ns(opcode));
    };
    let (Some(a_signed), Some(b_signed)) = (signed(at), signed(bt)) else {
        return Err(ns(opcode));
    };
    if *dt != "s32" || *ct != "s32" {
        return Err(ns(opcode));
    }
    cx.nops(ops, 4)?;
    let d = reg_list(cx, &ops[0], 4, true, T::S32)?;
    let a = reg_list(cx, &ops[1], k / 8, false, T::U32)?;
    let b = reg_list(cx, &ops[2], k / 16, false, T::U32)?;
    let c = reg_list(cx, &ops[3], 4, false, T::S32)?;
    let mut site = MmaSite {
        k: k as u8,
        a_signed,
        b_signed,
        satfinite,
        d: [0; 4],
        a: [0; 4],
        b: [0; 2],
        c: [0; 4],
    };
    site.d.copy_from_slice(&d);
    site.a[..a.len()].copy_from_slice(&a);
    site.b[..b.len()].copy_from_slice(&b);
    site.c.copy_from_slice(&c);
    cx.f.f.mma_sites.push(site);
    let mask = cx.f.konst(0xffff_ffff);
    Ok(Op::Mma {
        site: (cx.f.f.mma_sites.len() - 1) as u32,
        mask,
    })
}
