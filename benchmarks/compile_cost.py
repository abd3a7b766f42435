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
    a = p.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
