//! The `tracing` events (feature `tracing`): target `handles`, level TRACE. The hot paths test
//! only [`enabled`] (two compares, one relaxed load) inline; the events are built out of
//! line.

use crate::Ownership;
use crate::Resource;
use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};

/// Whether some subscriber may want TRACE events at all.
#[inline(always)]
pub(crate) fn enabled() -> bool {
    tracing::Level::TRACE <= STATIC_MAX_LEVEL && tracing::Level::TRACE <= LevelFilter::current()
}

#[cold]
#[inline(never)]
pub(crate) fn create<R: Resource>(raw: &R::Raw, ownership: Ownership, owner: Option<&str>) {
    tracing::trace!(
        target: "handles",
        resource = R::NAME,
        raw = ?raw,
        ownership = ?ownership,
        owner,
        "create"
    );
}

#[cold]
#[inline(never)]
pub(crate) fn borrow_resolved<R: Resource>(raw: &R::Raw) {
    tracing::trace!(
        target: "handles",
        resource = R::NAME,
        raw = ?raw,
        ownership = ?Ownership::Owned,
        "borrow resolved to the owning handle"
    );
}

#[cold]
#[inline(never)]
pub(crate) fn destroy<R: Resource>(raw: &R::Raw, ownership: Ownership, deleter: bool) {
    tracing::trace!(
        target: "handles",
        resource = R::NAME,
        raw = ?raw,
        ownership = ?ownership,
        deleter,
        "destroy"
    );
}
