//! Host memory accesses (only after `Memory::check` approved them) and atomic
//! read-modify-write semantics.

use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

use crate::ialu::{mask, sext};
use crate::ir::*;

pub(crate) fn rd_bytes(b: &[u8], at: usize, size: u32) -> u64 {
    let mut buf = [0u8; 8];
    buf[..size as usize].copy_from_slice(&b[at..at + size as usize]);
    u64::from_le_bytes(buf)
}

pub(crate) fn wr_bytes(b: &mut [u8], at: usize, size: u32, v: u64) {
    b[at..at + size as usize].copy_from_slice(&v.to_le_bytes()[..size as usize]);
}

pub(crate) fn host_load(addr: u64, size: u32) -> u64 {
    let p = addr as usize as *mut u8;
    // SAFETY: `addr` was approved by `Memory::check` for this many bytes (the range lies in
    // a live allocation of this process) and is aligned to `size` (checked in `locate`).
    // Relaxed atomic accesses make concurrent accesses from other blocks race-free.
    unsafe {
        match size {
            1 => AtomicU8::from_ptr(p).load(Ordering::Relaxed) as u64,
            2 => AtomicU16::from_ptr(p.cast()).load(Ordering::Relaxed) as u64,
            4 => AtomicU32::from_ptr(p.cast()).load(Ordering::Relaxed) as u64,
            _ => AtomicU64::from_ptr(p.cast()).load(Ordering::Relaxed),
        }
    }
}

pub(crate) fn host_store(addr: u64, size: u32, v: u64) {
    let p = addr as usize as *mut u8;
    // SAFETY: as in `host_load`; the check was made with `write = true`.
    unsafe {
        match size {
            1 => AtomicU8::from_ptr(p).store(v as u8, Ordering::Relaxed),
            2 => AtomicU16::from_ptr(p.cast()).store(v as u16, Ordering::Relaxed),
            4 => AtomicU32::from_ptr(p.cast()).store(v as u32, Ordering::Relaxed),
            _ => AtomicU64::from_ptr(p.cast()).store(v, Ordering::Relaxed),
        }
    }
}

/// New value of an atomic read-modify-write.
pub(crate) fn atom_apply(op: AtomOp, t: T, old: u64, b: u64, c: u64) -> u64 {
    let bits = t.bits();
    let m = mask(bits);
    let (o, bv) = (old & m, b & m);
    match (op, t) {
        // atom.add.f32 flushes subnormal inputs and results to sign-preserving zero.
        (AtomOp::Add, T::F32) => {
            let ftz = crate::fmath::ftz32;
            ftz(ftz(f32::from_bits(o as u32)) + ftz(f32::from_bits(bv as u32))).to_bits() as u64
        }
        (AtomOp::Add, T::F64) => (f64::from_bits(o) + f64::from_bits(bv)).to_bits(),
        // `atom.add.noftz`: round to nearest even, subnormals kept (lane by lane for x2).
        (AtomOp::Add, T::F16 | T::BF16 | T::F16X2 | T::BF16X2) => {
            crate::fmath::fbin(FOp::Add, t, Rnd::N, false, false, o, bv)
        }
        (AtomOp::Min, T::F32) => f32::from_bits(o as u32)
            .min(f32::from_bits(bv as u32))
            .to_bits() as u64,
        (AtomOp::Max, T::F32) => f32::from_bits(o as u32)
            .max(f32::from_bits(bv as u32))
            .to_bits() as u64,
        (AtomOp::Min, T::F64) => f64::from_bits(o).min(f64::from_bits(bv)).to_bits(),
        (AtomOp::Max, T::F64) => f64::from_bits(o).max(f64::from_bits(bv)).to_bits(),
        (AtomOp::Add, _) => o.wrapping_add(bv) & m,
        (AtomOp::Min, _) if t.signed() => {
            if sext(o, bits) <= sext(bv, bits) {
                o
            } else {
                bv
            }
        }
        (AtomOp::Max, _) if t.signed() => {
            if sext(o, bits) >= sext(bv, bits) {
                o
            } else {
                bv
            }
        }
        (AtomOp::Min, _) => o.min(bv),
        (AtomOp::Max, _) => o.max(bv),
        (AtomOp::Inc, _) => {
            if o >= bv {
                0
            } else {
                o + 1
            }
        }
        (AtomOp::Dec, _) => {
            if o == 0 || o > bv {
                bv
            } else {
                o - 1
            }
        }
        (AtomOp::And, _) => o & bv,
        (AtomOp::Or, _) => o | bv,
        (AtomOp::Xor, _) => o ^ bv,
        (AtomOp::Exch, _) => bv,
        (AtomOp::Cas, _) => {
            if o == bv {
                c & m
            } else {
                o
            }
        }
    }
}

/// `atom.cas.b16` on host memory: a 16-bit compare-and-swap (the host's native one, which
/// is atomic with respect to the other accesses of the interpreter to that half-word, and
/// touches only the two bytes `Memory::check` approved). Returns the old value.
pub(crate) fn host_cas16(addr: u64, cmp: u64, new: u64) -> u64 {
    let p = addr as usize as *mut u16;
    // SAFETY: `addr` was approved by `Memory::check` for two bytes with write access and is
    // 2-byte aligned (checked in `locate`), as `AtomicU16` requires; all other accesses of
    // the interpreter to host memory are atomic too, so this races with none of them.
    let a = unsafe { AtomicU16::from_ptr(p) };
    match a.compare_exchange(cmp as u16, new as u16, Ordering::AcqRel, Ordering::Acquire) {
        Ok(v) | Err(v) => v as u64,
    }
}

pub(crate) fn host_atomic(addr: u64, t: T, op: AtomOp, b: u64, c: u64) -> u64 {
    let p = addr as usize as *mut u8;
    // SAFETY: `addr` was approved by `Memory::check` (write access, `t.bytes()` bytes) and
    // is aligned to the access size (checked in `locate`), as the atomic types require.
    unsafe {
        if t.bytes() == 2 {
            let a = AtomicU16::from_ptr(p.cast());
            let r = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                Some(atom_apply(op, t, o as u64, b, c) as u16)
            });
            r.unwrap_or_else(|v| v) as u64
        } else if t.bytes() == 4 {
            let a = AtomicU32::from_ptr(p.cast());
            let r = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                Some(atom_apply(op, t, o as u64, b, c) as u32)
            });
            r.unwrap_or_else(|v| v) as u64
        } else {
            let a = AtomicU64::from_ptr(p.cast());
            let r = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                Some(atom_apply(op, t, o, b, c))
            });
            r.unwrap_or_else(|v| v)
        }
    }
}
