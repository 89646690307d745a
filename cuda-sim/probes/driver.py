"""The CUDA driver through ctypes, for the probes here and scripts/load-modules.py: the library
(libcuda.so.1 from the loader's path, or the path given), a checked call, and device 0's
primary context made current. Only ctypes: no CUDA Python package is needed."""
import ctypes

P = ctypes.c_void_p


def open_driver(path=None):
    """The driver library: `path`, else libcuda.so.1 as the loader finds it."""
    return ctypes.CDLL(path or "libcuda.so.1")


def checked(cuda):
    """A function that calls `cuda`'s function `name` and exits with its status if not 0."""

    def check(name, *args):
        code = getattr(cuda, name)(*args)
        if code != 0:
            raise SystemExit(f"call {name} failed with {code}")

    return check


def primary_context(cuda):
    """cuInit, then device 0's primary context retained and made current; returns it."""
    check = checked(cuda)
    check("cuInit", 0)
    primary = P()
    check("cuDevicePrimaryCtxRetain", ctypes.byref(primary), 0)
    check("cuCtxSetCurrent", primary)
    return primary


def new_stream(check, flags=1):
    """A new stream (`cuStreamCreate`, non-blocking by default) in the current context."""
    stream = P()
    check("cuStreamCreate", ctypes.byref(stream), flags)
    return stream


def new_event(check, flags=2):
    """A new event (`cuEventCreate`, timing off by default) in the current context."""
    event = P()
    check("cuEventCreate", ctypes.byref(event), flags)
    return event
