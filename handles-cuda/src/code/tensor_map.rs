//! Tensor maps: the 128-byte descriptors (`CUtensorMap`) through which the tensor memory
//! accelerator (TMA, compute capability 9.0 and later) copies tiles between global and shared
//! memory, passed to a kernel as a `const __grid_constant__ CUtensorMap` parameter.
//!
//! A [`TensorMap<T>`] is encoded from a typed buffer ([`DeviceBuffer<T>`]; the element type
//! gives the map's data type) and a [`TiledTensor`] description (`cuTensorMapEncodeTiled`),
//! or an [`Im2colTensor`] one ([`TensorMap::im2col`], `cuTensorMapEncodeIm2col`; see
//! `tensor_map_im2col`). The rules both share are checked by one function each
//! (`tensor_map_rules`).
//!
//! Everything the driver would refuse, and everything that would let the map reach past the
//! buffer, is refused first as a [`TensorMapProblem`]; for a tiled map: the rank, the dimensions, strides that
//! are not multiples of 16 bytes or that overlap the dimension below, box dimensions above
//! 256 or an inner box row that is not a multiple of 16 bytes (or wider than the swizzle
//! span), element strides outside 1..=8, a global address that is not 16-byte aligned, and a
//! described extent longer than the buffer. The hardware clips every TMA access to the global
//! dimensions (loads outside them are filled, stores outside them dropped), so within that
//! extent a kernel that uses the map only through TMA instructions stays in the buffer.
//!
//! The map keeps its buffer: it holds a clone of the handle, a launch reports the buffer as
//! used on its stream like a buffer argument, and a graph that captures the launch attaches
//! it. The descriptor lives in a box of the type's own alignment (64 bytes, 128 with CUDA 13
//! bindings), and a launch passes a pointer to it: the driver copies the 128 bytes into the
//! kernel's parameter space, whose `.align 64` the kernel declares. The driver encodes in a
//! context (measured: `CUDA_ERROR_INVALID_CONTEXT` without one on driver 580): the caller's
//! current one, or else the primary context of the buffer's device.

use cudarc::driver::sys;

use crate::code::tensor_map_im2col::Im2colTensor;
use crate::code::tensor_map_rules::{self as rules, L2Promotion, OobFill, Swizzle};
use crate::driver::call::driver;
use crate::driver::current::in_context;
use crate::driver::load::ensure_loaded;
use crate::error::{Error, Result, TensorMapProblem};
use crate::exec::context::{ContextHandle, in_current_or_primary};
use crate::memory::typed::DeviceBuffer;

mod sealed {
    pub trait Sealed {}
}

/// An element type a tensor map can describe: its `CUtensorMapDataType`.
pub trait TensorElement: bytemuck::Pod + sealed::Sealed {
    /// The map's data type for this element.
    const DATA_TYPE: sys::CUtensorMapDataType;
    /// Whether it is a floating-point type (NaN fill is allowed).
    const FLOAT: bool;
}

macro_rules! elements {
    ($($t:ty => $v:ident, $float:literal;)*) => {$(
        impl sealed::Sealed for $t {}
        impl TensorElement for $t {
            const DATA_TYPE: sys::CUtensorMapDataType =
                sys::CUtensorMapDataType::$v;
            const FLOAT: bool = $float;
        }
    )*};
}
elements! {
    u8 => CU_TENSOR_MAP_DATA_TYPE_UINT8, false;
    u16 => CU_TENSOR_MAP_DATA_TYPE_UINT16, false;
    u32 => CU_TENSOR_MAP_DATA_TYPE_UINT32, false;
    i32 => CU_TENSOR_MAP_DATA_TYPE_INT32, false;
    u64 => CU_TENSOR_MAP_DATA_TYPE_UINT64, false;
    i64 => CU_TENSOR_MAP_DATA_TYPE_INT64, false;
    f32 => CU_TENSOR_MAP_DATA_TYPE_FLOAT32, true;
    f64 => CU_TENSOR_MAP_DATA_TYPE_FLOAT64, true;
}

/// A tiled tensor: its shape in global memory and the box (tile) a TMA copy moves. Lists are
/// innermost dimension first.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TiledTensor {
    /// Elements in each dimension (rank 1 to 5).
    pub dims: Vec<u64>,
    /// Bytes between consecutive indices of dimensions 1 and up (rank - 1 entries), each a
    /// multiple of 16.
    pub strides: Vec<u64>,
    /// The box: elements in each dimension, each 1 to 256.
    pub box_dims: Vec<u32>,
    /// Traversal stride in each dimension, 1 to 8 (empty: all 1).
    pub element_strides: Vec<u32>,
    /// Shared-memory swizzle.
    pub swizzle: Swizzle,
    /// L2 promotion.
    pub l2_promotion: L2Promotion,
    /// Out-of-bounds fill for loads.
    pub oob_fill: OobFill,
}

impl TiledTensor {
    /// A row-major matrix of `rows` rows of `columns` elements of `element_bytes` bytes, rows
    /// packed (stride = `columns * element_bytes`), copied in boxes of `box_rows` x
    /// `box_columns`.
    pub fn matrix(
        columns: u64,
        rows: u64,
        element_bytes: usize,
        box_columns: u32,
        box_rows: u32,
    ) -> TiledTensor {
        TiledTensor {
            dims: vec![columns, rows],
            strides: vec![columns.saturating_mul(element_bytes as u64)],
            box_dims: vec![box_columns, box_rows],
            element_strides: Vec::new(),
            swizzle: Swizzle::None,
            l2_promotion: L2Promotion::None,
            oob_fill: OobFill::Zero,
        }
    }

    /// Checks the description for elements of `element` bytes at `address`, in a buffer of
    /// `available` bytes; returns the element strides to pass (all 1 when none are given).
    fn check(
        &self,
        element: u64,
        float: bool,
        address: u64,
        available: u64,
    ) -> Result<Vec<u32>, TensorMapProblem> {
        let rank = rules::rank(&self.dims, 1, 5)?;
        rules::length("strides", self.strides.len(), rank - 1, rank)?;
        rules::length("box_dims", self.box_dims.len(), rank, rank)?;
        let element_strides = rules::element_strides(&self.element_strides, rank)?;
        rules::dims(&self.dims)?;
        rules::strides(&self.dims, &self.strides, element, 16)?;
        for (axis, &size) in self.box_dims.iter().enumerate() {
            if size == 0 || size > 256 {
                return Err(TensorMapProblem::BoxDimension { axis, size });
            }
        }
        rules::box_inner(u64::from(self.box_dims[0]) * element, self.swizzle)?;
        rules::alignment(address, 16)?;
        rules::fill(self.oob_fill, float)?;
        rules::extent(&self.dims, &self.strides, element, available)?;
        Ok(element_strides)
    }
}

/// Runs `encode` with a context current, as `cuTensorMapEncodeTiled` needs
/// (`CUDA_ERROR_INVALID_CONTEXT` without one): the caller's, kept alive for the call, or else
/// the primary context of the device the memory at `address` belongs to (asked in device 0's
/// primary context; host memory is encoded in device 0's).
fn in_a_context(address: u64, encode: impl FnOnce() -> Result<()>) -> Result<()> {
    let device_of_address = || {
        ContextHandle::with_primary(0, |context| {
            in_context(context.as_cu(), || {
                let mut ordinal: std::ffi::c_int = 0;
                // SAFETY: a context is current; `ordinal` is a valid out-pointer of the
                // attribute's type (an int); the address is of a live allocation.
                unsafe {
                    driver!(cuPointerGetAttribute(
                        (&raw mut ordinal).cast(),
                        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                        address
                    ))
                }?;
                Ok(usize::try_from(ordinal).unwrap_or(0))
            })
        })?
    };
    in_current_or_primary(device_of_address, encode)
}

/// An encoded tensor map over a typed buffer, passed to kernels as a `const __grid_constant__
/// CUtensorMap` parameter (this type is its own [`KernelParam`](crate::code::KernelParam):
/// a launch passes `&TensorMap<T>`).
///
/// Ownership: owns the descriptor; keeps alive: the buffer (a clone of its handle), which
/// every launch that passes the map reports as used on its stream.
pub struct TensorMap<T: TensorElement> {
    map: Box<sys::CUtensorMap>,
    buffer: DeviceBuffer<T>,
    description: TensorDescription,
}

/// What a [`TensorMap`] was encoded from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TensorDescription {
    /// A tiled map ([`TensorMap::tiled`]).
    Tiled(TiledTensor),
    /// An im2col map ([`TensorMap::im2col`]).
    Im2col(Im2colTensor),
}

impl<T: TensorElement> Clone for TensorMap<T> {
    fn clone(&self) -> Self {
        TensorMap {
            map: self.map.clone(),
            buffer: self.buffer.clone(),
            description: self.description.clone(),
        }
    }
}

impl<T: TensorElement> std::fmt::Debug for TensorMap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorMap")
            .field("buffer", &self.buffer)
            .field("description", &self.description)
            .finish()
    }
}

impl<T: TensorElement> TensorMap<T> {
    /// Encodes a tiled map of `buffer` (`cuTensorMapEncodeTiled`), after checking the
    /// description against the driver's rules and the buffer's length.
    pub fn tiled(buffer: &DeviceBuffer<T>, description: &TiledTensor) -> Result<Self> {
        let d = description;
        Self::encode(
            buffer,
            |element, float, address, available| d.check(element, float, address, available),
            |map, address, element_strides| {
                // SAFETY: `map` is a writable, aligned descriptor; every array holds `rank`
                // entries (`rank - 1` for the strides), as checked; the address is the
                // buffer's, alive while `buffer` is (and kept by the map); a context is
                // current.
                unsafe {
                    driver!(cuTensorMapEncodeTiled(
                        map,
                        T::DATA_TYPE,
                        d.dims.len() as u32,
                        address as *mut std::ffi::c_void,
                        d.dims.as_ptr(),
                        d.strides.as_ptr(),
                        d.box_dims.as_ptr(),
                        element_strides.as_ptr(),
                        sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                        rules::raw_swizzle(d.swizzle),
                        rules::raw_l2(d.l2_promotion),
                        rules::raw_fill(d.oob_fill)
                    ))
                }
            },
            || TensorDescription::Tiled(d.clone()),
        )
    }

    /// Encodes an im2col map of `buffer` (`cuTensorMapEncodeIm2col`), after checking the
    /// description against the driver's rules and the buffer's length.
    pub fn im2col(buffer: &DeviceBuffer<T>, description: &Im2colTensor) -> Result<Self> {
        let d = description;
        Self::encode(
            buffer,
            |element, float, address, available| d.check(element, float, address, available),
            |map, address, element_strides| {
                // SAFETY: `map` is a writable, aligned descriptor; the dimension and
                // element-stride arrays hold `rank` entries, the strides `rank - 1` and each
                // corner `rank - 2`, as checked; the address is the buffer's, alive while
                // `buffer` is (and kept by the map); a context is current.
                unsafe {
                    driver!(cuTensorMapEncodeIm2col(
                        map,
                        T::DATA_TYPE,
                        d.dims.len() as u32,
                        address as *mut std::ffi::c_void,
                        d.dims.as_ptr(),
                        d.strides.as_ptr(),
                        d.lower_corner.as_ptr(),
                        d.upper_corner.as_ptr(),
                        d.channels_per_pixel,
                        d.pixels_per_column,
                        element_strides.as_ptr(),
                        rules::raw_interleave(d.interleave),
                        rules::raw_swizzle(d.swizzle),
                        rules::raw_l2(d.l2_promotion),
                        rules::raw_fill(d.oob_fill)
                    ))
                }
            },
            || TensorDescription::Im2col(d.clone()),
        )
    }

    /// What both encoders do: `check` the description for elements of `T` at the buffer's
    /// address and length (it returns the element strides to pass), then `call` the driver
    /// with a fresh descriptor, the address and those strides, in a context; the map keeps
    /// the buffer and the `description`.
    fn encode(
        buffer: &DeviceBuffer<T>,
        check: impl FnOnce(u64, bool, u64, u64) -> Result<Vec<u32>, TensorMapProblem>,
        call: impl FnOnce(&mut sys::CUtensorMap, u64, &[u32]) -> Result<()>,
        description: impl FnOnce() -> TensorDescription,
    ) -> Result<Self> {
        ensure_loaded()?;
        let element = std::mem::size_of::<T>() as u64;
        let address = buffer.as_bytes().as_cu();
        let available = buffer.len() as u64 * element;
        let element_strides = check(element, T::FLOAT, address, available)
            .map_err(|what| Error::BadTensorMap { what })?;
        let mut map = Box::new(sys::CUtensorMap { opaque: [0; 16] });
        in_a_context(address, || call(&mut map, address, &element_strides))?;
        Ok(TensorMap {
            map,
            buffer: buffer.clone(),
            description: description(),
        })
    }

    /// The buffer the map describes.
    pub fn buffer(&self) -> &DeviceBuffer<T> {
        &self.buffer
    }

    /// The description it was encoded from.
    pub fn description(&self) -> &TensorDescription {
        &self.description
    }

    /// The 128 bytes of the encoded descriptor.
    pub fn as_bytes(&self) -> &[u8; 128] {
        bytemuck::cast_ref(&self.map.opaque)
    }
}
