#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compares the driver probe's answers on a GPU with the simulated device's, one line per key:
# "same" or "DIFFERENT" with both answers. Keys starting with "info." describe the machine and are
# printed, not compared. A GPU run that stopped before its last line ("# NAME: done", NAME being
# driver_probe or driver_probe --risky) is compared as far as it went and marked INCOMPLETE, with
# the keys it never answered. Used by scripts/gpu-run.sh; docs/gpu-checklist.md says what to do
# with each difference.
#
#   scripts/compare_probe.sh GPU_OUTPUT SIM_OUTPUT [NAME]   (NAME: default driver_probe)
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: compare_probe.sh GPU_OUTPUT SIM_OUTPUT [NAME]" >&2
  exit 2
fi
gpu="$1"
sim="$2"
name="${3:-driver_probe}"

echo "== $name"
if [ ! -s "$sim" ]; then
  echo "$name: no simulated answers ($sim is missing or empty): nothing to compare"
  exit 0
fi
if [ ! -s "$gpu" ]; then
  echo "$name: no GPU answers ($gpu is missing or empty); the simulation's:"
  grep -v '^\$ ' "$sim" || true
  exit 0
fi
complete=no
grep -qF "# $name: done" "$gpu" && complete=yes
awk -v complete="$complete" -v name="$name" '
  function key(line) { return substr(line, 1, index(line, ": ") - 1) }
  function value(line) { return substr(line, index(line, ": ") + 2) }
  /^\$ / || /^#/ || index($0, ": ") == 0 { next }
  FNR == NR { k = key($0); sim[k] = value($0); order[++n] = k; next }
  {
    k = key($0); g = value($0); seen[k] = 1
    if (k ~ /^info\./) { printf "%-58s %s\n", k, g; next }
    s = (k in sim) ? sim[k] : "(absent)"
    if (s == g) { same++; printf "%-58s same: %s\n", k, g }
    else { diff++; printf "%-58s DIFFERENT: gpu %s | simulation %s\n", k, g, s }
  }
  END {
    for (i = 1; i <= n; ++i) {
      k = order[i]
      if (k in seen || k ~ /^info\./) continue
      missing++
      printf "%-58s UNANSWERED by the GPU run | simulation %s\n", k, sim[k]
    }
    state = complete == "yes" ? "complete" : "INCOMPLETE (the GPU run stopped before its last line)"
    printf "%s: %d answers as simulated, %d different, %d unanswered; %s\n", name, same + 0,
           diff + 0, missing + 0, state
  }
' "$sim" "$gpu"
