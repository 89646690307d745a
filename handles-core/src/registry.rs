//! The opt-in per-type registry: raw value → the canonical handle that manages it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use foldhash::fast::FixedState;

use crate::handle::HandleBox;
use crate::sync::{Mutex, lock};
use crate::{Handle, Resource, ThreadSafe, WeakHandle};

/// Keyed by the raw value itself, whose `Eq` and `Hash` the unsafe [`crate::RawValue`] contract
/// makes exact: no lossy conversion (such as to a pointer-sized integer) can make two resources
/// share an entry. Hashed with foldhash's fixed-seed hasher: the keys are values the C library
/// handed out, not attacker-chosen, and SipHash cost more than the lock.
type Map<R> = HashMap<<R as Resource>::Raw, WeakHandle<R>, FixedState>;

/// Maps raw values to the owning handle that manages them, so that a non-owning lookup of a
/// raw value the program already manages returns that handle, with its owners and metadata.
///
/// Types declared with the `registry` key get one registry, in a static. Owning handles
/// register when they are created and unregister after their deleter ran. The registry holds
/// weak handles only, so it never keeps a resource alive and removing an entry never runs a
/// deleter. Only creation, lookup and the final drop of a registered type take its lock.
pub struct Registry<R: Resource> {
    map: Mutex<Map<R>>,
}

// SAFETY: the map holds raw values and weak handles. Sharing it between threads moves raw values
// and boxes across threads, which `ThreadSafe` permits (the raw value may be used from any
// thread) together with `R: Send + Sync` for the records; every access goes through the mutex.
unsafe impl<R: ThreadSafe + Send + Sync> Sync for Registry<R> {}
// SAFETY: as for `Sync` above.
unsafe impl<R: ThreadSafe + Send + Sync> Send for Registry<R> {}

impl<R: Resource> Registry<R> {
    /// An empty registry.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Registry {
            map: Mutex::new(HashMap::with_hasher(FixedState::with_seed(0))),
        }
    }

    /// An empty registry.
    #[cfg(loom)]
    pub fn new() -> Self {
        Registry {
            map: Mutex::new(HashMap::with_hasher(FixedState::with_seed(0))),
        }
    }

    /// The live owning handle that manages `raw`, if there is one. The handle returned always
    /// has exactly the raw value asked for.
    pub fn lookup(&self, raw: R::Raw) -> Option<Handle<R>> {
        let handle = lock(&self.map).get(&raw)?.upgrade()?;
        // Checked, not assumed: the registry's promise must not rest on the map alone.
        (handle.raw() == raw).then_some(handle)
    }

    /// The number of registered raw values.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn register(&self, handle: &Handle<R>) {
        // A new owner of a raw value replaces any entry: the driver may reuse a raw value as
        // soon as the old resource is deleted, before the old box has unregistered.
        let replaced = lock(&self.map).insert(handle.raw(), handle.downgrade());
        // Dropped after the lock is released: dropping a weak handle can free its allocation.
        drop(replaced);
    }

    /// Removes the entry of `raw` if it still belongs to the box at `boxed`, the address of the
    /// box's allocation (which the entry's weak handle keeps allocated, so it cannot have
    /// been reused by another box).
    pub(crate) fn unregister(&self, raw: R::Raw, boxed: *const HandleBox<R>) {
        let mut map = lock(&self.map);
        // Remove only our own entry: a reused raw value may already belong to a newer box.
        let removed = match map.entry(raw) {
            Entry::Occupied(entry) if entry.get().points_to_box(boxed) => Some(entry.remove()),
            _ => None,
        };
        drop(map);
        // Dropped after the lock is released: dropping a weak handle can free its allocation.
        drop(removed);
    }
}

#[cfg(not(loom))]
impl<R: Resource> Default for Registry<R> {
    fn default() -> Self {
        Self::new()
    }
}
