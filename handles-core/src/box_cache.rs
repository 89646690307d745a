//! Reusing handle boxes: a per-type, per-thread list of retired allocations, so that creating a
//! handle after one was released costs no allocator call.
//!
//! A box is retired in place when its last strong handle drops and no weak handle exists
//! (`Arc::get_mut` says so, with the ordering that makes every earlier use of the box by other
//! threads happen before): its teardown runs exactly as for a freed box (deleter, registry,
//! live count, record, with-owner value), and the empty allocation is kept here instead of
//! being freed. Creating a handle of the same type on the same thread takes one back and writes
//! the new box into it.
//!
//! Nothing else can reach a retired allocation: it had no other strong or weak reference when
//! it was retired, and the list is thread-local. A retired box owns nothing and its `Drop` does
//! nothing (its record was already dropped), so the list frees its allocations at thread exit
//! with no teardown, and a new box is written over a retired one without dropping it.
//!
//! The list is bounded per type and thread: at most [`MAX_BOXES`] boxes and [`MAX_BYTES`] bytes.
//! A type with a registry gets no list (its registry holds a weak handle to every owning box,
//! so its boxes could never be retired).

use std::cell::RefCell;
use std::sync::Arc;

use crate::Resource;
use crate::handle::HandleBox;

/// The most boxes a thread keeps per type.
pub const MAX_BOXES: usize = 64;

/// The most bytes of boxes a thread keeps per type.
pub const MAX_BYTES: usize = 16 * 1024;

/// A thread's retired boxes of one resource type. The derive declares one per type, in a
/// `thread_local!` that [`Resource::box_cache`] returns.
pub struct BoxCache<R: Resource> {
    retired: RefCell<Vec<Arc<HandleBox<R>>>>,
}

/// The key of a type's per-thread [`BoxCache`].
pub type BoxCacheKey<R> = std::thread::LocalKey<BoxCache<R>>;

impl<R: Resource> BoxCache<R> {
    /// How many boxes of `R` a thread keeps: [`MAX_BOXES`], fewer for boxes so large that
    /// [`MAX_BYTES`] is reached first.
    const CAPACITY: usize = {
        let by_bytes = match MAX_BYTES.checked_div(size_of::<HandleBox<R>>()) {
            Some(boxes) => boxes,
            None => MAX_BOXES,
        };
        if by_bytes < MAX_BOXES {
            by_bytes
        } else {
            MAX_BOXES
        }
    };

    /// An empty list; allocates nothing until a box is retired.
    pub const fn new() -> Self {
        BoxCache {
            retired: RefCell::new(Vec::new()),
        }
    }

    /// The number of retired boxes this thread keeps for `R`.
    pub fn len(&self) -> usize {
        self.retired.try_borrow().map_or(0, |retired| retired.len())
    }

    /// Whether this thread keeps no retired box for `R`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Frees this thread's retired boxes of `R` and returns how many there were.
    pub fn clear(&self) -> usize {
        let taken = self
            .retired
            .try_borrow_mut()
            .map(|mut retired| std::mem::take(&mut *retired))
            .unwrap_or_default();
        taken.len()
    }
}

impl<R: Resource> Default for BoxCache<R> {
    fn default() -> Self {
        Self::new()
    }
}

/// Puts `boxed` in the box of a retired allocation of this thread, if there is one, or in a new
/// one.
#[inline]
pub(crate) fn allocate<R: Resource>(boxed: HandleBox<R>) -> Arc<HandleBox<R>> {
    if let Some(key) = R::box_cache() {
        let reused = key
            .try_with(|cache| cache.retired.try_borrow_mut().ok()?.pop())
            .ok()
            .flatten();
        if let Some(allocation) = reused {
            let slot = Arc::into_raw(allocation).cast_mut();
            // SAFETY: every allocation in the list was the only reference to its box, strong or
            // weak, when `retire` pushed it (`Arc::get_mut` succeeded there, with the ordering
            // that makes every earlier use by other threads happen before), and nothing can
            // have made another since: the list is private to this thread and this module, and
            // `pop` moved the one reference out. So nothing else reads or writes the box, and
            // `slot`, from `Arc::into_raw` (a pointer derived from the allocation itself, not
            // from a shared reference), may be written. `ptr::write` does not drop the retired
            // box, which owns nothing: its record was dropped by `retire`, its `keep` is
            // `Retired` and its raw value is `Copy`. `Arc::from_raw` takes back the reference
            // `into_raw` gave up, once.
            unsafe {
                slot.write(boxed);
                return Arc::from_raw(slot);
            }
        }
    }
    Arc::new(boxed)
}

/// Tears `allocation`'s box down in place, as dropping it would, and keeps the allocation for
/// reuse; `allocation` must be the box's only reference, strong or weak (otherwise it is merely
/// dropped). Called in place of the last drop, inside the iterative release.
pub(crate) fn retire<R: Resource>(mut allocation: Arc<HandleBox<R>>, key: &'static BoxCacheKey<R>) {
    let Some(boxed) = Arc::get_mut(&mut allocation) else {
        drop(allocation);
        return;
    };
    // If the teardown unwinds (a record's `Drop` panicked), `allocation` is dropped on the way
    // out; the box is already marked retired by then, so nothing is torn down twice.
    boxed.retire();
    let rejected = key.try_with(|cache| match cache.retired.try_borrow_mut() {
        Ok(mut retired) if retired.len() < BoxCache::<R>::CAPACITY => {
            retired.push(allocation);
            None
        }
        _ => Some(allocation),
    });
    // A full list, or a thread whose list is gone (thread exit): freed here, with no teardown.
    drop(rejected);
}
