#!/usr/bin/env python3
"""Whether a stream created after `cuStreamDestroy` takes the destroyed stream's address, and
whether that happens while the destroyed stream's work is still pending.

A stream is held back by a host function that waits on a flag, a memset is queued behind it,
an event is recorded after the memset, and the stream is destroyed. Then new streams are
created: the probe prints their addresses next to the destroyed one's and whether the held
memset had completed (it cannot have: the flag is still down). Run on a GPU machine:

    python3 cuda-sim/probes/stream_reuse.py

and under the simulator (`cargo build -p cuda-sim` first; CUDA_SIM_REUSE_STREAMS=1 plays the
driver's reuse):

    python3 cuda-sim/probes/stream_reuse.py target/cuda-sim/libcuda.so

Only ctypes: no CUDA Python package is needed.
"""
import ctypes
import sys
import threading

from driver import P, checked, new_event, new_stream, open_driver, primary_context

cuda = open_driver(sys.argv[1] if len(sys.argv) > 1 else None)
check = checked(cuda)
primary_context(cuda)

release = threading.Event()
HOST_FN = ctypes.CFUNCTYPE(None, P)
gate = HOST_FN(lambda _: release.wait())

for round_ in range(3):
    release.clear()
    held = new_stream(check)
    memory = ctypes.c_uint64()
    check("cuMemAlloc_v2", ctypes.byref(memory), 1 << 20)
    check("cuLaunchHostFunc", held, gate, None)
    check("cuMemsetD8Async", memory, 7, 1 << 20, held)
    done = new_event(check)
    check("cuEventRecord", done, held)
    check("cuStreamDestroy_v2", held)
    fresh = []
    for _ in range(2):
        fresh.append(new_stream(check))
    pending = cuda.cuEventQuery(done) == 600  # CUDA_ERROR_NOT_READY
    print(
        f"round {round_}: destroyed {held.value:#x} with its memset "
        f"{'still pending' if pending else 'complete'}; next streams "
        + ", ".join(f"{s.value:#x}" for s in fresh)
        + f"; first takes its address: {fresh[0].value == held.value}"
    )
    release.set()
    check("cuEventSynchronize", done)
    for stream in fresh:
        check("cuStreamDestroy_v2", stream)
    check("cuEventDestroy_v2", done)
    check("cuMemFree_v2", memory)
