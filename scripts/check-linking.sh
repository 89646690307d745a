#!/usr/bin/env bash
# Builds a downstream crate that picks cudarc's `dynamic-linking` (cuda-sim/fixtures/
# linked-app), linking against the simulated driver and NVRTC, and runs it on the simulator.
# The default build of the workspace covers `dynamic-loading`. Then checks that a downstream
# crate that leaves handles-cuda without a linking mode is refused at build time.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build -q -p cuda-sim
nvrtc=$("$target/debug/cuda-sim" nvrtc)
# A CUDA root for the linker: the simulator's libcuda.so and NVRTC's library.
root="$target/linking-root"
mkdir -p "$root/lib64"
ln -sf "$target/cuda-sim/libcuda.so" "$root/lib64/libcuda.so"
ln -sf "$nvrtc/libnvrtc.so.13" "$root/lib64/libnvrtc.so"
app=$(mktemp -d)
trap 'rm -rf "$app"' EXIT
cp -r cuda-sim/fixtures/linked-app/. "$app"
sed -i "s#../../../handles-cuda#$PWD/handles-cuda#" "$app/Cargo.toml"
(cd "$app" && CUDA_PATH="$root" CARGO_TARGET_DIR="$target/linked-app" cargo build -q --locked)
# Linked, not loaded: the executable names the driver library itself.
readelf -d "$target/linked-app/debug/linked-app" | grep -q 'NEEDED.*\[libcuda\.so' ||
  { echo "linked-app does not link libcuda"; exit 1; }
"$target/debug/cuda-sim" run --strict -- \
  "$target/linked-app/debug/linked-app"

# A downstream crate that turns handles-cuda's defaults off (to pick a CUDA version) and forgets
# the linking mode, while cudarc's own defaults load the driver at run time: refused at build
# time with handles-cuda's message, instead of building with mismatched driver probing.
sed -i 's#features = \["cuda-13000", "dynamic-linking"\]#features = ["cuda-13000"]#;
        s#"dynamic-linking", "cuda-13000"\]#"fallback-dynamic-loading", "cuda-13000"]#' "$app/Cargo.toml"
if (cd "$app" && CARGO_TARGET_DIR="$target/linked-app-mixed" cargo build -q) 2>"$app/mixed.log"; then
  echo "a build with neither of handles-cuda's linking features succeeded"; exit 1
fi
grep -q "handles-cuda needs exactly one of its features" "$app/mixed.log" ||
  { cat "$app/mixed.log"; exit 1; }
echo "neither linking feature: refused at build time with handles-cuda's message"
