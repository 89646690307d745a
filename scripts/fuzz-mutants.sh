#!/usr/bin/env bash
# Teeth of the safe-API fuzzer (tests/tests/fuzz_safe_api.rs): each fix of issue 37 reverted in
# turn (a mutation, scripts/mutations/<F>.patch), then
#   1. the kept corpus is run: the defect's own corpus program must fail the oracle;
#   2. random programs only (no corpus) are run until a failure with the defect's signature is
#      found, from several base seeds: the time to find it, the programs it took, and the
#      length of the shrunk program.
#
# The mutants are built from a copy of HEAD (git archive) plus this working tree's fuzzer files,
# in their own target directory: the working tree and its target are not touched.
#
#   scripts/fuzz-mutants.sh                 # every mutation, three base seeds
#   MUTANTS="F8 F10" SEEDS="7 8" scripts/fuzz-mutants.sh
#   CASES=20000 scripts/fuzz-mutants.sh     # the most random programs per search
#   VERBOSE=1 ...                           # also print each shrunk program
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-/tmp/handles-fuzz-mutants}
target=${TARGET:-/tmp/handles-fuzz-mutants-target}
mutants=${MUTANTS:-"F2 F5 F6 F7 F8 F9 F10 F12"}
seeds=${SEEDS:-"1 1000001 2000001"}
cases=${CASES:-10000}
nvrtc=${CUDA_SIM_NVRTC_DIR:-$root/target/nvrtc/nvidia/cu13/lib}

# The signature each defect fails with (a substring of the shrunk failure's first line), and an
# op the failing program must not hold (F7's rule is "no kernel sets the condition": a program
# with a setter that is merely unordered is another finding).
signature() {
    case $1 in
        F2) echo "abort" ;;
        F5) echo "destroyed-handle" ;;
        F6) echo "liveness" ;;
        F7) echo "conditional-undefined" ;;
        F8) echo "call-from-host-function" ;;
        F9) echo "wrong-context" ;;
        F10) echo "leak" ;;
        F12) echo "abort|hang" ;;
    esac
}
without() {
    case $1 in
        F7) echo "NodeSetCond" ;;
        *) echo "" ;;
    esac
}

rm -rf "$work"
mkdir -p "$work"
git -C "$root" archive HEAD | tar -x -C "$work"
cp -r "$root/tests/tests/fuzz" "$root/tests/tests/fuzz_safe_api.rs" "$work/tests/tests/"
rm -rf "$work/tests/fuzz-corpus"
cp -r "$root/tests/fuzz-corpus" "$work/tests/"

# F12's library fix caps a switch's bodies before the driver; today's simulator refuses the same
# sizes itself (CUDA_ERROR_OUT_OF_MEMORY, since 7497bab), which hides the reverted fix. F12 runs
# on the simulator from before that commit, a driver that takes any size, as the issue's was.
old_sim_commit=7497bab^
old_sim_dir=""
if [[ " $mutants " == *" F12 "* ]]; then
    rm -rf "$work-oldsim"
    mkdir -p "$work-oldsim"
    git -C "$root" archive "$old_sim_commit" | tar -x -C "$work-oldsim"
    (cd "$work-oldsim" && CARGO_TARGET_DIR="$target-oldsim" cargo build -q -p cuda-sim)
    old_sim_dir="$target-oldsim/cuda-sim"
fi

run() {
    local library=()
    if [[ $mutant == F12 && -n $old_sim_dir ]]; then
        library=(CUDA_SIM_LIBRARY_DIR="$old_sim_dir")
    fi
    (cd "$work" && env "${library[@]}" CARGO_TARGET_DIR="$target" CUDA_SIM_NVRTC_DIR="$nvrtc" \
        cargo test -q -p handles-tests --test fuzz_safe_api -- --nocapture "$@" 2>&1) || true
}

echo "| fix | corpus program fails | seed | found after | programs | shrunk to (ops) | signature |"
echo "|---|---|---|---|---|---|---|"
for mutant in $mutants; do
    patch_file="$root/scripts/mutations/$mutant.patch"
    (cd "$work" && patch -s -p1 <"$patch_file") || { echo "| $mutant | the patch does not apply |"; continue; }
    corpus=$(FUZZ_RANDOM=0 run | grep -E 'corpus .*FAILED' | sed -E 's/^.*corpus ([^:]*): FAILED.*/\1/' | paste -sd, -)
    for seed in $seeds; do
        out=$(FUZZ_CORPUS=0 FUZZ_SEED=$seed FUZZ_CASES=$cases FUZZ_FIND="$(signature "$mutant")" \
            FUZZ_FIND_WITHOUT="$(without "$mutant")" FUZZ_SHRINK=${SHRINK:-300} run)
        found=$(grep -E 'fuzz: FOUND' <<<"$out" | head -1)
        if [[ -z $found ]]; then
            echo "| $mutant | ${corpus:-none} | $seed | not found in $cases programs | | | |"
            continue
        fi
        after=$(sed -E 's/.*FOUND after ([0-9.]+ s) and ([0-9]+) programs.*/\1/' <<<"$found")
        programs=$(sed -E 's/.*FOUND after ([0-9.]+ s) and ([0-9]+) programs.*/\2/' <<<"$found")
        shrunk=$(grep -E 'fuzz: shrunk' <<<"$out" | sed -E 's/.* to ([0-9]+) ops.*/\1/')
        sig=$(sed -E 's/.*\): //' <<<"$found")
        echo "| $mutant | ${corpus:-none} | $seed | $after | $programs | $shrunk | $sig |"
        if [[ -n ${VERBOSE:-} ]]; then
            sed -n '/^--- the program/,/^--- as Rust/p' <<<"$out"
        fi
    done
    (cd "$work" && patch -s -R -p1 <"$patch_file")
done
