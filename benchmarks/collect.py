#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Gathers the benchmarks' JSON files into one results file and its Markdown report.

  collect.py meta --out meta.json [--commit HASH] [--build-dir DIR] [--note TEXT]...
      Describes the machine: date, commit, toolkit (nvcc), driver, GPU and its clocks
      (nvidia-smi --query-gpu, read only), CPU, compilers, Python. Run it before the benchmarks
      (the clocks at rest) and again with --clocks-only --out end.json after them.

  collect.py report --meta meta.json --raw DIR [--steps steps.tsv] [--end end.json]
                    --out-json RESULTS.json --out-md RESULTS.md
      Reads every DIR/*.json written by the benchmarks (layout "cuscope-bench/1", see
      benchmarks/README.md; files of another layout are kept and shown as they are), and writes
      the combined JSON ("cuscope-results/1") and a Markdown report: the machine, every headline
      figure with its goal, then each benchmark's notes and tables, then the steps of the run.

Only the standard library is used.
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

# The order of the report; benchmarks not listed follow in alphabetical order.
ORDER = ["alloc", "random", "streams", "batch", "session", "loop", "peers", "overhead",
         "overhead_timing", "compile"]
TITLES = {
    "alloc": "1. Hot-path allocate/free pairs",
    "random": "2. Random allocations",
    "streams": "3. Streams with allocations between kernels",
    "batch": "4. Batch staging",
    "session": "5. Session exit",
    "loop": "6. Per-iteration temporaries",
    "peers": "7. Peers: PyTorch and CuPy",
    "overhead": "Host instructions per allocate/free pair (callgrind)",
    "overhead_timing": "Host time per allocate/free pair",
    "compile": "Compile cost of the headers",
}

NVSMI_FIELDS = [
    "name", "driver_version", "vbios_version", "pstate", "clocks.sm", "clocks.mem",
    "clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics",
    "clocks.applications.memory", "power.draw", "power.limit", "temperature.gpu",
    "memory.total", "memory.used", "persistence_mode", "compute_mode", "mig.mode.current",
    "ecc.mode.current",
]


def run(cmd):
    """stdout of cmd, or None when it cannot run or fails."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           universal_newlines=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def nvidia_smi():
    """Every readable field of every GPU, queried one field at a time (a field that this driver
    does not know must not lose the others). Reads only; changes nothing."""
    if not shutil.which("nvidia-smi"):
        return None
    gpus = []
    out = run(["nvidia-smi", "--query-gpu=" + ",".join(NVSMI_FIELDS), "--format=csv,noheader"])
    if out:  # all fields known to this driver: one call
        for line in out.splitlines():
            values = [v.strip() for v in line.split(", ")]
            if len(values) != len(NVSMI_FIELDS):
                break
            gpus.append(dict((f, v) for f, v in zip(NVSMI_FIELDS, values)
                             if v and "N/A" not in v and "Not Supported" not in v))
        else:
            return gpus
        gpus = []
    for field in NVSMI_FIELDS:
        out = run(["nvidia-smi", "--query-gpu=" + field, "--format=csv,noheader"])
        if out is None:
            continue
        for i, value in enumerate(out.splitlines()):
            while len(gpus) <= i:
                gpus.append({})
            value = value.strip()
            if value and "N/A" not in value and "Not Supported" not in value:
                gpus[i][field] = value
    return gpus


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cache_value(build_dir, name):
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"^%s:[A-Z]+=(.*)$" % re.escape(name), line.strip())
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


def gather_meta(a):
    meta = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")}
    if a.clocks_only:
        meta["nvidia_smi"] = nvidia_smi()
        return meta
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = a.commit or run(["git", "-C", root, "rev-parse", "HEAD"])
    if not a.commit and commit:
        dirty = run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"])
        meta["worktree_modified"] = bool(dirty)
    if not commit:
        # The device machine gets the working tree without .git: scripts/gpu-prepare.sh wrote the
        # commit into .deps/, which travels when the call carries it.
        recorded = os.path.join(root, ".deps", "commit.txt")
        if os.path.exists(recorded):
            with open(recorded) as f:
                commit = f.readline().strip()
    meta["commit"] = commit or ("unknown (no git checkout here and no .deps/commit.txt: carry "
                                ".deps, or pass --commit)")
    meta["hostname"] = platform.node()
    meta["kernel"] = platform.release()
    meta["cpu"] = cpu_model()
    meta["cpu_count"] = os.cpu_count()
    nvcc = run(["nvcc", "--version"]) or run(["/usr/local/cuda/bin/nvcc", "--version"])
    if nvcc:
        m = re.search(r"release ([0-9.]+), (V[0-9.]+)", nvcc)
        meta["toolkit"] = "CUDA %s (nvcc %s)" % m.groups() if m else nvcc.splitlines()[-1]
    meta["nvidia_smi"] = nvidia_smi()
    if meta["nvidia_smi"]:
        meta["gpu"] = meta["nvidia_smi"][0].get("name")
        meta["driver"] = meta["nvidia_smi"][0].get("driver_version")
    if a.build_dir:
        meta["build"] = {
            "dir": os.path.abspath(a.build_dir),
            "type": cache_value(a.build_dir, "CMAKE_BUILD_TYPE"),
            "cxx": cache_value(a.build_dir, "CMAKE_CXX_COMPILER"),
            "cuda_compiler": cache_value(a.build_dir, "CMAKE_CUDA_COMPILER"),
            "cuda_architectures": cache_value(a.build_dir, "CMAKE_CUDA_ARCHITECTURES"),
            "generator": cache_value(a.build_dir, "CMAKE_GENERATOR"),
        }
        cxx = meta["build"]["cxx"]
        if cxx:
            meta["build"]["cxx_version"] = (run([cxx, "--version"]) or "").split("\n")[0]
    meta["python"] = sys.version.split()[0]
    meta["notes"] = a.note or []
    return meta


def md_escape(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(columns, rows):
    out = ["| " + " | ".join(md_escape(c) for c in columns) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(md_escape(c) for c in r) + " |")
    return "\n".join(out)


def format_value(h):
    v = h.get("value")
    if v is None:
        return "not measured"
    unit = h.get("unit", "")
    if unit == "x":
        return "%.3gx" % v if v < 100 else "%.0fx" % v
    if unit == "%":
        return "%.2f%%" % v
    if unit == "instructions":
        return "%+.1f instructions" % v
    return "%.4g %s" % (v, unit)


def goal_text(h):
    if not h.get("goal"):
        return ""
    unit = h.get("unit", "")
    target = h.get("target")
    shown = ("%gx" % target) if unit == "x" else ("%g%%" % target if unit == "%" else
                                                   "%g %s" % (target, unit))
    return "%s %s" % (h["goal"], shown)


def met_text(h):
    if not h.get("goal"):
        return ""
    m = h.get("meets")
    return "yes" if m is True else ("**no**" if m is False else "not measured")


def load_raw(raw_dir):
    benchmarks, foreign = {}, {}
    for path in sorted(glob.glob(os.path.join(raw_dir, "*.json"))):
        key = os.path.splitext(os.path.basename(path))[0]
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            foreign[key] = {"error": "unreadable: %s" % e}
            continue
        if isinstance(doc, dict) and doc.get("schema") == "cuscope-bench/1":
            benchmarks[doc.get("benchmark", key)] = doc
        else:
            foreign[key] = doc
    return benchmarks, foreign


def order_key(name):
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


def read_steps(path):
    steps = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    steps.append({"name": parts[0], "status": parts[1],
                                  "seconds": float(parts[2]) if parts[2] else None,
                                  "detail": parts[3] if len(parts) > 3 else ""})
    return steps


def report(a):
    with open(a.meta) as f:
        meta = json.load(f)
    if a.end and os.path.exists(a.end):
        with open(a.end) as f:
            meta["at_end"] = json.load(f)
    benchmarks, foreign = load_raw(a.raw)
    steps = read_steps(a.steps)
    headline = []
    for name in sorted(benchmarks, key=order_key):
        for h in benchmarks[name].get("headline", []):
            headline.append(dict(benchmark=name, **h))
    simulated = any(b.get("simulated") and b.get("benchmark") not in ("overhead",)
                    for b in benchmarks.values())
    quick = any(b.get("quick") for b in benchmarks.values())
    doc = {"schema": "cuscope-results/1", "meta": meta, "simulated": simulated, "quick": quick,
           "unfinished": bool(a.unfinished), "steps": steps, "headline": headline,
           "benchmarks": benchmarks, "other_files": foreign}
    with open(a.out_json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    gpu = meta.get("gpu") or "no GPU"
    lines = ["# cuscope benchmarks: %s, %s" % (meta.get("date_utc", "")[:10], gpu), ""]
    if a.unfinished:
        lines += ["> **Written while the run went on** (after step %s). If this is the last version "
                  "that came back, the run stopped there: the steps below are those that ended." %
                  a.unfinished, ""]
    if simulated or quick:
        lines += ["> **Not a result.** %s Do not commit this file under benchmarks/results/." % (
            ("Run on the simulated device: the timings measure the simulation."
             if simulated else "") + (" Quick (smoke) run: tiny sizes and counts."
                                       if quick else "")), ""]
    smi = (meta.get("nvidia_smi") or [{}])[0]
    end = ((meta.get("at_end") or {}).get("nvidia_smi") or [{}])[0]
    machine = [
        ["commit", meta.get("commit", "")],
        ["date (UTC)", meta.get("date_utc", "")],
        ["GPU", gpu],
        ["driver", meta.get("driver", "")],
        ["toolkit", meta.get("toolkit", "")],
        ["clocks at start (SM / memory, max)", "%s / %s (max %s / %s)" % (
            smi.get("clocks.sm", "?"), smi.get("clocks.mem", "?"),
            smi.get("clocks.max.sm", "?"), smi.get("clocks.max.mem", "?"))],
        ["clocks at end (SM / memory)", "%s / %s" % (end.get("clocks.sm", "?"),
                                                     end.get("clocks.mem", "?"))],
        ["state at start", ", ".join("%s %s" % (k, smi[k]) for k in (
            "pstate", "power.draw", "power.limit", "temperature.gpu", "persistence_mode",
            "compute_mode", "mig.mode.current", "ecc.mode.current") if k in smi)],
        ["CPU", "%s (%s logical)" % (meta.get("cpu", "?"), meta.get("cpu_count", "?"))],
        ["host compiler", (meta.get("build") or {}).get("cxx_version", "")],
        ["build", "%s, CUDA architectures %s, %s" % (
            (meta.get("build") or {}).get("type") or "default build type",
            (meta.get("build") or {}).get("cuda_architectures") or "?",
            (meta.get("build") or {}).get("generator") or "?")],
    ]
    lines += [md_table(["", ""], [r for r in machine if r[1]]), ""]
    for n in meta.get("notes", []):
        lines += ["- " + n]
    if meta.get("notes"):
        lines.append("")

    lines += ["## Headline figures", ""]
    if headline:
        lines += [md_table(["figure", "value", "goal", "met"],
                           [[h["name"], format_value(h), goal_text(h), met_text(h)]
                            for h in headline]), ""]
    else:
        lines += ["No benchmark reported a headline figure.", ""]

    for name in sorted(benchmarks, key=order_key):
        b = benchmarks[name]
        lines += ["## " + TITLES.get(name, name), ""]
        dev = b.get("device", {})
        lines += ["Device: %s. Arguments: `%s`." % (dev.get("name") or "?",
                                                     b.get("command_line") or "(none)"), ""]
        for t in b.get("tables", []):
            lines += ["**%s**" % t.get("title", ""), "", md_table(t["columns"], t["rows"]), ""]
        for n in b.get("notes", []):
            lines.append("- " + n)
        if b.get("notes"):
            lines.append("")
    for key, doc in sorted(foreign.items()):
        lines += ["## %s (not in the cuscope-bench/1 layout: shown as written)" % TITLES.get(
            key, key), "", "```json", json.dumps(doc, indent=1)[:20000], "```", ""]
    missing = [s for s in steps if s["status"] not in ("ok", "absent", "skipped")]
    if steps:
        lines += ["## Steps of the run", "",
                  md_table(["step", "status", "seconds", "detail"],
                           [[s["name"], s["status"] if s["status"] in ("ok", "absent", "skipped")
                             else "**%s**" % s["status"],
                             "%.1f" % s["seconds"] if s["seconds"] is not None else "",
                             s["detail"]] for s in steps]), ""]
    if missing:
        lines += ["Steps that failed: " + ", ".join("%s (%s)" % (s["name"], s["status"])
                                               for s in missing), ""]
    with open(a.out_md, "w") as f:
        f.write("\n".join(lines))
    print("wrote %s and %s (%d benchmarks, %d headline figures)" % (
        a.out_json, a.out_md, len(benchmarks), len(headline)))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command")
    m = sub.add_parser("meta", help="describe the machine")
    m.add_argument("--out", required=True)
    m.add_argument("--commit")
    m.add_argument("--build-dir")
    m.add_argument("--note", action="append")
    m.add_argument("--clocks-only", action="store_true",
                   help="only the date and nvidia-smi's readings (for the end of the run)")
    r = sub.add_parser("report", help="combine the results")
    r.add_argument("--meta", required=True)
    r.add_argument("--raw", required=True, help="directory of the benchmarks' JSON files")
    r.add_argument("--steps", help="tab-separated steps of run_gpu.sh")
    r.add_argument("--end", help="meta --clocks-only file written after the benchmarks")
    r.add_argument("--out-json", required=True)
    r.add_argument("--out-md", required=True)
    r.add_argument("--unfinished", metavar="STEP",
                   help="the run goes on: this report is written after STEP, and says so")
    a = p.parse_args()
    if a.command == "meta":
        meta = gather_meta(a)
        with open(a.out, "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print("wrote " + a.out)
        return 0
    if a.command == "report":
        return report(a)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
