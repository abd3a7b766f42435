#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on the GPU machine (the device tool), in the repository root, what needs a GPU: one mode per
# 10-minute command. Every step has a time limit and the mode a deadline; a step that fails or
# runs out of time is reported and the next one still runs. The end of the output is a summary
# (the device tool returns only the last 12,000 characters); everything else is under OUT, in at
# most 8 files, as the tool brings back. docs/gpu-checklist.md says how to call it and what to
# do with the results. Prepare with scripts/gpu-prepare.sh on the development machine.
#
#   scripts/gpu-run.sh tests OUT [options]   4 to 9.5 minutes on an H100 or H200 machine
#     configure (the gpu preset's settings, -lineinfo, Catch2 from .deps/), build the gpu tests,
#     ctest -L gpu, the driver probe (driver_probe against driver_probe_sim, then the risky
#     questions of driver_probe --risky in a separate process), compute-sanitizer (memcheck on
#     the kernels and on the API tests, racecheck and synccheck on the kernels), then the
#     simulated-device tests if time is left. Writes gpu-tests-summary.txt, gpu-tests-junit.xml,
#     sim-tests-junit.xml, driver-probe.txt and gpu-tests-logs.tar.gz, the summary and the logs
#     again after every step, so that a command stopped at its limit still returns them.
#   scripts/gpu-run.sh bench OUT [options]   about 9.5 minutes
#     benchmarks/run_gpu.sh --out OUT: <date>-<gpu>.{json,md,svg,png} and -logs.tar.gz.
#   scripts/gpu-run.sh all OUT [options]     tests, then bench (more than one 10-minute command)
#
#   --no-gpu          rehearse without a GPU: the gpu tests report Skipped, the sanitizers and the
#                     GPU half of the probe are left out, bench runs run_gpu.sh --sim --quick
#   --deadline S      seconds for each mode (default 560: the tool allows 600 per command)
#   --device-left S   the device time left (the tool's budget_left_s, read just before the call):
#                     the deadline is cut to fit it, less 60 s for the transfers and the give-back,
#                     and less 120 s more on a fresh machine, whose start the lease already paid
#   --gpu-test-timeout S  seconds ctest gives each gpu test (default 90; CMake's default is 600)
#   --build-dir DIR   build tree for the tests (default build/gpu-run; bench uses build/bench)
#   --catch2-dir DIR  Catch2's CMake package (default: the one gpu-prepare.sh put under .deps/)
#   --jobs N          parallel build jobs (default: all processors)
#   --cmake-arg ARG   one more argument for the tests' configure step (repeatable)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode=""
out=""
no_gpu=0
deadline_s=560
device_left_s=""
gpu_test_timeout=90
build=""
catch2_dir=""
jobs="$(nproc 2>/dev/null || echo 4)"
extra_cmake=()

die() {
  echo "gpu-run.sh: $*" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --no-gpu) no_gpu=1; shift ;;
    --deadline) deadline_s="${2:?--deadline needs seconds}"; shift 2 ;;
    --device-left) device_left_s="${2:?--device-left needs seconds}"; shift 2 ;;
    --gpu-test-timeout) gpu_test_timeout="${2:?--gpu-test-timeout needs seconds}"; shift 2 ;;
    --build-dir) build="${2:?--build-dir needs a directory}"; shift 2 ;;
    --catch2-dir) catch2_dir="${2:?--catch2-dir needs a directory}"; shift 2 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --cmake-arg) extra_cmake+=("${2:?--cmake-arg needs an argument}"); shift 2 ;;
    -h | --help) sed -n '3,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      if [ -z "$mode" ]; then mode="$1"
      elif [ -z "$out" ]; then out="$1"
      else die "one mode and one output directory (see --help)"; fi
      shift ;;
  esac
done
case "$mode" in
  tests | bench | all) ;;
  *) die "the first argument is the mode: tests, bench or all (see --help)" ;;
esac
[ -n "$out" ] || die "give an output directory (on the device machine: \"\$OUT\")"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
[ -n "$build" ] || build="$root/build/gpu-run"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
for n in "$deadline_s" "$gpu_test_timeout" ${device_left_s:+"$device_left_s"}; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "seconds must be a whole number, not '$n'"
done

# The device time left decides the deadline. A machine that ran this script before (the marker in
# the build tree survives between calls while it stays warm) cost no start; a fresh one did.
warm_marker="$build/.gpu-run-machine"
if [ -n "$device_left_s" ]; then
  fits=$((device_left_s - 60))
  [ -f "$warm_marker" ] || fits=$((fits - 120))
  if [ "$fits" -lt "$deadline_s" ]; then
    deadline_s="$fits"
    echo "-- deadline cut to ${deadline_s}s: ${device_left_s}s of device time left"
  fi
  [ "$deadline_s" -ge 60 ] || die "too little device time left (${device_left_s}s) for a run"
fi
mkdir -p "$build" && date -u +%Y-%m-%dT%H:%M:%SZ >"$warm_marker"

cd "$root"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if [ "$no_gpu" = 0 ] && ! { command -v nvidia-smi >/dev/null 2>&1 && grep -q '^GPU ' <<<"$(nvidia-smi -L 2>/dev/null)"; }; then
  die "no GPU found (nvidia-smi -L lists none); --no-gpu rehearses without one"
fi

# The commit measured: .git does not travel to the device machine, gpu-prepare.sh wrote it down.
commit=""
if git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
  commit="$(git -C "$root" rev-parse HEAD)"
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
elif [ -f "$root/.deps/commit.txt" ]; then
  commit="$(head -n 1 "$root/.deps/commit.txt")"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/cuscope-gpu-run.XXXXXX")"
logs="$work/logs"
mkdir -p "$logs"
steps="$work/steps.tsv"
: >"$steps"
failed=0
start_s=$(date +%s)
deadline_at=$((start_s + deadline_s))
reserve_s=20 # kept for the summary and the archive

# shellcheck source=steps.sh
source "$root/scripts/steps.sh"

# stop_time LIMIT: the clock time (HH:MM:SS) at which ctest stops, a little before the step's own
# limit, so that it still writes its report when tests run long.
stop_time() {
  local limit="$1" now remaining
  now=$(date +%s)
  remaining=$((deadline_at - reserve_s - now))
  [ "$limit" -le "$remaining" ] || limit="$remaining"
  date -d "@$((now + limit - 15))" +%H:%M:%S
}

note() { # note NAME STATUS WHY: a step that does not run here
  printf '%s\t%s\t\t%s\n' "$1" "$2" "$3" >>"$steps"
  echo "-- $1: $2, $3"
}

find_catch2() {
  if [ -n "$catch2_dir" ]; then
    [ -f "$catch2_dir/Catch2Config.cmake" ] || die "no Catch2Config.cmake in $catch2_dir"
    echo "$catch2_dir"
    return 0
  fi
  local found
  found="$(find "$root/.deps" -name Catch2Config.cmake -print -quit 2>/dev/null || true)"
  [ -n "$found" ] && dirname "$found"
  return 0
}

# Tests ---------------------------------------------------------------------------------------------
run_tests() {
  local cat2
  cat2="$(find_catch2)"
  {
    echo "commit: ${commit:-unknown}"
    echo "catch2: ${cat2:-none under .deps, the system one if any}"
    uname -a
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L &&
      nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem \
        --format=csv
    nvcc --version
    cmake --version | head -n 1
    c++ --version | head -n 1
    command -v ninja >/dev/null 2>&1 && echo "ninja $(ninja --version)"
    echo "compute-sanitizer: ${sanitizer:-not found}"
    [ -z "$sanitizer" ] || "$sanitizer" --version | grep -i version
    python3 --version
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 |
      tail -n 1
    python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -n 1
  } >"$logs/machine.log" 2>&1 || true

  # -lineinfo: compute-sanitizer's reports name the source line of a kernel's access.
  local args=(-S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUSCOPE_REAL_RUNTIME=ON
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCUSCOPE_WARNINGS_AS_ERRORS=OFF -DCUSCOPE_SANITIZE=OFF
    -DCUSCOPE_TEST_PTDS=OFF -DCUSCOPE_BUILD_BENCHMARKS=OFF -DCUSCOPE_FORMAT_CHECK=OFF
    -DCMAKE_CUDA_FLAGS=-lineinfo "-DCUSCOPE_GPU_TEST_TIMEOUT=$gpu_test_timeout")
  [ -z "$cat2" ] || args+=("-DCatch2_DIR=$cat2")
  if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then args+=(-G Ninja); fi
  step configure 150 cmake "${args[@]}" "${extra_cmake[@]}"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    note build skipped "no build tree (configure failed)"
    return 0
  fi
  local keep_going=(-k)
  grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$build/CMakeCache.txt" && keep_going=(-k 0)

  # What needs the GPU first: every program a gpu test runs (the examples run as tests too), the
  # example the sanitizers run, and the probe.
  step build-gpu 300 cmake --build "$build" -j "$jobs" --target cuscope_gpu_tests training_loop \
    driver_probe driver_probe_sim -- "${keep_going[@]}"
  # Verbose: the log keeps every test's output, the warnings of skipped test cases too (the gpu
  # tests run one at a time, so their outputs do not interleave).
  step ctest-gpu 240 ctest --test-dir "$build" -L gpu -j "$jobs" --verbose \
    --stop-time "$(stop_time 240)" --output-junit "$out/gpu-tests-junit.xml"

  # The driver's answers next to the simulation's (docs/gpu-checklist.md, "The driver probe").
  # The risky questions (a double free, say) run last, in a process of their own, so that an
  # abort there costs none of the other answers.
  local probe_gpu="$build/tests/driver_probe" probe_sim="$build/tests/driver_probe_sim"
  step probe-sim 30 "$probe_sim"
  step probe-sim-risky 30 "$probe_sim" --risky
  if [ "$no_gpu" = 1 ]; then
    note probe-gpu skipped "--no-gpu"
  else
    step probe-gpu 60 "$probe_gpu"
    step probe-gpu-risky 30 "$probe_gpu" --risky
  fi
  write_probe_comparison

  run_sanitizers

  # The simulated-device tests, if time is left: CI runs them too, so they come last.
  step build-sim 240 cmake --build "$build" -j "$jobs" -- "${keep_going[@]}"
  step ctest-sim 120 ctest --test-dir "$build" -L sim -LE 'consumer|packaging|bench' -j "$jobs" \
    --output-on-failure --stop-time "$(stop_time 120)" --output-junit "$out/sim-tests-junit.xml"
}

write_probe_comparison() {
  {
    compare_probe "$logs/probe-gpu.log" "$logs/probe-sim.log" "driver_probe"
    compare_probe "$logs/probe-gpu-risky.log" "$logs/probe-sim-risky.log" "driver_probe --risky"
  } >"$out/driver-probe.txt" 2>&1 || true
}

# compare_probe GPU SIM WHAT: one line per key, the two answers, and whether they differ. A GPU run
# that stopped early (it crashed, or ran out of time) is compared as far as it went and marked
# incomplete: the keys it never printed are listed as unanswered.
compare_probe() {
  bash "$root/scripts/compare_probe.sh" "$1" "$2" "$3"
}

run_sanitizers() {
  if [ "$no_gpu" = 1 ]; then
    note compute-sanitizer skipped "--no-gpu"
    return 0
  fi
  if [ -z "$sanitizer" ]; then
    note compute-sanitizer skipped "compute-sanitizer not found"
    return 0
  fi
  # --error-exitcode tells a finding (86) from a failing test; the API tests provoke errors on
  # purpose, so for them API errors are not reported.
  local cs=("$sanitizer" --error-exitcode 86 --print-limit 20)
  local t="$build/tests" ex="$build/examples"
  # A test case with few launches of the kernel that reduces in shared memory.
  local few="batch: a session around a loop with kernels sees the buffers returned"
  step memcheck-training_loop 120 "${cs[@]}" --tool memcheck --leak-check full "$ex/training_loop"
  if grep -q 'Device not supported\|not supported on this' "$logs/memcheck-training_loop.log"; then
    note compute-sanitizer skipped "the tool does not support this device (a gVisor machine?)"
    return 0
  fi
  step memcheck-batch_kernels 150 "${cs[@]}" --tool memcheck --leak-check full \
    "$t/batch_kernels_test_gpu"
  # -w NoTests: Catch2 fails, rather than passing, when the name selects no test case.
  step racecheck-batch_kernels 60 "${cs[@]}" --tool racecheck "$t/batch_kernels_test_gpu" \
    -w NoTests "$few"
  step synccheck-batch_kernels 60 "${cs[@]}" --tool synccheck "$t/batch_kernels_test_gpu" \
    -w NoTests "$few"
  step memcheck-thrust 90 "${cs[@]}" --tool memcheck --leak-check full "$t/thrust_test_gpu"
  local api
  for api in session memory_pool device_buffer sim/sim_memory sim/sim_pools; do
    step "memcheck-${api#sim/}" 60 "${cs[@]}" --tool memcheck --leak-check full \
      --report-api-errors no "$t/${api}_test_gpu"
  done
  # The most launches: last.
  step racecheck-training_loop 120 "${cs[@]}" --tool racecheck "$ex/training_loop"
  step synccheck-training_loop 90 "${cs[@]}" --tool synccheck "$ex/training_loop"
}

# Benchmarks ----------------------------------------------------------------------------------------
run_bench() {
  local args=(--out "$out" --deadline "$deadline_s")
  [ -z "$commit" ] || args+=(--commit "$commit")
  [ "$no_gpu" = 0 ] || args+=(--sim --quick --build-dir "$build-bench-sim")
  echo "-- benchmarks/run_gpu.sh ${args[*]}"
  set +e
  bash "$root/benchmarks/run_gpu.sh" "${args[@]}"
  local rc=$?
  set -e
  [ "$rc" = 0 ] || failed=1
  return 0
}

# Summary ---------------------------------------------------------------------------------------------
# summarize [STEP]: with STEP, the run goes on and this is written after STEP.
# shellcheck disable=SC2317  # invoked by the EXIT trap and after_step
summarize() {
  local f
  echo "== gpu-run.sh $mode: commit ${commit:-unknown}, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if [ -n "${1:-}" ]; then
    echo "== WRITTEN WHILE THE RUN WENT ON, after step $1: if this is the last version that came"
    echo "   back, the run stopped there (see gpu-tests-logs.tar.gz for the logs so far)"
  fi
  grep -m1 '^GPU ' "$logs/machine.log" 2>/dev/null || true
  grep -E '^(Cuda compilation tools|compute-sanitizer|.*[Vv]ersion [0-9]|Python|torch|cupy)' \
    "$logs/machine.log" 2>/dev/null || true
  echo "== steps (name, status, seconds, detail)"
  column -t -s $'\t' "$steps" 2>/dev/null || cat "$steps"
  for f in ctest-gpu ctest-sim; do
    [ -f "$logs/$f.log" ] || continue
    echo "== $f"
    grep -E 'tests passed|tests failed out of' "$logs/$f.log" || true
    sed -n '/^The following tests FAILED:/,/^Errors while running/p' "$logs/$f.log" | head -n 40 || true
    sed -n '/^The following tests did not run:/,/^$/p' "$logs/$f.log" | head -n 30 || true
    # Test cases that a GPU machine with one device skips, and the failing assertions.
    grep -hoE 'skipped: needs.*|[^ ]+: FAILED:$' "$logs/$f.log" | sort | uniq -c | head -n 30 || true
  done
  for f in "$logs"/memcheck-*.log "$logs"/racecheck-*.log "$logs"/synccheck-*.log; do
    [ -f "$f" ] || continue
    printf '== %s: %s\n' "$(basename "$f" .log)" \
      "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$f" | tr '\n' ' ' || true)"
  done
  if [ -s "$out/driver-probe.txt" ]; then
    echo "== driver probe (driver-probe.txt): answers that differ from the simulation's"
    grep -E 'DIFFERENT|^driver probe' "$out/driver-probe.txt" | head -n 40 || true
  fi
  echo "== the end of failed steps' logs"
  awk -F'\t' '$2 == "failed" || $2 == "timeout" { print $1 }' "$steps" | while read -r f; do
    echo "-- $f.log"
    tail -n 15 "$logs/$f.log" 2>/dev/null | cut -c1-200
  done
}

# The summary and the logs so far, after every step of the tests (in bench mode run_gpu.sh writes
# its own).
# shellcheck disable=SC2317  # invoked by steps.sh
after_step() {
  [ "$mode" != bench ] || return 0
  summarize "$(tail -n 1 "$steps" | cut -f1)" >"$out/gpu-tests-summary.txt" 2>&1
  cp "$steps" "$logs/steps.tsv"
  tar -czf "$out/gpu-tests-logs.tar.gz" -C "$work" logs 2>/dev/null
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
finish() {
  local rc=$?
  set +e
  trap - EXIT
  if [ "$mode" != bench ]; then
    summarize >"$out/gpu-tests-summary.txt" 2>&1
    cp "$steps" "$logs/steps.tsv"
    tar -czf "$out/gpu-tests-logs.tar.gz" -C "$work" logs 2>/dev/null
    echo
    # The last 12,000 characters are what the device tool returns.
    tail -c 9000 "$out/gpu-tests-summary.txt"
    echo "files in $out:"
    find "$out" -maxdepth 1 -type f -printf '  %10s  %f\n' | sort -k2
  fi
  rm -rf "$work"
  [ "$failed" = 0 ] || rc=1
  exit "$rc"
}
trap finish EXIT

sanitizer=""
for candidate in compute-sanitizer /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  if command -v "$candidate" >/dev/null 2>&1; then
    sanitizer="$(command -v "$candidate")"
    break
  fi
done

case "$mode" in
  tests) run_tests ;;
  bench) run_bench ;;
  all)
    run_tests
    start_s=$(date +%s)
    deadline_at=$((start_s + deadline_s))
    run_bench
    ;;
esac
exit 0 # finish() writes the summary and sets the exit code
