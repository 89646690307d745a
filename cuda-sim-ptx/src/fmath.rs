//! Floating-point semantics: arithmetic with rounding modes, approximate functions,
//! conversions (including f16).
//!
//! `.rn` results are Rust's (IEEE, correctly rounded) operations. For `.rz/.rm/.rp` the
//! round-to-nearest result is corrected by one ulp using the sign of the exact error, which
//! is computed exactly (TwoSum for add/sub, an FMA residual for mul/div/sqrt/rcp). This is
//! exact except for results that overflow to infinity. `fma.f32` with a directed rounding is
//! exact (the product is exact in f64, the sum's error by TwoSum); `fma.f64`/`.f16` with a
//! directed rounding is refused at load. Integer→float `cvt` rounds exactly in integer
//! arithmetic. NaN results of arithmetic and conversions are the GPU's canonical NaN
//! (`0x7fffffff`, `0x7fffffffffffffff`, f16 `0x7fff`); `abs`/`neg` keep the payload. `.approx` functions use the host's accurate functions (the GPU's are
//! less accurate; the results differ from the GPU in the last bits).

use crate::ir::{CvtRnd, FOp, FUn, Narrow, NarrowCvt, Rnd, T, Testp};
use crate::lowp::{self, Mode};

/// The GPU's canonical NaN results.
pub(crate) const NAN32: u32 = 0x7fff_ffff;
pub(crate) const NAN64: u64 = 0x7fff_ffff_ffff_ffff;

fn c32(x: f32) -> u64 {
    if x.is_nan() {
        NAN32 as u64
    } else {
        x.to_bits() as u64
    }
}

fn c64(x: f64) -> u64 {
    if x.is_nan() { NAN64 } else { x.to_bits() }
}

pub(crate) fn ftz32(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

fn sat32(x: f32) -> f32 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

fn sat64(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

/// Moves a round-to-nearest result `r` by one ulp when the exact result (`r + err`, with
/// `err_sign` the sign of the error) rounds differently under `rnd`.
macro_rules! directed {
    ($r:expr, $err:expr, $rnd:expr) => {{
        let r = $r;
        let e = $err;
        if e == 0.0 || !r.is_finite() || e.is_nan() {
            r
        } else {
            match $rnd {
                Rnd::N => r,
                Rnd::Z => {
                    if r > 0.0 && e < 0.0 {
                        r.next_down()
                    } else if r < 0.0 && e > 0.0 {
                        r.next_up()
                    } else {
                        r
                    }
                }
                Rnd::M => {
                    if e < 0.0 {
                        r.next_down()
                    } else {
                        r
                    }
                }
                Rnd::P => {
                    if e > 0.0 {
                        r.next_up()
                    } else {
                        r
                    }
                }
            }
        }
    }};
}

macro_rules! float_ops {
    ($name:ident, $fma:ident, $un:ident, $f:ty) => {
        fn $name(op: FOp, rnd: Rnd, a: $f, b: $f) -> $f {
            match op {
                FOp::Add | FOp::Sub => {
                    let b = if op == FOp::Sub { -b } else { b };
                    let s = a + b;
                    if rnd == Rnd::N {
                        return s;
                    }
                    if s == 0.0 && rnd == Rnd::M {
                        // An exact zero sum is -0 when rounding down (unless both are +0).
                        let both_pos = a == 0.0 && a.is_sign_positive() && b.is_sign_positive();
                        return if both_pos { 0.0 } else { -0.0 };
                    }
                    let bb = s - a;
                    let err = (a - (s - bb)) + (b - bb);
                    directed!(s, err, rnd)
                }
                FOp::Mul => {
                    let p = a * b;
                    if rnd == Rnd::N {
                        return p;
                    }
                    directed!(p, a.mul_add(b, -p), rnd)
                }
                FOp::Div => {
                    let q = a / b;
                    if rnd == Rnd::N {
                        return q;
                    }
                    // a - q*b exactly; the error of q has this sign times the sign of b.
                    let rem = (-q).mul_add(b, a);
                    directed!(q, if b < 0.0 { -rem } else { rem }, rnd)
                }
                FOp::Min => a.min(b),
                FOp::Max => a.max(b),
                FOp::MinNan | FOp::MaxNan if a.is_nan() || b.is_nan() => <$f>::NAN,
                FOp::MinNan => a.min(b),
                FOp::MaxNan => a.max(b),
                // copysign d, a, b: b's magnitude with a's sign.
                FOp::Copysign => b.copysign(a),
            }
        }
        fn $fma(a: $f, b: $f, c: $f) -> $f {
            a.mul_add(b, c)
        }
        fn $un(op: FUn, rnd: Rnd, a: $f) -> $f {
            match op {
                FUn::Abs => a.abs(),
                FUn::Neg => -a,
                FUn::Rcp => $name(FOp::Div, rnd, 1.0, a),
                FUn::Sqrt => {
                    let r = a.sqrt();
                    if rnd == Rnd::N {
                        return r;
                    }
                    directed!(r, (-r).mul_add(r, a), rnd)
                }
                FUn::Rsqrt => 1.0 / a.sqrt(),
                FUn::Sin => a.sin(),
                FUn::Cos => a.cos(),
                FUn::Ex2 => a.exp2(),
                FUn::Lg2 => a.log2(),
                FUn::Tanh => a.tanh(),
            }
        }
    };
}

float_ops!(bin32, fma32, un32, f32);
float_ops!(bin64, fma64, un64, f64);

/// Applies `f` to each lane of packed pairs (`.f16x2`, `.bf16x2`).
fn per_lane(a: u64, b: u64, c: u64, f: impl Fn(u64, u64, u64) -> u64) -> u64 {
    let ((a0, a1), (b0, b1), (c0, c1)) = (lowp::lanes(a), lowp::lanes(b), lowp::lanes(c));
    lowp::pack(f(a0, b0, c0), f(a1, b1, c1))
}

/// `min`/`max` of two bf16 values (as f64): NaN only when both are (or with `.NaN` either
/// is), and -0 below +0.
fn minmax(op: FOp, x: f64, y: f64) -> f64 {
    let max = matches!(op, FOp::Max | FOp::MaxNan);
    if x.is_nan() || y.is_nan() {
        return if matches!(op, FOp::MinNan | FOp::MaxNan) || x.is_nan() && y.is_nan() {
            f64::NAN
        } else if x.is_nan() {
            y
        } else {
            x
        };
    }
    if x == y {
        // Equal values differ at most in the sign of zero.
        return if x.is_sign_negative() == max { y } else { x };
    }
    if (x > y) == max { x } else { y }
}

/// bf16 arithmetic, rounded to nearest even once: sums and quotients are rounded to odd in
/// f64 first (exact products need no care), which a second rounding to 8 bits keeps exact.
fn bf16_bin(op: FOp, a: u64, b: u64) -> u64 {
    if op == FOp::Copysign {
        return (b & 0x7fff) | (a & 0x8000);
    }
    let x = lowp::bf16_to_f32(a as u16) as f64;
    let y = lowp::bf16_to_f32(b as u16) as f64;
    let r = match op {
        FOp::Add | FOp::Sub => {
            let (s, e) = lowp::two_sum(x, if op == FOp::Sub { -y } else { y });
            lowp::round_odd(s, e)
        }
        FOp::Mul => x * y,
        FOp::Div => {
            let q = x / y;
            let rem = (-q).mul_add(y, x);
            lowp::round_odd(q, if y < 0.0 { -rem } else { rem })
        }
        _ => minmax(op, x, y),
    };
    lowp::to_bf16(r, Rnd::N) as u64
}

pub(crate) fn fbin(op: FOp, t: T, rnd: Rnd, ftz: bool, sat: bool, a: u64, b: u64) -> u64 {
    if let Some(lane) = t.lane() {
        return per_lane(a, b, 0, |x, y, _| fbin(op, lane, rnd, ftz, sat, x, y));
    }
    if t == T::BF16 {
        return bf16_bin(op, a, b);
    }
    if t == T::F16 {
        // f32 arithmetic rounded to f16 is correctly rounded (24 >= 2 * 11 + 2).
        let r = bin32(op, Rnd::N, f16_to_f32(a as u16), f16_to_f32(b as u16));
        let _ = rnd;
        return f32_to_f16(if sat { sat32(r) } else { r }) as u64;
    }
    if t == T::F64 {
        if op == FOp::Copysign {
            return (b & !(1 << 63)) | (a & (1 << 63));
        }
        let r = bin64(op, rnd, f64::from_bits(a), f64::from_bits(b));
        return c64(if sat { sat64(r) } else { r });
    }
    let (mut x, mut y) = (f32::from_bits(a as u32), f32::from_bits(b as u32));
    if ftz {
        x = ftz32(x);
        y = ftz32(y);
    }
    if op == FOp::Copysign {
        // A sign-bit operation: the payload of a NaN magnitude is kept.
        return ((b as u32 & 0x7fff_ffff) | (a as u32 & 0x8000_0000)) as u64;
    }
    let mut r = bin32(op, rnd, x, y);
    if ftz {
        r = ftz32(r);
    }
    if sat {
        r = sat32(r);
    }
    c32(r)
}

/// `fma.f32` rounded in direction `rnd`, exactly: `a*b` is exact in f64, `p + c` is `s + e`
/// exactly (TwoSum), and the f32 nearest to `s` is moved by one ulp by the sign of the
/// remaining error.
fn fma32_directed(rnd: Rnd, a: f32, b: f32, c: f32) -> f32 {
    let r0 = fma32(a, b, c);
    // With an infinite or NaN operand the result does not depend on the rounding.
    if rnd == Rnd::N || !(a.is_finite() && b.is_finite() && c.is_finite()) {
        return r0;
    }
    let p = a as f64 * b as f64;
    let cd = c as f64;
    let s = p + cd;
    let bb = s - p;
    let e = (p - (s - bb)) + (cd - bb);
    if s == 0.0 && e == 0.0 {
        // An exact zero: -0 when rounding down unless both terms are +0.
        let both_pos = p.is_sign_positive() && cd.is_sign_positive();
        return match rnd {
            Rnd::M if !both_pos => -0.0,
            Rnd::M => 0.0,
            _ => s as f32,
        };
    }
    let r = s as f32;
    if r.is_infinite() {
        // Overflow: the exact value lies beyond the largest finite f32.
        let pos = s > 0.0;
        let max = if pos { f32::MAX } else { -f32::MAX };
        return match (rnd, pos) {
            (Rnd::Z, _) | (Rnd::M, true) | (Rnd::P, false) => max,
            _ => r,
        };
    }
    // Exact value = r + ((s - r) + e); the sum keeps the sign of the exact error.
    let err = (s - r as f64) + e;
    directed!(r, err, rnd)
}

pub(crate) fn fma(t: T, rnd: Rnd, ftz: bool, sat: bool, a: u64, b: u64, c: u64) -> u64 {
    if let Some(lane) = t.lane() {
        return per_lane(a, b, c, |x, y, z| fma(lane, rnd, ftz, sat, x, y, z));
    }
    if matches!(t, T::BF16 | T::F16) {
        // The product of two bf16 or f16 values is exact in f64; the sum is rounded to odd,
        // then once to the format (rounding the sum to f32 first could round twice).
        let h = |v: u64| as_float(t, v);
        let (s, e) = lowp::two_sum(h(a) * h(b), h(c));
        let r = lowp::round_odd(s, e);
        let r = if sat { sat64(r) } else { r };
        return if t == T::BF16 {
            lowp::to_bf16(r, Rnd::N)
        } else {
            lowp::to_f16(r, Rnd::N)
        } as u64;
    }
    if t == T::F64 {
        // Directed roundings of f64 fma are refused at load.
        let r = fma64(f64::from_bits(a), f64::from_bits(b), f64::from_bits(c));
        return c64(if sat { sat64(r) } else { r });
    }
    let f = |v: u64| {
        let x = f32::from_bits(v as u32);
        if ftz { ftz32(x) } else { x }
    };
    let mut r = fma32_directed(rnd, f(a), f(b), f(c));
    if ftz {
        r = ftz32(r);
    }
    if sat {
        r = sat32(r);
    }
    c32(r)
}

pub(crate) fn fun(op: FUn, t: T, rnd: Rnd, ftz: bool, a: u64) -> u64 {
    if let Some(lane) = t.lane() {
        return per_lane(a, 0, 0, |x, _, _| fun(op, lane, rnd, ftz, x));
    }
    // Only `abs`/`neg` decode for the 16-bit types: sign-bit operations.
    if matches!(t, T::F16 | T::BF16) {
        return match op {
            FUn::Neg => (a ^ 0x8000) & 0xffff,
            _ => a & 0x7fff,
        };
    }
    // abs/neg are sign-bit operations: the NaN payload is kept (as on the GPU).
    let bitop = matches!(op, FUn::Abs | FUn::Neg);
    if t == T::F64 {
        return match op {
            FUn::Abs => a & !(1 << 63),
            FUn::Neg => a ^ (1 << 63),
            _ => c64(un64(op, rnd, f64::from_bits(a))),
        };
    }
    let mut x = f32::from_bits(a as u32);
    if ftz {
        x = ftz32(x);
    }
    if bitop && x.is_nan() {
        return if op == FUn::Abs {
            a & 0x7fff_ffff
        } else {
            (a ^ 0x8000_0000) & 0xffff_ffff
        };
    }
    let mut r = un32(op, rnd, x);
    if ftz {
        r = ftz32(r);
    }
    c32(r)
}

pub(crate) fn testp(op: Testp, t: T, a: u64) -> bool {
    let x = if t == T::F64 {
        f64::from_bits(a)
    } else {
        f32::from_bits(a as u32) as f64
    };
    let sub = if t == T::F64 {
        x.is_subnormal()
    } else {
        f32::from_bits(a as u32).is_subnormal()
    };
    match op {
        Testp::Finite => x.is_finite(),
        Testp::Infinite => x.is_infinite(),
        Testp::Number => !x.is_nan(),
        Testp::NotANumber => x.is_nan(),
        Testp::Normal => x.is_finite() && x != 0.0 && !sub,
        Testp::Subnormal => sub,
    }
}

pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Subnormal: value = man * 2^-24.
            return if sign != 0 {
                -(man as f32) * 2f32.powi(-24)
            } else {
                man as f32 * 2f32.powi(-24)
            };
        }
    } else if exp == 31 {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 112) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// f32 → f16, round to nearest even.
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    lowp::to_f16(x as f64, Rnd::N)
}

fn round_int(x: f64, r: Rnd) -> f64 {
    match r {
        Rnd::N => x.round_ties_even(),
        Rnd::Z => x.trunc(),
        Rnd::M => x.floor(),
        Rnd::P => x.ceil(),
    }
}

/// Float value of a source register of float type `st`.
pub(crate) fn as_float(st: T, a: u64) -> f64 {
    match st {
        T::F16 => f16_to_f32(a as u16) as f64,
        T::BF16 => lowp::bf16_to_f32(a as u16) as f64,
        T::F32 => f32::from_bits(a as u32) as f64,
        _ => f64::from_bits(a),
    }
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 { !0 } else { (1u64 << bits) - 1 }
}

/// `±mag` rounded to `mant` significant bits in direction `r` (exact integer arithmetic).
fn int_to_float_directed(neg: bool, mag: u64, mant: u32, r: Rnd) -> f64 {
    let nbits = 64 - mag.leading_zeros();
    let (q, shift) = if nbits <= mant {
        (mag, 0)
    } else {
        let shift = nbits - mant;
        let q = mag >> shift;
        let rem = mag & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        let up = match r {
            Rnd::Z => false,
            Rnd::M => neg && rem != 0,
            Rnd::P => !neg && rem != 0,
            Rnd::N => rem > half || rem == half && q & 1 == 1,
        };
        (q + up as u64, shift)
    };
    let m = q as f64 * 2f64.powi(shift as i32);
    if neg { -m } else { m }
}

pub(crate) fn cvt(dt: T, st: T, rnd: CvtRnd, sat: bool, ftz: bool, a: u64) -> u64 {
    let sbits = st.bits();
    let dbits = dt.bits();
    let dm = mask(dbits);
    if st.int() && dt.int() {
        let v: i128 = if st.signed() {
            (((a << (64 - sbits)) as i64) >> (64 - sbits)) as i128
        } else {
            (a & mask(sbits)) as i128
        };
        let v = if sat {
            let (lo, hi): (i128, i128) = if dt.signed() {
                (-(1i128 << (dbits - 1)), (1i128 << (dbits - 1)) - 1)
            } else {
                (0, (1i128 << dbits) - 1)
            };
            v.clamp(lo, hi)
        } else {
            v
        };
        return v as u64 & dm;
    }
    if st.int() {
        let signed = st.signed();
        let v = if signed {
            (((a << (64 - sbits)) as i64) >> (64 - sbits)) as u64
        } else {
            a & mask(sbits)
        };
        if matches!(dt, T::BF16 | T::F16) {
            // Rounded once, exactly, to the format's significant bits (8 or 11), then
            // encoded in the same direction (which only decides an overflow of f16).
            let r = match rnd {
                CvtRnd::Float(r) => r,
                _ => Rnd::N,
            };
            let neg = signed && (v as i64) < 0;
            let mag = if neg { (v as i64).unsigned_abs() } else { v };
            let bits = if dt == T::BF16 { 8 } else { 11 };
            let f = int_to_float_directed(neg, mag, bits, r);
            let f = if sat { sat64(f) } else { f };
            return if dt == T::BF16 {
                lowp::to_bf16(f, r)
            } else {
                lowp::to_f16(f, r)
            } as u64;
        }
        if let CvtRnd::Float(r) = rnd
            && r != Rnd::N
        {
            let neg = signed && (v as i64) < 0;
            let mag = if neg { (v as i64).unsigned_abs() } else { v };
            let f = int_to_float_directed(neg, mag, if dt == T::F64 { 53 } else { 24 }, r);
            return if dt == T::F64 {
                (if sat { sat64(f) } else { f }).to_bits()
            } else {
                let f = f as f32; // exact: `f` has at most 24 significant bits
                (if sat { sat32(f) } else { f }).to_bits() as u64
            };
        }
        return match dt {
            T::F64 => {
                let f = if signed { v as i64 as f64 } else { v as f64 };
                (if sat { sat64(f) } else { f }).to_bits()
            }
            _ => {
                // Direct integer → f32 conversion (no double rounding through f64).
                let f = if signed { v as i64 as f32 } else { v as f32 };
                (if sat { sat32(f) } else { f }).to_bits() as u64
            }
        };
    }
    let x = as_float(st, a);
    let x = if ftz && st == T::F32 && f32::from_bits(a as u32).is_subnormal() {
        0.0f64.copysign(x)
    } else {
        x
    };
    if dt.int() {
        // float → int: round (default toward zero), saturate, NaN → 0.
        let r = match rnd {
            CvtRnd::Int(r) | CvtRnd::Float(r) => r,
            CvtRnd::None => Rnd::Z,
        };
        let y = round_int(x, r);
        let v: u64 = match dt {
            T::S8 => y as i8 as u64,
            T::S16 => y as i16 as u64,
            T::S32 => y as i32 as u64,
            T::S64 => y as i64 as u64,
            T::U8 => y as u8 as u64,
            T::U16 => y as u16 as u64,
            T::U32 => y as u32 as u64,
            _ => y as u64,
        };
        return v & dm;
    }
    // float → float.
    let y = match rnd {
        CvtRnd::Int(r) => round_int(x, r),
        _ => x,
    };
    match dt {
        T::F64 => c64(if sat { sat64(y) } else { y }),
        T::F32 => {
            let mut r = y as f32;
            if let CvtRnd::Float(m) = rnd
                && st == T::F64
                && m != Rnd::N
            {
                r = directed!(r, y - r as f64, m);
            }
            if ftz {
                r = ftz32(r);
            }
            c32(if sat { sat32(r) } else { r })
        }
        _ => {
            // bf16 and f16: one rounding of the exact value, in the direction asked.
            let m = match rnd {
                CvtRnd::Float(m) => m,
                _ => Rnd::N,
            };
            let y = if sat { sat64(y) } else { y };
            if dt == T::BF16 {
                lowp::to_bf16(y, m) as u64
            } else {
                lowp::to_f16(y, m) as u64
            }
        }
    }
}

/// The format of a narrow `cvt` type.
fn narrow_fmt(n: Narrow) -> lowp::Fmt {
    match n {
        Narrow::F16 => lowp::F16,
        Narrow::Bf16 => lowp::BF16,
        Narrow::E4m3 => lowp::E4M3,
        Narrow::E5m2 => lowp::E5M2,
    }
}

/// `cvt` to or from a narrow packed format (`Op::CvtNarrow`).
pub(crate) fn cvt_narrow(
    cvt: NarrowCvt,
    rnd: Rnd,
    relu: bool,
    satfinite: bool,
    a: u64,
    b: u64,
) -> u64 {
    let mode = Mode { satfinite, relu };
    let from_f32 = |n: Narrow, v: u64| {
        lowp::encode(f32::from_bits(v as u32) as f64, narrow_fmt(n), rnd, mode) as u64
    };
    match cvt {
        NarrowCvt::One(n) => from_f32(n, a),
        NarrowCvt::Pair(n) => {
            let w = if matches!(n, Narrow::E4m3 | Narrow::E5m2) {
                8
            } else {
                16
            };
            (from_f32(n, a) << w) | from_f32(n, b)
        }
        NarrowCvt::FromF16x2(n) => {
            let (lo, hi) = lowp::lanes(a);
            let enc =
                |h: u64| lowp::encode(f16_to_f32(h as u16) as f64, narrow_fmt(n), rnd, mode) as u64;
            (enc(hi) << 8) | enc(lo)
        }
        NarrowCvt::ToF16x2(n) => {
            let f = narrow_fmt(n);
            let lane = |byte: u64| lowp::fp8_to_f16(byte as u8, f, relu) as u64;
            lowp::pack(lane(a & 0xff), lane((a >> 8) & 0xff))
        }
    }
}
