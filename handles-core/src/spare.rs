//! Each thread's spare handle allocations: the last drop of a handle whose allocation no weak
//! handle holds gives it here instead of to the allocator, and the next handle made on the
//! thread with an allocation of the same size and alignment takes it back. A handle that is
//! made and dropped in a loop (an event, a pool allocation) then costs no allocator call.
//!
//! Only a block that no reference can reach any more is given (the counts say so, see
//! `counted.rs`), so reuse needs no check of its own; the block is written whole when taken.
//! Blocks are kept by exact size (in steps of 8 bytes, up to [`LARGEST`]) for the one
//! alignment of 8, at most [`DEPTH`] per size: the allocator's contract (a block is freed with
//! the layout it was allocated with) holds because any block of one class was allocated with
//! that class's layout. Each thread frees its spares when it exits; a handle dropped after that
//! (by another thread-local's destructor) frees its block as usual.

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::ptr::NonNull;

/// The largest allocation kept, in bytes.
const LARGEST: usize = 512;
/// Spares kept per size.
const DEPTH: usize = 4;
const CLASSES: usize = LARGEST / 8;

/// The size class of `layout`, if blocks of it are kept.
#[inline(always)]
fn class(layout: Layout) -> Option<usize> {
    (layout.align() == 8 && layout.size() <= LARGEST && layout.size().is_multiple_of(8))
        .then(|| layout.size() / 8 - 1)
}

/// One size class's spares and their count, together in one cache line: a take or a give
/// touches that line alone (and the thread-local's state).
#[repr(C, align(64))]
struct Class {
    blocks: [*mut u8; DEPTH],
    count: u8,
}

struct Spares {
    /// Only this thread touches them, and never re-entrantly: no user code runs between a
    /// borrow and its end (see `take` and `give`).
    classes: UnsafeCell<[Class; CLASSES]>,
}

impl Spares {
    const fn new() -> Self {
        const EMPTY: Class = Class {
            blocks: [std::ptr::null_mut(); DEPTH],
            count: 0,
        };
        Spares {
            classes: UnsafeCell::new([EMPTY; CLASSES]),
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        for (class, kept) in self.classes.get_mut().iter().enumerate() {
            // Every class's layout is valid (a multiple of 8 up to `LARGEST`, aligned to 8).
            let Ok(layout) = Layout::from_size_align((class + 1) * 8, 8) else {
                continue;
            };
            for &block in &kept.blocks[..usize::from(kept.count)] {
                // SAFETY: every kept block was allocated with its class's layout (`give`'s
                // contract) and is owned by this list alone.
                unsafe { std::alloc::dealloc(block, layout) };
            }
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static SPARES: Spares = const { Spares::new() };
}

#[cfg(loom)]
loom::thread_local! {
    static SPARES: Spares = Spares::new();
}

/// A spare block of `layout`, if this thread keeps one: uninitialised, owned by the caller,
/// to be freed with `layout`.
#[inline(always)]
pub(crate) fn take(layout: Layout) -> Option<NonNull<u8>> {
    let class = class(layout)?;
    SPARES
        .try_with(|spares| {
            // SAFETY: this thread's list, borrowed only for these few lines (no user code).
            let kept = unsafe { &mut (*spares.classes.get())[class] };
            let count = kept.count.checked_sub(1)?;
            kept.count = count;
            NonNull::new(*kept.blocks.get(usize::from(count))?)
        })
        .ok()
        .flatten()
}

/// Keeps `block` as a spare if there is room; otherwise hands it back, for the caller to free.
///
/// # Safety
///
/// `block` was allocated by the global allocator with `layout`, is owned by the caller (no
/// reference into it is used again), and holds nothing that still needs dropping.
#[inline(always)]
pub(crate) unsafe fn give(block: NonNull<u8>, layout: Layout) -> Option<NonNull<u8>> {
    let Some(class) = class(layout) else {
        return Some(block);
    };
    let kept = SPARES.try_with(|spares| {
        // SAFETY: this thread's list, borrowed only for these few lines (no user code).
        let kept = unsafe { &mut (*spares.classes.get())[class] };
        let count = usize::from(kept.count);
        let Some(slot) = kept.blocks.get_mut(count) else {
            return false;
        };
        *slot = block.as_ptr();
        kept.count += 1;
        true
    });
    match kept {
        Ok(true) => None,
        _ => Some(block),
    }
}
