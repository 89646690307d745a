#!/usr/bin/env bash
# On the GPU machine: unpacks the binaries scripts/gpu-collect.sh packed (.gpu-pack/gpu.tar.xz,
# carried to the machine) into .gpu, then runs .gpu/gpu-run.sh with the same steps.
#
#   scripts/gpu-unpacked.sh tests sanitizer perf
set -euo pipefail
cd "$(dirname "$0")/.."
# Python's lzma, not xz(1), which a GPU machine may lack.
python3 -c 'import lzma, tarfile; tarfile.open(fileobj=lzma.open(".gpu-pack/gpu.tar.xz")).extractall(".")'
echo "binaries of $(cat .gpu-pack/commit.txt), on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
exec .gpu/gpu-run.sh "$@"
