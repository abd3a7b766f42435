#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The host cost of an allocate/free pair: cuscope against CCCL and RMM, in one program.

Builds host_cost_bench.cpp (beside this script) with -O2 against cuscope's simulated device and
runs it twice:
  - under valgrind's callgrind, once per function and pair count (N and 2N), counting only the
    instructions inside host_cost_<function>_pairs: instructions per pair = (Ir(2N) - Ir(N)) / N,
    deterministic, whatever the machine's load;
  - on its own, timing every function with the host clock, interleaved in rounds (on the
    simulated device this times the simulation too: the instruction counts are the steady figure).
Reports, per function, instructions per pair, instructions added over the raw runtime loop (which
checks each status inline, as the libraries do), the ratio of that added cost to cuscope's
corresponding path, and the time per pair with its ratio to raw.

The peers: CCCL's cuda::mr::async_resource_ref (CCCL 3.0, from the CUDA toolkit's include/cccl)
over cuscope's pool_resource and over a minimal pool resource; RMM 25.04 (the last release whose
C++ library is header-only: librmm-cu12 25.4.0 from PyPI, with the compiled rapids-logger it
needs, rapids-logger 0.1.19) with cuda_async_view_memory_resource, device_buffer, and the
statistics and tracking adaptors as the equivalent of a session's accounting. RMM is downloaded
with pip into --cache unless --rmm names an unpacked copy; offline, or with --no-rmm, the RMM
rows are skipped with a message.

With --out DIR it writes the results file set into DIR: <date>-host-cost.json (everything, with
the machine: CPU model and count, compiler, valgrind, commit), <date>-host-cost.md (the tables)
and <date>-host-cost.png (a bar plot of the ratios; needs matplotlib). --png FILE writes only the
plot, --json FILE only the JSON.

Exit code 77 (reported as Skipped by ctest) when valgrind is not installed.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RMM_WHEELS = ["librmm-cu12==25.4.0", "rapids-logger==0.1.19"]

# For each peer path, the cuscope path it is compared with (the ratio of added instructions).
COUNTERPART = {
    "rmm_resource": "pool",
    "rmm_buffer": "buffer",
    "rmm_statistics_buffer": "session",
    "rmm_tracking_buffer": "session",
    "cccl_minimal_ref": "pool_resource_ref",
}


def log(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def find_rmm(directory):
    """(rmm include dir, rapids_logger include dir, rapids_logger lib dir) under an unpacked
    librmm-cu12 + rapids-logger, or None."""
    inc = glob.glob(os.path.join(directory, "**", "include", "rmm", "device_buffer.hpp"),
                    recursive=True)
    logger = glob.glob(os.path.join(directory, "**", "include", "rapids_logger", "logger.hpp"),
                       recursive=True)
    lib = glob.glob(os.path.join(directory, "**", "librapids_logger.so"), recursive=True)
    if not (inc and logger and lib):
        return None
    up = lambda p, n: os.path.abspath(os.path.join(p, *([".."] * n)))
    return up(inc[0], 2), up(logger[0], 2), os.path.dirname(os.path.abspath(lib[0]))


def install_rmm(cache):
    """Downloads and unpacks the RMM wheels into cache; returns find_rmm's answer or a reason."""
    found = find_rmm(cache)
    if found:
        return found, None
    os.makedirs(cache, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d",
           cache] + RMM_WHEELS
    log("host_cost: downloading RMM: " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "pip download failed: %s" % e
    if proc.returncode != 0:
        return None, "pip download failed (offline?): " + proc.stdout.strip().splitlines()[-1]
    import zipfile
    for wheel in glob.glob(os.path.join(cache, "*.whl")):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(os.path.join(cache, "unpacked"))
    found = find_rmm(cache)
    if not found:
        return None, "the downloaded wheels hold no rmm/device_buffer.hpp or librapids_logger.so"
    return found, None


def cccl_version(cccl):
    """"3.0.1" from CCCL's version header, or "unknown"."""
    try:
        with open(os.path.join(cccl, "cuda", "std", "__cccl", "version.h")) as f:
            m = re.search(r"#define CCCL_VERSION (\d+)", f.read())
        v = int(m.group(1))
        return "%d.%d.%d" % (v // 1000000, v // 1000 % 1000, v % 1000)
    except (OSError, AttributeError):
        return "unknown"


def build(a, rmm, out):
    sim_lib = a.sim_lib or os.path.join(a.build, "sim", "libcuscope_sim.a")
    if not os.path.exists(sim_lib):
        raise SystemExit("host_cost: %s does not exist: build the simulated device first "
                         "(cmake --build %s --target cuscope_sim_runtime)" % (sim_lib, a.build))
    # -fno-ipa-icf: the measured functions that share a body stay apart, each under its name.
    cmd = [a.cxx, "-std=c++17", "-O2", "-fno-ipa-icf", "-DCUSCOPE_BENCH_SIMULATED=1",
           "-DLIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE",
           "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "sim", "include"),
           "-I" + os.path.join(ROOT, "benchmarks")]
    libs = []
    if rmm:
        cmd += ["-DCUSCOPE_PEER_RMM=1", "-I" + rmm[0], "-I" + rmm[1]]
        libs = ["-L" + rmm[2], "-lrapids_logger", "-Wl,-rpath," + rmm[2]]
    cmd += ["-isystem", a.cccl, "-isystem", a.cuda_include,
            os.path.join(HERE, "host_cost_bench.cpp"), "-o", out,
            "-Wl,--whole-archive", sim_lib, "-Wl,--no-whole-archive"] + libs + \
        ["-lpthread", "-ldl", "-lrt"]
    log("host_cost: building: " + " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit("host_cost: the build failed")
    return cmd


def count_ir(valgrind, exe, name, pairs, work):
    out = os.path.join(work, "callgrind.%s.%d.out" % (name, pairs))
    cmd = [valgrind, "--tool=callgrind", "--callgrind-out-file=" + out, "--collect-atstart=no",
           "--toggle-collect=*host_cost_%s_pairs*" % name, exe, "--only", name,
           "--pairs", str(pairs)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit("host_cost: %s failed (exit code %d)" % (" ".join(cmd), proc.returncode))
    ir = None
    with open(out) as f:
        for line in f:
            m = re.match(r"^(summary|totals):\s+(\d+)", line)
            if m:
                ir = int(m.group(2))
    if not ir:
        raise SystemExit("host_cost: no instructions counted in host_cost_%s_pairs" % name)
    return ir


TEXT_COLUMNS = ("function", "what", "added vs cuscope", "configuration")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit_info():
    """The commit measured, and whether the files the benchmark builds differ from it."""
    def git(*args):
        proc = subprocess.run(["git", "-C", ROOT] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, universal_newlines=True)
        return proc.stdout.strip() if proc.returncode == 0 else None
    commit = git("rev-parse", "--short=12", "HEAD")
    if commit is None:
        return {"commit": "unknown (not a git checkout)", "modified": None}
    changed = git("status", "--porcelain", "--", "include", "sim", "benchmarks")
    return {"commit": commit, "modified": bool(changed)}


def machine_info(a, cxx_version, valgrind_version):
    c = commit_info()
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "system": "%s %s" % (platform.system(), platform.release()),
            "compiler": cxx_version, "compiler_path": a.cxx, "valgrind": valgrind_version,
            "python": platform.python_version(), "commit": c["commit"],
            "commit_modified": c["modified"]}


def write_markdown(doc, path):
    m = doc["machine"]
    out = ["# Host cost of an allocate/free pair: cuscope, CCCL and RMM", "",
           "%s, %s. Written by `benchmarks/peers/host_cost.py %s`." % (
               doc["date_utc"][:10], "simulated device (eager mode)", doc["command_line"]), "",
           "| machine | |", "|---|---|",
           "| CPU | %s (%s logical CPUs, %s) |" % (m["cpu"], m["cpu_count"], m["machine"]),
           "| system | %s, Python %s |" % (m["system"], m["python"]),
           "| compiler | %s, `-O2` |" % m["compiler"],
           "| valgrind | %s |" % m["valgrind"],
           "| cuscope | %s%s |" % (m["commit"], " with uncommitted changes to the measured files"
                                  if m["commit_modified"] else ""),
           "| CCCL | %s |" % ", ".join("%s (%s)" % (c["version"], c["path"])
                                       for c in doc["config"]["cccl_all"]),
           "| RMM | %s |" % (", ".join(doc["config"]["rmm"]) if doc["config"]["rmm"]
                             else "not measured"), ""]
    for t in doc["tables"]:
        out += ["## " + t["title"], "",
                "| " + " | ".join(t["columns"]) + " |",
                "|" + "|".join("---" if c in TEXT_COLUMNS else "---:" for c in t["columns"]) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in t["rows"]]
        out.append("")
    out += ["## Notes", ""] + ["- " + n for n in doc["notes"]] + [""]
    if doc["headline"]:
        out += ["## Headline", "", "| figure | value | detail |", "|---|---:|---|"]
        out += ["| %s | %.2f%s | %s |" % (h["name"], h["value"], h["unit"], h.get("detail", ""))
                for h in doc["headline"]]
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out))


def write_png(doc, path):
    """Bar plot of the ratios: each peer's added instructions against cuscope's path doing the
    same job, then each path's added instructions over the raw loop."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("host_cost: the PNG needs matplotlib (apt-get install python3-matplotlib, "
                         "or scripts/install-deps.sh --tests); run with a Python that has it")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    ratios = [r for r in doc["results"] if r.get("added_ratio") is not None]
    if ratios:
        panels.append(("peer's added instructions / cuscope's, per pair (callgrind; >1: cuscope "
                       "is lighter)", [("%s / %s" % (r["label"], r["compared_with"]),
                                        r["added_ratio"]) for r in ratios], True))
    panels.append(("added instructions per pair over the raw loop (callgrind)",
                   [(r["label"], r["added_instructions"]) for r in doc["results"]
                    if r["function"] != "raw"], False))
    heights = [len(p[1]) for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 0.36 * sum(heights) + 1.5 * len(panels)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (title, bars, is_ratio) in zip(axes[:, 0], panels):
        names = [b[0] for b in bars][::-1]
        values = [b[1] for b in bars][::-1]
        y = range(len(bars))
        if is_ratio:
            ax.set_xscale("log")
            ax.axvline(1.0, color="black", linewidth=0.8)
            colors = ["#2e7d32" if v >= 1 else "#c62828" for v in values]
            ax.barh(y, [v - 1.0 for v in values], left=1.0, color=colors, height=0.6)
            ax.set_xlim(min(values + [1.0]) / 2, max(values + [1.0]) * 4)
            for i, v in enumerate(values):
                ax.text(v * 1.08 if v >= 1 else 1.08, i, "%.2fx" % v, va="center", fontsize=8)
        else:
            colors = ["#1565c0" if not n.startswith(("rmm", "cccl")) else "#78909c"
                      for n in names]
            ax.barh(y, values, color=colors, height=0.6)
            ax.set_xlim(min(0, min(values)) * 1.3, max(values) * 1.25)
            for i, v in enumerate(values):
                ax.text(max(v, 0) + max(values) * 0.01, i, "%+.0f" % v, va="center", fontsize=8)
        ax.set_yticks(list(y))
        ax.set_yticklabels(names, fontsize=8)
        ax.set_title(title, fontsize=9, loc="left")
    m = doc["machine"]
    fig.suptitle("cuscope host cost of a 256-byte allocate/free pair, %s\n%s, %s cores, %s, %s, "
                 "cuscope %s" % (doc["date_utc"][:10], m["cpu"], m["cpu_count"],
                                 m["compiler"].split(" (")[0], m["valgrind"], m["commit"]),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(title, columns, rows):
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    fmt = lambda cells: "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                                  for i, c in enumerate(cells))
    log("\n" + title)
    log(fmt(columns))
    log("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in rows:
        log(fmt(r))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "test"),
                   help="a cuscope build directory with the simulated device built "
                        "(sim/libcuscope_sim.a); default build/test")
    p.add_argument("--sim-lib", help="the simulated device's archive (default "
                   "<build>/sim/libcuscope_sim.a)")
    p.add_argument("--cxx", default=os.environ.get("CXX") or shutil.which("g++") or "c++")
    p.add_argument("--cuda-include", default="/usr/local/cuda/include")
    p.add_argument("--cccl", default=None, help="CCCL's include directory (default "
                   "<cuda-include>/cccl when it exists, else <cuda-include>)")
    p.add_argument("--rmm", help="a directory holding unpacked librmm-cu12 and rapids-logger")
    p.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "cuscope",
                                                   "peers"),
                   help="where the RMM wheels are downloaded and unpacked")
    p.add_argument("--no-rmm", action="store_true", help="leave RMM out")
    p.add_argument("--pairs", type=int, default=None, help="N (default 5000, --quick 500)")
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 21)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument("--png", help="write the plot of the ratios to this file (needs matplotlib)")
    p.add_argument("--out", help="write <date>-host-cost.json, .md and .png into this directory "
                   "(benchmarks/results for a committed set)")
    p.add_argument("--valgrind", default=shutil.which("valgrind"))
    a = p.parse_args()
    if a.out and a.quick:
        p.error("--quick is a smoke run: it writes no results set (--out)")
    if a.cccl is None:
        cccl = os.path.join(a.cuda_include, "cccl")
        a.cccl = cccl if os.path.isdir(cccl) else a.cuda_include
    if not a.valgrind:
        log("SKIPPED: valgrind not found; install it to count instructions")
        return 77
    n = a.pairs or (500 if a.quick else 5000)
    rounds = a.rounds or (3 if a.quick else 21)

    rmm, rmm_reason = None, None
    if a.no_rmm:
        rmm_reason = "left out (--no-rmm)"
    elif a.rmm:
        rmm = find_rmm(a.rmm)
        if not rmm:
            rmm_reason = "no rmm/device_buffer.hpp or librapids_logger.so under " + a.rmm
    else:
        rmm, rmm_reason = install_rmm(a.cache)
    if rmm_reason:
        log("host_cost: RMM skipped: " + rmm_reason)

    with tempfile.TemporaryDirectory(prefix="cuscope-host-cost-") as work:
        exe = os.path.join(work, "host_cost_bench")
        build_cmd = build(a, rmm, exe)
        listing = subprocess.run([exe, "--list", "1"], stdout=subprocess.PIPE,
                                 universal_newlines=True, check=True).stdout
        functions = [tuple(l.split("\t", 1)) for l in listing.splitlines() if "\t" in l]
        counts = {}
        for name, _ in functions:
            ir1 = count_ir(a.valgrind, exe, name, n, work)
            ir2 = count_ir(a.valgrind, exe, name, 2 * n, work)
            counts[name] = (ir2 - ir1) / float(n)
        timing_json = os.path.join(work, "timing.json")
        timed_pairs = 20 * n if not a.quick else n
        timing_cmd = [exe, "--pairs", str(timed_pairs), "--rounds", str(rounds),
                      "--json", timing_json]
        proc = subprocess.run(timing_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout)
            raise SystemExit("host_cost: the timing run failed")
        with open(timing_json) as f:
            timing = {r["function"]: r for r in json.load(f)["results"]}
    version = subprocess.run([a.valgrind, "--version"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.strip()
    cxx_version = subprocess.run([a.cxx, "--version"], stdout=subprocess.PIPE,
                                 universal_newlines=True).stdout.splitlines()[0]

    raw_ir = counts["raw"]
    raw_ns = timing["raw"]["median"]
    results, rows = [], []
    for name, what in functions:
        added = counts[name] - raw_ir
        r = {"function": name, "label": name, "what": what,
             "instructions_per_pair": counts[name],
             "added_instructions": added, "ns_per_pair": timing[name]["median"],
             "ns_spread_pct": timing[name].get("spread_pct"),
             "time_ratio_to_raw": timing[name]["median"] / raw_ns}
        versus = ""
        if name in COUNTERPART and name in counts:
            base = counts[COUNTERPART[name]] - raw_ir
            r["compared_with"] = COUNTERPART[name]
            r["added_ratio"] = added / base if base > 0 else None
            if r["added_ratio"] is not None:
                versus = "%.2fx %s" % (r["added_ratio"], COUNTERPART[name])
        results.append(r)
        rows.append([name, what, "%.0f" % counts[name], "%+.0f" % added, versus,
                     "%.0f ns ±%.0f%%" % (r["ns_per_pair"], r["ns_spread_pct"] or 0),
                     "%.2fx" % r["time_ratio_to_raw"]])
    columns = ["function", "what", "Ir per pair", "added over raw", "added vs cuscope",
               "time per pair", "time / raw"]
    title = ("host cost of a 256-byte allocate/free pair from an explicit pool, simulated device "
             "(callgrind Ir, N=%d and 2N; time: median of %d interleaved rounds)" % (n, rounds))
    print_table(title, columns, rows)
    notes = [
        "Instructions: %s --tool=callgrind --collect-atstart=no "
        "--toggle-collect='*host_cost_<function>_pairs*', per pair = (Ir(2N) - Ir(N)) / N; "
        "built with %s -O2." % (version, cxx_version),
        "The raw loop's own count is mostly the simulated runtime's; 'added over raw' is the "
        "library's own code plus any extra runtime calls it makes (counted at the simulated "
        "runtime's price). Time on the simulated device includes the simulation; it is the median "
        "of %d interleaved rounds of %d pairs, ± the interquartile range over the median, on a "
        "machine that may be loaded: secondary to the instruction counts." % (rounds, timed_pairs),
        "'added vs cuscope' divides a peer's added instructions by those of the cuscope path "
        "doing the same job: RMM's view resource against memory_pool, RMM's device_buffer "
        "against device_buffer, RMM's device_buffer through an accounting adaptor against "
        "session::make_buffer, CCCL's resource_ref over a minimal resource against the same ref "
        "over cuscope's pool_resource.",
    ]
    if rmm_reason:
        notes.append("RMM: " + rmm_reason)
    else:
        notes.append("RMM: librmm-cu12 25.4.0 (header-only C++) with rapids-logger 0.1.19, "
                     "compiled against CCCL %s." % cccl_version(a.cccl))
    for line in notes:
        log("note: " + line)
    headline = []
    for r in results:
        if r.get("added_ratio") is not None:
            headline.append({
                "name": "host cost: added instructions per pair, %s / cuscope %s (callgrind)"
                        % (r["function"], r["compared_with"]),
                "value": r["added_ratio"], "unit": "x",
                "detail": "%s: %+.0f, %s: %+.0f instructions over the raw loop" % (
                    r["function"], r["added_instructions"], r["compared_with"],
                    counts[r["compared_with"]] - raw_ir)})
    for h in headline:
        log("headline: %s: %.2fx" % (h["name"], h["value"]))
    date = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {
        "schema": "cuscope-bench/1", "benchmark": "host_cost", "simulated": True,
        "quick": a.quick, "command_line": " ".join(sys.argv[1:]), "date_utc": date,
        "device": {"name": "cuscope simulated device", "simulated": True},
        "machine": machine_info(a, cxx_version, version),
        "build": {"compiler": cxx_version, "valgrind": version, "command": build_cmd},
        "config": {"pairs": n, "rounds": rounds, "bytes": 256,
                   "rmm": None if rmm_reason else RMM_WHEELS,
                   "cccl": {"path": a.cccl, "version": cccl_version(a.cccl)},
                   "cccl_all": [{"path": a.cccl, "version": cccl_version(a.cccl)}]},
        "notes": notes,
        "tables": [{"title": title, "columns": columns, "rows": rows}],
        "results": results, "headline": headline,
    }
    outputs = []
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        stem = os.path.join(a.out, date[:10] + "-host-cost")
        outputs = [("json", stem + ".json"), ("md", stem + ".md"), ("png", stem + ".png")]
    if a.json:
        outputs.append(("json", a.json))
    if a.png:
        outputs.append(("png", a.png))
    for kind, path in outputs:
        if kind == "json":
            with open(path, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
        elif kind == "md":
            write_markdown(doc, path)
        else:
            write_png(doc, path)
        log("wrote " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
