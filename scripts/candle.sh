#!/usr/bin/env bash
# Builds candle-core 0.11.1's tests, exactly as published on crates.io, with `--features cuda` on a
# machine without a GPU or a CUDA installation, and runs each test binary under
# `cuda-sim run --strict`. Needs Rust, Python with pip, gcc and network access to crates.io and
# PyPI. Prints one line per test binary and a summary.
#
#   scripts/candle.sh [--no-run] [--only BINARY] [-- TEST-FILTER...]
#
# CARGO_TARGET_DIR: our target (default ./target); CANDLE_WORK: where candle-core is copied and
# built (default <target>/candle-work); CANDLE_JOBS: cargo jobs for candle (default 2);
# CANDLE_TEST_THREADS: libtest threads per binary (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target="${CARGO_TARGET_DIR:-$repo/target}"
work="${CANDLE_WORK:-$target/candle-work}"
# candle-core is built as its own root: inside this repository only under target/, which the
# workspace excludes (elsewhere cargo would take it for a member of ours).
real_repo=$(realpath "$repo")
case "$(realpath -m "$work")/" in
  "$real_repo/target/"*) ;;
  "$real_repo/"*) echo "candle.sh: CANDLE_WORK must be outside $repo or under its target/" >&2; exit 2 ;;
esac
jobs="${CANDLE_JOBS:-2}"
threads="${CANDLE_TEST_THREADS:-2}"
version=0.11.1
no_run=0
only=
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-run) no_run=1; shift ;;
    --only) only=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--no-run] [--only BINARY] [-- TEST-FILTER...]"; exit 2 ;;
  esac
done
filters=("$@")

# A throwaway crate's manifest, outside any workspace: its name and its one dependency.
manifest() {
  printf '[package]\nname = "%s"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n' "$1"
  printf '[dependencies]\n%s\n[workspace]\n' "$2"
}

phase_start=$SECONDS
phase() {
  echo "candle.sh: $1 took $((SECONDS - phase_start)) s" >&2
  phase_start=$SECONDS
}

# 1. nvcc 13.0 (the toolkit of the driver the simulator plays), from PyPI, in one pip command:
# a later `--upgrade` of one of them would wipe the shared nvidia/ directory, and nvvm must be
# pinned or pip takes a newer one.
nvcc_root="$target/nvcc"
nvcc_stamp="$nvcc_root/.version-13.0.88"
if [[ ! -f $nvcc_stamp ]]; then
  rm -rf "$nvcc_root"
  python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
    --target "$nvcc_root" \
    "nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-crt==13.0.88" \
    "nvidia-cuda-cccl==13.0.85" "nvidia-nvvm==13.0.88"
  touch "$nvcc_stamp"
fi
cu="$nvcc_root/nvidia/cu13"
export PATH="$cu/bin:$PATH"
# The PyPI layout has no targets/<arch>/include, which nvcc.profile names.
export NVCC_PREPEND_FLAGS="-I$cu/include -isystem $cu/include/cccl"
# candle-kernels compiles its statically linked kernels (libmoe.a, launched through the CUDA
# runtime) for sm_$cap only: machine code, which the simulator cannot run. This wrapper adds
# the PTX of compute_$cap to each object's fatbinary, uncompressed, for the simulator's
# runtime to load; PTX-only builds (--ptx) are left as they are.
cap=90
wrapper="$nvcc_root/nvcc-with-ptx"
cat >"$wrapper" <<EOF
#!/bin/sh
case " \$* " in
  *" --ptx "*|*" -ptx "*) exec "$cu/bin/nvcc" "\$@" ;;
  *" -c "*) exec "$cu/bin/nvcc" "\$@" -gencode=arch=compute_$cap,code=compute_$cap --no-compress ;;
esac
exec "$cu/bin/nvcc" "\$@"
EOF
chmod +x "$wrapper"
export NVCC="$wrapper"
phase "nvcc install"

# 2. The simulator and NVRTC.
CARGO_TARGET_DIR="$target" cargo build -q -j1 -p cuda-sim
sim="$target/debug/cuda-sim"
nvrtc=$("$sim" nvrtc)
phase "simulator build"

# 3. A CUDA root for cudarc's `dynamic-linking` and candle-kernels' `-lcudart`: the driver, the
# libraries cuBLAS, cuBLASLt and cuRAND, and the CUDA runtime (the part nvcc's host code calls)
# are the simulator (one library without a SONAME, so each link name is what the executables
# ask for, and the runner's directory holds them all); NVRTC is NVIDIA's.
root="$target/candle-cuda-root"
mkdir -p "$root/lib64"
for lib in cuda cublas cublasLt curand cudart; do
  ln -sfn "$target/cuda-sim/libcuda.so" "$root/lib64/lib$lib.so"
done
ln -sfn "$nvrtc/libnvrtc.so.13" "$root/lib64/libnvrtc.so"
ln -sfn "$cu/include" "$root/include"
ln -sfn "$cu/bin" "$root/bin"
phase "CUDA root"

# 4. candle-core as published: fetched through a throwaway crate, copied unchanged.
src="$work/candle-core"
if [[ ! -f $src/.candle-sim-copied ]]; then
  fetcher="$work/fetch"
  mkdir -p "$fetcher/src"
  manifest candle-fetch "candle-core = { version = \"=$version\", features = [\"cuda\"] }" \
    >"$fetcher/Cargo.toml"
  : >"$fetcher/src/lib.rs"
  (cd "$fetcher" && cargo fetch -q)
  registry=$(cd "$fetcher" && cargo metadata -q --format-version 1 |
    python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="candle-core"))')
  rm -rf "$src"
  cp -r "$(dirname "$registry")" "$src"
  touch "$src/.candle-sim-copied"
fi
phase "candle-core fetch"

# 5. Its tests, with `--features cuda`, and in the same cargo invocation the per-thread-stream
# program of step 7: one workspace (candle-core unchanged, and that program) and one feature
# resolution, so candle-core, candle-kernels' kernels and every dependency are built once (built
# apart, the program's build resolved other features for candle's dependencies and rebuilt
# nearly all of them, about 15 minutes on two cores). The program is a test target without
# libtest's harness, so that `cargo test --no-run` builds it as the plain program it is.
# CUDA_COMPUTE_CAP keeps candle-kernels' build (cudaforge) from asking nvidia-smi; CUDA_ROOT
# points cudarc's link search at the root above.
app="$work/per-thread-free"
mkdir -p "$app/src" "$app/tests"
printf '[workspace]\nresolver = "2"\nmembers = ["candle-core", "per-thread-free"]\n' >"$work/Cargo.toml"
cat >"$app/Cargo.toml" <<'TOML'
[package]
name = "candle-per-thread-free"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
candle-core = { path = "../candle-core", features = ["cuda"] }

[lib]
test = false
doctest = false

[[test]]
name = "per_thread_free"
harness = false
TOML
: >"$app/src/lib.rs"
cat >"$app/tests/per_thread_free.rs" <<'RUST'
fn main() -> candle_core::Result<()> {
    let device = candle_core::Device::new_cuda(0)?;
    let worker = device.clone();
    // Computed on the spawned thread's per-thread stream...
    let tensor = std::thread::spawn(move || {
        candle_core::Tensor::arange(0f32, 4096f32, &worker)?.affine(2.0, 1.0)
    })
    .join()
    .expect("the computing thread")?;
    // ...and freed on this thread's: nothing orders the kernel before the free.
    drop(tensor);
    device.synchronize()?;
    Ok(())
}
RUST
export CUDA_COMPUTE_CAP=$cap CUDA_ROOT="$root" CUDA_PATH="$root" CUDA_HOME="$root"
export CUDA_TOOLKIT_ROOT_DIR="$root" CUDARC_CUDA_VERSION=13000
export CARGO_TARGET_DIR="$work/target"
(cd "$work" && cargo test -j"$jobs" -p candle-core -p candle-per-thread-free --features candle-core/cuda \
  --no-run --message-format=json 2>"$work/build.log" |
  python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        # The test binaries of candle-core, and the per-thread program marked as such.
        name = m["target"]["name"]
        print(("per-thread " if name == "per_thread_free" else "") + name, m["executable"])
' >"$work/artifacts") || { tail -40 "$work/build.log"; exit 1; }
grep -v '^per-thread ' "$work/artifacts" >"$work/binaries"
per_thread_exe=$(awk '$1 == "per-thread" { print $3 }' "$work/artifacts")
phase "candle-core test build"
[[ $no_run == 1 ]] && exit 0

# 6. Each test binary under the simulator, strict: a violation or a leak fails the run.
#
# Candle's own races. `tensor_tests::tensor_send_sync_gpu` hands a tensor that one thread
# wrote (an asynchronous copy from pageable memory on that thread's per-thread default
# stream, `Device::new_cuda`'s stream) to ten spawned threads that read it in kernels on
# theirs. Nothing orders two threads' per-thread default streams, and cudarc adds no event
# for them (its event tracking starts with `new_stream`), so by CUDA's documented semantics
# the kernels race with the copy. The simulator reports it when a spawned thread launches
# before the first thread next waits for its stream (one host clock for all threads: a later
# wait orders everything after it), which depends on the threads' timing. Such a test runs
# alone and not strict: it must pass, and every violation must be a race between two
# threads' per-thread default streams (`own_race_check`); the rest of its binary stays strict.
declare -A own_race=([tensor_tests]=tensor_send_sync_gpu)
own_race_check() {
  python3 - "$1" "$2" <<'PY'
import json, re, sys
report, test = json.load(open(sys.argv[1])), sys.argv[2]
streams = re.compile(r"per-thread stream of thread (\d+)")
known = []
for v in report["violations"]:
    threads = set(streams.findall(v["message"]))
    if v["kind"] not in ("data-race", "unordered-free") or len(threads) != 2:
        print(f"candle {test}: a violation other than its own race: {v['kind']}: {v['message'][:240]}")
        sys.exit(1)
    known.append(v)
print(f"candle {test}: candle's own race between per-thread default streams, reported "
      f"{len(known)} times in this run (its timing decides)"
      + (f"; first: {known[0]['message'][:200]}" if known else ""))
PY
}
total_pass=0 total_fail=0 total_ign=0 bad=()
mkdir -p "$work/logs"
while read -r name exe; do
  [[ -n $only && $name != "$only" ]] && continue
  log="$work/logs/$name.log"
  start=$SECONDS
  racy=
  [[ ${#filters[@]} == 0 ]] && racy=${own_race[$name]:-}
  set +e
  (cd "$src" && "$sim" run --strict -- "$exe" --test-threads="$threads" \
    ${racy:+--skip "$racy"} "${filters[@]}") >"$log" 2>&1
  rc=$?
  if [[ -n $racy ]]; then
    report="$work/logs/$name-own-race.json"
    rm -f "$report"
    (cd "$src" && "$sim" run --report "$report" -- "$exe" --exact "$racy") >>"$log" 2>&1
    race_rc=$?
    own_race_check "$report" "$name::$racy" || rc=1
    # Exit 3 is the simulator's "violations", checked above; anything else fails the test.
    [[ $race_rc == 0 || $race_rc == 3 ]] || rc=$race_rc
  fi
  set -e
  read -r pass fail ign < <(python3 - "$log" <<'EOF'
import re, sys
# Counted from the tests' own lines, so that a run the simulator stopped (a violation under
# --strict) still counts what ran before it; a test it stopped in counts as failed.
p = f = i = 0
running = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"test (\S+) (?:- should panic )?\.\.\. (ok|FAILED|ignored)", line)
    if m:
        p += m[2] == "ok"; f += m[2] == "FAILED"; i += m[2] == "ignored"
        running = None
    elif re.match(r"test (\S+) (?:- should panic )?\.\.\. ", line):
        running = line.split()[1]
if running:
    f += 1
print(p, f, i)
EOF
)
  failing=$(grep -E '^test .* \.\.\. (FAILED$|cuda-sim: violation)' "$log" |
    sed -E 's/^test ([^ ]*) .*$/\1/' | tr '\n' ' ' || true)
  verdict=$(grep -E '^cuda-sim: [0-9]+ violations' "$log" | head -1 || true)
  stopped=
  grep -q '^test result:' "$log" ||
    stopped=" STOPPED: $(grep -oE 'cuda-sim: violation .{0,160}' "$log" | head -1 || echo "no test result")"
  echo "candle $name: $pass passed, $fail failed, $ign ignored (exit $rc, $((SECONDS - start)) s; $verdict)${failing:+ failing: $failing}$stopped"
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + fail)) total_ign=$((total_ign + ign))
  [[ $rc != 0 ]] && bad+=("$name")
done <"$work/binaries"
phase "candle-core tests under the simulator"
echo "candle total: $total_pass passed, $total_fail failed, $total_ign ignored; binaries not clean: ${bad[*]:-none}"
# Every CUDA test that passed on the H200 (cuda-sim/tests/h200/) passed here too.
h200=0
if [[ -z $only && ${#filters[@]} == 0 ]]; then
  h200=$(python3 - "$repo/cuda-sim/tests/h200/candle-core-$version.txt" "$work/logs" <<'EOF'
import re, sys
passed = set()
import glob, os
for log in glob.glob(os.path.join(sys.argv[2], "*.log")):
    binary = os.path.basename(log)[:-4]
    for line in open(log, errors="replace"):
        m = re.match(r"test (\S+) (?:- should panic )?\.\.\. ok$", line)
        if m:
            passed.add((binary, m[1]))
want = [tuple(l.split()[:2]) for l in open(sys.argv[1]) if l.strip() and not l.startswith("#") and l.split()[2] == "ok"]
missing = [f"{b}::{t}" for b, t in want if (b, t) not in passed]
print(f"candle: {len(want) - len(missing)} of the {len(want)} CUDA tests that pass on the H200 pass here"
      + (f"; not: {' '.join(missing)}" if missing else ""), file=sys.stderr)
print(len(missing))
EOF
)
fi
# 7. The per-thread-stream free (cuda-sim/README.md): a tensor computed on one thread's
# per-thread default stream (candle's `Device::new_cuda` stream) and dropped on another (the
# program built in step 5). The simulator must report the free as unordered after the kernel,
# as it does for cudarc's `per_thread_stream` (tests/tests/interop.rs, beside handles-cuda's
# twin, which it does not report).
if [[ -z $only && ${#filters[@]} == 0 ]]; then
  [[ -x $per_thread_exe ]] || { echo "candle.sh: the per-thread program was not built" >&2; exit 1; }
  report="$work/per-thread-report.json"
  rm -f "$report"
  (cd "$app" && "$sim" run --report "$report" -- "$per_thread_exe") \
    >"$work/logs/per-thread-free.out" 2>&1 || true
  python3 - "$report" <<'PY' || { tail -20 "$work/logs/per-thread-free.out"; exit 1; }
import json, sys
report = json.load(open(sys.argv[1]))
frees = [v for v in report["violations"] if v["kind"] == "unordered-free"]
print(f"candle per-thread free: {len(frees)} unordered-free reported"
      + (f": {frees[0]['message'][:200]}" if frees else "; expected one"))
sys.exit(0 if frees else 1)
PY
  phase "candle per-thread-stream free"
fi
# 8. Every PTX module of candle-kernels loads on the simulator: the sm_90 ones of the build
# above, and the same sources compiled here for sm_80 (nvcc 13.0, candle-kernels' own flags).
if [[ -z $only && ${#filters[@]} == 0 ]]; then
  kernels=$(cd "$src" && cargo metadata -q --format-version 1 --features cuda |
    python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="candle-kernels").rsplit("/", 1)[0])')
  sm90=$(ls -td "$CARGO_TARGET_DIR"/debug/build/candle-kernels-*/out/affine.ptx | head -n 1 | xargs dirname)
  sm80="$work/ptx-sm80"
  mkdir -p "$sm80"
  modules=(affine binary cast conv fill indexing quantized reduce sort ternary unary)
  for module in "${modules[@]}"; do
    [[ -f $sm80/$module.ptx ]] && continue
    "$cu/bin/nvcc" --ptx -arch=compute_80 --expt-relaxed-constexpr -std=c++17 -O3 \
      -o "$sm80/$module.ptx.part" "$kernels/src/$module.cu" 2>>"$work/ptx-sm80.log"
    mv "$sm80/$module.ptx.part" "$sm80/$module.ptx"
  done
  files=()
  for module in "${modules[@]}"; do files+=("$sm90/$module.ptx" "$sm80/$module.ptx"); done
  "$sim" run --strict -- python3 "$repo/scripts/load-modules.py" "${files[@]}" \
    >"$work/logs/modules.log" 2>&1 ||
    { grep -v ": loaded" "$work/logs/modules.log"; exit 1; }
  echo "candle-kernels: $(grep -c ': loaded' "$work/logs/modules.log") modules loaded (${#modules[@]} for sm_90, ${#modules[@]} for sm_80)"
  phase "candle-kernels modules for sm_90 and sm_80"
fi
# Every test passes and every binary exits cleanly, or the script fails.
[[ $total_fail == 0 && ${#bad[@]} == 0 && $total_pass -gt 0 && $h200 == 0 ]]
