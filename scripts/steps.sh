#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Shared by scripts/gpu-run.sh and benchmarks/run_gpu.sh, which source it after setting logs,
# steps, deadline_at, reserve_s and failed. A sourcing script that defines after_step has it called
# after every step, to write its results so far: a command stopped at its limit still returns them.
# shellcheck disable=SC2154,SC2034  # the variables above are the sourcing script's

# step NAME LIMIT COMMAND...: runs COMMAND with its output in $logs/NAME.log, within LIMIT seconds
# and before $deadline_at (less $reserve_s), and records the outcome in $steps; sets failed=1 when
# it fails or times out. Exit code 77 means "skipped" (a tool is missing). Never stops the script.
step() {
  local name="$1" limit="$2"
  shift 2
  local log="$logs/$name.log" now remaining rc t0 t1 status detail
  now=$(date +%s)
  remaining=$((deadline_at - reserve_s - now))
  if [ "$remaining" -lt 15 ]; then
    printf '%s\t%s\t\t%s\n' "$name" "skipped" "no time left before the deadline" >>"$steps"
    echo "-- $name: skipped, no time left before the deadline"
    failed=1
    call_after_step
    return 0
  fi
  [ "$limit" -le "$remaining" ] || limit="$remaining"
  echo "-- $name (at most ${limit}s): $*"
  echo "\$ $*" >"$log"
  t0=$(date +%s.%N)
  set +e
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  set -e
  t1=$(date +%s.%N)
  detail=""
  if [ "$rc" = 0 ]; then
    status=ok
  elif [ "$rc" = 77 ]; then
    status=skipped
    detail="$(grep -m1 'SKIPPED' "$log" || true)"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    status=timeout
    detail="stopped after ${limit}s"
    failed=1
  else
    status=failed
    detail="exit code $rc"
    failed=1
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')" \
    "${detail//$'\t'/ }" >>"$steps"
  if [ "$status" = ok ] || [ "$status" = skipped ]; then
    echo "   $status ${detail}"
  else
    echo "   ${status^^} (${detail}); the end of $name.log:" >&2
    tail -n 25 "$log" | sed 's/^/   | /' >&2
  fi
  call_after_step
  return 0
}

call_after_step() {
  if declare -F after_step >/dev/null; then
    after_step || echo "-- writing the results so far failed (after_step)" >&2
  fi
  return 0
}
