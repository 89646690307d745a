//! Interpreter throughput on three typical kernels: cudarc's `slow_worker` (one block of
//! 1024 threads, a long sequential loop; here 20,000 iterations instead of 1,000,000),
//! `saxpy` over 2^20 threads and a shared-memory reduction with `bar.sync`.
//!
//! `cargo run --release -p cuda-sim-ptx --example throughput [-- workers]`
//!
//! Each figure is the best of three launches. Instructions per second are computed from the number of PTX instructions each kernel
//! executes (counted once with an instrumented build; they depend only on the kernel's
//! control flow, not on the interpreter).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::time::Instant;

use cuda_sim_ptx::{LaunchArgs, Memory, Module, run};

/// Device memory: raw 16-byte aligned host allocations.
struct Mem {
    bufs: Vec<(u64, u64)>,
}

impl Mem {
    fn alloc(&mut self, len: usize) -> u64 {
        let layout = Layout::from_size_align(len.max(1), 16).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        assert!(!p.is_null());
        // Kept sorted by address (region indices are positions in this order).
        let at = self.bufs.partition_point(|b| b.0 < p as u64);
        self.bufs.insert(at, (p as u64, len as u64));
        p as u64
    }
    fn write_f32(&self, addr: u64, data: &[f32]) {
        let b = self.bufs.iter().find(|b| b.0 == addr).expect("buffer");
        assert!(data.len() as u64 * 4 <= b.1);
        // SAFETY: the buffer at `addr` has room for `data` (asserted) and no kernel runs.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut f32, data.len()) }
    }
    fn read_f32(&self, addr: u64, n: usize) -> Vec<f32> {
        let b = self.bufs.iter().find(|b| b.0 == addr).expect("buffer");
        assert!(n as u64 * 4 <= b.1);
        let mut out = vec![0f32; n];
        // SAFETY: the buffer at `addr` has at least `n` floats (asserted); `out` has `n`.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const f32, out.as_mut_ptr(), n) }
        out
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        for &(p, len) in &self.bufs {
            let layout = Layout::from_size_align(len.max(1) as usize, 16).expect("layout");
            // SAFETY: allocated in `alloc` with this layout, freed once.
            unsafe { dealloc(p as *mut u8, layout) }
        }
    }
}

impl Memory for Mem {
    fn check(&self, addr: u64, len: u64, _write: bool) -> Option<usize> {
        // A binary search over sorted regions, as the simulator does.
        let i = self.bufs.partition_point(|b| b.0 <= addr).checked_sub(1)?;
        let (p, l) = self.bufs[i];
        addr.checked_add(len)
            .is_some_and(|e| e <= p + l)
            .then_some(i)
    }
    fn regions(&self) -> usize {
        self.bufs.len()
    }
    fn region_bounds(&self, region: usize) -> Option<(u64, u64)> {
        self.bufs.get(region).map(|&(p, l)| (p, p + l))
    }
}

fn params(vals: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vals {
        let at = out.len().next_multiple_of(v.len());
        out.resize(at, 0);
        out.extend_from_slice(v);
    }
    out
}

fn launch(
    m: &Module,
    mem: &Mem,
    name: &str,
    grid: u32,
    block: u32,
    p: &[u8],
    workers: usize,
) -> f64 {
    let entry = m.entry(name).expect("entry");
    let args = LaunchArgs {
        entry,
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        dynamic_shared: 0,
        params: p,
        globals: &[],
        workers,
        synccheck: false,
        racecheck: false,
    };
    let t = Instant::now();
    if let Err((f, _)) = run(m, mem, &args) {
        panic!("{name}: {f}");
    }
    t.elapsed().as_secs_f64()
}

/// The shortest of three runs.
fn best(mut f: impl FnMut() -> f64) -> f64 {
    (0..3).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn report(what: &str, secs: f64, instructions: u64) {
    println!(
        "{what:<48} {:>9.3} s  {:>8.1} M PTX instructions/s",
        secs,
        instructions as f64 / secs / 1e6
    );
}

fn main() {
    let workers: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    println!("workers: {workers}");
    let mut mem = Mem { bufs: Vec::new() };

    // slow_worker: 1 block x 1024 threads, 20,000 iterations over 1000 floats.
    let m = Module::parse(include_str!("../fixtures/slow_worker.ptx")).expect("parse");
    let (len, iters, threads) = (1000usize, 20_000u64, 1024u32);
    let data = mem.alloc(len * 4);
    let out = mem.alloc(4);
    let x: Vec<f32> = (0..len).map(|i| (i % 3) as f32).collect();
    mem.write_f32(data, &x);
    let p = params(&[
        &data.to_le_bytes(),
        &(len as u64).to_le_bytes(),
        &out.to_le_bytes(),
        &iters.to_le_bytes(),
    ]);
    let secs = best(|| launch(&m, &mem, "slow_worker", 1, threads, &p, workers));
    let want: f32 = (0..iters).fold(0f32, |a, i| a + x[i as usize % len]);
    assert_eq!(mem.read_f32(out, 1)[0], want);
    // 12 instructions per element (u32 remainder path), 3 per 4 for the loop, 23 around.
    let per_thread = iters * 12 + iters / 4 * 3 + 23;
    report(
        "slow_worker, 1 x 1024 threads, 20,000 iterations",
        secs,
        per_thread * threads as u64,
    );

    // saxpy over 2^20 threads (4096 blocks of 256).
    let m = Module::parse(include_str!("../fixtures/saxpy.ptx")).expect("parse");
    let n = 1usize << 20;
    let (bx, by) = (mem.alloc(n * 4), mem.alloc(n * 4));
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    mem.write_f32(bx, &x);
    let p = params(&[
        &(n as u32).to_le_bytes(),
        &2.0f32.to_le_bytes(),
        &bx.to_le_bytes(),
        &by.to_le_bytes(),
    ]);
    let secs = best(|| {
        mem.write_f32(by, &vec![1.0; n]);
        launch(&m, &mem, "saxpy", (n / 256) as u32, 256, &p, workers)
    });
    let y = mem.read_f32(by, n);
    assert!(
        y.iter()
            .enumerate()
            .all(|(i, &v)| v == 2.0 * i as f32 + 1.0)
    );
    report("saxpy, 2^20 threads (4096 x 256)", secs, 20 * n as u64);

    // Shared-memory tree reduction, 2^20 threads, 9 barriers per thread.
    let m = Module::parse(include_str!("../fixtures/reduce.ptx")).expect("parse");
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc(n / 256 * 4));
    let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    mem.write_f32(bi, &x);
    let p = params(&[
        &bi.to_le_bytes(),
        &bo.to_le_bytes(),
        &(n as u32).to_le_bytes(),
    ]);
    let secs = best(|| launch(&m, &mem, "reduce_sum", (n / 256) as u32, 256, &p, workers));
    let o = mem.read_f32(bo, n / 256);
    assert!(
        o.iter()
            .enumerate()
            .all(|(b, &v)| v == x[b * 256..(b + 1) * 256].iter().sum::<f32>())
    );
    report(
        "reduce_sum, 2^20 threads (4096 x 256), bar.sync",
        secs,
        REDUCE_INSTRUCTIONS,
    );
}

/// PTX instructions reduce_sum executes over 2^20 threads (counted).
const REDUCE_INSTRUCTIONS: u64 = 82_833_408;
