//! NVRTC-compiled fixtures (fixtures/*.cu → fixtures/*.ptx) run through the interpreter and
//! checked against host computations.
#![allow(clippy::needless_range_loop)]

mod common;
use common::*;
use cuda_sim_ptx::Fault;

#[test]
fn saxpy() {
    let m = load(&fixture("saxpy", include_str!("../fixtures/saxpy.ptx")));
    let mut mem = Mem::new();
    let n = 10_000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let (bx, by) = (mem.alloc(n * 4), mem.alloc(n * 4));
    mem.write(bx, &x);
    mem.write(by, &y);
    let p = Params::default()
        .i32(n as i32)
        .f32(1.5)
        .u64(mem.addr(bx))
        .u64(mem.addr(by));
    let out = go_ok(
        &m,
        &mem,
        &[],
        "saxpy",
        &launch1(n.div_ceil(256) as u32, 256),
        &p,
    );
    let got: Vec<f32> = mem.read(by);
    for i in 0..n {
        assert_eq!(got[i], 1.5f32.mul_add(x[i], y[i]), "i={i}");
    }
    assert_eq!(out.touched, [(bx, false), (by, true)]);
}

/// The instructions a launch issued: the same for the same launch, twice as many for twice
/// the blocks when every thread takes the same path, and more for threads that pass the
/// bounds check than for those that exit at it.
#[test]
fn issued_instructions_are_counted() {
    let m = load(&fixture("saxpy", include_str!("../fixtures/saxpy.ptx")));
    let mut mem = Mem::new();
    let n = 2048usize;
    let (bx, by) = (mem.alloc(n * 4), mem.alloc(n * 4));
    let count = |mem: &Mem, n: i32, blocks: u32| {
        let p = Params::default()
            .i32(n)
            .f32(1.5)
            .u64(mem.addr(bx))
            .u64(mem.addr(by));
        go_ok(&m, mem, &[], "saxpy", &launch1(blocks, 256), &p).instructions
    };
    let one = count(&mem, 2048, 4);
    assert!(one > 0);
    assert_eq!(count(&mem, 2048, 4), one);
    assert_eq!(count(&mem, 2048, 8), 2 * one);
    // Every thread exits at the bounds check: fewer instructions than doing the work.
    assert!(count(&mem, 0, 4) < one);
}

#[test]
fn shared_tree_reduction() {
    let m = load(&fixture("reduce", include_str!("../fixtures/reduce.ptx")));
    let mut mem = Mem::new();
    let n = 64 * 256 - 100;
    let x: Vec<f32> = (0..n).map(|i| (i % 17) as f32).collect();
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc(64 * 4));
    mem.write(bi, &x);
    let p = Params::default()
        .u64(mem.addr(bi))
        .u64(mem.addr(bo))
        .u32(n as u32);
    go_ok(&m, &mem, &[], "reduce_sum", &launch1(64, 256), &p);
    let got: Vec<f32> = mem.read(bo);
    for b in 0..64 {
        let want: f32 = x.iter().skip(b * 256).take(256).sum();
        assert_eq!(got[b], want, "block {b}");
    }
}

#[test]
fn warp_shuffles() {
    let m = load(&fixture("shfl", include_str!("../fixtures/shfl.ptx")));
    let mut mem = Mem::new();
    let n = 64usize;
    let x: Vec<i32> = (0..n as i32).map(|i| i * 3 + 1).collect();
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc((64 + 3 * n) * 4));
    mem.write(bi, &x);
    let p = Params::default().u64(mem.addr(bi)).u64(mem.addr(bo));
    go_ok(&m, &mem, &[], "warp_sum", &launch1(1, 64), &p);
    let got: Vec<i32> = mem.read(bo);
    for w in 0..2 {
        assert_eq!(got[w], x[w * 32..w * 32 + 32].iter().sum::<i32>());
    }
    for i in 0..n {
        let lane = i % 32;
        let base = i - lane;
        assert_eq!(got[64 + i * 3], x[base + 3], "shfl idx, i={i}");
        assert_eq!(got[64 + i * 3 + 1], x[base + (lane ^ 1)], "shfl xor, i={i}");
        let up = if lane >= 2 { x[i - 2] } else { x[i] };
        assert_eq!(got[64 + i * 3 + 2], up, "shfl up, i={i}");
    }
}

#[test]
fn atomics_across_parallel_blocks() {
    let m = load(&fixture("atomics", include_str!("../fixtures/atomics.ptx")));
    let mut mem = Mem::new();
    let (g, gi) = mem.globals(&m);
    let _ = gi;
    let n = 100_000usize;
    let vals: Vec<i32> = (0..n as i32)
        .map(|i| (i * 7919) % 100_003 - 50_000)
        .collect();
    let counter = mem.alloc(4);
    let fsum = mem.alloc(4);
    let maxv = mem.alloc(16);
    let prod = mem.alloc(4);
    let u64sum = mem.alloc(8);
    let bv = mem.alloc(n * 4);
    mem.write(bv, &vals);
    mem.write(maxv, &[i32::MIN, i32::MAX, 0, 0]);
    mem.write(prod, &[1.0f32]);
    let p = Params::default()
        .u64(mem.addr(counter))
        .u64(mem.addr(fsum))
        .u64(mem.addr(maxv))
        .u64(mem.addr(prod))
        .u64(mem.addr(u64sum))
        .u64(mem.addr(bv))
        .i32(n as i32);
    go_ok(
        &m,
        &mem,
        &g,
        "atomics",
        &launch1(n.div_ceil(128) as u32, 128),
        &p,
    );
    assert_eq!(mem.read::<i32>(counter)[0], n as i32);
    assert_eq!(mem.read::<f32>(fsum)[0], n as f32 * 0.5); // exact: multiples of 0.5 below 2^24
    let mv: Vec<i32> = mem.read(maxv);
    assert_eq!(mv[0], *vals.iter().max().unwrap());
    assert_eq!(mv[1], *vals.iter().min().unwrap());
    assert_eq!(mv[2] as u32, u32::MAX);
    assert_eq!(mv[3], 7);
    assert_eq!(
        mem.read::<u64>(u64sum)[0],
        vals.iter()
            .map(|&v| v as i64 as u64)
            .fold(0u64, |a, b| a.wrapping_add(b))
    );
    assert_eq!(mem.read::<f32>(prod)[0], 1.5f32.powi(20)); // exact: 3^20 < 2^32, products of powers of two
}

#[test]
fn float_math_within_documented_cuda_error() {
    // Bounds: CUDA's documented maximum errors (sinf/cosf/expf 2 ulp, logf 1 ulp, sqrtf and
    // division correctly rounded, rsqrtf 2 ulp, __expf 2 + floor(|1.16 x|) ulp) plus 1 ulp
    // for the host reference (glibc's f32 functions are within 1 ulp).
    let m = load(&fixture("fmath", include_str!("../fixtures/fmath.ptx")));
    let mut mem = Mem::new();
    let n = 2000usize;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 - 1000.0) * 0.0123).collect();
    let (bx, bo) = (mem.alloc(n * 4), mem.alloc(n * 32));
    mem.write(bx, &x);
    let p = Params::default()
        .u64(mem.addr(bx))
        .u64(mem.addr(bo))
        .i32(n as i32);
    go_ok(
        &m,
        &mem,
        &[],
        "fmath",
        &launch1(n.div_ceil(128) as u32, 128),
        &p,
    );
    let o: Vec<f32> = mem.read(bo);
    for i in 0..n {
        let v = x[i];
        let r = &o[i * 8..i * 8 + 8];
        assert!(
            ulp32(r[0], v.sin()) <= 3,
            "sinf({v}) = {} want {}",
            r[0],
            v.sin()
        );
        assert!(
            ulp32(r[1], v.exp()) <= 3,
            "expf({v}) = {} want {}",
            r[1],
            v.exp()
        );
        assert_eq!(r[2], v.abs().sqrt());
        let fast_bound = 3 + (1.16 * v.abs()).floor() as u32;
        assert!(
            ulp32(r[3], v.exp()) <= fast_bound,
            "__expf({v}) = {} want {}",
            r[3],
            v.exp()
        );
        let rs = 1.0 / (v.abs() + 1.0).sqrt();
        assert!(ulp32(r[4], rs) <= 3, "rsqrtf");
        assert!(
            ulp32(r[5], v.cos()) <= 3,
            "cosf({v}) = {} want {}",
            r[5],
            v.cos()
        );
        assert!(ulp32(r[6], (v.abs() + 1.0).ln()) <= 2, "logf");
        assert_eq!(r[7], v / 3.0);
    }
}

#[test]
fn double_math_within_documented_cuda_error() {
    // CUDA: sin 2 ulp, exp 1 ulp, log 1 ulp, sqrt / division / fma exact; +1 ulp for glibc.
    let m = load(&fixture("dmath", include_str!("../fixtures/dmath.ptx")));
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let n = 1000usize;
    let x: Vec<f64> = (0..n).map(|i| (i as f64 - 500.0) * 0.0371).collect();
    let (bx, bo) = (mem.alloc(n * 8), mem.alloc(n * 48));
    mem.write(bx, &x);
    let p = Params::default()
        .u64(mem.addr(bx))
        .u64(mem.addr(bo))
        .i32(n as i32);
    go_ok(
        &m,
        &mem,
        &g,
        "dmath",
        &launch1(n.div_ceil(64) as u32, 64),
        &p,
    );
    let o: Vec<f64> = mem.read(bo);
    for i in 0..n {
        let v = x[i];
        let r = &o[i * 6..i * 6 + 6];
        assert!(
            ulp64(r[0], v.sin()) <= 3,
            "sin({v}) = {} want {}",
            r[0],
            v.sin()
        );
        assert!(
            ulp64(r[1], v.exp()) <= 2,
            "exp({v}) = {} want {}",
            r[1],
            v.exp()
        );
        assert_eq!(r[2], v.abs().sqrt());
        assert!(ulp64(r[3], (v.abs() + 1.0).ln()) <= 2, "log");
        assert_eq!(r[4], v / 7.0);
        assert_eq!(r[5], v.mul_add(v, 1.0));
    }
}

#[test]
fn sixty_four_bit_index_and_division() {
    let m = load(&fixture("index64", include_str!("../fixtures/index64.ptx")));
    let mut mem = Mem::new();
    let n = 5000usize;
    let bo = mem.alloc(n * 24);
    for (mul, div) in [
        (987_654_321i64, -12345i64),
        (3, 7),
        (-1_000_003, 1_000_000_007),
    ] {
        let p = Params::default()
            .u64(mem.addr(bo))
            .u64(n as u64)
            .u64(mul as u64)
            .u64(div as u64);
        go_ok(
            &m,
            &mem,
            &[],
            "index64",
            &launch1(n.div_ceil(256) as u32, 256),
            &p,
        );
        let o: Vec<i64> = mem.read(bo);
        for i in 0..n {
            let v = (i as i64).wrapping_mul(mul) - 1_000_000_000_000;
            assert_eq!(o[i * 3], v / div);
            assert_eq!(o[i * 3 + 1], v % div);
            assert_eq!(
                o[i * 3 + 2] as u64,
                (i as u64 + 12_345_678_901) / div.unsigned_abs()
            );
        }
    }
}

#[test]
fn constant_memory() {
    let m = load(&fixture(
        "constant",
        include_str!("../fixtures/constant.ptx"),
    ));
    assert_eq!(m.const_bytes(), 36);
    let coeffs = m.globals.iter().find(|g| g.name == "coeffs").unwrap();
    assert_eq!(coeffs.size, 32);
    assert_eq!(&coeffs.init[..8], &[0, 0, 128, 63, 0, 0, 0, 64]);
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let n = 300usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
    let (bx, bo) = (mem.alloc(n * 4), mem.alloc(n * 4));
    mem.write(bx, &x);
    let p = Params::default()
        .u64(mem.addr(bx))
        .u64(mem.addr(bo))
        .i32(n as i32);
    go_ok(&m, &mem, &g, "poly", &launch1(3, 128), &p);
    let c = [1.0f32, 2.0, 3.0, 4.0, 0.5, 0.25, 0.125, -1.0];
    let o: Vec<f32> = mem.read(bo);
    for i in 0..n {
        let mut acc = 0.0f32;
        for k in (0..8).rev() {
            acc = acc.mul_add(x[i], c[k]);
        }
        assert_eq!(o[i], acc + c[i & 7] + 10.0, "i={i}");
    }
}

#[test]
fn local_array_depot() {
    let m = load(&fixture(
        "localarr",
        include_str!("../fixtures/localarr.ptx"),
    ));
    assert!(m.local_bytes(0) >= 64);
    let mut mem = Mem::new();
    let n = 1000usize;
    let idx: Vec<i32> = (0..n as i32).map(|i| i * 5 + 3).collect();
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc(n * 4));
    mem.write(bi, &idx);
    let p = Params::default()
        .u64(mem.addr(bi))
        .u64(mem.addr(bo))
        .i32(n as i32);
    go_ok(&m, &mem, &[], "local_array", &launch1(8, 128), &p);
    let o: Vec<i32> = mem.read(bo);
    for i in 0..n {
        let mut a: Vec<i32> = (0..16).map(|k| k * k + i as i32).collect();
        let j = (idx[i] & 15) as usize;
        a[j] += 100;
        let s: i32 = (0..16).map(|k| a[(k + j) & 15] * (k as i32 + 1)).sum();
        assert_eq!(o[i], s + a[j], "i={i}");
    }
}

#[test]
fn grid_3d() {
    let m = load(&fixture("grid3d", include_str!("../fixtures/grid3d.ptx")));
    let mut mem = Mem::new();
    let (nx, ny, nz) = (37u32, 19u32, 5u32);
    let bo = mem.alloc((nx * ny * nz) as usize * 4);
    let p = Params::default().u64(mem.addr(bo)).u32(nx).u32(ny).u32(nz);
    let l = Launch {
        grid: [5, 3, 3],
        block: [8, 8, 2],
        dynamic_shared: 0,
        workers: 2,
        synccheck: false,
        racecheck: false,
    };
    go_ok(&m, &mem, &[], "grid3d", &l, &p);
    let o: Vec<u32> = mem.read(bo);
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                assert_eq!(o[((z * ny + y) * nx + x) as usize], x + 100 * y + 10000 * z);
            }
        }
    }
}

#[test]
fn device_printf() {
    let m = load(&fixture("printf", include_str!("../fixtures/printf.ptx")));
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let p = Params::default().i32(-3).f64(2.5).u64(0);
    let out = go_ok(
        &m,
        &mem,
        &g,
        "hello",
        &Launch {
            grid: [2, 1, 1],
            block: [3, 1, 1],
            dynamic_shared: 0,
            workers: 2,
            synccheck: false,
            racecheck: false,
        },
        &p,
    );
    let mut want = String::new();
    for b in 0..2 {
        for t in 0..3 {
            want.push_str(&format!(
                "block {b} thread {t}: {:5.2}|{:<4}|{:x}|str|{}|-3000000000|2.500000e+00|{}%\n",
                2.5 + t as f64,
                -3 + t as i32,
                255 + t,
                (b'A' + t as u8) as char,
                ["0", "2.5", "5"][t]
            ));
        }
    }
    assert_eq!(out.printf, want);
}

#[test]
fn ballot_all_any() {
    let m = load(&fixture("vote", include_str!("../fixtures/vote.ptx")));
    let mut mem = Mem::new();
    let n = 96usize;
    let mut x = vec![1i32; n];
    x[3] = -1;
    x[40] = 9;
    x[70] = 0;
    x[71] = 6;
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc(9 * 4));
    mem.write(bi, &x);
    let p = Params::default().u64(mem.addr(bi)).u64(mem.addr(bo));
    go_ok(&m, &mem, &[], "vote", &launch1(1, 96), &p);
    let o: Vec<u32> = mem.read(bo);
    assert_eq!(o, [!(1 << 3), 0, 0, !0, 1, 1, !(1 << 6), 0, 1]);
}

#[test]
fn integer_bit_operations() {
    let m = load(&fixture("bits", include_str!("../fixtures/bits.ptx")));
    let mut mem = Mem::new();
    let vals: Vec<u32> = vec![
        0,
        1,
        2,
        3,
        0x8000_0000,
        0xffff_ffff,
        0x1234_5678,
        0xdead_beef,
        7,
        100,
        0x7fff_ffff,
        0x0f0f_0000,
    ];
    let n = vals.len();
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc(n * 40));
    mem.write(bi, &vals);
    let p = Params::default()
        .u64(mem.addr(bi))
        .u64(mem.addr(bo))
        .i32(n as i32);
    go_ok(&m, &mem, &[], "bits", &launch1(1, 32), &p);
    let o: Vec<u32> = mem.read(bo);
    let byte_perm = |x: u32, y: u32, s: u32| {
        let t = ((y as u64) << 32) | x as u64;
        (0..4)
            .map(|i| (((t >> (((s >> (4 * i)) & 7) * 8)) & 0xff) as u32) << (8 * i))
            .sum::<u32>()
    };
    for i in 0..n {
        let v = vals[i];
        let s = v as i32;
        let r = &o[i * 10..i * 10 + 10];
        assert_eq!(r[0], v.count_ones());
        assert_eq!(r[1], v.leading_zeros());
        assert_eq!(r[2], v.reverse_bits());
        assert_eq!(r[3], v / 7);
        assert_eq!(r[4], v % 13);
        assert_eq!(r[5], (s / -5) as u32);
        assert_eq!(r[6], (s % 9) as u32);
        assert_eq!(r[7], (v << (i & 7)) ^ (v >> 3) ^ !v);
        let ffs = if v == 0 { 0 } else { v.trailing_zeros() + 1 };
        assert_eq!(r[8], ffs + ((v as u64) * (v as u64)).count_ones());
        let want = ((s >> 5) as u32)
            .wrapping_add(byte_perm(v, 0x1234_5678, 0x5140))
            .wrapping_add(s.min(3) as u32)
            .wrapping_add(v.max(9));
        assert_eq!(r[9], want, "v={v:#x}");
    }
}

#[test]
fn dynamic_shared_memory() {
    let m = load(&fixture(
        "dynshared",
        include_str!("../fixtures/dynshared.ptx"),
    ));
    assert_eq!(m.shared_static_bytes(0), 0);
    let mut mem = Mem::new();
    let n = 1000usize;
    let x: Vec<i32> = (0..n as i32).collect();
    let b = mem.alloc(n * 4);
    mem.write(b, &x);
    let p = Params::default().u64(mem.addr(b)).i32(n as i32);
    let l = Launch {
        grid: [4, 1, 1],
        block: [256, 1, 1],
        dynamic_shared: 256 * 4,
        workers: 2,
        synccheck: false,
        racecheck: false,
    };
    go_ok(&m, &mem, &[], "reverse", &l, &p);
    let o: Vec<i32> = mem.read(b);
    for i in 0..n {
        let (blk, t) = (i / 256, i % 256);
        let src = blk * 256 + 255 - t;
        assert_eq!(o[i], if src < n { src as i32 } else { -1 }, "i={i}");
    }
    // Too little dynamic shared memory is an out-of-bounds fault, not a wrong result.
    let l = Launch {
        dynamic_shared: 1000,
        ..l
    };
    mem.write(b, &x);
    let (f, _) = go(&m, &mem, &[], "reverse", &l, &p).unwrap_err();
    assert!(
        matches!(
            f,
            Fault::OutOfBounds {
                block: [0, 0, 0],
                thread: [250, 0, 0],
                len: 4,
                write: true,
                ..
            }
        ),
        "{f:?}"
    );
}

#[test]
fn noinline_device_functions() {
    let m = load(&fixture(
        "noinline",
        include_str!("../fixtures/noinline.ptx"),
    ));
    let mut mem = Mem::new();
    let n = 500usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
    let (ba, bb, bo, bi) = (
        mem.alloc(n * 4),
        mem.alloc(n * 4),
        mem.alloc(n * 4),
        mem.alloc(n * 4),
    );
    mem.write(ba, &a);
    mem.write(bb, &b);
    let p = Params::default()
        .u64(mem.addr(ba))
        .u64(mem.addr(bb))
        .u64(mem.addr(bo))
        .u64(mem.addr(bi))
        .i32(n as i32);
    go_ok(&m, &mem, &[], "calls", &launch1(4, 128), &p);
    let o: Vec<f32> = mem.read(bo);
    let oi: Vec<i32> = mem.read(bi);
    for i in 0..n {
        let k = (i & 3) + 1;
        let mut acc = 0.0f32;
        for j in 0..k {
            acc += a[i] * j as f32 - b[i];
        }
        assert_eq!(o[i], acc, "i={i}");
        assert_eq!(oi[i], 4 * i as i32 + 2);
    }
}

#[test]
fn write_past_the_end_faults() {
    let m = load(&fixture("oob", include_str!("../fixtures/oob.ptx")));
    let mut mem = Mem::new();
    let n = 300usize;
    let b = mem.alloc(n * 4);
    let p = Params::default().u64(mem.addr(b)).i32(n as i32);
    for workers in [1, 2] {
        let l = Launch {
            workers,
            synccheck: false,
            racecheck: false,
            ..launch1(4, 128)
        };
        let (f, out) = go(&m, &mem, &[], "past_end", &l, &p).unwrap_err();
        match f {
            Fault::OutOfBounds {
                block,
                thread,
                addr,
                len,
                write,
                pc_text,
            } => {
                assert_eq!(block, [2, 0, 0]);
                assert_eq!(thread, [300 - 256, 0, 0]);
                assert_eq!(addr, mem.addr(b) + 4 * n as u64);
                assert_eq!((len, write), (4, true));
                assert!(pc_text.starts_with("st.global.u32"), "{pc_text}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out.touched, [(b, true)]);
        let o: Vec<i32> = mem.read(b);
        assert_eq!(o[n - 1], n as i32 - 1);
    }
}
