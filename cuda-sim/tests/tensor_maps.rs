//! Im2col tensor maps on the simulator: `cuTensorMapEncodeIm2col` writes the simulator's own
//! encoding (read back here with `TensorMapDesc::decode`); the PTX interpreter runs no im2col
//! copy: a tile-mode copy through an im2col map faults as `CUDA_ERROR_NOT_SUPPORTED`, naming
//! the map, and an im2col-mode copy instruction is refused when the module loads.

use std::ffi::{CString, c_void};

use cuda_sim_ptx::TensorMapDesc;
use cudarc::driver::sys::{self, CUresult};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};

mod common;
use common::*;

/// Compiles CUDA C++ to PTX (NUL-terminated) for compute 9.0.
fn ptx(source: &str) -> CString {
    let options = CompileOptions {
        arch: Some("compute_90"),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source, options).expect("NVRTC compiles the kernel");
    CString::new(ptx.to_src()).unwrap()
}

const KERNELS: &str = r#"
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

// One tile-mode load of a 4-d box through `map`.
extern "C" __global__ void tile_load(const __grid_constant__ TensorMap map, float *out) {
    __shared__ alignas(128) float tile[64];
    __shared__ alignas(8) unsigned long long bar;
    unsigned tile_s = (unsigned)__cvta_generic_to_shared(tile);
    unsigned bar_s = (unsigned)__cvta_generic_to_shared(&bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar_s), "r"(1) : "memory");
    unsigned long long state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(state) : "r"(bar_s), "r"(256) : "memory");
    (void)state;
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %2, %2, %2}], [%3];"
                 :: "r"(tile_s), "l"(&map), "r"(0), "r"(bar_s) : "memory");
    out[0] = tile[0];
}
"#;

const IM2COL_KERNEL: &str = r#"
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

// One im2col-mode load: the interpreter does not implement it.
extern "C" __global__ void im2col_load(const __grid_constant__ TensorMap map, float *out) {
    __shared__ alignas(128) float tile[64];
    __shared__ alignas(8) unsigned long long bar;
    unsigned tile_s = (unsigned)__cvta_generic_to_shared(tile);
    unsigned bar_s = (unsigned)__cvta_generic_to_shared(&bar);
    unsigned short offset = 0;
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%2, %2, %2, %2}], [%3], {%4, %4};"
                 :: "r"(tile_s), "l"(&map), "r"(0), "r"(bar_s), "h"(offset) : "memory");
    out[0] = tile[0];
}
"#;

/// Encodes an im2col map of two 8 x 8 NHWC images of 64 float channels at `address`: the
/// box padded by one pixel all round, 32 channels by 64 pixels a copy.
fn encode(address: u64) -> Box<sys::CUtensorMap> {
    let dims = [64u64, 8, 8, 2];
    let strides = [256u64, 2048, 16384];
    let (lower, upper) = ([-1i32, -1], [-1i32, -1]);
    let element_strides = [1u32, 1, 1, 1];
    let mut map = Box::new(sys::CUtensorMap { opaque: [0; 16] });
    // SAFETY: a context is current; `map` is writable and aligned; the arrays hold the rank's
    // entries (rank - 1 strides, rank - 2 corner offsets); `address` is a live allocation of
    // the 32 KiB the description spans.
    unsafe {
        ok(sys::cuTensorMapEncodeIm2col(
            &mut *map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            4,
            address as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            lower.as_ptr(),
            upper.as_ptr(),
            32,
            64,
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ))
    };
    map
}

#[test]
#[ignore = "runs under the simulator from a parent test in this file"]
fn scenario_an_im2col_map() {
    child();
    setup();
    let stream = new_stream();
    let (mut data, mut out) = (0u64, 0u64);
    // SAFETY: valid out-pointers; live stream.
    unsafe {
        ok(sys::cuMemAllocAsync(&mut data, 64 * 8 * 8 * 2 * 4, stream));
        ok(sys::cuMemAllocAsync(&mut out, 4, stream));
        ok(sys::cuStreamSynchronize(stream));
    }
    let mut map = encode(data);
    // SAFETY: `CUtensorMap` is 128 plain bytes.
    let bytes: [u8; 128] = unsafe { std::mem::transmute(map.opaque) };
    let desc = TensorMapDesc::decode(&bytes).expect("the simulator's own encoding");
    assert!(desc.im2col);
    assert_eq!((desc.rank, desc.element_bytes, desc.interleave), (4, 4, 0));
    assert_eq!(desc.address, data);
    assert_eq!(desc.dims, [64, 8, 8, 2, 0]);
    assert_eq!(desc.strides, [256, 2048, 16384, 0]);
    assert_eq!(desc.box_dims, [32, 64, 0, 0, 0], "channels, pixels");
    assert_eq!(desc.lower_corner, [-1, -1, 0]);
    assert_eq!(desc.upper_corner, [-1, -1, 0]);

    // A tile-mode copy through the im2col map: not interpreted.
    let module_text = ptx(KERNELS);
    let mut module = std::ptr::null_mut();
    let mut function = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX and name; valid out-pointers; a context is current.
    unsafe {
        ok(sys::cuModuleLoadData(
            &mut module,
            module_text.as_ptr().cast(),
        ));
        ok(sys::cuModuleGetFunction(
            &mut function,
            module,
            c"tile_load".as_ptr(),
        ));
    }
    let mut params = [
        (&mut *map as *mut sys::CUtensorMap).cast::<c_void>(),
        (&mut out as *mut u64).cast(),
    ];
    // SAFETY: one argument per kernel parameter, of its size (128 bytes, then a pointer).
    let launched = unsafe {
        sys::cuLaunchKernel(
            function,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(launched, CUresult::CUDA_ERROR_NOT_SUPPORTED);

    // An im2col-mode copy: refused at load.
    let im2col_text = ptx(IM2COL_KERNEL);
    let mut refused = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX; valid out-pointer.
    let loaded = unsafe { sys::cuModuleLoadData(&mut refused, im2col_text.as_ptr().cast()) };
    assert_eq!(loaded, CUresult::CUDA_ERROR_NOT_SUPPORTED);

    // SAFETY: our own allocations, stream and module.
    unsafe {
        ok(sys::cuMemFreeAsync(data, stream));
        ok(sys::cuMemFreeAsync(out, stream));
        ok(sys::cuStreamSynchronize(stream));
        ok(sys::cuModuleUnload(module));
    }
    destroy_stream(stream);
    teardown();
}

#[test]
fn im2col_maps_encode_and_their_copies_are_not_interpreted() {
    let (output, report) = run("scenario_an_im2col_map", |_| {});
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("an im2col or interleaved tensor map"),
        "{stderr}"
    );
    assert!(stderr.contains(".im2col"), "{stderr}");
    let report = report.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(
        report.leaks_without_primary().is_empty(),
        "{:?}",
        report.leaks
    );
}
