#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds and runs every test, as CI does: the simulated device plain and under ASan+UBSan (the
# tests that run threads under ThreadSanitizer too), the real-runtime build (its tests run on a
# GPU and are reported Skipped without one), the header checks, the link checks, the consumers
# and clang-format; then the toolchain matrix
# (scripts/toolchains.sh, docs/toolchains.md). Installs what is missing: Catch2, the compilers,
# the CUDA and CCCL wheels (downloaded once into a cache).
#   CUSCOPE_TOOLCHAINS="NAME..."  only these combinations of the matrix; "none" for none
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --toolchains
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
export CTEST_PARALLEL_LEVEL="${CTEST_PARALLEL_LEVEL:-$(nproc)}"
start=$SECONDS
cmake --workflow --preset ci
echo "test.sh: the ci preset took $((SECONDS - start)) s"
if [ "${CUSCOPE_TOOLCHAINS:-}" != none ]; then
  # shellcheck disable=SC2086 # a list of names
  scripts/toolchains.sh ${CUSCOPE_TOOLCHAINS:-}
fi
echo "test.sh: everything took $((SECONDS - start)) s"
