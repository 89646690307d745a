//! Which exported function each thread is in, and how often each was called: the state that
//! the call path (`faults.rs`), the checker and the report all read, on its own so that none of
//! them depends on another for it.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTS: Mutex<Option<HashMap<&'static str, u64>>> = Mutex::new(None);
static SEQ: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static CURRENT: Cell<(&'static str, u64)> = const { Cell::new(("", 0)) };
}

/// The exported function this thread is executing and its process-wide sequence number.
pub fn current_call() -> (&'static str, u64) {
    CURRENT.try_with(Cell::get).unwrap_or(("", 0))
}

/// How many times each exported function was called.
pub fn counts() -> Vec<(&'static str, u64)> {
    let counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let mut list: Vec<_> = counts
        .as_ref()
        .map(|map| map.iter().map(|(k, v)| (*k, *v)).collect())
        .unwrap_or_default();
    list.sort();
    list
}

/// Enters exported function `name` on this thread: its process-wide sequence number, and how
/// many times it has been called, this call included.
pub fn enter(name: &'static str) -> (u64, u64) {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed) + 1;
    let n = {
        let mut counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts
            .get_or_insert_with(HashMap::new)
            .entry(name)
            .or_insert(0);
        *count += 1;
        *count
    };
    let _ = CURRENT.try_with(|current| current.set((name, seq)));
    (seq, n)
}
