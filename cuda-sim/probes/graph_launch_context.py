#!/usr/bin/env python3
"""Whether `cuGraphLaunch` on a stream (not a default-stream token) needs the graph's context
current. One executable graph per case, of one memset node (a different value each), is
launched on a stream of its context with no context current, with another context current,
and with its own context current; the probe prints each launch's status, its stream's
synchronisation status and what the memory holds afterwards.

Driver 580 on an H100 (`graph_launch_context.h100.txt`): every launch succeeds and writes its
value, whatever is current: the stream names the context. `GraphExecHandle::launch`
(`handles-cuda/src/graph/exec.rs`) therefore launches without making a context current;
`cuda-sim/tests/fidelity.rs` runs this probe on the simulator and compares. Run on a GPU
machine:

    python3 cuda-sim/probes/graph_launch_context.py

and under the simulator (`cargo build -p cuda-sim` first):

    python3 cuda-sim/probes/graph_launch_context.py target/cuda-sim/libcuda.so

Only ctypes: no CUDA Python package is needed.
"""
import ctypes
import sys

from driver import P, checked, new_stream, open_driver, primary_context

N = 1024


class MemsetParams(ctypes.Structure):
    """CUDA_MEMSET_NODE_PARAMS."""

    _fields_ = [
        ("dst", ctypes.c_uint64),
        ("pitch", ctypes.c_size_t),
        ("value", ctypes.c_uint),
        ("elementSize", ctypes.c_uint),
        ("width", ctypes.c_size_t),
        ("height", ctypes.c_size_t),
    ]


def main():
    cuda = open_driver(sys.argv[1] if len(sys.argv) > 1 else None)
    check = checked(cuda)
    primary = primary_context(cuda)
    stream = new_stream(check)
    memory = ctypes.c_uint64()
    check("cuMemAlloc_v2", ctypes.byref(memory), ctypes.c_size_t(N * 4))
    other = P()
    check("cuCtxCreate_v2", ctypes.byref(other), 0, 0)
    check("cuCtxSetCurrent", primary)

    def executable(value):
        graph, node, exec_ = P(), P(), P()
        check("cuGraphCreate", ctypes.byref(graph), 0)
        params = MemsetParams(memory.value, 0, value, 4, N, 1)
        check("cuGraphAddMemsetNode", ctypes.byref(node), graph, None, ctypes.c_size_t(0),
              ctypes.byref(params), primary)
        check("cuGraphInstantiateWithFlags", ctypes.byref(exec_), graph, ctypes.c_ulonglong(0))
        return exec_

    def held():
        check("cuCtxSetCurrent", primary)
        values = (ctypes.c_uint32 * N)()
        check("cuMemcpyDtoH_v2", values, memory, ctypes.c_size_t(N * 4))
        return sorted(set(values))

    for case, current, value in [
        ("no context current", None, 7),
        ("another context current", other, 9),
        ("its own context current", primary, 11),
    ]:
        exec_ = executable(value)
        check("cuCtxSetCurrent", current)
        launched = cuda.cuGraphLaunch(exec_, stream)
        synchronized = cuda.cuStreamSynchronize(stream)
        print(f"{case}: cuGraphLaunch {launched}, cuStreamSynchronize {synchronized}, "
              f"memory holds {held()} (the graph writes {value})")


main()
