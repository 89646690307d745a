#!/usr/bin/env bash
# Builds every test, example and bench binary in release mode and copies the executables into
# .gpu/ (git-ignored), packed into .gpu-pack/ to be carried to a machine with a GPU but no cargo.
#
#   scripts/gpu-collect.sh
#   # then, on the GPU machine, from the repository root, with .gpu-pack carried:
#   scripts/gpu-unpacked.sh           # unpacks .gpu, then runs every test binary with
#                                     # --include-ignored and the tour; logs go to $OUT or ./gpu-logs
#   scripts/gpu-unpacked.sh perf      # gpu_bench core x5, the latencies and the serving benchmark
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu
mkdir -p .gpu
examples=(tour ipc pipeline memory_server why_handles)
cargo build --release -p handles-cuda ${examples[@]/#/--example }
for example in "${examples[@]}"; do cp "target/release/examples/$example" ".gpu/$example"; done
cargo build --release -p handles-cuda-libs --example gemm --example all_reduce
cp target/release/examples/gemm .gpu/gemm
cp target/release/examples/all_reduce .gpu/all_reduce
cargo test --workspace --release --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg["profile"].get("test"):
        continue
    kind = msg["target"]["kind"][0]
    name = msg["target"]["name"].replace("-", "_")
    # The UI suite and the macro crate tests need cargo and rustc, absent on the GPU machine.
    if name == "ui" or kind == "proc-macro":
        continue
    dest = os.path.join(".gpu", "test-" + kind + "-" + name)
    shutil.copy(msg["executable"], dest)
    print(dest)
'
# A crate outside the workspace that uses only cudarc (cuda-sim/fixtures/cudarc-app): its
# tests run on the GPU here and on the simulator in cuda-sim/tests/runner.rs.
app=$(mktemp -d)
root=$PWD
cp -r cuda-sim/fixtures/cudarc-app/. "$app"
(cd "$app" && CARGO_TARGET_DIR="$root/target/cudarc-app" cargo test --release --offline --no-run \
  --message-format=json 2>/dev/null) | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == "app":
        shutil.copy(msg["executable"], ".gpu/test-cudarc_app")
        print(".gpu/test-cudarc_app")
'
rm -rf "$app"
cargo build --release -p handles-bench --bin gpu_bench --bin serving
cp target/release/gpu_bench .gpu/gpu_bench
cp target/release/serving .gpu/serving
# Debug info would push the folder past the 64 MiB the device call carries.
strip .gpu/test-* .gpu/tour .gpu/ipc .gpu/pipeline .gpu/memory_server .gpu/why_handles .gpu/gemm .gpu/all_reduce
strip .gpu/gpu_bench .gpu/serving
# The simulated driver, for the `on_the_simulator` launchers and the fault sweep; only their
# child processes load it (gpu-run.sh sets CUDA_SIM_LIBRARY_DIR), everything else uses the real
# driver.
# With it, its links (the names of the simulated cuBLAS, cuRAND and CUDA runtime), so that a
# simulator child finds them there and not the machine's real libraries.
mkdir -p .gpu/cuda-sim
cp -P target/cuda-sim/lib*.so* .gpu/cuda-sim/
strip .gpu/cuda-sim/libcuda.so
# candle-core's CUDA test binaries, when scripts/candle.sh --no-run has built them (CANDLE_WORK as
# there), stripped and packed in one xz stream whose window spans two binaries (they share
# about 100 MB of kernels), for gpu-run.sh's candle step; packing takes about 10 minutes, so
# the pack is kept beside the binaries and redone only when they change.
candle_work=${CANDLE_WORK:-${CARGO_TARGET_DIR:-target}/candle-work}
if [ -f "$candle_work/binaries" ]; then
  pack="$candle_work/candle.tar.xz"
  # The pack's signature: each binary's path and modification time, sorted (candle.sh rewrites the
  # list on every run, rebuilt or not).
  signature=$(awk '{print $2}' "$candle_work/binaries" | sort | xargs stat -c '%n %Y')
  if [ ! -f "$pack" ] || [ "$(cat "$pack.signature" 2>/dev/null)" != "$signature" ]; then
    stripped=$(mktemp -d)
    for name in candle_core conv_tests pool_tests layout_tests tensor_tests grad_tests quantized_tests \
      matmul_tests bilinear_tests; do
      strip -o "$stripped/$name" "$(awk -v n="$name" '$1 == n {print $2}' "$candle_work/binaries")"
    done
    tar -C "$stripped" -cf - . | xz -T1 --lzma2=preset=6,dict=256MiB >"$pack.part"
    mv "$pack.part" "$pack"
    printf '%s\n' "$signature" >"$pack.signature"
    rm -rf "$stripped"
  fi
  cp "$pack" .gpu/candle.tar.xz
else
  echo "gpu-collect: no candle-core test binaries in $candle_work (scripts/candle.sh --no-run builds them)"
fi
# cudarc's lib tests, when scripts/cudarc-tests.sh has built them, for gpu-run.sh's cudarc step.
cudarc_bin=$(ls -t "${CARGO_TARGET_DIR:-target}"/cudarc-tests/debug/deps/cudarc-* 2>/dev/null | grep -v '\.d$' | head -n 1 || true)
if [ -n "$cudarc_bin" ]; then
  strip -o .gpu/cudarc-lib-tests "$cudarc_bin"
else
  echo "gpu-collect: no cudarc lib tests (scripts/cudarc-tests.sh builds them)"
fi
cp scripts/gpu-run.sh .gpu/
cp bench/cuda_core_bench.py .gpu/
# Every test binary collected above must be in one launcher list of gpu-run.sh (GPU tests,
# simulator-only, plain or needs-cargo): a new test binary in none fails the collection here.
lists_logs=$(mktemp -d)
OUT=$lists_logs scripts/gpu-run.sh lists
rm -rf "$lists_logs"
du -sh .gpu
# The folder (about 145 MB: stripped binaries that share most of their code) is more than the
# 64 MiB a device call carries, so it is also packed into one xz stream, with the commit it was
# built from: carry `.gpu-pack` and run `scripts/gpu-unpacked.sh STEP...` there. candle-core's
# own pack (.gpu/candle.tar.xz, for the candle step) is left out: it is carried on its own.
mkdir -p .gpu-pack
rm -f .gpu-pack/commit.txt
git describe --always --dirty --abbrev=7 >.gpu-pack/commit.txt.part
tar -cf - --exclude=.gpu/candle.tar.xz .gpu | xz -T2 -6 >.gpu-pack/gpu.tar.xz.part
mv .gpu-pack/gpu.tar.xz.part .gpu-pack/gpu.tar.xz
mv .gpu-pack/commit.txt.part .gpu-pack/commit.txt
du -sh .gpu-pack/gpu.tar.xz
