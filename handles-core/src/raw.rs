//! The raw values a handle can wrap.

use core::fmt::Debug;
use core::hash::Hash;

/// A raw resource value: a pointer, an integer id or a file descriptor.
///
/// The raw value is what the C API hands out and takes back. It must be cheap to copy and to
/// compare, because handles compare and hash by it and registries are keyed by it. It converts
/// to a signed pointer-sized integer so that every handle has a uniform `as_intptr()`, for
/// logging and for languages that pass handles as integers; that conversion may lose
/// information, and nothing that identifies resources uses it.
///
/// Implemented for raw pointers and the primitive integers. `Debug` prints the value as the
/// C API would show it: integers (descriptors, ids) in decimal, pointers in hex.
///
/// # Safety
///
/// Registries hand out the owning handle of a raw value by looking it up with `Eq` and `Hash`,
/// so an implementation must make them exact: `a == b` holds exactly when `a` and `b` name the
/// same resource, `Hash` agrees with `Eq`, and both give the same answer for the same values
/// every time. `Debug` and `to_intptr` must not panic.
pub unsafe trait RawValue: Copy + Eq + Hash + Debug + 'static {
    /// The value as a signed pointer-sized integer. Pointers keep their address; integers are
    /// converted with `as`, so a 64-bit id above `isize::MAX` wraps to a negative number, and on
    /// a 32-bit target a 64-bit id is truncated. For display and FFI only.
    fn to_intptr(self) -> isize;
}

// SAFETY: pointer equality and hashing compare addresses, exactly and deterministically.
unsafe impl<T: 'static> RawValue for *mut T {
    #[inline(always)]
    fn to_intptr(self) -> isize {
        self as isize
    }
}

// SAFETY: as for `*mut T`.
unsafe impl<T: 'static> RawValue for *const T {
    #[inline(always)]
    fn to_intptr(self) -> isize {
        self as isize
    }
}

macro_rules! integer_raw_values {
    ($($int:ty),* $(,)?) => {$(
        // SAFETY: integer equality and hashing compare the value, exactly and deterministically.
        unsafe impl RawValue for $int {
            #[inline(always)]
            fn to_intptr(self) -> isize {
                self as isize
            }
        }
    )*};
}

integer_raw_values!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
