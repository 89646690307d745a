#!/usr/bin/env bash
# cudarc's own lib tests (the version this workspace locks, its published package unchanged) on
# the strict simulator, as a user of cudarc would run them: `cuda-sim run --strict -- <tests>`.
#
# Two tests measure the host's wall-clock speed of the machine's memory and are skipped (listed
# below with the reason); every other test must pass with no violation. The two stream-capture
# tests run on their own: cudarc's `new_stream` synchronises the whole context on its first
# call, which a capture on another test thread may not survive (the driver's rule; on a GPU the
# window is microseconds, here milliseconds), so they would fail beside other tests.
#
# Usage: scripts/cudarc-tests.sh   (CARGO_TARGET_DIR is honoured; needs crates.io for cudarc's
# dev-dependencies)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac

# Host-speed tests: default pinned memory read faster than write-combined memory, a copy from
# pinned memory faster than from pageable memory. Both time the host, not the device.
timing=(test_default_pinned_host_reads_are_faster_than_write_combined test_pinned_copy_is_faster)
capture=(test_end_capture_flags test_end_capture_invalid_flags)

cargo build -q -p cuda-sim
sim="$target/debug/cuda-sim"
src=$(cargo metadata --format-version 1 --locked | python3 -c '
import json, sys
packages = json.load(sys.stdin)["packages"]
print(next(p for p in packages if p["name"] == "cudarc")["manifest_path"].rsplit("/", 1)[0])')
version=$(basename "$src")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/." "$work/cudarc"
started=$SECONDS
(
  cd "$work/cudarc"
  CARGO_TARGET_DIR="$target/cudarc-tests" cargo test -q --no-run --lib --no-default-features \
    --features std,driver,nvrtc,cuda-13000,dynamic-loading 2>&1 | tail -n 3
)
bin=$(ls -t "$target"/cudarc-tests/debug/deps/cudarc-* | grep -v '\.d$' | head -n 1)
echo "$version: lib tests built in $((SECONDS - started)) s"

started=$SECONDS
skips=()
for name in "${timing[@]}" "${capture[@]}"; do skips+=(--skip "$name"); done
"$sim" run --strict -- "$bin" --test-threads=2 "${skips[@]}" 2>&1 | tail -n 4
for name in "${capture[@]}"; do
  "$sim" run --strict -- "$bin" --test-threads=1 --exact "driver::safe::graph::tests::$name" 2>&1 |
    grep -E "^test result|cuda-sim:"
done
echo "$version: lib tests on the simulator in $((SECONDS - started)) s; skipped (host timing): ${timing[*]}"
