//! The opt-in per-type registry: raw value → the canonical handle that manages it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::handle::HandleBox;
use crate::sync::{Mutex, lock};
use crate::{Handle, RawValue, Resource, WeakHandle};

type Map<R> = HashMap<isize, WeakHandle<R>, BuildHasherDefault<DefaultHasher>>;

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

impl<R: Resource> Registry<R> {
    /// An empty registry.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Registry {
            map: Mutex::new(HashMap::with_hasher(BuildHasherDefault::new())),
        }
    }

    /// An empty registry.
    #[cfg(loom)]
    pub fn new() -> Self {
        Registry {
            map: Mutex::new(HashMap::with_hasher(BuildHasherDefault::new())),
        }
    }

    /// The live owning handle that manages `raw`, if there is one.
    pub fn lookup(&self, raw: R::Raw) -> Option<Handle<R>> {
        lock(&self.map).get(&raw.to_intptr())?.upgrade()
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
        lock(&self.map).insert(handle.as_intptr(), handle.downgrade());
    }

    pub(crate) fn unregister(&self, raw: R::Raw, boxed: &HandleBox<R>) {
        let mut map = lock(&self.map);
        let key = raw.to_intptr();
        // Remove only our own entry: a reused raw value may already belong to a newer box.
        if map.get(&key).is_some_and(|weak| weak.points_to_box(boxed)) {
            map.remove(&key);
        }
    }
}

#[cfg(not(loom))]
impl<R: Resource> Default for Registry<R> {
    fn default() -> Self {
        Self::new()
    }
}
