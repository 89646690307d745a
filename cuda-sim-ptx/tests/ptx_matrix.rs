//! Warp-wide matrix instructions of quantized matrix products (llama.cpp's MMQ kernels, which
//! candle links): integer `mma.sync.aligned.m16n8k{16,32}.row.col.s32.{s8,u8}.{s8,u8}.s32`
//! against a product computed here, and `ldmatrix.sync.aligned.m8n8.x{2,4}[.trans]` against
//! the rows it reads; and a kernel without `.visible` (internal linkage) found by name.

mod common;
use common::*;

const HEADER: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

/// Pseudo-random bytes (a fixed LCG).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect()
}

/// One warp runs `mma.sync.aligned.m16n8k{k}.row.col.s32.{at}.{bt}.s32` on A (16 x k), B
/// (k x 8) and C (16 x 8), each lane's fragments packed here as the PTX ISA lays them out
/// (lane t: g = t / 4, q = t % 4); returns D (16 x 8) unpacked the same way.
fn mma(k: usize, a_signed: bool, b_signed: bool, a: &[u8], b: &[u8], c: &[i32]) -> Vec<i32> {
    let (at, bt) = (
        if a_signed { "s8" } else { "u8" },
        if b_signed { "s8" } else { "u8" },
    );
    let (na, nb) = (k / 8, k / 16);
    let list = |first: usize, n: usize| {
        (first..first + n)
            .map(|i| format!("%r{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let text = format!(
        "{HEADER}.visible .entry m(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)\n{{\n\
         .reg .b32 %r<32>;\n .reg .b64 %rd<16>;\n\
         ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [pc]; ld.param.u64 %rd4, [pd];\n\
         mov.u32 %r0, %tid.x;\n\
         mul.wide.u32 %rd5, %r0, {sa}; add.u64 %rd6, %rd1, %rd5; ld.global{va}.u32 {{{la}}}, [%rd6];\n\
         mul.wide.u32 %rd7, %r0, {sb}; add.u64 %rd8, %rd2, %rd7; ld.global{vb}.u32 {bregs}, [%rd8];\n\
         mul.wide.u32 %rd9, %r0, 16; add.u64 %rd10, %rd3, %rd9; ld.global.v4.u32 {{{lc}}}, [%rd10];\n\
         mma.sync.aligned.m16n8k{k}.row.col.s32.{at}.{bt}.s32 {{{ld}}}, {{{la}}}, {{{lb}}}, {{{lc}}};\n\
         add.u64 %rd11, %rd4, %rd9; st.global.v4.u32 [%rd11], {{{ld}}};\n\
         ret;\n}}\n",
        sa = 4 * na,
        sb = 4 * nb,
        va = if na == 4 { ".v4" } else { ".v2" },
        vb = if nb == 2 { ".v2" } else { "" },
        la = list(1, na),
        lb = list(8, nb),
        bregs = if nb == 2 {
            format!("{{{}}}", list(8, 2))
        } else {
            "%r8".to_string()
        },
        lc = list(12, 4),
        ld = list(20, 4),
    );
    let m = load(&text);
    let mut fa = vec![0u32; 32 * na];
    let mut fb = vec![0u32; 32 * nb];
    let mut fc = vec![0i32; 32 * 4];
    for t in 0..32 {
        let (g, q) = (t / 4, t % 4);
        for j in 0..na {
            for e in 0..4 {
                let (row, col) = (g + 8 * (j % 2), 4 * q + 16 * (j / 2) + e);
                fa[t * na + j] |= u32::from(a[row * k + col]) << (8 * e);
            }
        }
        for j in 0..nb {
            for e in 0..4 {
                let (row, col) = (4 * q + 16 * j + e, g);
                fb[t * nb + j] |= u32::from(b[row * 8 + col]) << (8 * e);
            }
        }
        for j in 0..4 {
            fc[t * 4 + j] = c[(g + 8 * (j / 2)) * 8 + 2 * q + j % 2];
        }
    }
    let mut mem = Mem::new();
    let (ia, ib, ic, id) = (
        mem.alloc(4 * fa.len()),
        mem.alloc(4 * fb.len()),
        mem.alloc(4 * fc.len()),
        mem.alloc(4 * 128),
    );
    mem.write(ia, &fa);
    mem.write(ib, &fb);
    mem.write(ic, &fc);
    let p = Params::default()
        .u64(mem.addr(ia))
        .u64(mem.addr(ib))
        .u64(mem.addr(ic))
        .u64(mem.addr(id));
    go_ok(&m, &mem, &[], "m", &launch1(1, 32), &p);
    let fd: Vec<i32> = mem.read(id);
    let mut d = vec![0i32; 128];
    for t in 0..32 {
        let (g, q) = (t / 4, t % 4);
        for j in 0..4 {
            d[(g + 8 * (j / 2)) * 8 + 2 * q + j % 2] = fd[t * 4 + j];
        }
    }
    d
}

/// D = A B + C with wrapping s32 sums, elements read as signed or unsigned bytes.
fn reference(k: usize, a_signed: bool, b_signed: bool, a: &[u8], b: &[u8], c: &[i32]) -> Vec<i32> {
    let val = |x: u8, signed: bool| if signed { x as i8 as i32 } else { x as i32 };
    let mut d = vec![0i32; 128];
    for r in 0..16 {
        for col in 0..8 {
            let mut s = c[r * 8 + col];
            for x in 0..k {
                s = s.wrapping_add(val(a[r * k + x], a_signed) * val(b[x * 8 + col], b_signed));
            }
            d[r * 8 + col] = s;
        }
    }
    d
}

#[test]
fn integer_mma_equals_the_product() {
    for (k, a_signed, b_signed, seed) in [
        (32, true, true, 1),
        (16, true, true, 2),
        (32, false, true, 3),
        (16, true, false, 4),
        (32, false, false, 5),
    ] {
        let a = bytes(16 * k, seed);
        let b = bytes(k * 8, seed + 100);
        let c: Vec<i32> = bytes(128 * 4, seed + 200)
            .chunks(4)
            .map(|w| i32::from_le_bytes(w.try_into().unwrap()) >> 8)
            .collect();
        assert_eq!(
            mma(k, a_signed, b_signed, &a, &b, &c),
            reference(k, a_signed, b_signed, &a, &b, &c),
            "m16n8k{k} a_signed {a_signed} b_signed {b_signed}"
        );
    }
}

/// One warp fills 4 matrices of 8 x 8 b16 in shared memory with their own index
/// (`i * 64 + row * 8 + col`), then lane t gives the address of row `t % 8` of matrix `t / 8`
/// to `ldmatrix` `.x{n}` (`.trans` or not); returns each lane's n registers.
fn ldmatrix(n: usize, trans: bool) -> Vec<u32> {
    let list = (0..n)
        .map(|i| format!("%r{}", 10 + i))
        .collect::<Vec<_>>()
        .join(",");
    let stores = (0..n)
        .map(|i| format!("st.global.u32 [%rd3+{}], %r{};", 4 * i, 10 + i))
        .collect::<Vec<_>>()
        .join(" ");
    let text = format!(
        "{HEADER}.visible .entry l(.param .u64 po)\n{{\n\
         .shared .align 16 .b16 tiles[256];\n\
         .reg .pred %p<2>;\n .reg .b16 %h<2>;\n .reg .b32 %r<20>;\n .reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [po];\n mov.u32 %r1, %tid.x;\n mov.u32 %r2, tiles;\n\
         mov.u32 %r3, 0;\n\
         FILL: shl.b32 %r4, %r1, 3; add.u32 %r4, %r4, %r3; cvt.u16.u32 %h1, %r4;\n\
         shl.b32 %r5, %r4, 1; add.u32 %r5, %r5, %r2; st.shared.u16 [%r5], %h1;\n\
         add.u32 %r3, %r3, 1; setp.lt.u32 %p1, %r3, 8; @%p1 bra FILL;\n\
         bar.sync 0;\n\
         shl.b32 %r6, %r1, 4; add.u32 %r6, %r6, %r2;\n\
         ldmatrix.sync.aligned.m8n8.x{n}{tr}.shared.b16 {{{list}}}, [%r6];\n\
         mul.wide.u32 %rd2, %r1, {stride}; add.u64 %rd3, %rd1, %rd2;\n\
         {stores}\n\
         ret;\n}}\n",
        tr = if trans { ".trans" } else { "" },
        stride = 4 * n,
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let out = mem.alloc(4 * 32 * n);
    let p = Params::default().u64(mem.addr(out));
    go_ok(&m, &mem, &[], "l", &launch1(1, 32), &p);
    mem.read(out)
}

#[test]
fn ldmatrix_spreads_the_rows_over_the_lanes() {
    for (n, trans) in [(4, false), (2, false), (4, true)] {
        let got = ldmatrix(n, trans);
        let element = |i: usize, row: usize, col: usize| (i * 64 + row * 8 + col) as u32;
        let mut want = Vec::new();
        for t in 0..32 {
            for i in 0..n {
                let (lo, hi) = if trans {
                    (
                        element(i, 2 * (t % 4), t / 4),
                        element(i, 2 * (t % 4) + 1, t / 4),
                    )
                } else {
                    (
                        element(i, t / 4, 2 * (t % 4)),
                        element(i, t / 4, 2 * (t % 4) + 1),
                    )
                };
                want.push(lo | hi << 16);
            }
        }
        assert_eq!(got, want, "x{n} trans {trans}");
    }
}

/// A kernel of internal linkage (`.entry` without `.visible`, as nvcc emits template
/// instances and `static __global__` functions) is a kernel all the same.
#[test]
fn an_entry_without_visible_is_found_by_name() {
    let text = format!(
        "{HEADER}.entry hidden(.param .u64 po)\n{{\n .reg .b32 %r<2>;\n .reg .b64 %rd<2>;\n\
         ld.param.u64 %rd1, [po]; mov.u32 %r1, 7; st.global.u32 [%rd1], %r1; ret;\n}}\n"
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let out = mem.alloc(4);
    let p = Params::default().u64(mem.addr(out));
    go_ok(&m, &mem, &[], "hidden", &launch1(1, 1), &p);
    assert_eq!(mem.read::<u32>(out), [7]);
}
