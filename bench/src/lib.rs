//! Interleaved timing of several variants of one operation, for ratios measured side by side.
#![deny(missing_docs)]

use std::hint::black_box;
use std::time::Instant;

/// One variant of an operation: a name and a closure that runs the operation once.
pub struct Variant<'a> {
    /// Shown in the table.
    pub name: &'static str,
    /// Runs the operation once.
    pub run: Box<dyn FnMut() + 'a>,
}

impl<'a> Variant<'a> {
    /// A named variant.
    pub fn new(name: &'static str, run: impl FnMut() + 'a) -> Self {
        Variant {
            name,
            run: Box::new(run),
        }
    }
}

/// Median nanoseconds per operation of each variant.
pub struct Measured {
    /// The variants' names, in order.
    pub names: Vec<&'static str>,
    /// Median ns/op of each variant.
    pub medians: Vec<f64>,
}

/// Runs `rounds` rounds; in each round every variant runs `iterations` times in turn, so slow
/// drifts (clocks, driver state) hit all variants alike. `between` runs after each batch,
/// untimed (for example to synchronise a stream).
pub fn interleave(
    variants: &mut [Variant<'_>],
    rounds: usize,
    iterations: usize,
    mut between: impl FnMut(),
) -> Measured {
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    for variant in variants.iter_mut() {
        for _ in 0..iterations.min(1000) {
            (variant.run)();
        }
        between();
    }
    for round in 0..rounds {
        // Rotate the starting variant each round so no variant always runs first.
        for offset in 0..variants.len() {
            let index = (round + offset) % variants.len();
            let variant = &mut variants[index];
            let start = Instant::now();
            for _ in 0..iterations {
                (variant.run)();
            }
            let elapsed = start.elapsed();
            between();
            samples[index].push(elapsed.as_nanos() as f64 / iterations as f64);
        }
    }
    Measured {
        names: variants.iter().map(|variant| variant.name).collect(),
        medians: samples.into_iter().map(median).collect(),
    }
}

/// The latency distribution of each variant: the median and the 99th percentile, in ns.
pub struct Latencies {
    /// The variants' names, in order.
    pub names: Vec<&'static str>,
    /// Median ns of one operation, per variant.
    pub p50: Vec<f64>,
    /// 99th-percentile ns of one operation, per variant.
    pub p99: Vec<f64>,
}

/// Times `samples` single operations of each variant, one of each variant in turn (the
/// starting variant rotating), after `warmup` untimed ones: the distribution of one
/// operation's latency rather than a batch's mean.
pub fn latencies(variants: &mut [Variant<'_>], samples: usize, warmup: usize) -> Latencies {
    for variant in variants.iter_mut() {
        for _ in 0..warmup {
            (variant.run)();
        }
    }
    let mut times = vec![Vec::with_capacity(samples); variants.len()];
    for sample in 0..samples {
        for offset in 0..variants.len() {
            let index = (sample + offset) % variants.len();
            let start = Instant::now();
            (variants[index].run)();
            times[index].push(start.elapsed().as_nanos() as f64);
        }
    }
    let percentile = |values: &mut Vec<f64>, p: f64| {
        values.sort_by(|a, b| a.total_cmp(b));
        values[((values.len() - 1) as f64 * p).round() as usize]
    };
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for values in &mut times {
        p50.push(percentile(values, 0.5));
        p99.push(percentile(values, 0.99));
    }
    Latencies {
        names: variants.iter().map(|variant| variant.name).collect(),
        p50,
        p99,
    }
}

/// The median of `values`.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

/// Keeps a value observable so the optimiser cannot drop the work that produced it.
pub fn keep<T>(value: T) -> T {
    black_box(value)
}

/// The raw accessor, out of line so its machine code can be read:
/// `objdump -d --no-show-raw-insn target/release/gpu_bench | grep -A4 '<handles_bench::accessor_probe>:'`
/// shows two loads (the `Arc` pointer, then the field) and `ret`: what a field load through
/// a `Box` compiles to.
#[inline(never)]
pub fn accessor_probe(stream: &handles_cuda::StreamHandle) -> handles_cuda::driver::sys::CUstream {
    stream.as_cu()
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    let set = rustix::thread::sched_getaffinity(None).unwrap();
    (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect()
}

/// Keeps the calling thread on `cpu` alone, so that variants measured one after another on it
/// share one core (a thread that migrates, or lands on a busier core in one variant's run,
/// moves single-thread rates by more than the variants differ).
pub fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).unwrap();
}
