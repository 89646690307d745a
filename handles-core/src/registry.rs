//! The opt-in per-type registry: raw value → the canonical handle that manages it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use foldhash::fast::FixedState;

use crate::handle::{HandleBox, RegistryEntry};
use crate::sync::{Mutex, lock};
use crate::{Handle, Resource, ThreadSafe};

/// Keyed by the raw value itself, whose `Eq` and `Hash` the unsafe [`crate::RawValue`] contract
/// makes exact: no lossy conversion (such as to a pointer-sized integer) can make two resources
/// share an entry. Hashed with foldhash's fixed-seed hasher: the keys are values the C library
/// handed out, not attacker-chosen, and SipHash cost more than the lock.
type Map<R> = HashMap<<R as Resource>::Raw, RegistryEntry<R>, FixedState>;

/// Maps raw values to the owning handle that manages them, so that a non-owning lookup of a
/// raw value the program already manages returns that handle, with its owners and metadata.
///
/// Types declared with the `registry` key get one registry, in a static. Owning handles
/// register when they are created and unregister after their deleter ran. An entry is the
/// box's address, counted nowhere (neither a strong nor a weak reference), so the registry
/// never keeps a resource alive, costs a box no count, and removing an entry runs nothing.
/// Only creation, lookup and the final drop of a registered type take its lock.
///
/// Why an uncounted address is enough: an entry is removed by its box's own drop (after the
/// deleter, before the allocation can be freed, which only follows the drop), and that removal
/// takes the lock. A lookup upgrades the entry while holding the lock, so the allocation is
/// there for the whole upgrade; the upgrade fails once the strong count has reached 0. Every
/// entry therefore names a live allocation, and no two entries' allocations can share an
/// address.
pub struct Registry<R: Resource> {
    map: Mutex<Map<R>>,
}

// SAFETY: the map holds raw values and box addresses. Sharing it between threads moves raw
// values across threads and makes strong handles to the boxes on any thread, which `ThreadSafe`
// permits (the raw value may be used from any thread) together with `R: Send + Sync` for the
// records; every access goes through the mutex.
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
        // SAFETY: the entry is in the map and the lock is held until the end of the statement,
        // so its box's drop cannot have removed it, and its allocation cannot be freed, before
        // the upgrade returns (see the type's notes).
        let handle = unsafe { lock(&self.map).get(&raw)?.upgrade() }?;
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
        // A replaced entry is an address that owns nothing: nothing runs for it.
        lock(&self.map).insert(handle.raw(), handle.registry_entry());
    }

    /// Removes the entry of `raw` if it still belongs to the box at `boxed`, which is being
    /// dropped and whose allocation is still there. Called by that box's drop (or `close`)
    /// alone, before the allocation can be freed.
    pub(crate) fn unregister(&self, raw: R::Raw, boxed: *const HandleBox<R>) {
        let mut map = lock(&self.map);
        // Remove only our own entry: a reused raw value may already belong to a newer box.
        // Every entry names a live allocation (see the type's notes), so an entry at this
        // address is ours, never one of a box that was freed and whose address was reused.
        if let Entry::Occupied(entry) = map.entry(raw)
            && entry.get().is_of(boxed)
        {
            entry.remove();
        }
    }
}

#[cfg(not(loom))]
impl<R: Resource> Default for Registry<R> {
    fn default() -> Self {
        Self::new()
    }
}
