//! Hand-written PTX exercising instruction semantics one by one (single thread), checked
//! against values computed on the host.

mod common;
use common::*;

/// Runs `body` in a one-thread kernel with `%rd9` = output pointer; each `st.global` writes
/// to successive u64 slots via `out(k)`.
fn run_body(body: &str, slots: usize, dynamic_shared: u32) -> Vec<u64> {
    let text = format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .extern .shared .align 16 .b8 dyn[];\n\
         .visible .entry k(.param .u64 out, .param .align 8 .b8 blob[16])\n{{\n\
         .reg .pred %p<8>;\n .reg .b16 %h<8>;\n .reg .b32 %r<40>;\n .reg .f32 %f<20>;\n .reg .b64 %rd<40>;\n .reg .f64 %fd<10>;\n\
         ld.param.u64 %rd9, [out];\n{body}\n ret;\n}}\n"
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let b = mem.alloc(slots * 8);
    let p = Params::default()
        .u64(mem.addr(b))
        .u64(0x1122_3344_5566_7788)
        .u64(42);
    let l = Launch {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        dynamic_shared,
        workers: 1,
        synccheck: false,
        racecheck: false,
    };
    go_ok(&m, &mem, &[], "k", &l, &p);
    mem.read(b)
}

#[test]
fn integer_instructions() {
    let body = "
        mov.u32 %r1, 0xfffffff0;  mov.u32 %r2, 7;
        mul.hi.u32 %r3, %r1, %r2;        st.global.u32 [%rd9], %r3;
        mul.hi.s32 %r3, %r1, %r2;        st.global.u32 [%rd9+8], %r3;
        mul24.lo.u32 %r3, %r1, %r2;      st.global.u32 [%rd9+16], %r3;
        bfe.u32 %r3, %r1, 4, 8;          st.global.u32 [%rd9+24], %r3;
        bfe.s32 %r3, %r1, 28, 8;         st.global.u32 [%rd9+32], %r3;
        bfi.b32 %r3, %r2, %r1, 8, 4;     st.global.u32 [%rd9+40], %r3;
        lop3.b32 %r3, %r1, %r2, 0x0ff0, 0xE8; st.global.u32 [%rd9+48], %r3;
        prmt.b32 %r3, 0x11223344, 0x8899aabb, 0x7531; st.global.u32 [%rd9+56], %r3;
        prmt.b32 %r3, 0x11223344, 0x8899aabb, 0x000c; st.global.u32 [%rd9+64], %r3;
        add.cc.u32 %r4, 0xffffffff, 1;   addc.cc.u32 %r5, 0, 0;   addc.u32 %r6, 5, 0;
        st.global.u32 [%rd9+72], %r4;    st.global.u32 [%rd9+76], %r5;  st.global.u32 [%rd9+80], %r6;
        sub.cc.u32 %r4, 0, 1;            subc.u32 %r5, 10, 0;     st.global.u32 [%rd9+88], %r5;
        shr.s32 %r3, %r1, 40;            st.global.u32 [%rd9+96], %r3;
        shl.b32 %r3, %r2, 32;            st.global.u32 [%rd9+104], %r3;
        div.s32 %r3, -7, 2;              st.global.u32 [%rd9+112], %r3;
        rem.s32 %r3, -7, 2;              st.global.u32 [%rd9+120], %r3;
        div.u32 %r3, 7, 0;               st.global.u32 [%rd9+128], %r3;
        bfind.u32 %r3, 0x00010000;       st.global.u32 [%rd9+136], %r3;
        bfind.s32 %r3, -1;               st.global.u32 [%rd9+144], %r3;
        cvt.s64.s32 %rd1, %r1;           st.global.u64 [%rd9+152], %rd1;
        cvt.u16.u32 %h1, %r1;  cvt.s32.s16 %r3, %h1;  st.global.u32 [%rd9+160], %r3;
        cvt.sat.s8.s32 %r3, 300;         st.global.u32 [%rd9+168], %r3;
        mad.wide.s32 %rd2, %r1, 3, 100;  st.global.u64 [%rd9+176], %rd2;
        mul.hi.u64 %rd3, -1, -1;         st.global.u64 [%rd9+184], %rd3;
        shf.r.clamp.b32 %r3, 0x12345678, 0x9abcdef0, 40; st.global.u32 [%rd9+192], %r3;
        ld.param.v2.u32 {%r7, %r8}, [blob]; st.global.u32 [%rd9+200], %r8;
        mov.b64 %rd4, {%r2, %r1};        st.global.u64 [%rd9+208], %rd4;
        mov.b64 {%r10, %r11}, %rd4;      st.global.u32 [%rd9+216], %r11;
        min.s32 %r3, %r1, 3;             st.global.u32 [%rd9+224], %r3;
        max.u32 %r3, %r1, 3;             st.global.u32 [%rd9+232], %r3;
        abs.s32 %r3, %r1;                st.global.u32 [%rd9+240], %r3;
        popc.b64 %r3, -1;                st.global.u32 [%rd9+248], %r3;
    ";
    let o = run_body(body, 32, 0);
    let a = 0xffff_fff0u32;
    assert_eq!(o[0] as u32, ((a as u64 * 7) >> 32) as u32);
    assert_eq!(o[1] as u32, (((a as i32 as i64) * 7) >> 32) as u32);
    assert_eq!(o[2] as u32, (0xff_fff0u32 * 7));
    assert_eq!(o[3] as u32, 0xff);
    assert_eq!(o[4] as u32, 0xffff_ffff);
    assert_eq!(o[5] as u32, 0xffff_f7f0);
    let lop = |x: u32, y: u32, z: u32| (x & y) | (x & z) | (y & z); // 0xE8 = majority
    assert_eq!(o[6] as u32, lop(a, 7, 0x0ff0));
    assert_eq!(o[7] as u32, 0x88aa_1133);
    assert_eq!(o[8] as u32, 0x4444_44ff);
    assert_eq!((o[9] as u32, (o[9] >> 32) as u32, o[10] as u32), (0, 1, 5));
    assert_eq!(o[11] as u32, 9);
    assert_eq!(o[12] as u32, 0xffff_ffff);
    assert_eq!(o[13] as u32, 0);
    assert_eq!(o[14] as u32, -3i32 as u32);
    assert_eq!(o[15] as u32, -1i32 as u32);
    assert_eq!(o[16] as u32, 0xffff_ffff);
    assert_eq!(o[17] as u32, 16);
    assert_eq!(o[18] as u32, 0xffff_ffff);
    assert_eq!(o[19], a as i32 as i64 as u64);
    assert_eq!(o[20] as u32, -16i32 as u32);
    assert_eq!(o[21] as u32, 127);
    assert_eq!(o[22], (a as i32 as i64 * 3 + 100) as u64);
    assert_eq!(o[23], u64::MAX - 1);
    assert_eq!(o[24] as u32, 0x9abc_def0);
    assert_eq!(o[25] as u32, 0x1122_3344);
    assert_eq!(o[26], ((a as u64) << 32) | 7);
    assert_eq!(o[27] as u32, a);
    assert_eq!(o[28] as u32, -16i32 as u32);
    assert_eq!(o[29] as u32, a);
    assert_eq!(o[30] as u32, 16);
    assert_eq!(o[31] as u32, 64);
}

#[test]
fn float_instructions_and_rounding() {
    let body = "
        mov.f32 %f1, 0f3F800000;  mov.f32 %f2, 0f33800000;
        add.rz.f32 %f3, %f1, %f2;       st.global.f32 [%rd9], %f3;
        add.rp.f32 %f3, %f1, %f2;       st.global.f32 [%rd9+8], %f3;
        add.rn.f32 %f3, %f1, %f2;       st.global.f32 [%rd9+16], %f3;
        div.rm.f32 %f3, 1.0, 3.0;       st.global.f32 [%rd9+24], %f3;
        div.rp.f32 %f3, 1.0, 3.0;       st.global.f32 [%rd9+32], %f3;
        cvt.rni.s32.f32 %r1, 2.5;       st.global.u32 [%rd9+40], %r1;
        cvt.rmi.s32.f32 %r1, -2.5;      st.global.u32 [%rd9+48], %r1;
        cvt.rzi.u32.f32 %r1, -7.0;      st.global.u32 [%rd9+56], %r1;
        cvt.rzi.s32.f64 %r1, 0d41F0000000000000; st.global.u32 [%rd9+64], %r1;
        cvt.rn.f16.f32 %h1, 0f3FC00000; st.global.u16 [%rd9+72], %h1;
        cvt.f32.f16 %f4, %h1;           st.global.f32 [%rd9+80], %f4;
        cvt.sat.f32.f32 %f4, 0f40000000; st.global.f32 [%rd9+88], %f4;
        setp.ltu.f32 %p1, 0f7FC00000, 1.0;  selp.u32 %r2, 1, 0, %p1;  st.global.u32 [%rd9+96], %r2;
        setp.lt.f32 %p1, 0f7FC00000, 1.0;   selp.u32 %r2, 1, 0, %p1;  st.global.u32 [%rd9+104], %r2;
        setp.nan.f32 %p1, 0f7FC00000, 1.0;  setp.gt.and.f32 %p2|%p3, 2.0, 1.0, %p1;
        selp.u32 %r2, 1, 0, %p2;  selp.u32 %r3, 1, 0, %p3;  st.global.u32 [%rd9+112], %r2;  st.global.u32 [%rd9+116], %r3;
        testp.infinite.f32 %p1, 0f7F800000; selp.u32 %r2, 1, 0, %p1;  st.global.u32 [%rd9+120], %r2;
        copysign.f32 %f5, 0fBF800000, 0f40400000; st.global.f32 [%rd9+128], %f5;
        slct.f32.s32 %f6, 1.0, 2.0, -5;  st.global.f32 [%rd9+136], %f6;
        fma.rn.f64 %fd1, 0d3FF0000000000001, 0d3FF0000000000001, 0dBFF0000000000000; st.global.f64 [%rd9+144], %fd1;
        sqrt.rz.f64 %fd2, 0d4000000000000000; st.global.f64 [%rd9+152], %fd2;
        cvt.rn.f32.f64 %f7, 0d3FB999999999999A; st.global.f32 [%rd9+160], %f7;
        cvt.rz.f32.f64 %f7, 0d3FB999999999999A; st.global.f32 [%rd9+168], %f7;
        max.f32 %f8, 0f7FC00000, 3.0;   st.global.f32 [%rd9+176], %f8;
        rcp.rn.f64 %fd3, 0d4008000000000000; st.global.f64 [%rd9+184], %fd3;
        cvt.rn.f32.u64 %f9, 0xFFFFFFFFFFFFFFFF; st.global.f32 [%rd9+192], %f9;
        neg.f32 %f10, 0f00000000;       st.global.f32 [%rd9+200], %f10;
        mul.rz.f64 %fd4, 0d3FB999999999999A, 0d4024000000000000; st.global.f64 [%rd9+208], %fd4;
        sub.rm.f32 %f11, 0f00000000, 0f00000000; st.global.f32 [%rd9+216], %f11;
        cvt.rn.f16.f32 %h2, 0f3FC00000;  add.f16 %h3, %h2, %h2;  mul.f16 %h4, %h3, %h2;
        fma.rn.f16 %h5, %h4, %h2, %h2;   neg.f16 %h6, %h5;
        st.global.u16 [%rd9+224], %h3;   st.global.u16 [%rd9+226], %h4;  st.global.u16 [%rd9+228], %h5;  st.global.u16 [%rd9+230], %h6;
        setp.gt.f16 %p4, %h5, %h4;       selp.u32 %r12, 1, 0, %p4;  st.global.u32 [%rd9+232], %r12;
        cvt.rn.f16.f32 %h7, 0f477FF000;  st.global.u16 [%rd9+236], %h7;
    ";
    let o = run_body(body, 30, 0);
    let f = |k: usize| f32::from_bits(o[k] as u32);
    let one_plus = 1.0f32 + f32::EPSILON;
    assert_eq!(f(0), 1.0);
    assert_eq!(f(1), one_plus);
    assert_eq!(f(2), 1.0);
    assert!((f(3) as f64) < 1.0 / 3.0 && (f(4) as f64) > 1.0 / 3.0 && f(4) == f(3).next_up());
    assert_eq!(o[5] as u32 as i32, 2);
    assert_eq!(o[6] as u32 as i32, -3);
    assert_eq!(o[7] as u32, 0);
    assert_eq!(o[8] as u32 as i32, i32::MAX);
    assert_eq!(o[9] as u16, 0x3e00);
    assert_eq!(f(10), 1.5);
    assert_eq!(f(11), 1.0);
    assert_eq!((o[12] as u32, o[13] as u32), (1, 0));
    assert_eq!((o[14] as u32, (o[14] >> 32) as u32), (1, 0));
    assert_eq!(o[15] as u32, 1);
    assert_eq!(f(16), -3.0);
    assert_eq!(f(17), 2.0);
    let e = f64::from_bits(0x3FF0000000000001);
    assert_eq!(f64::from_bits(o[18]), e.mul_add(e, -1.0));
    assert_eq!(
        f64::from_bits(o[19]),
        2f64.sqrt()
            .next_down()
            .max(if 2f64.sqrt() * 2f64.sqrt() > 2.0 {
                2f64.sqrt().next_down()
            } else {
                2f64.sqrt()
            })
    );
    assert_eq!(f(20), 0.1f64 as f32);
    assert_eq!(
        f(21),
        if (0.1f64 as f32) as f64 > 0.1 {
            (0.1f64 as f32).next_down()
        } else {
            0.1f64 as f32
        }
    );
    assert_eq!(f(22), 3.0);
    assert_eq!(f64::from_bits(o[23]), 1.0 / 3.0);
    assert_eq!(f(24), u64::MAX as f32);
    assert_eq!(o[25] as u32, 0x8000_0000);
    let p = 0.1f64 * 10.0;
    let exact_below = 0.1f64.mul_add(10.0, -p) < 0.0;
    assert_eq!(
        f64::from_bits(o[26]),
        if exact_below { p.next_down() } else { p }
    );
    assert_eq!(o[27] as u32, 0x8000_0000, "0 - 0 rounded down is -0");
    // f16: 1.5 + 1.5 = 3 (0x4200), 3 * 1.5 = 4.5 (0x4480), 4.5 * 1.5 + 1.5 = 8.25 (0x4820).
    let h = |k: u32| ((o[28] >> (16 * k)) & 0xffff) as u16;
    assert_eq!((h(0), h(1), h(2), h(3)), (0x4200, 0x4480, 0x4820, 0xc820));
    assert_eq!(o[29] as u32, 1);
    assert_eq!((o[29] >> 32) as u16, 0x7c00, "65520 rounds to f16 infinity");
}

#[test]
fn generic_addressing_and_dynamic_shared_offsets() {
    let body = "
        mov.u64 %rd1, dyn;               cvta.shared.u64 %rd2, %rd1;
        st.u32 [%rd2+8], 77;             ld.shared.u32 %r1, [dyn+8];      st.global.u32 [%rd9], %r1;
        isspacep.shared %p1, %rd2;       selp.u32 %r2, 1, 0, %p1;          st.global.u32 [%rd9+8], %r2;
        isspacep.global %p1, %rd9;       selp.u32 %r2, 1, 0, %p1;          st.global.u32 [%rd9+16], %r2;
        cvta.to.shared.u64 %rd3, %rd2;   st.global.u64 [%rd9+24], %rd3;
        mov.u64 %rd4, blob;              cvta.param.u64 %rd5, %rd4;        ld.u64 %rd6, [%rd5+8];  st.global.u64 [%rd9+32], %rd6;
        mov.u32 %r3, %dynamic_smem_size; st.global.u32 [%rd9+40], %r3;
        atom.shared.add.u32 %r4, [dyn+8], 3;  ld.shared.u32 %r5, [dyn+8];  st.global.u32 [%rd9+48], %r5;
        atom.add.u32 %r4, [%rd2+8], 1;   st.global.u32 [%rd9+56], %r4;
        mov.u32 %r6, %lanemask_lt;       st.global.u32 [%rd9+64], %r6;
        activemask.b32 %r7;              st.global.u32 [%rd9+72], %r7;
        vote.sync.uni.pred %p2, %p1, 1;  selp.u32 %r8, 1, 0, %p2;          st.global.u32 [%rd9+80], %r8;
        redux.sync.max.s32 %r9, -5, 1;   st.global.u32 [%rd9+88], %r9;
    ";
    let o = run_body(body, 12, 64);
    assert_eq!(o[0] as u32, 77);
    assert_eq!(o[1] as u32, 1);
    assert_eq!(o[2] as u32, 1);
    assert_eq!(
        o[3], 0,
        "dynamic shared starts at 0 when there is no static shared"
    );
    assert_eq!(o[4], 42);
    assert_eq!(o[5] as u32, 64);
    assert_eq!(o[6] as u32, 80);
    assert_eq!(o[7] as u32, 80);
    assert_eq!(o[8] as u32, 0);
    assert_eq!(o[9] as u32, 1);
    assert_eq!(o[10] as u32, 1);
    assert_eq!(o[11] as u32 as i32, -5);
}
