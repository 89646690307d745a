//! Integer semantics: arithmetic on any width (values held zero-extended in `u64`
//! registers), comparisons, bit-field and byte operations.

use crate::ir::*;

#[inline]
pub(crate) fn mask(bits: u32) -> u64 {
    if bits >= 64 { !0 } else { (1u64 << bits) - 1 }
}

#[inline]
pub(crate) fn sext(v: u64, bits: u32) -> i64 {
    if bits >= 64 {
        v as i64
    } else {
        ((v << (64 - bits)) as i64) >> (64 - bits)
    }
}

pub(crate) fn cmp_int(cmp: Cmp, t: T, a: u64, b: u64) -> bool {
    let bits = t.bits();
    let (ua, ub) = (a & mask(bits), b & mask(bits));
    let (sa, sb) = (sext(a, bits), sext(b, bits));
    let s = t.signed();
    match cmp {
        Cmp::Eq | Cmp::Equ => ua == ub,
        Cmp::Ne | Cmp::Neu => ua != ub,
        Cmp::Lt | Cmp::Ltu => {
            if s {
                sa < sb
            } else {
                ua < ub
            }
        }
        Cmp::Le | Cmp::Leu => {
            if s {
                sa <= sb
            } else {
                ua <= ub
            }
        }
        Cmp::Gt | Cmp::Gtu => {
            if s {
                sa > sb
            } else {
                ua > ub
            }
        }
        Cmp::Ge | Cmp::Geu => {
            if s {
                sa >= sb
            } else {
                ua >= ub
            }
        }
        Cmp::Lo => ua < ub,
        Cmp::Ls => ua <= ub,
        Cmp::Hi => ua > ub,
        Cmp::Hs => ua >= ub,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

pub(crate) fn cmp_f(cmp: Cmp, a: f64, b: f64) -> bool {
    let nan = a.is_nan() || b.is_nan();
    match cmp {
        Cmp::Eq => a == b,
        Cmp::Ne => !nan && a != b,
        Cmp::Lt | Cmp::Lo => a < b,
        Cmp::Le | Cmp::Ls => a <= b,
        Cmp::Gt | Cmp::Hi => a > b,
        Cmp::Ge | Cmp::Hs => a >= b,
        Cmp::Equ => nan || a == b,
        Cmp::Neu => nan || a != b,
        Cmp::Ltu => nan || a < b,
        Cmp::Leu => nan || a <= b,
        Cmp::Gtu => nan || a > b,
        Cmp::Geu => nan || a >= b,
        Cmp::Num => !nan,
        Cmp::Nan => nan,
    }
}

pub(crate) fn ibin(op: IOp, t: T, a: u64, b: u64, carry: &mut bool) -> u64 {
    let bits = t.bits();
    let m = mask(bits);
    let s = t.signed();
    match op {
        IOp::Add => a.wrapping_add(b) & m,
        IOp::AddSat => {
            let v = (a as u32 as i32 as i64 + b as u32 as i32 as i64)
                .clamp(i32::MIN as i64, i32::MAX as i64);
            v as u64 & 0xffff_ffff
        }
        IOp::SubSat => {
            let v = (a as u32 as i32 as i64 - b as u32 as i32 as i64)
                .clamp(i32::MIN as i64, i32::MAX as i64);
            v as u64 & 0xffff_ffff
        }
        IOp::Sub => a.wrapping_sub(b) & m,
        IOp::MulLo => a.wrapping_mul(b) & m,
        IOp::MulHi => {
            if s {
                ((sext(a, bits) as i128 * sext(b, bits) as i128) >> bits) as u64 & m
            } else {
                (((a & m) as u128 * (b & m) as u128) >> bits) as u64 & m
            }
        }
        IOp::MulWide => {
            let w = mask(bits * 2);
            if s {
                (sext(a, bits).wrapping_mul(sext(b, bits))) as u64 & w
            } else {
                (a & m).wrapping_mul(b & m) & w
            }
        }
        IOp::Mul24Lo | IOp::Mul24Hi => {
            let p = if s {
                (sext(a, 24) * sext(b, 24)) as u64
            } else {
                (a & 0xff_ffff) * (b & 0xff_ffff)
            };
            if op == IOp::Mul24Lo {
                p & m
            } else {
                (p >> 16) & m
            }
        }
        IOp::Div => {
            if b & m == 0 {
                m // no fault on the GPU: all ones
            } else if s {
                sext(a, bits).wrapping_div(sext(b, bits)) as u64 & m
            } else {
                ((a & m) / (b & m)) & m
            }
        }
        IOp::Rem => {
            if b & m == 0 {
                a & m
            } else if s {
                sext(a, bits).wrapping_rem(sext(b, bits)) as u64 & m
            } else {
                (a & m) % (b & m)
            }
        }
        IOp::Min => {
            if s {
                sext(a, bits).min(sext(b, bits)) as u64 & m
            } else {
                (a & m).min(b & m)
            }
        }
        IOp::Max => {
            if s {
                sext(a, bits).max(sext(b, bits)) as u64 & m
            } else {
                (a & m).max(b & m)
            }
        }
        IOp::And => a & b & m,
        IOp::Or => (a | b) & m,
        IOp::Xor => (a ^ b) & m,
        IOp::Shl => {
            let n = b as u32;
            if n >= bits { 0 } else { (a << n) & m }
        }
        IOp::Shr => {
            let n = b as u32;
            if s {
                (sext(a, bits) >> n.min(bits - 1)) as u64 & m
            } else if n >= bits {
                0
            } else {
                (a & m) >> n
            }
        }
        IOp::AddC(cin, cout) => {
            let sum = (a & m) as u128 + (b & m) as u128 + (cin && *carry) as u128;
            if cout {
                *carry = (sum >> bits) & 1 == 1;
            }
            sum as u64 & m
        }
        IOp::SubC(cin, cout) => {
            let sub = (b & m) as u128 + (cin && *carry) as u128;
            let r = ((a & m) as u128).wrapping_sub(sub);
            if cout {
                *carry = ((a & m) as u128) < sub;
            }
            r as u64 & m
        }
    }
}

pub(crate) fn iun(op: IUn, t: T, a: u64) -> u64 {
    let bits = t.bits();
    let m = mask(bits);
    match op {
        IUn::Not if t == T::Pred => (a ^ 1) & 1,
        IUn::Not => !a & m,
        IUn::Cnot => ((a & m) == 0) as u64,
        IUn::Neg => a.wrapping_neg() & m,
        IUn::Abs => sext(a, bits).wrapping_abs() as u64 & m,
        IUn::Popc => (a & m).count_ones() as u64,
        IUn::Clz => ((a & m).leading_zeros() - (64 - bits)) as u64,
        IUn::Brev => (a & m).reverse_bits() >> (64 - bits),
        IUn::Bfind(shiftamt) => {
            let v = if t.signed() && sext(a, bits) < 0 {
                !a & m
            } else {
                a & m
            };
            if v == 0 {
                0xffff_ffff
            } else {
                let pos = 63 - v.leading_zeros();
                (if shiftamt { bits - 1 - pos } else { pos }) as u64
            }
        }
    }
}

pub(crate) fn bfe(t: T, a: u64, pos: u64, len: u64) -> u64 {
    let bits = t.bits() as u64;
    let m = mask(bits as u32);
    let v = a & m;
    let (pos, len) = (pos & 0xff, len & 0xff);
    if len == 0 {
        return 0;
    }
    let top = (pos + len - 1).min(bits - 1);
    let sbit = t.signed() && (v >> top) & 1 == 1;
    let (field, flen) = if pos >= bits {
        (0, 0)
    } else {
        let flen = len.min(bits - pos);
        ((v >> pos) & mask(flen as u32), flen)
    };
    field | if sbit { m & !mask(flen as u32) } else { 0 }
}

pub(crate) fn bfi(t: T, f: u64, base: u64, pos: u64, len: u64) -> u64 {
    let bits = t.bits() as u64;
    let m = mask(bits as u32);
    let (pos, len) = (pos & 0xff, len & 0xff);
    if pos >= bits || len == 0 {
        return base & m;
    }
    let l = len.min(bits - pos);
    let fm = mask(l as u32) << pos;
    ((base & !fm) | ((f << pos) & fm)) & m
}

pub(crate) fn prmt(a: u64, b: u64, c: u64) -> u64 {
    let tmp = ((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff);
    let mut d = 0u64;
    for i in 0..4 {
        let sel = (c >> (4 * i)) & 0xf;
        let mut byte = (tmp >> ((sel & 7) * 8)) & 0xff;
        if sel & 8 != 0 {
            byte = if byte & 0x80 != 0 { 0xff } else { 0 };
        }
        d |= byte << (8 * i);
    }
    d
}

pub(crate) fn lop3(a: u64, b: u64, c: u64, lut: u8) -> u64 {
    let mut r = 0u64;
    for i in 0..8 {
        if (lut >> i) & 1 == 1 {
            let x = if i & 4 != 0 { a } else { !a };
            let y = if i & 2 != 0 { b } else { !b };
            let z = if i & 1 != 0 { c } else { !c };
            r |= x & y & z;
        }
    }
    r & 0xffff_ffff
}
