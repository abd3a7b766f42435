#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The toolchain matrix: builds and tests cuscope against several CUDA runtime versions, CCCL
# versions, host compilers and C++ standards (docs/toolchains.md says which and why).
#
#   scripts/toolchains.sh                 every combination
#   scripts/toolchains.sh NAME...         the combinations named (see --list)
#   scripts/toolchains.sh --list          the combinations, one a line
#   scripts/toolchains.sh --fetch         only download and unpack what they need
#
# For each combination it composes a CUDA prefix (runtime headers, libcudart, CCCL) in the cache
# and points a build at it with CUDAToolkit_ROOT: the simulated device and the test suite are
# built with warnings as errors and run, every public header is compiled alone, and the
# real-runtime test executables are linked against that version's libcudart (and run: without a
# GPU they report Skipped). The pip wheels are downloaded once into
# ${CUSCOPE_TOOLCHAINS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/cuscope/toolchains}; later runs are
# offline. CUDA 13.0 and CCCL 3.0 are those of the installed toolkit (CUDA_PATH, else
# /usr/local/cuda), which must be 13.0.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

cache="${CUSCOPE_TOOLCHAINS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cuscope/toolchains}"
toolkit="${CUDA_PATH:-/usr/local/cuda}"

# The wheels, pinned so that the cache is reused and every run tests the same files.
wheel_cuda129="nvidia-cuda-runtime-cu12==12.9.79"
wheel_cuda135="nvidia-cuda-runtime==13.5.37"
wheel_cccl35="nvidia-cuda-cccl==13.3.5.0.6"

# name                         cuda cccl compiler   std real
# With the main CI build (the ci preset: CUDA 13.0, CCCL 3.0, g++, C++17, with sanitizers and
# nvcc) these rows form a pairwise covering set: every pair of values of any two axes occurs in
# the main build or some row, so that an interaction of two (CCCL's concept emulation in C++17
# against C++20 concepts, CCCL 3.5 with CUDA 12 headers, clang with either CCCL) is caught
# without building all 24 combinations. Which runtime symbols exist depends on the CUDA version
# alone: the real-runtime tests are linked in one row per version ("real"), and the others build
# the simulated device only.
matrix="\
cuda12.9-cccl3.0-clang-cxx20 12.9 3.0 clang++-14 20 real
cuda12.9-cccl3.5-gcc-cxx17   12.9 3.5 g++-12     17 -
cuda13.0-cccl3.5-clang-cxx20 13.0 3.5 clang++-14 20 real
cuda13.5-cccl3.0-gcc-cxx20   13.5 3.0 g++-12     20 -
cuda13.5-cccl3.5-clang-cxx17 13.5 3.5 clang++-14 17 real"

say() { printf 'toolchains: %s\n' "$*"; }
die() {
  printf 'toolchains: %s\n' "$*" >&2
  exit 1
}

# fetch <requirement>: the wheel's unpacked directory, downloaded once into the cache.
fetch() {
  local req=$1 name version dir
  name=${req%%==*}
  version=${req##*==}
  dir="$cache/unpacked/$name-$version"
  if [ ! -f "$dir/.complete" ]; then
    local wheels="$cache/wheels"
    mkdir -p "$wheels"
    local pattern="${name//-/_}-$version-*.whl"
    # shellcheck disable=SC2086
    if ! compgen -G "$wheels/$pattern" >/dev/null; then
      say "downloading $req" >&2
      python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" "$req" >&2 ||
        die "could not download $req (needs PyPI once; later runs use $wheels)"
    fi
    local files=("$wheels"/$pattern)
    rm -rf "$dir"
    mkdir -p "$dir"
    python3 -m zipfile -e "${files[0]}" "$dir"
    touch "$dir/.complete"
  fi
  printf '%s\n' "$dir"
}

# runtime <cuda>: sets rt_include, rt_lib (the directory of libcudart.so.<major>), rt_major and
# rt_version (from CUDART_VERSION in the headers, and the wheel's or toolkit's full version).
runtime() {
  local dir
  case $1 in
    12.9)
      dir=$(fetch "$wheel_cuda129")/nvidia/cuda_runtime
      rt_version=${wheel_cuda129##*==}
      ;;
    13.5)
      dir=$(fetch "$wheel_cuda135")/nvidia/cu13
      rt_version=${wheel_cuda135##*==}
      ;;
    13.0)
      dir=$toolkit
      rt_version=$("$toolkit/bin/nvcc" --version 2>/dev/null | sed -n 's/.*, V\([0-9.]*\)$/\1/p') ||
        true
      ;;
    *) die "unknown CUDA version $1" ;;
  esac
  rt_include=$dir/include
  rt_lib=$dir/lib
  [ -d "$dir/lib64" ] && rt_lib=$dir/lib64
  rt_major=${1%%.*}
  [ -f "$rt_include/cuda_runtime_api.h" ] || die "no cuda_runtime_api.h under $rt_include"
  [ -e "$rt_lib/libcudart.so.$rt_major" ] || die "no libcudart.so.$rt_major in $rt_lib"
  local declared
  declared=$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\).*/\1/p' "$rt_include/cuda_runtime_api.h")
  local want=$((${1%%.*} * 1000 + ${1#*.} * 10))
  [ "$declared" = "$want" ] ||
    die "CUDA $1 wanted, but $rt_include/cuda_runtime_api.h declares CUDART_VERSION $declared"
  case $rt_version in "$1".*) ;; *) die "CUDA $1 wanted, found version '$rt_version' in $dir" ;; esac
}

# cccl <version>: sets cccl_include, the directory that holds cuda/, cub/ and thrust/.
cccl() {
  case $1 in
    3.0) cccl_include=$toolkit/include/cccl ;;
    3.5) cccl_include=$(fetch "$wheel_cccl35")/nvidia/cu13/include/cccl ;;
    *) die "unknown CCCL version $1" ;;
  esac
  local h=$cccl_include/cuda/std/__cccl/version.h
  [ -f "$h" ] || die "no CCCL under $cccl_include"
  local v
  v=$(sed -n 's/^#define CCCL_VERSION *\([0-9]*\).*/\1/p' "$h")
  [ "$((v / 1000000)).$((v / 1000 % 1000))" = "$1" ] ||
    die "CCCL $1 wanted, but $h declares CCCL_VERSION $v"
}

# compose <cuda> <cccl>: a prefix laid out as a CUDA toolkit, for CUDAToolkit_ROOT: the runtime's
# headers with include/cccl the CCCL chosen, lib64 with libcudart, and the version.txt that
# FindCUDAToolkit reads when there is no nvcc (and no bin/nvcc, so that none is used).
compose() {
  runtime "$1"
  cccl "$2"
  prefix="$cache/prefix/cuda$1-cccl$2"
  rm -rf "$prefix"
  mkdir -p "$prefix/bin" "$prefix/include" "$prefix/lib64"
  local entry
  for entry in "$rt_include"/*; do
    # CCCL's own directories: the toolkit's copies would shadow the CCCL chosen.
    case $(basename "$entry") in cccl | nv | cuda | cub | thrust) continue ;; esac
    ln -s "$entry" "$prefix/include/"
  done
  ln -s "$cccl_include" "$prefix/include/cccl"
  ln -s "$rt_lib/libcudart.so.$rt_major" "$prefix/lib64/libcudart.so.$rt_major"
  ln -s "libcudart.so.$rt_major" "$prefix/lib64/libcudart.so"
  printf 'CUDA Version %s\n' "$rt_version" >"$prefix/version.txt"
}

# The tests a "real" row builds against the runtime: those with code of their own for it (CCCL
# 3.5's resources over a pool, batches' kernels, interop) and the graph calls. Every other test
# links the simulated device, whose calls check_runtime_symbols looks up in the runtime instead.
real_tests="batch_test;memory_resource_test;stream_test;docs_interop_test;docs_graphs_test"

# check_runtime_symbols <build>: every CUDA runtime function that the simulated-device tests'
# objects call (the library's code and theirs, compiled against this version's headers) is
# defined by the composed libcudart.so.<major>: what linking every test against it would check.
check_runtime_symbols() {
  local objects needed defined missing
  objects=$(find "$1/tests" -path '*_sim.dir/*' -name '*.o')
  [ -n "$objects" ] || {
    say "no simulated-device test objects under $1/tests" >&2
    return 1
  }
  # shellcheck disable=SC2086 # a list of files
  needed=$(nm --undefined-only $objects | awk '$2 ~ /^_*cuda/ {print $2}' | sort -u)
  defined=$(nm -D --defined-only "$prefix/lib64/libcudart.so.$rt_major" | awk '{sub(/@.*/, "", $3); print $3}' | sort -u)
  missing=$(comm -23 <(printf '%s\n' "$needed") <(printf '%s\n' "$defined"))
  if [ -n "$missing" ]; then
    say "libcudart.so.$rt_major does not define: $(tr '\n' ' ' <<<"$missing")" >&2
    return 1
  fi
  say "libcudart.so.$rt_major defines the $(wc -l <<<"$needed") runtime functions the tests call"
}

# run_one <name> <cuda> <cccl> <compiler> <std> <real|->
run_one() {
  local name=$1 cuda=$2 cccl_version=$3 cxx=$4 std=$5 real=OFF
  [ "$6" = real ] && real=AUTO
  command -v "$cxx" >/dev/null 2>&1 || die "$name: compiler $cxx not found (scripts/install-deps.sh --tests installs it)"
  compose "$cuda" "$cccl_version"
  local build="$root/build/toolchains/$name"
  local start=$SECONDS
  say "$name: CUDA $rt_version, CCCL $cccl_version, $cxx, C++$std"
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -Wno-dev \
    -DCMAKE_BUILD_TYPE= \
    -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_STANDARD="$std" -DCMAKE_CXX_STANDARD_REQUIRED=ON -DCMAKE_CXX_EXTENSIONS=OFF \
    -DCUDAToolkit_ROOT="$prefix" \
    -DCMAKE_CUDA_COMPILER= \
    -DCUSCOPE_REAL_RUNTIME=$real -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared \
    "-DCUSCOPE_REAL_TESTS=$real_tests" \
    -DCUSCOPE_WARNINGS_AS_ERRORS=ON \
    -DCUSCOPE_SANITIZE=OFF -DCUSCOPE_TSAN=OFF -DCUSCOPE_TEST_PTDS=OFF -DCUSCOPE_FORMAT_CHECK=OFF \
    -DCUSCOPE_BUILD_EXAMPLES=OFF -DCUSCOPE_BUILD_BENCHMARKS=OFF -DCUSCOPE_INSTALL=OFF \
    >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2
    die "$name: configure failed"
  }
  grep -q "Found CUDAToolkit: $prefix" "$build/configure.log" ||
    grep -q "CUDAToolkit_ROOT.*$prefix" "$build/CMakeCache.txt" ||
    die "$name: the build did not take CUDA from $prefix"
  cmake --build "$build" || die "$name: build failed"
  if [ "$real" = AUTO ]; then
    check_runtime_symbols "$build" || die "$name: the tests call functions libcudart.so.$rt_major lacks"
    # The real-runtime tests were linked with the composed libcudart. ldd is read whole: grep -q
    # reading a pipe may exit before ldd has written, and pipefail would count its SIGPIPE.
    local exe
    for exe in "$build"/tests/*_test_gpu; do
      [ -e "$exe" ] || die "$name: no real-runtime test executables were built"
      grep -q "libcudart.so.$rt_major => $prefix/" <<<"$(ldd "$exe")" ||
        die "$name: $(basename "$exe") does not load libcudart.so.$rt_major from $prefix"
    done
  fi
  ctest --test-dir "$build" -L '^(sim|gpu)$' --output-on-failure --no-tests=error ||
    die "$name: tests failed"
  say "$name: passed in $((SECONDS - start)) s"
}

list() { printf '%s\n' "$matrix"; }

case "${1:-}" in
  --list)
    list
    exit 0
    ;;
  --fetch)
    fetch "$wheel_cuda129" >/dev/null
    fetch "$wheel_cuda135" >/dev/null
    fetch "$wheel_cccl35" >/dev/null
    say "cached in $cache"
    exit 0
    ;;
  -h | --help)
    sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac

selected=("$@")
ran=0
total=$SECONDS
while read -r name cuda cccl_version cxx std real; do
  if [ ${#selected[@]} -gt 0 ]; then
    case " ${selected[*]} " in *" $name "*) ;; *) continue ;; esac
  fi
  run_one "$name" "$cuda" "$cccl_version" "$cxx" "$std" "$real"
  ran=$((ran + 1))
done <<<"$matrix"
[ "$ran" -gt 0 ] || die "no combination named ${selected[*]} (see --list)"
say "$ran combination(s) passed in $((SECONDS - total)) s"
