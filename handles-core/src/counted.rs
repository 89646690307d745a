//! The handle's heap allocation and its reference counts: an `Arc` cut to what the handles
//! need, so that the last drop costs one atomic operation where `Arc`'s costs two.
//!
//! A [`Counted`] is one strong reference to an allocation holding two counts and a value; a
//! [`CountedWeak`] is one weak reference. The counts follow `Arc`'s protocol: `strong` counts
//! the strong references, `weak` the weak ones plus one that all strong references hold
//! together. Both live in one 64-bit word (strong in the low half, weak in the high half), so
//! one load reads both at one instant. What differs from `Arc` is the end:
//!
//! - Dropping a strong reference that is not the last is one release decrement, as for `Arc`.
//!   The last one is told so by that same decrement (an acquire fence follows) and comes back
//!   as a [`Last`]: an owned, exclusive reference to a value no one else can reach, which the
//!   iterative release (`release.rs`) drops in place or parks, without a second look at the
//!   count. (`Arc` gives no such thing: the release had to load the count before dropping.)
//! - A handle that is the only reference of any kind (one load reads strong 1 and weak 1: no
//!   other strong reference to clone from or to downgrade, no weak one to upgrade, at that
//!   instant) is the last without a decrement: nothing can make another reference from then on
//!   but this one, which its owner is dropping. The two counts must be read together: read one
//!   after the other, another thread's clone could downgrade and drop in between.
//! - When the value has been dropped, the allocation is freed at once if `weak` reads 1 (no
//!   weak reference exists), else the strong side's share of `weak` is given up by a decrement,
//!   as `Arc` always does. The load is enough: with no strong reference left (the count is 0,
//!   so [`CountedWeak::upgrade`] fails) no weak reference can be made (a weak one is made only
//!   from a strong one, or cloned from a weak one, and there is none), so a count of 1 cannot
//!   grow; and the acquire load synchronises with the release decrement of the last weak
//!   reference dropped, so nothing it did is still to come.
//!
//! The orderings are `Arc`'s: increments relaxed (a new reference is made from an existing one,
//! which keeps the allocation), decrements release, and an acquire fence before the value or the
//! allocation goes, so every use through another reference happens before. A count past
//! 2^31 aborts the process, as `Arc` does past `isize::MAX`, before it could carry into the
//! other half.
//!
//! The word needs 64-bit atomics, which every host CUDA runs on has.
//!
//! Under `--cfg loom` the counts are loom's atomics (`tests/loom_counted.rs` model-checks the
//! protocol through the public handle API); miri runs the handle tests on the real ones.

use std::alloc::Layout;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering, fence};

use crate::spare;

/// The most references a count may hold; one more aborts (as `Arc`), long before it could
/// carry into the other half of the word.
const MAX_COUNT: u64 = 1 << 31;

/// The allocation: the two counts, then the value (dropped in place by the last strong
/// reference, before the allocation goes).
struct Inner<T> {
    counts: Counts,
    value: ManuallyDrop<T>,
}

/// The two counts of an allocation, in one word: strong in the low 32 bits, weak (with the
/// strong side's share) in the high 32 bits.
struct Counts {
    word: AtomicU64,
}

/// One strong reference, in the word.
const STRONG: u64 = 1;
/// One weak reference, in the word.
const WEAK: u64 = 1 << 32;

/// The strong count in `word`.
#[inline(always)]
fn strong(word: u64) -> u64 {
    word & (WEAK - 1)
}

/// The weak count in `word` (the strong side's share included).
#[inline(always)]
fn weak(word: u64) -> u64 {
    word >> 32
}

/// One strong reference: keeps the value alive.
pub(crate) struct Counted<T> {
    ptr: NonNull<Inner<T>>,
    /// Owns a `T` as far as the drop checker is concerned.
    _owns: PhantomData<Inner<T>>,
}

// SAFETY: as for `Arc<T>`: a reference may move to and be dropped on another thread, which may
// then drop the `T` (so `T: Send`) and share it meanwhile (so `T: Sync`); the counts are atomic.
unsafe impl<T: Send + Sync> Send for Counted<T> {}
// SAFETY: as for `Send`: `&Counted<T>` hands out `&T` and can be cloned into a `Counted<T>`.
unsafe impl<T: Send + Sync> Sync for Counted<T> {}

impl<T> std::panic::UnwindSafe for Counted<T> where T: std::panic::RefUnwindSafe {}

/// One weak reference: keeps the allocation, not the value; upgrades while a strong one lives.
/// `None` is a weak reference to nothing, which never upgrades.
pub(crate) struct CountedWeak<T> {
    ptr: Option<NonNull<Inner<T>>>,
    _owns: PhantomData<Inner<T>>,
}

// SAFETY: as for `Weak<T>`: a weak reference can be upgraded on another thread into a strong one.
unsafe impl<T: Send + Sync> Send for CountedWeak<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Send + Sync> Sync for CountedWeak<T> {}

/// The last strong reference, after the count reached 0 (or, from `release(true)`, the only
/// reference of any kind, with the count left at 1 that nothing can read any more): it alone
/// can reach the value. Dropping it drops the value in place, then gives up the allocation (see
/// the module's notes).
pub(crate) struct Last<T> {
    ptr: NonNull<Inner<T>>,
    _owns: PhantomData<Inner<T>>,
}

// SAFETY: it owns the value exclusively; moving it moves a `T`'s ownership (needs `T: Send`), and
// no other thread can reach the value any more.
unsafe impl<T: Send> Send for Last<T> {}

#[cold]
fn too_many_references() -> ! {
    // The same policy as `Arc`: a count that could wrap would free a value still in use.
    std::process::abort()
}

impl<T> Counted<T> {
    /// A new allocation holding `value`, with one strong reference.
    ///
    /// Inlined, and the block found before the value is written: the value is then stored
    /// into the block field by field where it is made, rather than built on the stack and
    /// copied (wide loads of narrow stores just made, which stall on store forwarding).
    #[inline(always)]
    pub(crate) fn new(value: T) -> Self {
        let layout = Layout::new::<Inner<T>>();
        let ptr = match spare::take(layout) {
            Some(block) => block.cast::<Inner<T>>(),
            None => allocate::<T>(),
        };
        // SAFETY: `ptr` is a block of this layout (a spare one, allocated with it, or fresh),
        // owned by us and uninitialised; writing it whole makes it an `Inner<T>`.
        unsafe {
            ptr.as_ptr().write(Inner {
                counts: Counts {
                    word: AtomicU64::new(STRONG | WEAK),
                },
                value: ManuallyDrop::new(value),
            })
        };
        Counted {
            ptr,
            _owns: PhantomData,
        }
    }

    #[inline(always)]
    fn counts(&self) -> &Counts {
        // SAFETY: this strong reference keeps the allocation alive while `&self` lives.
        unsafe { counts(self.ptr) }
    }

    /// The value.
    #[inline(always)]
    pub(crate) fn get(&self) -> &T {
        // SAFETY: a strong reference keeps the allocation and the value alive, and nothing
        // mutates the value while one exists.
        unsafe { &(*self.ptr.as_ptr()).value }
    }

    /// The number of strong references (a snapshot).
    pub(crate) fn strong_count(&self) -> usize {
        strong(self.counts().word.load(Ordering::Relaxed)) as usize
    }

    /// The number of weak references (a snapshot), not counting the strong side's share.
    pub(crate) fn weak_count(&self) -> usize {
        (weak(self.counts().word.load(Ordering::Relaxed)) - 1) as usize
    }

    /// The value's address: equal for every reference to one allocation (weak ones
    /// included), and not reused while any of them lives.
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const T {
        value_ptr(self.ptr)
    }

    /// Gives up this strong reference: `None` if others remain, else the [`Last`] reference.
    ///
    /// With `unique_first`, a reference that is the only one of any kind (one load of the word
    /// reads strong 1 and weak 1, at one instant) becomes the [`Last`] without a decrement: no
    /// weak reference existed to upgrade, and no other strong one to clone from or downgrade,
    /// so nothing can make another reference but this one, which its owner is dropping. The
    /// load acquires, so whatever was done through a reference given up before (release
    /// decrements of the same word) happens before the value is dropped. Worth it for handles
    /// that are made and dropped without ever being shared (an event, an allocation); a handle
    /// that usually has weak references (a registered one) skips it.
    #[inline(always)]
    pub(crate) fn release(self, unique_first: bool) -> Option<Last<T>> {
        let this = ManuallyDrop::new(self);
        let counts = this.counts();
        if unique_first && counts.word.load(Ordering::Acquire) == STRONG | WEAK {
            return Some(Last {
                ptr: this.ptr,
                _owns: PhantomData,
            });
        }
        if strong(counts.word.fetch_sub(STRONG, Ordering::Release)) != 1 {
            return None;
        }
        // Every use through the other strong references happened before their decrements,
        // which this fence makes visible before the value is dropped.
        fence(Ordering::Acquire);
        Some(Last {
            ptr: this.ptr,
            _owns: PhantomData,
        })
    }

    /// This reference as the [`Last`] one if no other strong reference exists; otherwise it is
    /// handed back.
    pub(crate) fn try_last(self) -> Result<Last<T>, Self> {
        let word = &self.counts().word;
        let mut current = word.load(Ordering::Relaxed);
        loop {
            if strong(current) != 1 {
                return Err(self);
            }
            // Only the strong half changes; a weak reference made or dropped meanwhile only
            // makes the swap retry.
            match word.compare_exchange_weak(
                current,
                current - STRONG,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        let this = ManuallyDrop::new(self);
        Ok(Last {
            ptr: this.ptr,
            _owns: PhantomData,
        })
    }

    /// A weak reference to this allocation.
    pub(crate) fn downgrade(&self) -> CountedWeak<T> {
        if weak(self.counts().word.fetch_add(WEAK, Ordering::Relaxed)) >= MAX_COUNT {
            too_many_references();
        }
        CountedWeak {
            ptr: Some(self.ptr),
            _owns: PhantomData,
        }
    }

    /// Transfers this reference into a pointer, for [`Counted::from_raw`].
    pub(crate) fn into_raw(self) -> *const () {
        let this = ManuallyDrop::new(self);
        this.ptr.as_ptr().cast_const().cast()
    }

    /// Takes back a reference that [`Counted::into_raw`] transferred.
    ///
    /// # Safety
    ///
    /// `ptr` must come from `Counted::<T>::into_raw`, with this same `T`, and each such pointer
    /// may be taken back only once.
    pub(crate) unsafe fn from_raw(ptr: *const ()) -> Self {
        Counted {
            // SAFETY: the caller's contract: `ptr` is the non-null allocation `into_raw` gave.
            ptr: unsafe { NonNull::new_unchecked(ptr.cast::<Inner<T>>().cast_mut()) },
            _owns: PhantomData,
        }
    }
}

impl<T> Clone for Counted<T> {
    #[inline(always)]
    fn clone(&self) -> Self {
        // Relaxed, as `Arc`: the new reference is made from this one, which keeps the
        // allocation alive meanwhile, and passing it to another thread synchronises.
        if strong(self.counts().word.fetch_add(STRONG, Ordering::Relaxed)) >= MAX_COUNT {
            too_many_references();
        }
        Counted {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T> Drop for Counted<T> {
    #[inline(always)]
    fn drop(&mut self) {
        let this = Counted {
            ptr: self.ptr,
            _owns: PhantomData,
        };
        drop(this.release(false));
    }
}

impl<T> Last<T> {
    /// The value, which this reference alone can reach.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // SAFETY: the strong count is 0 and this is the reference that brought it there (or
        // the one that swapped 1 for 0, or found itself the only reference of any kind): no
        // other strong reference exists, no weak one can upgrade, and the value has not been
        // dropped (that is this type's `Drop`). Only the value is borrowed, through the raw
        // pointer: a failing upgrade (a weak handle's, or a registry lookup's) may still load
        // the counts meanwhile, which a borrow of the whole allocation would race.
        unsafe { &mut (*self.ptr.as_ptr()).value }
    }

    /// The value's address (see [`Counted::as_ptr`]).
    pub(crate) fn as_ptr(&self) -> *const T {
        value_ptr(self.ptr)
    }

    /// This reference with its type erased, for a list of values of any type to drop.
    pub(crate) fn erase(self) -> ErasedLast
    where
        T: 'static,
    {
        let this = ManuallyDrop::new(self);
        ErasedLast {
            ptr: this.ptr.cast(),
            drop: drop_erased::<T>,
        }
    }
}

/// Drops the [`Last`] reference that `ptr` is.
///
/// # Safety
///
/// `ptr` is the allocation of a `Last<T>` of this `T` that was erased by [`Last::erase`], and
/// this is the one call made for it.
unsafe fn drop_erased<T>(ptr: NonNull<()>) {
    drop(Last::<T> {
        ptr: ptr.cast(),
        _owns: PhantomData,
    });
}

/// A [`Last`] reference of any type; dropping it drops that `Last`.
pub(crate) struct ErasedLast {
    ptr: NonNull<()>,
    drop: unsafe fn(NonNull<()>),
}

impl Drop for ErasedLast {
    fn drop(&mut self) {
        // SAFETY: `erase` paired the pointer with the drop of its own type, and this `Drop`
        // runs once.
        unsafe { (self.drop)(self.ptr) }
    }
}

/// A fresh, uninitialised block for an `Inner<T>`, from the global allocator (no spare was
/// kept): out of line, off the hot path.
#[inline(never)]
fn allocate<T>() -> NonNull<Inner<T>> {
    let layout = Layout::new::<Inner<T>>();
    const { assert!(size_of::<Inner<T>>() != 0, "an `Inner` holds its counts") };
    // SAFETY: the layout's size is not zero (the counts are in it, checked above).
    let block = unsafe { std::alloc::alloc(layout) };
    match NonNull::new(block) {
        Some(block) => block.cast(),
        None => std::alloc::handle_alloc_error(layout),
    }
}

/// Frees the allocation at `ptr`: kept as this thread's spare (`spare.rs`) if there is room,
/// else given back to the allocator.
///
/// # Safety
///
/// `ptr` was made by `Counted::new` (so allocated by the global allocator with the layout of
/// `Inner<T>`), no reference to it remains, and its value has been dropped.
#[inline(always)]
unsafe fn free<T>(ptr: NonNull<Inner<T>>) {
    let layout = Layout::new::<Inner<T>>();
    // SAFETY: the caller's contract: an unreachable block of this layout, holding nothing to
    // drop (the counts are plain atomics, the value is gone).
    if let Some(block) = unsafe { spare::give(ptr.cast(), layout) } {
        // SAFETY: allocated by the global allocator with `layout` (by `allocate`, or as a
        // spare of the same layout), and unreachable.
        unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
    }
}

/// The counts of the allocation at `ptr`. They are reached field by field, never through a
/// reference to the whole allocation: the value may be borrowed mutably meanwhile (while the
/// last strong reference drops it, a lookup in the registry may try to upgrade the box's entry,
/// or a weak handle be dropped, and touch its count).
///
/// # Safety
///
/// `ptr` is an allocation made by `Counted::new`, and the returned reference is used only while
/// the caller holds a reference to it (strong, weak or last) that keeps the allocation alive.
#[inline(always)]
unsafe fn counts<'a, T>(ptr: NonNull<Inner<T>>) -> &'a Counts {
    // SAFETY: the caller's contract; only the counts' field is borrowed.
    unsafe { &(*ptr.as_ptr()).counts }
}

/// A new strong reference to the allocation at `ptr` if a strong one still exists: the strong
/// count goes from n > 0 to n + 1 in one compare-exchange, so a count that reached 0 (the value
/// is being dropped, or is gone) is never raised again.
///
/// # Safety
///
/// `ptr` is an allocation made by `Counted::new` that is not freed before this call returns
/// (a weak reference keeps it, or, for an [`Uncounted`] address, what its holder promises).
unsafe fn upgrade<T>(ptr: NonNull<Inner<T>>) -> Option<Counted<T>> {
    // SAFETY: the caller's contract: the allocation outlives this call.
    let word = &unsafe { counts(ptr) }.word;
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if strong(current) == 0 {
            return None;
        }
        if strong(current) >= MAX_COUNT {
            too_many_references();
        }
        // Acquire on success, as `Arc`: the value is used next.
        match word.compare_exchange_weak(
            current,
            current + STRONG,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => {
                return Some(Counted {
                    ptr,
                    _owns: PhantomData,
                });
            }
            Err(actual) => current = actual,
        }
    }
}

/// The address of an allocation, counted nowhere: neither a strong nor a weak reference, so
/// holding one keeps nothing alive and costs no atomic operation. For a holder that keeps the
/// address only while the allocation cannot be freed, by a rule of its own: the registry
/// (`registry.rs`) removes its entry in the value's own drop, under the lock that its lookups
/// hold while they upgrade, and the allocation is freed only after the value is dropped.
pub(crate) struct Uncounted<T> {
    ptr: NonNull<Inner<T>>,
    _owns: PhantomData<*const Inner<T>>,
}

impl<T> Counted<T> {
    /// This reference's allocation, as an address counted nowhere.
    pub(crate) fn uncounted(&self) -> Uncounted<T> {
        Uncounted {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T> Uncounted<T> {
    /// A strong reference, if one still exists (the value is then not being dropped).
    ///
    /// # Safety
    ///
    /// The allocation must not have been freed, and must not be freed before this call
    /// returns. (Its count may be 0: the value may be being dropped, or dropped, as long as the
    /// allocation is still there; the upgrade then fails.)
    pub(crate) unsafe fn upgrade(&self) -> Option<Counted<T>> {
        // SAFETY: the caller's contract is `upgrade`'s.
        unsafe { upgrade(self.ptr) }
    }

    /// Whether this is the address of the allocation whose value is at `value`.
    pub(crate) fn is_value_at(&self, value: *const T) -> bool {
        // Compares the allocation's address with the one `value` lies in, computing no
        // address from `self.ptr` (which may no longer be live when asked).
        std::ptr::eq(self.ptr.as_ptr().cast::<u8>(), value_offset_back(value))
    }
}

/// The address of the allocation holding the value at `value`, by the field's offset: a plain
/// integer subtraction, which reads nothing and needs no live allocation.
fn value_offset_back<T>(value: *const T) -> *const u8 {
    value
        .cast::<u8>()
        .wrapping_sub(std::mem::offset_of!(Inner<T>, value))
}

/// The address of the value in the allocation at `ptr`, without reading anything.
#[inline(always)]
fn value_ptr<T>(ptr: NonNull<Inner<T>>) -> *const T {
    // SAFETY: `ptr` is a live allocation (a reference to it is held); only an address is
    // computed, nothing is read.
    unsafe { (&raw const (*ptr.as_ptr()).value).cast::<T>() }
}

impl<T> Drop for Last<T> {
    fn drop(&mut self) {
        let ptr = self.ptr.as_ptr();
        // SAFETY: as in `get_mut`: this reference alone reaches the value, which is dropped here
        // once (a `Last` is made once per allocation: by the decrement that reached 0, the swap
        // of 1 for 0, or the unique reference's own drop). If its drop unwinds, the allocation is left to leak, never freed
        // under a value that is half dropped.
        unsafe { ManuallyDrop::drop(&mut (*ptr).value) };
        // SAFETY: the allocation lives until the strong side's share of `weak` is given up,
        // which happens only below, after the last use of `weak`.
        let word = &unsafe { counts(self.ptr) }.word;
        // No weak reference exists and none can be made (see the module's notes): the
        // allocation is ours alone. Otherwise give up the share; the last one out frees.
        if weak(word.load(Ordering::Acquire)) == 1
            || weak(word.fetch_sub(WEAK, Ordering::Release)) == 1
        {
            fence(Ordering::Acquire);
            // SAFETY: no reference to the allocation remains, and the value inside is already
            // dropped (the counts are plain atomics).
            unsafe { free(self.ptr) };
        }
    }
}

impl<T> CountedWeak<T> {
    /// A weak reference to nothing: never upgrades.
    pub(crate) const fn new() -> Self {
        CountedWeak {
            ptr: None,
            _owns: PhantomData,
        }
    }

    /// A strong reference, if one still exists (the value is then not being dropped).
    pub(crate) fn upgrade(&self) -> Option<Counted<T>> {
        // SAFETY: this weak reference keeps the allocation (not the value) alive while `&self`
        // lives.
        unsafe { upgrade(self.ptr?) }
    }

    /// The value's address (see [`Counted::as_ptr`]), or null for a weak reference to
    /// nothing. The value may already be dropped: the address is only to compare.
    pub(crate) fn as_ptr(&self) -> *const T {
        match self.ptr {
            Some(ptr) => value_ptr(ptr),
            None => std::ptr::null(),
        }
    }
}

impl<T> Clone for CountedWeak<T> {
    fn clone(&self) -> Self {
        if let Some(ptr) = self.ptr {
            // SAFETY: this weak reference keeps the allocation alive while `&self` lives.
            let word = &unsafe { counts(ptr) }.word;
            if weak(word.fetch_add(WEAK, Ordering::Relaxed)) >= MAX_COUNT {
                too_many_references();
            }
        }
        CountedWeak {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T> Drop for CountedWeak<T> {
    fn drop(&mut self) {
        let Some(ptr) = self.ptr else {
            return;
        };
        // SAFETY: this weak reference keeps the allocation alive until its decrement, the
        // count's last use here.
        let word = &unsafe { counts(ptr) }.word;
        if weak(word.fetch_sub(WEAK, Ordering::Release)) == 1 {
            fence(Ordering::Acquire);
            // SAFETY: the count reached 0, so the strong side gave up its share (the value is
            // dropped) and no other weak reference remains.
            unsafe { free(ptr) };
        }
    }
}
