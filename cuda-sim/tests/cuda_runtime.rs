//! The CUDA runtime's registration and launch entry points (`src/driver/libs/runtime.rs`),
//! called as nvcc's host code calls them: a fatbinary (built here, around PTX of our own) is
//! registered with its kernel's host stub, `<<<…>>>` pushes and pops its configuration, and
//! `__cudaLaunchKernel_ptsz` runs the kernel on the calling thread's default stream. The
//! library is reached under its runtime name (`libcudart.so.13`). A fatbinary with only
//! machine code fails its launches with `cudaErrorNoKernelImageForDevice`. Each scenario runs
//! in a child process under the simulator, and the parent test reads its report.

use std::ffi::{c_char, c_int, c_uint, c_void};

use cudarc::driver::sys;

#[macro_use]
mod common;
use common::*;

/// Adds 1.0 to each of the first `n` floats at `x`.
const PTX: &str = "
.version 7.0
.target sm_52
.address_size 64

.visible .entry add_one(.param .u64 x, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [x];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r5, %r3, %r4, %r2;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
";

/// A fatbinary as nvcc lays one out: a 16-byte header, then one entry (a 64-byte header
/// and its payload, padded to 8 bytes): PTX text (`kind` 1) or an ELF (`kind` 2), for sm_90.
fn fatbinary(kind: u16, payload: &[u8]) -> Vec<u64> {
    let mut body = payload.to_vec();
    body.push(0);
    body.resize(body.len().div_ceil(8) * 8, 0);
    let mut entry = vec![0u8; 64];
    entry[0..2].copy_from_slice(&kind.to_le_bytes());
    entry[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
    entry[4..8].copy_from_slice(&64u32.to_le_bytes());
    entry[8..16].copy_from_slice(&(body.len() as u64).to_le_bytes());
    entry[28..32].copy_from_slice(&90u32.to_le_bytes());
    entry[40..48].copy_from_slice(&0x11u64.to_le_bytes());
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0xba55ed50u32.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes());
    bytes.extend_from_slice(&16u16.to_le_bytes());
    bytes.extend_from_slice(&((entry.len() + body.len()) as u64).to_le_bytes());
    bytes.extend_from_slice(&entry);
    bytes.extend_from_slice(&body);
    bytes
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// nvcc's `__fatBinC_Wrapper_t`.
#[repr(C)]
struct Wrapper {
    magic: u32,
    version: u32,
    data: *const u64,
    filename_or_fatbins: *const c_void,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Dim3 {
    x: c_uint,
    y: c_uint,
    z: c_uint,
}

/// The runtime's entry points, looked up in `libcudart.so.13` (the simulator under that name).
struct Runtime {
    register: unsafe extern "C" fn(*mut c_void) -> *mut *mut c_void,
    register_end: unsafe extern "C" fn(*mut *mut c_void),
    unregister: unsafe extern "C" fn(*mut *mut c_void),
    register_function: unsafe extern "C" fn(
        *mut *mut c_void,
        *const c_char,
        *mut c_char,
        *const c_char,
        c_int,
        *mut c_void,
        *mut c_void,
        *mut Dim3,
        *mut Dim3,
        *mut c_int,
    ),
    push: unsafe extern "C" fn(Dim3, Dim3, usize, *mut c_void) -> c_uint,
    pop: unsafe extern "C" fn(*mut Dim3, *mut Dim3, *mut usize, *mut c_void) -> c_uint,
    get_kernel: unsafe extern "C" fn(*mut *const c_void, *const c_void) -> c_uint,
    launch_ptsz: unsafe extern "C" fn(
        *const c_void,
        Dim3,
        Dim3,
        *mut *mut c_void,
        usize,
        *mut c_void,
    ) -> c_uint,
    set_attribute: unsafe extern "C" fn(*const c_void, c_int, c_int) -> c_uint,
    get_device: unsafe extern "C" fn(*mut c_int) -> c_uint,
}

/// Symbol `name` of `lib` as a function pointer of type `F`.
///
/// # Safety
///
/// `F` is the symbol's function-pointer type.
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &std::ffi::CStr) -> F {
    assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: a live handle and a NUL-terminated name.
    let f = unsafe { libc::dlsym(lib, name.as_ptr()) };
    assert!(!f.is_null(), "{name:?} missing");
    // SAFETY: `F` is a function pointer of the symbol's type, by the caller's contract.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&f) }
}

fn runtime() -> Runtime {
    // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol has the signature nvcc's
    // host code declares for it (crt/host_runtime.h, crt/device_functions.h).
    unsafe {
        let lib = libc::dlopen(c"libcudart.so.13".as_ptr(), libc::RTLD_NOW);
        assert!(!lib.is_null(), "libcudart.so.13 is not on the library path");
        Runtime {
            register: sym(lib, c"__cudaRegisterFatBinary"),
            register_end: sym(lib, c"__cudaRegisterFatBinaryEnd"),
            unregister: sym(lib, c"__cudaUnregisterFatBinary"),
            register_function: sym(lib, c"__cudaRegisterFunction"),
            push: sym(lib, c"__cudaPushCallConfiguration"),
            pop: sym(lib, c"__cudaPopCallConfiguration"),
            get_kernel: sym(lib, c"__cudaGetKernel"),
            launch_ptsz: sym(lib, c"__cudaLaunchKernel_ptsz"),
            set_attribute: sym(lib, c"cudaFuncSetAttribute"),
            get_device: sym(lib, c"cudaGetDevice"),
        }
    }
}

/// The host stub nvcc would generate for `add_one`: only its address matters.
static STUB: u8 = 0;

/// Registers `fatbin` with `add_one`'s stub, launches it on 100 floats (0, 1, 2, …) as
/// `add_one<<<4, 32>>>(x, 100)` does, and returns the launch's status and the floats.
fn launch_through_the_runtime(fatbin: &[u64]) -> (c_uint, Vec<f32>) {
    let rt = runtime();
    let wrapper = Wrapper {
        magic: 0x466243b1,
        version: 1,
        data: fatbin.as_ptr(),
        filename_or_fatbins: std::ptr::null(),
    };
    let stub = (&STUB as *const u8).cast::<c_char>();
    let n = 100usize;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut x: sys::CUdeviceptr = 0;
    // SAFETY: the runtime's calls in the order nvcc's code makes them, with live pointers;
    // the driver calls take valid out-pointers and sizes.
    unsafe {
        ok(sys::cuMemAlloc_v2(&mut x, 4 * n));
        ok(sys::cuMemcpyHtoD_v2(x, host.as_ptr().cast(), 4 * n));
        let handle = (rt.register)((&wrapper as *const Wrapper).cast_mut().cast());
        (rt.register_function)(
            handle,
            stub,
            stub.cast_mut(),
            c"add_one".as_ptr(),
            -1,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        (rt.register_end)(handle);
        let mut device = -1;
        assert_eq!((rt.get_device)(&mut device), 0);
        assert_eq!(device, 0);
        let grid = Dim3 { x: 4, y: 1, z: 1 };
        let block = Dim3 { x: 32, y: 1, z: 1 };
        assert_eq!((rt.push)(grid, block, 0, std::ptr::null_mut()), 0);
        let (mut g, mut b, mut shared, mut stream) = (
            Dim3::default(),
            Dim3::default(),
            1usize,
            std::ptr::dangling_mut::<c_void>(),
        );
        assert_eq!(
            (rt.pop)(
                &mut g,
                &mut b,
                &mut shared,
                (&mut stream as *mut *mut c_void).cast()
            ),
            0
        );
        assert_eq!(
            (g, b, shared, stream),
            (grid, block, 0, std::ptr::null_mut())
        );
        let mut kernel = std::ptr::null();
        assert_eq!((rt.get_kernel)(&mut kernel, stub.cast()), 0);
        let mut n32 = n as u32;
        let mut args = [
            (&mut x as *mut u64).cast::<c_void>(),
            (&mut n32 as *mut u32).cast(),
        ];
        let status = (rt.launch_ptsz)(kernel, g, b, args.as_mut_ptr(), shared, stream);
        if status == 0 {
            assert_eq!((rt.set_attribute)(kernel, 8, 1024), 0);
        }
        let mut out = vec![0f32; n];
        ok(sys::cuCtxSynchronize());
        ok(sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), x, 4 * n));
        ok(sys::cuMemFree_v2(x));
        (rt.unregister)(handle);
        (status, out)
    }
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_runtime_launch() {
    child();
    setup();
    let (status, out) = launch_through_the_runtime(&fatbinary(1, PTX.as_bytes()));
    assert_eq!(status, 0);
    let want: Vec<f32> = (0..100).map(|i| i as f32 + 1.0).collect();
    assert_eq!(out, want);
    teardown();
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_runtime_machine_code_only() {
    child();
    setup();
    let (status, out) = launch_through_the_runtime(&fatbinary(2, b"\x7fELF not for us"));
    // cudaErrorNoKernelImageForDevice, and the floats untouched.
    assert_eq!(status, 209);
    let want: Vec<f32> = (0..100).map(|i| i as f32).collect();
    assert_eq!(out, want);
    teardown();
}

/// nvcc-style registration and a `<<<…>>>` launch run the kernel from the fatbinary's PTX on
/// the per-thread default stream; unregistering at the end unloads its module (no leak).
#[test]
fn a_registered_kernel_runs_through_the_runtime() {
    assert_clean(&report_of("scenario_runtime_launch"));
}

/// Machine code alone cannot run: the launch fails with cudaErrorNoKernelImageForDevice,
/// after one line that says why.
#[test]
fn a_fatbinary_of_machine_code_only_fails_its_launches() {
    let (output, report) = run("scenario_runtime_machine_code_only", |_| {});
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the CUDA runtime cannot load kernel add_one")
            && stderr.contains("only machine code"),
        "{stderr}"
    );
    assert_clean(&report.expect("a report"));
}
