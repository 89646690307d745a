//! Memory: pools and their tuning, allocations, copies, virtual memory.
//!
//! - **Peer access** of an owned pool is revoked before `cuMemPoolDestroy`, one device at a time
//!   (a list including the owner is rejected whole; nvbug 5698116 makes a recycled pool inherit it).
//!
//! - **Virtual memory** (`vmm.rs`, `growable.rs`). `PhysicalAllocation` and `AddressReservation` own nothing;
//!   a `Mapping` owns both, so either may be dropped first. Pointers into mappings
//!   (`Mapping::device_ptr`, `GrowableBuffer::slice`) keep their mappings and report their stream
//!   uses' contexts (`ContextsUsed`); the unmap, a host call, synchronises them first. A failed
//!   unmap leaks its reservation too (never freed while mapped); a failed stream destroy leaks its
//!   context likewise. Sizes are rounded to `cuMemGetAllocationGranularity`.
//!
//! - **Pool tuning** (`pool_tuning.rs`): attributes, usage, and `set_device_current`, which keeps
//!   an owned pool alive in a process-wide table while it is the device's current pool.
//!
//! - **Reach.** Memory of a pool on another device is used only while that device has peer
//!   access (`DevicePtrHandle::check_accessible_on`, called by every safe method that queues
//!   work, and by graph launches for each buffer); each such use holds an `AccessGuard` until
//!   its work is queued and notes its context in the pool, and revoking the access first waits
//!   for the guards (new uses are refused meanwhile), then for those contexts.

pub(crate) mod copy;
pub(crate) mod device_ptr;
pub(crate) mod growable;
pub(crate) mod pool;
pub(crate) mod pool_tuning;
pub(crate) mod reach;
pub(crate) mod remote;
pub(crate) mod typed;
pub(crate) mod vmm;
