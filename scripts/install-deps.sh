#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what building cuscope needs and is missing: a C++17 compiler, CMake, and, for the tests,
# Catch2, GoogleTest, clang-format, pkg-config, Python's venv and pip, and the toolchain matrix's
# compilers (g++ 12, clang 14). Uses apt-get on Debian and Ubuntu; elsewhere it says what to install.
#   scripts/install-deps.sh                build tools only
#   scripts/install-deps.sh --tests        and what the tests need (matplotlib for the plot test)
#   scripts/install-deps.sh --toolchains   and the matrix's CUDA and CCCL wheels, downloaded once
#                                          into the cache of scripts/toolchains.sh
set -euo pipefail

want_tests=0
want_wheels=0
case "${1:-}" in
  --tests) want_tests=1 ;;
  --toolchains)
    want_tests=1
    want_wheels=1
    ;;
esac

missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || missing+=(g++)

have_catch2() {
  local d
  for d in /usr/lib/cmake/Catch2 /usr/share/cmake/Catch2 /usr/local/lib/cmake/Catch2 \
           /usr/local/share/cmake/Catch2 /usr/lib/x86_64-linux-gnu/cmake/Catch2 \
           /usr/lib/aarch64-linux-gnu/cmake/Catch2 /usr/local/lib64/cmake/Catch2; do
    [ -f "$d/Catch2Config.cmake" ] && return 0
  done
  [ -n "${Catch2_DIR:-}" ] && [ -f "${Catch2_DIR}/Catch2Config.cmake" ] && return 0
  return 1
}

if [ "$want_tests" = 1 ]; then
  have_catch2 || missing+=(catch2)
  # The leak check's GoogleTest suite (tests/testing).
  [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  command -v clang-format >/dev/null 2>&1 || missing+=(clang-format)
  # The packaging tests: pkg-config reads the installed .pc files, and the Conan test installs
  # conan into a virtual environment.
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
  # The toolchain matrix (scripts/toolchains.sh): its compilers, and pip for the CUDA wheels.
  command -v g++-12 >/dev/null 2>&1 || missing+=(g++-12)
  command -v clang++-14 >/dev/null 2>&1 || missing+=(clang-14)
  python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
  # The test that draws the demo's memory trace (scripts/memory_plot.py).
  python3 -c 'import matplotlib' >/dev/null 2>&1 || missing+=(python3-matplotlib)
fi

fetch_wheels() {
  [ "$want_wheels" = 1 ] || return 0
  "$(dirname "$0")/toolchains.sh" --fetch
}

if [ ${#missing[@]} -eq 0 ]; then
  fetch_wheels
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "cuscope: please install: ${missing[*]} (Catch2 v3 or v2.13 with its CMake package)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "cuscope: need root to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "cuscope: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fetch_wheels
