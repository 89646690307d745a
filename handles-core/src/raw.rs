//! The raw values a handle can wrap.

use core::fmt::Debug;
use core::hash::Hash;

/// A raw resource value: a pointer, an integer id or a file descriptor.
///
/// The raw value is what the C API hands out and takes back. It must be cheap to copy and to
/// compare, because handles compare and hash by it, and it must convert to a signed
/// pointer-sized integer so that every handle has a uniform `as_intptr()` (for logging, for
/// registries and for languages that pass handles as integers).
pub trait RawValue: Copy + Eq + Hash + Debug + 'static {
    /// The value as a signed pointer-sized integer. Pointers keep their address; integers are
    /// converted with `as`, so a 64-bit id above `isize::MAX` wraps to a negative number.
    fn to_intptr(self) -> isize;
}

impl<T: 'static> RawValue for *mut T {
    #[inline(always)]
    fn to_intptr(self) -> isize {
        self as isize
    }
}

impl<T: 'static> RawValue for *const T {
    #[inline(always)]
    fn to_intptr(self) -> isize {
        self as isize
    }
}

macro_rules! integer_raw_values {
    ($($int:ty),* $(,)?) => {$(
        impl RawValue for $int {
            #[inline(always)]
            fn to_intptr(self) -> isize {
                self as isize
            }
        }
    )*};
}

integer_raw_values!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
