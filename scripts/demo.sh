#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds and runs the demo: on the GPU when this machine has one, else on the simulated device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

if command -v nvidia-smi >/dev/null 2>&1 && grep -q '^GPU ' <<<"$(nvidia-smi -L 2>/dev/null)"; then
  echo "cuscope: a GPU is present; building the demo for it"
  cmake --workflow --preset demo-gpu >/dev/null
  exec build/demo-gpu/examples/demo "$@"
fi
echo "cuscope: no GPU found; building the demo for the simulated device"
cmake --workflow --preset demo >/dev/null
exec build/demo/examples/demo_sim "$@"
