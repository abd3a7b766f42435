#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws a cuscope memory trace (the Chrome trace-event JSON of cuscope::write_chrome_trace) as a
PNG: per pool, the bytes in use and reserved over time (and with --freeing, freed but not yet known
to have run); the device's free memory below; sessions as labelled bands; leaks and out-of-memory
errors marked.

  scripts/memory_plot.py trace.json -o memory.png
  scripts/memory_plot.py --check trace.json      checks the trace only (no matplotlib needed)

--check validates the file: JSON, the trace-event fields every event kind needs, counters that
are numbers, and complete slices with a duration. Exit codes: 0 done, 1 invalid trace, 2 usage,
77 matplotlib missing (the CTest that draws is then reported as skipped).
"""
import argparse
import json
import sys

SKIP = 77


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise SystemExit("memory_plot: cannot read %s: %s" % (path, e.strerror))
    except ValueError as e:
        print("memory_plot: %s is not valid JSON: %s" % (path, e), file=sys.stderr)
        sys.exit(1)
    return doc


def check(doc, path):
    """Returns a list of problems with the trace (empty when it is valid)."""
    problems = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["%s: no traceEvents array" % path]
    other = doc.get("otherData", {})
    for key in ("recorded_events", "dropped_events", "capacity"):
        if not isinstance(other.get(key), int):
            problems.append("otherData.%s is missing or not an integer" % key)
    for i, e in enumerate(doc["traceEvents"]):
        where = "event %d (%s)" % (i, e.get("name"))
        ph = e.get("ph")
        if not isinstance(e.get("name"), str):
            problems.append("%s: no name" % where)
        if ph not in ("M", "C", "X", "i"):
            problems.append("%s: unexpected phase %r" % (where, ph))
            continue
        if not isinstance(e.get("pid"), int):
            problems.append("%s: no pid" % where)
        if ph != "M" and not isinstance(e.get("ts"), (int, float)):
            problems.append("%s: no ts" % where)
        if ph == "C":
            args = e.get("args", {})
            if not args or not all(isinstance(v, (int, float)) for v in args.values()):
                problems.append("%s: counter without numeric values" % where)
        if ph == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            problems.append("%s: slice without a duration" % where)
        if ph == "i" and e.get("s") not in ("g", "p", "t"):
            problems.append("%s: instant event without a scope" % where)
    return problems


def series(doc):
    """Counters by name: [(t_seconds, value)], slices, instants, all sorted by time."""
    counters = {}
    slices = []
    instants = []
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        if ph == "C":
            value = next(iter(e["args"].values()))
            counters.setdefault(e["name"], []).append((e["ts"] / 1e6, value))
        elif ph == "X":
            slices.append((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6, e["name"], e.get("args", {})))
        elif ph == "i":
            instants.append((e["ts"] / 1e6, e["name"], e.get("args", {})))
    for v in counters.values():
        v.sort(key=lambda p: p[0])
    slices.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    instants.sort(key=lambda s: s[0])
    return counters, slices, instants


def unit_for(values):
    top = max(values) if values else 0
    for factor, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if top >= 2 * factor:
            return factor, name
    return 1, "B"


def plot(doc, out, title, show_freeing=False):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("SKIPPED: matplotlib is not installed (pip install matplotlib)")
        return SKIP
    counters, slices, instants = series(doc)
    pools = sorted({n.rsplit(": ", 1)[0] for n in counters
                    if n.endswith((": used", ": reserved")) and not n.startswith("device ")})
    devices = sorted(n for n in counters if n.startswith("device ") and n.endswith(": free"))
    times = [t for v in counters.values() for t, _ in v] + [s[1] for s in slices]
    t_end = max(times) if times else 1.0

    fig, (ax, ax_free) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    pool_values = [v for n in counters if n.rsplit(": ", 1)[0] in pools for _, v in counters[n]]
    factor, unit = unit_for(pool_values)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def steps(points, scale):
        xs = [p[0] for p in points] + [t_end]
        ys = [p[1] / scale for p in points] + [points[-1][1] / scale]
        return xs, ys

    for k, pool in enumerate(pools):
        color = colors[k % len(colors)]
        kinds = [(": reserved", "--", 1.4), (": used", "-", 1.6)]
        if show_freeing:
            kinds.append((": freeing", ":", 1.0))
        for suffix, style, width in kinds:
            pts = counters.get(pool + suffix)
            if pts:
                xs, ys = steps(pts, factor)
                ax.step(xs, ys, where="post", linestyle=style, linewidth=width, color=color,
                        label=pool + suffix.replace(":", ""))
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)

    # Sessions: bands, top-level ones in alternating shades, nested ones darker, labelled when
    # wide enough.
    depth_stack = []
    top = 0
    for begin, end, name, args in slices:
        while depth_stack and depth_stack[-1] <= begin:
            depth_stack.pop()
        depth = len(depth_stack)
        depth_stack.append(end)
        if depth == 0:
            top += 1
        shade = ("tab:blue", "tab:orange")[top % 2] if depth == 0 else "tab:gray"
        ax.axvspan(begin, end, ymin=0, ymax=1, color=shade, alpha=0.07 + 0.05 * depth,
                   linewidth=0)
        if depth == 0 and (end - begin) > 0.04 * t_end:
            ax.annotate(name, xy=((begin + end) / 2, 1.0), xycoords=("data", "axes fraction"),
                        ha="center", va="bottom", fontsize=8)
        leaked = args.get("leaked_bytes", 0)
        if leaked:
            ax.axvline(end, color="tab:red", linewidth=0.8, alpha=0.5)
    for t, name, args in instants:
        if name.startswith("leak in"):
            ax.plot([t], [0], marker="v", color="tab:red", markersize=9, clip_on=False)
            ax.annotate("%s (%d B)" % (name, args.get("leaked_bytes", 0)), xy=(t, 0),
                        xytext=(4, 8), textcoords="offset points", fontsize=7, color="tab:red")
        elif name.startswith("out of memory"):
            ax.axvline(t, color="black", linewidth=1.2)
            ax.annotate("OOM: %d B" % args.get("requested_bytes", 0), xy=(t, 0.9),
                        xycoords=("data", "axes fraction"), xytext=(4, 0),
                        textcoords="offset points", fontsize=7)
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    ax.set_title(title, pad=16)

    free_values = [v for n in devices for _, v in counters[n]]
    ffactor, funit = unit_for(free_values)
    for n in devices:
        xs, ys = steps(counters[n], ffactor)
        ax_free.step(xs, ys, where="post", label=n)
    ax_free.set_ylabel(funit + " free")
    ax_free.set_xlabel("seconds since the recorder started")
    if devices:
        ax_free.legend(loc="lower left", fontsize=7)
    dropped = doc.get("otherData", {}).get("dropped_events", 0)
    if dropped:
        fig.text(0.01, 0.01, "%d older events were dropped by the ring" % dropped, fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote " + out)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="trace JSON from cuscope::write_chrome_trace")
    p.add_argument("-o", "--out", help="PNG to write (default: the trace's name with .png)")
    p.add_argument("--title", default=None, help="title of the picture")
    p.add_argument("--check", action="store_true", help="only check that the trace is valid")
    p.add_argument("--freeing", action="store_true",
                   help="also draw the bytes whose free is enqueued but not known to have run")
    a = p.parse_args()
    doc = load(a.trace)
    problems = check(doc, a.trace)
    if problems:
        for line in problems[:20]:
            print("memory_plot: " + line, file=sys.stderr)
        return 1
    if a.check:
        counters, slices, instants = series(doc)
        print("%s: valid trace, %d events, %d counters, %d sessions, %d instant events" %
              (a.trace, len(doc["traceEvents"]), len(counters), len(slices), len(instants)))
        return 0
    out = a.out or (a.trace[:-5] if a.trace.endswith(".json") else a.trace) + ".png"
    return plot(doc, out, a.title or "cuscope memory timeline: " + a.trace, a.freeing)


if __name__ == "__main__":
    sys.exit(main())
