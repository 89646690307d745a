#!/usr/bin/env python3
"""Loads each PTX file given with cuModuleLoadData on the CUDA driver found as libcuda.so.1
(under `cuda-sim run`, the simulator) and prints one line per module with the driver's status;
exits 1 if any module fails to load. Used by scripts/candle.sh for candle-kernels' modules.

    cuda-sim run -- python3 scripts/load-modules.py A.ptx B.ptx ...
"""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")
P = ctypes.c_void_p


def check(name, *args):
    code = getattr(cuda, name)(*args)
    if code != 0:
        raise SystemExit(f"load-modules: {name} failed with {code}")


check("cuInit", 0)
context = P()
check("cuDevicePrimaryCtxRetain", ctypes.byref(context), 0)
check("cuCtxSetCurrent", context)
failed = 0
for path in sys.argv[1:]:
    image = open(path, "rb").read() + b"\0"
    module = P()
    code = cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(image))
    name = ctypes.c_char_p()
    cuda.cuGetErrorName(code, ctypes.byref(name))
    print(f"{path}: {'loaded' if code == 0 else 'refused'} ({name.value.decode() if name.value else code})")
    if code == 0:
        check("cuModuleUnload", module)
    else:
        failed += 1
check("cuDevicePrimaryCtxRelease_v2", 0)
sys.exit(1 if failed else 0)
