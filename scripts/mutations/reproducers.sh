#!/usr/bin/env bash
# Teeth of the issue-37 reproducers: each fix reverted in turn (scripts/mutations/<F>.patch, in
# a clean clone of HEAD with a target directory of its own), its reproducer must fail; the clone
# is restored after each. Prints one block per mutation: the status and the failure's lines.
#
#   scripts/mutations/reproducers.sh            # F2 F5 F6 F7 F8 F9 F10 F12
#   MUTANTS="F6 F8" scripts/mutations/reproducers.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${WORK:-/tmp/handles-reproducers}
export CARGO_TARGET_DIR=${TARGET:-/tmp/handles-reproducers-target}
rm -rf "$work"
git clone -q "$root" "$work"
cd "$work"
declare -A test=(
  [F2]="--test release_unwind a_panicking_record_dropped_by_an_unrelated_unwind_does_not_abort"
  [F5]="--test review24 f5_"
  [F6]="--test review24 f6_"
  [F7]="--test review24 f7_f12"
  [F8]="--test review24 f8_"
  [F9]="--test review24 f9_"
  [F10]="--test review24 f10_"
  [F12]="--test review24 f7_f12"
)
status=0
for m in ${MUTANTS:-F2 F5 F6 F7 F8 F9 F10 F12}; do
  git apply "scripts/mutations/$m.patch"
  # shellcheck disable=SC2086 # the test selection is several words
  out=$(timeout 600 cargo test -q -p handles-tests ${test[$m]} 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "== $m reverted: its reproducer PASSED (no teeth)"
    status=1
  else
    echo "== $m reverted: its reproducer failed (rc $rc)"
  fi
  printf '%s\n' "$out" | grep -E "violation|expected|SIGABRT|held this one|leaked" | head -n 3
  git checkout -q -- .
done
exit $status
