//! Kernel parameters: the sealed [`KernelParam`] types (scalars and [`Buffer`]) and the tuples
//! of them that make a kernel's parameter list, each fixing the exact bytes the driver copies.

use std::ffi::c_void;

use crate::code::conditional::{Conditional, ConditionalHandle};
use crate::code::tensor_map::{TensorElement, TensorMap};
use crate::error::{Error, Result};
use crate::exec::stream::StreamHandle;
use crate::memory::device_ptr::DevicePtrHandle;
use crate::memory::typed::{DeviceBuffer, Elements};

mod sealed {
    pub trait Sealed {}
}

/// A kernel parameter type: a scalar, or [`Buffer`] for a device pointer. Sealed: each
/// implementation fixes the exact bytes the driver copies into the parameter.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel parameter type",
    label = "not a kernel parameter type",
    note = "kernel parameters are the scalars u8, i8, u16, i16, u32, i32, u64, i64, f32 and \
            f64, `Buffer` for a device pointer (passed as `&DevicePtrHandle`), \
            `Elements<T>` for a typed buffer (passed as `&DeviceBuffer<T>`), `TensorMap<T>` for \
            a tensor map (passed as `&TensorMap<T>`), and `Conditional` for a graph's \
            conditional handle (passed as `&ConditionalHandle`)"
)]
pub trait KernelParam: sealed::Sealed {
    /// What a launch passes for this parameter.
    type Arg<'a>;
    /// The parameter's size in bytes.
    const SIZE: usize;
    /// The parameter's bytes, native-endian, in the first [`Self::SIZE`] bytes (for a
    /// parameter of at most 8 bytes).
    fn bytes(arg: &Self::Arg<'_>) -> [u8; 8];
    /// For a parameter of more than 8 bytes: its [`Self::SIZE`] bytes, which live as long as
    /// `arg` (the launch passes a pointer to them instead of [`Self::bytes`]).
    fn large_bytes<'a>(_arg: &Self::Arg<'a>) -> Option<&'a [u8]> {
        None
    }
    /// Reports a buffer argument as used by work queued on `stream`.
    fn note_use(_arg: &Self::Arg<'_>, _stream: &StreamHandle) -> Result<()> {
        Ok(())
    }
    /// The buffer a buffer argument passes, for a graph to keep.
    fn buffer<'a>(_arg: &Self::Arg<'a>) -> Option<&'a DevicePtrHandle> {
        None
    }
    /// The conditional handle a [`Conditional`] argument passes, for its graph check.
    fn conditional<'a>(_arg: &Self::Arg<'a>) -> Option<&'a ConditionalHandle> {
        None
    }
    /// Whether the argument holds a number of elements that [`crate::code::check`]'s rules
    /// compare with (an [`Elements<T>`] parameter).
    const HOLDS_ELEMENTS: bool = false;
    /// Whether the argument can be a count for [`crate::code::check`]'s rules (an integer
    /// scalar).
    const IS_COUNT: bool = false;
    /// The elements an [`Elements<T>`] argument holds.
    fn elements(_arg: &Self::Arg<'_>) -> Option<usize> {
        None
    }
    /// An integer argument as a count: its value, a negative one as a C kernel compares it
    /// with an unsigned index (its bits as the unsigned type of its width, a huge number).
    fn count(_arg: &Self::Arg<'_>) -> Option<u64> {
        None
    }
}

/// A scalar as a count of elements, for [`KernelParam::count`].
trait AsCount: Copy {
    const IS_COUNT: bool;
    fn as_count(self) -> Option<u64>;
}

macro_rules! counts {
    ($($int:ty => $unsigned:ty),* $(,)?) => {$(
        impl AsCount for $int {
            const IS_COUNT: bool = true;
            #[inline]
            fn as_count(self) -> Option<u64> {
                // The bits as the unsigned type of the same width: what C compares with an
                // unsigned index after the usual conversions.
                Some(self as $unsigned as u64)
            }
        }
    )*};
}
counts!(u8 => u8, i8 => u8, u16 => u16, i16 => u16, u32 => u32, i32 => u32, u64 => u64, i64 => u64);

macro_rules! not_counts {
    ($($float:ty),* $(,)?) => {$(
        impl AsCount for $float {
            const IS_COUNT: bool = false;
            #[inline]
            fn as_count(self) -> Option<u64> {
                None
            }
        }
    )*};
}
not_counts!(f32, f64);

macro_rules! scalar_params {
    ($($scalar:ty),* $(,)?) => {$(
        impl sealed::Sealed for $scalar {}
        impl KernelParam for $scalar {
            type Arg<'a> = $scalar;
            const SIZE: usize = std::mem::size_of::<$scalar>();
            #[inline]
            fn bytes(arg: &$scalar) -> [u8; 8] {
                let mut bytes = [0u8; 8];
                bytes[..Self::SIZE].copy_from_slice(&arg.to_ne_bytes());
                bytes
            }
            const IS_COUNT: bool = <$scalar as AsCount>::IS_COUNT;
            #[inline]
            fn count(arg: &$scalar) -> Option<u64> {
                arg.as_count()
            }
        }
    )*};
}
scalar_params!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// A device-pointer parameter: the launch passes a `&DevicePtrHandle` (an allocation, or a
/// [`DevicePtrHandle::view`] of part of one), and the kernel receives its address.
#[derive(Clone, Copy, Debug)]
pub struct Buffer;

impl sealed::Sealed for Buffer {}
impl KernelParam for Buffer {
    type Arg<'a> = &'a DevicePtrHandle;
    const SIZE: usize = 8;
    #[inline]
    fn bytes(arg: &&DevicePtrHandle) -> [u8; 8] {
        arg.as_cu().to_ne_bytes()
    }
    #[inline]
    fn note_use(arg: &&DevicePtrHandle, stream: &StreamHandle) -> Result<()> {
        arg.record_guarded_use(stream)
    }
    fn buffer<'a>(arg: &Self::Arg<'a>) -> Option<&'a DevicePtrHandle> {
        Some(*arg)
    }
}

impl<T: bytemuck::Pod> sealed::Sealed for Elements<T> {}
impl<T: bytemuck::Pod> KernelParam for Elements<T> {
    type Arg<'a> = &'a DeviceBuffer<T>;
    const SIZE: usize = 8;
    #[inline]
    fn bytes(arg: &&DeviceBuffer<T>) -> [u8; 8] {
        arg.as_bytes().as_cu().to_ne_bytes()
    }
    #[inline]
    fn note_use(arg: &&DeviceBuffer<T>, stream: &StreamHandle) -> Result<()> {
        arg.as_bytes().record_guarded_use(stream)
    }
    fn buffer<'a>(arg: &Self::Arg<'a>) -> Option<&'a DevicePtrHandle> {
        Some(arg.as_bytes())
    }
    const HOLDS_ELEMENTS: bool = true;
    #[inline]
    fn elements(arg: &&DeviceBuffer<T>) -> Option<usize> {
        Some(arg.len())
    }
}

impl sealed::Sealed for Conditional {}
impl KernelParam for Conditional {
    type Arg<'a> = &'a ConditionalHandle;
    const SIZE: usize = 8;
    #[inline]
    fn bytes(arg: &&ConditionalHandle) -> [u8; 8] {
        arg.as_cu().to_ne_bytes()
    }
    fn conditional<'a>(arg: &Self::Arg<'a>) -> Option<&'a ConditionalHandle> {
        Some(*arg)
    }
}

impl<T: TensorElement> sealed::Sealed for TensorMap<T> {}
impl<T: TensorElement> KernelParam for TensorMap<T> {
    type Arg<'a> = &'a TensorMap<T>;
    const SIZE: usize = 128;
    #[inline]
    fn bytes(_: &&TensorMap<T>) -> [u8; 8] {
        [0; 8]
    }
    #[inline]
    fn large_bytes<'a>(arg: &Self::Arg<'a>) -> Option<&'a [u8]> {
        Some(arg.as_bytes())
    }
    #[inline]
    fn note_use(arg: &&TensorMap<T>, stream: &StreamHandle) -> Result<()> {
        arg.buffer().as_bytes().record_guarded_use(stream)
    }
    fn buffer<'a>(arg: &Self::Arg<'a>) -> Option<&'a DevicePtrHandle> {
        Some(arg.buffer().as_bytes())
    }
}

/// A kernel's parameter list: a tuple of [`KernelParam`] types, such as `(Buffer, u32, u32)`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel parameter list",
    label = "not a tuple of up to 12 kernel parameter types",
    note = "kernel parameters are the scalars u8, i8, u16, i16, u32, i32, u64, i64, f32 and \
            f64, `Buffer` for a device pointer and `Elements<T>` for a typed buffer; a list is \
            a tuple of them, such as `(Buffer, u32)` or `(Elements<f32>, u32)`"
)]
pub trait KernelParams: sealed::Sealed {
    /// The arguments a launch passes: the tuple of each parameter's [`KernelParam::Arg`].
    type Args<'a>;
    /// Each parameter's size in bytes, in order.
    fn sizes() -> Vec<usize>;
    /// Calls `launch` with the driver's `kernelParams` array for `args`.
    fn with_pointers<R>(args: &Self::Args<'_>, launch: impl FnOnce(*mut *mut c_void) -> R) -> R;
    /// Reports every buffer argument as used on `stream`; each is reported even if another
    /// fails (an unreported use could be freed unordered).
    fn note_uses(args: &Self::Args<'_>, stream: &StreamHandle) -> Result<()>;
    /// Calls `each` with every buffer argument.
    fn for_each_buffer<'a>(args: &Self::Args<'a>, each: impl FnMut(&'a DevicePtrHandle));
    /// Calls `each` with every buffer argument until it fails; its first error.
    fn try_each_buffer<'a>(
        args: &Self::Args<'a>,
        each: impl FnMut(&'a DevicePtrHandle) -> Result<()>,
    ) -> Result<()>;
    /// Calls `each` with every conditional-handle argument.
    fn for_each_conditional<'a>(args: &Self::Args<'a>, each: impl FnMut(&'a ConditionalHandle));
    /// Whether parameter `index` is one whose elements [`crate::code::check`]'s rules count
    /// (see [`KernelParam::HOLDS_ELEMENTS`]); `false` past the last parameter.
    fn holds_elements(index: usize) -> bool;
    /// Whether parameter `index` can be a count (see [`KernelParam::IS_COUNT`]); `false` past
    /// the last parameter.
    fn is_count(index: usize) -> bool;
    /// The elements argument `index` holds ([`KernelParam::elements`]).
    fn elements_at(args: &Self::Args<'_>, index: usize) -> Option<usize>;
    /// Argument `index` as a count ([`KernelParam::count`]).
    fn count_at(args: &Self::Args<'_>, index: usize) -> Option<u64>;
}

impl sealed::Sealed for () {}
impl KernelParams for () {
    type Args<'a> = ();
    fn sizes() -> Vec<usize> {
        Vec::new()
    }
    fn with_pointers<R>(_: &(), launch: impl FnOnce(*mut *mut c_void) -> R) -> R {
        launch(std::ptr::null_mut())
    }
    fn note_uses(_: &(), _: &StreamHandle) -> Result<()> {
        Ok(())
    }
    fn for_each_buffer<'a>(_: &(), _: impl FnMut(&'a DevicePtrHandle)) {}
    fn try_each_buffer<'a>(_: &(), _: impl FnMut(&'a DevicePtrHandle) -> Result<()>) -> Result<()> {
        Ok(())
    }
    fn for_each_conditional<'a>(_: &(), _: impl FnMut(&'a ConditionalHandle)) {}
    fn holds_elements(_: usize) -> bool {
        false
    }
    fn is_count(_: usize) -> bool {
        false
    }
    fn elements_at(_: &(), _: usize) -> Option<usize> {
        None
    }
    fn count_at(_: &(), _: usize) -> Option<u64> {
        None
    }
}

macro_rules! param_tuples {
    ($( ($($param:ident $index:tt),+) )*) => {$(
        impl<$($param: KernelParam),+> sealed::Sealed for ($($param,)+) {}
        impl<$($param: KernelParam),+> KernelParams for ($($param,)+) {
            type Args<'a> = ($($param::Arg<'a>,)+);
            fn sizes() -> Vec<usize> {
                vec![$($param::SIZE),+]
            }
            #[inline]
            fn with_pointers<R>(
                args: &Self::Args<'_>,
                launch: impl FnOnce(*mut *mut c_void) -> R,
            ) -> R {
                let mut values = [$($param::bytes(&args.$index)),+];
                let mut pointers = values.each_mut().map(|value| value.as_mut_ptr().cast::<c_void>());
                $(
                    if let Some(large) = $param::large_bytes(&args.$index) {
                        // The driver only reads through the parameter pointers.
                        pointers[$index] = large.as_ptr().cast_mut().cast::<c_void>();
                    }
                )+
                launch(pointers.as_mut_ptr())
            }
            #[inline]
            fn note_uses(args: &Self::Args<'_>, stream: &StreamHandle) -> Result<()> {
                let mut status = Ok(());
                $(
                    if let Err(error) = $param::note_use(&args.$index, stream) {
                        status = status.and(Err(error));
                    }
                )+
                status
            }
            fn for_each_buffer<'a>(args: &Self::Args<'a>, mut each: impl FnMut(&'a DevicePtrHandle)) {
                $(
                    if let Some(buffer) = $param::buffer(&args.$index) {
                        each(buffer);
                    }
                )+
            }
            #[inline]
            fn try_each_buffer<'a>(
                args: &Self::Args<'a>,
                mut each: impl FnMut(&'a DevicePtrHandle) -> Result<()>,
            ) -> Result<()> {
                $(
                    if let Some(buffer) = $param::buffer(&args.$index) {
                        each(buffer)?;
                    }
                )+
                Ok(())
            }
            fn for_each_conditional<'a>(
                args: &Self::Args<'a>,
                mut each: impl FnMut(&'a ConditionalHandle),
            ) {
                $(
                    if let Some(handle) = $param::conditional(&args.$index) {
                        each(handle);
                    }
                )+
            }
            fn holds_elements(index: usize) -> bool {
                [$($param::HOLDS_ELEMENTS),+].get(index).copied().unwrap_or(false)
            }
            fn is_count(index: usize) -> bool {
                [$($param::IS_COUNT),+].get(index).copied().unwrap_or(false)
            }
            #[inline]
            fn elements_at(args: &Self::Args<'_>, index: usize) -> Option<usize> {
                $(
                    if index == $index {
                        return $param::elements(&args.$index);
                    }
                )+
                None
            }
            #[inline]
            fn count_at(args: &Self::Args<'_>, index: usize) -> Option<u64> {
                $(
                    if index == $index {
                        return $param::count(&args.$index);
                    }
                )+
                None
            }
        }
    )*};
}
param_tuples! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
    (A 0, B 1, C 2, D 3, E 4)
    (A 0, B 1, C 2, D 3, E 4, F 5)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11)
}

/// Refuses a stream launch (or a capture) of a kernel with a [`Conditional`] argument: only a
/// launch of the handle's own graph gives a set of the condition a meaning.
pub(crate) fn refuse_on_streams<P: KernelParams>(args: &P::Args<'_>) -> Result<()> {
    let mut refused = Ok(());
    P::for_each_conditional(args, |handle| {
        refused = Err(Error::ForeignConditional {
            handle_graph: handle.graph_id(),
            graph: 0,
            place: "in a launch on a stream",
        });
    });
    refused
}
