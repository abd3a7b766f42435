#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compile cost of including <cuscope/cuscope.hpp> against including <cuda_runtime_api.h>.

One-line translation units (empty, #include <cuda_runtime_api.h>, the standard and CUDA headers
cuscope includes, #include <cuscope/cuscope.hpp>, #include <cuscope/kernel.hpp>) are checked with `<cxx> -std=c++17 -fsyntax-only`, interleaved in rounds
(the order rotates), and preprocessed once with `-E -P`. Reported: the median CPU time (user +
system of the compiler, steadier than wall time on a shared machine) and wall time of each, the
preprocessed line counts, and the ratios cuscope / CUDA runtime header. With --nvcc, the CPU
seconds <cuscope/cuscope.hpp> and <cuscope/kernel.hpp> add to `nvcc -c` of a one-kernel .cu, for
one architecture and per extra architecture (four -gencode against one).
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

UNITS = [
    ("empty", ""),
    ("cuda_runtime_api.h", "#include <cuda_runtime_api.h>\n"),
    ("what cuscope.hpp includes", None),  # filled in by dependencies()
    ("cuscope/cuscope.hpp", "#include <cuscope/cuscope.hpp>\n"),
    ("cuscope/kernel.hpp", "#include <cuscope/kernel.hpp>\n"),  # when the headers have it
]


def dependencies(include_dirs, cxx=None, flags=None):
    """The <...> headers that <cuscope/cuscope.hpp> includes, directly or through its own headers:
    the standard library and CUDA runtime headers that any user of cuscope pays for. With cxx,
    those the preprocessor includes (`-E -dI` keeps the #include lines it follows, under the line
    markers of the file that holds them), so that a header included only with another standard
    library, or another compiler, is left out; else every #include line."""
    root = None
    for d in include_dirs:
        if os.path.exists(os.path.join(d, "cuscope", "cuscope.hpp")):
            root = os.path.join(d, "cuscope")
    if root is None:
        raise SystemExit("compile_cost: no cuscope/cuscope.hpp under the --include directories")
    if cxx is not None:
        pre = subprocess.run([cxx] + flags + ["-E", "-dI", "-x", "c++", "-"],
                             input="#include <cuscope/cuscope.hpp>\n", stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True)
        if pre.returncode == 0:
            angle, current = [], ""
            prefix = os.path.realpath(root) + os.sep
            for line in pre.stdout.splitlines():
                marker = re.match(r'# \d+ "([^"]+)"', line)
                if marker:
                    current = os.path.realpath(marker.group(1))
                    continue
                m = re.match(r"\s*#\s*include\s*<([^>]+)>", line)
                if m and current.startswith(prefix) and m.group(1) not in angle:
                    angle.append(m.group(1))
            return "".join("#include <%s>\n" % h for h in sorted(angle))
    seen, angle, todo = set(), [], [os.path.join(root, "cuscope.hpp")]
    while todo:
        path = os.path.normpath(todo.pop())
        if path in seen:
            continue
        seen.add(path)
        with open(path) as f:
            for line in f:
                m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
                if not m:
                    continue
                if m.group(1) == '"':
                    todo.append(os.path.join(os.path.dirname(path), m.group(2)))
                elif m.group(2) not in angle:
                    angle.append(m.group(2))
    return "".join("#include <%s>\n" % h for h in sorted(angle))


def public_headers(include_dirs):
    """Every public header: include/cuscope/*.hpp (detail/ holds what users never name)."""
    for d in include_dirs:
        root = os.path.join(d, "cuscope")
        if os.path.exists(os.path.join(root, "cuscope.hpp")):
            return sorted("cuscope/" + f for f in os.listdir(root) if f.endswith(".hpp"))
    return []


def quartiles(values):
    v = sorted(values)
    if len(v) == 1:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], statistics.median(v), q[2]


def timed(cmd):
    """Runs cmd and returns (wall seconds, CPU seconds of the compiler and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace"))
        raise SystemExit("compile_cost: %s failed" % " ".join(cmd))
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cxx", default=os.environ.get("CXX") or shutil.which("g++") or "c++")
    p.add_argument("--include", action="append", default=[],
                   help="an include directory (cuscope's include/); repeatable")
    p.add_argument("--system-include", action="append", default=[],
                   help="a system include directory (the CUDA toolkit's include/); repeatable")
    p.add_argument("--runs", type=int, default=None, help="rounds (default 9, --quick 3)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument("--each-header", action="store_true",
                   help="also measure every public header alone")
    p.add_argument("--baseline", help="the --json of an earlier --each-header run to compare with")
    p.add_argument("--baseline-include", action="append", default=[],
                   help="an include directory of an earlier cuscope (in place of --include) to "
                        "measure in the same run, interleaved, and compare with; repeatable")
    p.add_argument("--nvcc", help="also measure nvcc translation units with this nvcc")
    g = p.add_argument_group("--peers: each public header beside the peer headers a user would "
                             "include instead (RMM 25.04, CCCL 3.0 and 3.5)")
    g.add_argument("--peers", action="store_true",
                   help="measure the header pairs of PEER_PAIRS instead of the tables above")
    g.add_argument("--only", help="with --peers: these cuscope headers' pairs alone "
                   "(comma-separated, cuscope/stream.hpp,...); --quick: cuscope/stream.hpp")
    g.add_argument("--cache", default=None, help="where RMM and CCCL 3.5 are downloaded and "
                   "unpacked (default ~/.cache/cuscope/peers, as host_cost.py)")
    g.add_argument("--no-download", action="store_true",
                   help="use RMM and CCCL 3.5 only if they are in the caches already")
    g.add_argument("--rmm", help="a directory holding unpacked librmm-cu12 and rapids-logger")
    g.add_argument("--cccl35", help="CCCL 3.5's include directory (holding cuda/, cub/, thrust/)")
    g.add_argument("--valgrind", default=shutil.which("valgrind"))
    g.add_argument("--no-callgrind", action="store_true",
                   help="leave out the instruction counts (CPU time and lines only)")
    g.add_argument("--jobs", type=int, default=1, help="callgrind runs at once (default 1)")
    g.add_argument("--peer-instructions-from", metavar="JSON",
                   help="take the peers' instruction counts (never cuscope's) from an earlier "
                        "--peers run's JSON where the unit's label and flags are the same and the "
                        "compiler too (callgrind's count is deterministic); the results say which")
    g.add_argument("--out", help="with --peers: write <date>-header-peers.json and .md into "
                   "this directory (benchmarks/results for a committed set)")
    a = p.parse_args()
    if a.peers:
        return peers_main(a)
    runs = a.runs or (3 if a.quick else 9)
    flags = ["-std=c++17"] + ["-I" + d for d in a.include] + \
        [f for d in a.system_include for f in ("-isystem", d)]
    version = subprocess.run([a.cxx, "--version"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.splitlines()[0]
    # With --baseline-include, every unit also runs with the earlier headers, as "baseline <unit>".
    baseline_flags = None
    if a.baseline_include:
        baseline_flags = ["-std=c++17"] + ["-I" + d for d in a.baseline_include] + \
            [f for d in a.system_include for f in ("-isystem", d)]
    flags_of = lambda name: baseline_flags if name.startswith("baseline ") else flags

    # A header of UNITS that these headers lack (kernel.hpp in an earlier cuscope) is left out.
    units = [(name, text) for name, text in UNITS
             if not name.startswith("cuscope/") or has_header(flags, name)]
    headers = []
    if a.each_header or a.baseline or a.baseline_include:
        for h in public_headers(a.include):
            if h in ("cuscope/cuscope.hpp", "cuscope/kernel.hpp"):
                continue
            # A header that needs more than these flags (Thrust without the CCCL path, say) is
            # left out and named.
            probe = subprocess.run([a.cxx] + flags + ["-fsyntax-only", "-x", "c++", "-"],
                                   input=("#include <%s>\n" % h).encode(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if probe.returncode != 0:
                print("note: %s does not compile alone with these flags; not measured" % h)
                continue
            headers.append(h)
            units.append((h, "#include <%s>\n" % h))
    if baseline_flags:
        units += [("baseline " + name, text) for name, text in units
                  if name not in ("empty", "cuda_runtime_api.h") and
                  (not name.startswith("cuscope/") or has_header(baseline_flags, name))]
    results = {}
    with tempfile.TemporaryDirectory(prefix="cuscope-compile-cost-") as work:
        files = {}
        for name, text in units:
            if text is None:
                text = dependencies(a.baseline_include if name.startswith("baseline ")
                                    else a.include, a.cxx, flags_of(name))
            path = os.path.join(work, name.replace("/", "_").replace(".", "_") + ".cpp")
            with open(path, "w") as f:
                f.write(text)
            files[name] = path
            pre = subprocess.run([a.cxx] + flags_of(name) + ["-E", "-P", path],
                                 stdout=subprocess.PIPE,
                                 universal_newlines=True, check=True).stdout
            lines = pre.splitlines()
            results[name] = {"preprocessed_lines": len(lines),
                             "preprocessed_nonblank_lines": sum(1 for l in lines if l.strip()),
                             "preprocessed_bytes": len(pre), "wall_s": [], "cpu_s": []}
        for name, _ in units:  # warm-up: the file system cache holds the headers
            timed([a.cxx] + flags_of(name) + ["-fsyntax-only", files[name]])
        for r in range(runs):
            for i in range(len(units)):
                name = units[(i + r) % len(units)][0]
                wall, cpu = timed([a.cxx] + flags_of(name) + ["-fsyntax-only", files[name]])
                results[name]["wall_s"].append(wall)
                results[name]["cpu_s"].append(cpu)

    for name, r in results.items():
        for key in ("wall_s", "cpu_s"):
            q1, med, q3 = quartiles(r[key])
            r[key.replace("_s", "_ms")] = {"median": med * 1e3, "p25": q1 * 1e3, "p75": q3 * 1e3,
                                           "n": len(r[key]),
                                           "spread_pct": (q3 - q1) / med * 100 if med else 0}
    cu, cs = results["cuda_runtime_api.h"], results["cuscope/cuscope.hpp"]
    ratios = {
        "cpu_time": cs["cpu_ms"]["median"] / cu["cpu_ms"]["median"],
        "wall_time": cs["wall_ms"]["median"] / cu["wall_ms"]["median"],
        "preprocessed_lines": cs["preprocessed_nonblank_lines"] /
        float(cu["preprocessed_nonblank_lines"]),
        "cpu_time_vs_its_includes": cs["cpu_ms"]["median"] /
        results["what cuscope.hpp includes"]["cpu_ms"]["median"],
    }
    columns = ["translation unit", "CPU time", "wall time", "preprocessed lines"]
    rows = []
    for name, _ in UNITS:
        if name not in results:
            continue
        r = results[name]
        label = "#include <%s>" % name if name.endswith((".h", ".hpp")) else "(%s)" % name
        rows.append([label,
                     "%.0f ms ±%.0f%%" % (r["cpu_ms"]["median"], r["cpu_ms"]["spread_pct"]),
                     "%.0f ms ±%.0f%%" % (r["wall_ms"]["median"], r["wall_ms"]["spread_pct"]),
                     "%d" % r["preprocessed_nonblank_lines"]])
    rows.append(["cuscope / cuda_runtime_api.h", "%.2fx" % ratios["cpu_time"],
                 "%.2fx" % ratios["wall_time"], "%.2fx" % ratios["preprocessed_lines"]])
    inc = results["what cuscope.hpp includes"]
    rows.append(["cuscope / what it includes",
                 "%.2fx" % ratios["cpu_time_vs_its_includes"],
                 "%.2fx" % (cs["wall_ms"]["median"] / inc["wall_ms"]["median"]),
                 "%.2fx" % (cs["preprocessed_nonblank_lines"] /
                            float(inc["preprocessed_nonblank_lines"]))])
    title = "compile cost: %s -std=c++17 -fsyntax-only, median of %d runs" % (version, runs)
    widths = [max(len(c), *(len(t[i]) for t in rows)) for i, c in enumerate(columns)]
    print("\n" + title)
    fmt = lambda cells: "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                                  for i, c in enumerate(cells))
    print(fmt(columns))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for t in rows:
        print(fmt(t))
    notes = ["Compiler: %s; flags: %s -fsyntax-only (preprocessed lines: -E -P, non-blank)."
             % (version, " ".join(flags)),
             "CPU time is the compiler's user + system time; the empty unit shows the fixed cost "
             "of starting the compiler; '(what cuscope.hpp includes)' includes only the standard "
             "and CUDA headers that cuscope's headers include, so the rest is cuscope's own code."]
    for line in notes:
        print("note: " + line)
    headline = [
        {"name": "compile: <cuscope/cuscope.hpp> / <cuda_runtime_api.h>, -fsyntax-only CPU time",
         "value": ratios["cpu_time"], "unit": "x"},
        {"name": "compile: <cuscope/cuscope.hpp> / <cuda_runtime_api.h>, preprocessed lines",
         "value": ratios["preprocessed_lines"], "unit": "x"},
        {"name": "compile: <cuscope/cuscope.hpp> / the standard and CUDA headers it includes, "
                 "-fsyntax-only CPU time", "value": ratios["cpu_time_vs_its_includes"], "unit": "x"},
    ]
    for h in headline:
        print("headline: %s: %.2fx" % (h["name"], h["value"]))
    tables = [{"title": title, "columns": columns, "rows": rows}]
    nvcc_results = {}
    if a.nvcc:
        nvcc_results, nvcc_table, nvcc_headline = measure_nvcc(a.nvcc, flags, runs, a.baseline,
                                                               baseline_flags)
        tables.append(nvcc_table)
        headline += nvcc_headline
    if headers:
        tables.append(header_table(results, [h for h in ("cuscope/cuscope.hpp", "cuscope/kernel.hpp")
                                             if h in results] + headers, version, runs,
                                   a.baseline, same_run=bool(baseline_flags)))
    if a.json:
        for r in results.values():
            r.pop("wall_s")
            r.pop("cpu_s")
        doc = {
            "schema": "cuscope-bench/1", "benchmark": "compile", "simulated": False,
            "quick": a.quick, "command_line": " ".join(sys.argv[1:]),
            "device": {"name": "none (host compiler)", "simulated": False},
            "build": {"compiler": version},
            "config": {"runs": runs, "flags": flags},
            "notes": notes,
            "tables": tables,
            "results": [dict(unit=name, **results[name]) for name, _ in units],
            "included_headers": re.findall(r"<([^>]+)>", dependencies(a.include, a.cxx, flags)),
            "ratios": ratios, "headline": headline,
        }
        if nvcc_results:
            doc["nvcc"] = nvcc_results
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print("wrote " + a.json)
    return 0


NVCC_KERNEL = "__global__ void scale(float* p, float by) { p[threadIdx.x] *= by; }\n"
NVCC_ARCHS = {
    "1 architecture": ["-arch=sm_90"],
    "4 architectures": ["-gencode=arch=compute_%d,code=sm_%d" % (sm, sm)
                        for sm in (80, 86, 89, 90)],
}
# The headers measured in nvcc translation units: the whole library, and the light header for
# kernel files. Targets (issue 20): at most +0.3 s for one architecture, +0.1 s per extra one.
NVCC_HEADERS = [("cuscope", "cuscope/cuscope.hpp"), ("kernel", "cuscope/kernel.hpp")]
NVCC_TARGET_ONE, NVCC_TARGET_PER_ARCH = 0.3, 0.1


def has_header(flags, header):
    """True when header is under one of the -I directories in flags."""
    return any(os.path.exists(os.path.join(f[2:], header)) for f in flags if f.startswith("-I"))


def measure_nvcc(nvcc, flags, runs, baseline=None, baseline_flags=None):
    """nvcc -c of a kernel with <cuda_runtime.h> alone, with <cuscope/cuscope.hpp> and with
    <cuscope/kernel.hpp>, for one and four architectures, interleaved in rounds. Returns (results,
    table, headline). With the JSON of an earlier run with --nvcc as baseline, its added seconds
    are shown beside; with baseline_flags (an earlier cuscope's headers), its headers (those it
    has) are measured in the same rounds."""
    lines = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE,
                           universal_newlines=True).stdout.strip().splitlines()
    version = next((l for l in lines if "release" in l), lines[-1] if lines else nvcc)
    headers = [(key, h) for key, h in NVCC_HEADERS if has_header(flags, h)]
    texts = {"runtime": "#include <cuda_runtime.h>\n" + NVCC_KERNEL}
    for key, h in headers:
        texts[key] = "#include <cuda_runtime.h>\n#include <%s>\n" % h + NVCC_KERNEL
    units = ["runtime"] + [key for key, _ in headers]
    if baseline_flags:
        units += ["%s (baseline)" % key for key, h in headers if has_header(baseline_flags, h)]
    cases = [(u, arch) for u in units for arch in NVCC_ARCHS]
    cpu = {c: [] for c in cases}
    with tempfile.TemporaryDirectory(prefix="cuscope-compile-cost-nvcc-") as work:
        paths = {}
        for name, text in texts.items():
            paths[name] = os.path.join(work, name + ".cu")
            with open(paths[name], "w") as f:
                f.write(text)
        out = os.path.join(work, "out.o")

        def command(c):
            unit, is_baseline = c[0].split(" ")[0], c[0].endswith("(baseline)")
            return [nvcc] + (baseline_flags if is_baseline else flags) + NVCC_ARCHS[c[1]] + \
                ["-c", paths[unit], "-o", out]
        for c in cases:  # warm-up
            timed(command(c))
        for r in range(runs):
            for i in range(len(cases)):
                c = cases[(i + r) % len(cases)]
                cpu[c].append(timed(command(c))[1])
    med = {c: statistics.median(v) for c, v in cpu.items()}
    one, four = list(NVCC_ARCHS)

    def added(m, unit):
        """Seconds unit adds over the runtime alone: (one architecture, per extra one)."""
        return (m[(unit, one)] - m[("runtime", one)],
                ((m[(unit, four)] - m[(unit, one)]) - (m[("runtime", four)] - m[("runtime", one)]))
                / 3)

    before = {}
    if baseline_flags:
        before = {(u.split(" ")[0], arch): med[(u, arch)] for u in units
                  if u.endswith("(baseline)") for arch in NVCC_ARCHS}
        before.update({("runtime", arch): med[("runtime", arch)] for arch in NVCC_ARCHS})
    elif baseline:
        with open(baseline) as f:
            earlier = json.load(f).get("nvcc") or {}
        for key in ["runtime"] + [k for k, _ in headers]:
            for arch in NVCC_ARCHS:
                r = earlier.get("nvcc %s, %s" % (key, arch))
                if r:
                    before[(key, arch)] = r["cpu_ms"]["median"] / 1e3
    columns = ["nvcc -c, CPU time", "<cuda_runtime.h> + kernel"]
    for key, h in headers:
        columns += ["+ <%s>" % h, "added"]
        if before:
            columns.append("baseline: added")
    rows = []
    for arch in NVCC_ARCHS:
        row = [arch, "%.2f s" % med[("runtime", arch)]]
        for key, _ in headers:
            row += ["%.2f s" % med[(key, arch)],
                    "%+.2f s" % (med[(key, arch)] - med[("runtime", arch)])]
            if before:
                row.append("%+.2f s" % (before[(key, arch)] - before[("runtime", arch)])
                           if (key, arch) in before else "(new)")
        rows.append(row)
    row = ["per extra architecture", ""]
    for key, _ in headers:
        row += ["", "%+.2f s" % added(med, key)[1]]
        if before:
            row.append("%+.2f s" % added(before, key)[1] if (key, one) in before and
                       (key, four) in before else "(new)")
    rows.append(row)
    title = "compile cost in nvcc translation units: %s, median CPU time of %d runs" % (
        version, runs)
    widths = [max(len(c), *(len(t[i]) for t in rows)) for i, c in enumerate(columns)]
    fmt = lambda cells: "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                                  for i, c in enumerate(cells))
    print("\n" + title)
    print(fmt(columns))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for t in rows:
        print(fmt(t))
    headline = []
    for key, h in headers:
        a_one, a_per_arch = added(med, key)
        headline += [
            {"name": "compile: seconds <%s> adds to an nvcc translation unit, 1 architecture, "
                     "CPU time" % h, "value": a_one, "unit": "s", "goal": "at most",
             "target": NVCC_TARGET_ONE, "meets": a_one <= NVCC_TARGET_ONE},
            {"name": "compile: seconds <%s> adds per extra nvcc architecture, CPU time" % h,
             "value": a_per_arch, "unit": "s", "goal": "at most",
             "target": NVCC_TARGET_PER_ARCH, "meets": a_per_arch <= NVCC_TARGET_PER_ARCH},
        ]
    for h in headline:
        print("headline: %s: %+.2f s (target: at most %+.1f s)" % (h["name"], h["value"],
                                                                   h["target"]))
    results = {"nvcc %s, %s" % c: {"cpu_ms": {"median": med[c] * 1e3, "n": len(cpu[c])}}
               for c in cases}
    return results, {"title": title, "columns": columns, "rows": rows}, headline


def header_table(results, headers, version, runs, baseline, same_run=False):
    """Prints and returns the table of the public headers, each alone, beside the baseline's (an
    earlier run's JSON, or the baseline headers measured in this run)."""
    before = {}
    if same_run:
        before = {name[len("baseline "):]: r for name, r in results.items()
                  if name.startswith("baseline ")}
    elif baseline:
        with open(baseline) as f:
            for r in json.load(f)["results"]:
                before[r["unit"]] = r
    columns = ["public header alone", "CPU time", "preprocessed lines"]
    if before:
        columns += ["baseline CPU time", "baseline lines", "CPU change", "lines change"]
    rows = []
    for h in headers:
        r = results[h]
        row = ["#include <%s>" % h,
               "%.0f ms ±%.0f%%" % (r["cpu_ms"]["median"], r["cpu_ms"]["spread_pct"]),
               "%d" % r["preprocessed_nonblank_lines"]]
        if before:
            b = before.get(h)
            if b is None:
                row += ["(new)", "", "", ""]
            else:
                row += ["%.0f ms ±%.0f%%" % (b["cpu_ms"]["median"], b["cpu_ms"]["spread_pct"]),
                        "%d" % b["preprocessed_nonblank_lines"],
                        "%+.1f%%" % ((r["cpu_ms"]["median"] / b["cpu_ms"]["median"] - 1) * 100),
                        "%+d" % (r["preprocessed_nonblank_lines"] -
                                 b["preprocessed_nonblank_lines"])]
        rows.append(row)
    title = "compile cost of each public header: %s -std=c++17 -fsyntax-only, median of %d runs" \
        % (version, runs)
    widths = [max(len(c), *(len(t[i]) for t in rows)) for i, c in enumerate(columns)]
    fmt = lambda cells: "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                                  for i, c in enumerate(cells))
    print("\n" + title)
    print(fmt(columns))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for t in rows:
        print(fmt(t))
    return {"title": title, "columns": columns, "rows": rows}


# --peers ------------------------------------------------------------------------------------------
#
# Each public cuscope header that a user would include instead of a peer's header, and the peer
# headers that offer the same thing, chosen by what each header declares:
#   (cuscope header, what it offers, [(configuration, peer header(s), why this peer)]).
# A configuration names the include directories of the peer's translation unit; cuscope's header
# is compiled with the same CUDA and CCCL directories (see peer_configurations), never with RMM's.
# A peer entry with several headers is one translation unit that includes them all.
PEER_PAIRS = [
    ("cuscope/device_buffer.hpp",
     "device_buffer<T>: an owning, typed, stream-ordered allocation from a pool",
     [("rmm", ["rmm/device_uvector.hpp"], "RMM's typed stream-ordered buffer, device_uvector<T>: "
               "the nearest match"),
      ("rmm", ["rmm/device_buffer.hpp"], "RMM's untyped stream-ordered buffer, which "
               "device_uvector holds"),
      ("cccl35", ["cuda/buffer"], "CCCL 3.5's cuda::buffer<T> (stream-ordered, from a memory "
                  "resource)")]),
    ("cuscope/memory_pool.hpp",
     "memory_pool and memory_pool_ref: an owning CUDA memory pool (cudaMemPool_t) with options, "
     "statistics and trim, and allocate/deallocate on a stream",
     [("rmm", ["rmm/mr/device/cuda_async_memory_resource.hpp"], "RMM's owning resource over a "
               "CUDA memory pool"),
      ("rmm", ["rmm/mr/device/cuda_async_view_memory_resource.hpp"], "RMM's resource over a "
               "pool it does not own"),
      ("cccl35", ["cuda/memory_pool"], "CCCL 3.5's cuda::device_memory_pool (with the pinned and "
                  "managed pools)")]),
    ("cuscope/memory_resource.hpp",
     "pool_resource: a memory pool as a CCCL memory resource; includes <cuda/memory_resource>, "
     "so it cannot be lighter than that header in the same CCCL",
     [("cccl30", ["cuda/memory_resource"], "CCCL 3.0's cuda::mr concepts and resource refs, which "
                  "pool_resource models (no pool resource of its own)"),
      ("cccl35", ["cuda/memory_resource"], "CCCL 3.5's cuda::mr, with cuda::device_memory_pool as "
                  "a resource: the nearest match"),
      ("rmm", ["rmm/mr/device/cuda_async_memory_resource.hpp"], "RMM's pool resource, usable "
               "through cuda::mr refs")]),
    ("cuscope/thrust.hpp",
     "thrust_allocator<T> for thrust::device_vector and thrust_policy(stream, pool)",
     [("rmm", ["rmm/mr/device/thrust_allocator_adaptor.hpp"], "RMM's mr::thrust_allocator<T>"),
      ("rmm", ["rmm/exec_policy.hpp"], "RMM's exec_policy (Thrust on a stream, temporaries "
               "from a resource)")]),
    ("cuscope/stream.hpp",
     "stream_ref (non-owning) and stream (owning), with event_ref and event (it includes "
     "event.hpp)",
     [("rmm", ["rmm/cuda_stream.hpp"], "RMM's owning cuda_stream (with cuda_stream_view)"),
      ("cccl30", ["cuda/stream_ref"], "CCCL 3.0's cuda::stream_ref (non-owning only)"),
      ("cccl35", ["cuda/stream"], "CCCL 3.5's cuda::stream, stream_ref and cuda::event")]),
    ("cuscope/event.hpp",
     "event_ref (non-owning) and event (owning), and stream_ref::wait",
     [("cccl35", ["cuda/stream"], "CCCL 3.5's cuda::event and timed_event are declared by "
                  "<cuda/stream> (there is no <cuda/event>); RMM has no event class")]),
    ("cuscope/session.hpp",
     "session: counts, budget and leak records of a piece of work's allocations, over a pool, "
     "with make_buffer",
     [("rmm", ["rmm/mr/device/statistics_resource_adaptor.hpp",
               "rmm/mr/device/tracking_resource_adaptor.hpp"],
       "what an RMM user adds for counting and leak tracking"),
      ("rmm", ["rmm/mr/device/statistics_resource_adaptor.hpp",
               "rmm/mr/device/tracking_resource_adaptor.hpp",
               "rmm/mr/device/cuda_async_memory_resource.hpp", "rmm/device_uvector.hpp"],
       "the same with the pool resource and the typed buffer that session.hpp brings too")]),
    ("cuscope/device_span.hpp",
     "device_span<T>: a non-owning view of device memory, usable in kernels",
     [("cccl30", ["cuda/std/span"], "CCCL 3.0's cuda::std::span"),
      ("cccl35", ["cuda/std/span"], "CCCL 3.5's cuda::std::span")]),
    ("cuscope/device.hpp",
     "device count, current device, and a guard that switches and restores it",
     [("rmm", ["rmm/cuda_device.hpp"], "RMM's cuda_device_id, get_current_cuda_device and "
               "cuda_set_device_raii"),
      ("cccl35", ["cuda/devices"], "CCCL 3.5's cuda::devices and device_ref")]),
    ("cuscope/pinned_memory_pool.hpp",
     "pinned_memory_pool: an owning pool of page-locked host memory with the options, statistics "
     "and trim of memory_pool",
     [("rmm", ["rmm/mr/pinned_host_memory_resource.hpp"], "RMM's pinned host resource "
               "(cudaHostAlloc, no pool)"),
      ("cccl35", ["cuda/memory_pool"], "CCCL 3.5's cuda::pinned_memory_pool (with the device and "
                  "managed pools)")]),
]
# Headers with no peer here: cuscope.hpp, batch.hpp (batch staging), recorder.hpp, report.hpp,
# trace.hpp, json_line_sink.hpp, nvtx.hpp (RMM and CCCL have no memory timeline or reports), ipc.hpp,
# graph.hpp, pinned_buffer.hpp (RMM has no pinned buffer; CCCL 3.5's cuda::buffer is measured
# beside device_buffer.hpp), kernel.hpp, testing.hpp, error.hpp, version.hpp, cuda_stream_ref.hpp.
# --quick (the ctest smoke run): this header against its first peer alone, two rounds.
PEER_QUICK_ONLY = "cuscope/device.hpp"


def peer_configurations(a):
    """{name: (label, compiler flags)} for the configurations PEER_PAIRS names whose headers are
    here, the CCCL include directory of each ({name: directory}), and {name: reason} for those that
    are not. Every configuration holds the CUDA toolkit's include directories (--system-include);
    cccl30 puts the toolkit's own CCCL (include/cccl, 3.0 in CUDA 13) ahead of them and defines
    LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE, which CCCL before 3.1 needs for cuda::mr (RMM
    25.04 and cuscope/memory_resource.hpp stop with an #error without it; cuscope's CMake
    target, pkg-config file and Conan package define it, as RMM's CMake package does); cccl35 puts
    CCCL 3.5 there instead; rmm is cccl30 with RMM's and rapids-logger's include directories
    (RMM 25.04 includes rapids_logger/logger.hpp from rmm/logger.hpp; it builds with CCCL 3.0, and
    the wheel's own CCCL 2.7 under include/rapids is not used, so that both sides of a pair
    include the same CCCL)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    import peer_deps
    # The toolkit's CCCL is include/cccl in CUDA 13 (CMake's CUDAToolkit_INCLUDE_DIRS may list it
    # too: it is taken out of the directories every configuration shares), include/ before.
    given = a.system_include or ["/usr/local/cuda/include"]
    cuda = [d for d in given if os.path.basename(os.path.normpath(d)) != "cccl"] or given
    cuda_flags = [f for d in cuda for f in ("-isystem", d)]
    cccl30 = os.path.join(cuda[0], "cccl")
    cccl30 = cccl30 if os.path.isdir(cccl30) else cuda[0]
    configs, reasons, cccl = {}, {}, {}
    v30 = peer_deps.cccl_version(cccl30)
    configs["cccl30"] = ("CCCL %s (the CUDA toolkit's)" % v30,
                         ["-DLIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE", "-isystem", cccl30] +
                         cuda_flags)
    cccl["cccl30"] = cccl30
    cache = a.cache or peer_deps.DEFAULT_CACHE
    download = not a.no_download
    if a.cccl35:
        c35 = peer_deps.find_cccl(a.cccl35)
        why = None if c35 else "no cuda/std/__cccl/version.h under " + a.cccl35
    else:
        c35, why = peer_deps.install_cccl35(cache, download)
    if c35 and not re.match(r"^3\.5\.", peer_deps.cccl_version(c35)):
        c35, why = None, "%s is CCCL %s, not 3.5" % (c35, peer_deps.cccl_version(c35))
    if c35:
        configs["cccl35"] = ("CCCL %s" % peer_deps.cccl_version(c35), ["-isystem", c35] + cuda_flags)
        cccl["cccl35"] = c35
    else:
        reasons["cccl35"] = why
    if a.rmm:
        rmm = peer_deps.find_rmm(a.rmm)
        why = None if rmm else "no rmm/device_buffer.hpp or rapids_logger under " + a.rmm
    else:
        rmm, why = peer_deps.install_rmm(cache, download)
    if rmm:
        configs["rmm"] = ("RMM 25.04 on CCCL %s" % v30,
                          ["-isystem", rmm[0], "-isystem", rmm[1]] + configs["cccl30"][1])
        cccl["rmm"] = cccl30
    else:
        reasons["rmm"] = why
    return configs, cccl, reasons, cache


def includes_under(cxx, flags, text, directory):
    """True when the translation unit text includes a file under directory."""
    dep = subprocess.run([cxx] + flags + ["-M", "-x", "c++", "-"], input=text,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         universal_newlines=True)
    prefix = os.path.join(os.path.realpath(directory), "")
    return any(os.path.realpath(w).startswith(prefix)
               for w in dep.stdout.replace("\\\n", " ").split())


def callgrind_ir(valgrind, cmd):
    """Instructions the compiler (the driver and cc1plus) executes for cmd, under callgrind."""
    with tempfile.TemporaryDirectory(prefix="cuscope-header-peers-cg-") as d:
        proc = subprocess.run([valgrind, "--tool=callgrind", "--trace-children=yes",
                               "--callgrind-out-file=" + os.path.join(d, "cg.%p")] + cmd,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              universal_newlines=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit("compile_cost: callgrind of %s failed" % " ".join(cmd))
        total = 0
        for name in os.listdir(d):
            with open(os.path.join(d, name)) as f:
                for line in f:
                    m = re.match(r"^summary:\s+(\d+)", line)
                    if m:
                        total += int(m.group(1))
        return total


def peers_main(a):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
    import peer_deps
    if not a.include:
        a.include = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "include")]
    if not a.no_callgrind and not a.valgrind:
        print("SKIPPED: valgrind not found; install it to count the compiler's instructions "
              "(or pass --no-callgrind)")
        return 77
    only = a.only or (PEER_QUICK_ONLY if a.quick else None)
    pairs = [(h, offers, peers[:1] if a.quick else peers) for h, offers, peers in PEER_PAIRS
             if only is None or h in only.split(",")]
    if not pairs:
        raise SystemExit("compile_cost: --only names no header of PEER_PAIRS")
    runs = a.runs or (2 if a.quick else 9)
    configs, cccl_dirs, missing, cache = peer_configurations(a)
    for name, why in sorted(missing.items()):
        print("note: %s left out: %s" % (name, why))
    needed = set(config for _, _, peers in pairs for config, _, _ in peers)
    if not needed - set(missing):
        print("SKIPPED: no peer of %s can be measured here (%s)" %
              (", ".join(h for h, _, _ in pairs),
               "; ".join("%s: %s" % kv for kv in sorted(missing.items()))))
        return 77
    version = subprocess.run([a.cxx, "--version"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.splitlines()[0]
    ours_flags = lambda config: ["-std=c++17"] + ["-I" + d for d in a.include] + \
        configs[config][1]
    # The translation units, by (kind, configuration, headers). cuscope's header is compiled in
    # cccl30 unless the peer's configuration is cccl35 and the header includes a CCCL header (else
    # the unit would be the same); its label names the CCCL where it includes one.
    units, order = {}, []

    def unit(kind, config, headers):
        text = "".join("#include <%s>\n" % h for h in headers)
        if kind == "cuscope":
            uses_cccl = {c: includes_under(a.cxx, ours_flags(c), text, cccl_dirs[c])
                         for c in ("cccl30", "cccl35") if c in configs}
            config = "cccl35" if config == "cccl35" and uses_cccl["cccl35"] else "cccl30"
            flags, named = ours_flags(config), uses_cccl[config]
        else:
            flags, named = ["-std=c++17"] + configs[config][1], True
        key = (kind, config, tuple(headers))
        if key not in units:
            label = " + ".join("<%s>" % h for h in headers)
            if named:
                label += " [%s]" % configs[config][0]
            units[key] = {"label": label, "kind": kind, "configuration": config,
                          "headers": list(headers), "flags": flags, "text": text,
                          "cpu_s": [], "wall_s": []}
            order.append(key)
        return key

    table_pairs = []
    for header, offers, peers in pairs:
        for config, headers, why in peers:
            if config not in configs:
                continue
            table_pairs.append({"cuscope": header, "offers": offers, "why": why,
                                "ours": unit("cuscope", config, [header]),
                                "peer": unit("peer", config, headers)})
    # With --baseline-include, each of cuscope's units again with the earlier headers, in the same
    # rounds: what a change to the headers moved.
    baseline = {}
    if a.baseline_include:
        for key in [k for k in order if units[k]["kind"] == "cuscope"]:
            u = units[key]
            bkey = ("baseline",) + key[1:]
            units[bkey] = dict(u, label="baseline " + u["label"], kind="baseline",
                               flags=["-std=c++17"] + ["-I" + d for d in a.baseline_include] +
                               configs[u["configuration"]][1], cpu_s=[], wall_s=[])
            order.append(bkey)
            baseline[key] = bkey
    units[("empty", "cccl30", ())] = {"label": "(empty file)", "kind": "empty",
                                      "configuration": "cccl30", "headers": [],
                                      "flags": ["-std=c++17"] + configs["cccl30"][1], "text": "",
                                      "cpu_s": [], "wall_s": []}
    order.append(("empty", "cccl30", ()))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    home = os.path.expanduser("~")
    replacements = sorted([(os.path.realpath(cache), "<cache>"), (os.path.abspath(cache), "<cache>"),
                           (os.path.join(root, ""), ""), (root, "."),
                           (os.path.join(home, ""), "~/")] +
                          [(d, "<cuda-include>") for d in (a.system_include or
                                                           ["/usr/local/cuda/include"])],
                          key=lambda p: len(p[0]), reverse=True)
    load_before = peer_deps.load_average()
    with tempfile.TemporaryDirectory(prefix="cuscope-header-peers-") as work:
        for i, key in enumerate(order):
            u = units[key]
            u["path"] = os.path.join(work, "unit%d.cpp" % i)
            with open(u["path"], "w") as f:
                f.write(u["text"])
            u["command"] = [a.cxx] + u["flags"] + ["-fsyntax-only", u["path"]]
            pre = subprocess.run([a.cxx] + u["flags"] + ["-E", "-P", u["path"]],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 universal_newlines=True)
            if pre.returncode != 0:
                sys.stderr.write(pre.stderr)
                raise SystemExit("compile_cost: %s does not preprocess alone" % u["label"])
            u["preprocessed_nonblank_lines"] = sum(1 for l in pre.stdout.splitlines() if l.strip())
            timed(u["command"])  # warm-up, and the check that it compiles alone
        print("compile_cost: %d translation units, %d rounds" % (len(order), runs))
        for r in range(runs):
            for i in range(len(order)):
                u = units[order[(i + r) % len(order)]]
                wall, cpu = timed(u["command"])
                u["wall_s"].append(wall)
                u["cpu_s"].append(cpu)
        reused = {}
        if a.peer_instructions_from and not a.no_callgrind:
            with open(a.peer_instructions_from) as f:
                earlier = json.load(f)
            if earlier["build"]["compiler"] != version:
                raise SystemExit("compile_cost: %s was measured with %s" %
                                 (a.peer_instructions_from, earlier["build"]["compiler"]))
            scrub = peer_deps.scrub_paths
            for key in order:
                u = units[key]
                if u["kind"] not in ("peer", "empty"):
                    continue
                for e in earlier["results"]:
                    if e["label"] == u["label"] and e["flags"] == scrub(u["flags"], replacements) \
                            and "instructions" in e:
                        u["instructions"] = e["instructions"]
                        u["instructions_from"] = os.path.basename(a.peer_instructions_from)
                        reused[key] = e["instructions"]
        if not a.no_callgrind:
            todo = [k for k in order if k not in reused]
            print("compile_cost: callgrind, %d translation units, %d at once (%d counts taken "
                  "from %s)" % (len(todo), a.jobs, len(reused), a.peer_instructions_from))
            import concurrent.futures

            def count(key):
                ir = callgrind_ir(a.valgrind, units[key]["command"])
                print("compile_cost: %6.0f M instructions: %s" % (ir / 1e6, units[key]["label"]))
                sys.stdout.flush()
                return ir
            with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
                for key, ir in zip(todo, pool.map(count, todo)):
                    units[key]["instructions"] = ir
    load_after = peer_deps.load_average()
    for u in units.values():
        for key in ("wall_s", "cpu_s"):
            q1, med, q3 = quartiles(u.pop(key))
            u[key.replace("_s", "_ms")] = {"median": med * 1e3, "p25": q1 * 1e3, "p75": q3 * 1e3,
                                           "spread_pct": (q3 - q1) / med * 100 if med else 0}
        u.pop("path")
        u.pop("command")

    ratio = lambda x, y: x / float(y) if y else None
    columns = ["cuscope header", "peer header (configuration)", "instructions", "peer",
               "ratio", "CPU time", "peer", "ratio", "lines", "peer", "ratio"]
    rows, results_pairs = [], []
    ir = lambda u: "%.0f M" % (u["instructions"] / 1e6) if "instructions" in u else "-"
    cpu = lambda u: "%.0f ms ±%.0f%%" % (u["cpu_ms"]["median"], u["cpu_ms"]["spread_pct"])
    for tp in table_pairs:
        o, q = units[tp["ours"]], units[tp["peer"]]
        r = {"cuscope": tp["cuscope"], "cuscope_unit": o["label"], "peer": q["label"],
             "offers": tp["offers"], "why": tp["why"],
             "cpu_ratio": ratio(o["cpu_ms"]["median"], q["cpu_ms"]["median"]),
             "lines_ratio": ratio(o["preprocessed_nonblank_lines"],
                                  q["preprocessed_nonblank_lines"])}
        if "instructions" in o:
            r["instructions_ratio"] = ratio(o["instructions"], q["instructions"])
        results_pairs.append(r)
        rows.append([o["label"], q["label"], ir(o), ir(q),
                     "%.2fx" % r["instructions_ratio"] if "instructions_ratio" in r else "-",
                     cpu(o), cpu(q), "%.2fx" % r["cpu_ratio"],
                     "%d" % o["preprocessed_nonblank_lines"],
                     "%d" % q["preprocessed_nonblank_lines"], "%.2fx" % r["lines_ratio"]])
    title = ("each public header against the peer headers a user would include instead: %s "
             "-std=c++17 -fsyntax-only, instructions (callgrind), CPU time (median of %d "
             "interleaved rounds, ± interquartile range / median) and preprocessed non-blank lines; "
             "ratio = cuscope / peer" % (version, runs))
    widths = [max(len(c), *(len(t[i]) for t in rows)) for i, c in enumerate(columns)]
    fmt = lambda cells: "  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i])
                                  for i, c in enumerate(cells))
    print("\n" + title)
    print(fmt(columns))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for t in rows:
        print(fmt(t))
    tables = [{"title": title, "columns": columns, "rows": rows}]
    if baseline:
        bcolumns = ["cuscope header", "instructions", "baseline", "change", "CPU time", "baseline",
                    "change", "lines", "baseline"]
        brows = []
        for key, bkey in baseline.items():
            o, b = units[key], units[bkey]
            change = lambda x, y: "%+.1f%%" % ((x / float(y) - 1) * 100) if y else "-"
            brows.append([o["label"],
                          ir(o), ir(b),
                          change(o["instructions"], b["instructions"])
                          if "instructions" in o else "-",
                          cpu(o), cpu(b), change(o["cpu_ms"]["median"], b["cpu_ms"]["median"]),
                          "%d" % o["preprocessed_nonblank_lines"],
                          "%d" % b["preprocessed_nonblank_lines"]])
        btitle = ("cuscope's headers against the baseline headers (%s), the same rounds" %
                  " ".join(a.baseline_include))
        bw = [max(len(c), *(len(t[i]) for t in brows)) for i, c in enumerate(bcolumns)]
        bfmt = lambda cells: "  ".join(c.ljust(bw[i]) if i < 1 else c.rjust(bw[i])
                                       for i, c in enumerate(cells))
        print("\n" + btitle)
        print(bfmt(bcolumns))
        print("-" * (sum(bw) + 2 * (len(bw) - 1)))
        for t in brows:
            print(bfmt(t))
        tables.append({"title": btitle, "columns": bcolumns, "rows": brows})
    key = "instructions_ratio" if not a.no_callgrind else "cpu_ratio"
    what = "instructions" if not a.no_callgrind else "CPU time"
    headline = [{"name": "header peers: %s / %s, %s" % (r["cuscope_unit"], r["peer"], what),
                 "value": r[key], "unit": "x", "goal": "below", "target": 1.0,
                 "meets": r[key] < 1.0} for r in results_pairs]
    heavier = [h for h in headline if not h["meets"]]
    headline.append({"name": "header peers: pairs where the cuscope header is heavier (%s)" % what,
                     "value": len(heavier), "unit": "of %d" % len(results_pairs)})
    for h in headline:
        print("headline: %s: %s" % (h["name"], ("%.2fx" % h["value"]) if h["unit"] == "x"
                                    else "%d %s" % (h["value"], h["unit"])))
    empty = units[("empty", "cccl30", ())]
    notes = ["Each translation unit holds only its #include lines; cuscope's header is compiled "
             "with the same CUDA and CCCL include directories as the peer (RMM's directories are "
             "given to RMM's units alone).",
             "An empty file: %s, %.0f ms (the compiler's fixed cost, in every figure)." %
             ("%.0f M instructions" % (empty["instructions"] / 1e6) if "instructions" in empty
              else "-", empty["cpu_ms"]["median"])]
    notes += ["%s left out: %s" % kv for kv in sorted(missing.items())]
    taken = [units[k]["label"] for k in order if "instructions_from" in units[k]]
    if taken:
        notes.append("The instruction counts of %d units of the peers (%s) are those an earlier run of "
                     "this script measured (%s: same compiler, same headers, same flags; "
                     "callgrind's count is deterministic); every other figure, and every count "
                     "of cuscope's headers, is this run's." %
                     (len(taken), "; ".join(taken), os.path.basename(a.peer_instructions_from)))
    for line in notes:
        print("note: " + line)
    doc = {"schema": "cuscope-bench/1", "benchmark": "header-peers", "simulated": False,
           "quick": a.quick, "command_line": " ".join(sys.argv[1:]),
           "device": {"name": "none (host compiler)", "simulated": False},
           "build": {"compiler": version},
           "machine": {"cpu": peer_deps.cpu_model(), "cpu_count": os.cpu_count(),
                       "load_average": {"start": load_before, "end": load_after},
                       "valgrind": subprocess.run([a.valgrind, "--version"],
                                                  stdout=subprocess.PIPE,
                                                  universal_newlines=True).stdout.strip()
                       if a.valgrind else None,
                       "commit": git_commit()},
           "config": {"runs": runs, "configurations": {k: {"label": v[0], "flags": v[1]}
                                                       for k, v in configs.items()},
                      "left_out": missing},
           "notes": notes, "tables": tables,
           "pairs": results_pairs, "results": [units[k] for k in order],
           "headline": headline}
    doc = peer_deps.scrub_paths(doc, replacements)
    paths = []
    if a.json:
        paths.append(a.json)
    if a.out:
        if a.quick:
            raise SystemExit("compile_cost: --quick is a smoke run: it writes no results set")
        stem = os.path.join(a.out, "%s-header-peers" % time.strftime("%Y-%m-%d", time.gmtime()))
        paths.append(stem + ".json")
        write_peers_markdown(doc, stem + ".md")
        print("wrote " + stem + ".md")
    for path in paths:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print("wrote " + path)
    return 0


def git_commit():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(["git", "-C", root, "log", "-1", "--format=%h", "--abbrev=12", "--",
                           "include"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True)
    changed = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "include"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True).stdout.strip()
    c = proc.stdout.strip() or "unknown"
    return c + (" (with uncommitted changes to include/)" if changed else "")


def write_peers_markdown(doc, path):
    m = doc["machine"]
    out = ["# Each public header against its peers: instructions, CPU time, lines", "",
           "Written by `benchmarks/compile_cost.py --peers` (the JSON beside this file holds "
           "everything).", "",
           "```sh", "python3 benchmarks/compile_cost.py " + doc["command_line"], "```", "",
           "| machine | |", "|---|---|",
           "| CPU | %s (%d logical CPUs) |" % (m["cpu"], m["cpu_count"]),
           "| load average (1 min) | %.1f at the start, %.1f at the end |" %
           (m["load_average"]["start"][0], m["load_average"]["end"][0]),
           "| compiler | %s, `-std=c++17 -fsyntax-only` |" % doc["build"]["compiler"],
           "| valgrind | %s |" % m["valgrind"],
           "| cuscope | %s |" % m["commit"], ""]
    out += ["| configuration | include directories and defines |", "|---|---|"]
    for k, v in sorted(doc["config"]["configurations"].items()):
        out.append("| %s: %s | `%s` |" % (k, v["label"], " ".join(v["flags"])))
    for k, why in sorted(doc["config"]["left_out"].items()):
        out.append("| %s | left out: %s |" % (k, why))
    t = doc["tables"][0]
    out += ["", t["title"] + ".", "",
            "| " + " | ".join(t["columns"]) + " |",
            "|" + "|".join(["---"] * 2 + ["---:"] * (len(t["columns"]) - 2)) + "|"]
    code = lambda text: "`%s`" % text  # labels hold <...>, which Markdown would take for HTML
    for r in t["rows"]:
        out.append("| " + " | ".join([code(r[0]), code(r[1])] + r[2:]) + " |")
    for t in doc["tables"][1:]:
        out += ["", t["title"] + ".", "",
                "| " + " | ".join(t["columns"]) + " |",
                "|" + "|".join(["---"] + ["---:"] * (len(t["columns"]) - 1)) + "|"]
        for r in t["rows"]:
            out.append("| " + " | ".join([code(r[0])] + r[1:]) + " |")
    out += ["", "## Why these pairs", ""]
    seen = set()
    for p in doc["pairs"]:
        if p["cuscope"] not in seen:
            seen.add(p["cuscope"])
            out.append("- `<%s>`: %s." % (p["cuscope"], p["offers"]))
        out.append("  - %s: %s." % (code(p["peer"]), p["why"]))
    out += ["", "## Notes", ""] + ["- " + n for n in doc["notes"]]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
