#!/usr/bin/env bash
# Instructions per operation on the simulated driver, which do not drift: callgrind counts
# `sim_count N OP` for two values of N, and the per-operation count is the difference divided
# by the difference of N (the setup cancels out). Raw driver calls, handles-cuda and cudarc
# side by side, as in gpu_bench (see bench/src/bin/sim_count.rs for the operations), and one
# request of the serving benchmark (serve-raw, serve-cudarc, serve, serve-staging: `serving
# --count`, one worker, 256 values per request).
#
#   scripts/count-instructions.sh                 # every operation
#   scripts/count-instructions.sh event event-raw # some
#   ANNOTATE=1 scripts/count-instructions.sh event  # also keep callgrind.out.OP.N for
#                                                   # callgrind_annotate --auto=yes
#   SIM_COUNT=/path/to/sim_count scripts/count-instructions.sh   # count another build of
#                                   # sim_count (an older commit's) against this simulator
#   OWN=1 scripts/count-instructions.sh graph graph-cudarc   # also the program's own instructions
#                                   # per op (scripts/hot-path.py at N=400: our crates, cudarc and std,
#                                   # not the simulated driver; the PTX loader's setup lines left out)
#   BUS=1 scripts/count-instructions.sh event event-cudarc   # also the atomic instructions
#                                   # (callgrind's global bus events) per op of the program's
#                                   # own code, without the simulated driver's (functions of its
#                                   # `cuda` crate)
set -euo pipefail
cd "$(dirname "$0")/.."
ops=("$@")
[ ${#ops[@]} -eq 0 ] && ops=(event-raw event event-cudarc pool-raw pool pool-cudarc
  stream-raw stream stream-cudarc graph-raw graph graph-cudarc graph10-raw graph10 clone-arc clone
  launch-raw launch launch-cudarc event-unbound event-cudarc-unbound record-raw record record-cudarc
  serve-raw serve-cudarc serve serve-staging)
# Two builds: with --bin, cargo would build only those binaries and not the simulated driver.
cargo build --release -q -p cuda-sim
cargo build --release -q -p handles-bench --bin sim_count --bin serving
sim_count=${SIM_COUNT:-target/release/sim_count}
serving=${SERVING:-target/release/serving}
# OP N -> the command that runs OP N times: a serving request (`serving --count VARIANT N`,
# one worker on one thread: serve-raw, serve-cudarc (tracking off), serve (handles-cuda, host
# views), serve-staging (raw staging pointers)) or a sim_count operation.
program() {
  case $1 in
    serve-raw) echo "$serving --count 0 $2" ;;
    serve-cudarc) echo "$serving --count 1 $2" ;;
    serve) echo "$serving --count 3 $2" ;;
    serve-staging) echo "$serving --count 4 $2" ;;
    *) echo "$sim_count $2 $1" ;;
  esac
}
out=$(mktemp -d)
bus=()
[ -n "${BUS:-}" ] && bus=(--collect-bus=yes)
count() { # OP N -> total instructions
  LD_LIBRARY_PATH=target/cuda-sim valgrind --tool=callgrind ${bus[@]+"${bus[@]}"} \
    --callgrind-out-file="$out/$1.$2" $(program "$1" "$2") >/dev/null 2>"$out/log.$1.$2" \
    || { cat "$out/log.$1.$2" >&2; exit 1; }
  grep -E '^(summary|totals):' "$out/$1.$2" | head -n 1 | awk '{print $2}'
}
atomics() { # OP N -> atomic instructions outside the simulated driver's functions
  callgrind_annotate --auto=no --inclusive=no --show=Ge --sort=Ge --threshold=100 "$out/$1.$2" 2>/dev/null \
    | awk '$1 ~ /^[0-9,]+$/ && $0 !~ /PROGRAM TOTALS/ {
        n = $1; gsub(",", "", n); name = $0; sub(/^[^:]*:/, "", name)
        if (name !~ /^(<)?cuda::/ && name !~ /libcuda\.so/) total += n
      } END { print total + 0 }'
}
own() { # OP -> the program's own instructions per op (hot-path.py at N=400)
  LD_LIBRARY_PATH=target/cuda-sim valgrind --tool=callgrind --dump-instr=yes \
    --callgrind-out-file="$out/own.$1" $(program "$1" 400) >/dev/null 2>&1
  local binary
  binary=$(program "$1" 400)
  binary=$(basename "${binary%% *}")
  python3 scripts/hot-path.py "$out/own.$1" "$binary" 400 | awk 'NR > 1 && $1 ~ /^[0-9.]+$/ &&
    $0 !~ /TwoWaySearcher|ptx_entries|checked_image|load_with_entries|from_utf8/ { t += $1 } END { printf "%.0f", t }'
}
if [ -n "${OWN:-}" ]; then
  printf '| op | instructions per op | own instructions per op (program) |\n|---|---|---|\n'
elif [ -n "${BUS:-}" ]; then
  printf '| op | instructions per op | atomics per op (program) |\n|---|---|---|\n'
else
  printf '| op | instructions per op |\n|---|---|\n'
fi
for op in "${ops[@]}"; do
  case $op in graph*|launch*|serve*) low=200 high=400 ;; clone*) low=20000 high=40000 ;; *) low=1000 high=2000 ;; esac
  a=$(count "$op" $low)
  b=$(count "$op" $high)
  if [ -n "${BUS:-}" ]; then
    atomic=$(python3 -c "print(round(($(atomics "$op" $high) - $(atomics "$op" $low)) / ($high - $low), 2))")
    printf '| %s | %s | %s |\n' "$op" "$(( (b - a) / (high - low) ))" "$atomic"
    continue
  fi
  if [ -n "${OWN:-}" ]; then
    printf '| %s | %s | %s |\n' "$op" "$(( (b - a) / (high - low) ))" "$(own "$op")"
    continue
  fi
  printf '| %s | %s |\n' "$op" "$(( (b - a) / (high - low) ))"
  if [ -n "${ANNOTATE:-}" ]; then cp "$out/$op.$low" "callgrind.out.$op.$low"; cp "$out/$op.$high" "callgrind.out.$op.$high"; fi
done
rm -rf "$out"
