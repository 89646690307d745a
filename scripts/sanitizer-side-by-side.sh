#!/usr/bin/env bash
# The simulator's planted-bug programs (cuda-sim/tests/sanitizer_classes.rs, races.rs,
# shared_races.rs) on
# a real GPU under compute-sanitizer's matching tool: one line per program, bug and twin, with
# the tool's error count, for the table in cuda-sim/README.md. Run on the GPU machine
# after scripts/gpu-collect.sh:  scripts/sanitizer-side-by-side.sh
set -u
cd "$(dirname "$0")/.."
run() { # binary tool scenario
  local binary=$1 tool=$2 scenario=$3 extra=()
  # SIDE_BY_SIDE_ONLY=regex: only the programs whose names match.
  [[ -n "${SIDE_BY_SIDE_ONLY:-}" && ! "$scenario" =~ ${SIDE_BY_SIDE_ONLY} ]] && return
  [ "$tool" = memcheck-races ] && { tool=memcheck; extra=(--track-stream-ordered-races all); }
  local out
  # A program that deadlocks the GPU (a warp collective some lanes never reach) is killed.
  out=$(CUDA_SIM_SCENARIO_CHILD=$scenario timeout -k 5 "${SIDE_BY_SIDE_LIMIT:-60}" \
    compute-sanitizer --tool "$tool" "${extra[@]}" \
    ".gpu/test-test-$binary" "$scenario" --exact --include-ignored --test-threads=1 2>&1)
  local status=$? errors
  [ -n "${SIDE_BY_SIDE_LOGS:-}" ] && mkdir -p "$SIDE_BY_SIDE_LOGS" \
    && printf '%s\n' "$out" >"$SIDE_BY_SIDE_LOGS/$scenario.$tool.log"
  # racecheck ends with "RACECHECK SUMMARY: N hazard(s) displayed (E error(s), W warning(s))".
  errors=$(grep -oE "ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)" <<<"$out" \
    | tail -1 | sed -E 's/ERROR SUMMARY: //; s/RACECHECK SUMMARY: [0-9]+ hazards? displayed \((.*)\)/\1/')
  [ "$status" = 124 ] || [ "$status" = 137 ] && errors="hang (killed after ${SIDE_BY_SIDE_LIMIT:-60} s)"
  local kinds
  kinds=$(grep -oE "^========= ([A-Z][a-z]+ [a-z_ ]+(hazard|error|Error|access|exception|barrier|read|write)[a-z ]*|Error: [A-Za-z ]+)" <<<"$out" \
    | sed 's/^========= //' | sort | uniq -c | sed 's/^ *//' | paste -sd';' -)
  printf '| %s | %s | %s | %s |\n' "$scenario" "$tool${extra[*]:+ ${extra[*]}}" "${errors:-?}" "${kinds:-}"
}
echo "| program | tool | errors | what it printed |"
echo "|---|---|---|---|"
for s in trap no_trap brkpt no_brkpt trap_last no_trap_last store_one_past store_to_the_end \
  misaligned_load aligned_load write_freed write_then_free shared_past_the_array shared_inside_the_array; do
  run sanitizer_classes memcheck scenario_$s
done
for s in bar_exit bar_no_exit two_bars one_bar shfl_full_mask shfl_half_mask vote_exited vote_present \
  warp_sync_without_self warp_sync_with_self vote_without_self vote_with_self warp_sync_two_places \
  warp_sync_one_place shfl_skipped shfl_by_all shfl_against_bar shfl_before_bar; do
  run sanitizer_classes synccheck scenario_$s
done
for s in reduction_without_barrier reduction_with_barrier overwrite_without_barrier overwrite_after_barrier \
  one_word_many_writers one_word_one_writer warp_reduction_without_syncwarp warp_reduction_with_syncwarp \
  block_37_skips_its_barrier no_block_skips_its_barrier counter_reset_without_barrier \
  counter_reset_before_barrier shared_sum_plain shared_sum_atomic clamped_rows_own_values \
  clamped_rows_one_value; do
  run shared_races racecheck scenario_$s
done
for s in read_unwritten read_memset read_past_copy read_whole_copy copy_back_half copy_back_whole pool_reuse pool_reuse_memset; do
  run sanitizer_classes initcheck scenario_$s
done
for s in kernel_kernel kernel_kernel_ordered_by_an_event copy_kernel copy_kernel_ordered_by_an_event \
  memset_kernel memset_kernel_ordered_by_an_event one_block_of_many one_block_of_many_just_past \
  halves_overlapping disjoint_halves graph_without_edge graph_with_edge host_copy_of_managed \
  host_copy_of_managed_after_a_synchronize store_against_atomics atomics_on_two_streams \
  copy_out_to_pinned_then_write copy_out_to_pageable_then_write host_reads_managed \
  host_reads_managed_after_a_synchronize host_writes_managed_read_by_a_kernel \
  host_writes_managed_read_by_a_kernel_after_a_synchronize host_overwrites_pinned_source \
  host_overwrites_pinned_source_after_a_synchronize host_reads_mapped_memory \
  host_reads_mapped_memory_after_a_synchronize host_reads_host_pool_memory \
  host_reads_host_pool_memory_after_a_synchronize; do
  run races memcheck-races scenario_$s
done
