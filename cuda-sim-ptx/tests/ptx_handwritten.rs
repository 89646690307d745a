//! Hand-written PTX: the simulator's test kernels, the parameter-layout cases of the
//! simulator's own parser, rejections, faults, and the performance measurement.

mod common;
use common::*;
use cuda_sim_ptx::{Fault, LoadError, Module, Param};

const TEST_KERNELS: &str = include_str!("../../tests/kernels/test_kernels.ptx");

// Three layout tests, against this parser.

#[test]
fn reads_the_test_kernels() {
    let m = Module::parse(TEST_KERNELS).unwrap();
    let entries = &m.entries;
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["fill_u32", "add_u32", "copy_u32", "add_one", "spin"]
    );
    assert_eq!(entries[0].sizes(), [8, 4, 4]);
    assert_eq!(
        entries[2].params,
        [
            Param { offset: 0, size: 8 },
            Param { offset: 8, size: 8 },
            Param {
                offset: 16,
                size: 4
            }
        ]
    );
    assert_eq!(entries[3].param_bytes(), 12);
    assert_eq!(entries[4].param_bytes(), 8);
}

#[test]
fn aligns_parameters() {
    let text = ".version 7.0\n.visible .entry k(\n .param .u8 a,\n .param .u32 b,\n \
                .param .align 16 .b8 c[24],\n .param .u64 .ptr.global.align 4 d\n)\n{ ret; }";
    let m = Module::parse(text).unwrap();
    let layout: Vec<(usize, usize)> = m.entries[0]
        .params
        .iter()
        .map(|p| (p.offset, p.size))
        .collect();
    assert_eq!(layout, [(0, 1), (4, 4), (16, 24), (40, 8)]);
}

#[test]
fn refuses_what_is_not_ptx() {
    assert!(Module::parse("").is_err());
    assert!(Module::parse("\x7fELF binary").is_err());
    assert!(Module::parse(".version 7.0\n.target sm_52\n").is_err());
    assert!(Module::parse(".version 7.0\n.visible .entry k(.param .q32 x)\n{}").is_err());
    // An entry without `.visible` (internal linkage, as nvcc's template instances) is a
    // kernel all the same: the driver finds it by name (tests/ptx_matrix.rs runs one).
    let hidden = Module::parse(".version 7.0\n.entry hidden()\n{ ret; }").unwrap();
    assert_eq!(hidden.entries[0].name, "hidden");
    let empty = Module::parse(".version 7.0\n.visible .entry k()\n{ ret; }").unwrap();
    assert!(empty.entries[0].params.is_empty());
}

#[test]
fn runs_the_test_kernels() {
    let m = load(TEST_KERNELS);
    let mut mem = Mem::new();
    let n = 1000u32;
    let a = mem.alloc(n as usize * 4);
    let b = mem.alloc(n as usize * 4);
    let l = launch1(4, 256); // more threads than elements: the tail does nothing
    go_ok(
        &m,
        &mem,
        &[],
        "fill_u32",
        &l,
        &Params::default().u64(mem.addr(a)).u32(7).u32(n),
    );
    assert!(mem.read::<u32>(a).iter().all(|&v| v == 7));
    go_ok(
        &m,
        &mem,
        &[],
        "add_u32",
        &l,
        &Params::default().u64(mem.addr(a)).u32(5).u32(n),
    );
    assert!(mem.read::<u32>(a).iter().all(|&v| v == 12));
    let out = go_ok(
        &m,
        &mem,
        &[],
        "copy_u32",
        &l,
        &Params::default()
            .u64(mem.addr(b))
            .u64(mem.addr(a))
            .u32(n - 1),
    );
    let got: Vec<u32> = mem.read(b);
    assert!(got[..n as usize - 1].iter().all(|&v| v == 12) && got[n as usize - 1] == 0);
    assert_eq!(out.touched, [(a, false), (b, true)]);
    go_ok(
        &m,
        &mem,
        &[],
        "add_one",
        &l,
        &Params::default().u64(mem.addr(b)).u32(n),
    );
    let got: Vec<u32> = mem.read(b);
    assert!(got[..n as usize - 1].iter().all(|&v| v == 13) && got[n as usize - 1] == 1);
    let t = std::time::Instant::now();
    let out = go_ok(
        &m,
        &mem,
        &[],
        "spin",
        &launch1(2, 32),
        &Params::default().u64(200_000_000),
    );
    let dt = t.elapsed();
    println!("spin(200_000_000) on 64 threads: {dt:?}");
    assert!(out.touched.is_empty());
    assert!(dt.as_secs_f64() < 5.0);
}

#[test]
fn unsupported_instructions_are_named_at_load() {
    let text = ".version 7.0\n.target sm_52\n.address_size 64\n\
        .visible .entry k(.param .u64 t)\n{\n .reg .f32 %f<5>;\n .reg .b64 %rd<2>;\n\
        ld.param.u64 %rd1, [t];\n\
        tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f1, %f2}];\n ret;\n}\n";
    match Module::parse(text) {
        Err(LoadError::NotSupported(s)) => assert_eq!(s, "tex.2d.v4.f32.f32"),
        other => panic!("{other:?}"),
    }
    let text2 = text.replace(
        "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f1, %f2}]",
        "suld.b.2d.b32.trap {%f1}, [%rd1, {%f1, %f2}]",
    );
    match Module::parse(&text2) {
        Err(LoadError::NotSupported(s)) => assert_eq!(s, "suld.b.2d.b32.trap"),
        other => panic!("{other:?}"),
    }
    // An unknown modifier on a known instruction is rejected too.
    let text3 = text.replace(
        "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f1, %f2}]",
        "max.xorsign.abs.f32 %f1, %f2, %f3",
    );
    assert!(
        matches!(Module::parse(&text3), Err(LoadError::NotSupported(s)) if s == "max.xorsign.abs.f32")
    );
    let text4 = text.replace(
        "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f1, %f2}]",
        "bar.red.popc.u32 %f1, 0, %p1",
    );
    assert!(matches!(
        Module::parse(&text4),
        Err(LoadError::NotSupported(_))
    ));
}

#[test]
fn divergent_barrier_is_a_deadlock_and_trap_is_a_trap() {
    let text = ".version 7.0\n.target sm_52\n.address_size 64\n\
        .visible .entry k()\n{\n .reg .pred %p<2>;\n .reg .b32 %r<3>;\n\
        mov.u32 %r1, %tid.x;\n setp.eq.u32 %p1, %r1, 0;\n @%p1 bra WAIT;\n bar.sync 0;\n ret;\n\
        WAIT:\n bar.sync 1;\n ret;\n}\n\
        .visible .entry t()\n{\n .reg .pred %p<2>;\n .reg .b32 %r<3>;\n\
        mov.u32 %r1, %tid.x;\n setp.eq.u32 %p1, %r1, 5;\n @%p1 trap;\n ret;\n}\n";
    let m = load(text);
    let mem = Mem::new();
    let (f, _) = go(&m, &mem, &[], "k", &launch1(1, 64), &Params::default()).unwrap_err();
    assert!(matches!(f, Fault::Deadlock(_)), "{f:?}");
    let (f, _) = go(&m, &mem, &[], "t", &launch1(3, 64), &Params::default()).unwrap_err();
    assert_eq!(
        f,
        Fault::Trap {
            block: [0, 0, 0],
            thread: [5, 0, 0],
            pc_text: "@%p1 trap; (line 23)".into(),
        }
    );
    // With synccheck, the divergent barrier is named as such.
    let checked = Launch {
        synccheck: true,
        ..launch1(1, 64)
    };
    let (f, _) = go(&m, &mem, &[], "k", &checked, &Params::default()).unwrap_err();
    assert!(
        matches!(&f, Fault::BarrierDivergence { thread: [0, 0, 0], pc_text, .. } if pc_text.contains("bar.sync 1")),
        "{f:?}"
    );
}

#[test]
fn synccheck_follows_the_rules_of_sm_70_and_later() {
    let text = ".version 7.0\n.target sm_52\n.address_size 64\n\
        .visible .entry early()\n{\n .reg .pred %p<2>;\n .reg .b32 %r<3>;\n\
        mov.u32 %r1, %tid.x;\n setp.ge.u32 %p1, %r1, 16;\n @%p1 bra DONE;\n bar.sync 0;\n\
        DONE:\n ret;\n}\n\
        .visible .entry shfl(.param .u32 m)\n{\n .reg .b32 %r<4>;\n\
        ld.param.u32 %r3, [m];\n mov.u32 %r1, %tid.x;\n shfl.sync.bfly.b32 %r2, %r1, 1, 31, %r3;\n ret;\n}\n\
        .visible .entry own(.param .u32 m)\n{\n .reg .b32 %r<4>;\n\
        ld.param.u32 %r3, [m];\n bar.warp.sync %r3;\n ret;\n}\n\
        .visible .entry halves()\n{\n .reg .pred %p<2>;\n .reg .b32 %r<3>;\n\
        mov.u32 %r1, %tid.x;\n setp.ge.u32 %p1, %r1, 16;\n @%p1 bra HIGH;\n bar.warp.sync -1;\n ret;\n\
        HIGH:\n bar.warp.sync -1;\n ret;\n}\n\
        .visible .entry shfl_bar(.param .u32 split)\n{\n .reg .pred %p<2>;\n .reg .b32 %r<4>;\n\
        ld.param.u32 %r3, [split];\n mov.u32 %r1, %tid.x;\n setp.ge.u32 %p1, %r1, %r3;\n @%p1 bra WAIT;\n\
        shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;\n\
        WAIT:\n bar.sync 0;\n ret;\n}\n";
    let m = load(text);
    let mem = Mem::new();
    let checked = |threads| Launch {
        synccheck: true,
        ..launch1(1, threads)
    };
    let none = Params::default();
    // Threads 16..32 of the only warp exit before the barrier: it waits for the others only.
    go_ok(&m, &mem, &[], "early", &checked(32), &none);
    // A full mask in a block of 16 threads: the absent lanes are ignored.
    let full = Params::default().u32(u32::MAX);
    go_ok(&m, &mem, &[], "shfl", &checked(16), &full);
    // A lane outside its own mask.
    let (f, _) = go(
        &m,
        &mem,
        &[],
        "own",
        &checked(32),
        &Params::default().u32(0xffff_fffe),
    )
    .unwrap_err();
    assert!(
        matches!(&f, Fault::BadWarpMask { thread: [0, 0, 0], mask: 0xffff_fffe, detail, .. } if detail.contains("lane 0 is not in it")),
        "{f:?}"
    );
    go_ok(&m, &mem, &[], "own", &checked(32), &full);
    // Two bar.warp.sync instructions with the same mask synchronise with each other.
    go_ok(&m, &mem, &[], "halves", &checked(32), &none);
    go_ok(&m, &mem, &[], "halves", &launch1(1, 32), &none);
    // A shfl.sync naming lanes that wait at bar.sync: the warp cannot go on.
    let split = |n: u32| Params::default().u32(n);
    let (f, _) = go(&m, &mem, &[], "shfl_bar", &checked(32), &split(16)).unwrap_err();
    assert!(
        matches!(&f, Fault::BadWarpMask { mask: u32::MAX, detail, .. }
            if detail.contains("0xffff0000") && detail.contains("block barrier `bar.sync 0")),
        "{f:?}"
    );
    go_ok(&m, &mem, &[], "shfl_bar", &checked(32), &split(32));
    // Without synccheck it is a deadlock.
    let (f, _) = go(&m, &mem, &[], "shfl_bar", &launch1(1, 32), &split(16)).unwrap_err();
    assert!(matches!(f, Fault::Deadlock(_)), "{f:?}");
}

#[test]
fn shared_and_local_accesses_are_bounds_checked() {
    let text = ".version 7.0\n.target sm_52\n.address_size 64\n\
        .visible .entry k(.param .u32 off)\n{\n .shared .align 4 .b8 buf[64];\n .reg .b32 %r<4>;\n .reg .b64 %rd<4>;\n\
        ld.param.u32 %r1, [off];\n mov.u32 %r2, buf;\n add.s32 %r3, %r2, %r1;\n st.shared.u32 [%r3], %r1;\n\
        cvta.shared.u64 %rd1, buf;\n cvt.u64.u32 %rd2, %r1;\n add.s64 %rd3, %rd1, %rd2;\n ld.u32 %r3, [%rd3];\n ret;\n}\n";
    let m = load(text);
    assert_eq!(m.shared_static_bytes(0), 64);
    let mem = Mem::new();
    go_ok(
        &m,
        &mem,
        &[],
        "k",
        &launch1(1, 32),
        &Params::default().u32(60),
    );
    let (f, _) = go(
        &m,
        &mem,
        &[],
        "k",
        &launch1(1, 32),
        &Params::default().u32(64),
    )
    .unwrap_err();
    assert!(
        matches!(
            f,
            Fault::OutOfBounds {
                len: 4,
                write: true,
                addr: 64,
                ..
            }
        ),
        "{f:?}"
    );
    let (f, _) = go(
        &m,
        &mem,
        &[],
        "k",
        &launch1(1, 32),
        &Params::default().u32(2),
    )
    .unwrap_err();
    assert!(
        matches!(
            f,
            Fault::Misaligned {
                len: 4,
                write: true,
                addr: 2,
                ..
            }
        ),
        "misaligned: {f:?}"
    );
}

#[test]
fn performance_two_to_the_twenty_threads() {
    let m = load(&fixture("saxpy", include_str!("../fixtures/saxpy.ptx")));
    let mut mem = Mem::new();
    let n = 1usize << 20;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let (bx, by) = (mem.alloc(n * 4), mem.alloc(n * 4));
    mem.write(bx, &x);
    for workers in [1, 2] {
        mem.write(by, &vec![1.0f32; n]);
        let p = Params::default()
            .i32(n as i32)
            .f32(2.0)
            .u64(mem.addr(bx))
            .u64(mem.addr(by));
        let l = Launch {
            workers,
            synccheck: false,
            racecheck: false,
            ..launch1((n / 256) as u32, 256)
        };
        let t = std::time::Instant::now();
        go_ok(&m, &mem, &[], "saxpy", &l, &p);
        let dt = t.elapsed();
        println!("saxpy, 2^20 threads (4096 x 256), {workers} worker(s): {dt:?}");
        let y: Vec<f32> = mem.read(by);
        assert!(
            y.iter()
                .enumerate()
                .all(|(i, &v)| v == 2.0 * i as f32 + 1.0)
        );
        assert!(dt.as_secs_f64() < 30.0);
    }
}

#[test]
fn performance_reduction_with_barriers() {
    let m = load(&fixture("reduce", include_str!("../fixtures/reduce.ptx")));
    let mut mem = Mem::new();
    let n = 1usize << 20;
    let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let (bi, bo) = (mem.alloc(n * 4), mem.alloc(n / 256 * 4));
    mem.write(bi, &x);
    let p = Params::default()
        .u64(mem.addr(bi))
        .u64(mem.addr(bo))
        .u32(n as u32);
    let t = std::time::Instant::now();
    go_ok(
        &m,
        &mem,
        &[],
        "reduce_sum",
        &launch1((n / 256) as u32, 256),
        &p,
    );
    println!(
        "shared-memory reduction, 2^20 threads, 9 barriers each, 2 workers: {:?}",
        t.elapsed()
    );
    let o: Vec<f32> = mem.read(bo);
    assert!(
        o.iter()
            .enumerate()
            .all(|(b, &v)| v == x[b * 256..(b + 1) * 256].iter().sum::<f32>())
    );
}

#[test]
fn parse_never_panics_on_damaged_text() {
    let texts = [
        TEST_KERNELS,
        include_str!("../fixtures/printf.ptx"),
        include_str!("../fixtures/noinline.ptx"),
        include_str!("../fixtures/dmath.ptx"),
        include_str!("../fixtures/misc.ptx"),
    ];
    for text in texts {
        // Truncations.
        for cut in (0..text.len()).step_by(37) {
            let _ = Module::parse(&text[..cut]);
        }
        // Each line removed in turn, and each line duplicated.
        let lines: Vec<&str> = text.lines().collect();
        for k in 0..lines.len() {
            let mut v = lines.clone();
            v.remove(k);
            let _ = Module::parse(&v.join("\n"));
            let mut v = lines.clone();
            v.insert(k, lines[k]);
            let _ = Module::parse(&v.join("\n"));
        }
    }
}

#[test]
fn short_parameter_buffer_is_a_fault_not_a_panic() {
    let m = load(TEST_KERNELS);
    let mem = Mem::new();
    let args = cuda_sim_ptx::LaunchArgs {
        entry: 0,
        grid: [1, 1, 1],
        block: [4, 1, 1],
        dynamic_shared: 0,
        params: &[0u8; 4],
        globals: &[],
        workers: 1,
        synccheck: false,
        racecheck: false,
    };
    let (f, _) = cuda_sim_ptx::run(&m, &mem, &args).unwrap_err();
    assert!(
        matches!(f, Fault::OutOfBounds { write: false, .. }),
        "{f:?}"
    );
}

#[test]
fn a_thread_spinning_on_shared_memory_does_not_starve_the_writer() {
    // Thread 0 waits (no barrier) until thread 33 sets a shared flag.
    let text = ".version 7.0\n.target sm_52\n.address_size 64\n\
        .visible .entry k(.param .u64 out)\n{\n .shared .align 4 .b32 flag;\n .reg .pred %p<3>;\n .reg .b32 %r<4>;\n .reg .b64 %rd<3>;\n\
        mov.u32 %r1, %tid.x;\n setp.eq.u32 %p1, %r1, 33;\n @%p1 st.volatile.shared.u32 [flag], 5;\n\
        setp.ne.u32 %p2, %r1, 0;\n @%p2 bra DONE;\n\
        SPIN:\n ld.volatile.shared.u32 %r2, [flag];\n setp.eq.u32 %p1, %r2, 0;\n @%p1 bra SPIN;\n\
        ld.param.u64 %rd1, [out];\n st.global.u32 [%rd1], %r2;\n DONE:\n ret;\n}\n";
    let m = load(text);
    let mut mem = Mem::new();
    let b = mem.alloc(4);
    go_ok(
        &m,
        &mem,
        &[],
        "k",
        &launch1(1, 64),
        &Params::default().u64(mem.addr(b)),
    );
    assert_eq!(mem.read::<u32>(b), [5]);
}

/// `cudaGraphSetConditional(handle, value)` (an external function NVRTC leaves to the driver)
/// is reported in the outcome: by block, then by thread, in each thread's order.
#[test]
fn conditional_sets_are_reported_in_block_and_thread_order() {
    let text = r#"
.version 8.0
.target sm_90
.address_size 64
.extern .func cudaGraphSetConditional
(
	.param .b64 cudaGraphSetConditional_param_0,
	.param .b32 cudaGraphSetConditional_param_1
)
;
.visible .entry set(.param .u64 set_param_0)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [set_param_0];
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %tid.x;
	mad.lo.s32 %r3, %r1, 10, %r2;
	{
	.param .b64 param0;
	st.param.b64 [param0+0], %rd1;
	.param .b32 param1;
	st.param.b32 [param1+0], %r3;
	call.uni cudaGraphSetConditional, (param0, param1);
	}
	ret;
}
"#;
    let m = load(text);
    let mem = Mem::new();
    for workers in [1, 4] {
        let launch = Launch {
            workers,
            synccheck: false,
            racecheck: false,
            ..launch1(3, 2)
        };
        let outcome = go_ok(
            &m,
            &mem,
            &[],
            "set",
            &launch,
            &Params::default().u64(0xc0de),
        );
        assert_eq!(
            outcome.conditional_sets,
            [
                (0xc0de, 0),
                (0xc0de, 1),
                (0xc0de, 10),
                (0xc0de, 11),
                (0xc0de, 20),
                (0xc0de, 21)
            ]
        );
    }
}

#[test]
fn racecheck_takes_fences_and_strong_accesses_as_synchronisation() {
    // Thread 0 stores data, then raises a flag; thread 32 (another warp) spins on the flag,
    // then reads the data. With a fence and volatile flag accesses it is a correct
    // message-passing protocol; with plain accesses and no fence both words race.
    let kernel = |name: &str, fence: &str, flag: &str| {
        format!(
            ".visible .entry {name}()\n{{\n .shared .align 4 .b32 data;\n .shared .align 4 .b32 flag;\n\
             .reg .pred %p<3>;\n .reg .b32 %r<4>;\n\
             mov.u32 %r1, %tid.x;\n setp.eq.u32 %p1, %r1, 0;\n @%p1 bra SEND;\n\
             setp.ne.u32 %p2, %r1, 32;\n @%p2 bra DONE;\n\
             SPIN:\n ld{flag}.shared.u32 %r2, [flag];\n setp.eq.u32 %p2, %r2, 0;\n @%p2 bra SPIN;\n\
             {fence}\n ld.shared.u32 %r3, [data];\n bra DONE;\n\
             SEND:\n mov.u32 %r2, 7;\n st.shared.u32 [data], %r2;\n {fence}\n mov.u32 %r2, 1;\n\
             st{flag}.shared.u32 [flag], %r2;\n\
             DONE:\n ret;\n}}\n"
        )
    };
    let text = format!(
        ".version 7.0\n.target sm_52\n.address_size 64\n{}{}",
        kernel("synchronised", "membar.cta;", ".volatile"),
        kernel("racy", "", "")
    );
    let m = load(&text);
    let mem = Mem::new();
    let checked = Launch {
        racecheck: true,
        ..launch1(2, 64)
    };
    let none = Params::default();
    let clean = go_ok(&m, &mem, &[], "synchronised", &checked, &none);
    assert_eq!(clean.shared_race, None);
    let racy = go_ok(&m, &mem, &[], "racy", &checked, &none);
    let race = racy.shared_race.expect("a shared race");
    assert_eq!(race.hazard, cuda_sim_ptx::Hazard::ReadAfterWrite);
    assert_eq!((race.first, race.second), ([0, 0, 0], [32, 0, 0]));
    assert_eq!((race.block, race.bytes), ([0, 0, 0], 4));
    assert_eq!(race.count, 4, "two words in each of the two blocks");
    // Racecheck off: nothing is looked for.
    let off = go_ok(&m, &mem, &[], "racy", &launch1(2, 64), &none);
    assert_eq!(off.shared_race, None);
}

#[test]
fn warp_sz_and_upper_case_hex_literals() {
    // `WARP_SZ` is PTX's predefined constant 32 (cuda_fp16.hpp's shuffles read it);
    // integer literals may be written `0X…` with a `U` suffix, and hex digits `e`/`E`
    // are digits there, not an exponent.
    let text = ".version 8.0\n.target sm_75\n.address_size 64\n\
        .visible .entry k(.param .u64 out)\n{\n.reg .b16 %h<4>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<3>;\n\
        ld.param.u64 %rd1, [out];\n\
        {mov.u32 %r1, WARP_SZ;\n}\n\
        add.u32 %r2, %r1, WARP_SZ;\n\
        mov.b16 %h1, 0XC1EFU;\n cvt.u32.u16 %r3, %h1;\n\
        mov.u32 %r4, 0X1eU;\n mov.u32 %r5, 0xE5;\n mov.u32 %r6, 0XFFFFFFFF;\n\
        st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};\n\
        st.global.v2.u32 [%rd1+16], {%r5, %r6};\nret;\n}\n";
    let m = load(text);
    let mut mem = Mem::new();
    let o = mem.alloc(24);
    let p = Params::default().u64(mem.addr(o));
    go_ok(&m, &mem, &[], "k", &launch1(1, 1), &p);
    assert_eq!(
        mem.read::<u32>(o),
        [32, 64, 0xc1ef, 0x1e, 0xe5, 0xffff_ffff]
    );
}
