#!/usr/bin/env python3
"""Which calls on a stream that is not captured, made by the capturing thread, invalidate its
capture: one line per case, `MODE[/relaxed thread] case: call's code, the capture's end code`
(0 and 0: allowed and the capture ends well). The pool-destruction markers make such calls
(a free's stream noted, idle streams queried and destroyed, events queried) inside a capture's
closure. Also the release threshold of a pool imported in the exporting process.
Only ctypes: no CUDA Python package is needed. `capture_side_calls.h100.txt` is its output on
an H100 80GB HBM3 with driver 580.159.04; `cuda-sim/tests/fidelity.rs` checks that the
simulator prints the same."""
import ctypes
import sys
import threading

from driver import P, checked, open_driver, primary_context

cuda = open_driver(sys.argv[1] if len(sys.argv) > 1 else None)
check = checked(cuda)
context = primary_context(cuda)
MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


def stream():
    s = P()
    check("cuStreamCreate", ctypes.byref(s), 1)
    return s


def pool():
    props = (ctypes.c_byte * 88)()
    ctypes.memset(props, 0, 88)
    # CUmemPoolProps: allocType PINNED (1), handleTypes (arg), location {DEVICE (1), 0}.
    ctypes.c_int.from_buffer(props, 0).value = 1
    ctypes.c_int.from_buffer(props, 8).value = 1
    ctypes.c_int.from_buffer(props, 12).value = 0
    p = P()
    check("cuMemPoolCreate", ctypes.byref(p), props)
    return p, props


def case(name, mode, relaxed_thread, body):
    other = stream()
    p, _ = pool()
    ptr = ctypes.c_uint64()
    check("cuMemAllocFromPoolAsync", ctypes.byref(ptr), ctypes.c_size_t(256), p, other)
    event = P()
    check("cuEventCreate", ctypes.byref(event), 2)
    check("cuEventRecord", event, other)
    check("cuStreamSynchronize", other)
    origin = stream()
    buffer = ctypes.c_uint64()
    check("cuMemAlloc_v2", ctypes.byref(buffer), ctypes.c_size_t(1024))
    check("cuStreamBeginCapture_v2", origin, MODES[mode])
    check("cuMemsetD8Async", buffer, 7, ctypes.c_size_t(1024), origin)
    previous = ctypes.c_int(2 if relaxed_thread else MODES[mode])
    if relaxed_thread:
        check("cuThreadExchangeStreamCaptureMode", ctypes.byref(previous))
    code = body(other, p, ptr, event)
    if relaxed_thread:
        check("cuThreadExchangeStreamCaptureMode", ctypes.byref(previous))
    after = cuda.cuMemsetD8Async(buffer, 9, ctypes.c_size_t(1024), origin)
    graph = P()
    ended = cuda.cuStreamEndCapture(origin, ctypes.byref(graph))
    if graph.value:
        check("cuGraphDestroy", graph)
    print(f"{mode}{'/relaxed thread' if relaxed_thread else ''} {name}: {code} {after} {ended}", flush=True)
    cuda.cuStreamSynchronize(other)


def stream_query(other, p, ptr, event):
    return cuda.cuStreamQuery(other)


def event_query(other, p, ptr, event):
    return cuda.cuEventQuery(event)


def is_capturing(other, p, ptr, event):
    status = ctypes.c_int()
    return cuda.cuStreamIsCapturing(other, ctypes.byref(status))


def free_async(other, p, ptr, event):
    return cuda.cuMemFreeAsync(ptr, other)


def alloc_async(other, p, ptr, event):
    more = ctypes.c_uint64()
    return cuda.cuMemAllocFromPoolAsync(ctypes.byref(more), ctypes.c_size_t(256), p, other)


def event_record(other, p, ptr, event):
    return cuda.cuEventRecord(event, other)


def event_create_destroy(other, p, ptr, event):
    e = P()
    code = cuda.cuEventCreate(ctypes.byref(e), 2)
    return code if code else cuda.cuEventDestroy_v2(e)


def stream_destroy(other, p, ptr, event):
    s = stream()
    return cuda.cuStreamDestroy_v2(s)


def busy_stream_destroy(other, p, ptr, event):
    return cuda.cuStreamDestroy_v2(stream())


for mode in ["global", "thread_local"]:
    for relaxed_thread in [False, True]:
        for name, body in [("stream_query", stream_query), ("event_query", event_query),
                           ("is_capturing", is_capturing), ("free_async", free_async),
                           ("alloc_async", alloc_async), ("event_record", event_record),
                           ("event_create_destroy", event_create_destroy),
                           ("stream_destroy", stream_destroy)]:
            case(name, mode, relaxed_thread, body)

def stream_sync(other, p, ptr, event):
    return cuda.cuStreamSynchronize(other)


def event_sync(other, p, ptr, event):
    return cuda.cuEventSynchronize(event)


def on_another_thread(body, relaxed):
    """The call made by another thread (as the disposal thread makes it), which first switches
    itself to relaxed mode when `relaxed`."""
    def run(other, p, ptr, event):
        result = []
        def thread():
            check("cuCtxSetCurrent", context)
            if relaxed:
                mode = ctypes.c_int(2)
                check("cuThreadExchangeStreamCaptureMode", ctypes.byref(mode))
            result.append(body(other, p, ptr, event))
        t = threading.Thread(target=thread)
        t.start()
        t.join()
        return result[0]
    return run


def context_sync(other, p, ptr, event):
    return cuda.cuCtxSynchronize()


for mode in ["global", "thread_local"]:
    for name, body in [("context_sync", context_sync), ("stream_sync", stream_sync), ("event_sync", event_sync),
                       ("stream_query", stream_query), ("event_query", event_query)]:
        case(name, mode, False, body)
        for relaxed in [False, True]:
            where = "another relaxed thread" if relaxed else "another thread"
            case(f"{name} on {where}", mode, False, on_another_thread(body, relaxed))

# A pool imported in the process that exported it: does it answer its release threshold?
props = (ctypes.c_byte * 88)()
ctypes.c_int.from_buffer(props, 0).value = 1
ctypes.c_int.from_buffer(props, 4).value = 1  # POSIX file descriptor
ctypes.c_int.from_buffer(props, 8).value = 1
exported_pool = P()
code = cuda.cuMemPoolCreate(ctypes.byref(exported_pool), props)
fd = ctypes.c_int(-1)
code2 = cuda.cuMemPoolExportToShareableHandle(ctypes.byref(fd), exported_pool, 1, ctypes.c_ulonglong(0))
imported = P()
code3 = cuda.cuMemPoolImportFromShareableHandle(ctypes.byref(imported), ctypes.c_void_p(fd.value), 1, ctypes.c_ulonglong(0))
threshold = ctypes.c_uint64()
code4 = cuda.cuMemPoolGetAttribute(imported, 4, ctypes.byref(threshold))
code5 = cuda.cuMemPoolGetAttribute(exported_pool, 4, ctypes.byref(threshold))
print(f"imported pool: create {code}, export {code2}, import {code3}, same handle {imported.value == exported_pool.value}, release threshold of the import {code4}, of the pool {code5}", flush=True)
