//! Regression tests for the defects an adversarial review found: layout overflow and
//! limits, per-entry static shared memory, directed rounding, NaN patterns, atom.add.f32
//! flushing, printf length modifiers and instructions NVRTC emits for common code.
#![allow(clippy::needless_range_loop)]

mod common;
use common::*;
use cuda_sim_ptx::{LoadError, Module};

const HEAD: &str = ".version 7.8\n.target sm_90\n.address_size 64\n";

fn invalid(text: &str) -> String {
    match Module::parse(text) {
        Err(LoadError::Invalid(m)) => m,
        other => panic!("expected LoadError::Invalid, got {other:?}"),
    }
}

#[test]
fn parameter_layout_overflow_is_refused() {
    let m = invalid(&format!(
        "{HEAD}.visible .entry k(.param .b8 a[18446744073709551608], .param .u32 b)\n{{ ret; }}"
    ));
    assert!(m.contains("32764"), "{m}");
    let m = invalid(&format!(
        "{HEAD}.visible .entry k(.param .u32 b, .param .align 8 .b8 a[18446744073709551615])\n{{ ret; }}"
    ));
    assert!(m.contains("32764") || m.contains("too large"), "{m}");
    // The driver's limit: 32764 bytes fit, 32768 do not.
    let ok = Module::parse(&format!(
        "{HEAD}.visible .entry k(.param .b8 a[32764])\n{{ ret; }}"
    ))
    .unwrap();
    assert_eq!(ok.entries[0].param_bytes(), 32764);
    let m = invalid(&format!(
        "{HEAD}.visible .entry k(.param .u32 x, .param .b8 a[32761])\n{{ ret; }}"
    ));
    assert!(m.contains("32764"), "{m}");
    // `.func` parameter lists (definitions and prototypes) that overflow.
    invalid(&format!(
        "{HEAD}.func f(.param .b8 a[18446744073709551608], .param .b64 b)\n{{ ret; }}\n\
         .visible .entry k()\n{{ ret; }}"
    ));
    invalid(&format!(
        "{HEAD}.func (.param .b8 r[18446744073709551615]) f(.param .b64 b);\n\
         .visible .entry k()\n{{ ret; }}"
    ));
}

#[test]
fn memory_declaration_limits() {
    let shared = |n: u64| {
        format!(
            "{HEAD}.shared .align 4 .b8 s[{n}];\n.visible .entry k()\n{{\n .reg .b64 %rd<2>;\n \
             mov.u64 %rd1, s;\n ret;\n}}"
        )
    };
    assert_eq!(
        Module::parse(&shared(49152))
            .unwrap()
            .shared_static_bytes(0),
        49152
    );
    let m = invalid(&shared(49153));
    assert!(m.contains("49152"), "{m}");
    let local =
        |n: u64| format!("{HEAD}.visible .entry k()\n{{\n .local .align 16 .b8 d[{n}];\n ret;\n}}");
    assert_eq!(
        Module::parse(&local(524288)).unwrap().local_bytes(0),
        524288
    );
    let m = invalid(&local(524304));
    assert!(m.contains("524288"), "{m}");
    // The deepest call chain counts.
    let chain = format!(
        "{HEAD}.func f()\n{{\n .local .align 16 .b8 d[262160];\n ret;\n}}\n\
         .visible .entry k()\n{{\n .local .align 16 .b8 e[262144];\n call.uni f, ();\n ret;\n}}"
    );
    let m = invalid(&chain);
    assert!(m.contains("524288"), "{m}");
    // .const: 64 KiB per module.
    let c = |a: u64, b: u64| {
        format!(
            "{HEAD}.const .align 4 .b8 c1[{a}];\n.const .align 4 .b8 c2[{b}];\n\
             .visible .entry k()\n{{ ret; }}"
        )
    };
    assert_eq!(
        Module::parse(&c(32768, 32768)).unwrap().const_bytes(),
        65536
    );
    let m = invalid(&c(32768, 32772));
    assert!(m.contains("65536"), "{m}");
}

const SHARED_PER_ENTRY: &str = ".version 7.8\n.target sm_90\n.address_size 64\n\
    .shared .align 4 .b8 _ZZ2kaE1a[1024];\n\
    .shared .align 4 .b8 _ZZ2kbE1b[64];\n\
    .shared .align 8 .b8 _ZZ1fE1c[200];\n\
    .extern .shared .align 16 .b8 dyn[];\n\
    .func f(.param .b32 v)\n{\n .reg .b32 %r<3>;\n ld.param.u32 %r1, [v];\n\
     st.shared.u32 [_ZZ1fE1c+196], %r1;\n ret;\n}\n\
    .visible .entry ka(.param .u64 out)\n{\n .reg .b32 %r<3>;\n .reg .b64 %rd<3>;\n\
     mov.u32 %r1, _ZZ2kaE1a;\n st.shared.u32 [%r1+1020], %r1;\n ret;\n}\n\
    .visible .entry kb(.param .u64 out, .param .u32 off)\n{\n .reg .b32 %r<5>;\n .reg .b64 %rd<3>;\n\
     ld.param.u64 %rd1, [out];\n ld.param.u32 %r1, [off];\n\
     mov.u32 %r2, _ZZ2kbE1b;\n add.s32 %r3, %r2, %r1;\n st.shared.u32 [%r3], 77;\n\
     ld.shared.u32 %r4, [_ZZ2kbE1b];\n st.global.u32 [%rd1], %r4;\n ret;\n}\n\
    .visible .entry kc()\n{\n ret;\n}\n\
    .visible .entry kd()\n{\n .reg .b32 %r<2>;\n { .param .b32 p0;\n st.param.b32 [p0], 5;\n\
     call.uni f, (p0);\n }\n ret;\n}\n\
    .visible .entry ke(.param .u64 out, .param .u32 off)\n{\n .reg .b32 %r<5>;\n .reg .b64 %rd<4>;\n\
     ld.param.u64 %rd1, [out];\n ld.param.u32 %r1, [off];\n\
     st.shared.u32 [_ZZ2kbE1b+60], 1;\n\
     mov.u64 %rd2, dyn;\n cvta.shared.u64 %rd2, %rd2;\n cvt.u64.u32 %rd3, %r1;\n add.s64 %rd2, %rd2, %rd3;\n\
     st.u32 [%rd2], 9;\n mov.u32 %r2, dyn;\n st.global.u32 [%rd1], %r2;\n ret;\n}\n";

#[test]
fn static_shared_memory_is_per_entry() {
    let m = load(SHARED_PER_ENTRY);
    let size = |n: &str| m.shared_static_bytes(m.entry(n).unwrap());
    assert_eq!(size("ka"), 1024);
    assert_eq!(size("kb"), 64);
    assert_eq!(size("kc"), 0);
    assert_eq!(size("kd"), 200, "the functions an entry calls count");
    assert_eq!(size("ke"), 64);
    let mut mem = Mem::new();
    let out = mem.alloc(16);
    let l = launch1(1, 32);
    go_ok(
        &m,
        &mem,
        &[],
        "ka",
        &l,
        &Params::default().u64(mem.addr(out)),
    );
    go_ok(&m, &mem, &[], "kd", &l, &Params::default());
    // A reference at the start of the window lands in bounds.
    go_ok(
        &m,
        &mem,
        &[],
        "kb",
        &l,
        &Params::default().u64(mem.addr(out)).u32(0),
    );
    assert_eq!(mem.read::<u32>(out)[0], 77);
    // b[-1] is not another kernel's array: it faults.
    let (f, _) = go(
        &m,
        &mem,
        &[],
        "kb",
        &l,
        &Params::default().u64(mem.addr(out)).u32(-4i32 as u32),
    )
    .unwrap_err();
    assert!(
        matches!(f, cuda_sim_ptx::Fault::OutOfBounds { write: true, .. }),
        "{f:?}"
    );
    // Past the static window of kb (64 bytes) without dynamic shared memory: faults.
    let (f, _) = go(
        &m,
        &mem,
        &[],
        "kb",
        &l,
        &Params::default().u64(mem.addr(out)).u32(64),
    )
    .unwrap_err();
    assert!(
        matches!(f, cuda_sim_ptx::Fault::OutOfBounds { .. }),
        "{f:?}"
    );
    // Dynamic shared memory starts after the entry's own static variables.
    let mut l2 = launch1(1, 32);
    l2.dynamic_shared = 8;
    go_ok(
        &m,
        &mem,
        &[],
        "ke",
        &l2,
        &Params::default().u64(mem.addr(out)).u32(4),
    );
    assert_eq!(mem.read::<u32>(out)[0], 64);
    let (f, _) = go(
        &m,
        &mem,
        &[],
        "ke",
        &l2,
        &Params::default().u64(mem.addr(out)).u32(8),
    )
    .unwrap_err();
    assert!(
        matches!(f, cuda_sim_ptx::Fault::OutOfBounds { .. }),
        "{f:?}"
    );
}

/// Runs `body` (which reads `%rd1` = address of a u64 in/out buffer of 32 slots) once.
fn run_u64(body: &str, regs: &str, input: &[u64]) -> Vec<u64> {
    let text = format!(
        "{HEAD}.visible .entry k(.param .u64 buf)\n{{\n .reg .pred %p<4>;\n .reg .b16 %h<8>;\n \
         .reg .b32 %r<16>;\n .reg .f32 %f<16>;\n .reg .b64 %rd<16>;\n .reg .f64 %fd<16>;\n{regs}\n \
         ld.param.u64 %rd1, [buf];\n{body}\n ret;\n}}"
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let b = mem.alloc(32 * 8);
    mem.write(b, input);
    go_ok(
        &m,
        &mem,
        &[],
        "k",
        &launch1(1, 1),
        &Params::default().u64(mem.addr(b)),
    );
    mem.read(b)
}

#[test]
fn directed_rounding_of_int_to_float_and_fma() {
    let body = "\
        mov.u32 %r1, 16777217;\n cvt.rp.f32.s32 %f1, %r1;\n st.global.f32 [%rd1], %f1;\n\
        mov.u64 %rd2, -16777217;\n cvt.rm.f32.s64 %f2, %rd2;\n st.global.f32 [%rd1+8], %f2;\n\
        mov.u64 %rd3, -1;\n cvt.rz.f32.u64 %f3, %rd3;\n st.global.f32 [%rd1+16], %f3;\n\
        mov.u32 %r2, -1;\n cvt.rz.f32.u32 %f4, %r2;\n st.global.f32 [%rd1+24], %f4;\n\
        mov.f32 %f5, 0f3F800000;\n mov.f32 %f6, 0f322BCC77;\n\
        fma.rp.f32 %f7, %f5, %f5, %f6;\n st.global.f32 [%rd1+32], %f7;\n\
        neg.f32 %f8, %f6;\n fma.rz.f32 %f9, %f5, %f5, %f8;\n st.global.f32 [%rd1+40], %f9;\n\
        neg.f32 %f10, %f5;\n fma.rm.f32 %f11, %f10, %f5, %f8;\n st.global.f32 [%rd1+48], %f11;\n\
        fma.rn.f32 %f12, %f5, %f5, %f6;\n st.global.f32 [%rd1+56], %f12;\n\
        cvt.rz.f64.u64 %fd1, %rd3;\n st.global.f64 [%rd1+64], %fd1;\n\
        mov.u64 %rd4, 9007199254740993;\n cvt.rp.f64.s64 %fd2, %rd4;\n st.global.f64 [%rd1+72], %fd2;\n\
        neg.s64 %rd5, %rd4;\n cvt.rp.f64.s64 %fd3, %rd5;\n st.global.f64 [%rd1+80], %fd3;\n\
        cvt.rm.f64.s64 %fd4, %rd5;\n st.global.f64 [%rd1+88], %fd4;\n\
        mov.u32 %r3, 16777219;\n cvt.rn.f32.u32 %f13, %r3;\n st.global.f32 [%rd1+96], %f13;\n\
        mov.f32 %f14, 0f7F7FFFFF;\n fma.rz.f32 %f15, %f14, %f14, %f5;\n st.global.f32 [%rd1+104], %f15;\n\
        fma.rm.f32 %f15, %f5, %f6, %f8;\n st.global.f32 [%rd1+112], %f15;\n";
    let o = run_u64(body, "", &[0; 32]);
    assert_eq!(o[0] as u32, 0x4b80_0001, "__int2float_ru(16777217)");
    assert_eq!(o[1] as u32, 0xcb80_0001, "__ll2float_rd(-16777217)");
    assert_eq!(o[2] as u32, 0x5f7f_ffff, "__ull2float_rz(UINT64_MAX)");
    assert_eq!(o[3] as u32, 0x4f7f_ffff, "__uint2float_rz(0xffffffff)");
    assert_eq!(o[4] as u32, 0x3f80_0001, "__fmaf_ru(1, 1, 1e-8)");
    assert_eq!(o[5] as u32, 0x3f7f_ffff, "__fmaf_rz(1, 1, -1e-8)");
    assert_eq!(o[6] as u32, 0xbf80_0001, "__fmaf_rd(-1, 1, -1e-8)");
    assert_eq!(o[7] as u32, 0x3f80_0000, "__fmaf_rn(1, 1, 1e-8)");
    assert_eq!(o[8], 0x43ef_ffff_ffff_ffff, "__ull2double_rz(UINT64_MAX)");
    assert_eq!(f64::from_bits(o[9]), 9007199254740994.0);
    assert_eq!(f64::from_bits(o[10]), -9007199254740992.0);
    assert_eq!(f64::from_bits(o[11]), -9007199254740994.0);
    assert_eq!(o[12] as u32, 16777220f32.to_bits(), "ties to even");
    assert_eq!(
        o[13] as u32, 0x7f7f_ffff,
        "rz does not overflow to infinity"
    );
    assert_eq!(
        o[14] as u32,
        (-0.0f32).to_bits(),
        "exact zero rounded down is -0"
    );
    // A directed f64 fma cannot be done exactly here: refused at load.
    for rnd in ["rp", "rm", "rz"] {
        let text = format!(
            "{HEAD}.visible .entry k()\n{{\n .reg .f64 %fd<4>;\n fma.{rnd}.f64 %fd1, %fd2, %fd3, %fd1;\n ret;\n}}"
        );
        assert_eq!(
            Module::parse(&text).unwrap_err(),
            LoadError::NotSupported(format!("fma.{rnd}.f64"))
        );
    }
}

#[test]
fn nan_results_are_canonical() {
    let body = "\
        mov.f32 %f1, 0fBF800000;\n sqrt.rn.f32 %f2, %f1;\n st.global.f32 [%rd1], %f2;\n\
        mov.f32 %f3, 0f7F800000;\n mov.f32 %f4, 0f00000000;\n mul.rn.f32 %f5, %f3, %f4;\n st.global.f32 [%rd1+8], %f5;\n\
        sub.rn.f32 %f6, %f3, %f3;\n st.global.f32 [%rd1+16], %f6;\n\
        mov.f64 %fd1, 0d7FF0000000000000;\n sub.rn.f64 %fd2, %fd1, %fd1;\n st.global.f64 [%rd1+24], %fd2;\n\
        mov.f64 %fd3, 0dBFF0000000000000;\n sqrt.rn.f64 %fd4, %fd3;\n st.global.f64 [%rd1+32], %fd4;\n\
        cvt.rn.f16.f32 %h1, %f6;\n st.global.b16 [%rd1+40], %h1;\n\
        mov.f32 %f7, 0fFFC00001;\n abs.f32 %f8, %f7;\n st.global.f32 [%rd1+48], %f8;\n\
        neg.f32 %f9, %f8;\n st.global.f32 [%rd1+56], %f9;\n\
        mov.f32 %f10, 0f40000000;\n min.f32 %f11, %f7, %f10;\n st.global.f32 [%rd1+64], %f11;\n\
        max.f32 %f12, %f7, %f7;\n st.global.f32 [%rd1+72], %f12;\n\
        st.global.f32 [%rd1+80], %f7;\n\
        fma.rn.f32 %f13, %f3, %f4, %f10;\n st.global.f32 [%rd1+88], %f13;\n\
        cvt.f64.f32 %fd5, %f7;\n st.global.f64 [%rd1+96], %fd5;\n\
        add.f32 %f14, %f7, %f10;\n st.global.f32 [%rd1+104], %f14;\n\
        mov.f64 %fd6, 0dFFF8000000000001;\n abs.f64 %fd7, %fd6;\n st.global.f64 [%rd1+112], %fd7;\n\
        cvt.rn.f32.f64 %f15, %fd6;\n st.global.f32 [%rd1+120], %f15;\n";
    let o = run_u64(body, "", &[0; 32]);
    assert_eq!(o[0] as u32, 0x7fff_ffff, "sqrt(-1)");
    assert_eq!(o[1] as u32, 0x7fff_ffff, "0 * inf");
    assert_eq!(o[2] as u32, 0x7fff_ffff, "inf - inf");
    assert_eq!(o[3], 0x7fff_ffff_ffff_ffff, "inf - inf (f64)");
    assert_eq!(o[4], 0x7fff_ffff_ffff_ffff, "sqrt(-1) (f64)");
    assert_eq!(o[5] as u16, 0x7fff, "cvt.rn.f16.f32(NaN)");
    assert_eq!(o[6] as u32, 0x7fc0_0001, "abs keeps the payload");
    assert_eq!(o[7] as u32, 0xffc0_0001, "neg keeps the payload");
    assert_eq!(f32::from_bits(o[8] as u32), 2.0, "min returns the number");
    assert_eq!(o[9] as u32, 0x7fff_ffff, "max of two NaNs");
    assert_eq!(o[10] as u32, 0xffc0_0001, "a store keeps the bits");
    assert_eq!(o[11] as u32, 0x7fff_ffff, "fma(inf, 0, 2)");
    assert_eq!(o[12], 0x7fff_ffff_ffff_ffff, "cvt.f64.f32(NaN)");
    assert_eq!(o[13] as u32, 0x7fff_ffff, "NaN + 2");
    assert_eq!(o[14], 0x7ff8_0000_0000_0001, "abs.f64 keeps the payload");
    assert_eq!(o[15] as u32, 0x7fff_ffff, "cvt.rn.f32.f64(NaN)");
}

#[test]
fn atom_add_f32_flushes_subnormals() {
    let sub = 1e-40f32.to_bits() as u64; // subnormal
    let body = "\
        mov.f32 %f1, 0f000116C2;\n atom.global.add.f32 %f2, [%rd1], %f1;\n\
        st.global.f32 [%rd1+8], %f2;\n\
        mov.f32 %f3, 0f3F800000;\n atom.global.add.f32 %f4, [%rd1+16], %f3;\n\
        neg.f32 %f5, %f1;\n red.global.add.f32 [%rd1+24], %f5;\n\
        mov.f64 %fd1, 0d0000000000000001;\n atom.global.add.f64 %fd2, [%rd1+32], %fd1;\n\
        mov.u32 %r1, sh;\n atom.shared.add.f32 %f6, [%r1], %f1;\n ld.shared.f32 %f7, [%r1];\n\
        st.global.f32 [%rd1+40], %f7;\n";
    let mut input = [0u64; 32];
    input[1] = 0xdead;
    input[2] = sub; // subnormal + 1.0: the subnormal input is flushed
    input[3] = 0x8000_0000; // -0 + -subnormal: -0
    let text_regs = "";
    let o = {
        // A shared variable for the shared-memory atomic.
        let text = format!(
            "{HEAD}.shared .align 4 .f32 sh;\n.visible .entry k(.param .u64 buf)\n{{\n .reg .b32 %r<4>;\n \
             .reg .f32 %f<16>;\n .reg .b64 %rd<4>;\n .reg .f64 %fd<4>;\n{text_regs}\n \
             ld.param.u64 %rd1, [buf];\n{body}\n ret;\n}}"
        );
        let m = load(&text);
        let mut mem = Mem::new();
        let b = mem.alloc(32 * 8);
        mem.write(b, &input);
        go_ok(
            &m,
            &mem,
            &[],
            "k",
            &launch1(1, 1),
            &Params::default().u64(mem.addr(b)),
        );
        mem.read::<u64>(b)
    };
    assert_eq!(o[0] as u32, 0, "0 + subnormal = +0 (flushed)");
    assert_eq!(o[1] as u32, 0, "old value returned");
    assert_eq!(o[2] as u32, 0x3f80_0000, "subnormal old value flushed: 1.0");
    assert_eq!(o[3] as u32, 0x8000_0000, "sign-preserving zero");
    assert_eq!(o[4], 1, "atom.add.f64 does not flush");
    assert_eq!(o[5] as u32, 0, "shared atom.add.f32 flushes too");
}

#[test]
fn printf_h_and_hh_length_modifiers() {
    // "%hhd %hd %hu %hhx\n"
    let fmt: Vec<String> = b"%hhd %hd %hu %hhx|%hhu\n\0"
        .iter()
        .map(|b| b.to_string())
        .collect();
    let text = format!(
        "{HEAD}.extern .func (.param .b32 func_retval0) vprintf(.param .b64 p0, .param .b64 p1);\n\
         .global .align 1 .b8 fmt[{}] = {{{}}};\n\
         .visible .entry k()\n{{\n .local .align 8 .b8 depot[24];\n .reg .b32 %r<4>;\n .reg .b64 %rd<6>;\n\
          mov.u64 %rd1, depot;\n cvta.local.u64 %rd2, %rd1;\n\
          st.local.u32 [%rd1], 300;\n st.local.u32 [%rd1+4], 70000;\n st.local.u32 [%rd1+8], 70000;\n\
          st.local.u32 [%rd1+12], 0x1ff;\n st.local.u32 [%rd1+16], -1;\n\
          mov.u64 %rd3, fmt;\n cvta.global.u64 %rd4, %rd3;\n\
          {{\n .param .b64 a0;\n st.param.b64 [a0], %rd4;\n .param .b64 a1;\n st.param.b64 [a1], %rd2;\n\
          .param .b32 r0;\n call.uni (r0), vprintf, (a0, a1);\n }}\n ret;\n}}",
        fmt.len(),
        fmt.join(",")
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let out = go_ok(&m, &mem, &g, "k", &launch1(1, 1), &Params::default());
    assert_eq!(out.printf, "44 4464 4464 ff|255\n");
}

#[test]
fn saturating_add_sub_dp4a_dp2a_and_set() {
    let body = "\
        mov.u32 %r1, 2147483647;\n mov.u32 %r2, 1;\n add.sat.s32 %r3, %r1, %r2;\n st.global.u32 [%rd1], %r3;\n\
        mov.u32 %r4, -2147483648;\n sub.sat.s32 %r5, %r4, %r2;\n st.global.u32 [%rd1+8], %r5;\n\
        add.sat.s32 %r5, %r4, -5;\n st.global.u32 [%rd1+16], %r5;\n\
        sub.sat.s32 %r5, 100, 300;\n st.global.u32 [%rd1+24], %r5;\n\
        mov.u32 %r6, 0x80ff7f02;\n mov.u32 %r7, 0x03fe81ff;\n\
        dp4a.s32.s32 %r8, %r6, %r7, 7;\n st.global.u32 [%rd1+32], %r8;\n\
        dp4a.u32.u32 %r8, %r6, %r7, 7;\n st.global.u32 [%rd1+40], %r8;\n\
        dp4a.s32.u32 %r8, %r6, %r7, 7;\n st.global.u32 [%rd1+48], %r8;\n\
        dp2a.lo.s32.s32 %r8, %r6, %r7, 3;\n st.global.u32 [%rd1+56], %r8;\n\
        dp2a.hi.u32.u32 %r8, %r6, %r7, 3;\n st.global.u32 [%rd1+64], %r8;\n\
        mov.f32 %f1, 0f3F800000;\n mov.f32 %f2, 0f40000000;\n\
        set.lt.u32.f32 %r9, %f1, %f2;\n st.global.u32 [%rd1+72], %r9;\n\
        set.gt.s32.s32 %r9, %r4, %r2;\n st.global.u32 [%rd1+80], %r9;\n\
        set.eq.f32.s32 %f3, %r2, 1;\n st.global.f32 [%rd1+88], %f3;\n\
        setp.eq.u32 %p1, %r2, 1;\n set.lt.and.u32.s32 %r9, %r4, %r2, !%p1;\n st.global.u32 [%rd1+96], %r9;\n\
        set.nan.u32.f32 %r9, %f1, %f2;\n st.global.u32 [%rd1+104], %r9;\n";
    let o = run_u64(body, "", &[0; 32]);
    let dp4 = |a: u32, b: u32, c: i64, sa: bool, sb: bool| -> u32 {
        let l = |v: u32, k: u32, s: bool| {
            let x = (v >> (8 * k)) & 0xff;
            if s { x as u8 as i8 as i64 } else { x as i64 }
        };
        (c + (0..4).map(|k| l(a, k, sa) * l(b, k, sb)).sum::<i64>()) as u32
    };
    let (a, b) = (0x80ff7f02u32, 0x03fe81ffu32);
    assert_eq!(o[0] as u32, i32::MAX as u32);
    assert_eq!(o[1] as u32, i32::MIN as u32);
    assert_eq!(o[2] as u32, i32::MIN as u32);
    assert_eq!(o[3] as u32 as i32, -200);
    assert_eq!(o[4] as u32, dp4(a, b, 7, true, true));
    assert_eq!(o[5] as u32, dp4(a, b, 7, false, false));
    assert_eq!(o[6] as u32, dp4(a, b, 7, true, false));
    // dp2a.lo: halves of a times bytes 0, 1 of b; .hi: bytes 2, 3.
    let lo = 3i64
        + (0x7f02u16 as i16 as i64) * (0xffu8 as i8 as i64)
        + (0x80ffu16 as i16 as i64) * (0x81u8 as i8 as i64);
    assert_eq!(o[7] as u32, lo as u32);
    let hi = 3u64 + 0x7f02 * 0xfe + 0x80ff * 0x03;
    assert_eq!(o[8] as u32, hi as u32);
    assert_eq!(o[9] as u32, 0xffff_ffff);
    assert_eq!(o[10] as u32, 0);
    assert_eq!(o[11] as u32, 0x3f80_0000);
    assert_eq!(o[12] as u32, 0, "lt and !p1");
    assert_eq!(o[13] as u32, 0);
}

#[test]
fn atom_cas_b16_and_match_sync() {
    let text = format!(
        "{HEAD}.shared .align 2 .b8 sh[8];\n\
         .visible .entry k(.param .u64 us, .param .u64 out)\n{{\n .reg .pred %p<3>;\n .reg .b16 %rs<4>;\n\
         .reg .b32 %r<12>;\n .reg .b64 %rd<12>;\n\
         ld.param.u64 %rd1, [us];\n ld.param.u64 %rd2, [out];\n mov.u32 %r1, %tid.x;\n\
         mul.wide.u32 %rd3, %r1, 4;\n add.s64 %rd4, %rd2, %rd3;\n\
         setp.ne.u32 %p1, %r1, 0;\n @%p1 bra SKIP;\n\
         atom.global.cas.b16 %rs1, [%rd1+2], 5, 9;\n atom.global.cas.b16 %rs2, [%rd1+4], 5, 9;\n\
         cvt.u32.u16 %r2, %rs1;\n cvt.u32.u16 %r3, %rs2;\n st.global.u32 [%rd2+512], %r2;\n\
         st.global.u32 [%rd2+516], %r3;\n\
         mov.u32 %r4, sh;\n st.shared.u16 [%r4+2], 0xabcd;\n atom.shared.cas.b16 %rs3, [%r4+2], 0xabcd, 0x1234;\n\
         ld.shared.u16 %rs3, [%r4+2];\n cvt.u32.u16 %r2, %rs3;\n st.global.u32 [%rd2+520], %r2;\n\
         SKIP:\n\
         and.b32 %r5, %r1, 3;\n match.any.sync.b32 %r6, %r5, -1;\n st.global.u32 [%rd4], %r6;\n\
         shr.u32 %r7, %r1, 4;\n match.all.sync.b32 %r8|%p2, %r7, 65535;\n selp.u32 %r9, 1, 0, %p2;\n\
         setp.lt.u32 %p1, %r1, 16;\n @!%p1 bra DONE;\n\
         st.global.u32 [%rd4+128], %r8;\n st.global.u32 [%rd4+256], %r9;\n\
         match.all.sync.b32 %r8|%p2, %r1, 65535;\n selp.u32 %r9, 1, 0, %p2;\n add.u32 %r8, %r8, %r9;\n\
         st.global.u32 [%rd4+384], %r8;\n\
         cvt.u64.u32 %rd5, %r5;\n shl.b64 %rd5, %rd5, 40;\n match.any.sync.b64 %r10, %rd5, 65535;\n\
         st.global.u32 [%rd4+448], %r10;\n\
         DONE:\n ret;\n}}"
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let us = mem.alloc(8);
    mem.write(us, &[1u16, 5, 6, 7]);
    let out = mem.alloc(528);
    go_ok(
        &m,
        &mem,
        &[],
        "k",
        &launch1(1, 32),
        &Params::default().u64(mem.addr(us)).u64(mem.addr(out)),
    );
    assert_eq!(
        mem.read::<u16>(us),
        [1, 9, 6, 7],
        "only the half-word CAS'd"
    );
    let o = mem.read::<u32>(out);
    assert_eq!((o[128], o[129], o[130]), (5, 6, 0x1234));
    for t in 0..32 {
        assert_eq!(o[t], 0x1111_1111 << (t % 4), "match.any lane {t}");
    }
    for t in 0..16 {
        assert_eq!((o[32 + t], o[64 + t]), (0xffff, 1), "match.all lane {t}");
        assert_eq!(o[96 + t], 0, "match.all of different values");
        assert_eq!(o[112 + t], 0x1111 << (t % 4), "match.any.b64 lane {t}");
    }
}

/// NVRTC's PTX for these operations (fixtures/review.cu) loads and runs.
#[test]
fn nvrtc_review_kernel() {
    let m = load(&fixture("review", include_str!("../fixtures/review.ptx")));
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let input: Vec<i32> = (0..64u32)
        .map(|t| (t.wrapping_mul(0x0102_0304) ^ 0x80ff_7f01 ^ (t << 30)) as i32)
        .collect();
    let (o, i, us, f, u) = (
        mem.alloc(256 * 4),
        mem.alloc(64 * 4),
        mem.alloc(8),
        mem.alloc(128 * 4),
        mem.alloc(4),
    );
    mem.write(i, &input);
    mem.write(us, &[0u16, 5, 0, 0]);
    let p = Params::default()
        .u64(mem.addr(o))
        .u64(mem.addr(i))
        .u64(mem.addr(us))
        .u64(mem.addr(f))
        .u64(mem.addr(u));
    go_ok(&m, &mem, &g, "ops", &launch1(1, 32), &p);
    let o = mem.read::<i32>(o);
    let f = mem.read::<f32>(f);
    assert_eq!(mem.read::<u16>(us), [0, 9, 0, 0]);
    let by = |v: i32, k: u32, s: bool| {
        let x = ((v as u32) >> (8 * k)) & 0xff;
        if s { x as u8 as i8 as i64 } else { x as i64 }
    };
    // Round toward +inf / -inf / zero, by exact comparison in i128.
    let round = |v: i128, up: bool| -> f32 {
        let r = v as f64 as f32; // |v| < 2^34: exact in f64
        if (r as i128) < v && up {
            r.next_up()
        } else if (r as i128) > v && !up {
            r.next_down()
        } else {
            r
        }
    };
    for t in 0..32 {
        let (a, b) = (input[t], input[t + 32]);
        let d4 = |s: bool| (7 + (0..4).map(|k| by(a, k, s) * by(b, k, s)).sum::<i64>()) as i32;
        assert_eq!(o[t], d4(true));
        assert_eq!(o[t + 32], d4(false));
        let h = |k: u32| (a as u32 >> (16 * k)) as u16;
        let lo = 3
            + (0..2)
                .map(|k| h(k) as i16 as i64 * by(b, k, true))
                .sum::<i64>();
        assert_eq!(o[t + 64], lo as i32);
        let hi = 3
            + (0..2)
                .map(|k| h(k) as i64 * by(b, k + 2, false))
                .sum::<i64>();
        assert_eq!(o[t + 96], hi as i32);
        let any: u32 = (0..32)
            .filter(|&j| input[j] & 3 == a & 3)
            .map(|j| 1 << j)
            .sum();
        assert_eq!(o[t + 128] as u32, any);
        let all_same = (0..32).all(|j| input[j + 32] & 1 == b & 1);
        assert_eq!(o[t + 160] as u32, if all_same { !0 } else { 0 });
        assert_eq!(o[t + 192], all_same as i32);
        let any1: u32 = (0..32)
            .filter(|&j| input[j] & 1 == a & 1)
            .map(|j| 1 << j)
            .sum();
        assert_eq!(o[t + 224] as u32, any1);
        assert_eq!(f[t], round(a as i128, true), "__int2float_ru({a})");
        assert_eq!(f[t + 32], round(a as i128 * 3, false), "__ll2float_rd");
        let big = (b as u32 as u128) * 0x1_0000_0001;
        let rz = {
            let r = big as f32; // nearest; correct toward zero below
            if r as u128 > big { r.next_down() } else { r }
        };
        assert_eq!(f[t + 64], rz, "__ull2float_rz({big})");
        let exact = f[t] as f64 * f[t + 32] as f64 + 1e-8f32 as f64; // exact enough here
        assert!(f[t + 96] as f64 >= exact, "__fmaf_ru");
    }
}
