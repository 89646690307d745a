//! Im2col tensor descriptions (for [`TensorMap::im2col`](crate::code::TensorMap::im2col),
//! `cuTensorMapEncodeIm2col`): a map over an NWC, NHWC or NDHWC tensor (rank 3 to 5, channels
//! innermost) through which one TMA copy gathers `pixels_per_column` pixels of
//! `channels_per_pixel` channels each, walking the pixels of a bounding box whose corners are
//! offsets from the tensor's spatial extent: the rows of an im2col matrix, for convolutions.
//!
//! Encoding checks what the tiled map's checks check, where the driver documents the same
//! rule (the shared rules live in `tensor_map_rules`): the dimensions, strides that are
//! multiples of 16 bytes (32 with a 32-byte interleave) and cover the dimension below, element
//! strides of 1 to 8, a 16-byte (32-byte) aligned address, NaN fill for floats only, an inner
//! row (the channels of a pixel) that is a multiple of 16 bytes and within the swizzle span
//! when not interleaved, and a described extent within the buffer. And im2col's own: the
//! corners' offsets within the range the rank allows (rank 3: [-2^15, 2^15 - 1], rank 4:
//! [-2^7, 2^7 - 1], rank 5: [-2^4, 2^4 - 1]), a bounding box that is not empty, 1 to 256
//! channels per pixel and 1 to 1024 pixels per column. As with tiled maps, the hardware
//! clips every access to the global dimensions (pixels outside them load the fill), so a
//! kernel that uses the map only through TMA instructions stays within the buffer.
//!
//! The simulator (`cuda-sim`) validates and encodes im2col maps as the driver does, but
//! its PTX interpreter runs no im2col copy: an im2col-mode `cp.async.bulk.tensor` is refused
//! when the module loads, and a tile-mode copy through an im2col map faults as
//! `CUDA_ERROR_NOT_SUPPORTED`. Kernels using im2col maps run on a GPU only.

use crate::code::tensor_map_rules::{self as rules, Interleave, L2Promotion, OobFill, Swizzle};
use crate::error::TensorMapProblem;

/// An im2col tensor: its shape in global memory, the pixel bounding box and what one TMA copy
/// gathers. Lists are innermost dimension first: dimensions C, W, H, D, N (W, H, D as far as
/// the rank has them), corners W, H, D.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Im2colTensor {
    /// Elements in each dimension (rank 3 to 5): channels first, images last.
    pub dims: Vec<u64>,
    /// Bytes between consecutive indices of dimensions 1 and up (rank - 1 entries), each a
    /// multiple of 16 (32 with [`Interleave::B32`]).
    pub strides: Vec<u64>,
    /// The bounding box's lower corner: an offset from pixel 0 in each spatial dimension
    /// (rank - 2 entries; negative for padding).
    pub lower_corner: Vec<i32>,
    /// The bounding box's upper corner: an offset from the last pixel in each spatial
    /// dimension (rank - 2 entries).
    pub upper_corner: Vec<i32>,
    /// Channels each pixel contributes, 1 to 256.
    pub channels_per_pixel: u32,
    /// Pixels one copy gathers, 1 to 1024.
    pub pixels_per_column: u32,
    /// Traversal stride in each dimension, 1 to 8 (empty: all 1).
    pub element_strides: Vec<u32>,
    /// Interleaved layout.
    pub interleave: Interleave,
    /// Shared-memory swizzle.
    pub swizzle: Swizzle,
    /// L2 promotion.
    pub l2_promotion: L2Promotion,
    /// Out-of-bounds fill for loads.
    pub oob_fill: OobFill,
}

impl Im2colTensor {
    /// A packed NHWC tensor of `images` images of `height` x `width` pixels of `channels`
    /// elements of `element_bytes` bytes, its bounding box the whole image (both corners 0),
    /// gathered `pixels_per_column` pixels of `channels_per_pixel` channels at a time.
    #[allow(clippy::too_many_arguments)]
    pub fn nhwc(
        channels: u64,
        width: u64,
        height: u64,
        images: u64,
        element_bytes: usize,
        channels_per_pixel: u32,
        pixels_per_column: u32,
    ) -> Im2colTensor {
        let pixel = channels.saturating_mul(element_bytes as u64);
        let row = pixel.saturating_mul(width);
        Im2colTensor {
            dims: vec![channels, width, height, images],
            strides: vec![pixel, row, row.saturating_mul(height)],
            lower_corner: vec![0, 0],
            upper_corner: vec![0, 0],
            channels_per_pixel,
            pixels_per_column,
            element_strides: Vec::new(),
            interleave: Interleave::None,
            swizzle: Swizzle::None,
            l2_promotion: L2Promotion::None,
            oob_fill: OobFill::Zero,
        }
    }

    /// Checks the description for elements of `element` bytes at `address`, in a buffer of
    /// `available` bytes; returns the element strides to pass (all 1 when none are given).
    pub(crate) fn check(
        &self,
        element: u64,
        float: bool,
        address: u64,
        available: u64,
    ) -> Result<Vec<u32>, TensorMapProblem> {
        let rank = rules::rank(&self.dims, 3, 5)?;
        rules::length("strides", self.strides.len(), rank - 1, rank)?;
        rules::length("lower_corner", self.lower_corner.len(), rank - 2, rank)?;
        rules::length("upper_corner", self.upper_corner.len(), rank - 2, rank)?;
        let element_strides = rules::element_strides(&self.element_strides, rank)?;
        rules::dims(&self.dims)?;
        let multiple = if self.interleave == Interleave::B32 {
            32
        } else {
            16
        };
        rules::strides(&self.dims, &self.strides, element, multiple)?;
        let bits = match rank {
            3 => 15,
            4 => 7,
            _ => 4,
        };
        let (min, max) = (-(1i32 << bits), (1i32 << bits) - 1);
        for (which, corner) in [
            ("lower_corner", &self.lower_corner),
            ("upper_corner", &self.upper_corner),
        ] {
            if let Some((axis, &offset)) = corner
                .iter()
                .enumerate()
                .find(|&(_, offset)| !(min..=max).contains(offset))
            {
                return Err(TensorMapProblem::Corner {
                    which,
                    axis,
                    offset,
                    min,
                    max,
                });
            }
        }
        for axis in 0..rank - 2 {
            let size = self.dims[axis + 1] as i64 + i64::from(self.upper_corner[axis])
                - i64::from(self.lower_corner[axis]);
            if size < 1 {
                return Err(TensorMapProblem::EmptyPixelBox { axis, size });
            }
        }
        if !(1..=256).contains(&self.channels_per_pixel) {
            return Err(TensorMapProblem::ChannelsPerPixel {
                channels: self.channels_per_pixel,
            });
        }
        if !(1..=1024).contains(&self.pixels_per_column) {
            return Err(TensorMapProblem::PixelsPerColumn {
                pixels: self.pixels_per_column,
            });
        }
        if self.interleave == Interleave::None {
            rules::box_inner(u64::from(self.channels_per_pixel) * element, self.swizzle)?;
        }
        rules::alignment(address, multiple)?;
        rules::fill(self.oob_fill, float)?;
        rules::extent(&self.dims, &self.strides, element, available)?;
        Ok(element_strides)
    }
}
