#!/usr/bin/env bash
# Runs the collected binaries (scripts/gpu-collect.sh) on a machine with a CUDA GPU.
# Usage: .gpu/gpu-run.sh [tests|rules|tour|sanitizer|sanitizer-api|soak|bench|perf|serving|libs|candle|cudarc|lists]...   (default: tests tour)
set -uo pipefail
cd "$(dirname "$0")/.."

# The launcher lists. Every test binary gpu-collect.sh copies, .gpu/test-<kind>-<name> (and the
# outside crate's .gpu/test-cudarc_app), is named here, without its `.gpu/test-`, in exactly one
# list; the `lists` step checks it, and gpu-collect.sh runs that step.
# Suites of GPU tests: their ignored tests need a GPU, and run here (--include-ignored).
gpu_tests=(
  test-gpu test-gpu_batch test-gpu_device test-gpu_graph_nodes test-gpu_graph_update
  test-gpu_host test-gpu_kernels test-gpu_launch test-gpu_managed test-gpu_nvrtc
  test-gpu_process test-gpu_vmm test-review22 test-review23 test-review23b test-review_pool_markers
  test-review_capture_calls
  test-soak cudarc_app
)
# Simulator-only: their ignored tests are children that their own (not ignored) tests start on
# the simulator, or a probe run by hand (cudarc_coverage's); they are not GPU tests.
simulator_only=(
  test-batch test-checks test-cudarc_coverage test-fidelity test-interpreter test-kernels
  test-memory_model test-selftest test-tensor_maps test-vmm
  test-capabilities test-cuda_attacks test-cuda_conditional_rules test-cuda_rules
  test-cuda_soundness test-fault_sweep test-fd_passing test-fuzz_safe_api test-interop
  test-review24 test-review25 test-review26 test-review27 test-review28 test-review29 test-review30 test-races test-sanitizer_classes test-shared_races test-review_views
  test-review_recycled_events test-review_foreign_drops test-review_deferred_frees test-review_slice_wrap
  test-libraries test-cuda_runtime
)
# No ignored tests at all (the `lists` step checks that): tests that run as they are.
plain=(
  lib-cuda_sim bin-cuda_sim lib-cuda_sim_ptx lib-handles_bench bin-gpu_bench bin-serving bin-sim_count
  lib-handles_core lib-handles_cuda lib-handles_cuda_libs lib-handles_tests
  test-argument_checks test-ownership test-cache test-cuda_without_driver test-exit test-model
  test-release_unwind test-runtime test-soundness test-stress
  test-loom_access_gate test-loom_cache test-loom_completion test-loom_contexts_used
  test-loom_capture_sync test-loom_counted test-loom_fixed_reach test-loom_notifier_count test-loom_record_count test-loom_registry test-loom_stream_order test-loom_spin_credit test-loom_stream_generation test-loom_stream_progress test-loom_waiter_lists test-registry_adversarial
  test-registry_switching test-tracing
  test-ptx_alu test-ptx_handwritten test-ptx_kernels test-ptx_more test-ptx_review
  test-ptx_review_faults test-ptx_spread test-ptx_narrow test-ptx_matrix
)
# The runner's tests build a crate with cargo, which the GPU machine does not have (the crate's
# own test binary is .gpu/test-cudarc_app): skipped.
needs_cargo=(test-runner)

# The lists a collected binary (.gpu/test-NAME, given as NAME) is in, one a line.
lists_of() {
  local list entry
  for list in gpu_tests simulator_only plain needs_cargo; do
    local -n entries=$list
    for entry in "${entries[@]}"; do
      if [ "$entry" = "$1" ]; then echo "$list"; fi
    done
  done
}

logs=${OUT:-gpu-logs}
# The simulated driver copied by gpu-collect.sh. Only the `on_the_simulator` launchers and the
# fault sweep load it, in their child processes; every other test uses the real driver.
export CUDA_SIM_LIBRARY_DIR="$PWD/.gpu/cuda-sim"
mkdir -p "$logs"
status=0
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests tour)
for step in "${steps[@]}"; do
  case $step in
    tests)
      for test in .gpu/test-*; do
        echo "== $test" | tee -a "$logs/tests.log"
        # The launcher lists above say how each binary runs.
        case $(lists_of "${test#.gpu/test-}") in
          needs_cargo) echo "skipped: needs cargo" | tee -a "$logs/tests.log"; continue ;;
          gpu_tests) ignored=(--include-ignored) ;;
          simulator_only | plain) ignored=() ;;
          *)
            echo "$test is not in exactly one launcher list of gpu-run.sh (see its lists step)" | tee -a "$logs/tests.log"
            status=1
            continue
            ;;
        esac
        "$test" ${ignored[@]+"${ignored[@]}"} --skip two_gpus --skip soak --test-threads=1 --nocapture >>"$logs/tests.log" 2>&1 || status=1
        grep -E "^test result|FAILED|panicked" "$logs/tests.log" | tail -n 3
      done
      ;;
    rules)
      # The reproducers of the layers issue's defects, as plain programs on the real driver
      # (one GPU: the two-device one is skipped), three times over for the racy ones.
      for round in 1 2 3; do
        echo "== cuda_rules scenarios on the GPU, round $round" | tee -a "$logs/rules.log"
        HANDLES_SIM_SCENARIO=gpu .gpu/test-test-cuda_rules --include-ignored scenario_ --skip two_gpus \
          --test-threads=1 --nocapture >>"$logs/rules.log" 2>&1 || status=1
        grep -E "^test result|FAILED|panicked" "$logs/rules.log" | tail -n 3
      done
      # The third review's reproducers (review24.rs) as plain programs on the real driver; F9
      # and N6 need two devices. F6's gates are host functions, which driver 580 runs one at a
      # time: on the GPU the gate itself holds every later host function back, so F6's program
      # shows the fix only on the simulator (seen on the H200, 2026-12-04).
      echo "== review24 scenarios on the GPU" | tee -a "$logs/rules.log"
      HANDLES_SIM_SCENARIO=gpu .gpu/test-test-review24 --include-ignored scenario_ --skip f9 --skip n6 --skip f6 \
        --test-threads=1 --nocapture >>"$logs/rules.log" 2>&1 || status=1
      grep -E "^test result|FAILED|panicked" "$logs/rules.log" | tail -n 3
      # The host-view review's programs (review_views.rs) on the real driver; a11 and a15 need
      # two devices, a14 injects driver failures (simulator only), and the control program is
      # a deliberate raw race, a verdict only the simulator gives.
      echo "== review_views scenarios on the GPU" | tee -a "$logs/rules.log"
      HANDLES_SIM_SCENARIO=gpu .gpu/test-test-review_views --include-ignored scenario_ --skip a11 --skip a15 \
        --skip a14 --skip control --test-threads=1 --nocapture >>"$logs/rules.log" 2>&1 || status=1
      grep -E "^test result|FAILED|panicked" "$logs/rules.log" | tail -n 3
      # The waiter and reach reviews' programs (review25.rs, review26.rs) on the real driver:
      # those of one device (a6, a7 and a7c use a second; every review26 program but r7 does).
      echo "== review25 and review26 scenarios on the GPU" | tee -a "$logs/rules.log"
      HANDLES_SIM_SCENARIO=gpu .gpu/test-test-review25 --include-ignored scenario_ --skip scenario_a6_ \
        --skip scenario_a7_ --skip scenario_a7c --test-threads=1 --nocapture >>"$logs/rules.log" 2>&1 || status=1
      grep -E "^test result|FAILED|panicked" "$logs/rules.log" | tail -n 3
      HANDLES_SIM_SCENARIO=gpu .gpu/test-test-review26 --include-ignored scenario_r7 \
        --test-threads=1 --nocapture >>"$logs/rules.log" 2>&1 || status=1
      grep -E "^test result|FAILED|panicked" "$logs/rules.log" | tail -n 3
      # The notifier count under a panicking waker (review27.rs) on the real driver.
      echo "== review27 scenarios on the GPU" | tee -a "$logs/rules.log"
      HANDLES_SIM_SCENARIO=gpu .gpu/test-test-review27 --include-ignored scenario_ \
        --test-threads=1 --nocapture >>"$logs/rules.log" 2>&1 || status=1
      grep -E "^test result|FAILED|panicked" "$logs/rules.log" | tail -n 3
      ;;
    candle)
      # candle-core 0.11.1's CUDA tests (the `_gpu`/`cuda` ones of its nine binaries), built by
      # scripts/candle.sh with nvcc 13.0 and packed by gpu-collect.sh, on the real driver. Built
      # against the simulator, which is one library for all of CUDA, they name only libcuda.so:
      # NVIDIA's cuBLAS, cuBLASLt, cuRAND and runtime (Python packages here) are preloaded.
      if [ ! -f .gpu/candle.tar.xz ]; then
        echo "no .gpu/candle.tar.xz: run scripts/candle.sh --no-run before scripts/gpu-collect.sh"
        status=1
        continue
      fi
      candle_dir=$(mktemp -d)
      python3 -c 'import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
        .gpu/candle.tar.xz "$candle_dir"
      preload=
      for lib in libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudart.so.13; do
        found=$(python3 -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' | xargs -I{} find {} -name "$lib" | head -n 1)
        [ -n "$found" ] || { echo "candle: $lib not found among the nvidia Python packages"; status=1; }
        preload=${preload:+$preload:}$found
      done
      driver=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
      ln -sf "$driver" "$candle_dir/libcuda.so"
      for binary in candle_core conv_tests pool_tests layout_tests tensor_tests grad_tests quantized_tests \
        matmul_tests bilinear_tests; do
        echo "== candle $binary" | tee -a "$logs/candle.log"
        (cd "$candle_dir" && LD_LIBRARY_PATH="$candle_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$preload" \
          timeout 300 "./$binary" _gpu cuda --test-threads=4) >>"$logs/candle.log" 2>&1 || status=1
        grep -E "^test result" "$logs/candle.log" | tail -n 1
      done
      rm -rf "$candle_dir"
      ;;
    cudarc)
      # cudarc's own lib tests (scripts/cudarc-tests.sh builds them; gpu-collect.sh copies the
      # binary) on the real driver, every test, for the list kept beside the simulator's.
      if [ ! -x .gpu/cudarc-lib-tests ]; then
        echo "no .gpu/cudarc-lib-tests: run scripts/cudarc-tests.sh before scripts/gpu-collect.sh"
        status=1
        continue
      fi
      # NVRTC comes with a Python package here: its directory goes on the loader path.
      nvrtc=$(python3 -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' | xargs -I{} find {} -name 'libnvrtc.so*' | head -n 1)
      LD_LIBRARY_PATH="$(dirname "${nvrtc:-/}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        .gpu/cudarc-lib-tests --test-threads=1 >"$logs/cudarc.log" 2>&1 || status=1
      grep -E "^test result|FAILED|failed" "$logs/cudarc.log" | tail -n 5
      ;;
    fidelity)
      # The simulator's memory-model scenarios on the real driver: what they read back there is
      # what the simulator must read back too.
      for scenario in scenario_random_pool_sizes_read_back scenario_sync_neighbours_keep_their_bytes; do
        echo "== $scenario on the GPU" | tee -a "$logs/fidelity.log"
        CUDA_SIM_SCENARIO_CHILD="$scenario" .gpu/test-test-memory_model "$scenario" --exact \
          --include-ignored --nocapture >>"$logs/fidelity.log" 2>&1 || status=1
        grep -E "^test result|FAILED|panicked" "$logs/fidelity.log" | tail -n 2
      done
      ;;
    tour)
      # handles-cuda's examples: the tour, then IPC, the inference pipeline, the memory server,
      # and why handles (its cudarc programs misuse memory on purpose, each in a child process).
      for example in tour ipc pipeline memory_server why_handles; do
        ".gpu/$example" 2>&1 | tee "$logs/$example.log" || status=1
      done
      ;;
    sanitizer)
      # memcheck (with leak checking) over the whole GPU suite (every binary of `gpu_tests`),
      # the tour and the examples. API errors are not reported here: the suites provoke them on
      # purpose (bad sizes, bad IPC payloads); `sanitizer-api` below runs the tour and the
      # examples with compute-sanitizer's default options, API errors included. The exit test
      # is skipped: it leaves memory allocated at exit by design. So are the tests that destroy a
      # stream held back by a host function (or end the thread whose per-thread stream is held)
      # and then check that a pool waits for it: under the tool that destruction waits for the
      # held work, so the hold ends by the gate's 20 s limit before the pool is asked (RELIABILITY).
      held=(--skip a_pool_does_not_keep_a_borrowed_stream_its_memory_was_freed_on
        --skip a_free_moved_to_a_held_per_thread_stream_holds_the_pool
        --skip a_legacy_free_behind_a_held_blocking_stream_holds_the_pool
        --skip per_thread_frees_of_several_threads_all_hold_the_pool)
      for name in "${gpu_tests[@]}"; do
        test=.gpu/test-$name
        [ -x "$test" ] || continue
        echo "== compute-sanitizer $test" | tee -a "$logs/sanitizer.log"
        HANDLES_SOAK_SECS=10 compute-sanitizer --tool memcheck --leak-check full --report-api-errors no \
          --target-processes all "$test" --include-ignored --skip two_gpus --skip process_exit --skip on_the_simulator \
          "${held[@]}" --test-threads=1 >>"$logs/sanitizer.log" 2>&1 || status=1
        grep -E "ERROR SUMMARY|LEAK SUMMARY|test result" "$logs/sanitizer.log" | tail -n 3
      done
      for example in tour ipc pipeline memory_server; do
        echo "== compute-sanitizer .gpu/$example" | tee -a "$logs/sanitizer.log"
        compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --target-processes all \
          ".gpu/$example" >>"$logs/sanitizer.log" 2>&1 || status=1
        grep -E "ERROR SUMMARY|LEAK SUMMARY|done$" "$logs/sanitizer.log" | tail -n 3
      done
      ;;
    sanitizer-api)
      # A user's program under compute-sanitizer's default options (API errors reported): the
      # tour and the examples must show 0 errors of any kind. The GPU suite runs the same way;
      # its tests provoke some API errors on purpose (bad input handed to the driver), so its
      # errors are listed by API call, to be told apart from any this crate makes itself.
      for example in tour ipc pipeline memory_server why_handles; do
        [ -x ".gpu/$example" ] || continue
        # why_handles runs cudarc's side of each comparison in a child process that misuses
        # memory on purpose (reads after a free, swapped arguments): only its own process, the
        # handles-cuda side, is checked.
        processes=all
        [ "$example" = why_handles ] && processes=application-only
        echo "== compute-sanitizer (default options, --target-processes $processes) .gpu/$example" | tee -a "$logs/sanitizer_api.log"
        compute-sanitizer --target-processes "$processes" ".gpu/$example" >>"$logs/sanitizer_api.log" 2>&1 || status=1
        grep -E "ERROR SUMMARY|done$" "$logs/sanitizer_api.log" | tail -n 2
      done
      for name in "${gpu_tests[@]}"; do
        test=.gpu/test-$name
        [ -x "$test" ] || continue
        echo "== compute-sanitizer (default options) $test" >>"$logs/sanitizer_api_suite.log"
        HANDLES_SOAK_SECS=5 compute-sanitizer --target-processes all "$test" --include-ignored --skip two_gpus \
          --skip process_exit --skip on_the_simulator --test-threads=1 >>"$logs/sanitizer_api_suite.log" 2>&1
      done
      echo "== API errors in the GPU suite, by call:"
      grep -oE "on CUDA API call to [A-Za-z0-9_]+" "$logs/sanitizer_api_suite.log" | sort | uniq -c
      grep -E "^== |ERROR SUMMARY" "$logs/sanitizer_api_suite.log" | paste - - | awk '$NF != "errors" || $(NF-1) != 0' | grep -v " 0 errors" || true
      ;;
    libs)
      # The downstream crate's examples: a cuBLAS GEMM, then an NCCL all-reduce over every GPU
      # (it says so and exits 0 on a machine with one), also under compute-sanitizer. NCCL may
      # come only with a Python package (nvidia.nccl), whose lib directory has libnccl.so.2
      # but no libnccl.so: a private directory with that link goes first on the loader path.
      nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
      if [ -n "$nccl_dir" ] && [ -e "$nccl_dir/libnccl.so.2" ]; then
        link_dir=$(mktemp -d)
        ln -s "$nccl_dir/libnccl.so.2" "$link_dir/libnccl.so"
        export LD_LIBRARY_PATH="$link_dir:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      fi
      .gpu/gemm 2>&1 | tee "$logs/gemm.log" || status=1
      .gpu/all_reduce 2>&1 | tee "$logs/all_reduce.log" || status=1
      for example in gemm all_reduce; do
        echo "== compute-sanitizer .gpu/$example" | tee -a "$logs/libs_sanitizer.log"
        compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --target-processes all \
          ".gpu/$example" >>"$logs/libs_sanitizer.log" 2>&1 || status=1
        grep -E "ERROR SUMMARY|LEAK SUMMARY|^done" "$logs/libs_sanitizer.log" | tail -n 3
      done
      ;;
    soak)
      .gpu/test-test-soak --include-ignored --nocapture 2>&1 | tee "$logs/soak.log" || status=1
      ;;
    bench)
      .gpu/gpu_bench 2>&1 | tee "$logs/bench.log" || status=1
      # A gpu_bench built from an earlier commit, when one was put here, for before/after
      # figures from the same machine and boot, run alternately three times.
      if [ -x .gpu/gpu_bench_before ]; then
        for round in 1 2 3; do
          .gpu/gpu_bench_before 2>&1 | tee "$logs/bench_before_$round.log" || status=1
          .gpu/gpu_bench 2>&1 | tee "$logs/bench_after_$round.log" || status=1
        done
      fi
      python3 .gpu/cuda_core_bench.py 2>&1 | tee "$logs/cuda_core.log" || status=1
      ;;
    perf)
      # The evidence of the current table, in a device call of its own (about 8 minutes):
      # `gpu_bench core` PERF_RUNS times (default 5; each alternates raw, ours and cudarc batch by
      # batch, and is cut at 62 s as the table's runs were, after its fresh-thread event rows),
      # the completion latencies (`gpu_bench latency`) and the serving benchmark. Back here,
      # `scripts/bench-table.py core*.log` prints the table's medians and spreads. A run that
      # printed no measured row (no GPU, a crash) fails the step.
      measured() { grep -E '^\| [^-]' "$1" | grep -vc '| variant |' || true; }
      for run in $(seq 1 "${PERF_RUNS:-5}"); do
        timeout 62 .gpu/gpu_bench core >"$logs/core$run.log" 2>&1
        rows=$(measured "$logs/core$run.log")
        echo "core $run: $rows measured rows"
        [ "$rows" -gt 0 ] || status=1
      done
      timeout 60 .gpu/gpu_bench latency >"$logs/latency.log" 2>&1 || status=1
      [ "$(measured "$logs/latency.log")" -gt 0 ] || status=1
      grep -E 'latency' "$logs/latency.log" | tail -n 4
      timeout 150 .gpu/serving >"$logs/serving.log" 2>&1 || status=1
      [ "$(measured "$logs/serving.log")" -gt 0 ] || status=1
      grep -E '^\|' "$logs/serving.log" | tail -n 12
      ;;
    serving)
      # The serving benchmark: a request loop (pool allocations, copies through pinned memory,
      # a graph replay, a recycled event) on raw calls, cudarc and handles-cuda, at 1 and 16
      # worker threads; a Markdown table of requests/s and p50/p99 latency (BENCHMARKS.md).
      .gpu/serving 2>&1 | tee "$logs/serving.log" || status=1
      ;;
    lists)
      # Every collected test binary is in exactly one launcher list, and a binary of the plain
      # list has no ignored test (one that has them needs gpu_tests or simulator_only).
      shopt -s nullglob
      binaries=(.gpu/test-*)
      shopt -u nullglob
      if [ ${#binaries[@]} -eq 0 ]; then
        echo "no .gpu/test-* binaries: run scripts/gpu-collect.sh first"
        status=1
      fi
      for test in "${binaries[@]}"; do
        name=${test#.gpu/test-}
        found=$(lists_of "$name" | paste -sd' ' -)
        case $found in
          gpu_tests | simulator_only | needs_cargo) ;;
          plain)
            if "$test" --list --ignored 2>/dev/null | grep -q ': test$'; then
              echo "$test has ignored tests but is in the plain list: move it to gpu_tests or simulator_only"
              status=1
            fi
            ;;
          '') echo "$test is in no launcher list of scripts/gpu-run.sh: add $name to one"; status=1 ;;
          *) echo "$test is in several launcher lists of scripts/gpu-run.sh ($found): keep one"; status=1 ;;
        esac
      done
      [ $status -eq 0 ] && echo "launcher lists: ${#binaries[@]} test binaries, each in one list"
      ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
