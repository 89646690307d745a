//! Per-type counts of live handle boxes.

#[cfg(feature = "live-count")]
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the live boxes (resources, not clones) of one handle type.
///
/// Counting is compiled in with the `live-count` cargo feature. Without it the counter is an
/// empty struct, `increment`/`decrement` compile to nothing and [`LiveCount::get`] returns
/// `None`, so the create/drop path pays no shared atomic.
#[derive(Debug)]
pub struct LiveCount {
    #[cfg(feature = "live-count")]
    count: AtomicUsize,
}

impl LiveCount {
    /// A counter at zero.
    pub const fn new() -> Self {
        LiveCount {
            #[cfg(feature = "live-count")]
            count: AtomicUsize::new(0),
        }
    }

    /// The number of live boxes, or `None` when the `live-count` feature is off.
    pub fn get(&self) -> Option<usize> {
        #[cfg(feature = "live-count")]
        {
            Some(self.count.load(Ordering::Acquire))
        }
        #[cfg(not(feature = "live-count"))]
        {
            None
        }
    }

    #[inline(always)]
    pub(crate) fn increment(&self) {
        #[cfg(feature = "live-count")]
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    #[inline(always)]
    pub(crate) fn decrement(&self) {
        // Release pairs with the Acquire in `get`, so a count read after a drop also sees
        // everything the deleter did.
        #[cfg(feature = "live-count")]
        self.count.fetch_sub(1, Ordering::Release);
    }
}

impl Default for LiveCount {
    fn default() -> Self {
        Self::new()
    }
}
