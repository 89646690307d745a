//! NCCL: one communicator per device, each owning its device's context and the stream its
//! collectives run on.
//!
//! Communicators are not thread-safe, so each record holds a lock that every call takes. A
//! collective that fails marks the communicator failed, and its deleter then aborts it
//! (`ncclCommAbort`) instead of destroying it: `ncclCommDestroy` would wait for operations that
//! may never complete, so an error never hangs the process at drop.

use std::ffi::CStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::nccl::sys::{self as nccl, ncclResult_t};
use handles_core::ResourceHandle;
use handles_cuda::{ContextHandle, DevicePtrHandle, StreamHandle};

use crate::checks::{device_of, f32_bytes, require_fits, require_reachable};
use crate::error::{LibError, require};

/// One rank of an NCCL communicator.
#[derive(ResourceHandle)]
#[handle(raw = nccl::ncclComm_t, accessor = as_raw, delete = destroy)]
pub struct NcclComm {
    /// The stream this rank's collectives run on.
    #[owner]
    pub stream: StreamHandle,
    /// The context of this rank's device.
    #[owner]
    pub context: ContextHandle,
    /// This rank.
    #[handle(copy)]
    pub rank: usize,
    /// The number of ranks.
    #[handle(copy)]
    pub world_size: usize,
    /// Set when a call on the communicator failed: it is then aborted, not destroyed.
    #[handle(skip)]
    failed: AtomicBool,
    /// Serialises the calls on the communicator, which NCCL requires.
    #[handle(skip)]
    calls: Mutex<()>,
}
// SAFETY: NCCL lets a communicator be used from any thread, one call at a time; every call
// through this crate holds the record's lock, and the deleter runs when no handle is left.
unsafe impl handles_core::ThreadSafe for NcclComm {}

impl NcclComm {
    /// The record of rank `rank` of `world_size`, on `stream` in `context` (its device's),
    /// for `NcclCommHandle::from_raw` or `from_raw_borrowed` with a communicator made
    /// elsewhere; not yet failed.
    pub fn new(
        stream: StreamHandle,
        context: ContextHandle,
        rank: usize,
        world_size: usize,
    ) -> Self {
        NcclComm {
            stream,
            context,
            rank,
            world_size,
            failed: AtomicBool::new(false),
            calls: Mutex::new(()),
        }
    }
}

fn destroy(raw: nccl::ncclComm_t, record: &NcclComm) -> Result<(), LibError> {
    record.context.run(|| {
        let mut pending = ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is alive; `pending` is a valid out-pointer.
        let asked = unsafe { nccl::ncclCommGetAsyncError(raw, &mut pending) };
        let broken = record.failed.load(Ordering::Relaxed)
            || asked != ncclResult_t::ncclSuccess
            || pending != ncclResult_t::ncclSuccess;
        if broken {
            // SAFETY: the handle owns `raw`; abort is the call for a communicator in error.
            ok("ncclCommAbort", unsafe { nccl::ncclCommAbort(raw) })
        } else {
            // SAFETY: the handle owns `raw` and this deleter runs once.
            ok("ncclCommDestroy", unsafe { nccl::ncclCommDestroy(raw) })
        }
    })
}

fn ok(call: &'static str, status: ncclResult_t) -> Result<(), LibError> {
    if status == ncclResult_t::ncclSuccess {
        return Ok(());
    }
    // SAFETY: NCCL is loaded (it returned the status); the string is static.
    let text = unsafe { CStr::from_ptr(nccl::ncclGetErrorString(status)) };
    Err(LibError::Status {
        call,
        status: format!("{status:?}: {}", text.to_string_lossy()),
    })
}

fn loaded() -> Result<(), LibError> {
    // SAFETY: only probes whether the library can be opened.
    require("NCCL", unsafe { nccl::is_culib_present() })
}

impl NcclCommHandle {
    /// NCCL's version (`ncclGetVersion`), e.g. 22703 for 2.27.3.
    pub fn version() -> Result<i32, LibError> {
        loaded()?;
        let mut version = 0;
        // SAFETY: `version` is a valid out-pointer.
        ok("ncclGetVersion", unsafe {
            nccl::ncclGetVersion(&mut version)
        })?;
        Ok(version)
    }

    /// One communicator per stream, rank `i` on `streams[i]`'s device (`ncclCommInitAll`, a
    /// single-process clique). The streams must be on distinct devices.
    pub fn init_all(streams: &[StreamHandle]) -> Result<Vec<Self>, LibError> {
        loaded()?;
        let contexts = streams
            .iter()
            .map(crate::context_of)
            .collect::<Result<Vec<_>, _>>()?;
        let devices = contexts
            .iter()
            .map(|context| device_of(context).map(|device| device as i32))
            .collect::<Result<Vec<_>, _>>()?;
        let mut unique = devices.clone();
        unique.sort_unstable();
        unique.dedup();
        if unique.len() != devices.len() || devices.is_empty() {
            return Err(LibError::Mismatched {
                what: "ncclCommInitAll needs one stream per distinct device",
            });
        }
        let count = i32::try_from(devices.len()).map_err(|_| LibError::TooLarge {
            what: "device count",
            value: devices.len(),
        })?;
        let mut raws = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `raws` has room for `count` communicators, `devices` lists `count` device
        // ordinals; NCCL makes each device's context current itself.
        ok("ncclCommInitAll", unsafe {
            nccl::ncclCommInitAll(raws.as_mut_ptr(), count, devices.as_ptr())
        })?;
        Ok(raws
            .into_iter()
            .zip(streams.iter().zip(contexts))
            .enumerate()
            .map(|(rank, (raw, (stream, context)))| {
                let record = NcclComm::new(stream.clone(), context, rank, devices.len());
                // SAFETY: a fresh communicator owned by nobody else; `destroy` destroys (or
                // aborts) it once, in its device's context, which the record keeps alive.
                unsafe { NcclCommHandle::from_raw(raw, record) }
            })
            .collect())
    }

    /// Rank `rank` of a communicator of `world_size` ranks identified by `id`
    /// (`ncclCommInitRank`), on `stream`'s device: every rank, in this process or another,
    /// calls this with the same id; the call returns once all ranks have joined.
    pub fn init_rank(
        id: &NcclUniqueId,
        rank: usize,
        world_size: usize,
        stream: &StreamHandle,
    ) -> Result<Self, LibError> {
        loaded()?;
        if rank >= world_size {
            return Err(LibError::BadRank { rank, world_size });
        }
        let (ranks, this) = (
            i32::try_from(world_size).map_err(|_| LibError::TooLarge {
                what: "world size",
                value: world_size,
            })?,
            rank as i32,
        );
        let context = crate::context_of(stream)?;
        context.run(|| {
            let mut raw = std::ptr::null_mut();
            // SAFETY: the stream's context is current (NCCL binds the rank to its device);
            // `raw` is a valid out-pointer; the id is passed by value.
            ok("ncclCommInitRank", unsafe {
                nccl::ncclCommInitRank(&mut raw, ranks, id.0, this)
            })?;
            let record = NcclComm::new(stream.clone(), context.clone(), rank, world_size);
            // SAFETY: a fresh communicator owned by nobody else; `destroy` destroys (or
            // aborts) it once, in its device's context, which the record keeps alive.
            Ok(unsafe { NcclCommHandle::from_raw(raw, record) })
        })
    }

    /// Whether a call on this communicator failed (it will be aborted when dropped).
    pub fn failed(&self) -> bool {
        self.record().failed.load(Ordering::Relaxed)
    }
}

/// The id of a communicator, made by one rank and handed to the others (`ncclGetUniqueId`),
/// for instance as the 128 bytes of [`NcclUniqueId::to_bytes`] over a socket.
#[derive(Clone, Copy)]
pub struct NcclUniqueId(nccl::ncclUniqueId);

impl NcclUniqueId {
    /// A new id (`ncclGetUniqueId`).
    pub fn new() -> Result<Self, LibError> {
        loaded()?;
        let mut id = nccl::ncclUniqueId { internal: [0; 128] };
        // SAFETY: `id` is a valid out-pointer.
        ok("ncclGetUniqueId", unsafe { nccl::ncclGetUniqueId(&mut id) })?;
        Ok(NcclUniqueId(id))
    }

    /// The id's 128 bytes, to send to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0.internal.map(|byte| byte as u8)
    }

    /// An id received from the rank that made it.
    pub fn from_bytes(bytes: &[u8; 128]) -> Self {
        NcclUniqueId(nccl::ncclUniqueId {
            internal: bytes.map(|byte| byte as std::ffi::c_char),
        })
    }
}

impl std::fmt::Debug for NcclUniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NcclUniqueId(..)")
    }
}

/// Sums `count` f32s element-wise across ranks (`ncclAllReduce` with `ncclSum`), one call per
/// communicator inside one NCCL group, as one thread driving several devices must. `sends[i]`
/// and `recvs[i]` belong to `comms[i]`'s device; each holds at least `count` f32s and is
/// reachable from that device (checked), and each is reported as used on its communicator's
/// stream. A communicator may be listed once only. If any call fails, every communicator of
/// the group is marked failed.
pub fn all_reduce_sum_f32(
    comms: &[NcclCommHandle],
    sends: &[&DevicePtrHandle],
    recvs: &[&DevicePtrHandle],
    count: usize,
) -> Result<(), LibError> {
    if comms.len() != sends.len() || comms.len() != recvs.len() || comms.is_empty() {
        return Err(LibError::Mismatched {
            what: "one send and one receive buffer per communicator",
        });
    }
    // The communicators are locked in a fixed order (by address), so two groups over the
    // same communicators cannot deadlock; one listed twice would wait for itself.
    let raw = |i: usize| comms[i].as_raw() as usize;
    let mut order: Vec<usize> = (0..comms.len()).collect();
    order.sort_by_key(|&i| raw(i));
    if order.windows(2).any(|pair| raw(pair[0]) == raw(pair[1])) {
        return Err(LibError::DuplicateComm);
    }
    let bytes = f32_bytes(count, 1)?;
    // Held until the group is queued.
    let mut reach = Vec::new();
    for (i, comm) in comms.iter().enumerate() {
        require_fits(sends[i], bytes, || format!("sends[{i}] ({count} f32s)"))?;
        require_fits(recvs[i], bytes, || format!("recvs[{i}] ({count} f32s)"))?;
        reach.extend(require_reachable([sends[i], recvs[i]], comm.stream())?);
    }
    loaded()?;
    let _held: Vec<_> = order
        .iter()
        .map(|&i| {
            comms[i]
                .record()
                .calls
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        })
        .collect();
    let mut queued = vec![false; comms.len()];
    // SAFETY: starts a group; every path below ends it.
    let mut status = ok("ncclGroupStart", unsafe { nccl::ncclGroupStart() });
    if status.is_ok() {
        for (i, comm) in comms.iter().enumerate() {
            let called = comm.context().run(|| {
                // SAFETY: the communicator, its stream and both buffers are alive; each buffer
                // holds `count` f32s and is reachable from the communicator's device (checked
                // above).
                ok("ncclAllReduce", unsafe {
                    nccl::ncclAllReduce(
                        sends[i].as_cu() as *const _,
                        recvs[i].as_cu() as *mut _,
                        count,
                        nccl::ncclDataType_t::ncclFloat32,
                        nccl::ncclRedOp_t::ncclSum,
                        comm.as_raw(),
                        comm.stream().as_cu() as _,
                    )
                })
            });
            queued[i] = called.is_ok();
            status = status.and(called);
        }
        // SAFETY: ends the group started above.
        status = status.and(ok("ncclGroupEnd", unsafe { nccl::ncclGroupEnd() }));
    }
    if status.is_err() {
        for comm in comms {
            comm.record().failed.store(true, Ordering::Relaxed);
        }
    }
    // Every call that was queued is reported, whatever else failed.
    for (i, comm) in comms.iter().enumerate() {
        if queued[i] {
            status = status
                .and(sends[i].record_use(comm.stream()).map_err(LibError::from))
                .and(recvs[i].record_use(comm.stream()).map_err(LibError::from));
        }
    }
    status
}
