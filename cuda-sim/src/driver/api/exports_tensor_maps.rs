//! The exported tensor-map functions (see `tensor_maps`).
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{c_int, c_uint, c_void};

use crate::base::abi::put;
use crate::base::errors::INVALID_VALUE;
use crate::base::types::*;

/// The arguments both encoders share, read from the caller's arrays (`rank` entries each,
/// `rank - 1` strides); `modes` are the interleave, swizzle, L2 promotion and fill.
fn common(
    data_type: c_uint,
    rank: usize,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    element_strides: *const u32,
    [interleave, swizzle, l2_promotion, oob_fill]: [c_uint; 4],
) -> Result<crate::resources::tensor_maps::Common, CuResult> {
    Ok(crate::resources::tensor_maps::Common {
        data_type,
        address: address as u64,
        dims: array(dims, rank)?,
        strides: if rank > 1 {
            array(strides, rank - 1)?
        } else {
            Vec::new()
        },
        element_strides: array(element_strides, rank)?,
        interleave,
        swizzle,
        l2_promotion,
        oob_fill,
    })
}

/// `count` values at `values`, refusing null.
fn array<T: Copy>(values: *const T, count: usize) -> Result<Vec<T>, CuResult> {
    if values.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the array holds `count` values by the API's contract.
    Ok(unsafe { std::slice::from_raw_parts(values, count) }.to_vec())
}

export_fns! {
    fn cuTensorMapEncodeTiled(map: *mut [u8; 128], data_type: c_uint, rank: c_uint, address: *mut c_void, dims: *const u64, strides: *const u64, box_dims: *const u32, element_strides: *const u32, interleave: c_uint, swizzle: c_uint, l2_promotion: c_uint, oob_fill: c_uint) {
        if map.is_null() || rank == 0 || rank > 5 {
            return Err(INVALID_VALUE);
        }
        let rank = rank as usize;
        let tiled = crate::resources::tensor_maps::Tiled {
            common: common(data_type, rank, address, dims, strides, element_strides, [interleave, swizzle, l2_promotion, oob_fill])?,
            box_dims: array(box_dims, rank)?,
        };
        // The H200's driver (580) answers CUDA_ERROR_INVALID_CONTEXT without a current context.
        crate::with_sim(|sim| sim.require_current("cuTensorMapEncodeTiled").map(drop))?;
        let bytes = crate::resources::tensor_maps::encode_tiled(&tiled)?;
        put(map, bytes)
    }

    fn cuTensorMapEncodeIm2col(map: *mut [u8; 128], data_type: c_uint, rank: c_uint, address: *mut c_void, dims: *const u64, strides: *const u64, lower_corner: *const c_int, upper_corner: *const c_int, channels_per_pixel: c_uint, pixels_per_column: c_uint, element_strides: *const u32, interleave: c_uint, swizzle: c_uint, l2_promotion: c_uint, oob_fill: c_uint) {
        if map.is_null() || !(3..=5).contains(&rank) {
            return Err(INVALID_VALUE);
        }
        let rank = rank as usize;
        let im2col = crate::resources::tensor_maps::Im2col {
            common: common(data_type, rank, address, dims, strides, element_strides, [interleave, swizzle, l2_promotion, oob_fill])?,
            lower_corner: array(lower_corner, rank - 2)?,
            upper_corner: array(upper_corner, rank - 2)?,
            channels_per_pixel,
            pixels_per_column,
        };
        // As for tiled maps, a context must be current.
        crate::with_sim(|sim| sim.require_current("cuTensorMapEncodeIm2col").map(drop))?;
        let bytes = crate::resources::tensor_maps::encode_im2col(&im2col)?;
        put(map, bytes)
    }
}
