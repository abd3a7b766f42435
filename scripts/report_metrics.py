#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns cuscope session reports, one JSON line each (json_line_sink's output), into Prometheus
metrics in the text exposition format, for node_exporter's textfile collector.

  scripts/report_metrics.py /var/log/gpu-requests.jsonl > /var/lib/node_exporter/gpu.prom.tmp
  mv /var/lib/node_exporter/gpu.prom.tmp /var/lib/node_exporter/gpu.prom

Reads the files named (standard input when none). Every line must be a JSON object whose
"version" is 1; blank lines are skipped. --top NAME counts only the sessions named NAME apart
(a service's own session), so that the request metrics are the requests'. Exit codes: 0 done,
1 a line is not a report (named with its file and line number), 2 usage.
"""
import argparse
import json
import sys

VERSION = 1


def reports(paths):
    sources = paths or ["-"]
    for path in sources:
        try:
            f = sys.stdin if path == "-" else open(path)
        except OSError as e:
            raise SystemExit("report_metrics: cannot read %s: %s" % (path, e.strerror))
        with f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = "%s:%d" % (path, number)
                try:
                    r = json.loads(line)
                except ValueError as e:
                    print("report_metrics: %s is not JSON: %s" % (where, e), file=sys.stderr)
                    sys.exit(1)
                if not isinstance(r, dict) or r.get("version") != VERSION:
                    print("report_metrics: %s is not a version %d session report" % (where, VERSION),
                          file=sys.stderr)
                    sys.exit(1)
                yield r


def figure(r, key):
    """A byte count, 0 where the report left it unknown (null)."""
    value = r.get(key)
    return value if isinstance(value, int) else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="JSON lines files (default: standard input)")
    parser.add_argument("--top", default="", help="the name of the service's own session")
    args = parser.parse_args()

    sessions = leaked = incomplete = trimmed = admitted_after_trim = refused = 0
    leaked_bytes = returned = peak = admission_returned = top_sessions = 0
    # A report's counters include those of the sessions nested in it: --top leaves the service's
    # own line out, so that the requests' allocations are not counted twice.
    counts = {"allocations": 0, "frees": 0, "budget_refusals": 0, "pool_refusals": 0,
              "retries": 0}
    for r in reports(args.files):
        if r.get("admission_refused"):  # admission_error::report(): it never began
            refused += 1
            continue
        if args.top and r.get("name") == args.top:
            top_sessions += 1
            continue
        sessions += 1
        leaked += 1 if r.get("leaked") else 0
        leaked_bytes += figure(r, "leaked_bytes")
        incomplete += 0 if r.get("complete") else 1
        trimmed += 1 if r.get("trimmed") else 0
        returned += figure(r, "returned_bytes")
        peak = max(peak, figure(r, "tracked_peak_bytes"))
        admitted_after_trim += 1 if r.get("admission_trimmed") else 0
        admission_returned += figure(r, "admission_returned_bytes")
        for key in counts:
            counts[key] += figure(r, key)

    metrics = [
        ("cuscope_sessions_total", "counter", "Sessions that ended.", sessions),
        ("cuscope_sessions_leaked_total", "counter", "Sessions that ended with memory leaked.",
         leaked),
        ("cuscope_leaked_bytes_total", "counter", "Bytes the sessions leaked.", leaked_bytes),
        ("cuscope_sessions_incomplete_total", "counter",
         "Sessions whose end failed a step (their report says which).", incomplete),
        ("cuscope_sessions_trimmed_total", "counter", "Sessions whose end trimmed the pool.",
         trimmed),
        ("cuscope_returned_bytes_total", "counter",
         "Reserve the sessions' ends gave back to the driver.", returned),
        ("cuscope_session_peak_bytes", "gauge",
         "The largest peak of a session's own allocations.", peak),
        ("cuscope_admission_trims_total", "counter",
         "Sessions admitted after their admission trimmed the pools.", admitted_after_trim),
        ("cuscope_admission_returned_bytes_total", "counter",
         "Reserve that admission trims gave back.", admission_returned),
        ("cuscope_admission_refusals_total", "counter",
         "Requests their admission refused (lines with admission_refused).", refused),
        ("cuscope_allocations_total", "counter", "Allocations made through the sessions.",
         counts["allocations"]),
        ("cuscope_frees_total", "counter", "Of them, those freed.", counts["frees"]),
        ("cuscope_budget_refusals_total", "counter",
         "Requests a session's budget refused before CUDA was asked.", counts["budget_refusals"]),
        ("cuscope_pool_refusals_total", "counter",
         "Requests the pool refused (out of memory from CUDA, after any retry).",
         counts["pool_refusals"]),
        ("cuscope_alloc_retries_total", "counter",
         "Requests the pool tried again after a trim or an out-of-memory handler.",
         counts["retries"]),
    ]
    if args.top:
        metrics.append(("cuscope_top_sessions_total", "counter",
                        "Sessions named %s that ended." % args.top, top_sessions))
    out = []
    for name, kind, text, value in metrics:
        out.append("# HELP %s %s" % (name, text))
        out.append("# TYPE %s %s" % (name, kind))
        out.append("%s %d" % (name, value))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
