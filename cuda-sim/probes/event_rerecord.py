#!/usr/bin/env python3
"""Whether a stream wait on an event (`cuStreamWaitEvent`) is released by a later record of the
event that completes first, and what `cuEventQuery` answers then.

An event is recorded on a stream held back by a host function (the awaited record), a second
stream waits for the event and records a marker event behind the wait, then the first event
is recorded again on an idle stream, which completes at once. The probe prints whether the
marker (the wait) completed and what the query of the event answered while the awaited record
was still held back. Driver 580 on the H200 (`event_rerecord.h200.txt`): the wait keeps
waiting for the record it named, while the query says complete. The simulator's `deferred.rs`
binds each queued wait to the record it names too; `cuda-sim/tests/fidelity.rs` runs this
probe, and a variant only the simulator can run (a host function returning meanwhile: driver
580 runs host functions one at a time). `EventHandle::completed` gives whatever answer the
driver gives (exec/completion_waiter.rs). Run on a GPU machine:

    python3 cuda-sim/probes/event_rerecord.py

and under the simulator (`cargo build -p cuda-sim` first):

    python3 cuda-sim/probes/event_rerecord.py target/cuda-sim/libcuda.so

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
release = threading.Event()
HOST_FN = ctypes.CFUNCTYPE(None, P)
gate = HOST_FN(lambda _: release.wait())


for round_ in range(3):
    release.clear()
    held, waiting, idle = (new_stream(check) for _ in range(3))
    awaited, marker = new_event(check), new_event(check)
    check("cuLaunchHostFunc", held, gate, None)
    check("cuEventRecord", awaited, held)
    check("cuStreamWaitEvent", waiting, awaited, 0)
    check("cuEventRecord", marker, waiting)
    check("cuEventRecord", awaited, idle)
    check("cuStreamSynchronize", idle)
    time.sleep(0.05)
    wait_released = cuda.cuEventQuery(marker) != NOT_READY
    query_done = cuda.cuEventQuery(awaited) != NOT_READY
    print(
        f"round {round_}: with the awaited record held back and a later record complete, "
        f"the stream wait was {'released' if wait_released else 'still waiting'} and "
        f"cuEventQuery said {'complete' if query_done else 'not ready'}"
    )
    release.set()
    check("cuStreamSynchronize", held)
    check("cuStreamSynchronize", waiting)
    for made in (held, waiting, idle):
        check("cuStreamDestroy_v2", made)
    for made in (awaited, marker):
        check("cuEventDestroy_v2", made)
