//! Narrow floating-point formats: bf16 and the fp8 formats e4m3 and e5m2 (and f16, for the
//! packed conversions), encoded from an exact `f64` value with one rounding, and decoded
//! exactly. The rules live here once: every `cvt`, packed conversion and bf16 arithmetic
//! result goes through [`encode`].
//!
//! * bf16: 1 sign, 8 exponent (bias 127), 7 mantissa bits; the top half of an f32, with
//!   infinities, NaNs and subnormals. Canonical NaN `0x7fff`.
//! * e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, NaN is `S.1111.111`,
//!   largest finite 448. Canonical NaN `0x7f`.
//! * e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like, with infinities
//!   (`0x7c`) and NaNs; largest finite 57344. Canonical NaN `0x7f`.
//! * f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Canonical NaN `0x7fff`.

use crate::ir::Rnd;

/// A narrow binary floating-point format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fmt {
    /// Mantissa (fraction) bits.
    man: u32,
    /// Exponent bits.
    exp: u32,
    /// Exponent bias.
    bias: i32,
    /// Whether the all-ones exponent encodes infinities and NaNs (IEEE); otherwise only the
    /// all-ones encoding is NaN and the rest of that exponent is finite (e4m3).
    ieee: bool,
    /// The canonical NaN this simulator produces (without sign).
    nan: u32,
}

pub(crate) const BF16: Fmt = Fmt {
    man: 7,
    exp: 8,
    bias: 127,
    ieee: true,
    nan: 0x7fff,
};
pub(crate) const F16: Fmt = Fmt {
    man: 10,
    exp: 5,
    bias: 15,
    ieee: true,
    nan: 0x7fff,
};
pub(crate) const E4M3: Fmt = Fmt {
    man: 3,
    exp: 4,
    bias: 7,
    ieee: false,
    nan: 0x7f,
};
pub(crate) const E5M2: Fmt = Fmt {
    man: 2,
    exp: 5,
    bias: 15,
    ieee: true,
    nan: 0x7f,
};

/// `2^k` exactly, for `k` in the normal range of f64.
fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

impl Fmt {
    fn sign_bit(self) -> u32 {
        1 << (self.man + self.exp)
    }
    /// The smallest normal exponent.
    fn emin(self) -> i32 {
        1 - self.bias
    }
    /// The largest exponent of a finite value.
    fn emax(self) -> i32 {
        let top = (1 << self.exp) - 1 - self.bias;
        if self.ieee { top - 1 } else { top }
    }
    /// The largest finite value's encoding (without sign).
    fn max_bits(self) -> u32 {
        if self.ieee {
            (((1 << self.exp) - 2) << self.man) | ((1 << self.man) - 1)
        } else {
            // All-ones exponent, mantissa all ones but the last bit (that one is NaN).
            (((1 << self.exp) - 1) << self.man) | ((1 << self.man) - 2)
        }
    }
    /// The magnitude of the largest finite value.
    fn max_value(self) -> f64 {
        decode(self.max_bits(), self)
    }
    /// Whether `bits` is a NaN.
    pub(crate) fn is_nan(self, bits: u32) -> bool {
        let mag = bits & (self.sign_bit() - 1);
        let exp_ones = ((1 << self.exp) - 1) << self.man;
        if self.ieee {
            mag & exp_ones == exp_ones && mag & ((1 << self.man) - 1) != 0
        } else {
            mag == (1 << (self.exp + self.man)) - 1
        }
    }
}

/// The exact value of `bits` in format `f` (NaN for NaN encodings).
pub(crate) fn decode(bits: u32, f: Fmt) -> f64 {
    let neg = bits & f.sign_bit() != 0;
    let e = ((bits >> f.man) & ((1 << f.exp) - 1)) as i32;
    let m = (bits & ((1 << f.man) - 1)) as f64;
    let mag = if f.is_nan(bits) {
        f64::NAN
    } else if f.ieee && e == (1 << f.exp) - 1 {
        f64::INFINITY
    } else if e == 0 {
        m * pow2(f.emin() - f.man as i32)
    } else {
        (m + pow2(f.man as i32)) * pow2(e - f.bias - f.man as i32)
    };
    if neg { -mag } else { mag }
}

/// How `encode` treats results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mode {
    /// `.satfinite`: a magnitude beyond the largest finite value (infinities included)
    /// becomes the largest finite value of the same sign; NaN stays NaN.
    pub satfinite: bool,
    /// `.relu`: a negative result becomes +0; NaN stays NaN.
    pub relu: bool,
}

/// `x` rounded (in direction `rnd`) to format `f`, as its encoding. NaN becomes the
/// format's canonical NaN. Without `.satfinite`, an overflow is infinity where the rounding
/// goes away from zero (IEEE formats) and the largest finite value otherwise; in e4m3, which
/// has no infinity, it is NaN.
pub(crate) fn encode(x: f64, f: Fmt, rnd: Rnd, mode: Mode) -> u32 {
    if x.is_nan() {
        return f.nan;
    }
    let neg = x.is_sign_negative();
    if mode.relu && neg {
        return 0;
    }
    let sign = if neg { f.sign_bit() } else { 0 };
    let a = x.abs();
    let overflow = || {
        let away = match rnd {
            Rnd::N => true,
            Rnd::Z => false,
            Rnd::M => neg,
            Rnd::P => !neg,
        };
        sign | if mode.satfinite || !away {
            f.max_bits()
        } else if f.ieee {
            ((1 << f.exp) - 1) << f.man
        } else {
            return f.nan;
        }
    };
    if a == 0.0 {
        return sign;
    }
    if a.is_infinite() {
        return if mode.satfinite {
            sign | f.max_bits()
        } else if f.ieee {
            sign | (((1 << f.exp) - 1) << f.man)
        } else {
            f.nan
        };
    }
    // The exponent of `a` (f64 subnormals lie far below every format's range).
    let ea = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    if ea > f.emax() {
        return overflow();
    }
    let e = ea.max(f.emin());
    // `a` in units of the format's quantum at exponent `e`: exact (a power-of-two scaling).
    let units = a * pow2(f.man as i32 - e);
    let q = match rnd {
        Rnd::N => units.round_ties_even(),
        Rnd::Z => units.trunc(),
        Rnd::M if neg => units.ceil(),
        Rnd::M => units.floor(),
        Rnd::P if neg => units.floor(),
        Rnd::P => units.ceil(),
    };
    let v = q * pow2(e - f.man as i32);
    if v > f.max_value() {
        return overflow();
    }
    if v == 0.0 {
        return sign;
    }
    let ev = ((v.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let bits = if ev < f.emin() {
        // Subnormal: the count of quanta at the minimum exponent.
        q as u32
    } else {
        let frac = (v * pow2(f.man as i32 - ev)) as u32 - (1 << f.man);
        (((ev + f.bias) as u32) << f.man) | frac
    };
    sign | bits
}

/// Round to odd: the value nearest `s + e` among those with 53 significant bits, where `s`
/// is a round-to-nearest result and `e` its exact error, chosen odd when the sum is inexact.
/// Rounding that value once more to a format of at most 51 significant bits gives the
/// correctly rounded result of the exact sum (no double-rounding error).
pub(crate) fn round_odd(s: f64, e: f64) -> f64 {
    if e == 0.0 || e.is_nan() || !s.is_finite() || s.to_bits() & 1 == 1 {
        s
    } else if e > 0.0 {
        s.next_up()
    } else {
        s.next_down()
    }
}

/// `a + b` exactly as `(sum, error)` (TwoSum).
pub(crate) fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// bf16 bits to f32 (exact).
pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f64 to bf16, rounded in direction `rnd` (one rounding).
pub(crate) fn to_bf16(x: f64, rnd: Rnd) -> u16 {
    encode(x, BF16, rnd, Mode::default()) as u16
}

/// f64 to f16, rounded in direction `rnd` (one rounding).
pub(crate) fn to_f16(x: f64, rnd: Rnd) -> u16 {
    encode(x, F16, rnd, Mode::default()) as u16
}

/// The two lanes of a packed pair (`.f16x2`, `.bf16x2`): (low, high).
pub(crate) fn lanes(v: u64) -> (u64, u64) {
    (v & 0xffff, (v >> 16) & 0xffff)
}

/// A packed pair from its lanes.
pub(crate) fn pack(lo: u64, hi: u64) -> u64 {
    (lo & 0xffff) | ((hi & 0xffff) << 16)
}

/// One fp8 lane of an `.e4m3x2`/`.e5m2x2` value to f16 bits, exactly. e5m2 is the top byte
/// of an f16, so its value (NaN payloads too) is the byte shifted, as NVIDIA's `cuda_fp8.hpp`
/// converts on the host; an e4m3 NaN becomes the canonical f16 NaN.
pub(crate) fn fp8_to_f16(b: u8, f: Fmt, relu: bool) -> u16 {
    let bits = b as u32;
    if f.is_nan(bits) {
        return if f == E5M2 && !relu {
            (b as u16) << 8
        } else {
            F16.nan as u16
        };
    }
    encode(
        decode(bits, f),
        F16,
        Rnd::N,
        Mode {
            satfinite: false,
            relu,
        },
    ) as u16
}
