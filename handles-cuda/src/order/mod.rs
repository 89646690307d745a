//! What orders a free after its uses: the streams a buffer was used on, and the contexts.
//!
//! - **The ordering rule for frees** (`stream_order.rs`). Stream-ordered memory is freed with
//!   `cuMemFreeAsync` on its deallocation ("home") stream. Every safe method that queues work on
//!   the memory reports its stream: on home that is one atomic load and a compare; on another
//!   stream it records a marker event there (one per stream, re-recorded). Moving the free
//!   records a marker on the old home. The free makes home wait for every marker, or the host
//!   waits; if neither can be queued, the memory leaks and the deleter reports it, never an
//!   unordered free. A per-thread home dropped on another thread synchronises its context first.
//!   Host copies wait for the stream and then copy synchronously, so they never return while the
//!   driver may still use the borrowed slice. A wrapped cudarc slice follows the same rule: before
//!   cudarc's free, the slice's stream waits for the other streams' markers. Work queued through
//!   the raw pointer is the caller's.

pub(crate) mod access_gate;
pub(crate) mod contexts_used;
pub(crate) mod contexts_used_protocol;
pub(crate) mod markers;
pub(crate) mod stream_order;
pub(crate) mod stream_order_protocol;
