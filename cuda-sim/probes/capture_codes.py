#!/usr/bin/env python3
"""Prints the status codes the driver returns for capture-related misuse, one line per case.

Run on a GPU machine to measure the real driver, and under the simulator (its directory first
on LD_LIBRARY_PATH) to compare: `cuda-sim/tests/fidelity.rs` diffs the simulator's lines
against `capture_codes.h200.txt`, this script's output on an H200 with driver 580.
Only ctypes: no CUDA Python package is needed.
"""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1" if len(sys.argv) < 2 else sys.argv[1])
P = ctypes.c_void_p


def call(name, *args):
    return getattr(cuda, name)(*args)


def check(name, *args):
    code = call(name, *args)
    if code != 0:
        raise SystemExit(f"setup call {name} failed with {code}")


check("cuInit", 0)
context = P()
check("cuDevicePrimaryCtxRetain", ctypes.byref(context), 0)
check("cuCtxSetCurrent", context)


def stream():
    s = P()
    check("cuStreamCreate", ctypes.byref(s), 1)
    return s


def event():
    e = P()
    check("cuEventCreate", ctypes.byref(e), 2)
    return e


def end(s):
    graph = P()
    code = call("cuStreamEndCapture", s, ctypes.byref(graph))
    if graph.value:
        check("cuGraphDestroy", graph)
    return code


buffer = ctypes.c_uint64()
check("cuMemAlloc_v2", ctypes.byref(buffer), ctypes.c_size_t(4096))
lines = []


def case(name, mode, body):
    """Begins a capture on a fresh stream in `mode`, runs `body(origin)`, which returns the
    codes to print, then ends the capture and prints its code too."""
    origin = stream()
    if body is wait_on_event_recorded_before:
        check("cuEventRecord", recorded_before, origin)
        check("cuStreamSynchronize", origin)
    check("cuStreamBeginCapture_v2", origin, mode)
    codes = body(origin)
    codes.append(end(origin))
    check("cuStreamDestroy_v2", origin)
    lines.append(f"{name}: " + " ".join(str(c) for c in codes))


GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2


def captured_event_query(origin):
    e = event()
    codes = [call("cuEventRecord", e, origin), call("cuEventQuery", e)]
    check("cuEventDestroy_v2", e)
    return codes


def captured_event_synchronize(origin):
    e = event()
    codes = [call("cuEventRecord", e, origin), call("cuEventSynchronize", e)]
    check("cuEventDestroy_v2", e)
    return codes


def joined_stream_query(origin):
    e, other = event(), stream()
    codes = [call("cuEventRecord", e, origin), call("cuStreamWaitEvent", other, e, 0)]
    codes.append(call("cuStreamQuery", other))
    # Join back so that the capture can end.
    back = event()
    codes.append(call("cuEventRecord", back, other))
    codes.append(call("cuStreamWaitEvent", origin, back, 0))
    for x in (e, back):
        check("cuEventDestroy_v2", x)
    check("cuStreamDestroy_v2", other)
    return codes


def joined_stream_synchronize(origin):
    e, other = event(), stream()
    codes = [call("cuEventRecord", e, origin), call("cuStreamWaitEvent", other, e, 0)]
    codes.append(call("cuStreamSynchronize", other))
    back = event()
    codes.append(call("cuEventRecord", back, other))
    codes.append(call("cuStreamWaitEvent", origin, back, 0))
    for x in (e, back):
        check("cuEventDestroy_v2", x)
    check("cuStreamDestroy_v2", other)
    return codes


def begin_on_joined_stream(origin):
    e, other = event(), stream()
    codes = [call("cuEventRecord", e, origin), call("cuStreamWaitEvent", other, e, 0)]
    codes.append(call("cuStreamBeginCapture_v2", other, RELAXED))
    back = event()
    codes.append(call("cuEventRecord", back, other))
    codes.append(call("cuStreamWaitEvent", origin, back, 0))
    for x in (e, back):
        check("cuEventDestroy_v2", x)
    check("cuStreamDestroy_v2", other)
    return codes


def unjoined_end(origin):
    e, other = event(), stream()
    codes = [call("cuEventRecord", e, origin), call("cuStreamWaitEvent", other, e, 0)]
    codes.append(call("cuMemsetD8Async", buffer, 1, ctypes.c_size_t(16), other))
    check("cuEventDestroy_v2", e)
    # `other` never joins back: the end below is the case.
    lines.append(f"unjoined_end (other stream after end): {call('cuStreamIsCapturing', other, ctypes.byref(ctypes.c_int()))}")
    check("cuStreamDestroy_v2", other)
    return codes


def origin_query(origin):
    return [call("cuStreamQuery", origin)]


def origin_synchronize(origin):
    return [call("cuStreamSynchronize", origin)]


def context_synchronize(origin):
    return [call("cuCtxSynchronize")]


def sync_alloc(origin):
    ptr = ctypes.c_uint64()
    code = call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(256))
    if code == 0:
        check("cuMemFree_v2", ptr)
    return [code]


def sync_memset(origin):
    return [call("cuMemsetD8_v2", buffer, 2, ctypes.c_size_t(16))]


def legacy_stream_work(origin):
    return [call("cuMemsetD8Async", buffer, 3, ctypes.c_size_t(16), None)]


def query_after_invalidation(origin):
    return [call("cuStreamSynchronize", origin), call("cuMemsetD8Async", buffer, 4, ctypes.c_size_t(16), origin)]


def elapsed_of_captured(origin):
    a, b = P(), P()
    check("cuEventCreate", ctypes.byref(a), 0)
    check("cuEventCreate", ctypes.byref(b), 0)
    ms = ctypes.c_float()
    codes = [call("cuEventRecord", a, origin), call("cuEventRecord", b, origin),
             call("cuEventElapsedTime", ctypes.byref(ms), a, b)]
    for x in (a, b):
        check("cuEventDestroy_v2", x)
    return codes


def wait_on_event_recorded_before(origin):
    """An event recorded on the origin stream before the capture began (and complete)."""
    return [call("cuStreamWaitEvent", origin, recorded_before, 0)]


def wait_on_event_of_another_stream(origin):
    return [call("cuStreamWaitEvent", origin, recorded_elsewhere, 0)]


def wait_on_event_never_recorded(origin):
    e = event()
    codes = [call("cuStreamWaitEvent", origin, e, 0)]
    check("cuEventDestroy_v2", e)
    return codes


recorded_before, recorded_elsewhere = event(), event()
elsewhere = stream()
check("cuEventRecord", recorded_elsewhere, elsewhere)
check("cuStreamSynchronize", elsewhere)


for mode_name, mode in (("global", GLOBAL), ("thread_local", THREAD_LOCAL), ("relaxed", RELAXED)):
    for body in (captured_event_query, captured_event_synchronize, joined_stream_query,
                 joined_stream_synchronize, begin_on_joined_stream, unjoined_end, origin_query,
                 origin_synchronize, context_synchronize, sync_alloc, sync_memset,
                 legacy_stream_work, query_after_invalidation, elapsed_of_captured,
                 wait_on_event_recorded_before, wait_on_event_of_another_stream,
                 wait_on_event_never_recorded):
        case(f"{mode_name} {body.__name__}", mode, body)
        # Anything a case left behind on the device is an error of the case itself.
        code = call("cuCtxSynchronize")
        if code != 0:
            lines.append(f"  (cuCtxSynchronize after it: {code})")

for x in (recorded_before, recorded_elsewhere):
    check("cuEventDestroy_v2", x)
check("cuStreamDestroy_v2", elsewhere)
check("cuMemFree_v2", buffer)
check("cuDevicePrimaryCtxRelease_v2", 0)
print("\n".join(lines))
