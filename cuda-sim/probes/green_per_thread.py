#!/usr/bin/env python3
"""Prints the status codes the driver returns for calls on the default-stream tokens while a
green context's context is current, one line per call and token.

Driver 580 was measured (on an H200) to answer `cuStreamIsCapturing(CU_STREAM_PER_THREAD)`
with CUDA_ERROR_INVALID_HANDLE (400) there; the simulator refuses every call on the per-thread
token in a green context the same way. Run on a GPU machine to see what the real driver does
with the other calls:

    python3 cuda-sim/probes/green_per_thread.py

and under the simulator (`cargo build -p cuda-sim` first) to compare:

    python3 cuda-sim/probes/green_per_thread.py target/cuda-sim/libcuda.so

Only ctypes: no CUDA Python package is needed.
"""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1" if len(sys.argv) < 2 else sys.argv[1])
P = ctypes.c_void_p
NULL, LEGACY, PER_THREAD = P(0), P(1), P(2)


def call(name, *args):
    return getattr(cuda, name)(*args)


def check(name, *args):
    code = call(name, *args)
    if code != 0:
        raise SystemExit(f"setup call {name} failed with {code}")


check("cuInit", 0)
primary = P()
check("cuDevicePrimaryCtxRetain", ctypes.byref(primary), 0)
check("cuCtxSetCurrent", primary)

# A green context of 16 SMs: one group of a split (the buffers are larger than a
# CUdevResource, whose size changed between toolkits; one group only, so no stride matters).
SM = 1
every = ctypes.create_string_buffer(512)
group = ctypes.create_string_buffer(512)
check("cuDeviceGetDevResource", 0, every, SM)
groups = ctypes.c_uint(1)
check("cuDevSmResourceSplitByCount", group, ctypes.byref(groups), every, None, 0, 16)
desc = P()
check("cuDevResourceGenerateDesc", ctypes.byref(desc), group, 1)
green = P()
check("cuGreenCtxCreate", ctypes.byref(green), desc, 0, 1)
context = P()
check("cuCtxFromGreenCtx", ctypes.byref(context), green)
check("cuCtxSetCurrent", context)

buffer = ctypes.c_uint64()
check("cuMemAlloc_v2", ctypes.byref(buffer), ctypes.c_size_t(4096))
event = P()
check("cuEventCreate", ctypes.byref(event), 2)

for label, token in (("null", NULL), ("legacy", LEGACY), ("per-thread", PER_THREAD)):
    status = ctypes.c_int(-1)
    owner = P()
    allocated = ctypes.c_uint64()
    codes = [
        ("cuStreamIsCapturing", call("cuStreamIsCapturing", token, ctypes.byref(status))),
        ("cuStreamGetCtx", call("cuStreamGetCtx", token, ctypes.byref(owner))),
        ("cuStreamQuery", call("cuStreamQuery", token)),
        ("cuMemsetD8Async", call("cuMemsetD8Async", buffer, ctypes.c_ubyte(1), ctypes.c_size_t(4096), token)),
        ("cuEventRecord", call("cuEventRecord", event, token)),
        ("cuStreamWaitEvent", call("cuStreamWaitEvent", token, event, 0)),
        ("cuMemAllocAsync", call("cuMemAllocAsync", ctypes.byref(allocated), ctypes.c_size_t(512), token)),
    ]
    if allocated.value:
        codes.append(("cuMemFreeAsync", call("cuMemFreeAsync", allocated, token)))
    codes.append(("cuStreamSynchronize", call("cuStreamSynchronize", token)))
    for name, code in codes:
        print(f"{name} {label}: {code}")

check("cuCtxSynchronize")
check("cuEventDestroy_v2", event)
check("cuMemFree_v2", buffer)
check("cuCtxSetCurrent", primary)
check("cuGreenCtxDestroy", green)
check("cuCtxSetCurrent", None)
check("cuDevicePrimaryCtxRelease_v2", 0)
