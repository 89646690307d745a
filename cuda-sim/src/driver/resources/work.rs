//! Stream work: the operations a stream runs (kernels, memsets, copies, event records and
//! waits, host functions), as values. A stream operation is either executed at once on its
//! stream's timeline or, while the stream captures, recorded as a node of the capture's graph
//! (see `capture`); a graph launch executes its nodes' operations the same way, one stream
//! operation per node, so a node touches memory exactly as the direct call would.

use std::ffi::c_void;
use std::sync::Arc;

use crate::Sim;
use crate::base::errors::INVALID_VALUE;
use crate::base::types::{CuResult, Raw};
use crate::order::checker::Use;
use crate::order::races::Touch;
use crate::resources::launch::Launch;
use crate::resources::memory::AllocKind;
use crate::resources::streams::Target;
use cuda_sim_ptx::Access;

/// A host function and its argument, called outside the simulator's lock.
pub type HostCall = (unsafe extern "C" fn(*mut c_void), usize);

/// `CUgraphNodeType` values of the node kinds the simulator makes.
pub const NODE_KERNEL: u32 = 0;
pub const NODE_MEMCPY: u32 = 1;
pub const NODE_MEMSET: u32 = 2;
pub const NODE_HOST: u32 = 3;
pub const NODE_GRAPH: u32 = 4;
pub const NODE_EMPTY: u32 = 5;
pub const NODE_WAIT_EVENT: u32 = 6;
pub const NODE_EVENT_RECORD: u32 = 7;
pub const NODE_CONDITIONAL: u32 = 13;

/// A conditional node's operation: its handle, kind and body graphs, and (once the node is
/// instantiated or copied into a child) the bodies' operations.
#[derive(Clone, Debug)]
pub struct ConditionalOp {
    pub handle: u64,
    pub kind: u32,
    pub bodies: Vec<Raw>,
    pub resolved: Option<Vec<Vec<Op>>>,
}

/// Work of a simulated library (a cuBLAS or cuRAND call, `libs/`): run on the host as one
/// stream operation, with the footprint it declares checked as a kernel's accesses are (bounds,
/// races, initcheck, uses for the free-order check).
pub trait LibraryWork: Send + Sync + std::fmt::Debug {
    /// What the operation is, for messages (`cublasSgemm_v2: gemm 64x64x64`).
    fn describe(&self) -> String;

    /// The device memory read before the footprint is known: the scalars of cuBLAS's device
    /// pointer mode.
    fn scalars(&self) -> Vec<Touch> {
        Vec::new()
    }

    /// Every byte range the operation reads or writes.
    ///
    /// # Safety
    /// Every range of [`LibraryWork::scalars`] lies in live, mapped memory of this simulator.
    unsafe fn footprint(&self) -> Vec<Touch>;

    /// Computes the result.
    ///
    /// # Safety
    /// Every range of [`LibraryWork::scalars`] and [`LibraryWork::footprint`] lies in live,
    /// mapped memory of this simulator, readable and writable.
    unsafe fn run(&self);
}

pub const NODE_MEM_ALLOC: u32 = 10;
pub const NODE_MEM_FREE: u32 = 11;

/// One stream operation, with its arguments captured by value.
#[derive(Clone, Debug)]
pub enum Op {
    Kernel(Launch),
    /// `rows` rows of `count` elements of `width` bytes, `pitch` bytes apart.
    Memset {
        dst: u64,
        pitch: usize,
        value: u32,
        width: usize,
        count: usize,
        rows: usize,
    },
    /// `device` says which sides must be device (or pinned) memory: (destination, source).
    Memcpy {
        dst: u64,
        src: u64,
        len: usize,
        device: (bool, bool),
    },
    /// A copy from pageable host memory queued behind a host function: the bytes were taken
    /// when the copy was issued, as the driver stages pageable memory.
    Upload {
        dst: u64,
        data: Vec<u8>,
        device: bool,
    },
    EventRecord(Raw),
    EventWait(Raw),
    Host(unsafe extern "C" fn(*mut c_void), usize),
    /// A graph launched into a capture: its operations in order.
    Child(Vec<Op>),
    /// An allocation node: maps the graph-owned memory reserved at `addr` (`graph_memory`).
    GraphAlloc {
        addr: u64,
        size: u64,
    },
    /// A free node of graph-owned memory at `addr`.
    GraphFree {
        addr: u64,
    },
    Empty,
    /// A conditional node (`conditional`).
    Conditional(Box<ConditionalOp>),
    /// A call of a simulated library (`libs/`); a node of a graph is a kernel node, as the
    /// library's kernels would be.
    Library(Arc<dyn LibraryWork>),
    /// The start of a launch of an executable graph: the conditional handles its nodes read
    /// (as the exec had them when the launch was queued: the exec may be destroyed while the
    /// launch waits, which the driver allows) take their defaults. Not a node.
    ResetConditionals(Vec<u64>),
    /// The end of a launch of a graph of this context on another context's stream: the
    /// context's synchronisations are ordered after the stream up to here
    /// (`Sim::foreign_launch_done`). Not a node.
    LaunchDone(Raw),
}

impl Op {
    /// The `CUgraphNodeType` of a node holding this operation.
    pub fn node_type(&self) -> u32 {
        match self {
            Op::Kernel(_) | Op::Library(_) => NODE_KERNEL,
            Op::Memset { .. } => NODE_MEMSET,
            Op::Memcpy { .. } | Op::Upload { .. } => NODE_MEMCPY,
            Op::EventRecord(_) => NODE_EVENT_RECORD,
            Op::EventWait(_) => NODE_WAIT_EVENT,
            Op::Host(..) => NODE_HOST,
            Op::Child(_) => NODE_GRAPH,
            Op::Empty | Op::ResetConditionals(_) | Op::LaunchDone(_) => NODE_EMPTY,
            Op::Conditional(_) => NODE_CONDITIONAL,
            Op::GraphAlloc { .. } => NODE_MEM_ALLOC,
            Op::GraphFree { .. } => NODE_MEM_FREE,
        }
    }

    /// The operations to execute, with child graphs expanded in place.
    pub fn flatten(ops: Vec<Op>, into: &mut Vec<Op>) {
        for op in ops {
            match op {
                Op::Child(children) => Op::flatten(children, into),
                op => into.push(op),
            }
        }
    }
}

/// Logical time. Every operation of a stream starts when both the stream's previous operation
/// and the host's issue of it are done (the joins of `order::checker`), and lasts:
/// - a kernel: [`LAUNCH_NS`], plus its issued instructions spread over the threads that run at
///   once (at most [`LANES`], an H200's 132 SMs of 128 lanes), one nanosecond each;
/// - a copy or memset: [`TRANSFER_NS`], plus its bytes at [`BYTES_PER_NS`];
/// - a cuBLAS or cuRAND operation: [`LAUNCH_NS`], plus the bytes it touches at
///   [`BYTES_PER_NS`];
/// - anything else: nothing.
///
/// So work on unordered streams overlaps and two events' elapsed time is what it means on a
/// GPU; the figures are a model, not the H200's speed.
pub const LAUNCH_NS: u64 = 1_000;
/// The fixed cost of a copy or memset, in logical nanoseconds.
pub const TRANSFER_NS: u64 = 1_000;
/// Copy and memset bandwidth, in bytes per logical nanosecond (50 GB/s).
pub const BYTES_PER_NS: u64 = 50;
/// The device's lanes: threads that issue in the same nanosecond.
pub const LANES: u64 = 132 * 128;

/// A kernel's logical duration: see [`LAUNCH_NS`].
pub fn kernel_ns(instructions: u64, threads: u64) -> u64 {
    LAUNCH_NS + instructions.div_ceil(threads.clamp(1, LANES))
}

/// A cuBLAS or cuRAND operation's logical duration: a launch, plus the bytes it touches at
/// [`BYTES_PER_NS`].
pub fn library_ns(bytes: u64) -> u64 {
    LAUNCH_NS + bytes / BYTES_PER_NS
}

/// A copy's or memset's logical duration: see [`LAUNCH_NS`].
pub fn transfer_ns(bytes: u64) -> u64 {
    TRANSFER_NS + bytes / BYTES_PER_NS
}

/// When a synchronous call returns relative to the work it issues ([`Sim::sync_return`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncReturn {
    /// Once the work is done: the host has seen it.
    Done,
    /// Once the stream's earlier work is done and the source is staged: the host has seen
    /// that earlier work, not the copy.
    Staged,
    /// At once: the host has seen nothing.
    Unwaited,
}

impl Sim {
    /// Executes `op` now as one operation of `target`'s stream. Host functions are returned
    /// for the caller to call, in order, once the lock is released.
    pub fn execute(&mut self, target: Target, op: &Op) -> Result<Vec<HostCall>, CuResult> {
        self.refuse_import_writes(op)?;
        match op {
            Op::Kernel(launch) => {
                let operation = self.enqueue(target);
                self.run_kernel(launch, operation)?;
            }
            &Op::Memset {
                dst,
                pitch,
                value,
                width,
                count,
                rows,
            } => {
                let operation = self.enqueue(target);
                let row = count.checked_mul(width).ok_or(INVALID_VALUE)?;
                let bytes = (row as u64).saturating_mul(rows as u64);
                self.checker.advance(target.timeline, transfer_ns(bytes));
                // The rows' starts, computed twice rather than collected: `rows` is the
                // caller's number (a 2-D memset's height), and every row must lie in an
                // allocation, so the first pass stops at the first row outside memory.
                let start_of = |r: usize| {
                    r.checked_mul(pitch)
                        .and_then(|offset| dst.checked_add(offset as u64))
                        .ok_or(INVALID_VALUE)
                };
                for r in 0..rows {
                    self.touch(start_of(r)?, row as u64, operation, true)?;
                }
                if self.races.enabled() {
                    let touches: Vec<Touch> = (0..rows)
                        .map(|r| {
                            Touch::bytes(
                                start_of(r).expect("checked above"),
                                row as u64,
                                Access::Write,
                            )
                        })
                        .collect();
                    self.check_races(operation, "a memset".into(), &touches);
                }
                for r in 0..rows {
                    self.init_written(start_of(r).expect("checked above"), row as u64);
                }
                let bytes = value.to_le_bytes();
                for start in (0..rows).map(|r| start_of(r).expect("checked above")) {
                    for i in 0..count {
                        // SAFETY: `touch` checked that each row lies in one live allocation,
                        // which is mapped, writable memory of this simulator.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                bytes.as_ptr(),
                                (start as usize + i * width) as *mut u8,
                                width,
                            );
                        }
                    }
                }
            }
            &Op::Memcpy {
                dst,
                src,
                len,
                device,
            } => {
                let operation = self.enqueue(target);
                self.checker
                    .advance(target.timeline, transfer_ns(len as u64));
                self.touch(dst, len as u64, operation, device.0)?;
                self.touch(src, len as u64, operation, device.1)?;
                let touches = [
                    Touch::bytes(dst, len as u64, Access::Write),
                    Touch::bytes(src, len as u64, Access::Read),
                ];
                self.check_races(operation, "a copy".into(), &touches);
                self.init_copy_read(operation, src, len as u64);
                self.init_written(dst, len as u64);
                if len > 0 {
                    if dst == 0 || src == 0 {
                        return Err(INVALID_VALUE);
                    }
                    // SAFETY: device sides were checked to lie in live allocations (mapped
                    // memory); host sides are the caller's buffers of at least `len` bytes by
                    // the API's contract (for graph nodes: kept alive until the launch, as
                    // the driver requires). `copy` allows overlap.
                    unsafe {
                        std::ptr::copy(src as usize as *const u8, dst as usize as *mut u8, len)
                    };
                }
            }
            Op::Upload { dst, data, device } => {
                let operation = self.enqueue(target);
                self.checker
                    .advance(target.timeline, transfer_ns(data.len() as u64));
                self.touch(*dst, data.len() as u64, operation, *device)?;
                let touches = [Touch::bytes(*dst, data.len() as u64, Access::Write)];
                self.check_races(operation, "a copy".into(), &touches);
                self.init_written(*dst, data.len() as u64);
                if !data.is_empty() {
                    // SAFETY: the destination was checked to lie in a live allocation (mapped
                    // memory of this simulator); the source is our own copy of the bytes.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            data.as_ptr(),
                            *dst as usize as *mut u8,
                            data.len(),
                        )
                    };
                }
            }
            &Op::EventRecord(event) => self.record_on(event, target)?,
            &Op::EventWait(event) => self.wait_on(target, event)?,
            &Op::Host(function, data) => {
                self.enqueue(target);
                self.host_function_runs(target.timeline);
                // The stream is busy until the function returns (`deferred`).
                self.host_started(target.timeline);
                return Ok(vec![(function, data)]);
            }
            Op::Child(children) => {
                // Graph launches expand child graphs before executing; a child executed as one
                // operation queues what follows a host function behind it.
                let mut calls = Vec::new();
                for op in children {
                    calls.extend(self.run_or_defer(target, op.clone())?);
                }
                return Ok(calls);
            }
            Op::Empty => {
                self.enqueue(target);
            }
            Op::Library(work) => {
                let operation = self.enqueue(target);
                self.run_library(work.as_ref(), operation)?;
            }
            Op::Conditional(conditional) => self.run_conditional(target, conditional)?,
            Op::ResetConditionals(handles) => self.reset_conditionals(handles),
            &Op::LaunchDone(context) => self.foreign_launch_done(context, Some(target.timeline)),
            &Op::GraphAlloc { addr, size } => self.run_graph_alloc(target, addr, size)?,
            &Op::GraphFree { addr } => self.run_graph_free(target, addr)?,
        }
        Ok(Vec::new())
    }

    /// Runs a library's work as `operation`: its ranges must lie in live device memory
    /// (an **out-of-bounds** range fails the operation before it computes anything, as a
    /// kernel's illegal address fails its launch), then races and initcheck see its touches.
    fn run_library(&mut self, work: &dyn LibraryWork, operation: Use) -> Result<(), CuResult> {
        let mut touches = work.scalars();
        for touch in &touches {
            self.touch(touch.start, touch.end - touch.start, operation, true)?;
        }
        // SAFETY: the scalars' ranges were checked above to lie in live allocations.
        let footprint = unsafe { work.footprint() };
        for touch in &footprint {
            self.touch(touch.start, touch.end - touch.start, operation, true)?;
        }
        touches.extend(footprint);
        let bytes = touches.iter().map(|t| t.end - t.start).sum();
        self.checker.advance(operation.timeline, library_ns(bytes));
        let what = work.describe();
        self.check_races(operation, what.clone(), &touches);
        self.init_library(operation, &what, &touches);
        // SAFETY: every range was checked above to lie in one live allocation (mapped memory
        // of this simulator).
        unsafe { work.run() };
        Ok(())
    }

    /// When a synchronous call issuing `op` returns, by the driver's documented "API
    /// synchronization behavior": a copy into device memory from pageable host memory returns
    /// once its source is staged, after the stream's earlier work but before the device side
    /// is written; one between two device allocations, and a memset of device memory, return
    /// at once; anything else once it is done. (Pinned and managed memory count as host memory
    /// here: no early return.)
    pub fn sync_return(&self, op: &Op) -> SyncReturn {
        let device = |addr: u64| {
            self.alloc_at(addr)
                .is_some_and(|a| !matches!(a.kind, AllocKind::Host | AllocKind::Managed))
        };
        match op {
            Op::Memcpy { dst, src, .. } if device(*dst) => match self.alloc_at(*src) {
                None if *src != 0 => SyncReturn::Staged,
                Some(_) if device(*src) => SyncReturn::Unwaited,
                _ => SyncReturn::Done,
            },
            Op::Memset { dst, .. } if device(*dst) => SyncReturn::Unwaited,
            _ => SyncReturn::Done,
        }
    }

    /// Issues `op` on `target`: recorded as a node while the stream captures, else executed.
    /// `sync`: a synchronous call (run on the legacy stream, then waited for by the host).
    pub fn submit(
        &mut self,
        target: Target,
        op: Op,
        sync: bool,
    ) -> Result<Vec<HostCall>, CuResult> {
        if self.capturing.contains_key(&target.timeline) {
            if sync {
                return Err(self.refuse_in_capture(target));
            }
            self.capture_op(target, op)?;
            return Ok(Vec::new());
        }
        self.check_legacy_capture(target, sync)?;
        // The call returns once a copy into pageable memory is done (the stream was idle, so
        // it runs now): the host has then seen the stream's work, as after a synchronous call.
        // A synchronous copy into device memory may return before it is done.
        let returns = match sync {
            true => self.sync_return(&op),
            false if self.copies_into_pageable(&op) => SyncReturn::Done,
            false => SyncReturn::Unwaited,
        };
        if returns == SyncReturn::Staged {
            // The call waits for the work the copy follows before it stages the source.
            for timeline in self.implicit(target).into_iter().chain([target.timeline]) {
                self.checker.host_waits(timeline);
            }
        }
        let host = self.run_or_defer(target, op)?;
        if returns == SyncReturn::Done {
            self.checker.host_waits(target.timeline);
        }
        Ok(host)
    }
}
