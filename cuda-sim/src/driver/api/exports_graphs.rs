//! The exported stream-capture, graph and user-object functions (see `capture`, `graphs`,
//! `user_objects`).
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{c_uint, c_ulonglong, c_void};

use crate::base::abi::{get, put};
use crate::base::errors::{INVALID_VALUE, NOT_SUPPORTED};
use crate::base::types::*;
use crate::resources::capture;
use crate::resources::graphs::GRAPH_EXEC_UPDATE_FAILURE;
use crate::resources::work::Op;
use crate::{Sim, with_sim};

/// The dependency list of a node-adding call.
pub(crate) fn dependencies(deps: *const Raw, count: usize) -> Result<Vec<Raw>, CuResult> {
    if count > 0 && deps.is_null() {
        return Err(INVALID_VALUE);
    }
    (0..count)
        // SAFETY: `dependencies` holds `numDependencies` nodes by the API's contract.
        .map(|i| get(unsafe { deps.add(i) }))
        .collect()
}

/// Adds a node made by `make` (which may check handles) to `graph`.
pub(crate) fn add_node(
    node: *mut Raw,
    graph: Raw,
    deps: *const Raw,
    count: usize,
    make: impl FnOnce(&mut Sim) -> Result<Op, CuResult>,
) -> Result<(), CuResult> {
    if node.is_null() {
        return Err(INVALID_VALUE);
    }
    let deps = dependencies(deps, count)?;
    let raw = with_sim(|sim| {
        sim.graph(graph)?;
        let op = make(sim)?;
        sim.add_node(graph, &deps, op)
    })?;
    put(node, raw)
}

/// The device address and whether it must be device memory, of one side of a 1-D copy node.
fn copy_side(
    memory_type: u32,
    host: usize,
    device: CuDevicePtr,
    x: usize,
    y: usize,
    z: usize,
) -> Result<(u64, bool), CuResult> {
    if y != 0 || z != 0 {
        return Err(NOT_SUPPORTED);
    }
    let (base, device_only) = match memory_type {
        MEMORYTYPE_HOST => (host as u64, false),
        MEMORYTYPE_DEVICE => (device, true),
        // Unified addresses: the device field holds them, host or device.
        MEMORYTYPE_UNIFIED => (device, false),
        MEMORYTYPE_ARRAY => return Err(NOT_SUPPORTED),
        _ => return Err(INVALID_VALUE),
    };
    let address = base.checked_add(x as u64).ok_or(INVALID_VALUE)?;
    Ok((address, device_only))
}

/// The operation of a kernel node (`call` names the driver function for messages).
pub(crate) fn kernel_op(
    sim: &mut Sim,
    params: &KernelNodeParams,
    call: &'static str,
) -> Result<Op, CuResult> {
    // `kern` (a library kernel) wins over `func`; its context is `ctx`, or the current one.
    let function = if params.kern != 0 {
        params.kern
    } else {
        params.func
    };
    let callee = sim.callee(function)?;
    let device = if params.kern != 0 && params.ctx != 0 {
        sim.context(params.ctx)?.device
    } else {
        sim.callee_device(callee, call)?
    };
    let launch = sim.prepare_launch(
        function,
        params.grid,
        params.block,
        params.shared,
        params.kernel_params,
        params.extra,
        device,
    )?;
    Ok(Op::Kernel(launch))
}

/// The operation of a memset node.
pub(crate) fn memset_op(params: &MemsetNodeParams) -> Result<Op, CuResult> {
    if !matches!(params.element_size, 1 | 2 | 4) || params.height == 0 || params.width == 0 {
        return Err(INVALID_VALUE);
    }
    let width = params.element_size as usize;
    let row = params.width.checked_mul(width).ok_or(INVALID_VALUE)?;
    if params.height > 1 && params.pitch < row {
        return Err(INVALID_VALUE);
    }
    Ok(Op::Memset {
        dst: params.dst,
        pitch: params.pitch,
        value: params.value,
        width,
        count: params.width,
        rows: params.height,
    })
}

/// The operation of a copy node (one-dimensional copies only: rows and slices are not
/// modelled).
pub(crate) fn memcpy_op(p: &Memcpy3D) -> Result<Op, CuResult> {
    if p.height != 1 || p.depth != 1 {
        return Err(NOT_SUPPORTED);
    }
    let (src, src_device) = copy_side(
        p.src_memory_type,
        p.src_host as usize,
        p.src_device,
        p.src_x_in_bytes,
        p.src_y,
        p.src_z,
    )?;
    let (dst, dst_device) = copy_side(
        p.dst_memory_type,
        p.dst_host as usize,
        p.dst_device,
        p.dst_x_in_bytes,
        p.dst_y,
        p.dst_z,
    )?;
    Ok(Op::Memcpy {
        dst,
        src,
        len: p.width_in_bytes,
        device: (dst_device, src_device),
    })
}

export_fns! {
    fn cuStreamBeginCapture_v2(stream: Raw, mode: c_uint) {
        with_sim(|sim| sim.begin_capture(stream, mode))
    }

    fn cuStreamEndCapture(stream: Raw, graph: *mut Raw) {
        if graph.is_null() {
            return Err(INVALID_VALUE);
        }
        match with_sim(|sim| sim.end_capture(stream)) {
            Ok(raw) => put(graph, raw),
            Err(code) => {
                if code == capture::STREAM_CAPTURE_INVALIDATED {
                    put(graph, 0)?;
                }
                Err(code)
            }
        }
    }

    fn cuStreamIsCapturing(stream: Raw, status: *mut c_uint) {
        let s = with_sim(|sim| sim.capture_info(stream).map(|(s, ..)| s))?;
        put(status, s)
    }

    fn cuStreamGetCaptureInfo_v3(
        stream: Raw,
        status: *mut c_uint,
        id: *mut u64,
        graph: *mut Raw,
        deps: *mut *const Raw,
        edge_data: *mut *const c_void,
        count: *mut usize
    ) {
        if status.is_null() {
            return Err(INVALID_VALUE);
        }
        // The dependency array stays valid until the stream's next capture operation, as the
        // driver documents: it is the capture's own list.
        let (s, i, g, d, n) = with_sim(|sim| {
            let (s, i, g, d) = sim.capture_info(stream)?;
            Ok((s, i, g, d.as_ptr(), d.len()))
        })?;
        put(status, s)?;
        if s == capture::STATUS_NONE {
            return Ok(());
        }
        if !id.is_null() {
            put(id, i)?;
        }
        if !graph.is_null() {
            put(graph, g)?;
        }
        if !deps.is_null() {
            put(deps, if n == 0 { std::ptr::null() } else { d })?;
        }
        if !edge_data.is_null() {
            // Every edge is a default edge: the driver then answers null.
            put(edge_data, std::ptr::null())?;
        }
        if !count.is_null() {
            put(count, n)?;
        }
        Ok(())
    }

    fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) {
        with_sim(|_| Ok(()))?;
        let old = capture::exchange_mode(get(mode.cast_const())?)?;
        put(mode, old)
    }

    fn cuGraphCreate(graph: *mut Raw, flags: c_uint) {
        if graph.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| Ok(sim.create_graph()))?;
        put(graph, raw)
    }

    fn cuGraphDestroy(graph: Raw) {
        with_sim(|sim| sim.destroy_graph(graph))
    }

    fn cuGraphAddKernelNode_v2(
        node: *mut Raw,
        graph: Raw,
        deps: *const Raw,
        count: usize,
        params: *const KernelNodeParams
    ) {
        let params = get(params)?;
        add_node(node, graph, deps, count, |sim| kernel_op(sim, &params, "cuGraphAddKernelNode_v2"))
    }

    fn cuGraphAddMemsetNode(
        node: *mut Raw,
        graph: Raw,
        deps: *const Raw,
        count: usize,
        params: *const MemsetNodeParams,
        context: Raw
    ) {
        let op = memset_op(&get(params)?)?;
        add_node(node, graph, deps, count, |sim| {
            sim.context(context)?;
            Ok(op)
        })
    }

    fn cuGraphAddMemcpyNode(
        node: *mut Raw,
        graph: Raw,
        deps: *const Raw,
        count: usize,
        params: *const Memcpy3D,
        context: Raw
    ) {
        let op = memcpy_op(&get(params)?)?;
        add_node(node, graph, deps, count, |sim| {
            sim.context(context)?;
            Ok(op)
        })
    }

    fn cuGraphAddEventRecordNode(node: *mut Raw, graph: Raw, deps: *const Raw, count: usize, event: Raw) {
        add_node(node, graph, deps, count, |sim| {
            sim.event(event)?;
            Ok(Op::EventRecord(event))
        })
    }

    fn cuGraphAddEventWaitNode(node: *mut Raw, graph: Raw, deps: *const Raw, count: usize, event: Raw) {
        add_node(node, graph, deps, count, |sim| {
            sim.event(event)?;
            Ok(Op::EventWait(event))
        })
    }

    fn cuGraphAddHostNode(node: *mut Raw, graph: Raw, deps: *const Raw, count: usize, params: *const HostNodeParams) {
        let params = get(params)?;
        let function = params.function.ok_or(INVALID_VALUE)?;
        add_node(node, graph, deps, count, |_| Ok(Op::Host(function, params.data as usize)))
    }

    fn cuGraphAddEmptyNode(node: *mut Raw, graph: Raw, deps: *const Raw, count: usize) {
        add_node(node, graph, deps, count, |_| Ok(Op::Empty))
    }

    fn cuGraphGetNodes(graph: Raw, nodes: *mut Raw, count: *mut usize) {
        let list: Vec<Raw> = with_sim(|sim| Ok(sim.graph(graph)?.nodes.iter().map(|n| n.raw).collect()))?;
        if nodes.is_null() {
            return put(count, list.len());
        }
        let room = get(count.cast_const())?;
        for (i, raw) in list.iter().take(room).enumerate() {
            // SAFETY: `nodes` has room for `*numNodes` handles by the API's contract, and
            // `i < *numNodes`.
            put(unsafe { nodes.add(i) }, *raw)?;
        }
        // Fewer nodes than room: the rest of the array is nulled, and the count says how many
        // there are, as the driver does.
        for i in list.len()..room {
            // SAFETY: as above, `i < *numNodes`.
            put(unsafe { nodes.add(i) }, 0)?;
        }
        put(count, list.len())
    }

    fn cuGraphInstantiateWithFlags(exec: *mut Raw, graph: Raw, flags: c_ulonglong) {
        if exec.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.instantiate(graph, flags))?;
        put(exec, raw)
    }

    fn cuGraphExecDestroy(exec: Raw) {
        with_sim(|sim| sim.destroy_exec(exec))
    }

    fn cuGraphLaunch(exec: Raw, stream: Raw) {
        let (ops, work) = with_sim(|sim| {
            let target = sim.stream(stream, "cuGraphLaunch")?;
            sim.graph_launch_ops(exec, target)
        })?;
        // One stream operation per node, in order, on the launch stream's timeline and in the
        // graph's context; host nodes run between their neighbours, outside the lock. A node
        // that fails stops the launch, but its end (`Op::LaunchDone`) is still noted, so that
        // the graph's context does not wait for it for ever.
        let mut status = Ok(());
        for (op, node) in ops {
            let done = match op {
                Op::LaunchDone(context) => Some(context),
                _ => None,
            };
            if status.is_err() && done.is_none() {
                continue;
            }
            let ran = with_sim(|sim| {
                let target = match done {
                    // The end needs no live stream: it only notes the stream's clock.
                    Some(_) => work,
                    None => sim
                        .stream(stream, "cuGraphLaunch")?
                        .running(work.work, work.work_device)
                        .in_node(node),
                };
                Ok((target.timeline, sim.run_or_defer(target, op)?))
            });
            match ran {
                // Host nodes start on threads of their own; what follows them is queued.
                Ok((timeline, calls)) => crate::resources::deferred::start_hosts(
                    calls.into_iter().map(|call| (timeline, call)).collect(),
                ),
                Err(code) => {
                    if let Some(context) = done {
                        let _ = with_sim(|sim| {
                            sim.foreign_launch_done(context, None);
                            Ok(())
                        });
                    }
                    if status.is_ok() {
                        status = Err(code);
                    }
                }
            }
            if done.is_some() {
                // A `cuCtxSynchronize` of the graph's context may be waiting for this.
                crate::notify_idle();
            }
        }
        status?;
        // The next launch of this executable graph is ordered after this one.
        with_sim(|sim| {
            let target = sim.stream(stream, "cuGraphLaunch")?;
            sim.note_exec_launched(exec, target.timeline);
            Ok(())
        })
    }

    fn cuGraphUpload(exec: Raw, stream: Raw) {
        // Nothing to upload: the checks only.
        with_sim(|sim| {
            sim.graph_exec(exec)?;
            sim.stream(stream, "cuGraphUpload").map(|_| ())
        })
    }

    fn cuGraphExecUpdate_v2(exec: Raw, graph: Raw, info: *mut GraphExecUpdateResultInfo) {
        if info.is_null() {
            return Err(INVALID_VALUE);
        }
        let (result, error_node, error_from_node) = with_sim(|sim| sim.update_exec(exec, graph))?;
        put(info, GraphExecUpdateResultInfo { result, error_node, error_from_node })?;
        if result != crate::resources::graphs::UPDATE_SUCCESS {
            return Err(GRAPH_EXEC_UPDATE_FAILURE);
        }
        Ok(())
    }

    fn cuUserObjectCreate(object: *mut Raw, ptr: *mut c_void, destroy: HostFn, refs: c_uint, flags: c_uint) {
        let destroy = destroy.ok_or(INVALID_VALUE)?;
        if object.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_user_object((destroy, ptr as usize), refs, flags))?;
        put(object, raw)
    }

    fn cuUserObjectRetain(object: Raw, count: c_uint) {
        with_sim(|sim| sim.retain_user_object(object, count))
    }

    fn cuUserObjectRelease(object: Raw, count: c_uint) {
        with_sim(|sim| sim.release_user_object(object, count))
    }

    fn cuGraphRetainUserObject(graph: Raw, object: Raw, count: c_uint, flags: c_uint) {
        with_sim(|sim| sim.graph_retain_user_object(graph, object, count, flags))
    }

    fn cuGraphReleaseUserObject(graph: Raw, object: Raw, count: c_uint) {
        with_sim(|sim| sim.graph_release_user_object(graph, object, count))
    }
}
