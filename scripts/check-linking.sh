#!/usr/bin/env bash
# Builds a downstream crate that picks cudarc's `dynamic-linking` (tests/cuda-sim/fixtures/
# linked-app), linking against the simulated driver and NVRTC, and runs it on the simulator.
# The default build of the workspace covers `dynamic-loading`.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build -q -p cuda-sim
scripts/install-nvrtc.sh >/dev/null
# A CUDA root for the linker: the simulator's libcuda.so and NVRTC's library.
root="$target/linking-root"
mkdir -p "$root/lib64"
ln -sf "$target/cuda-sim/libcuda.so" "$root/lib64/libcuda.so"
ln -sf "$target/nvrtc/nvidia/cu13/lib/libnvrtc.so.13" "$root/lib64/libnvrtc.so"
app=$(mktemp -d)
trap 'rm -rf "$app"' EXIT
cp -r tests/cuda-sim/fixtures/linked-app/. "$app"
sed -i "s#../../../../handles-cuda#$PWD/handles-cuda#" "$app/Cargo.toml"
(cd "$app" && CUDA_PATH="$root" CARGO_TARGET_DIR="$target/linked-app" cargo build -q)
"$target/debug/cuda-sim" run --strict -- \
  "$target/linked-app/debug/linked-app"
