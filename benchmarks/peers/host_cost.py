#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The host cost of an allocate/free pair: cuscope against CCCL and RMM, in one program.

Builds host_cost_bench.cpp (beside this script) with -O2 and links it twice: against cuscope's
simulated device, and against the no-op runtime (noop_runtime.cpp beside this script, archived
into a static library and linked with -Wl,--wrap: its cudaMallocFromPoolAsync and cudaFreeAsync
hand out slices of a per-thread arena and do nothing else; the rest of the runtime is still the
simulated device's). Each program runs:
  - under valgrind's callgrind, once per function and pair count (N and 2N), counting only the
    instructions inside host_cost_<function>_pairs (in every thread): instructions per pair =
    (Ir(2N) - Ir(N)) / (N * threads), deterministic, whatever the machine's load;
  - on its own, timing every function with the host clock, interleaved in rounds. On the
    simulated device this times the simulation too; on the no-op runtime what is left is the
    library's own time, plus the loop and the no-op calls that the raw loop also pays.
Reports, per function, instructions per pair, instructions added over the raw runtime loop (which
checks each status inline, as the libraries do), the ratio of that added cost to cuscope's
corresponding path, the time per pair on both runtimes and the own time (no-op runtime, minus
the raw loop's); and for two threads at once (private pools, one shared pool, private sessions,
one shared session) the time per pair against one thread.

The peers: CCCL's cuda::mr resource references (CCCL 3.0 from the CUDA toolkit's include/cccl:
async_resource_ref; CCCL 3.5 from PyPI's nvidia-cuda-cccl 13.3.5.0.6: resource_ref, the 3.1+
names) over cuscope's pool_resource and over a minimal pool resource; RMM 25.04 (the last release
whose C++ library is header-only: librmm-cu12 25.4.0 from PyPI, with the compiled rapids-logger it
needs, rapids-logger 0.1.19) with cuda_async_view_memory_resource, device_buffer, and the
statistics and tracking adaptors as the equivalent of a session's accounting; cuscope's
thrust_allocator beside RMM's mr::thrust_allocator and a minimal Thrust allocator (Thrust's CPP
device system, so that the plain C++ compiler builds them). RMM and CCCL 3.5
are downloaded with pip into --cache (CCCL 3.5 is taken from scripts/toolchains.sh's cache when it
is there) unless --rmm / --cccl35 name unpacked copies; offline, or with --no-rmm / --no-cccl35,
their rows are skipped with a message.

cuda-api-wrappers is not measured: it is on neither PyPI nor Debian (the registries this project's
machines reach), and it allocates from pools through the CUDA driver API (cuMemAllocFromPoolAsync,
cuMemFreeAsync), which neither cuscope's simulated device nor the no-op runtime provides. The
script says so and leaves its rows out.

The results files name no path of the machine that wrote them: paths inside the repository are
relative to its root, and the others are written as <tmp> (the build's temporary directory),
<cache> (the wheels' cache), <cuda-include> (--cuda-include), ~ (the home directory), and the
compiler by its name.

With --out DIR it writes the results file set into DIR: <date>-host-cost.json (everything, with
the machine: CPU model and count, compiler, valgrind, commit), <date>-host-cost.md (the tables)
and <date>-host-cost.png (a bar plot of the ratios; needs matplotlib). --png FILE writes only the
plot, --json FILE only the JSON.

Exit code 77 (reported as Skipped by ctest) when valgrind is not installed.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

from peer_deps import (DEFAULT_CACHE, RMM_WHEELS, cccl_version, cpu_model, find_cccl, find_rmm,
                       install_cccl35, install_rmm, load_average, scrub_paths)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# For each peer path, the cuscope path it is compared with (the ratio of added instructions).
COUNTERPART = {
    "session_allocate_4k_live": "session_allocate",
    "rmm_resource": "pool",
    "rmm_buffer": "buffer",
    "rmm_statistics_buffer": "session",
    "rmm_tracking_buffer": "session",
    "cccl_minimal_ref": "pool_resource_ref",
    "thrust_minimal": "thrust_allocator",
    "rmm_thrust_allocator": "thrust_allocator",
}
# For each two-thread configuration, the one-thread path it is compared with.
ONE_THREAD = {
    "two_raw": "raw",
    "two_private_pools": "buffer",
    "two_shared_pool": "buffer",
    "two_private_sessions": "session",
    "two_shared_session": "session",
}
# What the CCCL 3.5 build runs: the paths that go through cuda::mr, and the raw loop they are
# compared with.
CCCL35_FUNCTIONS = ["raw", "pool_resource", "pool_resource_ref", "session_resource_ref",
                    "cccl_minimal_ref"]
# The targets, shown beside the figures (goal, value).
TARGETS = {
    "session_added": 40.0,           # instructions added per make_buffer pair
    "session_own_ns": 10.0,          # own time per make_buffer pair, no-op runtime
    "shared_session_ratio": 1.5,     # two threads sharing a session against one thread
    "resource_own_ratio": 1.5,       # pool_resource behind a ref against a minimal resource
    "thrust_own_ratio": 1.5,         # thrust_allocator against a minimal Thrust allocator
}
TEXT_COLUMNS = ("function", "what", "added vs cuscope", "configuration", "compared with")
CUDA_API_WRAPPERS_SKIPPED = (
    "cuda-api-wrappers: not measured. It is on neither PyPI nor Debian, the only registries this "
    "machine reaches, and it allocates from pools through the CUDA driver API "
    "(cuMemAllocFromPoolAsync, cuMemFreeAsync), which neither cuscope's simulated device nor the "
    "no-op runtime provides.")


def log(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_checked(cmd, what):
    log("host_cost: %s: %s" % (what, " ".join(cmd)))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit("host_cost: %s failed" % what)


def build_noop(a, work):
    """The no-op runtime as a static library."""
    obj = os.path.join(work, "noop_runtime.o")
    lib = os.path.join(work, "libhost_cost_noop.a")
    run_checked([a.cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-isystem",
                 a.cuda_include, "-c",
                 os.path.join(HERE, "noop_runtime.cpp"), "-o", obj], "building the no-op runtime")
    run_checked([a.ar, "rcs", lib, obj], "archiving the no-op runtime")
    return lib


def build(a, cccl, rmm, sim_lib, noop_lib, stem):
    """Compiles the benchmark once against cccl (and RMM), links it against the simulated device
    and against the no-op runtime; returns ({runtime: program}, the commands)."""
    obj = stem + ".o"
    # -fno-ipa-icf: the measured functions that share a body stay apart, each under its name.
    compile_cmd = [a.cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-fno-ipa-icf",
                   "-DCUSCOPE_BENCH_SIMULATED=1",
                   "-DLIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE",
                   "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "sim", "include"),
                   "-I" + os.path.join(ROOT, "benchmarks")]
    libs = []
    if rmm:
        compile_cmd += ["-DCUSCOPE_PEER_RMM=1", "-isystem", rmm[0], "-isystem", rmm[1]]
        libs = ["-L" + rmm[2], "-lrapids_logger", "-Wl,-rpath," + rmm[2]]
    compile_cmd += ["-isystem", cccl, "-isystem", a.cuda_include,
                    "-c", os.path.join(HERE, "host_cost_bench.cpp"), "-o", obj]
    run_checked(compile_cmd, "compiling")
    sim = ["-Wl,--whole-archive", sim_lib, "-Wl,--no-whole-archive"]
    system = ["-lpthread", "-ldl", "-lrt"]
    programs, commands = {}, {"compile": compile_cmd}
    for runtime, extra in (("sim", []), ("noop", ["-Wl,--wrap=cudaMallocFromPoolAsync",
                                                  "-Wl,--wrap=cudaFreeAsync", noop_lib])):
        exe = "%s_%s" % (stem, runtime)
        cmd = [a.cxx, obj, "-o", exe] + extra + sim + libs + system
        run_checked(cmd, "linking (%s)" % runtime)
        programs[runtime] = exe
        commands["link_" + runtime] = cmd
    return programs, commands


def count_ir(valgrind, exe, name, pairs, work):
    out = os.path.join(work, "callgrind.out")
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


def ir_per_pair(a, exe, name, threads, n, work):
    return (count_ir(a.valgrind, exe, name, 2 * n, work) -
            count_ir(a.valgrind, exe, name, n, work)) / float(n * threads)


def time_all(exe, functions, pairs, rounds, work):
    """{function: timing row} from one interleaved run of the program."""
    out = os.path.join(work, "timing.json")
    cmd = [exe, "--pairs", str(pairs), "--rounds", str(rounds), "--functions",
           ",".join(functions), "--json", out]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit("host_cost: the timing run %s failed" % " ".join(cmd))
    with open(out) as f:
        return {r["function"]: r for r in json.load(f)["results"] if r["function"] in functions}


def commit_info():
    """The last commit that changed what is measured (the headers, the simulated device, the
    benchmark: a commit of results alone does not move it), and whether the checkout differs."""
    def git(*args):
        proc = subprocess.run(["git", "-C", ROOT] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, universal_newlines=True)
        return proc.stdout.strip() if proc.returncode == 0 else None
    measured = ["include", "sim", "benchmarks/bench", "benchmarks/bench.hpp", "benchmarks/peers"]
    commit = git("log", "-1", "--format=%h", "--abbrev=12", "--", *measured)
    if not commit:
        return {"commit": "unknown (not a git checkout)", "modified": None}
    changed = git("status", "--porcelain", "--", *measured)
    return {"commit": commit, "modified": bool(changed)}


def machine_info(a, cxx_version, valgrind_version, load_before):
    c = commit_info()
    return {"load_average": {"start": load_before, "end": load_average()},"cpu": cpu_model(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "system": "%s %s" % (platform.system(), platform.release()),
            "compiler": cxx_version, "compiler_path": a.cxx, "valgrind": valgrind_version,
            "python": platform.python_version(), "commit": c["commit"],
            "commit_modified": c["modified"]}




def write_markdown(doc, path):
    m = doc["machine"]
    out = ["# Host cost of an allocate/free pair: cuscope, CCCL and RMM", "",
           "%s. Written by `benchmarks/peers/host_cost.py %s`." % (
               doc["date_utc"][:10], doc["command_line"]), "",
           "| machine | |", "|---|---|",
           "| CPU | %s (%s logical CPUs, %s) |" % (m["cpu"], m["cpu_count"], m["machine"]),
           "| system | %s, Python %s |" % (m["system"], m["python"]),
           "| load average (1, 5, 15 min) | %s at the start, %s at the end |" % tuple(
               " / ".join("%.1f" % x for x in m["load_average"][k]) if m["load_average"][k]
               else "?" for k in ("start", "end")),
           "| compiler | %s, `-O2` |" % m["compiler"],
           "| valgrind | %s |" % m["valgrind"],
           "| cuscope | %s%s |" % (m["commit"], " with uncommitted changes to the measured files"
                                  if m["commit_modified"] else ""),
           "| CCCL | %s |" % ", ".join("%s (`%s`)" % (c["version"], c["path"])
                                       for c in doc["config"]["cccl"]),
           "| RMM | %s |" % (", ".join(doc["config"]["rmm"]) if doc["config"]["rmm"]
                             else "not measured"),
           "| runtimes | cuscope's simulated device (eager mode); the no-op runtime "
           "(`benchmarks/peers/noop_runtime.cpp`) |", ""]
    for t in doc["tables"]:
        out += ["## " + t["title"][0].upper() + t["title"][1:], "",
                "| " + " | ".join(t["columns"]) + " |",
                "|" + "|".join("---" if c in TEXT_COLUMNS else "---:" for c in t["columns"]) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in t["rows"]]
        out.append("")
    out += ["## Notes", ""] + ["- " + n for n in doc["notes"]] + [""]
    if doc["headline"]:
        out += ["## Headline", "", "| figure | value | goal | detail |", "|---|---:|---|---|"]
        for h in doc["headline"]:
            value = "%.2fx" % h["value"] if h["unit"] == "x" else "%.1f %s" % (h["value"],
                                                                               h["unit"])
            g = "" if "goal" not in h else "%s %g: %s" % (h["goal"], h["target"],
                                                          "met" if h["meets"] else "not met")
            out.append("| %s | %s | %s | %s |" % (h["name"], value, g, h.get("detail", "")))
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out))


def write_png(doc, path):
    """Bar plots of the ratios: each peer's added instructions against cuscope's path doing the
    same job; each path's time against the raw loop's on the no-op runtime; two threads against
    one; and each path's added instructions."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("host_cost: the PNG needs matplotlib (apt-get install python3-matplotlib, "
                         "or scripts/install-deps.sh --tests); run with a Python that has it")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["results"]
    single = [r for r in rows if r["threads"] == 1]
    panels = []
    ratios = [r for r in rows if r.get("added_ratio") is not None]
    if ratios:
        panels.append(("a peer's added instructions per pair / cuscope's on the same job "
                       "(callgrind; over 1: cuscope is lighter)",
                       [("%s / %s" % (r["label"], r["compared_with"]), r["added_ratio"], None)
                        for r in ratios], "ratio"))
    panels.append(("time per pair / the raw loop's, no-op runtime (median; the library's own "
                   "time shows)", [(r["label"], r["time_ratio_noop"], None)
                                   for r in single if r["function"] != "raw"], "ratio"))
    two = [r for r in rows if r["threads"] == 2]
    if two:
        panels.append(("two threads / one thread, time per pair on the no-op runtime (target for "
                       "a shared session: at most %gx)" % TARGETS["shared_session_ratio"],
                       [("%s / %s" % (r["label"], r["one_thread"]), r["vs_one_thread_noop"],
                         TARGETS["shared_session_ratio"] if r["function"] == "two_shared_session"
                         else None) for r in two], "ratio"))
    panels.append(("instructions added per pair over the raw loop (callgrind, no-op runtime)",
                   [(r["label"], r["added_noop"], TARGETS["session_added"]
                     if r["label"] == "session" else None)
                    for r in single if r["function"] != "raw"], "count"))
    heights = [len(p[1]) + 1 for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 0.3 * sum(heights) + 1.2 * len(panels)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (title, bars, kind) in zip(axes[:, 0], panels):
        names = [b[0] for b in bars][::-1]
        values = [b[1] for b in bars][::-1]
        targets = [b[2] for b in bars][::-1]
        y = list(range(len(bars)))
        peer = lambda n: n.startswith(("rmm", "cccl", "thrust_minimal"))
        if kind == "ratio":
            ax.set_xscale("log")
            ax.axvline(1.0, color="black", linewidth=0.8)
            positive = [v for v in values if v > 0] + [1.0]
            ax.set_xlim(min(positive) / 2, max(positive) * 4)
            colors = ["#78909c" if peer(nm) else "#1565c0" for nm in names]
            ax.barh(y, [max(v, 1e-3) - 1.0 for v in values], left=1.0, color=colors, height=0.6)
            for i, v in enumerate(values):
                ax.text(max(v, 1.0) * 1.08, i, "%.2fx" % v, va="center", fontsize=8)
        else:
            colors = ["#78909c" if peer(nm) else "#1565c0" for nm in names]
            ax.barh(y, values, color=colors, height=0.6)
            top = max(values + [1.0])
            ax.set_xlim(min(0, min(values)) * 1.3, top * 1.2)
            for i, v in enumerate(values):
                ax.text(max(v, 0) + top * 0.01, i, "%+.0f" % v, va="center", fontsize=8)
        for i, t in enumerate(targets):
            if t is not None:
                ax.plot([t, t], [i - 0.4, i + 0.4], color="#c62828", linewidth=2)
                ax.text(t, i + 0.42, "target", color="#c62828", fontsize=7, ha="center")
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=8)
        ax.set_title(title, fontsize=9, loc="left")
    m = doc["machine"]
    fig.suptitle("cuscope: host cost of a 256-byte allocate/free pair, %s\n%s, %s logical CPUs, "
                 "%s, %s, cuscope %s" % (doc["date_utc"][:10], m["cpu"], m["cpu_count"],
                                         m["compiler"], m["valgrind"], m["commit"]), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_size_inches()[1]))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def path_replacements(a, work):
    """(absolute path, stand-in) pairs for scrub_paths, longest path first."""
    pairs = [(work, "<tmp>"), (os.path.join(ROOT, ""), ""), (ROOT, "."),
             (os.path.abspath(a.cache), "<cache>"),
             (os.path.abspath(a.cuda_include), "<cuda-include>")]
    if os.path.isabs(a.cxx):
        pairs.append((a.cxx, os.path.basename(a.cxx)))
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        pairs.append((os.path.join(home, ""), "~/"))
    real = lambda x: os.path.join(os.path.realpath(x), "") if x.endswith(os.sep) \
        else os.path.realpath(x)
    pairs = [(x, y) for x, y in pairs if x] + [(real(x), y) for x, y in pairs if x]
    unique = []
    for x, y in pairs:
        if x not in [u[0] for u in unique]:
            unique.append((x, y))
    return sorted(unique, key=lambda p: len(p[0]), reverse=True)


def print_table(title, columns, rows):
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    fmt = lambda cells: "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                                  for i, c in enumerate(cells))
    log("\n" + title)
    log(fmt(columns))
    log("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in rows:
        log(fmt(r))



def pct(x):
    return "±%.0f%%" % x if x is not None else ""


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "test"),
                   help="a cuscope build directory with the simulated device built "
                        "(sim/libcuscope_sim.a); default build/test")
    p.add_argument("--sim-lib", help="the simulated device's archive (default "
                   "<build>/sim/libcuscope_sim.a)")
    p.add_argument("--cxx", default=os.environ.get("CXX") or shutil.which("g++") or "c++")
    p.add_argument("--ar", default=shutil.which("ar") or "ar")
    p.add_argument("--cuda-include", default="/usr/local/cuda/include")
    p.add_argument("--cccl", default=None, help="CCCL's include directory (default "
                   "<cuda-include>/cccl when it exists, else <cuda-include>)")
    p.add_argument("--cccl35", help="CCCL 3.5's include directory (holding cuda/, cub/, thrust/); "
                   "by default scripts/toolchains.sh's copy, or downloaded into --cache")
    p.add_argument("--no-cccl35", action="store_true", help="leave the CCCL 3.5 rows out")
    p.add_argument("--rmm", help="a directory holding unpacked librmm-cu12 and rapids-logger")
    p.add_argument("--cache", default=DEFAULT_CACHE,
                   help="where the RMM and CCCL wheels are downloaded and unpacked")
    p.add_argument("--no-rmm", action="store_true", help="leave RMM out")
    p.add_argument("--pairs", type=int, default=None, help="N (default 5000, --quick 200)")
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 21)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: few pairs and rounds, callgrind on the no-op runtime only")
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
    n = a.pairs or (200 if a.quick else 5000)
    rounds = a.rounds or (3 if a.quick else 21)
    sim_lib = a.sim_lib or os.path.join(a.build, "sim", "libcuscope_sim.a")
    if not os.path.exists(sim_lib):
        raise SystemExit("host_cost: %s does not exist: build the simulated device first "
                         "(cmake --build %s --target cuscope_sim_runtime)" % (sim_lib, a.build))

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
    cccl35, cccl35_reason = None, None
    if a.no_cccl35:
        cccl35_reason = "left out (--no-cccl35)"
    elif a.cccl35:
        cccl35 = find_cccl(a.cccl35)
        if not cccl35:
            cccl35_reason = "no cuda/std/__cccl/version.h under " + a.cccl35
    else:
        cccl35, cccl35_reason = install_cccl35(a.cache)
    if cccl35 and not re.match(r"^(3\.([1-9]|\d\d)|[4-9])", cccl_version(cccl35)):
        cccl35_reason = "%s is CCCL %s, not 3.1 or later" % (cccl35, cccl_version(cccl35))
        cccl35 = None
    if cccl35_reason:
        log("host_cost: CCCL 3.5 skipped: " + cccl35_reason)
    log("host_cost: " + CUDA_API_WRAPPERS_SKIPPED)

    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="cuscope-host-cost-") as work:
        noop_lib = build_noop(a, work)
        builds = [{"key": "", "cccl": a.cccl, "rmm": rmm, "only": None}]
        if cccl35:
            builds.append({"key": " [CCCL %s]" % cccl_version(cccl35), "cccl": cccl35, "rmm": None,
                           "only": CCCL35_FUNCTIONS})
        commands = []
        rows = []  # one dict per function and build
        for i, b in enumerate(builds):
            programs, cmds = build(a, b["cccl"], b["rmm"], sim_lib, noop_lib,
                                   os.path.join(work, "host_cost_bench%d" % i))
            commands.append(cmds)
            listing = subprocess.run([programs["sim"], "--list", "1"], stdout=subprocess.PIPE,
                                     universal_newlines=True, check=True).stdout
            functions = []
            for line in listing.splitlines():
                name, threads, what = line.split("\t", 2)
                if b["only"] is None or name in b["only"]:
                    functions.append((name, int(threads), what))
            names = [f[0] for f in functions]
            timed = {}
            for runtime, pairs in (("sim", 20 * n), ("noop", 100 * n)):
                timed[runtime] = time_all(programs[runtime], names, pairs, rounds, work)
            for name, threads, what in functions:
                r = {"function": name, "label": name + b["key"], "what": what, "threads": threads,
                     "cccl": cccl_version(b["cccl"]), "build": i,
                     "ir_noop": ir_per_pair(a, programs["noop"], name, threads, n, work),
                     "ir_sim": None if a.quick else
                     ir_per_pair(a, programs["sim"], name, threads, n, work)}
                for runtime in ("sim", "noop"):
                    t = timed[runtime][name]
                    r["ns_" + runtime] = t["median"]
                    r["ns_%s_spread_pct" % runtime] = t.get("spread_pct")
                    r["ns_%s_min" % runtime] = t.get("min")
                rows.append(r)
    version = subprocess.run([a.valgrind, "--version"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.strip()
    cxx_version = subprocess.run([a.cxx, "--version"], stdout=subprocess.PIPE,
                                 universal_newlines=True).stdout.splitlines()[0]

    # Derived figures: over the raw loop of the same build, against cuscope's counterpart.
    by = {(r["build"], r["function"]): r for r in rows}
    for r in rows:
        raw = by[(r["build"], "raw")]
        r["added_noop"] = r["ir_noop"] - raw["ir_noop"]
        r["added_sim"] = None if r["ir_sim"] is None else r["ir_sim"] - raw["ir_sim"]
        r["own_ns"] = r["ns_noop"] - raw["ns_noop"]
        r["own_ns_fastest"] = r["ns_noop_min"] - raw["ns_noop_min"]
        r["time_ratio_sim"] = r["ns_sim"] / raw["ns_sim"]
        r["time_ratio_noop"] = r["ns_noop"] / raw["ns_noop"]
        base = by.get((r["build"], COUNTERPART.get(r["function"])))
        if base is not None:
            r["compared_with"] = base["label"]
            # A path that adds nothing (or less than the raw loop's own) has no ratio.
            r["added_ratio"] = r["added_noop"] / base["added_noop"] \
                if base["added_noop"] > 0 and r["added_noop"] > 0 else None
        one = by.get((r["build"], ONE_THREAD.get(r["function"])))
        if one is not None:
            r["one_thread"] = one["label"]
            r["vs_one_thread_noop"] = r["ns_noop"] / one["ns_noop"]
            r["vs_one_thread_sim"] = r["ns_sim"] / one["ns_sim"]
            r["vs_one_thread_ir"] = r["ir_noop"] / one["ir_noop"]
    single = [r for r in rows if r["threads"] == 1]
    double = [r for r in rows if r["threads"] == 2]

    t1_columns = ["function", "what", "Ir per pair", "added over raw", "added vs cuscope",
                  "Ir per pair, simulated device", "added, simulated device"]
    t1_rows = [[r["label"], r["what"], "%.0f" % r["ir_noop"], "%+.0f" % r["added_noop"],
                "%.2fx %s" % (r["added_ratio"], r["compared_with"])
                if r.get("added_ratio") is not None else "",
                "" if r["ir_sim"] is None else "%.0f" % r["ir_sim"],
                "" if r["added_sim"] is None else "%+.0f" % r["added_sim"]] for r in single]
    t1_title = ("instructions per 256-byte allocate/free pair (callgrind, N=%d and 2N), on the "
                "no-op runtime (the figures compared) and on the simulated device" % n)
    t2_columns = ["function", "simulated device", "/ raw", "no-op runtime", "fastest round",
                  "/ raw", "own time (no-op minus raw)", "own time, fastest rounds"]
    t2_rows = [[r["label"], "%.0f ns %s" % (r["ns_sim"], pct(r["ns_sim_spread_pct"])),
                "%.2fx" % r["time_ratio_sim"],
                "%.1f ns %s" % (r["ns_noop"], pct(r["ns_noop_spread_pct"])),
                "%.1f ns" % r["ns_noop_min"],
                "%.2fx" % r["time_ratio_noop"], "%+.1f ns" % r["own_ns"],
                "%+.1f ns" % r["own_ns_fastest"]] for r in single]
    t2_title = ("time per pair (median of %d interleaved rounds, ± interquartile range over the "
                "median): %d pairs per call on the simulated device, %d on the no-op runtime"
                % (rounds, 20 * n, 100 * n))
    t3_columns = ["configuration", "what", "no-op runtime", "vs one thread", "simulated device",
                  "vs one thread", "Ir per pair (no-op)", "compared with"]
    t3_rows = [[r["label"], r["what"],
                "%.1f ns %s" % (r["ns_noop"], pct(r["ns_noop_spread_pct"])),
                "%.2fx" % r["vs_one_thread_noop"],
                "%.0f ns %s" % (r["ns_sim"], pct(r["ns_sim_spread_pct"])),
                "%.2fx" % r["vs_one_thread_sim"], "%.0f" % r["ir_noop"], r["one_thread"]]
               for r in double]
    t3_title = ("two threads at once, each with its own stream, each making %d pairs per call "
                "(%d on the simulated device): time per pair (from the first thread's start to the "
                "last one's end, over one thread's pairs) against the same path on one thread; "
                "two_raw shows how far the machine runs two threads at once at all"
                % (100 * n, 20 * n))
    tables = [(t1_title, t1_columns, t1_rows), (t2_title, t2_columns, t2_rows)]
    if t3_rows:
        tables.append((t3_title, t3_columns, t3_rows))
    for title, columns, trows in tables:
        print_table(title, columns, trows)

    notes = [
        "Instructions: %s --tool=callgrind --collect-atstart=no "
        "--toggle-collect='*host_cost_<function>_pairs*', per pair = (Ir(2N) - Ir(N)) / "
        "(N * threads); built with %s -O2." % (version, cxx_version),
        "On the no-op runtime (benchmarks/peers/noop_runtime.cpp, linked with -Wl,--wrap) "
        "cudaMallocFromPoolAsync and cudaFreeAsync take a slice of a per-thread arena and do "
        "nothing else; every other runtime call is still the simulated device's, at its price. "
        "'added over raw' there is the library's own code plus any extra runtime call it makes. "
        "The same difference on the simulated device is noisier: what the simulation spends in "
        "an allocation depends on its own state (its tables of pools, streams and pointers), "
        "which differs from one path to the next by some tens of instructions.",
        "'added vs cuscope' divides a peer's added instructions by those of the cuscope path "
        "doing the same job: RMM's view resource against memory_pool, RMM's device_buffer "
        "against device_buffer, RMM's device_buffer through an accounting adaptor against "
        "session::make_buffer, CCCL's resource_ref over a minimal resource against the same ref "
        "over cuscope's pool_resource, RMM's and a minimal Thrust allocator against cuscope's "
        "thrust_allocator (Thrust's CPP device system: the allocators' own code is the same as "
        "with CUDA's).",
        "Times: medians of %d rounds in which every function runs once, in a rotating order, "
        "± the interquartile range over the median, on a machine that may be loaded: secondary "
        "to the instruction counts. The simulated device's times include the simulation; the "
        "own time is the no-op runtime's time minus the raw loop's on it, of the medians and of "
        "the fastest rounds (less disturbed by other load on the machine)." % rounds,
        "Two threads: under callgrind the threads run one at a time (valgrind serializes them), "
        "so their instruction counts show no contention; the times do. On the simulated device "
        "the two threads also contend in the simulation's own locks.",
    ]
    if len(builds) > 1:
        notes.append("CCCL %s rows: the same source built against %s (resource_ref, the 3.1+ "
                     "names allocate(stream, bytes, alignment)), without RMM; timed in their own "
                     "runs, against their own raw loop." % (cccl_version(cccl35), cccl35))
    else:
        notes.append("CCCL 3.5: " + cccl35_reason)
    if rmm_reason:
        notes.append("RMM: " + rmm_reason)
    else:
        notes.append("RMM: librmm-cu12 25.4.0 (header-only C++) with rapids-logger 0.1.19, "
                     "compiled against CCCL %s." % cccl_version(a.cccl))
    notes.append(CUDA_API_WRAPPERS_SKIPPED)
    for line in notes:
        log("note: " + line)

    headline = []
    for r in rows:
        if r.get("added_ratio") is not None:
            headline.append({
                "name": "added instructions per pair, %s / cuscope %s (callgrind)"
                        % (r["label"], r["compared_with"]),
                "value": r["added_ratio"], "unit": "x",
                "detail": "%s: %+.0f, %s: %+.0f instructions over the raw loop" % (
                    r["label"], r["added_noop"], r["compared_with"],
                    by[(r["build"], COUNTERPART[r["function"]])]["added_noop"])})

    def goal(name, value, unit, target, detail):
        headline.append({"name": name, "value": value, "unit": unit, "goal": "at most",
                         "target": target, "meets": value <= target, "detail": detail})
    s = by[(0, "session")]
    goal("session::make_buffer: added instructions per pair (callgrind)", s["added_noop"],
         "instructions", TARGETS["session_added"], "over the raw loop, no-op runtime")
    goal("session::make_buffer: own time per pair (no-op runtime)", s["own_ns"], "ns",
         TARGETS["session_own_ns"], "%.1f ns against the raw loop's %.1f ns (medians); "
         "fastest rounds: %+.1f ns" % (s["ns_noop"], by[(0, "raw")]["ns_noop"],
                                       s["own_ns_fastest"]))
    shared = by.get((0, "two_shared_session"))
    if shared:
        goal("two threads sharing one session / one thread (no-op runtime, time per pair)",
             shared["vs_one_thread_noop"], "x", TARGETS["shared_session_ratio"],
             "%.1f ns against %.1f ns" % (shared["ns_noop"], s["ns_noop"]))
    for b in range(len(builds)):
        ref, minimal = by.get((b, "pool_resource_ref")), by.get((b, "cccl_minimal_ref"))
        if ref and minimal and minimal["own_ns"] > 0 and ref["own_ns"] > 0:
            goal("own time per pair, %s / %s (no-op runtime)" % (ref["label"], minimal["label"]),
                 ref["own_ns"] / minimal["own_ns"], "x", TARGETS["resource_own_ratio"],
                 "%+.1f ns against %+.1f ns" % (ref["own_ns"], minimal["own_ns"]))
    ta, tm = by.get((0, "thrust_allocator")), by.get((0, "thrust_minimal"))
    if ta and tm and ta["own_ns"] > 0 and tm["own_ns"] > 0:
        goal("own time per pair, thrust_allocator / thrust_minimal (no-op runtime)",
             ta["own_ns"] / tm["own_ns"], "x", TARGETS["thrust_own_ratio"],
             "%+.1f ns against %+.1f ns" % (ta["own_ns"], tm["own_ns"]))
    elif ta and tm:
        # The minimal allocator checks less than the raw loop (not the free's status): its own
        # time may come out at 0 or below, where a ratio means nothing. Its difference instead.
        headline.append({
            "name": "own time per pair, thrust_allocator - thrust_minimal (no-op runtime)",
            "value": ta["own_ns"] - tm["own_ns"], "unit": "ns",
            "detail": "%+.1f ns against %+.1f ns (fastest rounds: %+.1f against %+.1f): no "
                      "ratio for the %gx target, the minimal allocator's own time is not above 0"
                      % (ta["own_ns"], tm["own_ns"], ta["own_ns_fastest"],
                         tm["own_ns_fastest"], TARGETS["thrust_own_ratio"])})
    for h in headline:
        log("headline: %s: %.2f%s%s" % (h["name"], h["value"], h["unit"] if h["unit"] == "x"
                                        else " " + h["unit"],
                                        "" if "goal" not in h else " (goal: %s %g; %s)" % (
                                            h["goal"], h["target"],
                                            "met" if h["meets"] else "not met")))

    date = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {
        "schema": "cuscope-bench/1", "benchmark": "host_cost", "simulated": True,
        "quick": a.quick, "command_line": " ".join(sys.argv[1:]), "date_utc": date,
        "device": {"name": "cuscope simulated device, and the no-op runtime", "simulated": True},
        "machine": machine_info(a, cxx_version, version, load_before),
        "build": {"compiler": cxx_version, "valgrind": version, "commands": commands},
        "config": {"pairs": n, "rounds": rounds, "bytes": 256,
                   "timed_pairs": {"sim": 20 * n, "noop": 100 * n},
                   "rmm": None if rmm_reason else RMM_WHEELS,
                   "cccl": [{"path": b["cccl"], "version": cccl_version(b["cccl"])}
                            for b in builds]},
        "notes": notes,
        "tables": [{"title": t, "columns": c, "rows": rr} for t, c, rr in tables],
        "results": rows, "headline": headline,
    }
    doc = scrub_paths(doc, path_replacements(a, work))
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
