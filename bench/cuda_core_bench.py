"""cuda.core against raw cuda.bindings calls, interleaved in one process, on the same ops as
gpu_bench. Run on a machine with a GPU and cuda.core installed: `python3 bench/cuda_core_bench.py`.
Prints Markdown table rows (median ns/op, ratio to the raw-bindings row of the op)."""

import statistics
import time

try:
    from cuda.core import Device, EventOptions
except ImportError:  # older releases kept everything under .experimental
    from cuda.core.experimental import Device, EventOptions
import cuda.core

print(f"<!-- cuda.core {getattr(cuda.core, '__version__', '?')} -->")
from cuda.bindings import driver

ROUNDS = 31


def check(result):
    err = result[0] if isinstance(result, tuple) else result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(err)
    return result[1] if isinstance(result, tuple) and len(result) > 1 else None


def interleave(variants, rounds, iterations, between=lambda: None):
    samples = {name: [] for name, _ in variants}
    for _, run in variants:
        for _ in range(min(iterations, 500)):
            run()
        between()
    for r in range(rounds):
        for k in range(len(variants)):
            name, run = variants[(r + k) % len(variants)]
            start = time.perf_counter_ns()
            for _ in range(iterations):
                run()
            samples[name].append((time.perf_counter_ns() - start) / iterations)
            between()
    return [(name, statistics.median(samples[name])) for name, _ in variants]


def report(op, rows):
    base = rows[0][1]
    for name, median in rows:
        print(f"| {op} | {name} | {median:.1f} | {median / base:.3f} |", flush=True)


def main():
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    raw_stream = driver.CUstream(int(stream.handle))
    print("| op | variant | median ns/op | ratio to first row |")
    print("|---|---|---|---|")

    flags = driver.CUevent_flags.CU_EVENT_DISABLE_TIMING

    def raw_event():
        event = check(driver.cuEventCreate(flags))
        check(driver.cuEventDestroy(event))

    # cuda.core's default event options have timing disabled, like the raw call above.
    print("<!-- EventOptions fields:", getattr(EventOptions, "__dataclass_fields__", {}).keys(), "-->")

    def core_event():
        dev.create_event().close()

    report("event create+drop (timing off)",
           interleave([("cuda.bindings cuEventCreate+Destroy", raw_event),
                       ("cuda.core create_event+close", core_event)], ROUNDS, 2000))

    pool = check(driver.cuDeviceGetMemPool(dev.device_id))

    def raw_alloc():
        ptr = check(driver.cuMemAllocFromPoolAsync(1024, pool, raw_stream))
        check(driver.cuMemFreeAsync(ptr, raw_stream))

    def core_alloc():
        dev.allocate(1024, stream=stream).close(stream)

    report("pool alloc+free 1 KiB",
           interleave([("cuda.bindings cuMemAllocFromPoolAsync+FreeAsync", raw_alloc),
                       ("cuda.core Device.allocate+close", core_alloc)], ROUNDS, 1000,
                      between=stream.sync))

    def raw_stream_pair():
        s = check(driver.cuStreamCreateWithPriority(1, 0))
        check(driver.cuStreamDestroy(s))

    def core_stream():
        dev.create_stream().close()

    report("stream create+drop",
           interleave([("cuda.bindings cuStreamCreateWithPriority+Destroy", raw_stream_pair),
                       ("cuda.core create_stream+close", core_stream)], 21, 200))


if __name__ == "__main__":
    main()
