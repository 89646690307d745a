//! What orders what: a vector clock per timeline, the uses of each allocation, the footprints of
//! stream operations that decide data races, the host pages guarded for them, and the violations
//! found. Above `base` only.

pub(crate) mod checker;
pub(crate) mod page_guard;
pub(crate) mod races;
pub(crate) mod verdict;
