//! Memory: pools and their tuning, allocations, copies, virtual memory.

pub(crate) mod device_ptr;
pub(crate) mod growable;
pub(crate) mod pool;
pub(crate) mod pool_tuning;
pub(crate) mod vmm;
