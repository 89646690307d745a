#!/usr/bin/env python3
"""Prints every device attribute of device 0 that the driver answers, as `id value` lines
(`capture_codes.py` explains how probes are run). `device_attributes.h200.txt` is the H200's."""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1" if len(sys.argv) < 2 else sys.argv[1])
assert cuda.cuInit(0) == 0
value = ctypes.c_int()
for attribute in range(1, 160):
    code = cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, 0)
    print(f"{attribute} {value.value if code == 0 else 'error ' + str(code)}")
name = ctypes.create_string_buffer(256)
cuda.cuDeviceGetName(name, 256, 0)
total = ctypes.c_size_t()
cuda.cuDeviceTotalMem_v2(ctypes.byref(total), 0)
version = ctypes.c_int()
cuda.cuDriverGetVersion(ctypes.byref(version))
print(f"name {name.value.decode()}\ntotal_mem {total.value}\ndriver_version {version.value}")
