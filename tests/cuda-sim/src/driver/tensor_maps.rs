//! Tensor maps (`cuTensorMapEncodeTiled`): the description is validated as the driver does and
//! stored in the 128 bytes in the interpreter's encoding (`cuda_sim_ptx::TensorMapDesc`), which
//! `cp.async.bulk.tensor` reads back when a kernel uses the map.

use cuda_sim_ptx::TensorMapDesc;

use super::errors::INVALID_VALUE;
use super::types::CuResult;

/// Bytes per element of each `CUtensorMapDataType` (0 to 12).
const ELEMENT_BYTES: [u8; 13] = [1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4];
/// `CU_TENSOR_MAP_DATA_TYPE_FLOAT16` and up are floating-point types.
const FIRST_FLOAT: u32 = 6;

/// The arguments of `cuTensorMapEncodeTiled`, read from the caller's arrays.
pub struct Tiled {
    pub data_type: u32,
    pub address: u64,
    pub dims: Vec<u64>,
    pub strides: Vec<u64>,
    pub box_dims: Vec<u32>,
    pub element_strides: Vec<u32>,
    pub interleave: u32,
    pub swizzle: u32,
    pub l2_promotion: u32,
    pub oob_fill: u32,
}

/// Validates a tiled description as the driver does; returns the encoded map.
pub fn encode_tiled(t: &Tiled) -> Result<[u8; 128], CuResult> {
    let element = *ELEMENT_BYTES
        .get(t.data_type as usize)
        .ok_or(INVALID_VALUE)?;
    let rank = t.dims.len();
    let min_rank = if t.interleave == 0 { 1 } else { 3 };
    if !(min_rank..=5).contains(&rank) || t.interleave > 2 || t.swizzle > 3 {
        return Err(INVALID_VALUE);
    }
    if t.l2_promotion > 3 || t.oob_fill > 1 || (t.oob_fill == 1 && t.data_type < FIRST_FLOAT) {
        return Err(INVALID_VALUE);
    }
    let align = if t.interleave == 2 { 32 } else { 16 };
    if t.address == 0 || !t.address.is_multiple_of(align) {
        return Err(INVALID_VALUE);
    }
    if t.dims.iter().any(|&d| d == 0 || d > 1 << 32) {
        return Err(INVALID_VALUE);
    }
    if t.strides
        .iter()
        .any(|&s| !s.is_multiple_of(16) || s >= 1 << 40)
    {
        return Err(INVALID_VALUE);
    }
    if t.box_dims.iter().any(|&b| b == 0 || b > 256) {
        return Err(INVALID_VALUE);
    }
    if t.element_strides.iter().any(|&s| s == 0 || s > 8) {
        return Err(INVALID_VALUE);
    }
    let inner = u64::from(t.box_dims[0]) * u64::from(element);
    if t.interleave == 0 && !inner.is_multiple_of(16) {
        return Err(INVALID_VALUE);
    }
    let span = [u64::MAX, 32, 64, 128][t.swizzle as usize];
    if t.interleave == 0 && inner > span {
        return Err(INVALID_VALUE);
    }
    let mut desc = TensorMapDesc {
        data_type: t.data_type as u8,
        element_bytes: element,
        rank: rank as u8,
        swizzle: t.swizzle as u8,
        nan_fill: t.oob_fill == 1,
        address: t.address,
        ..TensorMapDesc::default()
    };
    for k in 0..rank {
        desc.dims[k] = t.dims[k];
        desc.box_dims[k] = t.box_dims[k];
        desc.element_strides[k] = t.element_strides[k];
    }
    for k in 0..rank - 1 {
        desc.strides[k] = t.strides[k];
    }
    Ok(desc.encode())
}
