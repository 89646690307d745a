//! Tensor maps (`cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col`): the description is
//! validated as the driver does and stored in the 128 bytes in the interpreter's encoding
//! (`cuda_sim_ptx::TensorMapDesc`), which `cp.async.bulk.tensor` reads back when a kernel uses
//! the map (the interpreter refuses im2col maps: it runs tile-mode copies only).

use cuda_sim_ptx::TensorMapDesc;

use crate::base::errors::INVALID_VALUE;
use crate::base::types::CuResult;

/// Bytes per element of each `CUtensorMapDataType` (0 to 12).
const ELEMENT_BYTES: [u8; 13] = [1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4];
/// `CU_TENSOR_MAP_DATA_TYPE_FLOAT16` and up are floating-point types.
const FIRST_FLOAT: u32 = 6;

/// The arguments that `cuTensorMapEncodeTiled` and `cuTensorMapEncodeIm2col` share, read
/// from the caller's arrays.
pub struct Common {
    pub data_type: u32,
    pub address: u64,
    pub dims: Vec<u64>,
    pub strides: Vec<u64>,
    pub element_strides: Vec<u32>,
    pub interleave: u32,
    pub swizzle: u32,
    pub l2_promotion: u32,
    pub oob_fill: u32,
}

/// The arguments of `cuTensorMapEncodeTiled`.
pub struct Tiled {
    pub common: Common,
    pub box_dims: Vec<u32>,
}

/// The arguments of `cuTensorMapEncodeIm2col`.
pub struct Im2col {
    pub common: Common,
    pub lower_corner: Vec<i32>,
    pub upper_corner: Vec<i32>,
    pub channels_per_pixel: u32,
    pub pixels_per_column: u32,
}

/// Validates what both kinds share as the driver does, with a rank of `min_rank` to 5 and
/// an inner row of `inner` elements (a box row, or a pixel's channels); returns the
/// description with everything but the box filled in.
fn check_common(c: &Common, min_rank: usize, inner: u32) -> Result<TensorMapDesc, CuResult> {
    let element = *ELEMENT_BYTES
        .get(c.data_type as usize)
        .ok_or(INVALID_VALUE)?;
    let rank = c.dims.len();
    let min_rank = if c.interleave == 0 { min_rank } else { 3 };
    if !(min_rank..=5).contains(&rank) || c.interleave > 2 || c.swizzle > 3 {
        return Err(INVALID_VALUE);
    }
    if c.l2_promotion > 3 || c.oob_fill > 1 || (c.oob_fill == 1 && c.data_type < FIRST_FLOAT) {
        return Err(INVALID_VALUE);
    }
    let align = if c.interleave == 2 { 32 } else { 16 };
    if c.address == 0 || !c.address.is_multiple_of(align) {
        return Err(INVALID_VALUE);
    }
    if c.dims.iter().any(|&d| d == 0 || d > 1 << 32) {
        return Err(INVALID_VALUE);
    }
    if c.strides
        .iter()
        .any(|&s| !s.is_multiple_of(align) || s >= 1 << 40)
    {
        return Err(INVALID_VALUE);
    }
    if c.element_strides.iter().any(|&s| s == 0 || s > 8) {
        return Err(INVALID_VALUE);
    }
    let inner = u64::from(inner) * u64::from(element);
    if c.interleave == 0 && !inner.is_multiple_of(16) {
        return Err(INVALID_VALUE);
    }
    let span = [u64::MAX, 32, 64, 128][c.swizzle as usize];
    if c.interleave == 0 && inner > span {
        return Err(INVALID_VALUE);
    }
    let mut desc = TensorMapDesc {
        data_type: c.data_type as u8,
        element_bytes: element,
        rank: rank as u8,
        swizzle: c.swizzle as u8,
        nan_fill: c.oob_fill == 1,
        interleave: c.interleave as u8,
        address: c.address,
        ..TensorMapDesc::default()
    };
    for k in 0..rank {
        desc.dims[k] = c.dims[k];
        desc.element_strides[k] = c.element_strides[k];
    }
    for k in 0..rank - 1 {
        desc.strides[k] = c.strides[k];
    }
    Ok(desc)
}

/// Validates a tiled description as the driver does; returns the encoded map.
pub fn encode_tiled(t: &Tiled) -> Result<[u8; 128], CuResult> {
    if t.box_dims.iter().any(|&b| b == 0 || b > 256) {
        return Err(INVALID_VALUE);
    }
    let mut desc = check_common(&t.common, 1, t.box_dims[0])?;
    desc.box_dims[..t.box_dims.len()].copy_from_slice(&t.box_dims);
    Ok(desc.encode())
}

/// Validates an im2col description as the driver documents: rank 3 to 5, corner offsets
/// within the rank's range (2^15, 2^7, 2^4 either side), a bounding box that is not empty,
/// 1 to 256 channels per pixel and 1 to 1024 pixels per column; returns the encoded map.
pub fn encode_im2col(m: &Im2col) -> Result<[u8; 128], CuResult> {
    let rank = m.common.dims.len();
    if !(3..=5).contains(&rank) {
        return Err(INVALID_VALUE);
    }
    let bits = [15, 7, 4][rank - 3];
    let range = -(1i32 << bits)..=(1i32 << bits) - 1;
    if m.lower_corner
        .iter()
        .chain(&m.upper_corner)
        .any(|offset| !range.contains(offset))
    {
        return Err(INVALID_VALUE);
    }
    for k in 0..rank - 2 {
        let size = m.common.dims[k + 1] as i64 + i64::from(m.upper_corner[k])
            - i64::from(m.lower_corner[k]);
        if size < 1 {
            return Err(INVALID_VALUE);
        }
    }
    if !(1..=256).contains(&m.channels_per_pixel) || !(1..=1024).contains(&m.pixels_per_column) {
        return Err(INVALID_VALUE);
    }
    let mut desc = check_common(&m.common, 3, m.channels_per_pixel)?;
    desc.im2col = true;
    desc.box_dims[0] = m.channels_per_pixel;
    desc.box_dims[1] = m.pixels_per_column;
    for k in 0..rank - 2 {
        // In range of an i16: the widest range (rank 3) is exactly i16's.
        desc.lower_corner[k] = m.lower_corner[k] as i16;
        desc.upper_corner[k] = m.upper_corner[k] as i16;
    }
    Ok(desc.encode())
}
