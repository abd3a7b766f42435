#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/compare_probe.sh on made-up answers: a complete GPU run, one that stopped midway (a
# crash, or a command killed at its limit) and none at all. Fails on the first wrong line.
set -euo pipefail
compare="${1:?usage: compare_probe_test.sh scripts/compare_probe.sh}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat >"$work/sim" <<'ANSWERS'
$ driver_probe_sim
info.device: simulated device
used.of_1_bytes: 256 (0.000 MiB)
reserved.after_1000_bytes: 2097152 (2.000 MiB)
error.cudaMallocAsync_of_0_bytes: cudaSuccess
# driver_probe: done, 0 calls failed
ANSWERS
cat >"$work/gpu-complete" <<'ANSWERS'
info.device: NVIDIA H100 80GB HBM3
used.of_1_bytes: 256 (0.000 MiB)
reserved.after_1000_bytes: 33554432 (32.000 MiB)
error.cudaMallocAsync_of_0_bytes: cudaSuccess
# driver_probe: done, 0 calls failed
ANSWERS
head -n 3 "$work/gpu-complete" >"$work/gpu-stopped"

fail() {
  echo "FAILED: $1" >&2
  echo "--- output:" >&2
  cat "$work/out" >&2
  exit 1
}
expect() { grep -qF -- "$1" "$work/out" || fail "no line with: $1"; }
refuse() { ! grep -qF -- "$1" "$work/out" || fail "a line with: $1"; }

bash "$compare" "$work/gpu-complete" "$work/sim" >"$work/out"
expect "used.of_1_bytes"
expect "same: 256 (0.000 MiB)"
expect "DIFFERENT: gpu 33554432 (32.000 MiB) | simulation 2097152 (2.000 MiB)"
expect "driver_probe: 2 answers as simulated, 1 different, 0 unanswered; complete"
refuse "INCOMPLETE"

bash "$compare" "$work/gpu-stopped" "$work/sim" >"$work/out"
expect "DIFFERENT: gpu 33554432"
expect "error.cudaMallocAsync_of_0_bytes"
expect "UNANSWERED by the GPU run | simulation cudaSuccess"
expect "1 answers as simulated, 1 different, 1 unanswered; INCOMPLETE"

bash "$compare" "$work/absent" "$work/sim" "driver_probe --risky" >"$work/out"
expect "driver_probe --risky: no GPU answers"
expect "used.of_1_bytes: 256"
echo "compare_probe.sh: complete, stopped and absent GPU runs reported as expected"
