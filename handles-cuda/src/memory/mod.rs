//! Device memory: typed buffers, pools, allocations, copies, virtual memory.
//!
//! # Guide
//!
//! | to | use |
//! |---|---|
//! | hold `n` values of a plain-data type on the device | [`DeviceBuffer<T>`]: `zeroed`, `from_slice`, `to_vec`, `slice` |
//! | allocate untyped bytes | [`DevicePtrHandle`]: `alloc` (synchronous), `alloc_async` (stream-ordered), `alloc_from_pool` |
//! | allocate from a pool you configure | [`MemoryPoolHandle::create`] with [`PoolProps`] (device, NUMA host, IPC-capable); [`ReusePolicy`] and [`PoolUsage`] tune and observe it |
//! | allocate pinned host memory | [`DevicePtrHandle::alloc_host`] |
//! | queue many copies in one call | [`BatchCopy`] (bytes or elements) and [`StreamHandle::copy_batch`](crate::StreamHandle::copy_batch): `cuMemcpyBatchAsync`, or a loop on older drivers |
//! | allocate pinned host memory | [`DevicePtrHandle::alloc_host`], or a pool at [`PoolLocation::Host`] / [`PoolLocation::HostNuma`] (CUDA 12.6 / 12.2) with `alloc_from_pool` |
//! | share memory between the host and the devices | managed memory: [`DevicePtrHandle::alloc_managed`], [`DeviceBuffer::alloc_managed`]; `prefetch`, `advise` ([`Advice`]), `attach` ([`Attach`]) |
//! | read or write host-accessible memory on the host | `host_view` / `host_view_mut`: a [`HostView`] / [`HostViewMut`] slice, once the memory's uses are complete; work on it is refused while the view lives |
//! | reserve address space and map physical memory | [`PhysicalAllocationHandle`], [`AddressReservationHandle`], [`MappingHandle`]; [`GrowableBuffer`] grows in place |
//! | share memory with another process | a pool with `PoolProps { ipc: true, .. }` and [`crate::ipc`] |
//!
//! ```no_run
//! use handles_cuda::{ContextHandle, DeviceBuffer, StreamFlags, StreamHandle};
//!
//! # fn main() -> handles_cuda::Result<()> {
//! let context = ContextHandle::primary(0)?;
//! let stream = StreamHandle::create(&context, StreamFlags::default(), 0)?;
//! let xs = DeviceBuffer::from_slice(&[1.0f32, 2.0, 3.0], &stream)?;
//! let head = xs.slice(0..2)?; // a view: the same allocation, two elements
//! assert_eq!(head.to_vec(&stream)?, [1.0, 2.0]);
//! # Ok(()) }
//! ```
//!
//! Every allocation is freed exactly once, after the last handle drops and after every stream that
//! used it (see [`DevicePtrHandle`]); a pointer keeps its pool, context and deallocation stream
//! alive. Copies count bytes on [`DevicePtrHandle`] and elements on [`DeviceBuffer`].
//!
//! # How it works
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
//! - **Batched copies** (`batch.rs`): every copy is checked as a single copy is
//!   (`copy_ranges`), then the batch as a whole (no copy writes bytes another touches: the
//!   driver orders nothing inside a batch), then capture state and reach, with the guards held
//!   until the copies are queued; each allocation is reported once, however many copies and
//!   views name it. `cuMemcpyBatchAsync` takes up to 1024 copies a call; older drivers and the
//!   legacy stream get one `cuMemcpyAsync` per copy, with the same checks.
//!
//! - **Reach.** Memory of a pool on another device is used only while that device has peer
//!   access (`DevicePtrHandle::check_accessible_on`, called by every safe method that queues
//!   work, and by graph launches for each buffer); each such use holds an `AccessGuard` until
//!   its work is queued and notes its context in the pool, and revoking the access first waits
//!   for the guards (new uses are refused meanwhile), then for those contexts.
//!
//! - **Host views** (`host_view.rs`, with the soundness argument). Managed and pinned memory has a
//!   gate of its own: each use enters it in the same reach check and notes its context; a view
//!   refuses new uses, waits for those in flight, synchronises the noted contexts, and only then
//!   lends the slice. Plain device memory has no gate.

pub(crate) mod batch;
pub(crate) mod copy;
pub(crate) mod device_ptr;
pub(crate) mod fixed_reach;
pub(crate) mod growable;
pub(crate) mod host_access;
pub(crate) mod host_view;
pub(crate) mod managed;
pub(crate) mod pool;
pub(crate) mod pool_tuning;
pub(crate) mod reach;
pub(crate) mod remote;
pub(crate) mod typed;
pub(crate) mod vmm;

pub use self::batch::BatchCopy;
pub use self::device_ptr::{AllocKind, DevicePtr, DevicePtrBox, DevicePtrHandle, DevicePtrWeak};
pub use self::growable::GrowableBuffer;
pub use self::host_view::{HostView, HostViewMut};
pub use self::managed::{Advice, Attach};
pub use self::pool::{
    MemoryPool, MemoryPoolBox, MemoryPoolHandle, MemoryPoolWeak, PoolLocation, PoolProps,
};
pub use self::pool_tuning::{PoolUsage, ReusePolicy};
pub use self::reach::AccessGuard;
pub use self::typed::{DeviceBuffer, Elements};
pub use self::vmm::{
    AddressReservation, AddressReservationBox, AddressReservationHandle, AddressReservationWeak,
    FabricHandle, Mapping, MappingBox, MappingHandle, MappingWeak, PhysicalAllocation,
    PhysicalAllocationBox, PhysicalAllocationHandle, PhysicalAllocationWeak, Sharing, granularity,
};
/// Plain-old-data element types of [`DeviceBuffer`] (`bytemuck`'s traits; derive them with
/// `bytemuck`'s `derive` feature).
pub use bytemuck::{Pod, Zeroable};
