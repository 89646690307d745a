//! Execution: contexts, streams, events, green contexts, and their recyclers.
//!
//! # Guide
//!
//! | to | use |
//! |---|---|
//! | know a device: name, UUID, compute capability, SMs, memory, PCI location, every attribute | [`Device::new`], [`Device::properties`] (read once per device, then cached) |
//! | get a device's context | [`ContextHandle::primary`] (cached: a second call costs a lookup) |
//! | queue work in order | [`StreamHandle::create`]; [`StreamHandle::legacy`] and [`StreamHandle::per_thread`] are the default streams |
//! | order one stream after another, or time work | [`EventHandle::create`], `record`, [`StreamHandle::wait_event`]; [`EventFlags::timing`] and `elapsed_ms` |
//! | reuse events or streams in a hot loop | [`EventRecycler`], [`StreamRecycler`]: each hands out an object indistinguishable from a fresh one |
//! | run on a share of the SMs | [`GreenContextHandle::create`] |
//! | call another library in a context | [`ContextHandle::run`]: current for the call, the caller's restored after |
//! | run a Rust closure when a stream gets there | [`StreamHandle::launch_host`] (no CUDA calls inside; a panic is caught and reported) |
//! | await work from async code | [`EventHandle::completed`]: a [`Completion`] future for any executor, woken by a host function, no thread spinning |
//!
//! ```no_run
//! use handles_cuda::{ContextHandle, EventHandle, StreamFlags, StreamHandle};
//! use handles_cuda::exec::EventFlags;
//!
//! # fn main() -> handles_cuda::Result<()> {
//! let context = ContextHandle::primary(0)?;
//! let producer = StreamHandle::create(&context, StreamFlags::default(), 0)?;
//! let consumer = StreamHandle::create(&context, StreamFlags::default(), 0)?;
//! let ready = EventHandle::create(&context, EventFlags::default())?;
//! ready.record(&producer)?;
//! consumer.wait_event(&ready)?; // the consumer's later work runs after the producer's earlier work
//! # Ok(()) }
//! ```
//!
//! No call needs a context bound to the thread: each makes the one it needs current for the call.
//!
//! # How it works
//!
//! - **Owned contexts, no hidden thread state.** What is made in a context keeps an owning handle
//!   of it. Work on "the current context" (default-stream tokens, `create_in_current`) resolves it
//!   to the handle that manages it or a retain of the device's primary context; a context no
//!   handle can own is refused with `Err` (inside `ContextHandle::run`, the handle it runs, such
//!   as a green context's, counts as managing). `ContextHandle::current()` follows the same rule, and
//!   every constructor that keeps its context (and both recyclers) resolves a non-owning
//!   reference that way first (`keep_alive`), so no safe call stores a context it cannot keep
//!   alive. Constructors and deleters make their context current
//!   only for the call (`driver/current.rs`) and restore the caller's on every exit; if only the
//!   restore fails, the new resource is dropped again (`ContextHandle::run` offers the same to
//!   other libraries' calls).
//!
//! - **Green contexts** (`green.rs`): the green context is owned; `context()` is a with-owner
//!   `ContextHandle` that keeps it, and streams (`cuGreenCtxStreamCreate`) keep that handle.
//!
//! - **Event recycling** (`event_recycler.rs`, opt in): a per-thread cache of released events
//!   (no lock, no atomics). An event is cached only if it is the sole handle (strong and weak
//!   counts), untimed and not interprocess, and handed out again only once its last record
//!   completed: the next owner sees exactly a fresh event. The release asks the driver nothing:
//!   an event not recorded since it was handed out is ready; a recorded one is pending. Records
//!   made with `RecycledEvent::record` on a stream this crate created carry the stream (a weak
//!   handle: equal means the same stream) and the thread's ticket; one thread's records on one
//!   stream complete in order, so an acquire that finds nothing ready binary-searches that
//!   sequence with `cuEventQuery` and readies the newest completed record and all earlier ones.
//!   Anything else (`Deref` to the `EventHandle`, a default-stream token) is settled by a query of
//!   its own. An acquire never waits: if nothing completed, it creates an event.
//!
//! - **Stream recycling** (`stream_recycler.rs`, opt in): a per-thread cache keyed by context,
//!   flags and priority; a stream is cached only if it is idle (`cuStreamQuery`), not capturing,
//!   and the sole handle, strong or weak (recycled streams are not registered), so nothing from
//!   the old owner can reach it.
//!
//! Descriptors travel between processes with `send_fd`/`receive_fd` (a length-prefixed payload
//! and one `SCM_RIGHTS` descriptor per message, received close-on-exec). Driver calls are written
//! once, through `driver!` (which names the call from the call itself), `out` (out-pointers) and
//! `create_in` (create in a context; a failed restore drops the new handle, so the real deleter
//! undoes it).
//!
//! `cuda-sim` is a simulated driver that is also a checker (vector clocks per stream); CI
//! runs the GPU suite on it, and its README lists what it models.

pub(crate) mod completion;
pub(crate) mod completion_notifier;
pub(crate) mod completion_protocol;
pub(crate) mod completion_waiter;
pub(crate) mod context;
pub(crate) mod device;
pub(crate) mod disposal;
pub(crate) mod event;
pub(crate) mod event_recycler;
pub(crate) mod green;
pub(crate) mod host;
pub(crate) mod notifier_count;
pub(crate) mod record_count;
pub(crate) mod spin_credit;
pub(crate) mod stream;
pub(crate) mod stream_generation;
pub(crate) mod stream_progress;
pub(crate) mod stream_recycler;

pub use self::completion::{
    BUSY_NOTIFIERS_PER_CONTEXT, Completion, NOTIFIERS_PER_CONTEXT, clear_notifiers,
};
pub use self::context::{Context, ContextBox, ContextHandle, ContextWeak, clear_primary_cache};
pub use self::device::{Device, DeviceProperties, DeviceUuid, PciLocation};
pub use self::disposal::flush_disposals;
pub use self::event::{Event, EventBox, EventFlags, EventHandle, EventWeak};
pub use self::event_recycler::{EventRecycler, RecycledEvent, clear_recycled_events};
pub use self::green::{GreenContext, GreenContextBox, GreenContextHandle, GreenContextWeak};
pub use self::stream::{
    LEGACY_STREAM, PER_THREAD_STREAM, Stream, StreamBox, StreamFlags, StreamHandle, StreamWeak,
};
pub use self::stream_recycler::{RecycledStream, StreamRecycler, clear_recycled_streams};
