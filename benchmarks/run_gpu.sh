#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the benchmarks with nvcc, runs the whole suite and the peers on this machine's GPU, and
# writes <date>-<gpu>.json, .md, .svg (and .png with matplotlib) and -logs.tar.gz (every step's
# log, every benchmark's own JSON) into the output directory: benchmarks/results/ by default.
# Needs no network. Each step has a time limit and the whole run a deadline (default 570 s), so
# that it fits one 10-minute command; a step that fails or times out is reported, the others still
# run, and the exit code is 1. The report and the logs are written again after every benchmark,
# marked unfinished until the end, so that a command stopped at its limit still returns them.
#
#   benchmarks/run_gpu.sh [options] [OUTDIR]
#     --out DIR        where the results go (default: benchmarks/results)
#     --commit HASH    the commit measured (default: git rev-parse HEAD when .git is here, else
#                      .deps/commit.txt, written by scripts/gpu-prepare.sh)
#     --quick          tiny sizes and counts: a smoke run (its files are not results)
#     --sim            rehearse the whole pipeline on the simulated device, without a GPU
#                      (builds the *_sim programs; its files are not results either)
#     --build-dir DIR  build tree (default: build/bench, or build/bench-sim with --sim)
#     --no-build       use the build tree as it is
#     --jobs N         parallel build jobs (default: all processors)
#     --arch LIST      CMAKE_CUDA_ARCHITECTURES (default: 90, the H100 and H200)
#     --werror         treat warnings as errors (CI does; off here so that a newer compiler's new
#                      warning cannot cost a GPU run)
#     --no-peers       skip PyTorch and CuPy
#     --deadline S     seconds for the whole run (default 570)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=""
commit=""
quick=0
sim=0
build=""
do_build=1
jobs="$(nproc 2>/dev/null || echo 4)"
arch=90
werror=OFF
peers=1
deadline_s=570

die() { echo "run_gpu.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --commit) commit="${2:?--commit needs a hash}"; shift 2 ;;
    --quick) quick=1; shift ;;
    --sim) sim=1; shift ;;
    --build-dir) build="${2:?--build-dir needs a directory}"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --arch) arch="${2:?--arch needs a list}"; shift 2 ;;
    --werror) werror=ON; shift ;;
    --no-peers) peers=0; shift ;;
    --deadline) deadline_s="${2:?--deadline needs seconds}"; shift 2 ;;
    -h|--help) sed -n '3,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$out" ] || die "one output directory only"; out="$1"; shift ;;
  esac
done

start_s=$(date +%s)
deadline_at=$((start_s + deadline_s))
reserve_s=25  # kept for the report, the plot and the archive

results_dir="$root/benchmarks/results"
[ -n "$out" ] || out="$results_dir"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [ "$sim" = 1 ] || [ "$quick" = 1 ]; then
  [ "$out" != "$results_dir" ] ||
    die "--sim and --quick runs are not results: give another output directory"
fi

suffix=""
if [ "$sim" = 1 ]; then
  suffix="_sim"
  [ -n "$build" ] || build="$root/build/bench-sim"
else
  [ -n "$build" ] || build="$root/build/bench"
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  if ! { command -v nvidia-smi >/dev/null 2>&1 && grep -q '^GPU ' <<<"$(nvidia-smi -L 2>/dev/null)"; }; then
    die "no GPU found (nvidia-smi -L lists none); --sim rehearses the run without one"
  fi
fi
python="${PYTHON:-python3}"
command -v "$python" >/dev/null 2>&1 || die "$python not found (set PYTHON)"

work="$(mktemp -d "${TMPDIR:-/tmp}/cuscope-bench.XXXXXX")"
logs="$work/logs"
raw="$work/raw"
mkdir -p "$logs" "$raw"
steps="$work/steps.tsv"
: >"$steps"
failed=0

# shellcheck source=../scripts/steps.sh
source "$root/scripts/steps.sh"

absent() {  # absent NAME WHY: a step that has nothing to run here
  printf '%s\t%s\t\t%s\n' "$1" "absent" "$2" >>"$steps"
  echo "-- $1: $2"
}

stem=""
# After every step, once the run knows its machine: the report so far and the logs.
# shellcheck disable=SC2317  # invoked by steps.sh
after_step() {
  [ -n "$stem" ] && [ -f "$work/meta.json" ] || return 0
  local last
  last="$(tail -n 1 "$steps" | cut -f1)"
  "$python" "$root/benchmarks/collect.py" report --meta "$work/meta.json" --raw "$raw" \
    --steps "$steps" --out-json "$out/$stem.json" --out-md "$out/$stem.md" \
    --unfinished "$last" >>"$logs/collect.log" 2>&1
  tar -czf "$out/$stem-logs.tar.gz" -C "$work" logs raw 2>/dev/null
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
finish() {
  local rc=$?
  set +e
  trap - EXIT
  if [ -z "$stem" ]; then stem="$(date -u +%Y-%m-%d)-unfinished"; fi
  [ -f "$work/meta.json" ] || echo '{"notes": ["the run stopped before it described the machine"]}' \
    >"$work/meta.json"
  "$python" "$root/benchmarks/collect.py" meta --clocks-only --out "$work/end.json" \
    >>"$logs/collect.log" 2>&1
  if "$python" "$root/benchmarks/collect.py" report --meta "$work/meta.json" --raw "$raw" \
    --steps "$steps" --end "$work/end.json" --out-json "$out/$stem.json" \
    --out-md "$out/$stem.md" >>"$logs/collect.log" 2>&1; then
    "$python" "$root/benchmarks/plot.py" "$out/$stem.json" --out "$out/$stem.svg" \
      --png "$out/$stem.png" >>"$logs/collect.log" 2>&1 ||
      echo "run_gpu.sh: the plot failed (see $stem-logs.tar.gz: logs/collect.log)" >&2
  else
    echo "run_gpu.sh: the report failed:" >&2
    tail -n 20 "$logs/collect.log" >&2
    rc=1
  fi
  cp "$steps" "$work/meta.json" "$work/end.json" "$raw/" 2>/dev/null
  tar -czf "$out/$stem-logs.tar.gz" -C "$work" logs raw 2>/dev/null
  echo
  if [ -f "$out/$stem.md" ]; then
    # The headline table and the steps: the end of the output is what a remote caller sees.
    awk '/^## Headline figures/{p=1} /^## [^H]/{p=0} p' "$out/$stem.md"
    awk '/^## Steps of the run/{p=1} p' "$out/$stem.md"
  fi
  echo "results in $out:"
  for f in "$out/$stem".*  "$out/$stem"-logs.tar.gz; do
    [ -e "$f" ] && echo "  $(du -h "$f" | cut -f1)  $f"
  done
  rm -rf "$work"
  [ "$failed" = 0 ] || rc=1
  exit "$rc"
}
trap finish EXIT

# Build ---------------------------------------------------------------------------------------------
names=()
for src in "$root"/benchmarks/*_bench.cpp "$root"/benchmarks/*_bench.cu; do
  [ -e "$src" ] || continue
  n="$(basename "$src")"
  n="${n%.*}"
  case "$n" in sim_* | overhead_bench) continue ;; esac  # overhead: built for callgrind below
  # Kernels need the GPU, unless the source says it also runs on the simulated device.
  if [ "$sim" = 1 ] && [ "${src##*.}" = cu ] &&
    ! grep -q 'cuscope-benchmark: also simulated' "$src"; then
    continue
  fi
  names+=("$n")
done
targets=()
for n in "${names[@]}"; do targets+=("$n$suffix"); done
have_valgrind=0
command -v valgrind >/dev/null 2>&1 && have_valgrind=1
[ "$have_valgrind" = 0 ] || targets+=(overhead_bench_sim)

if [ "$do_build" = 1 ]; then
  gen=()
  if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
  real=ON
  [ "$sim" = 0 ] || real=OFF
  # The gpu preset's settings (Release, real runtime, sm_90), with only what the benchmarks need.
  step configure 240 cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCUSCOPE_REAL_RUNTIME="$real" -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DCUSCOPE_BUILD_TESTS=OFF -DCUSCOPE_BUILD_EXAMPLES=OFF -DCUSCOPE_BUILD_BENCHMARKS=ON \
    -DCUSCOPE_WARNINGS_AS_ERRORS="$werror"
  keep_going=(-k)
  grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$build/CMakeCache.txt" 2>/dev/null &&
    keep_going=(-k 0)
  step build 300 cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- "${keep_going[@]}"
fi
[ -f "$build/CMakeCache.txt" ] || { echo "run_gpu.sh: no build tree at $build" >&2; exit 1; }

meta_args=(--out "$work/meta.json" --build-dir "$build")
[ -z "$commit" ] || meta_args+=(--commit "$commit")
[ "$sim" = 0 ] || meta_args+=(--note "rehearsal on the simulated device: not a result")
[ "$quick" = 0 ] || meta_args+=(--note "quick run: tiny sizes and counts, not a result")
if ! "$python" "$root/benchmarks/collect.py" meta "${meta_args[@]}" >"$logs/meta.log" 2>&1; then
  echo "run_gpu.sh: collect.py meta failed:" >&2
  cat "$logs/meta.log" >&2
  exit 1
fi
slug="$("$python" -c 'import json,re,sys; m=json.load(open(sys.argv[1])); g=m.get("gpu") or ""; print(re.sub(r"[^a-z0-9]+","-",g.lower()).strip("-") or "nogpu")' "$work/meta.json")"
[ "$sim" = 0 ] || slug="simulated"
[ "$quick" = 0 ] || slug="$slug-quick"
stem="$(date -u +%Y-%m-%d)-$slug"
i=2
while [ -e "$out/$stem.json" ]; do stem="$(date -u +%Y-%m-%d)-$slug-$i"; i=$((i + 1)); done

# Run ----------------------------------------------------------------------------------------------
q=()
[ "$quick" = 0 ] || q=(--quick)
bench() {  # bench NAME LIMIT: one benchmark executable, if this build has it
  local name="$1" limit="$2" exe="$build/benchmarks/$1_bench$suffix"
  if [ -x "$exe" ]; then
    step "$name" "$limit" "$exe" "${q[@]}" --json "$raw/$name.json"
  elif grep -qx "${name}_bench" <<<"$(printf '%s\n' "${names[@]}")"; then
    printf '%s\t%s\t\t%s\n' "$name" "failed" "not built (see build.log)" >>"$steps"
    echo "-- $name: NOT BUILT (see build.log)" >&2
    failed=1
  else
    absent "$name" "no benchmarks/${name}_bench source here (or no simulated build of it)"
  fi
}

# Most important first, in case the deadline comes.
bench loop 90
bench alloc 90
bench session 150
bench batch 90
if [ "$peers" = 1 ]; then
  if [ -x "$build/benchmarks/loop_bench$suffix" ] && [ -x "$build/benchmarks/session_bench$suffix" ]; then
    step peers 200 env PYTHONUNBUFFERED=1 "$python" "$root/benchmarks/peers/peers.py" \
      --loop-bench "$build/benchmarks/loop_bench$suffix" \
      --session-bench "$build/benchmarks/session_bench$suffix" "${q[@]}" --json "$raw/peers.json"
  else
    absent peers "loop_bench and session_bench were not built"
  fi
else
  absent peers "--no-peers"
fi
bench streams 60
bench random 90
bench nvml 60

cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
cuda_bin="$(sed -n 's/^CUDAToolkit_BIN_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")"
cuda_include="$(dirname "${cuda_bin:-/usr/local/cuda/bin}")/include"
step compile 90 "$python" "$root/benchmarks/compile_cost.py" --cxx "${cxx:-c++}" \
  --include "$root/include" --system-include "$cuda_include" "${q[@]}" --json "$raw/compile.json"
overhead_exe="$build/benchmarks/overhead_bench_sim"
if [ "$have_valgrind" = 0 ]; then
  absent overhead "valgrind is not installed here (CI measures it: ctest -L bench)"
elif [ -x "$overhead_exe" ]; then
  step overhead 150 "$python" "$root/benchmarks/callgrind_overhead.py" --exe "$overhead_exe" \
    "${q[@]}" --json "$raw/overhead.json"
else
  absent overhead "overhead_bench_sim was not built"
fi
exit 0  # finish() writes the report
