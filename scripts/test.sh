#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds and runs every test, as CI does: the simulated device plain and under ASan+UBSan, the
# real-runtime build (its tests run on a GPU and are reported Skipped without one), the header
# checks, the link checks, the consumers and clang-format. Installs Catch2 when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
export CTEST_PARALLEL_LEVEL="${CTEST_PARALLEL_LEVEL:-$(nproc)}"
exec cmake --workflow --preset ci
