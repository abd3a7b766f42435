#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Host instructions per allocate/free pair that cuscope adds on top of the raw CUDA API.

Runs overhead_bench_sim (the simulated device, eager mode, built with -O2) under valgrind's
callgrind once per measured function and pair count, collecting only inside that function
(--toggle-collect), and reports:
  instructions per pair = (Ir(2N) - Ir(N)) / N   (constant costs such as first calls cancel out)
  added per pair        = per pair (cuscope function) - per pair (raw function)
The count is deterministic: it does not depend on the machine or its load. The raw figure itself is
the simulated runtime's cost and means little; the difference is cuscope's own code.

Exit code 77 (reported as Skipped by ctest) when valgrind is not installed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# (name given to --only, measured function, what it does). The _recorded rows run the same
# function on a pool with a cuscope::recorder attached (sampling at most once an hour, so that the
# count is of recording alone).
FUNCTIONS = [
    ("raw", "raw", "cudaMallocFromPoolAsync + cudaFreeAsync (raw API, status checked)"),
    ("pool", "pool", "memory_pool::allocate + deallocate"),
    ("buffer", "buffer", "device_buffer<std::byte> constructed and destroyed"),
    ("session", "session", "session::make_buffer<std::byte> and its destruction"),
    ("pool_recorded", "pool", "memory_pool::allocate + deallocate, recorder attached"),
    ("buffer_recorded", "buffer", "device_buffer<std::byte>, recorder attached"),
    ("session_recorded", "session", "session::make_buffer<std::byte>, recorder attached"),
]


def count_ir(valgrind, exe, name, function, pairs, workdir):
    out = os.path.join(workdir, "callgrind.%s.%d.out" % (name, pairs))
    cmd = [
        valgrind, "--tool=callgrind", "--callgrind-out-file=" + out,
        "--collect-atstart=no", "--toggle-collect=*overhead_%s_pairs*" % function,
        exe, "--only", name, "--pairs", str(pairs),
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit("callgrind_overhead: %s failed (exit code %d)" % (" ".join(cmd),
                                                                        proc.returncode))
    ir = None
    with open(out) as f:
        for line in f:
            m = re.match(r"^(summary|totals):\s+(\d+)", line)
            if m:
                ir = int(m.group(2))
    if ir is None or ir == 0:
        raise SystemExit("callgrind_overhead: no instructions counted in overhead_%s_pairs (%s)"
                         % (function, out))
    return ir, cmd


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", required=True, help="path of overhead_bench_sim")
    p.add_argument("--pairs", type=int, default=None, help="N (default 5000, --quick 500)")
    p.add_argument("--quick", action="store_true", help="fewer pairs (a smoke run)")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument("--valgrind", default=shutil.which("valgrind"), help="valgrind executable")
    a = p.parse_args()
    if not a.valgrind:
        print("SKIPPED: valgrind not found; install it to count instructions")
        return 77
    if not os.path.exists(a.exe):
        raise SystemExit("callgrind_overhead: %s does not exist" % a.exe)
    n = a.pairs or (500 if a.quick else 5000)
    version = subprocess.run([a.valgrind, "--version"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.strip()

    rows = []
    with tempfile.TemporaryDirectory(prefix="cuscope-callgrind-") as work:
        for name, function, what in FUNCTIONS:
            ir1, cmd = count_ir(a.valgrind, a.exe, name, function, n, work)
            ir2, _ = count_ir(a.valgrind, a.exe, name, function, 2 * n, work)
            per_pair = (ir2 - ir1) / float(n)
            rows.append({"function": name, "what": what, "ir_n": ir1, "ir_2n": ir2,
                         "per_pair": per_pair, "fixed": ir1 - per_pair * n,
                         "command": " ".join(cmd[:-4] + ["--only", name, "--pairs", "N"])})
    raw = rows[0]["per_pair"]
    by_name = {r["function"]: r for r in rows}
    for r in rows:
        r["added_per_pair"] = r["per_pair"] - raw
        r["ratio_to_raw"] = r["per_pair"] / raw if raw else None
        if r["function"].endswith("_recorded"):
            plain = by_name[r["function"][:-len("_recorded")]]
            r["recorder_per_pair"] = r["per_pair"] - plain["per_pair"]

    columns = ["function", "instructions per pair", "added by cuscope", "ratio to raw"]
    table_rows = [[r["function"] + ": " + r["what"], "%.1f" % r["per_pair"],
                   "%+.1f" % r["added_per_pair"], "%.3fx" % r["ratio_to_raw"]] for r in rows]
    title = ("host instructions per 256-byte allocate/free pair (callgrind Ir, simulated device, "
             "N=%d and 2N)" % n)
    widths = [max(len(c), *(len(t[i]) for t in table_rows)) for i, c in enumerate(columns)]
    print("\n" + title)
    print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                    for i, c in enumerate(columns)))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for t in table_rows:
        print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                        for i, c in enumerate(t)))
    notes = [
        "Counted with %s --tool=callgrind --collect-atstart=no "
        "--toggle-collect='*overhead_<function>_pairs*' on overhead_bench_sim (built with -O2, "
        "eager simulated device); per pair = (Ir(2N) - Ir(N)) / N." % version,
        "The raw figure is the simulated runtime's own cost, not the CUDA driver's: only the "
        "difference (what cuscope adds) carries over to a real GPU.",
    ]
    for line in notes:
        print("note: " + line)
    headline = []
    for r in rows[1:]:
        if "recorder_per_pair" in r:
            headline.append({
                "name": "overhead: host instructions a recorder adds per pair to %s (callgrind)"
                        % r["function"][:-len("_recorded")],
                "value": r["recorder_per_pair"], "unit": "instructions",
                "detail": r["what"] + ", against the same without a recorder"})
            print("headline: %s: %+.1f instructions" % (headline[-1]["name"],
                                                       r["recorder_per_pair"]))
            continue
        headline.append({
            "name": "overhead: host instructions added per pair by %s (callgrind)" % r["function"],
            "value": r["added_per_pair"], "unit": "instructions",
            "detail": r["what"] + ", against " + rows[0]["what"]})
        print("headline: %s: %+.1f instructions" % (headline[-1]["name"], r["added_per_pair"]))
    if a.json:
        doc = {
            "schema": "cuscope-bench/1",
            "benchmark": "overhead",
            "simulated": True,
            "quick": a.quick,
            "command_line": " ".join(sys.argv[1:]),
            "device": {"name": "cuscope simulated device", "simulated": True},
            "build": {"valgrind": version, "optimized": True},
            "config": {"pairs": n, "bytes": 256},
            "notes": notes,
            "tables": [{"title": title, "columns": columns, "rows": table_rows}],
            "results": rows,
            "headline": headline,
        }
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print("wrote " + a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
