//! bf16, packed f16x2/bf16x2 and fp8 (e4m3, e5m2) instructions, f16 rounding (`cvt` in
//! every direction, `fma`), the 16-bit float atomics (`atom.add.noftz`), `set` with 16-bit
//! results and glued directives (`.reg.b32`): each checked over many inputs against reference
//! functions written here independently of the interpreter (bit tricks, exhaustive tables
//! of the format's values, exact rational arithmetic in f64).

mod common;
use common::*;

/// Runs `body` once per element: `%r1`/`%r2` hold the raw inputs (`%f1`/`%f2` the same bits
/// as f32, `%h1`/`%h2` their low halves); the body leaves its result in `%r3`.
fn map2(body: &str, a: &[u32], b: &[u32]) -> Vec<u32> {
    assert_eq!(a.len(), b.len());
    let text = format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 po, .param .u32 n)\n{{\n\
         .reg.pred %p<8>;\n .reg .b16 %h<16>;\n .reg.b32 %r<24>;\n .reg .f32 %f<16>;\n .reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [po];\n\
         mov.u32 %r20, %tid.x; mov.u32 %r21, %ctaid.x; mov.u32 %r22, %ntid.x;\n\
         mad.lo.u32 %r20, %r21, %r22, %r20; ld.param.u32 %r23, [n];\n\
         setp.ge.u32 %p7, %r20, %r23; @%p7 bra DONE;\n\
         mul.wide.u32 %rd4, %r20, 4; add.u64 %rd5, %rd1, %rd4; ld.global.u32 %r1, [%rd5];\n\
         add.u64 %rd5, %rd2, %rd4; ld.global.u32 %r2, [%rd5];\n\
         mov.b32 %f1, %r1; mov.b32 %f2, %r2; cvt.u16.u32 %h1, %r1; cvt.u16.u32 %h2, %r2;\n\
         {body}\n\
         add.u64 %rd5, %rd3, %rd4; st.global.u32 [%rd5], %r3;\n\
         DONE: ret;\n}}\n"
    );
    let m = load(&text);
    let n = a.len();
    let mut mem = Mem::new();
    let (ia, ib, io) = (mem.alloc(4 * n), mem.alloc(4 * n), mem.alloc(4 * n));
    mem.write(ia, a);
    mem.write(ib, b);
    let p = Params::default()
        .u64(mem.addr(ia))
        .u64(mem.addr(ib))
        .u64(mem.addr(io))
        .u32(n as u32);
    go_ok(
        &m,
        &mem,
        &[],
        "k",
        &launch1(n.div_ceil(128) as u32, 128),
        &p,
    );
    mem.read(io)
}

fn map1(body: &str, a: &[u32]) -> Vec<u32> {
    map2(body, a, &vec![0; a.len()])
}

/// Pseudo-random u32s (a fixed LCG).
fn randoms(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 32) as u32
        })
        .collect()
}

/// f32 → bf16, round to nearest even, by the usual bit trick (add 0x7fff plus the kept lsb).
fn ref_bf16(x: u32) -> u16 {
    if f32::from_bits(x).is_nan() {
        return 0x7fff;
    }
    let lsb = (x >> 16) & 1;
    ((x as u64 + 0x7fff + lsb as u64) >> 16) as u16
}

fn bf16_f64(h: u16) -> f64 {
    f32::from_bits((h as u32) << 16) as f64
}

/// bf16 of an f64 that is exactly an f32 (asserted), via `ref_bf16`.
fn ref_bf16_exact(v: f64) -> u16 {
    assert!(v.is_nan() || (v as f32) as f64 == v, "{v} not exact in f32");
    ref_bf16((v as f32).to_bits())
}

/// Interesting f32 bit patterns: zeros, subnormals, ties, overflow, infinities, NaNs.
const F32_EDGES: &[u32] = &[
    0x0000_0000,
    0x8000_0000,
    0x0000_0001,
    0x0000_8000, // subnormal tie: to 0
    0x0001_8000, // subnormal tie: to 2
    0x8001_8000,
    0x007f_ffff,
    0x3f80_0000,
    0x3f80_8000, // tie between 0x3f80 and 0x3f81: to even 0x3f80
    0x3f81_8000, // tie: to 0x3f82
    0x3f80_8001,
    0x3f80_7fff,
    0xbf81_8000,
    0x7f7f_7fff,
    0x7f7f_8000, // tie above the largest bf16: to infinity
    0x7f7f_ffff,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0xffc0_0001,
    0x7f80_0001,
];

fn f32_inputs() -> Vec<u32> {
    let mut v = F32_EDGES.to_vec();
    v.extend(randoms(3000, 1));
    v
}

#[test]
fn cvt_f32_bf16_is_exact_for_every_bf16() {
    let a: Vec<u32> = (0..=0xffffu32).collect();
    let out = map1("cvt.f32.bf16 %f3, %h1; mov.b32 %r3, %f3;", &a);
    for (&h, &r) in a.iter().zip(&out) {
        let want = if f32::from_bits(h << 16).is_nan() {
            0x7fff_ffff
        } else {
            h << 16
        };
        assert_eq!(r, want, "bf16 {h:#06x}");
    }
}

#[test]
fn cvt_to_bf16_rounds_to_nearest_even_and_toward_zero() {
    let a = f32_inputs();
    let rn = map1("cvt.rn.bf16.f32 %h3, %f1; cvt.u32.u16 %r3, %h3;", &a);
    let rz = map1("cvt.rz.bf16.f32 %h3, %f1; cvt.u32.u16 %r3, %h3;", &a);
    for (i, &x) in a.iter().enumerate() {
        assert_eq!(rn[i], ref_bf16(x) as u32, "rn {x:#010x}");
        let want_rz = if f32::from_bits(x).is_nan() {
            0x7fff
        } else {
            x >> 16
        };
        assert_eq!(rz[i], want_rz, "rz {x:#010x}");
    }
    let hand = [
        (0x3f80_8000u32, 0x3f80u32),
        (0x3f81_8000, 0x3f82),
        (0x7f7f_ffff, 0x7f80),
    ];
    for (x, want) in hand {
        let i = a.iter().position(|&v| v == x).unwrap();
        assert_eq!(rn[i], want);
    }
}

#[test]
fn cvt_bf16x2_packs_a_high_and_b_low() {
    let a = f32_inputs();
    let mut b = a.clone();
    b.reverse();
    let out = map2("cvt.rn.bf16x2.f32 %r3, %f1, %f2;", &a, &b);
    for i in 0..a.len() {
        let want = (ref_bf16(a[i]) as u32) << 16 | ref_bf16(b[i]) as u32;
        assert_eq!(out[i], want, "{:#x} {:#x}", a[i], b[i]);
    }
    // f16x2 the same way: 1.5 (0x3e00) high, -2 (0xc000) low; 65520 rounds to infinity.
    let out = map2(
        "cvt.rn.f16x2.f32 %r3, %f1, %f2;",
        &[0x3fc0_0000, 0x477f_f000],
        &[0xc000_0000, 0x7fc0_0000],
    );
    assert_eq!(out, [0x3e00_c000, 0x7c00_7fff]);
}

#[test]
fn cvt_to_bf16_with_relu_and_satfinite() {
    let a = [
        0xbf80_0000u32, // -1
        0x8000_0000,    // -0
        0x7fc0_0000,    // NaN
        0x7f80_0000,    // inf
        0xff80_0000,    // -inf
        0x7f7f_ffff,    // rounds up past the largest bf16
        0x4040_0000,    // 3
    ];
    let relu = map1("cvt.rn.relu.bf16.f32 %h3, %f1; cvt.u32.u16 %r3, %h3;", &a);
    assert_eq!(relu, [0, 0, 0x7fff, 0x7f80, 0, 0x7f80, 0x4040]);
    let sat = map1(
        "cvt.rn.satfinite.bf16.f32 %h3, %f1; cvt.u32.u16 %r3, %h3;",
        &a,
    );
    assert_eq!(
        sat,
        [0xbf80, 0x8000, 0x7fff, 0x7f7f, 0xff7f, 0x7f7f, 0x4040]
    );
}

/// bf16 operands whose exact sums and products are f32 values: exponents within 16 of each
/// other (8 + 15 + 1 bits fit in f32's 24).
fn bf16_operands(n: usize, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = randoms(n, seed)
        .into_iter()
        .map(|r| {
            let exp = 119 + (r >> 8) % 16; // 2^-8 .. 2^7
            (r & 0x8000) | (exp << 7) | (r & 0x7f)
        })
        .collect();
    v.extend([0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x3f80, 0x3f88]);
    v
}

#[test]
fn bf16_arithmetic_is_correctly_rounded() {
    let a = bf16_operands(2000, 2);
    let b = bf16_operands(2000, 3);
    let c = b.iter().rev().copied().collect::<Vec<_>>();
    let body = |op: &str| format!("{op} %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;");
    let add = map2(&body("add.rn.bf16"), &a, &b);
    let add_plain = map2(&body("add.bf16"), &a, &b);
    let sub = map2(&body("sub.rn.bf16"), &a, &b);
    let mul = map2(&body("mul.rn.bf16"), &a, &b);
    let ab: Vec<u32> = a.iter().zip(&b).map(|(x, y)| x | y << 16).collect();
    let fma = map2(
        "mov.b32 {%h4, %h5}, %r1; fma.rn.bf16 %h3, %h4, %h5, %h2; cvt.u32.u16 %r3, %h3;",
        &ab,
        &c,
    );
    for i in 0..a.len() {
        let (x, y, z) = (
            bf16_f64(a[i] as u16),
            bf16_f64(b[i] as u16),
            bf16_f64(c[i] as u16),
        );
        let ctx = format!("{:#06x} {:#06x} {:#06x}", a[i], b[i], c[i]);
        assert_eq!(add[i], ref_bf16_exact(x + y) as u32, "add {ctx}");
        assert_eq!(add_plain[i], add[i], "add {ctx}");
        assert_eq!(sub[i], ref_bf16_exact(x - y) as u32, "sub {ctx}");
        assert_eq!(mul[i], ref_bf16_exact(x * y) as u32, "mul {ctx}");
        let exact = x * y + z;
        if exact.is_nan() || (exact as f32) as f64 == exact && x * y == (x * y) as f32 as f64 {
            assert_eq!(fma[i], ref_bf16_exact(exact) as u32, "fma {ctx}");
        }
    }
}

#[test]
fn bf16_subnormal_results_round_to_even() {
    // 0x0001 is 2^-133. 2^-133 + 2^-133 = 0x0002; 2^-133 * 0.5 ties to 0 (even);
    // 3 * 2^-133 * 0.5 ties to 2 * 2^-133; 0x0080 (2^-126, the smallest normal) - 0x0001.
    let a = [0x0001u32, 0x0001, 0x0003, 0x0080];
    let b = [0x0001u32, 0x3f00, 0x3f00, 0x0001];
    let add = map2("add.rn.bf16 %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;", &a, &b);
    let mul = map2("mul.rn.bf16 %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;", &a, &b);
    let sub = map2("sub.rn.bf16 %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;", &a, &b);
    assert_eq!(add[0], 0x0002);
    assert_eq!(mul[1..3], [0x0000, 0x0002]);
    assert_eq!(sub[3], 0x007f);
}

#[test]
fn bf16_fma_rounds_once() {
    // 1.0625 * 1.0625 = 1.12890625, halfway between bf16 0x3f90 and 0x3f91: ties to even.
    // Adding 2^-60 (0x2180) makes it just above halfway (0x3f91), although the sum in f64 is
    // the halfway value again; subtracting it gives 0x3f90.
    let ab = [
        0x3f88_3f88u32,
        0x3f88_3f88,
        0x3f88_3f88,
        0x3f80_7f80,
        0x3f80_0000,
    ];
    let c = [0x0000u32, 0x2180, 0xa180, 0xff80, 0x8000];
    let out = map2(
        "mov.b32 {%h4, %h5}, %r1; fma.rn.bf16 %h3, %h4, %h5, %h2; cvt.u32.u16 %r3, %h3;",
        &ab,
        &c,
    );
    // inf * 1 + -inf is NaN; +0 * 1 + -0 is +0.
    assert_eq!(out, [0x3f90, 0x3f91, 0x3f90, 0x7fff, 0x0000]);
}

#[test]
fn bf16_min_max_neg_abs_and_compare() {
    let a = [0x8000u32, 0x7fc0, 0x7fc0, 0x3f80, 0xc000, 0x3f80];
    let b = [0x0000u32, 0x3f80, 0x7fc1, 0x4000, 0xbf80, 0x7f80];
    let run = |op: &str| {
        map2(
            &format!("{op} %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;"),
            &a,
            &b,
        )
    };
    assert_eq!(
        run("max.bf16"),
        [0x0000, 0x3f80, 0x7fff, 0x4000, 0xbf80, 0x7f80]
    );
    assert_eq!(
        run("min.bf16"),
        [0x8000, 0x3f80, 0x7fff, 0x3f80, 0xc000, 0x3f80]
    );
    assert_eq!(
        run("max.NaN.bf16"),
        [0x0000, 0x7fff, 0x7fff, 0x4000, 0xbf80, 0x7f80]
    );
    assert_eq!(
        run("min.NaN.bf16"),
        [0x8000, 0x7fff, 0x7fff, 0x3f80, 0xc000, 0x3f80]
    );
    let un = |op: &str| map1(&format!("{op} %h3, %h1; cvt.u32.u16 %r3, %h3;"), &a);
    assert_eq!(
        un("neg.bf16"),
        [0x0000, 0xffc0, 0xffc0, 0xbf80, 0x4000, 0xbf80]
    );
    assert_eq!(
        un("abs.bf16"),
        [0x0000, 0x7fc0, 0x7fc0, 0x3f80, 0x4000, 0x3f80]
    );
    let cmp = |c: &str| {
        map2(
            &format!("setp.{c}.bf16 %p1, %h1, %h2; selp.u32 %r3, 1, 0, %p1;"),
            &a,
            &b,
        )
    };
    assert_eq!(cmp("lt"), [0, 0, 0, 1, 1, 1]);
    assert_eq!(cmp("ltu"), [0, 1, 1, 1, 1, 1]);
    assert_eq!(cmp("eq"), [1, 0, 0, 0, 0, 0]);
    assert_eq!(cmp("nan"), [0, 1, 1, 0, 0, 0]);
}

#[test]
fn packed_bf16x2_and_f16x2_work_lane_by_lane() {
    let a = bf16_operands(500, 4);
    let b = bf16_operands(500, 5);
    let lo: Vec<u32> = a.iter().zip(&b).map(|(x, y)| x | y << 16).collect();
    let hi: Vec<u32> = b.iter().zip(&a).map(|(x, y)| x | y << 16).collect();
    let add = map2("add.rn.bf16x2 %r3, %r1, %r2;", &lo, &hi);
    let mul = map2("mul.rn.bf16x2 %r3, %r1, %r2;", &lo, &hi);
    let max = map2("max.NaN.bf16x2 %r3, %r1, %r2;", &lo, &hi);
    let min = map2("min.bf16x2 %r3, %r1, %r2;", &lo, &hi);
    let fma = map2("fma.rn.bf16x2 %r3, %r1, %r2, %r1;", &lo, &hi);
    let neg = map1("neg.bf16x2 %r3, %r1;", &lo);
    let scalar = |op: &str| {
        let l = map2(
            &format!("{op} %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;"),
            &a,
            &b,
        );
        let h = map2(
            &format!("{op} %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;"),
            &b,
            &a,
        );
        l.iter()
            .zip(&h)
            .map(|(l, h)| l | h << 16)
            .collect::<Vec<_>>()
    };
    assert_eq!(add, scalar("add.rn.bf16"));
    assert_eq!(mul, scalar("mul.rn.bf16"));
    assert_eq!(max, scalar("max.NaN.bf16"));
    assert_eq!(min, scalar("min.bf16"));
    for i in 0..lo.len() {
        let want = |x: u32, y: u32| {
            let (x, y) = (bf16_f64(x as u16), bf16_f64(y as u16));
            let e = x * y + x;
            if e.is_nan() || (e as f32) as f64 == e {
                Some(ref_bf16_exact(e) as u32)
            } else {
                None
            }
        };
        if let (Some(l), Some(h)) = (want(a[i], b[i]), want(b[i], a[i])) {
            assert_eq!(fma[i], l | h << 16, "fma {:#x} {:#x}", lo[i], hi[i]);
        }
        assert_eq!(neg[i], lo[i] ^ 0x8000_8000);
    }
    // f16x2: 1.5 + 2 = 3.5 (0x4300) high, 1 + 1 = 2 (0x4000) low; 1.5 * 2 = 3, 1 * 1 = 1.
    let x = [0x3e00_3c00u32];
    let y = [0x4000_3c00u32];
    assert_eq!(map2("add.rn.f16x2 %r3, %r1, %r2;", &x, &y), [0x4300_4000]);
    assert_eq!(map2("mul.rn.f16x2 %r3, %r1, %r2;", &x, &y), [0x4200_3c00]);
    assert_eq!(
        map2("fma.rn.f16x2 %r3, %r1, %r2, %r2;", &x, &y),
        [0x4500_4000]
    );
}

/// Every finite value of an fp8 format: (code, value) with sign bit clear.
fn fp8_table(exp_bits: u32, bias: i32, finite: impl Fn(u32) -> bool) -> Vec<(u32, f64)> {
    let man_bits = 7 - exp_bits;
    (0..0x80u32)
        .filter(|&c| finite(c))
        .map(|c| {
            let e = (c >> man_bits) as i32;
            let m = (c & ((1 << man_bits) - 1)) as f64 / (1 << man_bits) as f64;
            let v = if e == 0 {
                m * 2f64.powi(1 - bias)
            } else {
                (1.0 + m) * 2f64.powi(e - bias)
            };
            (c, v)
        })
        .collect()
}

fn e4m3_table() -> Vec<(u32, f64)> {
    fp8_table(4, 7, |c| c != 0x7f)
}

fn e5m2_table() -> Vec<(u32, f64)> {
    fp8_table(5, 15, |c| c < 0x7c)
}

/// The nearest table entry to `x` (ties to the even code), saturating past the largest;
/// NaN is 0x7f.
fn ref_fp8(x: f32, table: &[(u32, f64)]) -> u32 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = (x as f64).abs();
    let last = *table.last().unwrap();
    if a >= last.1 {
        // Past the largest value (where distances lose their precision): saturated.
        return sign | last.0;
    }
    let mut best = table[0];
    for &(c, v) in table {
        let (d, db) = ((v - a).abs(), (best.1 - a).abs());
        if d < db || d == db && c & 1 == 0 {
            best = (c, v);
        }
    }
    sign | best.0
}

/// f32 inputs for fp8: the table's values, the midpoints between neighbours and just around
/// them, values past the largest, infinities, NaNs, zeros and random values in range.
fn fp8_inputs(table: &[(u32, f64)]) -> Vec<u32> {
    let mut v = Vec::new();
    for w in table.windows(2) {
        let mid = ((w[0].1 + w[1].1) / 2.0) as f32;
        for x in [w[0].1 as f32, mid, mid.next_up(), mid.next_down()] {
            v.push(x.to_bits());
            v.push((-x).to_bits());
        }
    }
    let max = table.last().unwrap().1 as f32;
    for x in [
        max * 1.0625,
        max * 1.07,
        max * 2.0,
        1e30,
        f32::INFINITY,
        1e-30,
    ] {
        v.push(x.to_bits());
        v.push((-x).to_bits());
    }
    v.extend([0x7fc0_0000, 0xffc0_0000, 0x7f80_0001]);
    for r in randoms(2000, 7) {
        let exp = 100 + (r >> 8) % 40; // 2^-27 .. 2^12
        v.push((r & 0x8000_0000) | (exp << 23) | (r & 0x7f_ffff));
    }
    v
}

#[test]
fn cvt_f32_pairs_to_e4m3x2_and_e5m2x2() {
    for (name, table) in [("e4m3x2", e4m3_table()), ("e5m2x2", e5m2_table())] {
        let a = fp8_inputs(&table);
        let mut b = a.clone();
        b.rotate_left(1);
        let out = map2(
            &format!("cvt.rn.satfinite.{name}.f32 %h3, %f1, %f2; cvt.u32.u16 %r3, %h3;"),
            &a,
            &b,
        );
        for i in 0..a.len() {
            let want =
                ref_fp8(f32::from_bits(a[i]), &table) << 8 | ref_fp8(f32::from_bits(b[i]), &table);
            assert_eq!(out[i], want, "{name} {:#010x} {:#010x}", a[i], b[i]);
        }
    }
    // By hand: 448 is e4m3's largest (0x7e); 464, halfway to the next step, ties down to it;
    // 500 and infinity saturate; NaN is 0x7f; -0 keeps its sign.
    let a = [448f32, 464.0, 500.0, f32::INFINITY, f32::NAN, -0.0].map(f32::to_bits);
    let b = [-448f32, 0.0, -1e9, f32::NEG_INFINITY, 1.0, 2f32.powi(-9)].map(f32::to_bits);
    let out = map2(
        "cvt.rn.satfinite.e4m3x2.f32 %h3, %f1, %f2; cvt.u32.u16 %r3, %h3;",
        &a,
        &b,
    );
    assert_eq!(out, [0x7efe, 0x7e00, 0x7efe, 0x7efe, 0x7f38, 0x8001]);
    // e5m2: 57344 is the largest (0x7b); infinities saturate under .satfinite.
    let a = [57344f32, 61440.0, f32::INFINITY, 1.0].map(f32::to_bits);
    let b = [f32::NEG_INFINITY, 2f32.powi(-16), f32::NAN, 1.5].map(f32::to_bits);
    let out = map2(
        "cvt.rn.satfinite.e5m2x2.f32 %h3, %f1, %f2; cvt.u32.u16 %r3, %h3;",
        &a,
        &b,
    );
    assert_eq!(out, [0x7bfb, 0x7b01, 0x7b7f, 0x3c3e]);
    // .relu: negatives become +0.
    let out = map2(
        "cvt.rn.satfinite.relu.e4m3x2.f32 %h3, %f1, %f2; cvt.u32.u16 %r3, %h3;",
        &[(-1f32).to_bits()],
        &[1f32.to_bits()],
    );
    assert_eq!(out, [0x0038]);
}

/// The f16 bits of an exact value that f16 represents (normal or subnormal).
fn f16_bits(v: f64) -> u32 {
    if v.is_nan() {
        return 0x7fff;
    }
    let sign = if v.is_sign_negative() { 0x8000 } else { 0 };
    let a = v.abs();
    if a.is_infinite() {
        return sign | 0x7c00;
    }
    if a < 2f64.powi(-14) {
        let m = a * 2f64.powi(24);
        assert_eq!(m.fract(), 0.0);
        return sign | m as u32;
    }
    let mut e = -14;
    while a >= 2f64.powi(e + 1) {
        e += 1;
    }
    let m = (a / 2f64.powi(e) - 1.0) * 1024.0;
    assert_eq!(m.fract(), 0.0);
    sign | ((e + 15) as u32) << 10 | m as u32
}

#[test]
fn cvt_fp8x2_to_f16x2_is_exact() {
    let codes: Vec<u32> = (0..=0xffffu32)
        .step_by(7)
        .chain([0x7f7f, 0xff00, 0x7c80])
        .collect();
    let e4 = map1(
        "cvt.u16.u32 %h4, %r1; cvt.rn.f16x2.e4m3x2 %r3, %h4;",
        &codes,
    );
    let e5 = map1(
        "cvt.u16.u32 %h4, %r1; cvt.rn.f16x2.e5m2x2 %r3, %h4;",
        &codes,
    );
    let e4_value = |b: u32| {
        let t = e4m3_table();
        let mag = b & 0x7f;
        if mag == 0x7f {
            return f64::NAN;
        }
        let v = t.iter().find(|(c, _)| *c == mag).unwrap().1;
        if b & 0x80 != 0 { -v } else { v }
    };
    for (i, &c) in codes.iter().enumerate() {
        let (hi, lo) = ((c >> 8) & 0xff, c & 0xff);
        assert_eq!(
            e4[i],
            f16_bits(e4_value(hi)) << 16 | f16_bits(e4_value(lo)),
            "e4m3 {c:#06x}"
        );
        // e5m2 is the top byte of an f16.
        assert_eq!(e5[i], hi << 24 | lo << 8, "e5m2 {c:#06x}");
    }
    // By hand: e4m3 0x7e is 448 (f16 0x5f00), 0x01 is 2^-9 (0x1800), 0x80 is -0.
    let out = map1(
        "cvt.u16.u32 %h4, %r1; cvt.rn.f16x2.e4m3x2 %r3, %h4;",
        &[0x7e01, 0x8038],
    );
    assert_eq!(out, [0x5f00_1800, 0x8000_3c00]);
}

#[test]
fn cvt_f16x2_to_fp8x2() {
    // f16 lanes (high, low): (1.0, 480) → e4m3 (0x38, saturated 0x7e); (NaN, -2^-9).
    let a = [0x3c00_5f80u32, 0x7e00_9800];
    let out = map1(
        "cvt.rn.satfinite.e4m3x2.f16x2 %h3, %r1; cvt.u32.u16 %r3, %h3;",
        &a,
    );
    assert_eq!(out, [0x387e, 0x7f81]);
    let out = map1(
        "cvt.rn.satfinite.e5m2x2.f16x2 %h3, %r1; cvt.u32.u16 %r3, %h3;",
        &[0x3c00_7c00u32, 0x3c80_3d00],
    );
    // Infinity saturates to 0x7b; 1.125 ties to even (1.0, 0x3c); 1.25 is exact (0x3d).
    assert_eq!(out, [0x3c7b, 0x3c3d]);
}

#[test]
fn set_writes_16_bit_and_float_results() {
    // f16 operands: (1.0, 2.0), (NaN, 1.0), (2.0, 1.0).
    let a = [0x3c00u32, 0x7e00, 0x4000];
    let b = [0x4000u32, 0x3c00, 0x3c00];
    let run = |op: &str| {
        map2(
            &format!("{op} %h3, %h1, %h2; cvt.u32.u16 %r3, %h3;"),
            &a,
            &b,
        )
    };
    assert_eq!(run("set.lt.f16.f16"), [0x3c00, 0, 0]);
    assert_eq!(run("set.nan.f16.f16"), [0, 0x3c00, 0]);
    assert_eq!(run("set.gtu.u16.f16"), [0, 0xffff, 0xffff]);
    assert_eq!(run("set.ge.bf16.f16"), [0, 0, 0x3f80]);
    let out = map2("set.lt.u32.f16 %r3, %h1, %h2;", &a, &b);
    assert_eq!(out, [0xffff_ffff, 0, 0]);
    let out = map2(
        "set.lt.f32.f32 %r3, %f1, %f2;",
        &[1f32.to_bits()],
        &[2f32.to_bits()],
    );
    assert_eq!(out, [1f32.to_bits()]);
}

#[test]
fn directives_glued_to_their_types_load() {
    let text = ".version 8.0\n.target sm_75\n.address_size 64\n\
        .visible.entry k(.param.u64 out)\n{\n.reg.b32 %r<5>;\n.reg.b64 %rd<3>;\n\
        ld.param.u64 %rd1, [out];\nmov.u32 %r1, 7;\nst.global.u32 [%rd1], %r1;\nret;\n}\n";
    let m = load(text);
    let mut mem = Mem::new();
    let o = mem.alloc(4);
    let p = Params::default().u64(mem.addr(o));
    go_ok(&m, &mem, &[], "k", &launch1(1, 1), &p);
    assert_eq!(mem.read::<u32>(o), [7]);
}

#[test]
fn refused_narrow_forms_are_load_errors() {
    for op in [
        "cvt.rn.e4m3x2.f32 %h3, %f1, %f2;", // .satfinite is required for fp8 results
        "cvt.rz.satfinite.e4m3x2.f32 %h3, %f1, %f2;",
        "cvt.rn.satfinite.f16x2.e4m3x2 %r3, %h1;",
        "add.rz.bf16 %h3, %h1, %h2;",
        "add.sat.bf16 %h3, %h1, %h2;",
        "cvt.rn.relu.f32.f16 %f3, %h1;",
        "setp.lt.bf16x2 %p1, %r1, %r2;",
        "max.xorsign.abs.bf16 %h3, %h1, %h2;",
    ] {
        let text = format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{{\n\
             .reg .pred %p<2>; .reg .b16 %h<4>; .reg .b32 %r<4>; .reg .f32 %f<4>;\n{op}\nret;\n}}\n"
        );
        assert!(
            cuda_sim_ptx::Module::parse(&text).is_err(),
            "{op} should be refused"
        );
    }
}

/// The rounding directions of `cvt`, as their modifiers.
const DIRS: [&str; 4] = ["rn", "rz", "rm", "rp"];

/// `±mag * 2^exp2` rounded to f16 in direction `dir`, in integer arithmetic alone: the
/// quantum is `2^max(E - 10, -24)` for a value in `[2^E, 2^(E+1))`; an overflow is
/// infinity where the rounding goes away from zero, else the largest finite value.
fn ref_f16(neg: bool, mag: u128, exp2: i32, dir: &str) -> u32 {
    let sign = if neg { 0x8000 } else { 0 };
    if mag == 0 {
        return sign;
    }
    let top = 127 - mag.leading_zeros() as i32 + exp2;
    let q = (top - 10).max(-24);
    let (mut units, rem, half) = if q <= exp2 {
        (mag << (exp2 - q), 0u128, 1u128)
    } else if q - exp2 >= 127 {
        (0, 1, 2) // nonzero, below half a quantum
    } else {
        let s = (q - exp2) as u32;
        (mag >> s, mag & ((1 << s) - 1), 1 << (s - 1))
    };
    let up = match dir {
        "rn" => rem > half || rem == half && units & 1 == 1,
        "rz" => false,
        "rm" => neg && rem != 0,
        "rp" => !neg && rem != 0,
        _ => unreachable!(),
    };
    units += up as u128;
    let mut q = q;
    if units == 2048 {
        units = 1024;
        q += 1;
    }
    if units == 0 {
        return sign;
    }
    if units < 1024 {
        return sign | units as u32; // subnormal (q == -24)
    }
    let field = q + 25;
    if field >= 31 {
        let away = match dir {
            "rn" => true,
            "rz" => false,
            "rm" => neg,
            _ => !neg,
        };
        return sign | if away { 0x7c00 } else { 0x7bff };
    }
    sign | (field as u32) << 10 | (units as u32 - 1024)
}

/// `ref_f16` of a finite f64 (NaN: the canonical f16 NaN; infinities stay infinite).
fn ref_f16_of(v: f64, dir: &str) -> u32 {
    if v.is_nan() {
        return 0x7fff;
    }
    let neg = v.is_sign_negative();
    if v.is_infinite() {
        return if neg { 0xfc00 } else { 0x7c00 };
    }
    let bits = v.to_bits();
    let field = ((bits >> 52) & 0x7ff) as i32;
    let frac = (bits & ((1 << 52) - 1)) as u128;
    let (mag, exp2) = if field == 0 {
        (frac, -1074)
    } else {
        (frac | 1 << 52, field - 1075)
    };
    ref_f16(neg, mag, exp2, dir)
}

#[test]
fn cvt_to_f16_rounds_once_in_every_direction() {
    // f32 sources: edges around f16's range, ties, subnormals, and random bits.
    let mut a: Vec<u32> = F32_EDGES.to_vec();
    for x in [
        65504f32,
        65519.996,
        65520.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        2f32.powi(-24),
        2f32.powi(-25),
        1.5 * 2f32.powi(-25),
        2f32.powi(-14),
        -2f32.powi(-25),
    ] {
        a.push(x.to_bits());
        a.push((-x).to_bits());
    }
    // Random magnitudes in and around f16's range.
    a.extend(
        randoms(4000, 7)
            .iter()
            .map(|r| (r & 0x8000_0000) | (0x3000_0000 + r % 0x1800_0000)),
    );
    for dir in DIRS {
        let out = map1(
            &format!("cvt.{dir}.f16.f32 %h3, %f1; cvt.u32.u16 %r3, %h3;"),
            &a,
        );
        for (&x, &r) in a.iter().zip(&out) {
            let want = ref_f16_of(f32::from_bits(x) as f64, dir);
            assert_eq!(
                r,
                want,
                "cvt.{dir}.f16.f32 of {:e} ({x:#010x})",
                f32::from_bits(x)
            );
        }
    }
    // f64 sources, whose extra bits a rounding through f32 would lose: 1 + 2^-11 + 2^-40
    // lies above the midpoint of 1 and 1 + 2^-10.
    let mut d: Vec<f64> = vec![
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        -(1.0 + 2f64.powi(-11) + 2f64.powi(-40)),
        1.0 + 2f64.powi(-11),
        65519.99999999,
        65520.0,
        2f64.powi(-25) + 2f64.powi(-60),
        f64::NAN,
        f64::INFINITY,
        -0.0,
    ];
    d.extend(randoms(4000, 8).chunks(2).map(|c| {
        let bits = ((c[0] as u64) << 32) | c[1] as u64;
        // Exponents 2^-30 .. 2^17, any sign and mantissa.
        let field = 1023 - 30 + (c[0] >> 20) as u64 % 48;
        f64::from_bits((bits & 0x800f_ffff_ffff_ffff) | field << 52)
    }));
    let lo: Vec<u32> = d.iter().map(|v| v.to_bits() as u32).collect();
    let hi: Vec<u32> = d.iter().map(|v| (v.to_bits() >> 32) as u32).collect();
    for dir in DIRS {
        let out = map2(
            &format!(
                "mov.b64 %rd6, {{%r1, %r2}}; cvt.{dir}.f16.f64 %h3, %rd6; cvt.u32.u16 %r3, %h3;"
            ),
            &lo,
            &hi,
        );
        for (&v, &r) in d.iter().zip(&out) {
            assert_eq!(r, ref_f16_of(v, dir), "cvt.{dir}.f16.f64 of {v:e}");
        }
    }
    assert_eq!(ref_f16_of(d[0], "rn"), 0x3c01);
}

#[test]
fn cvt_integers_to_f16_round_in_every_direction() {
    let mut a: Vec<u32> = vec![
        0,
        1,
        2047,
        2049,
        2051,
        4097,
        4099,
        65504,
        65519,
        65520,
        65535,
        70000,
        0x8000_0000,
        0xffff_ffff,
        0x7fff_ffff,
        0xffff_f7fd, // -2051 as s32
    ];
    a.extend(randoms(3000, 9).iter().map(|r| r >> (r % 24)));
    for dir in DIRS {
        let u = map1(
            &format!("cvt.{dir}.f16.u32 %h3, %r1; cvt.u32.u16 %r3, %h3;"),
            &a,
        );
        let s = map1(
            &format!("cvt.{dir}.f16.s32 %h3, %r1; cvt.u32.u16 %r3, %h3;"),
            &a,
        );
        for ((&x, &ru), &rs) in a.iter().zip(&u).zip(&s) {
            assert_eq!(
                ru,
                ref_f16(false, x as u128, 0, dir),
                "cvt.{dir}.f16.u32 {x}"
            );
            let v = x as i32;
            let want = ref_f16(v < 0, v.unsigned_abs() as u128, 0, dir);
            assert_eq!(rs, want, "cvt.{dir}.f16.s32 {v}");
        }
    }
    // Hand-checked: 2051 lies between 2050 and 2052 (f16's step is 2 there).
    assert_eq!(ref_f16(false, 2051, 0, "rn"), 0x6802);
    assert_eq!(ref_f16(false, 2051, 0, "rz"), 0x6801);
}

/// An f16 value as an integer multiple of 2^-24 (finite `h` only).
fn f16_units(h: u32) -> i128 {
    let field = (h >> 10) & 0x1f;
    let man = (h & 0x3ff) as i128;
    let mag = if field == 0 {
        man
    } else {
        (1024 + man) << (field - 1)
    };
    if h & 0x8000 != 0 { -mag } else { mag }
}

#[test]
fn fma_f16_rounds_once() {
    // Random finite f16 triples (exponent fields 1..30 and subnormals), each packed as
    // a | b << 16 in the first input and c in the second.
    let finite = |r: u32| {
        let h = r & 0xffff;
        if h & 0x7c00 == 0x7c00 { h & 0xbfff } else { h }
    };
    let rs = randoms(6000, 11);
    let mut trip: Vec<(u32, u32, u32)> = rs
        .chunks(3)
        .map(|c| (finite(c[0]), finite(c[1]), finite(c[2])))
        .collect();
    // Products near 1 added to ±1, where the exact sum sits near an f16 midpoint.
    trip.extend(rs.chunks(2).take(1500).map(|c| {
        (
            0x3c00 | (c[0] & 0x3ff),
            0x1000 | (c[1] & 0x3ff) | (c[0] >> 31) << 15,
            0x3c00,
        )
    }));
    // 145/128 * 113/2^18 + 1 = 1 + 2^-11 + 2^-25: just above the midpoint, so 0x3c01.
    trip.push((0x3c88, 0x0f10, 0x3c00));
    trip.push((0x7bff, 0x7bff, 0x0000)); // overflow: infinity
    trip.push((0x3c00, 0x8000, 0x8000)); // 1 * -0 + -0 = -0
    trip.push((0x3c00, 0x3c00, 0xbc00)); // 1 - 1 = +0
    let a: Vec<u32> = trip.iter().map(|t| t.0 | t.1 << 16).collect();
    let b: Vec<u32> = trip.iter().map(|t| t.2).collect();
    let out = map2(
        "mov.b32 {%h4, %h5}, %r1; fma.rn.f16 %h3, %h4, %h5, %h2; cvt.u32.u16 %r3, %h3;",
        &a,
        &b,
    );
    let sat = map2(
        "mov.b32 {%h4, %h5}, %r1; fma.rn.sat.f16 %h3, %h4, %h5, %h2; cvt.u32.u16 %r3, %h3;",
        &a,
        &b,
    );
    for (&(x, y, z), (&r, &rsat)) in trip.iter().zip(out.iter().zip(&sat)) {
        let exact = f16_units(x) * f16_units(y) + (f16_units(z) << 24); // units of 2^-48
        let want = if exact == 0 {
            let prod_neg = (x ^ y) & 0x8000 != 0;
            let prod_zero = f16_units(x) * f16_units(y) == 0;
            if prod_zero && prod_neg && z == 0x8000 {
                0x8000
            } else {
                0
            }
        } else {
            ref_f16(exact < 0, exact.unsigned_abs(), -48, "rn")
        };
        assert_eq!(r, want, "fma.rn.f16 {x:#06x} * {y:#06x} + {z:#06x}");
        // .sat clamps to [0, 1]: the rounded value, or 1.0 or +0. (The sign of an exact
        // zero under .sat is left unchecked: the PTX ISA does not say.)
        if exact == 0 {
            continue;
        }
        let want_sat = if exact < 0 {
            0
        } else if want >= 0x3c00 {
            0x3c00
        } else {
            want
        };
        assert_eq!(
            rsat, want_sat,
            "fma.rn.sat.f16 {x:#06x} * {y:#06x} + {z:#06x}"
        );
    }
    assert_eq!(out[trip.len() - 4], 0x3c01);
    assert_eq!(out[trip.len() - 3], 0x7c00);
    assert_eq!(out[trip.len() - 2], 0x8000);
    assert_eq!(out[trip.len() - 1], 0x0000);
}

/// A kernel where thread `i` runs `body` with `%rd6` = `&mem[i]` (or `&mem[0]` when
/// `same`), the operand `%h1` (16-bit) or `%r1` (32-bit) loaded from `b[i]`, and stores
/// `%h2`/`%r2` (the old value) to `out[i]`. Elements are `w` bytes; `sh` is a shared word.
fn atom_kernel(body: &str, w: u32, same: bool) -> cuda_sim_ptx::Module {
    let (ld, st, old) = if w == 2 {
        ("ld.global.b16 %h1", "st.global.b16", "%h2")
    } else {
        ("ld.global.b32 %r1", "st.global.b32", "%r2")
    };
    let mem_off = if same {
        "mov.u64 %rd6, %rd1;"
    } else {
        "add.u64 %rd6, %rd1, %rd4;"
    };
    load(&format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .shared .align 4 .b8 sh[4];\n\
         .visible .entry k(.param .u64 pm, .param .u64 pb, .param .u64 po, .param .u32 n)\n{{\n\
         .reg .pred %p<8>;\n .reg .b16 %h<8>;\n .reg .b32 %r<24>;\n .reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [pm]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [po];\n\
         mov.u32 %r20, %tid.x; mov.u32 %r21, %ctaid.x; mov.u32 %r22, %ntid.x;\n\
         mad.lo.u32 %r20, %r21, %r22, %r20; ld.param.u32 %r23, [n];\n\
         setp.ge.u32 %p7, %r20, %r23; @%p7 bra DONE;\n\
         mul.wide.u32 %rd4, %r20, {w}; {mem_off}\n\
         add.u64 %rd5, %rd2, %rd4; {ld}, [%rd5];\n\
         {body}\n\
         add.u64 %rd5, %rd3, %rd4; {st} [%rd5], {old};\n\
         DONE: ret;\n}}\n"
    ))
}

/// Runs `atom_kernel(body, w, same)` over `mem` and `b` (elements of `w` bytes, as u32s):
/// (memory after, old values).
fn run_atom(body: &str, w: u32, same: bool, mem0: &[u32], b: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let m = atom_kernel(body, w, same);
    let n = b.len();
    let mut mem = Mem::new();
    let (im, ib, io) = (
        mem.alloc(w as usize * mem0.len()),
        mem.alloc(w as usize * n),
        mem.alloc(w as usize * n),
    );
    let widen = |v: Vec<u16>| v.into_iter().map(u32::from).collect::<Vec<u32>>();
    if w == 2 {
        mem.write(im, &mem0.iter().map(|&x| x as u16).collect::<Vec<u16>>());
        mem.write(ib, &b.iter().map(|&x| x as u16).collect::<Vec<u16>>());
    } else {
        mem.write(im, mem0);
        mem.write(ib, b);
    }
    let p = Params::default()
        .u64(mem.addr(im))
        .u64(mem.addr(ib))
        .u64(mem.addr(io))
        .u32(n as u32);
    go_ok(&m, &mem, &[], "k", &launch1(n.div_ceil(64) as u32, 64), &p);
    if w == 2 {
        (widen(mem.read::<u16>(im)), widen(mem.read::<u16>(io)))
    } else {
        (mem.read::<u32>(im), mem.read::<u32>(io))
    }
}

/// The f16 sum `x + y`, rounded to nearest even once (exact in units of 2^-24).
fn ref_f16_add(x: u32, y: u32) -> u32 {
    let (fx, fy) = (x & 0x7c00 == 0x7c00, y & 0x7c00 == 0x7c00);
    if fx || fy {
        // Infinities and NaNs: NaN in, or opposite infinities, is the canonical NaN.
        let nan = |h: u32| h & 0x7fff > 0x7c00;
        if nan(x) || nan(y) || fx && fy && x != y {
            return 0x7fff;
        }
        return if fx { x } else { y };
    }
    let s = f16_units(x) + f16_units(y);
    if s == 0 {
        return if x == 0x8000 && y == 0x8000 {
            0x8000
        } else {
            0
        };
    }
    ref_f16(s < 0, s.unsigned_abs(), -24, "rn")
}

#[test]
fn atom_add_noftz_f16_and_bf16_round_to_nearest_even() {
    // Random finite f16 pairs, with ties, subnormals (kept: .noftz), overflow, NaN, ∞.
    let mut a: Vec<u32> = randoms(3000, 21)
        .iter()
        .map(|r| r & 0xffff & !0x4000)
        .collect();
    let mut b: Vec<u32> = randoms(3000, 22)
        .iter()
        .map(|r| r & 0xffff & !0x4000)
        .collect();
    for (x, y) in [
        (0x3c00, 0x1000), // 1 + 2^-11: a tie, to even 1.0
        (0x3c01, 0x1000), // tie, to 0x3c02
        (0x0001, 0x0001), // subnormals add exactly: 0x0002
        (0x8001, 0x0001), // +0
        (0x8000, 0x8000), // -0
        (0x7bff, 0x7bff), // overflow: ∞
        (0x7c00, 0xfc00), // ∞ - ∞: NaN
        (0x7e01, 0x3c00), // NaN: canonical NaN
        (0xfc00, 0x3c00),
    ] {
        a.push(x);
        b.push(y);
    }
    for (body, w) in [
        ("atom.global.add.noftz.f16 %h2, [%rd6], %h1;", 2),
        ("atom.add.noftz.f16 %h2, [%rd6], %h1;", 2),
    ] {
        let (after, old) = run_atom(body, w, false, &a, &b);
        assert_eq!(old, a, "{body}: old values");
        for i in 0..a.len() {
            let want = ref_f16_add(a[i], b[i]);
            assert_eq!(after[i], want, "{body} {:#06x} + {:#06x}", a[i], b[i]);
        }
    }
    // bf16: operands whose exact sums are f32 values; ties and subnormals by hand.
    let mut a = bf16_operands(2000, 23);
    let mut b = bf16_operands(2000, 24);
    for (x, y) in [
        (0x3f80, 0x3b80),
        (0x3f81, 0x3b80),
        (0x0001, 0x0001),
        (0x7f80, 0xff80),
    ] {
        a.push(x);
        b.push(y);
    }
    let (after, old) = run_atom("atom.add.noftz.bf16 %h2, [%rd6], %h1;", 2, false, &a, &b);
    assert_eq!(old, a);
    for i in 0..a.len() {
        let want = ref_bf16_exact(bf16_f64(a[i] as u16) + bf16_f64(b[i] as u16)) as u32;
        assert_eq!(after[i], want, "bf16 {:#06x} + {:#06x}", a[i], b[i]);
    }
    let n = a.len();
    assert_eq!(after[n - 4..], [0x3f80, 0x3f82, 0x0002, 0x7fff]);
}

#[test]
fn atom_add_noftz_packed_adds_each_lane() {
    // Lane 0 is the low half: (lo, hi) = (1.0, 2.0) + (0.5, -2.0) = (1.5, +0).
    let (after, old) = run_atom(
        "atom.add.noftz.f16x2 %r2, [%rd6], %r1;",
        4,
        false,
        &[0x4000_3c00],
        &[0xc000_3800],
    );
    assert_eq!((after[0], old[0]), (0x0000_3e00, 0x4000_3c00));
    let a: Vec<u32> = randoms(2000, 25).iter().map(|r| r & !0x4000_4000).collect();
    let b: Vec<u32> = randoms(2000, 26).iter().map(|r| r & !0x4000_4000).collect();
    let (after, _) = run_atom(
        "atom.global.add.noftz.f16x2 %r2, [%rd6], %r1;",
        4,
        false,
        &a,
        &b,
    );
    for i in 0..a.len() {
        let lo = ref_f16_add(a[i] & 0xffff, b[i] & 0xffff);
        let hi = ref_f16_add(a[i] >> 16, b[i] >> 16);
        assert_eq!(
            after[i],
            lo | hi << 16,
            "f16x2 {:#010x} + {:#010x}",
            a[i],
            b[i]
        );
    }
    let a = bf16_operands(2000, 27);
    let b = bf16_operands(2000, 28);
    let pa: Vec<u32> = a
        .iter()
        .zip(a.iter().rev())
        .map(|(x, y)| x | y << 16)
        .collect();
    let pb: Vec<u32> = b
        .iter()
        .zip(b.iter().rev())
        .map(|(x, y)| x | y << 16)
        .collect();
    let (after, old) = run_atom(
        "atom.add.noftz.bf16x2 %r2, [%rd6], %r1;",
        4,
        false,
        &pa,
        &pb,
    );
    assert_eq!(old, pa);
    let add = |x: u32, y: u32| ref_bf16_exact(bf16_f64(x as u16) + bf16_f64(y as u16)) as u32;
    for i in 0..pa.len() {
        let want = add(pa[i] & 0xffff, pb[i] & 0xffff) | add(pa[i] >> 16, pb[i] >> 16) << 16;
        assert_eq!(after[i], want, "bf16x2 {:#010x} + {:#010x}", pa[i], pb[i]);
    }
}

#[test]
fn atom_add_noftz_is_atomic_across_threads() {
    // 512 threads of 8 blocks add 1.0 to one f16 value (256 threads to a bf16 one, whose
    // integers are exact up to 256); every partial sum is exact, so the result is the count
    // and the old values are 0..count, each once.
    let n = 512;
    let sorted = |mut v: Vec<u32>, f: fn(u32) -> f64| {
        v.sort_by(|x, y| f(*x).total_cmp(&f(*y)));
        v.into_iter().map(f).collect::<Vec<f64>>()
    };
    let f16v = |h: u32| f16_units(h) as f64 / 2f64.powi(24);
    let bf16v = |h: u32| bf16_f64(h as u16);
    let count: Vec<f64> = (0..n).map(|i| i as f64).collect();
    for body in [
        "atom.add.noftz.f16 %h2, [%rd6], %h1;",
        "atom.global.add.noftz.f16 %h2, [%rd6], %h1;",
    ] {
        let (after, old) = run_atom(body, 2, true, &[0], &vec![0x3c00; n]);
        assert_eq!(after[0], 0x6000, "{body}"); // 512.0
        assert_eq!(sorted(old, f16v), count, "{body}");
    }
    let nb = 256;
    let (after, old) = run_atom(
        "atom.add.noftz.bf16 %h2, [%rd6], %h1;",
        2,
        true,
        &[0],
        &vec![0x3f80; nb],
    );
    assert_eq!(after[0], 0x4380); // 256.0
    assert_eq!(sorted(old, bf16v), count[..nb]);
    // red: no old value (the kernel stores 0 instead).
    let (after, _) = run_atom(
        "red.global.add.noftz.bf16x2 [%rd6], %r1; mov.b32 %r2, 0;",
        4,
        true,
        &[0],
        &vec![0xbf80_3f80; nb],
    );
    assert_eq!(after[0], 0xc380_4380); // (256, -256)
    let (after, _) = run_atom(
        "red.add.noftz.f16 [%rd6], %h1; mov.b16 %h2, 0;",
        2,
        true,
        &[0],
        &vec![0x3c00; n],
    );
    assert_eq!(after[0], 0x6000); // 512.0
    // Shared memory: the block's threads add into `sh`, thread 0 stores the sum.
    let (after, _) = run_atom(
        "mov.u32 %r5, 0; st.shared.u32 [sh], %r5; bar.sync 0;\n\
         atom.shared.add.noftz.f16x2 %r2, [sh], %r1; bar.sync 0;\n\
         setp.ne.u32 %p1, %r20, 0; @%p1 bra SKIP; ld.shared.u32 %r6, [sh]; st.global.u32 [%rd6], %r6;\n\
         SKIP:",
        4,
        true,
        &[0],
        &vec![0x4000_3c00; 64],
    );
    assert_eq!(after[0], 0x5800_5400); // (64, 128)
}

#[test]
fn refused_atomic_narrow_forms_are_load_errors() {
    for op in [
        "atom.add.f16 %h3, [%rd1], %h1;", // .noftz is required
        "atom.global.min.noftz.f16 %h3, [%rd1], %h1;",
        "atom.exch.noftz.bf16 %h3, [%rd1], %h1;",
        "atom.add.noftz.e4m3x2 %h3, [%rd1], %h1;",
        "red.add.bf16x2 [%rd1], %r1;",
    ] {
        let text = format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{{\n\
             .reg .b16 %h<4>; .reg .b32 %r<4>; .reg .b64 %rd<4>;\n{op}\nret;\n}}\n"
        );
        match cuda_sim_ptx::Module::parse(&text) {
            Err(cuda_sim_ptx::LoadError::NotSupported(_)) => {}
            other => panic!("{op} should be NotSupported, got {other:?}"),
        }
    }
}
