//! Matrix products on the host: the work of cuBLAS's gemm and gemv calls (`blas.rs`), as one
//! stream operation (`LibraryWork`) whose footprint is every column (or row, or element) of
//! each matrix it reads or writes.
//!
//! `C = alpha * op(A) * op(B) + beta * C`, column-major, for each batch. `f16` and `bf16` data
//! are computed in `f32` (products and sums) and rounded once to the output type, to nearest
//! even, by the interpreter's own conversions (`cuda_sim_ptx::convert`); `f64` data in `f64`.
//! The order of the sums is not cuBLAS's, so results may differ from a GPU's in the last
//! bits. As the reference BLAS: `beta == 0` never reads C (an unwritten or NaN C is fine), and
//! `alpha == 0` or `k == 0` never reads A and B.

use crate::order::races::Touch;
use crate::resources::work::LibraryWork;
use cuda_sim_ptx::Access;
use cuda_sim_ptx::convert::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

/// An element type (`cudaDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F16,
    Bf16,
    F32,
    F64,
}

impl Elem {
    /// The element type of `cudaDataType_t` `value`, if it is one of the four.
    pub fn from_cuda(value: u32) -> Option<Elem> {
        match value {
            0 => Some(Elem::F32),
            1 => Some(Elem::F64),
            2 => Some(Elem::F16),
            14 => Some(Elem::Bf16),
            _ => None,
        }
    }

    pub fn size(self) -> u64 {
        match self {
            Elem::F16 | Elem::Bf16 => 2,
            Elem::F32 => 4,
            Elem::F64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Elem::F16 => "f16",
            Elem::Bf16 => "bf16",
            Elem::F32 => "f32",
            Elem::F64 => "f64",
        }
    }

    /// The element at `addr`, exactly.
    ///
    /// # Safety
    /// `addr` is readable for [`Elem::size`] bytes.
    pub unsafe fn load(self, addr: u64) -> f64 {
        let p = addr as usize;
        // SAFETY: by this function's contract; unaligned reads, as the caller's memory may be.
        unsafe {
            match self {
                Elem::F16 => f64::from(f16_to_f32((p as *const u16).read_unaligned())),
                Elem::Bf16 => f64::from(bf16_to_f32((p as *const u16).read_unaligned())),
                Elem::F32 => f64::from((p as *const f32).read_unaligned()),
                Elem::F64 => (p as *const f64).read_unaligned(),
            }
        }
    }

    /// Stores `value` at `addr`, rounded once to this type (to nearest even).
    ///
    /// # Safety
    /// `addr` is writable for [`Elem::size`] bytes.
    unsafe fn store(self, addr: u64, value: f64) {
        let p = addr as usize;
        // SAFETY: by this function's contract.
        unsafe {
            match self {
                // Results computed in f32 are exact in f32: one rounding, f32 to 16 bits.
                Elem::F16 => (p as *mut u16).write_unaligned(f32_to_f16(value as f32)),
                Elem::Bf16 => (p as *mut u16).write_unaligned(f32_to_bf16(value as f32)),
                Elem::F32 => (p as *mut f32).write_unaligned(value as f32),
                Elem::F64 => (p as *mut f64).write_unaligned(value),
            }
        }
    }
}

/// A batch of matrices in memory: element `(i, j)` of batch `b` at
/// `addr + (b * stride + i * rs + j * cs) * size` (strides in elements, any sign).
#[derive(Clone, Copy, Debug)]
pub struct Matrix {
    pub addr: u64,
    pub elem: Elem,
    pub rows: u64,
    pub cols: u64,
    pub rs: i64,
    pub cs: i64,
    pub stride: i64,
}

impl Matrix {
    /// The address of element `(i, j)` of batch `b` (checked by [`Matrix::ranges`] first).
    fn at(&self, b: u64, i: u64, j: u64) -> u64 {
        let offset = b as i128 * self.stride as i128
            + i as i128 * self.rs as i128
            + j as i128 * self.cs as i128;
        (self.addr as i128 + offset * self.elem.size() as i128) as u64
    }

    /// The byte ranges of `batch` batches, touched as `access`, merged where adjacent; `None`
    /// when an address leaves the address space (no such matrix can exist).
    pub fn ranges(&self, batch: u64, access: Access) -> Option<Vec<Touch>> {
        if self.rows == 0 || self.cols == 0 || batch == 0 {
            return Some(Vec::new());
        }
        let size = self.elem.size() as i128;
        // The extreme element offsets, to refuse what leaves the address space.
        let span = |n: u64, s: i64| (n as i128 - 1) * s as i128;
        let corners = [
            0,
            span(batch, self.stride),
            span(self.rows, self.rs),
            span(self.cols, self.cs),
        ];
        let low: i128 = corners.iter().filter(|&&c| c < 0).sum();
        let high: i128 = corners.iter().filter(|&&c| c > 0).sum();
        let first = self.addr as i128 + low * size;
        let last = self.addr as i128 + (high + 1) * size;
        if first < 0 || last > u64::MAX as i128 {
            return None;
        }
        // Runs along the dimension whose elements are adjacent, else single elements.
        let (runs, run_len, outer): (Vec<(u64, u64)>, u64, u64) = if self.rs.abs() == 1 {
            ((0..self.cols).map(|j| (0, j)).collect(), self.rows, 0)
        } else if self.cs.abs() == 1 {
            ((0..self.rows).map(|i| (i, 0)).collect(), self.cols, 1)
        } else {
            let mut all = Vec::new();
            for j in 0..self.cols {
                for i in 0..self.rows {
                    all.push((i, j));
                }
            }
            (all, 1, 2)
        };
        let mut touches = Vec::with_capacity(runs.len() * batch as usize);
        for b in 0..batch {
            for &(i, j) in &runs {
                let (start, end) = match outer {
                    0 => (self.at(b, 0, j), self.at(b, run_len - 1, j)),
                    1 => (self.at(b, i, 0), self.at(b, i, run_len - 1)),
                    _ => (self.at(b, i, j), self.at(b, i, j)),
                };
                let (lo, hi) = (start.min(end), start.max(end));
                touches.push(Touch::bytes(lo, hi - lo + self.elem.size(), access));
            }
        }
        Some(merge(touches))
    }
}

/// Sorts `touches` (all of one access) and merges the overlapping and adjacent ones.
fn merge(mut touches: Vec<Touch>) -> Vec<Touch> {
    touches.sort_by_key(|t| t.start);
    let mut out: Vec<Touch> = Vec::with_capacity(touches.len());
    for touch in touches {
        match out.last_mut() {
            Some(last) if touch.start <= last.end => last.end = last.end.max(touch.end),
            _ => out.push(touch),
        }
    }
    out
}

/// alpha and beta: values read at the call (host pointer mode), or device addresses read
/// when the work runs (device pointer mode), of type `elem`.
#[derive(Clone, Copy, Debug)]
pub enum Scalars {
    Host { alpha: f64, beta: f64 },
    Device { alpha: u64, beta: u64, elem: Elem },
}

/// The precision of the products and sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    F64,
}

/// One gemm (or gemv) call: `batch` products `C = alpha * A * B + beta * C`, with A of
/// `m x k`, B of `k x n`, C of `m x n` (the transposes applied in the matrices' strides).
#[derive(Clone, Debug)]
pub struct Gemm {
    pub call: &'static str,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub a: Matrix,
    pub b: Matrix,
    pub c: Matrix,
    pub precision: Precision,
    pub scalars: Scalars,
}

impl Gemm {
    /// alpha and beta.
    ///
    /// # Safety
    /// In device pointer mode, both scalars are readable (checked as `scalars()`).
    unsafe fn values(&self) -> (f64, f64) {
        match self.scalars {
            Scalars::Host { alpha, beta } => (alpha, beta),
            // SAFETY: by this function's contract.
            Scalars::Device { alpha, beta, elem } => unsafe { (elem.load(alpha), elem.load(beta)) },
        }
    }

    /// The footprint for `alpha` and `beta`; `None` if an address leaves the address space.
    pub fn footprint_for(&self, alpha: f64, beta: f64) -> Option<Vec<Touch>> {
        let mut touches = Vec::new();
        if self.k > 0 && alpha != 0.0 {
            touches.extend(self.a.ranges(self.batch, Access::Read)?);
            touches.extend(self.b.ranges(self.batch, Access::Read)?);
        }
        if beta != 0.0 {
            touches.extend(self.c.ranges(self.batch, Access::Read)?);
        }
        touches.extend(self.c.ranges(self.batch, Access::Write)?);
        Some(touches)
    }

    /// The footprint when alpha and beta are not known (device pointer mode): every matrix,
    /// read; `None` if an address leaves the address space.
    pub fn widest_footprint(&self) -> Option<Vec<Touch>> {
        self.footprint_for(1.0, 1.0)
    }

    /// Computes batch `b`'s columns `cols` of C.
    ///
    /// # Safety
    /// The matrices' ranges lie in readable (A, B, C) and writable (C) memory.
    unsafe fn columns(&self, b: u64, alpha: f64, beta: f64, cols: std::ops::Range<u64>) {
        let (m, k) = (self.m, self.k);
        let reads = k > 0 && alpha != 0.0;
        // op(A) by rows and op(B) by columns, each contiguous in k.
        let mut a_rows = Vec::new();
        if reads {
            a_rows.reserve((m * k) as usize);
            for i in 0..m {
                for l in 0..k {
                    // SAFETY: A's range is readable by this function's contract.
                    a_rows.push(unsafe { self.a.elem.load(self.a.at(b, i, l)) });
                }
            }
        }
        let mut column = vec![0.0f64; k as usize];
        for j in cols {
            if reads {
                for (l, value) in column.iter_mut().enumerate() {
                    // SAFETY: B's range is readable by this function's contract.
                    *value = unsafe { self.b.elem.load(self.b.at(b, l as u64, j)) };
                }
            }
            for i in 0..m {
                let addr = self.c.at(b, i, j);
                let product = if !reads {
                    0.0
                } else if self.precision == Precision::F32 {
                    let row = &a_rows[(i * k) as usize..((i + 1) * k) as usize];
                    let mut sum = 0.0f32;
                    for (x, y) in row.iter().zip(&column) {
                        sum = (*x as f32).mul_add(*y as f32, sum);
                    }
                    f64::from(sum)
                } else {
                    let row = &a_rows[(i * k) as usize..((i + 1) * k) as usize];
                    let mut sum = 0.0f64;
                    for (x, y) in row.iter().zip(&column) {
                        sum = x.mul_add(*y, sum);
                    }
                    sum
                };
                let value = if self.precision == Precision::F32 {
                    let mut v = alpha as f32 * product as f32;
                    if beta != 0.0 {
                        // SAFETY: C's range is readable by this function's contract.
                        let old = unsafe { self.c.elem.load(addr) } as f32;
                        v = (beta as f32).mul_add(old, v);
                    }
                    f64::from(v)
                } else {
                    let mut v = alpha * product;
                    if beta != 0.0 {
                        // SAFETY: as above.
                        v = beta.mul_add(unsafe { self.c.elem.load(addr) }, v);
                    }
                    v
                };
                // SAFETY: C's range is writable by this function's contract.
                unsafe { self.c.elem.store(addr, value) };
            }
        }
    }
}

impl LibraryWork for Gemm {
    fn describe(&self) -> String {
        format!(
            "{} ({}x{}x{} gemm, batch {}, {} x {} -> {})",
            self.call,
            self.m,
            self.n,
            self.k,
            self.batch,
            self.a.elem.name(),
            self.b.elem.name(),
            self.c.elem.name()
        )
    }

    fn scalars(&self) -> Vec<Touch> {
        match self.scalars {
            Scalars::Host { .. } => Vec::new(),
            Scalars::Device { alpha, beta, elem } => vec![
                Touch::bytes(alpha, elem.size(), Access::Read),
                Touch::bytes(beta, elem.size(), Access::Read),
            ],
        }
    }

    unsafe fn footprint(&self) -> Vec<Touch> {
        // SAFETY: the scalars were checked, by this function's contract.
        let (alpha, beta) = unsafe { self.values() };
        // Checked at the call (`widest_footprint`), so never `None` here.
        self.footprint_for(alpha, beta).unwrap_or_default()
    }

    unsafe fn run(&self) {
        // SAFETY: the scalars were checked, by this function's contract.
        let (alpha, beta) = unsafe { self.values() };
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8)) as u64;
        let work = self.m.saturating_mul(self.n).saturating_mul(self.k.max(1));
        for b in 0..self.batch {
            if workers <= 1 || work < 1 << 18 || self.n < 2 {
                // SAFETY: every range was checked, by this function's contract.
                unsafe { self.columns(b, alpha, beta, 0..self.n) };
                continue;
            }
            let chunk = self.n.div_ceil(workers);
            std::thread::scope(|scope| {
                for first in (0..self.n).step_by(chunk as usize) {
                    let cols = first..(first + chunk).min(self.n);
                    // SAFETY: every range was checked, by this function's contract; the
                    // threads write disjoint columns of C and only read A and B.
                    scope.spawn(move || unsafe { self.columns(b, alpha, beta, cols) });
                }
            });
        }
    }
}
