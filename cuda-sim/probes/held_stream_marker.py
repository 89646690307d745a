#!/usr/bin/env python3
"""Whether an event recorded behind a held-back stream-ordered free says "not ready" while the
stream is held, as the pool's destruction relies on (`memory/pool.rs`: a marker recorded after
the frees is polled before the pool goes), run plainly and under compute-sanitizer.

A host function holds a stream back; behind it a pool allocation and its free are queued, then
a marker event is recorded; after 50 ms the probe asks the marker, releases the host function
and asks again. Cases: a non-blocking stream, the per-thread default stream, and the legacy
stream behind a held blocking stream. Four `gpu_host`/`review_pool_markers` tests that hold a
stream this way fail only under compute-sanitizer (RELIABILITY.md's pool row); this tells
whether the tool changes what the query answers (it does not: `held_stream_marker.h100.txt`).
Last, how long destroying a held stream takes, its host function released after 1 s: the
tests' failures point at the tool waiting there (their gate opened by its limit). Run on a GPU
machine:

    python3 cuda-sim/probes/held_stream_marker.py
    compute-sanitizer --tool memcheck python3 cuda-sim/probes/held_stream_marker.py

and under the simulator (`cargo build -p cuda-sim` first):

    python3 cuda-sim/probes/held_stream_marker.py target/cuda-sim/libcuda.so

Only ctypes: no CUDA Python package is needed.
"""
import ctypes
import sys
import threading
import time

from driver import P, checked, new_event, new_stream, open_driver, primary_context

cuda = open_driver(sys.argv[1] if len(sys.argv) > 1 else None)
check = checked(cuda)
primary_context(cuda)

NOT_READY = 600
LEGACY, PER_THREAD = P(1), P(2)
release = threading.Event()
HOST_FN = ctypes.CFUNCTYPE(None, P)
gate = HOST_FN(lambda _: release.wait())


class PoolProps(ctypes.Structure):
    """CUmemPoolProps (device 0, pinned, no handle type)."""

    _fields_ = [
        ("allocType", ctypes.c_int),
        ("handleTypes", ctypes.c_int),
        ("locationType", ctypes.c_int),
        ("locationId", ctypes.c_int),
        ("win32SecurityAttributes", P),
        ("maxSize", ctypes.c_size_t),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 54),
    ]


props = PoolProps(allocType=1, handleTypes=0, locationType=1, locationId=0)
pool = P()
check("cuMemPoolCreate", ctypes.byref(pool), ctypes.byref(props))


def case(name, held, work):
    """`held` is held back by the host function; the free and the marker go on `work`."""
    release.clear()
    check("cuLaunchHostFunc", held, gate, None)
    pointer = ctypes.c_uint64()
    check("cuMemAllocFromPoolAsync", ctypes.byref(pointer), ctypes.c_size_t(256), pool, work)
    check("cuMemFreeAsync", pointer, work)
    marker = new_event(check)
    check("cuEventRecord", marker, work)
    time.sleep(0.05)
    held_answer = cuda.cuEventQuery(marker)
    release.set()
    check("cuEventSynchronize", marker)
    after = cuda.cuEventQuery(marker)
    print(
        f"{name}: while held the marker answered "
        f"{'not ready' if held_answer == NOT_READY else held_answer}, after the release {after}"
    )
    check("cuEventDestroy_v2", marker)


stream = new_stream(check)
case("non-blocking stream", stream, stream)
case("per-thread default stream", PER_THREAD, PER_THREAD)
blocking = new_stream(check, 0)
case("legacy stream behind a held blocking stream", blocking, LEGACY)
for made in (stream, blocking):
    check("cuStreamDestroy_v2", made)

# Destroying a stream whose work is held: the driver lets the work finish after the call.
busy = new_stream(check)
release.clear()
check("cuLaunchHostFunc", busy, gate, None)
opener = threading.Timer(1.0, release.set)
opener.start()
asked = time.monotonic()
check("cuStreamDestroy_v2", busy)
took = time.monotonic() - asked
opener.join()
check("cuCtxSynchronize")
print(
    f"destroying a held stream took {took * 1000:.1f} ms "
    f"({'waited for the held work' if took >= 0.9 else 'returned at once'})"
)
check("cuMemPoolDestroy", pool)
print("done")
