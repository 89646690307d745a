//! The simulated cuRAND (`libcurand.so.10`): pseudo-random generators and the fills cudarc's
//! `CudaRng` and candle reach (`curandGenerate`, `curandGenerateUniform`,
//! `curandGenerateUniformDouble`, `curandGenerateNormal`, `curandGenerateNormalDouble`,
//! `curandGenerateLogNormal`, `curandGenerateLogNormalDouble`), each one stream operation
//! writing its output range (checked like a kernel's stores: bounds, races, initcheck).
//!
//! The numbers are not cuRAND's bit sequence: value `i` of a generator is a hash of its seed
//! and `i` (SplitMix64's finaliser), whatever the generator type, so the same seed and offset
//! give the same numbers, a call continues where the previous one stopped, and
//! `curandSetGeneratorOffset` skips values. Uniform floats lie in (0, 1], as cuRAND documents
//! (`(x + 1) * 2^-24` of 24 random bits for f32, 53 bits for f64). Normal values come from
//! Box–Muller on pairs of uniforms, so, as cuRAND requires of pseudo-random generators, their
//! count must be even (`CURAND_STATUS_LENGTH_NOT_MULTIPLE`); log-normal values are `exp` of
//! them. Quasi-random generators are not simulated (`CURAND_STATUS_TYPE_ERROR` at creation),
//! and `curandGenerateLongLong` is `CURAND_STATUS_TYPE_ERROR`, as for cuRAND's pseudo-random
//! generators.
//!
//! # Safety
//!
//! Every export is a C function of the cuRAND API: a non-null out-pointer it takes is valid for
//! a write of its type. Output addresses are never written before the simulator checked them
//! against its allocations.

use std::ffi::c_int;

use super::{Codes, issue, put, start, with_sim};
use crate::Kind;
use crate::api::faults::Statuses;
use crate::base::types::{CuResult, Raw};
use crate::order::races::Touch;
use crate::resources::library_handles::Generator;
use crate::resources::work::LibraryWork;
use cuda_sim_ptx::Access;

pub const SUCCESS: u32 = 0;
pub const NOT_INITIALIZED: u32 = 101;
pub const TYPE_ERROR: u32 = 103;
pub const OUT_OF_RANGE: u32 = 104;
pub const LENGTH_NOT_MULTIPLE: u32 = 105;
pub const LAUNCH_FAILURE: u32 = 201;
pub const INTERNAL_ERROR: u32 = 999;

/// cuRAND's answers.
pub const CODES: Codes = Codes {
    statuses: Statuses {
        success: SUCCESS,
        not_permitted: LAUNCH_FAILURE,
        internal: INTERNAL_ERROR,
    },
    not_initialized: NOT_INITIALIZED,
    execution_failed: LAUNCH_FAILURE,
    invalid_value: OUT_OF_RANGE,
};

/// The cuRAND release played (`CURAND_VERSION` of CUDA 13.0: 10.4.0).
pub const VERSION: c_int = 10400;

/// What a fill writes.
#[derive(Clone, Copy, Debug)]
enum Fill {
    U32,
    UniformF32,
    UniformF64,
    NormalF32 { mean: f32, std: f32 },
    NormalF64 { mean: f64, std: f64 },
    LogNormalF32 { mean: f32, std: f32 },
    LogNormalF64 { mean: f64, std: f64 },
}

impl Fill {
    fn size(self) -> u64 {
        match self {
            Fill::U32 | Fill::UniformF32 | Fill::NormalF32 { .. } | Fill::LogNormalF32 { .. } => 4,
            _ => 8,
        }
    }

    /// Whether it draws pairs (Box–Muller).
    fn pairs(self) -> bool {
        !matches!(self, Fill::U32 | Fill::UniformF32 | Fill::UniformF64)
    }
}

/// Value `index` of the sequence of `seed`: 64 random bits.
fn bits(seed: u64, index: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(index.wrapping_mul(0xd1b5_4a32_d192_ed03))
        .wrapping_add(0x632b_e59b_d9b4_e019);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform double in (0, 1] from value `index`.
fn uniform_f64(seed: u64, index: u64) -> f64 {
    ((bits(seed, index) >> 11) + 1) as f64 * (-53f64).exp2()
}

/// A uniform float in (0, 1] from value `index`.
fn uniform_f32(seed: u64, index: u64) -> f32 {
    ((bits(seed, index) >> 40) + 1) as f32 * (-24f32).exp2()
}

/// The standard normal pair of values `index` and `index + 1` (Box–Muller).
fn normal_pair(seed: u64, index: u64) -> (f64, f64) {
    let radius = (-2.0 * uniform_f64(seed, index).ln()).sqrt();
    let angle = 2.0 * std::f64::consts::PI * uniform_f64(seed, index + 1);
    (radius * angle.cos(), radius * angle.sin())
}

/// One generate call: `n` values from position `first` of `seed`'s sequence into `dst`.
#[derive(Debug)]
struct Generate {
    call: &'static str,
    dst: u64,
    n: u64,
    fill: Fill,
    seed: u64,
    first: u64,
}

impl LibraryWork for Generate {
    fn describe(&self) -> String {
        format!("{} ({} values)", self.call, self.n)
    }

    unsafe fn footprint(&self) -> Vec<Touch> {
        vec![Touch::bytes(
            self.dst,
            self.n * self.fill.size(),
            Access::Write,
        )]
    }

    unsafe fn run(&self) {
        let (seed, first) = (self.seed, self.first);
        for i in 0..self.n {
            let index = first.wrapping_add(i);
            let addr = (self.dst + i * self.fill.size()) as usize;
            let normal = || {
                let (z0, z1) = normal_pair(seed, index & !1);
                if index & 1 == 0 { z0 } else { z1 }
            };
            // SAFETY: the output range was checked to lie in one live allocation, by this
            // function's contract; unaligned writes, as the caller's pointer may be.
            unsafe {
                match self.fill {
                    Fill::U32 => {
                        (addr as *mut u32).write_unaligned((bits(seed, index) >> 32) as u32)
                    }
                    Fill::UniformF32 => {
                        (addr as *mut f32).write_unaligned(uniform_f32(seed, index))
                    }
                    Fill::UniformF64 => {
                        (addr as *mut f64).write_unaligned(uniform_f64(seed, index))
                    }
                    Fill::NormalF32 { mean, std } => {
                        (addr as *mut f32).write_unaligned(mean + std * normal() as f32)
                    }
                    Fill::NormalF64 { mean, std } => {
                        (addr as *mut f64).write_unaligned(mean + std * normal())
                    }
                    Fill::LogNormalF32 { mean, std } => {
                        (addr as *mut f32).write_unaligned((mean + std * normal() as f32).exp())
                    }
                    Fill::LogNormalF64 { mean, std } => {
                        (addr as *mut f64).write_unaligned((mean + std * normal()).exp())
                    }
                }
            }
        }
    }
}

/// Issues `n` values of `fill` from `generator` into `dst`, and advances it by `n`.
fn generate(
    call: &'static str,
    generator: Raw,
    dst: u64,
    n: usize,
    fill: Fill,
) -> Result<(), CuResult> {
    let n = n as u64;
    if fill.pairs() && n % 2 == 1 {
        return Err(LENGTH_NOT_MULTIPLE);
    }
    if n.checked_mul(fill.size())
        .and_then(|len| dst.checked_add(len))
        .is_none()
    {
        return Err(OUT_OF_RANGE);
    }
    let (stream, seed, first) = with_sim(&CODES, |sim| {
        let state = sim.generator(generator, false)?;
        let found = (state.stream, state.seed, state.offset, state.context);
        state.offset = state.offset.wrapping_add(n);
        sim.check_handle_context(found.3, &format!("cuRAND generator {generator:#x}"));
        Ok((found.0, found.1, found.2))
    })?;
    if n == 0 {
        return Ok(());
    }
    let work = Generate {
        call,
        dst,
        n,
        fill,
        seed,
        first,
    };
    issue(&CODES, call, stream, work)
}

library_fns! { CODES.statuses;
    /// Creates a pseudo-random generator (any pseudo-random type; all give this module's
    /// sequence) in the current context, seeded with 0. No current context:
    /// `CURAND_STATUS_NOT_INITIALIZED` and a `wrong-context` report.
    fn curandCreateGenerator(generator: *mut Raw, rng_type: u32) {
        start(&CODES)?;
        if generator.is_null() {
            return Err(OUT_OF_RANGE);
        }
        // CURAND_RNG_PSEUDO_DEFAULT, XORWOW, MRG32K3A, MTGP32, MT19937, PHILOX4_32_10.
        if ![100, 101, 121, 141, 142, 161].contains(&rng_type) {
            return Err(TYPE_ERROR);
        }
        let raw = with_sim(&CODES, |sim| {
            let context = sim.require_current("curandCreateGenerator")?;
            let raw = sim.new_raw(Kind::RandGenerator);
            sim.library_handles.generators.insert(
                raw,
                Generator { context, rng_type, stream: 0, seed: 0, offset: 0 },
            );
            Ok(raw)
        })?;
        put(generator, raw, OUT_OF_RANGE)
    }

    /// Destroys a generator: a dead one is a `double-destroy` (or `destroyed-handle`) and
    /// `CURAND_STATUS_NOT_INITIALIZED`.
    fn curandDestroyGenerator(generator: Raw) {
        with_sim(&CODES, |sim| {
            sim.generator(generator, true)?;
            sim.library_handles.generators.remove(&generator);
            sim.bury(generator, Kind::RandGenerator);
            Ok(())
        })
    }

    /// Sets the seed; the sequence starts again at the generator's offset.
    fn curandSetPseudoRandomGeneratorSeed(generator: Raw, seed: u64) {
        with_sim(&CODES, |sim| {
            let state = sim.generator(generator, false)?;
            state.seed = seed;
            Ok(())
        })
    }

    /// Sets the position in the sequence: the next value generated is value `offset`.
    fn curandSetGeneratorOffset(generator: Raw, offset: u64) {
        with_sim(&CODES, |sim| {
            sim.generator(generator, false)?.offset = offset;
            Ok(())
        })
    }

    /// Accepts any ordering (the sequence is the same whatever it says).
    fn curandSetGeneratorOrdering(generator: Raw, order: u32) {
        let _ = order;
        with_sim(&CODES, |sim| sim.generator(generator, false).map(|_| ()))
    }

    /// Sets the stream the generator's work runs on (0: the default stream), checked when
    /// work is issued on it.
    fn curandSetStream(generator: Raw, stream: Raw) {
        with_sim(&CODES, |sim| {
            sim.generator(generator, false)?.stream = stream;
            Ok(())
        })
    }

    fn curandGetVersion(version: *mut c_int) {
        put(version, VERSION, OUT_OF_RANGE)
    }

    /// `MAJOR_VERSION` (0), `MINOR_VERSION` (1), `PATCH_LEVEL` (2) of [`VERSION`].
    fn curandGetProperty(property: c_int, value: *mut c_int) {
        let answer = match property {
            0 => VERSION / 1000,
            1 => VERSION / 100 % 10,
            2 => VERSION % 100,
            _ => return Err(OUT_OF_RANGE),
        };
        put(value, answer, OUT_OF_RANGE)
    }

    fn curandGenerate(generator: Raw, output: *mut u32, n: usize) {
        generate("curandGenerate", generator, output as u64, n, Fill::U32)
    }

    /// `CURAND_STATUS_TYPE_ERROR`: pseudo-random generators make no 64-bit integers (cuRAND's
    /// answer too).
    fn curandGenerateLongLong(generator: Raw, output: *mut u64, n: usize) {
        let _ = (output, n);
        with_sim(&CODES, |sim| sim.generator(generator, false).map(|_| ()))?;
        Err(TYPE_ERROR)
    }

    fn curandGenerateUniform(generator: Raw, output: *mut f32, n: usize) {
        generate("curandGenerateUniform", generator, output as u64, n, Fill::UniformF32)
    }

    fn curandGenerateUniformDouble(generator: Raw, output: *mut f64, n: usize) {
        generate("curandGenerateUniformDouble", generator, output as u64, n, Fill::UniformF64)
    }

    fn curandGenerateNormal(generator: Raw, output: *mut f32, n: usize, mean: f32, std: f32) {
        generate("curandGenerateNormal", generator, output as u64, n, Fill::NormalF32 { mean, std })
    }

    fn curandGenerateNormalDouble(generator: Raw, output: *mut f64, n: usize, mean: f64, std: f64) {
        generate("curandGenerateNormalDouble", generator, output as u64, n,
            Fill::NormalF64 { mean, std })
    }

    fn curandGenerateLogNormal(generator: Raw, output: *mut f32, n: usize, mean: f32, std: f32) {
        generate("curandGenerateLogNormal", generator, output as u64, n,
            Fill::LogNormalF32 { mean, std })
    }

    fn curandGenerateLogNormalDouble(
        generator: Raw, output: *mut f64, n: usize, mean: f64, std: f64
    ) {
        generate("curandGenerateLogNormalDouble", generator, output as u64, n,
            Fill::LogNormalF64 { mean, std })
    }
}
