//! Test support: host buffers standing in for device allocations, a `Memory` that checks
//! against them, and a parameter-buffer builder.
#![allow(dead_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};

use cuda_sim_ptx::{Fault, LaunchArgs, Memory, Module, Outcome, run};

/// Device memory: each buffer is a raw 16-byte aligned host allocation (raw, so that the
/// interpreter's writes through its address do not alias any Rust reference).
pub struct Mem {
    bufs: Vec<(usize, usize)>, // (address, length)
}

impl Mem {
    pub fn new() -> Mem {
        Mem { bufs: Vec::new() }
    }
    /// A zeroed buffer of `len` bytes; returns its index.
    pub fn alloc(&mut self, len: usize) -> usize {
        let layout = Layout::from_size_align(len.max(1), 16).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        assert!(!p.is_null());
        self.bufs.push((p as usize, len));
        self.bufs.len() - 1
    }
    pub fn addr(&self, i: usize) -> u64 {
        self.bufs[i].0 as u64
    }
    pub fn write<T: Copy>(&self, i: usize, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        assert!(bytes <= self.bufs[i].1);
        // SAFETY: the buffer has at least `bytes` bytes and no kernel runs during the copy.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr() as *const u8,
                self.bufs[i].0 as *mut u8,
                bytes,
            )
        }
    }
    pub fn read<T: Copy + Default>(&self, i: usize) -> Vec<T> {
        let n = self.bufs[i].1 / std::mem::size_of::<T>();
        let mut out = vec![T::default(); n];
        // SAFETY: the buffer has at least n * size_of::<T>() bytes; `out` is that large.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.bufs[i].0 as *const u8,
                out.as_mut_ptr() as *mut u8,
                n * std::mem::size_of::<T>(),
            )
        }
        out
    }
    /// Allocates the module's variables with their initialisers; returns their addresses
    /// and buffer indices.
    pub fn globals(&mut self, m: &Module) -> (Vec<u64>, Vec<usize>) {
        let mut addrs = Vec::new();
        let mut idx = Vec::new();
        for g in &m.globals {
            let i = self.alloc(g.size as usize);
            self.write(i, &g.init);
            addrs.push(self.addr(i));
            idx.push(i);
        }
        (addrs, idx)
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        for &(p, len) in &self.bufs {
            // SAFETY: allocated in `alloc` with this layout, freed once.
            unsafe {
                dealloc(
                    p as *mut u8,
                    Layout::from_size_align(len.max(1), 16).expect("layout"),
                )
            }
        }
    }
}

impl Memory for Mem {
    fn check(&self, addr: u64, len: u64, _write: bool) -> Option<usize> {
        self.bufs.iter().position(|&(p, l)| {
            addr >= p as u64 && addr.checked_add(len).is_some_and(|e| e <= (p + l) as u64)
        })
    }
    fn regions(&self) -> usize {
        self.bufs.len()
    }
    /// `check` does not depend on `write`, and buffers do not overlap (the interpreter's
    /// region cache is exercised by every test).
    fn region_bounds(&self, region: usize) -> Option<(u64, u64)> {
        self.bufs
            .get(region)
            .map(|&(p, l)| (p as u64, (p + l) as u64))
    }
}

/// Builds a parameter buffer, each value aligned to its size.
#[derive(Default)]
pub struct Params(pub Vec<u8>);

impl Params {
    fn push(mut self, bytes: &[u8]) -> Self {
        let at = self.0.len().next_multiple_of(bytes.len());
        self.0.resize(at, 0);
        self.0.extend_from_slice(bytes);
        self
    }
    pub fn u32(self, v: u32) -> Self {
        self.push(&v.to_le_bytes())
    }
    pub fn i32(self, v: i32) -> Self {
        self.push(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Self {
        self.push(&v.to_le_bytes())
    }
    pub fn f32(self, v: f32) -> Self {
        self.push(&v.to_le_bytes())
    }
    pub fn f64(self, v: f64) -> Self {
        self.push(&v.to_le_bytes())
    }
}

/// The fixture's PTX: the committed file, or `$PTX_FIXTURE_DIR/<name>.ptx` when that is set
/// (to run the same checks on PTX compiled with other options, e.g. compute_75 or -G).
pub fn fixture(name: &str, builtin: &str) -> String {
    match std::env::var("PTX_FIXTURE_DIR") {
        Ok(dir) => std::fs::read_to_string(format!("{dir}/{name}.ptx")).expect("fixture file"),
        Err(_) => builtin.to_string(),
    }
}

pub fn load(text: &str) -> Module {
    match Module::parse(text) {
        Ok(m) => m,
        Err(e) => panic!("parse failed: {e}"),
    }
}

pub struct Launch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared: u32,
    pub workers: usize,
    pub synccheck: bool,
    pub racecheck: bool,
}

pub fn launch1(grid: u32, block: u32) -> Launch {
    Launch {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        dynamic_shared: 0,
        workers: 2,
        synccheck: false,
        racecheck: false,
    }
}

#[allow(clippy::result_large_err)] // as `cuda_sim_ptx::run`, whose result it returns
pub fn go(
    m: &Module,
    mem: &Mem,
    globals: &[u64],
    name: &str,
    l: &Launch,
    p: &Params,
) -> Result<Outcome, (Fault, Outcome)> {
    let entry = m.entry(name).expect("entry");
    assert_eq!(
        m.entries[entry].param_bytes(),
        p.0.len(),
        "parameter buffer of {name}"
    );
    let args = LaunchArgs {
        entry,
        grid: l.grid,
        block: l.block,
        dynamic_shared: l.dynamic_shared,
        params: &p.0,
        globals,
        workers: l.workers,
        synccheck: l.synccheck,
        racecheck: l.racecheck,
    };
    run(m, mem, &args)
}

pub fn go_ok(
    m: &Module,
    mem: &Mem,
    globals: &[u64],
    name: &str,
    l: &Launch,
    p: &Params,
) -> Outcome {
    match go(m, mem, globals, name, l, p) {
        Ok(o) => o,
        Err((f, _)) => panic!("{name} faulted: {f:?}"),
    }
}

/// Distance in units in the last place between two f32 values.
pub fn ulp32(a: f32, b: f32) -> u32 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 { i32::MIN - i } else { i }
    };
    (key(a) as i64 - key(b) as i64).unsigned_abs() as u32
}

pub fn ulp64(a: f64, b: f64) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    let key = |x: f64| {
        let i = x.to_bits() as i64;
        if i < 0 { i64::MIN - i } else { i }
    };
    (key(a) as i128 - key(b) as i128).unsigned_abs() as u64
}
