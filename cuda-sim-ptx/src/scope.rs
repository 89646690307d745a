//! What a function body is built from: the names in scope, operands as written, the function
//! under construction, and the limits on the spaces it lays out. The parser (`parse.rs`) fills
//! it; the instruction decoder (`decode.rs`) reads it. Neither imports the other through here.

use std::collections::HashMap;

use crate::LoadError;
use crate::ir::{Func, Patch, R};

/// Largest module variable, shared or local array accepted (1 GiB).
pub(crate) const MAX_VAR_BYTES: u64 = 1 << 30;
/// Largest parameter space of an entry (the driver's limit, as on the GPU).
pub(crate) const MAX_ENTRY_PARAM_BYTES: u64 = 0x7ffc;
/// Largest static shared memory of an entry (48 KiB, the static limit of the GPU).
pub(crate) const MAX_STATIC_SHARED_BYTES: u64 = 48 << 10;
/// Largest local memory per thread (512 KiB, the GPU's limit), deepest call chain included.
pub(crate) const MAX_LOCAL_BYTES: u64 = 512 << 10;
/// Largest total of the `.const` variables of a module (64 KiB).
pub(crate) const MAX_CONST_BYTES: u64 = 64 << 10;

/// Places `size` bytes aligned to `align` above `top`: (offset, new top), or `None` on
/// overflow.
pub(crate) fn place(top: u64, size: u64, align: u64) -> Option<(u64, u64)> {
    let off = top.checked_next_multiple_of(align.max(1))?;
    Some((off, off.checked_add(size)?))
}

pub(crate) fn inv(msg: impl Into<String>) -> LoadError {
    LoadError::Invalid(msg.into())
}

/// What a name means inside a function.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Name {
    Reg(R),
    /// Kernel parameter at this offset of the parameter buffer.
    KParam(u64),
    /// Frame parameter area offset (`.func` formals, call-site `.param`s).
    FParam(u64),
    Local(u64),
    Shared(u64),
    Global(usize),
    Func(usize),
}

/// An operand as written.
#[derive(Clone, Debug)]
pub(crate) enum Opd<'a> {
    Name(&'a str),
    NotName(&'a str),
    Imm(&'a str, bool),
    /// `[base+off]`; base `None` for `[imm]`.
    Addr(Option<&'a str>, i64),
    Vec(Vec<Opd<'a>>),
    Paren(Vec<&'a str>),
    Pair(&'a str, &'a str),
    SymOff(&'a str, i64),
    /// `[tensor, {c0, c1, ...}]`: a tensor map and coordinates (`cp.async.bulk.tensor`).
    Tensor(&'a str, Vec<Opd<'a>>),
}

/// One `{ }` scope: plain names and `%r<N>` ranges (prefix → first register, count).
#[derive(Default)]
pub(crate) struct Scope<'a> {
    pub(crate) names: HashMap<&'a str, Name>,
    pub(crate) ranges: HashMap<&'a str, (R, u64)>,
}

pub(crate) struct FnCtx<'a> {
    pub f: Func,
    pub scopes: Vec<Scope<'a>>,
    pub consts: HashMap<u64, R>,
    pub labels: HashMap<&'a str, u32>,
    pub fixups: Vec<(usize, &'a str)>,
    pub sink: Option<R>,
    pub local_top: u64,
}

impl<'a> FnCtx<'a> {
    pub fn new_reg(&mut self) -> R {
        let r = self.f.nregs as R;
        self.f.nregs += 1;
        self.f.init.push(0);
        r
    }
    pub fn konst(&mut self, v: u64) -> R {
        if let Some(&r) = self.consts.get(&v) {
            return r;
        }
        let r = self.new_reg();
        self.f.init[r as usize] = v;
        self.consts.insert(v, r);
        r
    }
    pub fn patched(&mut self, p: Patch) -> R {
        let r = self.new_reg();
        self.f.patches.push((r, p));
        r
    }
    pub fn lookup(&self, name: &str) -> Option<Name> {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, index) = name.split_at(name.len() - digits);
        let index: Option<u64> = if digits > 0 && digits < 10 {
            index.parse().ok()
        } else {
            None
        };
        for s in self.scopes.iter().rev() {
            if let Some(n) = s.names.get(name) {
                return Some(*n);
            }
            if let Some(k) = index
                && let Some(&(first, n)) = s.ranges.get(prefix)
                && k < n
            {
                return Some(Name::Reg(first + k as R));
            }
        }
        None
    }
    pub(crate) fn declare(&mut self, name: &'a str, n: Name) {
        if let Some(s) = self.scopes.last_mut() {
            s.names.insert(name, n);
        }
    }
    pub(crate) fn alloc_param(&mut self, size: u64, align: u64) -> Result<u64, LoadError> {
        let (off, top) = place(self.f.param_area, size, align)
            .filter(|&(_, t)| t <= MAX_VAR_BYTES)
            .ok_or_else(|| inv(format!("{}: parameter space too large", self.f.name)))?;
        self.f.param_area = top;
        Ok(off)
    }
}
