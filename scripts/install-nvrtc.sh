#!/usr/bin/env bash
# Installs NVRTC (CUDA C++ to PTX, a CPU library) from PyPI into <target>/nvrtc, where the
# simulated driver's harness and runner find it (cuda_sim::nvrtc_dir). No GPU is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
version=13.5.37
target="${CARGO_TARGET_DIR:-target}/nvrtc"
if [ -f "$target/nvidia/cu13/lib/libnvrtc.so.13" ] && [ -f "$target/.version-$version" ]; then
  echo "NVRTC $version already in $target"
  exit 0
fi
rm -rf "$target"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
  --target "$target" "nvidia-cuda-nvrtc==$version"
touch "$target/.version-$version"
echo "NVRTC $version installed in $target/nvidia/cu13/lib"
