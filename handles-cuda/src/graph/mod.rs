//! CUDA graphs: built node by node or captured, instantiated, replayed.
//!
//! # Guide
//!
//! | to | use |
//! |---|---|
//! | record a sequence of launches and copies once | [`GraphHandle::capture`]: the closure's [`Capture`] queues work on a private stream |
//! | capture on two streams at once | [`Capture::fork`] (a [`CaptureBranch`] on a second private stream), [`Capture::join`]; a branch never joined is joined at the end |
//! | memory whose lifetime is the graph's | [`GraphHandle::add_mem_alloc_node`], then nodes after it, then [`GraphHandle::add_mem_free_node`] after them (the rules: `memory_nodes.rs`) |
//! | build a graph node by node | [`GraphHandle::create`], `add_kernel_node`, `add_memset_node`, `add_copy_node`, `add_event_record_node`, `add_host_node`, `add_empty_node` |
//! | replay it | [`GraphHandle::instantiate`], then [`GraphExecHandle::launch`] on any stream |
//! | change its parameters | [`GraphExecHandle::update`] from a graph of the same shape |
//! | branch or loop on the device | [`GraphHandle::create_conditional`], then [`GraphHandle::add_conditional_node`] ([`ConditionalKind`]: if, if/else, while, switch); fill the returned bodies with the same node methods; kernels set the condition through a [`Conditional`] parameter |
//! | nest a graph | [`GraphHandle::add_child_graph_node`] (a copy of the child, as of now) |
//! | look at a graph | [`GraphHandle::debug_dot`] writes Graphviz DOT ([`DotFlags`]) |
//! | change one node | [`GraphExecHandle::set_kernel_node_params`], `set_memset_node_params`, `set_copy_node_params`, named by the source graph's [`GraphNode`] |
//! | turn a node off and on | [`GraphExecHandle::set_node_enabled`], `node_enabled` |
//!
//! A graph keeps every handle its nodes use (buffers, kernels, events): dropping the user's handles
//! while the graph lives, or while a replay runs, frees nothing early.
//!
//! # How it works
//!
//! - **Conditional bodies and child graphs.** A conditional node's body graphs belong to the
//!   driver (never destroyed by us); their handles keep the outermost graph alive, and their
//!   nodes attach what they reference to it, so its instantiation and launches keep it as for
//!   its own nodes. Host and event nodes are refused in bodies; a body cannot be instantiated.
//!   A conditional handle belongs to the graph it was made on: a node of another graph, a
//!   second node, or a stream launch with it as an argument is an error. A child-graph node
//!   is a copy of the child: the parent attaches the child's attachments as of that moment.
//! - **Graphs.** A graph's nodes hold raw values, so the graph keeps their handles
//!   (*attachments*: buffers, kernels, events); `instantiate` copies them into the `GraphExec`,
//!   `update` swaps them, and `GraphExec::launch` reports the buffers on its stream and notes the
//!   kernels' libraries, like a direct launch. An accumulator rather than driver user objects:
//!   releases then happen on the program's thread, never in a driver callback that may not call
//!   CUDA. Capture runs on a private, unregistered stream (no lookup by raw value finds it; the
//!   capture is ended by a guard, also if the closure panics) reachable only through the closure's `Capture`
//!   (`!Send`): nothing else can queue work on it, so every captured use is attached and no
//!   allocation or free is ever captured. A fork adds a second private stream, joined to the
//!   capture by a private event; the branch borrows the capture, and the guard joins any branch
//!   left unjoined before it ends the capture.
//! - **Graph-owned memory** is not an attachment: its handle frees nothing, its uses outside its
//!   graph are refused by the reach check, and its nodes' order is checked against the graph's
//!   record of dependencies (`memory_nodes.rs`, with the driver's rules as measured).
//! - **Node updates** replace one node's span of the executable graph's attachments under its
//!   lock; the old list is dropped after, ordered like an `update`'s (`node_update.rs`). A stream lent to cudarc may be captured by cudarc;
//!   while any is lent or any capture runs, and always on streams this crate does not own and
//!   on the per-thread stream, allocations, frees and queued work first ask
//!   `cuStreamIsCapturing` and refuse (a free is leaked and reported) rather than become graph
//!   nodes. A loan of an owned stream whose cudarc wrapper is gone stays counted while the stream still captures
//!   (cudarc's wrapper ends nothing when dropped), and a wrapped cudarc slice does not hand out
//!   cudarc's stream (`deallocation_stream` is `None`). Event records and stream waits are
//!   refused the same way: a record into another
//!   library's capture would make a captured event, and a wait on it would pull a stream of
//!   ours into that capture. A capture begun by another thread between that check and the call cannot be ordered
//!   against, so the stream conversions to and from cudarc are `unsafe`, with that as their
//!   contract. `Capture` has no event record or wait: an event recorded in a capture is a fork
//!   point through which any stream could join it. `instantiate` and `update` hold the graph's
//!   (and the executable graph's) lock across the driver call, so no node is added, and no launch
//!   reports the old attachments, in between. Known limit: dropping the last handle of a
//!   synchronous allocation, a mapping or a library that ran work, while a capture runs in the same
//!   context (inside the capture closure, or on another thread), leaks it (reported): the context
//!   synchronisation its release needs is refused during a capture, in any capture mode.

pub(crate) mod book;
pub(crate) mod capture;
pub(crate) mod child;
pub(crate) mod conditional;
pub(crate) mod exec;
pub(crate) mod host;
pub(crate) mod launch_plan;
pub(crate) mod memory_nodes;
pub(crate) mod node_update;
pub(crate) mod nodes;

pub use self::capture::{Capture, CaptureBranch, CaptureMode};
pub use self::child::DotFlags;
pub use self::conditional::{ConditionalKind, ConditionalNode, MAX_SWITCH_BODIES};
pub use self::exec::{GraphExec, GraphExecBox, GraphExecHandle, GraphExecWeak};
pub use self::nodes::{Graph, GraphBox, GraphHandle, GraphNode, GraphWeak};
pub use crate::code::conditional::{Conditional, ConditionalHandle};
