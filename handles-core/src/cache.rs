//! A keyed cache of weak handles with a race-free get-or-create.
//!
//! The protocol, which `DESIGN.md` explains in full:
//! 1. `get_or_try_insert_with` takes the lock and looks the key up. A live entry is upgraded and
//!    returned. An entry that is being created, or whose handle can no longer be upgraded
//!    (its last strong handle is gone and it is being deleted), is waited for on a condition
//!    variable. Only an absent key proceeds.
//! 2. The caller marks the key "being created", releases the lock and runs the creator, which
//!    receives a [`CacheSlot`] and must store it in the new handle's record.
//! 3. The slot is dropped with the record, which happens *after* the deleter ran. Dropping it
//!    removes the entry and wakes the waiters.
//!
//! So no thread ever receives a handle to a resource that is being deleted (upgrade fails), and
//! no thread re-creates a key whose old resource is still being deleted (it waits for the
//! slot). No user code, neither creator nor deleter, runs under the lock.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash};

use crate::sync::{Condvar, Mutex, MutexGuard, lock};
use crate::{ResourceHandle, WeakHandle};

struct Entry<H: ResourceHandle> {
    /// Tells this entry apart from a later one under the same key.
    id: u64,
    /// `None` while the creator runs.
    weak: Option<WeakHandle<H::Resource>>,
}

struct State<K, H: ResourceHandle> {
    entries: HashMap<K, Entry<H>, BuildHasherDefault<DefaultHasher>>,
    next_id: u64,
}

/// A keyed get-or-create cache of weak handles (see the module documentation for the
/// protocol). Keep it in a `static`: slots refer back to it.
pub struct WeakCache<K, H: ResourceHandle> {
    state: Mutex<State<K, H>>,
    changed: Condvar,
}

/// The token a creator must store in the record of the handle it creates. Dropping it, which
/// happens after the handle's deleter ran, removes the cache entry.
pub struct CacheSlot<K: Eq + Hash + Clone + 'static, H: ResourceHandle> {
    cache: &'static WeakCache<K, H>,
    key: K,
    id: u64,
}

impl<K: Eq + Hash + Clone + 'static, H: ResourceHandle> WeakCache<K, H> {
    /// An empty cache.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        WeakCache {
            state: Mutex::new(State {
                entries: HashMap::with_hasher(BuildHasherDefault::new()),
                next_id: 0,
            }),
            changed: Condvar::new(),
        }
    }

    /// An empty cache.
    #[cfg(loom)]
    pub fn new() -> Self {
        WeakCache {
            state: Mutex::new(State {
                entries: HashMap::with_hasher(BuildHasherDefault::new()),
                next_id: 0,
            }),
            changed: Condvar::new(),
        }
    }

    /// Returns the live handle cached under `key`, or runs `create` and caches its result.
    ///
    /// `create` runs without the cache lock. It receives the key's [`CacheSlot`] and must move
    /// it into the record of the handle it returns; if it drops the slot instead, the handle is
    /// returned but not cached. If `create` fails, nothing is cached and its error is returned.
    /// Concurrent callers with the same key wait for the creator and then share its handle.
    ///
    /// `create` and the deleters of cached handles must not call into this cache with the same
    /// key, which would wait for itself.
    pub fn get_or_try_insert_with<E>(
        &'static self,
        key: K,
        create: impl FnOnce(CacheSlot<K, H>) -> Result<H, E>,
    ) -> Result<H, E> {
        let mut state = lock(&self.state);
        loop {
            match state.entries.get(&key) {
                None => break,
                Some(Entry {
                    weak: Some(weak), ..
                }) => {
                    if let Some(handle) = weak.upgrade() {
                        return Ok(H::from_handle(handle));
                    }
                }
                Some(Entry { weak: None, .. }) => {}
            }
            state = self.wait(state);
        }
        let id = state.next_id;
        state.next_id += 1;
        // Every `K::clone` (user code that may panic) runs before the placeholder is inserted,
        // and nothing that can panic runs between the insertion and the slot's construction:
        // from then on, whatever unwinds drops the slot, which removes the placeholder and wakes
        // the waiters. A placeholder without a slot would make later callers wait forever.
        let placeholder_key = key.clone();
        let slot_key = key.clone();
        state
            .entries
            .insert(placeholder_key, Entry { id, weak: None });
        drop(state);
        let slot = CacheSlot {
            cache: self,
            key: slot_key,
            id,
        };

        let handle = create(slot)?;
        let mut state = lock(&self.state);
        if let Some(entry) = state.entries.get_mut(&key)
            && entry.id == id
        {
            entry.weak = Some(handle.as_handle().downgrade());
        }
        drop(state);
        self.changed.notify_all();
        Ok(handle)
    }

    /// The live handle cached under `key`, without creating one.
    pub fn get(&self, key: &K) -> Option<H> {
        let state = lock(&self.state);
        let weak = state.entries.get(key)?.weak.as_ref()?;
        weak.upgrade().map(H::from_handle)
    }

    /// The number of keys present, including ones being created or deleted.
    pub fn len(&self) -> usize {
        lock(&self.state).entries.len()
    }

    /// Whether the cache holds no key at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State<K, H>>) -> MutexGuard<'a, State<K, H>> {
        self.changed
            .wait(guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(not(loom))]
impl<K: Eq + Hash + Clone + 'static, H: ResourceHandle> Default for WeakCache<K, H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Eq + Hash + Clone + 'static, H: ResourceHandle> CacheSlot<K, H> {
    /// The key this slot holds.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Eq + Hash + Clone + 'static, H: ResourceHandle> Drop for CacheSlot<K, H> {
    fn drop(&mut self) {
        let mut state = lock(&self.cache.state);
        if state
            .entries
            .get(&self.key)
            .is_some_and(|entry| entry.id == self.id)
        {
            state.entries.remove(&self.key);
        }
        drop(state);
        self.cache.changed.notify_all();
    }
}

impl<K: Eq + Hash + Clone + 'static + std::fmt::Debug, H: ResourceHandle> std::fmt::Debug
    for CacheSlot<K, H>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheSlot").field("key", &self.key).finish()
    }
}
