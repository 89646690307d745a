//! More NVRTC fixtures: a by-value struct parameter, recursion, shared/double/64-bit
//! atomics, `__syncthreads_count/and/or`, double shuffles, funnel shifts, `__sad`, switch,
//! `assert`, `__reduce_add_sync`, printf conversions, and a tiled matrix product.

mod common;
use common::*;
use cuda_sim_ptx::Fault;

#[test]
fn struct_param_recursion_and_block_reductions() {
    let m = load(&fixture("misc", include_str!("../fixtures/misc.ptx")));
    assert_eq!(m.entries[0].params[0].size, 24);
    assert_eq!(m.entries[0].param_bytes(), 24 + 4 * 8);
    assert!(m.local_bytes(0) > 0 || m.local_bytes(0) == 0);
    let mut mem = Mem::new();
    let (iout, dout, u64s, cnt) = (
        mem.alloc(32 * 8 * 4),
        mem.alloc(33 * 8),
        mem.alloc(8),
        mem.alloc(12),
    );
    let p = Params::default()
        .f64(0.75)
        .i32(100)
        .f32(1.0)
        .f32(2.0)
        .f32(3.0)
        .u64(mem.addr(iout))
        .u64(mem.addr(dout))
        .u64(mem.addr(u64s))
        .u64(mem.addr(cnt));
    go_ok(&m, &mem, &[], "misc", &launch1(1, 64), &p);
    let o: Vec<i32> = mem.read(iout);
    let d: Vec<f64> = mem.read(dout);
    let fact = |n: i32| (1..=n.max(1)).product::<i32>();
    for t in 0..32i32 {
        let r = &o[t as usize * 8..t as usize * 8 + 8];
        assert_eq!(r[0], fact(t % 10), "fact, t={t}");
        assert_eq!(r[1], 22, "__syncthreads_count");
        assert_eq!(r[2], 3, "__syncthreads_and / _or");
        let wide = (0x9abc_def0u64 << 32) | 0x1234_5678;
        assert_eq!(
            r[3] as u32,
            ((wide << (t & 31)) >> 32) as u32,
            "funnelshift t={t}"
        );
        assert_eq!(r[4], (t - 40).abs() + 7, "sad");
        assert_eq!(r[5], 480 + 16 * (t & 3), "shared atomicAdd");
        assert_eq!(r[6], 100 + [1, 2, 3][t as usize % 3]);
        assert_eq!(r[7], 64, "shared double atomicAdd");
        let want = if t < 31 {
            0.75 * (t + 1) as f64
        } else {
            0.75 * 31.0
        };
        assert_eq!(d[1 + t as usize], want, "double shfl_down, t={t}");
    }
    assert_eq!(d[0], 64.0);
    assert_eq!(mem.read::<u64>(u64s)[0], 2016);
    let c: Vec<i32> = mem.read(cnt);
    assert_eq!(c, [64, 2, -192]);
}

#[test]
fn switch_assert_redux_and_printf_conversions() {
    let m = load(&fixture("sw", include_str!("../fixtures/sw.ptx")));
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let n = 12usize;
    let x: Vec<i32> = (0..n as i32).collect();
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc(n * 4));
    mem.write(bi, &x);
    let p = Params::default()
        .u64(mem.addr(bi))
        .u64(mem.addr(bo))
        .i32(n as i32);
    let out = go_ok(&m, &mem, &g, "sw", &launch1(1, 32), &p);
    let o: Vec<i32> = mem.read(bo);
    let table = [11, 7, 99, -4, 1234, 8, 77, 31, 5, 2, -1, -1];
    for i in 0..n {
        assert_eq!(o[i], table[i] + 1);
    }
    let want: String = (0..n)
        .map(|i| format!("{:.6} x q 1.2e+03 0x0\n", i as f64 * 0.5))
        .collect();
    assert_eq!(out.printf, want);
    // A failing assert traps, after printing CUDA's message.
    mem.write(bi, &[5, 150, 3]);
    let p = Params::default().u64(mem.addr(bi)).u64(mem.addr(bo)).i32(3);
    let (f, out) = go(&m, &mem, &g, "sw", &launch1(1, 32), &p).unwrap_err();
    let Fault::Assert {
        block,
        thread,
        message,
    } = f
    else {
        panic!("{f:?}");
    };
    assert_eq!((block, thread), ([0, 0, 0], [1, 0, 0]));
    assert!(
        message.ends_with("block: [0,0,0], thread: [1,0,0] Assertion `in[i] < 100` failed."),
        "{message}"
    );
    assert!(
        out.printf
            .contains("block: [0,0,0], thread: [1,0,0] Assertion `in[i] < 100` failed."),
        "{}",
        out.printf
    );
}

#[test]
fn tiled_matrix_product() {
    let m = load(&fixture("matmul", include_str!("../fixtures/matmul.ptx")));
    assert_eq!(m.shared_static_bytes(0), 2 * 16 * 16 * 4);
    let mut mem = Mem::new();
    let n = 50usize;
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i * 7) % 13) as f32 * 0.5 - 3.0)
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i * 5) % 11) as f32 * 0.25 + 1.0)
        .collect();
    let (ba, bb, bc) = (
        mem.alloc(n * n * 4),
        mem.alloc(n * n * 4),
        mem.alloc(n * n * 4),
    );
    mem.write(ba, &a);
    mem.write(bb, &b);
    let p = Params::default()
        .u64(mem.addr(ba))
        .u64(mem.addr(bb))
        .u64(mem.addr(bc))
        .i32(n as i32);
    let tiles = n.div_ceil(16) as u32;
    let l = Launch {
        grid: [tiles, tiles, 1],
        block: [16, 16, 1],
        dynamic_shared: 0,
        workers: 2,
        synccheck: false,
        racecheck: false,
    };
    go_ok(&m, &mem, &[], "matmul", &l, &p);
    let c: Vec<f32> = mem.read(bc);
    for r in 0..n {
        for col in 0..n {
            let mut acc = 0.0f32;
            for k in 0..n {
                acc = a[r * n + k].mul_add(b[k * n + col], acc);
            }
            assert_eq!(c[r * n + col], acc, "C[{r}][{col}]");
        }
    }
}

#[test]
fn shuffles_with_width_and_partial_masks() {
    let m = load(&fixture(
        "shfl_width",
        include_str!("../fixtures/shfl_width.ptx"),
    ));
    let mut mem = Mem::new();
    let x: Vec<i32> = (0..32).map(|i| 1000 + i * 7).collect();
    let (bi, bo) = (mem.alloc(32 * 4), mem.alloc(144 * 4));
    mem.write(bi, &x);
    go_ok(
        &m,
        &mem,
        &[],
        "shfl_width",
        &launch1(1, 32),
        &Params::default().u64(mem.addr(bi)).u64(mem.addr(bo)),
    );
    let o: Vec<i32> = mem.read(bo);
    // CUDA semantics of the width argument: lanes form segments of `width`.
    let down = |l: usize, d: usize, w: usize| if l % w + d < w { l + d } else { l };
    let up = |l: usize, d: usize, w: usize| if l % w >= d { l - d } else { l };
    let idx = |l: usize, s: usize, w: usize| l / w * w + s % w;
    let xor = |l: usize, m: usize, w: usize| if (l ^ m) / w == l / w { l ^ m } else { l };
    for l in 0..32 {
        assert_eq!(o[l * 4], x[down(l, 1, 16)], "down lane {l}");
        assert_eq!(o[l * 4 + 1], x[idx(l, 5, 8)], "idx lane {l}");
        assert_eq!(o[l * 4 + 2], x[up(l, 3, 4)], "up lane {l}");
        assert_eq!(o[l * 4 + 3], x[xor(l, 6, 16)], "xor lane {l}");
    }
    for l in 0..16 {
        assert_eq!(o[128 + l], x[l ^ 8]);
    }
}
