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
# pinned memory faster than from pageable memory. Both time the host, not the device, and both
# fail on the H200 too (cuda-sim/tests/h200/cudarc-0.19.10.txt, the tests' verdicts there).
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
# Each run's exit status counts too: strict, a violation or a leak at exit fails it.
unclean=0
"$sim" run --strict -- "$bin" --test-threads=2 "${skips[@]}" >"$work/lib.log" 2>&1 || unclean=1
tail -n 4 "$work/lib.log"
for name in "${capture[@]}"; do
  "$sim" run --strict -- "$bin" --test-threads=1 --exact "driver::safe::graph::tests::$name" \
    >"$work/$name.log" 2>&1 || unclean=1
  grep -E "^test result|cuda-sim:" "$work/$name.log"
done
# Each test that passes on the H200 passed here, and nothing failed or stopped.
python3 - "$root/cuda-sim/tests/h200/$version.txt" "$work"/*.log <<'EOF'
import re, sys
passed, failed = set(), []
for log in sys.argv[2:]:
    for line in open(log, errors="replace"):
        m = re.match(r"test (\S+) (?:- should panic )?\.\.\. (ok|FAILED)", line)
        if m:
            (passed.add(m[1]) if m[2] == "ok" else failed.append(m[1]))
want = [l.split()[0] for l in open(sys.argv[1]) if l.strip() and not l.startswith("#") and l.split()[1] == "ok"]
missing = [t for t in want if t not in passed]
print(f"cudarc: {len(want) - len(missing)} of the {len(want)} lib tests that pass on the H200 pass here"
      + (f"; not: {' '.join(missing)}" if missing else "") + (f"; failed: {' '.join(failed)}" if failed else ""))
sys.exit(1 if missing or failed else 0)
EOF
[[ $unclean == 0 ]] || { echo "cudarc: a run under the simulator did not exit cleanly"; exit 1; }

echo "$version: lib tests on the simulator in $((SECONDS - started)) s; skipped (host timing): ${timing[*]}"

# Its examples, strict, each with exit status 0 and no violation. Not run: 08-cupti and
# cufile-copy (CUPTI and cuFile, which the simulator does not provide), 13-copy-multi-gpu (two
# GPUs), and 12-context-config, which queries CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: driver 580
# answers CUDA_ERROR_UNSUPPORTED_LIMIT on Hopper, and so does the simulator
# (cuda-sim/tests/cudarc_coverage.rs), so the example stops there on both.
examples=(01-allocate 02-copy 03-launch-kernel 04-streams 05-device-repr 06-threading
  09-constant-memory 10-function-attributes matmul-kernel nvrtc-compile)
(
  cd "$work/cudarc"
  CARGO_TARGET_DIR="$target/cudarc-tests" cargo build -q "${examples[@]/#/--example=}" \
    --no-default-features --features std,driver,nvrtc,cuda-13000,dynamic-loading 2>&1 | tail -n 3
)
clean_examples=0
for example in "${examples[@]}"; do
  out=$(cd "$work/cudarc" && "$sim" run --strict -- "$target/cudarc-tests/debug/examples/$example" 2>&1)
  status=$?
  if [[ $status == 0 ]] && grep -q '^cuda-sim: 0 violations, leaks: none' <<<"$out"; then
    clean_examples=$((clean_examples + 1))
  else
    echo "cudarc example $example: exit $status; $(grep -E '^cuda-sim: ' <<<"$out" | tail -n 2 | paste -sd' ' -)"
  fi
done
echo "cudarc: $clean_examples of ${#examples[@]} examples ran clean on the strict simulator"
[[ $clean_examples == "${#examples[@]}" ]]
