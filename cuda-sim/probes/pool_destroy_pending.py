#!/usr/bin/env python3
"""Which pool calls crash driver 580: raw driver calls only (ctypes), each variant in a child
process whose exit status is printed (-8 a divide error, -11 a segmentation fault, "timeout" a
hang of 20 s). Found through the pool-replacement scenario of `tests/tests/cuda_rules.rs`,
whose safe calls crashed the driver on an H100 (driver 580.159.04) in every run, at the code
of `42782ad` and after; the kernel log named a divide error inside libcuda.

On that H100 (`pool_destroy_pending.h100.txt`, four calls): a pool destroyed while frees of
its memory are still queued, with other threads creating, using and destroying pools, crashes
or hangs the driver (`shared-current-pool`, `shared-pool-never-current`,
`current-pool-one-user`); the same runs with the context synchronised before each destroy
(`-synced`) never did, nor did pools destroyed with a queued free by threads that only use
pools of their own (`destroy-pending-beside-allocations`). One thread destroying pools behind
queued frees and never synchronising runs out of memory (`destroy-with-pending-frees`:
`cuMemPoolCreate` answers 2): a destroyed pool is released only once its frees ran.

A fifth call (`used-counts-queued-free`): the pool's used bytes drop to 0 when `cuMemFreeAsync`
is called, while the free still waits behind a host function, so they cannot tell whether the
frees ran (the `-usedwait` and `-reaped` variants, which wait for used bytes of 0, happened
to run clean 3 of 3 each, but the test suite's pool-replacement scenario crashed 3 of 3 with a
deleter that did the same). So `MemoryPoolHandle`'s deleter hands the pool to the disposal
thread, which records a marker event after the frees on each stream they were queued on and
destroys the pool once every marker completed (`handles-cuda/src/memory/pool.rs`,
`destroy_pool`).

Calls 6 and 7: every way of waiting for the frees before the destroy ran clean, 3 of 3 each,
where the same protocol without one crashed: markers after each free polled by a reaper
(`-marked`, as the library's default-stream and borrowed-stream frees are), by the destroying
thread (`-evpolled`) or waited for (`-evsynced`), the freeing streams synchronised
(`-streamsynced`), and the library's own order (`-latemarked`: the reaper marks each freeing
stream when the pool is handed to it; with `-getpool`, the device's current pool asked before
each reference, as `alloc_async` does). So the markers suffice for the driver. Run on a GPU
machine:

    python3 cuda-sim/probes/pool_destroy_pending.py              # the default list
    python3 cuda-sim/probes/pool_destroy_pending.py VARIANT      # one variant, in-process

The variants' code is what ran; the default list was changed between the calls.
"""
import ctypes, sys, threading, subprocess, time
P = ctypes.c_void_p
cu = ctypes.CDLL("libcuda.so.1")
def check(name, *args):
    r = getattr(cu, name)(*args)
    if r != 0:
        raise SystemExit(f"{name} -> {r}")
class PoolProps(ctypes.Structure):
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                ("locType", ctypes.c_int), ("locId", ctypes.c_int),
                ("win32SecurityAttributes", P), ("maxSize", ctypes.c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]
def setup():
    check("cuInit", 0)
    ctx = P()
    check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), 0)
    check("cuCtxSetCurrent", ctx)
    return ctx
def new_pool():
    props = PoolProps()
    props.allocType = 1  # pinned
    props.locType = 1    # device
    props.locId = 0
    pool = P()
    check("cuMemPoolCreate", ctypes.byref(pool), ctypes.byref(props))
    return pool
def new_stream():
    s = P(); check("cuStreamCreate", ctypes.byref(s), 1); return s
def alloc_free(pool, stream, n, sync_every=128, stop=None):
    ptr = ctypes.c_uint64()
    i = 0
    while (stop is None and i < n) or (stop is not None and not stop.is_set()):
        check("cuMemAllocFromPoolAsync", ctypes.byref(ptr), ctypes.c_size_t(256), pool, stream)
        check("cuMemsetD8Async", ptr, ctypes.c_ubyte(1), ctypes.c_size_t(256), stream)
        check("cuMemFreeAsync", ptr, stream)
        i += 1
        if i % sync_every == 0:
            check("cuStreamSynchronize", stream)
    check("cuStreamSynchronize", stream)
def used(pool):
    v = ctypes.c_uint64()
    check("cuMemPoolGetAttribute", pool, 7, ctypes.byref(v))  # USED_MEM_CURRENT
    return v.value
def variant(name):
    ctx = setup()
    if name == "replace-only":  # create, make current, destroy the one before; nothing else
        prev = None
        for _ in range(3000):
            p = new_pool(); check("cuDeviceSetMemPool", 0, p)
            if prev: check("cuMemPoolDestroy", prev)
            prev = p
    elif name == "destroy-with-pending-frees":  # one thread: a pool destroyed behind its queued free
        s = new_stream()
        for _ in range(3000):
            p = new_pool(); ptr = ctypes.c_uint64()
            check("cuMemAllocFromPoolAsync", ctypes.byref(ptr), ctypes.c_size_t(256), p, s)
            check("cuMemsetD8Async", ptr, ctypes.c_ubyte(1), ctypes.c_size_t(256), s)
            check("cuMemFreeAsync", ptr, s)
            check("cuMemPoolDestroy", p)
        check("cuStreamSynchronize", s)
    elif name in ("create-destroy-beside-allocations", "replace-beside-allocations"):
        # One thread creates and destroys pools (and with replace, makes each current); two
        # others allocate and free from pools of their own, untouched by the first.
        stop = threading.Event()
        def worker():
            check("cuCtxSetCurrent", ctx)
            alloc_free(new_pool(), new_stream(), 0, stop=stop)
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads: t.start()
        prev = None
        for _ in range(3000):
            p = new_pool()
            if name == "replace-beside-allocations":
                check("cuDeviceSetMemPool", 0, p)
                if prev: check("cuMemPoolDestroy", prev)
                prev = p
            else:
                check("cuMemPoolDestroy", p)
        stop.set()
        for t in threads: t.join()
    elif name == "destroy-pending-beside-allocations":
        # Two threads: each allocates from a fresh pool, frees, destroys it with the free queued.
        stop = threading.Event()
        def worker():
            check("cuCtxSetCurrent", ctx)
            s = new_stream(); ptr = ctypes.c_uint64()
            for _ in range(1500):
                p = new_pool()
                check("cuMemAllocFromPoolAsync", ctypes.byref(ptr), ctypes.c_size_t(256), p, s)
                check("cuMemsetD8Async", ptr, ctypes.c_ubyte(1), ctypes.c_size_t(256), s)
                check("cuMemFreeAsync", ptr, s)
                check("cuMemPoolDestroy", p)
            check("cuStreamSynchronize", s)
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads: t.start()
        for t in threads: t.join()
    elif name.startswith(("shared-current-pool", "shared-pool-never-current", "current-pool-one-user")):
        synced = name.endswith("-synced")
        name = name.removesuffix("-synced")
        # -usedwait: the destroying thread waits until the pool's used bytes are 0 (no context
        # synchronisation); -reaped: the pool goes to a reaper thread that destroys each pool
        # whose used bytes are 0, polling.
        usedwait = name.endswith("-usedwait"); name = name.removesuffix("-usedwait")
        reaped = name.endswith("-reaped"); name = name.removesuffix("-reaped")
        # -evsynced / -evpolled: each free is followed by an event recorded on its stream, and
        # the destroying thread synchronises with (or polls) every such event of the pool;
        # -streamsynced: it synchronises every stream that freed into the pool; -marked: the
        # pool goes to a reaper thread that destroys it once all its events completed (polling,
        # as the library's disposal thread does); -marked-streamsynced: the reaper synchronises
        # the pool's streams as well before destroying it.
        # -marked-ctxsynced / -marked-evsynced: the reaper, once a pool's events completed,
        # synchronises the context (or each of those events) before destroying it.
        ctxsynced = name.endswith("-ctxsynced"); name = name.removesuffix("-ctxsynced")
        # -marked-trimmed: the reaper trims the pool to 0 bytes (cuMemPoolTrimTo) instead,
        # which may make the driver take in the frees that ran; -marked-queried: it asks the
        # pool's used bytes instead (as the -reaped variant does, which ran clean).
        trimmed = name.endswith("-trimmed"); name = name.removesuffix("-trimmed")
        # -latemarked: as the library does, the reaper records one event on each stream that
        # freed into the pool when the pool is handed to it (not after each free), polls them,
        # then destroys the pool; -getpool: each worker also asks the device's current pool
        # (cuDeviceGetMemPool) under the lock before taking a reference, as the library's
        # `alloc_async` does.
        getpool = name.endswith("-getpool"); name = name.removesuffix("-getpool")
        latemarked = name.endswith("-latemarked"); name = name.removesuffix("-latemarked")
        late = {}
        queried = name.endswith("-queried"); name = name.removesuffix("-queried")
        evsynced_after = name.endswith("-marked-evsynced")
        if evsynced_after: name = name.removesuffix("-evsynced")
        streamsynced = name.endswith("-streamsynced"); name = name.removesuffix("-streamsynced")
        marked = name.endswith("-marked"); name = name.removesuffix("-marked")
        evsynced = name.endswith("-evsynced"); name = name.removesuffix("-evsynced")
        evpolled = name.endswith("-evpolled"); name = name.removesuffix("-evpolled")
        marks = {}; freed_on = {}
        def wait_marks(p):
            with lock: events = marks.pop(p.value, []); streams = freed_on.pop(p.value, set())
            for e in events:
                if evsynced: check("cuEventSynchronize", e)
                else:
                    while cu.cuEventQuery(e) != 0: pass
                check("cuEventDestroy_v2", e)
            if streamsynced:
                for s in streams: check("cuStreamSynchronize", P(s))
        pending = []; pending_lock = threading.Lock(); reaper_stop = threading.Event()
        def reaper():
            check("cuCtxSetCurrent", ctx)
            while True:
                with pending_lock: items = list(pending)
                for p in items:
                    if latemarked:
                        if p.value not in late:
                            with lock: streams = freed_on.pop(p.value, set())
                            evs = []
                            for st in streams:
                                e = P(); check("cuEventCreate", ctypes.byref(e), 2)
                                check("cuEventRecord", e, P(st)); evs.append(e)
                            late[p.value] = evs
                        if any(cu.cuEventQuery(e) != 0 for e in late[p.value]): continue
                        for e in late.pop(p.value): check("cuEventDestroy_v2", e)
                        check("cuMemPoolDestroy", p)
                        with pending_lock: pending.remove(p)
                    elif marked:
                        with lock: events = list(marks.get(p.value, []))
                        if any(cu.cuEventQuery(e) != 0 for e in events): continue
                        if evsynced_after:
                            for e in events: check("cuEventSynchronize", e)
                        if ctxsynced: check("cuCtxSynchronize")
                        if trimmed: check("cuMemPoolTrimTo", p, ctypes.c_size_t(0))
                        if queried: used(p)
                        wait_marks(p)
                        check("cuMemPoolDestroy", p)
                        with pending_lock: pending.remove(p)
                    elif used(p) == 0:
                        check("cuMemPoolDestroy", p)
                        with pending_lock: pending.remove(p)
                if reaper_stop.is_set() and not items: return
                time.sleep(0.0001)
        reaped = reaped or marked or latemarked
        if reaped:
            reaper_thread = threading.Thread(target=reaper); reaper_thread.start()
        # The scenario's protocol: thread A makes a new pool current and drops its reference to
        # the one before; threads B and C each take a reference to the current pool (under a
        # lock), allocate from it, memset, free on their own streams, and drop the reference;
        # whoever drops the last one destroys the pool, with frees still queued on two streams.
        lock = threading.Lock()
        refs = {}
        current = [None]
        def take():
            with lock:
                if getpool:
                    q = P(); check("cuDeviceGetMemPool", ctypes.byref(q), 0)
                p = current[0]; refs[p.value] += 1; return p
        def release(p):
            with lock:
                refs[p.value] -= 1; last = refs[p.value] == 0
                if last: del refs[p.value]
            if last:
                if synced: check("cuCtxSynchronize")
                if (evsynced or evpolled or streamsynced) and not marked: wait_marks(p)
                if usedwait:
                    while used(p) != 0: pass
                if reaped:
                    with pending_lock: pending.append(p)
                    return
                check("cuMemPoolDestroy", p)
        first = new_pool(); refs[first.value] = 1; current[0] = first
        make_current = name != "shared-pool-never-current"
        if make_current: check("cuDeviceSetMemPool", 0, first)
        stop = threading.Event()
        def worker():
            check("cuCtxSetCurrent", ctx)
            s = new_stream(); ptr = ctypes.c_uint64(); i = 0
            while not stop.is_set():
                p = take()
                check("cuMemAllocFromPoolAsync", ctypes.byref(ptr), ctypes.c_size_t(256), p, s)
                check("cuMemsetD8Async", ptr, ctypes.c_ubyte(1), ctypes.c_size_t(256), s)
                check("cuMemFreeAsync", ptr, s)
                if latemarked:
                    with lock: freed_on.setdefault(p.value, set()).add(s.value)
                if evsynced or evpolled or marked or streamsynced:
                    e = P(); check("cuEventCreate", ctypes.byref(e), 2); check("cuEventRecord", e, s)
                    with lock:
                        marks.setdefault(p.value, []).append(e)
                        freed_on.setdefault(p.value, set()).add(s.value)
                release(p); i += 1
                if i % 128 == 0: check("cuStreamSynchronize", s)
            check("cuStreamSynchronize", s)
        threads = [threading.Thread(target=worker) for _ in range(1 if name == "current-pool-one-user" else 2)]
        for t in threads: t.start()
        for _ in range(3000):
            p = new_pool()
            with lock:
                old = current[0]; refs[p.value] = 1; current[0] = p
                if make_current: check("cuDeviceSetMemPool", 0, p)
            release(old)
        stop.set()
        for t in threads: t.join()
        if reaped:
            reaper_stop.set(); reaper_thread.join()
    elif name == "used-counts-queued-free":
        # Does a pool count a free that is queued but has not run as used? The stream runs a
        # host function that waits for the probe before the free can run.
        s = new_stream(); p = new_pool(); gate = threading.Event()
        HOSTFN = ctypes.CFUNCTYPE(None, P)
        hold = HOSTFN(lambda _: gate.wait())
        ptr = ctypes.c_uint64()
        for label, free_on in (("its stream", s), ("another stream", new_stream())):
            gate.clear()
            check("cuMemAllocFromPoolAsync", ctypes.byref(ptr), ctypes.c_size_t(1 << 20), p, s)
            check("cuStreamSynchronize", s)
            print(f"allocated, synchronised: used {used(p)}")
            check("cuLaunchHostFunc", free_on, hold, None)
            check("cuMemFreeAsync", ptr, free_on)
            time.sleep(0.2)
            print(f"free queued on {label} behind a waiting host function: used {used(p)}, "
                  f"stream query {cu.cuStreamQuery(free_on)}")
            gate.set()
            check("cuStreamSynchronize", free_on)
            print(f"after the free ran: used {used(p)}")
        check("cuMemPoolDestroy", p)
    print("done")
if len(sys.argv) > 1 and sys.argv[1] != "--list":
    variant(sys.argv[1]); sys.exit(0)
names = sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "--list" else [
    "shared-current-pool-latemarked", "shared-current-pool-latemarked-getpool",
    "shared-current-pool-marked-getpool", "shared-current-pool-getpool-synced",
    "shared-current-pool-marked", "shared-current-pool-evpolled", "shared-current-pool-evsynced",
    "shared-current-pool-streamsynced", "shared-current-pool-marked-streamsynced",
    "shared-current-pool-marked-ctxsynced", "shared-current-pool-marked-evsynced",
    "shared-current-pool-marked-trimmed", "shared-current-pool-marked-queried",
    "shared-pool-never-current-marked", "shared-pool-never-current-streamsynced",
    "shared-current-pool"]
for name in names:
    for attempt in range(3):
        t = time.time()
        try:
            r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=20)
            status = r.returncode; out = (r.stdout + r.stderr).strip().splitlines()[-1:] 
        except subprocess.TimeoutExpired:
            status = "timeout"; out = []
        print(f"{name} attempt {attempt}: exit {status} ({time.time() - t:.1f} s) {out}", flush=True)
