//! The fault variants added after the review: `Fault::Misaligned` and `Fault::Assert`.

mod common;
use common::*;
use cuda_sim_ptx::Fault;

const HEAD: &str = ".version 7.8\n.target sm_90\n.address_size 64\n";

fn fault_of(body: &str, off: u32) -> Fault {
    let text = format!(
        "{HEAD}.visible .entry k(.param .u64 buf, .param .u32 off)\n{{\n .reg .b32 %r<8>;\n \
         .reg .b64 %rd<8>;\n .local .align 8 .b8 loc[16];\n ld.param.u64 %rd1, [buf];\n \
         ld.param.u32 %r1, [off];\n cvt.u64.u32 %rd2, %r1;\n add.s64 %rd3, %rd1, %rd2;\n{body}\n ret;\n}}"
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let b = mem.alloc(64);
    let p = Params::default().u64(mem.addr(b)).u32(off);
    let r = go(&m, &mem, &[], "k", &launch1(1, 1), &p);
    if off == 0 {
        r.expect("aligned access works");
        return Fault::NotSupported(String::new());
    }
    let (f, _) = r.unwrap_err();
    match &f {
        Fault::Misaligned { addr, .. } if body.contains("loc") || body.contains("shared") => {
            assert!(addr % 4 != 0)
        }
        Fault::Misaligned { addr, .. } => assert_eq!(*addr, mem.addr(b) + off as u64),
        _ => {}
    }
    f
}

#[test]
fn misaligned_accesses_fault_as_misaligned() {
    let cases = [
        ("ld.global.u32 %r2, [%rd3];", 4, false),
        ("st.global.u64 [%rd3], %rd1;", 8, true),
        ("ld.global.v2.u32 {%r2, %r3}, [%rd3];", 8, false),
        ("atom.global.add.u32 %r2, [%rd3], 1;", 4, true),
        ("ld.u32 %r2, [%rd3];", 4, false),
        (
            "mov.u64 %rd4, loc;\n add.s64 %rd5, %rd4, %rd2;\n st.local.u32 [%rd5], 1;",
            4,
            true,
        ),
    ];
    for (body, len, write) in cases {
        fault_of(body, 0);
        let f = fault_of(body, 2);
        match f {
            Fault::Misaligned {
                block,
                thread,
                len: l,
                write: w,
                pc_text,
                ..
            } => {
                assert_eq!(
                    (block, thread, l, w),
                    ([0; 3], [0; 3], len, write),
                    "{body}"
                );
                assert!(!pc_text.is_empty());
            }
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[test]
fn failed_assert_is_an_assert_fault() {
    let msg: Vec<String> = b"x < 3\0".iter().map(|b| b.to_string()).collect();
    let file: Vec<String> = b"k.cu\0".iter().map(|b| b.to_string()).collect();
    let func: Vec<String> = b"void k()\0".iter().map(|b| b.to_string()).collect();
    let text = format!(
        "{HEAD}.extern .func __assertfail(.param .b64 a0, .param .b64 a1, .param .b32 a2, \
         .param .b64 a3, .param .b64 a4);\n\
         .global .align 1 .b8 m[{}] = {{{}}};\n.global .align 1 .b8 f[{}] = {{{}}};\n\
         .global .align 1 .b8 fu[{}] = {{{}}};\n\
         .visible .entry k()\n{{\n .reg .pred %p<2>;\n .reg .b32 %r<2>;\n .reg .b64 %rd<4>;\n\
          mov.u32 %r1, %tid.x;\n setp.ne.u32 %p1, %r1, 2;\n @%p1 bra OK;\n\
          mov.u64 %rd1, m;\n cvta.global.u64 %rd1, %rd1;\n mov.u64 %rd2, f;\n cvta.global.u64 %rd2, %rd2;\n\
          mov.u64 %rd3, fu;\n cvta.global.u64 %rd3, %rd3;\n\
          {{\n .param .b64 p0;\n st.param.b64 [p0], %rd1;\n .param .b64 p1;\n st.param.b64 [p1], %rd2;\n\
          .param .b32 p2;\n st.param.b32 [p2], 17;\n .param .b64 p3;\n st.param.b64 [p3], %rd3;\n\
          .param .b64 p4;\n st.param.b64 [p4], 1;\n call.uni __assertfail, (p0, p1, p2, p3, p4);\n }}\n\
          OK:\n ret;\n}}",
        msg.len(),
        msg.join(","),
        file.len(),
        file.join(","),
        func.len(),
        func.join(",")
    );
    let m = load(&text);
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let (f, out) = go(&m, &mem, &g, "k", &launch1(2, 4), &Params::default()).unwrap_err();
    let line = "k.cu:17: void k(): block: [0,0,0], thread: [2,0,0] Assertion `x < 3` failed.";
    assert_eq!(
        f,
        Fault::Assert {
            block: [0, 0, 0],
            thread: [2, 0, 0],
            message: line.to_string()
        }
    );
    assert!(out.printf.contains(line), "{}", out.printf);
}
