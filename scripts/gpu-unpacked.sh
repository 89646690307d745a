#!/usr/bin/env bash
# On the GPU machine: unpacks the binaries scripts/gpu-collect.sh packed (.gpu-pack/gpu.tar.xz,
# carried to the machine) into .gpu, then runs .gpu/gpu-run.sh with the same steps.
#
#   scripts/gpu-unpacked.sh tests sanitizer
#   scripts/gpu-unpacked.sh perf          # a device call of its own (about 8 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f .gpu-pack/gpu.tar.xz ]; then
  echo "gpu-unpacked: no .gpu-pack/gpu.tar.xz: run scripts/gpu-collect.sh, and carry .gpu-pack" >&2
  exit 2
fi
# A machine kept warm between calls keeps .gpu: binaries of an earlier pack go first (not
# candle-core's pack, which is carried on its own).
if [ -d .gpu ]; then
  find .gpu -mindepth 1 -maxdepth 1 ! -name candle.tar.xz -exec rm -rf {} +
fi
# Python's lzma, not xz(1), which a GPU machine may lack; the "data" filter where Python has it.
python3 -c '
import lzma, tarfile
options = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(fileobj=lzma.open(".gpu-pack/gpu.tar.xz")).extractall(".", **options)
'
echo "binaries of $(cat .gpu-pack/commit.txt), on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
exec .gpu/gpu-run.sh "$@"
