//! Kernels compiled by NVRTC run on the simulator's PTX interpreter: an access one element
//! past a buffer is an `out-of-bounds` violation naming the kernel, block, thread and
//! address; module variables are memory the host can write (`cuModuleGetGlobal`); an
//! instruction the interpreter does not implement is `CUDA_ERROR_NOT_SUPPORTED` at load,
//! named on stderr; a cubin (machine code) is refused; and a kernel of 2^20 threads finishes
//! in seconds.

use std::ffi::{CString, c_void};

use cudarc::driver::sys::{self, CUresult};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};

mod common;
use common::*;

/// Compiles CUDA C++ to PTX (NUL-terminated, as the driver takes it) for compute 9.0.
fn ptx(source: &str) -> CString {
    let options = CompileOptions {
        arch: Some("compute_90"),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source, options).expect("NVRTC compiles the kernel");
    CString::new(ptx.to_src()).unwrap()
}

fn load_module(text: &CString) -> Result<sys::CUmodule, CUresult> {
    let mut module = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX; valid out-pointer; a context is current.
    let status = unsafe { sys::cuModuleLoadData(&mut module, text.as_ptr().cast()) };
    if status == CUresult::CUDA_SUCCESS {
        Ok(module)
    } else {
        Err(status)
    }
}

fn function(module: sys::CUmodule, name: &std::ffi::CStr) -> sys::CUfunction {
    let mut function = std::ptr::null_mut();
    // SAFETY: live module, NUL-terminated name.
    unsafe {
        ok(sys::cuModuleGetFunction(
            &mut function,
            module,
            name.as_ptr(),
        ))
    };
    function
}

const FILL: &str = r#"
extern "C" __global__ void fill(int *data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) data[i] = i;   // one element too far
}"#;

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_one_element_past_the_buffer() {
    child();
    setup();
    let module = load_module(&ptx(FILL)).unwrap();
    let fill = function(module, c"fill");
    let stream = new_stream();
    let (mut data, mut n) = (0u64, 1000i32);
    // SAFETY: valid out-pointer; live stream.
    unsafe { ok(sys::cuMemAllocAsync(&mut data, 4 * n as usize, stream)) };
    let mut params = [
        (&mut data as *mut u64).cast::<c_void>(),
        (&mut n as *mut i32).cast(),
    ];
    // 4 blocks of 256: thread 232 of block 3 is element 1000.
    assert_eq!(
        launch_1d(fill, 4, 256, stream, &mut params),
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
    // SAFETY: our own allocation, stream and module.
    unsafe {
        let mut host = vec![0i32; n as usize];
        ok(sys::cuMemcpyDtoHAsync_v2(
            host.as_mut_ptr().cast(),
            data,
            4 * n as usize,
            stream,
        ));
        ok(sys::cuStreamSynchronize(stream));
        // Every access before the bad one ran; the bad one wrote nothing.
        assert!(host.iter().enumerate().all(|(i, &v)| v == i as i32));
        ok(sys::cuMemFreeAsync(data, stream));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuModuleUnload(module));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn one_element_past_the_buffer_is_reported_with_block_and_thread() {
    let report = report_of("scenario_one_element_past_the_buffer");
    assert_eq!(kinds(&report), ["out-of-bounds"], "{:?}", report.violations);
    for needle in [
        "kernel fill",
        "block [3, 0, 0]",
        "thread [232, 0, 0]",
        "writes 4 bytes",
        "0 bytes past the end of the 4000-byte allocation",
        "st.global",
    ] {
        assert_message_contains(&report, 0, needle);
    }
    assert_no_leaks(&report);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_module_variables_and_printf() {
    child();
    setup();
    let module = load_module(&ptx(
        r#"
__constant__ int table[4];
__device__ int counter = 5;
extern "C" __global__ void use_table(int *out) {
    out[threadIdx.x] = table[threadIdx.x] * 10 + counter;
    if (threadIdx.x == 3) { atomicAdd(&counter, 1); printf("thread %d saw %d\n", threadIdx.x, table[3]); }
}"#,
    ))
    .unwrap();
    let f = function(module, c"use_table");
    // SAFETY: valid out-pointers and sizes; the variables are the module's.
    unsafe {
        let (mut table, mut size) = (0u64, 0usize);
        ok(sys::cuModuleGetGlobal_v2(
            &mut table,
            &mut size,
            module,
            c"table".as_ptr(),
        ));
        assert_eq!(size, 16);
        let values = [1i32, 2, 3, 4];
        ok(sys::cuMemcpyHtoD_v2(table, values.as_ptr().cast(), 16));
        let (mut counter, mut counter_size) = (0u64, 0usize);
        ok(sys::cuModuleGetGlobal_v2(
            &mut counter,
            &mut counter_size,
            module,
            c"counter".as_ptr(),
        ));
        assert_eq!(counter_size, 4);
        let mut missing = 0u64;
        assert_eq!(
            sys::cuModuleGetGlobal_v2(&mut missing, &mut size, module, c"absent".as_ptr()),
            CUresult::CUDA_ERROR_NOT_FOUND
        );
        let mut out = 0u64;
        ok(sys::cuMemAlloc_v2(&mut out, 16));
        let mut params = [(&mut out as *mut u64).cast::<c_void>()];
        ok(launch_1d(f, 1, 4, std::ptr::null_mut(), &mut params));
        let mut host = [0i32; 4];
        ok(sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), out, 16));
        assert_eq!(host, [15, 25, 35, 45]);
        let mut after = 0i32;
        ok(sys::cuMemcpyDtoH_v2(
            (&mut after as *mut i32).cast(),
            counter,
            4,
        ));
        assert_eq!(after, 6, "the kernel's atomic reached the module variable");
        ok(sys::cuCtxSynchronize());
        println!("host: synchronized");
        ok(sys::cuMemFree_v2(out));
        ok(sys::cuModuleUnload(module));
    }
    teardown();
}

#[test]
fn module_variables_are_memory_and_printf_reaches_stdout() {
    let (output, report) = run("scenario_module_variables_and_printf", |_| {});
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = stdout.find("thread 3 saw 4").expect("the kernel's printf");
    assert!(
        printed < stdout.find("host: synchronized").unwrap(),
        "{stdout}"
    );
    let report = report.unwrap();
    assert_clean(&report);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_unsupported_code_is_refused() {
    child();
    setup();
    // A texture fetch: valid PTX that the interpreter does not implement.
    let texture = CString::new(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry t(.param .u64 p)\n{\n\
         .reg .b32 %r<5>;\n.reg .b64 %rd<2>;\nld.param.u64 %rd1, [p];\n\
         tex.2d.v4.u32.s32 {%r1, %r2, %r3, %r4}, [%rd1, {%r1, %r1}];\nret;\n}\n",
    )
    .unwrap();
    assert_eq!(
        load_module(&texture).unwrap_err(),
        CUresult::CUDA_ERROR_NOT_SUPPORTED
    );
    // A cubin (machine code for one GPU) cannot run here: refused as an image.
    let cubin = {
        use cudarc::nvrtc::sys as nvrtc;
        let source = CString::new(FILL).unwrap();
        let mut program = std::ptr::null_mut();
        let arch = c"--gpu-architecture=sm_90";
        let mut size = 0usize;
        // SAFETY: NUL-terminated source and option; valid out-pointers; the buffer has the
        // size NVRTC reported.
        unsafe {
            nvrtc::nvrtcCreateProgram(
                &mut program,
                source.as_ptr(),
                c"fill.cu".as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
            .result()
            .unwrap();
            let options = [arch.as_ptr()];
            nvrtc::nvrtcCompileProgram(program, 1, options.as_ptr())
                .result()
                .unwrap();
            nvrtc::nvrtcGetCUBINSize(program, &mut size)
                .result()
                .unwrap();
            let mut cubin = vec![0u8; size];
            nvrtc::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast())
                .result()
                .unwrap();
            nvrtc::nvrtcDestroyProgram(&mut program).result().unwrap();
            cubin
        }
    };
    assert!(cubin.starts_with(b"\x7fELF"));
    let mut module = std::ptr::null_mut();
    // SAFETY: a complete ELF image of `size` bytes.
    let status = unsafe { sys::cuModuleLoadData(&mut module, cubin.as_ptr().cast()) };
    assert_eq!(status, CUresult::CUDA_ERROR_INVALID_IMAGE);
    teardown();
}

#[test]
fn unsupported_code_is_refused_and_named() {
    let (output, report) = run("scenario_unsupported_code_is_refused", |_| {});
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("tex.2d.v4.u32.s32"), "{stderr}");
    let report = report.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_a_million_threads() {
    child();
    setup();
    let module = load_module(&ptx(r#"
extern "C" __global__ void polynomial(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i], acc = 0.0f;
    #pragma unroll
    for (int k = 0; k < 8; ++k) acc = acc * v + (float)(k + 1);
    y[i] = acc;
}"#))
    .unwrap();
    let f = function(module, c"polynomial");
    let mut n = 1i32 << 20;
    let bytes = 4 * n as usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 / 1000.0).collect();
    let (mut xd, mut yd) = (0u64, 0u64);
    // SAFETY: valid out-pointers; sizes match; the kernel touches `n` floats of each.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut xd, bytes));
        ok(sys::cuMemAlloc_v2(&mut yd, bytes));
        ok(sys::cuMemcpyHtoD_v2(xd, x.as_ptr().cast(), bytes));
    }
    let mut params = [
        (&mut xd as *mut u64).cast::<c_void>(),
        (&mut yd as *mut u64).cast(),
        (&mut n as *mut i32).cast(),
    ];
    let started = std::time::Instant::now();
    ok(launch_1d(
        f,
        (n as u32) / 256,
        256,
        std::ptr::null_mut(),
        &mut params,
    ));
    println!("2^20 threads in {:.2} s", started.elapsed().as_secs_f64());
    let mut y = vec![0f32; n as usize];
    // SAFETY: as above.
    unsafe {
        ok(sys::cuMemcpyDtoH_v2(y.as_mut_ptr().cast(), yd, bytes));
        ok(sys::cuMemFree_v2(xd));
        ok(sys::cuMemFree_v2(yd));
        ok(sys::cuModuleUnload(module));
    }
    for (i, (&v, &out)) in x.iter().zip(&y).enumerate().step_by(997) {
        let mut acc = 0.0f32;
        for k in 0..8 {
            acc = acc.mul_add(v, (k + 1) as f32);
        }
        assert_eq!(out, acc, "element {i}");
    }
    teardown();
}

/// Correctness at scale; the time it printed is in the README (not asserted tightly: the
/// bound only catches an interpreter gone quadratic).
#[test]
fn a_million_threads_run_in_seconds() {
    let started = std::time::Instant::now();
    let (output, report) = run("scenario_a_million_threads", |_| {});
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!(
        "{}",
        stdout
            .lines()
            .find(|l| l.contains("2^20 threads"))
            .unwrap_or("")
    );
    assert!(
        started.elapsed().as_secs() < 120,
        "took {:?}",
        started.elapsed()
    );
    assert!(report.unwrap().violations.is_empty());
}
