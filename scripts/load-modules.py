#!/usr/bin/env python3
"""Loads each PTX file given with cuModuleLoadData on the CUDA driver found as libcuda.so.1
(under `cuda-sim run`, the simulator) and prints one line per module with the driver's status;
exits 1 if any module fails to load. Used by scripts/candle.sh for candle-kernels' modules.

    cuda-sim run -- python3 scripts/load-modules.py A.ptx B.ptx ...
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cuda-sim", "probes"))
from driver import P, checked, open_driver, primary_context  # noqa: E402

cuda = open_driver()
check = checked(cuda)
primary_context(cuda)
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
