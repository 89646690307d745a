//! The options every kind of tensor map shares (swizzle, L2 promotion, fill, interleave), the
//! encode-time rules they share (tiled and im2col), one function per rule, and the conversions
//! of the options to the driver's enums. Each returns the
//! first [`TensorMapProblem`] it finds.

use cudarc::driver::sys;

use crate::error::TensorMapProblem;

type Checked<T = ()> = Result<T, TensorMapProblem>;

/// How shared memory tiles are swizzled (`CUtensorMapSwizzle`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Swizzle {
    /// Row-major tiles, unswizzled.
    #[default]
    None,
    /// 32-byte swizzle (inner box row at most 32 bytes).
    B32,
    /// 64-byte swizzle (inner box row at most 64 bytes).
    B64,
    /// 128-byte swizzle (inner box row at most 128 bytes).
    B128,
}

/// How far the L2 cache fetches beyond each access (`CUtensorMapL2promotion`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum L2Promotion {
    /// No promotion.
    #[default]
    None,
    /// 64 bytes.
    B64,
    /// 128 bytes.
    B128,
    /// 256 bytes.
    B256,
}

/// What loads outside the tensor read (`CUtensorMapFloatOOBfill`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OobFill {
    /// Zeros.
    #[default]
    Zero,
    /// NaN (floating-point element types only; the FMA-ready quiet NaN).
    Nan,
}

/// How the tensor's innermost dimension is interleaved in global memory
/// (`CUtensorMapInterleave`), as in the NC/8HWC8 layouts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Interleave {
    /// Not interleaved.
    #[default]
    None,
    /// 16-byte interleave.
    B16,
    /// 32-byte interleave (the address and the strides must then be multiples of 32).
    B32,
}

/// The rank (the number of global dimensions) is within `min..=max`.
pub(crate) fn rank(dims: &[u64], min: usize, max: usize) -> Checked<usize> {
    let rank = dims.len();
    if (min..=max).contains(&rank) {
        Ok(rank)
    } else {
        Err(TensorMapProblem::Rank { rank, min, max })
    }
}

/// A list of the description (`what`) has the `expected` entries for the rank.
pub(crate) fn length(what: &'static str, len: usize, expected: usize, rank: usize) -> Checked {
    if len == expected {
        Ok(())
    } else {
        Err(TensorMapProblem::Length { what, len, rank })
    }
}

/// Every global dimension is 1 to 2^32 elements.
pub(crate) fn dims(dims: &[u64]) -> Checked {
    match dims
        .iter()
        .enumerate()
        .find(|&(_, &size)| size == 0 || size > 1 << 32)
    {
        Some((axis, &size)) => Err(TensorMapProblem::Dimension { axis, size }),
        None => Ok(()),
    }
}

/// Every global stride (`dims.len() - 1` of them, checked) is a multiple of `multiple`, below
/// 2^40 and at least the bytes the dimensions below it span, for elements of `element` bytes.
pub(crate) fn strides(dims: &[u64], strides: &[u64], element: u64, multiple: u64) -> Checked {
    let mut span = dims[0] * element;
    for (axis, &stride) in strides.iter().enumerate() {
        if !stride.is_multiple_of(multiple) || stride >= 1 << 40 || stride < span {
            return Err(TensorMapProblem::Stride {
                axis,
                stride,
                multiple,
                at_least: span,
            });
        }
        span = stride.saturating_mul(dims[axis + 1]);
    }
    Ok(())
}

/// The traversal strides to pass: `given`, or all 1 when it is empty; each 1 to 8.
pub(crate) fn element_strides(given: &[u32], rank: usize) -> Checked<Vec<u32>> {
    if given.is_empty() {
        return Ok(vec![1; rank]);
    }
    length("element_strides", given.len(), rank, rank)?;
    match given
        .iter()
        .enumerate()
        .find(|&(_, &stride)| !(1..=8).contains(&stride))
    {
        Some((axis, &stride)) => Err(TensorMapProblem::ElementStride { axis, stride }),
        None => Ok(given.to_vec()),
    }
}

/// The inner dimension of what one copy moves (a box row, or an im2col pixel's channels) is
/// a multiple of 16 bytes and no wider than the swizzle span (256 elements of 8 bytes
/// unswizzled).
pub(crate) fn box_inner(bytes: u64, swizzle: Swizzle) -> Checked {
    let max = match swizzle {
        Swizzle::None => 256 * 8,
        Swizzle::B32 => 32,
        Swizzle::B64 => 64,
        Swizzle::B128 => 128,
    };
    if bytes.is_multiple_of(16) && bytes <= max {
        Ok(())
    } else {
        Err(TensorMapProblem::BoxInner { bytes, max })
    }
}

/// The global address is a multiple of `multiple`.
pub(crate) fn alignment(address: u64, multiple: u64) -> Checked {
    if address.is_multiple_of(multiple) {
        Ok(())
    } else {
        Err(TensorMapProblem::Alignment { address, multiple })
    }
}

/// NaN fill only for floating-point elements.
pub(crate) fn fill(fill: OobFill, float: bool) -> Checked {
    if fill == OobFill::Nan && !float {
        Err(TensorMapProblem::NanFill)
    } else {
        Ok(())
    }
}

/// The tensor's last element ends within the `available` bytes: the farthest byte that any
/// in-bounds access can reach (the hardware clips every access to the global dimensions).
pub(crate) fn extent(dims: &[u64], strides: &[u64], element: u64, available: u64) -> Checked {
    let needed = strides
        .iter()
        .zip(&dims[1..])
        .fold(dims[0] * element, |end, (&stride, &size)| {
            end.saturating_add(stride.saturating_mul(size - 1))
        });
    if needed > available {
        Err(TensorMapProblem::Extent { needed, available })
    } else {
        Ok(())
    }
}

/// The driver's swizzle mode.
pub(crate) fn raw_swizzle(swizzle: Swizzle) -> sys::CUtensorMapSwizzle {
    use sys::CUtensorMapSwizzle as Sw;
    match swizzle {
        Swizzle::None => Sw::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => Sw::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => Sw::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => Sw::CU_TENSOR_MAP_SWIZZLE_128B,
    }
}

/// The driver's L2 promotion.
pub(crate) fn raw_l2(promotion: L2Promotion) -> sys::CUtensorMapL2promotion {
    use sys::CUtensorMapL2promotion as L2;
    match promotion {
        L2Promotion::None => L2::CU_TENSOR_MAP_L2_PROMOTION_NONE,
        L2Promotion::B64 => L2::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        L2Promotion::B128 => L2::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        L2Promotion::B256 => L2::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    }
}

/// The driver's out-of-bounds fill.
pub(crate) fn raw_fill(fill: OobFill) -> sys::CUtensorMapFloatOOBfill {
    use sys::CUtensorMapFloatOOBfill as Fill;
    match fill {
        OobFill::Zero => Fill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        OobFill::Nan => Fill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
    }
}

/// The driver's interleave.
pub(crate) fn raw_interleave(interleave: Interleave) -> sys::CUtensorMapInterleave {
    use sys::CUtensorMapInterleave as Il;
    match interleave {
        Interleave::None => Il::CU_TENSOR_MAP_INTERLEAVE_NONE,
        Interleave::B16 => Il::CU_TENSOR_MAP_INTERLEAVE_16B,
        Interleave::B32 => Il::CU_TENSOR_MAP_INTERLEAVE_32B,
    }
}
