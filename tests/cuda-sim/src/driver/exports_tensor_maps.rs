//! The exported tensor-map functions (see `tensor_maps`).
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{c_uint, c_void};

use super::errors::INVALID_VALUE;
use super::exports::put;
use super::types::*;

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
        let tiled = super::tensor_maps::Tiled {
            data_type,
            address: address as u64,
            dims: array(dims, rank)?,
            strides: if rank > 1 { array(strides, rank - 1)? } else { Vec::new() },
            box_dims: array(box_dims, rank)?,
            element_strides: array(element_strides, rank)?,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        };
        // The H200's driver (580) answers CUDA_ERROR_INVALID_CONTEXT without a current context.
        super::with_sim(|sim| sim.require_current("cuTensorMapEncodeTiled").map(drop))?;
        let bytes = super::tensor_maps::encode_tiled(&tiled)?;
        put(map, bytes)
    }
}
