//! A kernel node's arguments changed between replays: a per-node update
//! (`cuGraphExecKernelNodeSetParams_v2`) against a whole-graph update (`cuGraphExecUpdate`)
//! and a re-instantiation, each followed by a launch; raw driver calls against
//! handles-cuda's, interleaved in one process. Each variant alternates between two buffers,
//! so every update really changes the node.

use handles_bench::{Measured, Variant, interleave, keep};
use handles_cuda::driver::sys;
use handles_cuda::graph::GraphHandle;
use handles_cuda::{ContextHandle, DevicePtrHandle, LaunchConfig, StreamHandle};

use super::{ELEMENTS, ROUNDS, add_one, ok};

/// Timed operations (an update and a launch) per batch.
const UPDATES: usize = 100;

pub(crate) fn node_updates(context: &ContextHandle, stream: &StreamHandle) -> Measured {
    let add_one = add_one();
    let config = LaunchConfig::linear(ELEMENTS, ELEMENTS);
    let buffers = [0; 2].map(|_| DevicePtrHandle::alloc(context, ELEMENTS as usize * 4).unwrap());
    let build = |buffer: &DevicePtrHandle| {
        let graph = GraphHandle::create(context).unwrap();
        let node = graph
            .add_kernel_node(&[], &add_one, &config, (buffer, ELEMENTS))
            .unwrap();
        (graph, node)
    };
    let (graph, node) = build(&buffers[0]);
    let other = build(&buffers[1]).0;
    let graphs = [&graph, &other];
    let exec = graph.instantiate().unwrap();
    let raw_exec = exec.as_cu();
    let raw_node = node.as_cu();
    let raw_graphs = [graph.as_cu(), other.as_cu()];
    let raw_stream = stream.as_cu();
    let addresses = buffers.each_ref().map(|buffer| buffer.as_cu());
    let kernel = add_one.kernel().as_cu();
    let context_raw = context.as_cu();
    let raw_set = |turn: usize| {
        let mut address = addresses[turn % 2];
        let mut count = ELEMENTS;
        let mut params = [
            (&raw mut address).cast::<std::ffi::c_void>(),
            (&raw mut count).cast::<std::ffi::c_void>(),
        ];
        let node_params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: std::ptr::null_mut(),
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: ELEMENTS,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: kernel,
            ctx: context_raw,
        };
        // SAFETY: the executable graph, its node, the kernel and both buffers are alive;
        // `add_one` touches `ELEMENTS` elements of either buffer.
        unsafe {
            ok(sys::cuGraphExecKernelNodeSetParams_v2(
                keep(raw_exec),
                raw_node,
                &node_params,
            ))
        }
    };
    let (mut t1, mut t2, mut t3, mut t4, mut t5, mut t6) = (0usize, 0, 0, 0, 0, 0);
    interleave(
        &mut [
            Variant::new(
                "raw cuGraphExecKernelNodeSetParams_v2 + cuGraphLaunch",
                || {
                    t1 += 1;
                    raw_set(t1);
                    // SAFETY: the executable graph and the stream are alive.
                    unsafe { ok(sys::cuGraphLaunch(raw_exec, raw_stream)) }
                },
            ),
            Variant::new("handles-cuda set_kernel_node_params + launch", || {
                t2 += 1;
                let buffer = &buffers[t2 % 2];
                keep(&exec)
                    .set_kernel_node_params(node, &add_one, &config, (buffer, ELEMENTS))
                    .unwrap();
                exec.launch(stream).unwrap();
            }),
            Variant::new("raw cuGraphExecUpdate + cuGraphLaunch", || {
                t3 += 1;
                let mut info = sys::CUgraphExecUpdateResultInfo {
                    result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
                    errorNode: std::ptr::null_mut(),
                    errorFromNode: std::ptr::null_mut(),
                };
                // SAFETY: both graphs and the executable graph are alive; `info` is an
                // out-pointer; the update's buffers stay alive (kept by the graphs).
                unsafe {
                    ok(sys::cuGraphExecUpdate_v2(
                        keep(raw_exec),
                        raw_graphs[t3 % 2],
                        &mut info,
                    ));
                    ok(sys::cuGraphLaunch(raw_exec, raw_stream));
                }
            }),
            Variant::new("handles-cuda update + launch", || {
                t4 += 1;
                keep(&exec).update(graphs[t4 % 2]).unwrap();
                exec.launch(stream).unwrap();
            }),
            Variant::new(
                "raw cuGraphInstantiate + cuGraphLaunch + cuGraphExecDestroy",
                || {
                    t5 += 1;
                    let mut fresh = std::ptr::null_mut();
                    // SAFETY: the graph and stream are alive; `fresh` is an out-pointer; the
                    // executable graph is destroyed once, after its launch was queued (the driver
                    // defers the destruction past the launch).
                    unsafe {
                        ok(sys::cuGraphInstantiateWithFlags(
                            &mut fresh,
                            keep(raw_graphs[t5 % 2]),
                            0,
                        ));
                        ok(sys::cuGraphLaunch(fresh, raw_stream));
                        ok(sys::cuGraphExecDestroy(fresh));
                    }
                },
            ),
            Variant::new("handles-cuda instantiate + launch + drop", || {
                t6 += 1;
                let fresh = keep(graphs[t6 % 2]).instantiate().unwrap();
                fresh.launch(stream).unwrap();
            }),
        ],
        ROUNDS,
        UPDATES,
        || stream.synchronize().unwrap(),
    )
}
