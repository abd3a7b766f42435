#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots the headline figures of a results file (collect.py's JSON, or one benchmark's JSON).

  plot.py RESULTS.json --out FIGURE.svg [--png FIGURE.png]

One horizontal bar per headline ratio ("x"), on a log scale with 1x marked, and one per headline
percentage ("%"). A goal is drawn as a tick on its bar with its text; a bar is green when its
figure meets its goal, red when it does not, grey when it has none. Uses matplotlib when it is
installed and otherwise writes the SVG by hand (no PNG then).
"""
import argparse
import json
import importlib.util
import math
import sys
from xml.sax.saxutils import escape

GREEN, RED, GREY = "#2e7d32", "#c62828", "#78909c"


def load_headline(path):
    with open(path) as f:
        doc = json.load(f)
    if "headline" not in doc:
        raise SystemExit("plot.py: %s has no headline figures" % path)
    title = "cuscope benchmarks"
    meta = doc.get("meta", {})
    if meta:
        title += ": %s, %s" % (meta.get("gpu") or "no GPU", meta.get("date_utc", "")[:10])
    elif doc.get("device"):
        title += ": " + doc["device"].get("name", "")
    if doc.get("simulated") or doc.get("quick"):
        title += " (NOT A RESULT: %s)" % ("simulated device" if doc.get("simulated")
                                         else "quick run")
    figures = [h for h in doc["headline"]
               if h.get("unit") in ("x", "%") and isinstance(h.get("value"), (int, float))
               and math.isfinite(h["value"]) and (h["unit"] == "%" or h["value"] > 0)]
    return title, figures


def color(h):
    if not h.get("goal"):
        return GREY
    return GREEN if h.get("meets") else RED


def label(h):
    v = h["value"]
    text = ("%.3gx" % v) if h["unit"] == "x" else ("%.2f%%" % v)
    if h.get("goal"):
        t = h["target"]
        text += "  (goal: %s %s)" % (h["goal"], ("%gx" % t) if h["unit"] == "x" else ("%g%%" % t))
    return text


def plot_matplotlib(title, groups, svg, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = [max(1, len(g)) for _, g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(14, 0.45 * sum(heights) + 1.6 * len(groups)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (unit, figs) in zip(axes[:, 0], groups):
        names = [h["name"] for h in figs][::-1]
        values = [h["value"] for h in figs][::-1]
        colors = [color(h) for h in figs][::-1]
        y = list(range(len(figs)))
        if unit == "x":
            ax.set_xscale("log")
            ax.axvline(1.0, color="black", linewidth=0.8)
            lo = min(values + [h["target"] for h in figs if h.get("goal")] + [1.0])
            hi = max(values + [h["target"] for h in figs if h.get("goal")] + [1.0])
            ax.set_xlim(lo / 1.6, hi * 6)
            # Bars start at parity (1x): a ratio under 1 points left, over 1 right.
            ax.barh(y, [v - 1.0 for v in values], left=1.0, color=colors, height=0.6)
            ax.set_xlabel("ratio (log scale)")
        else:
            ax.set_xlim(0, max(values + [100.0]) * 1.6)
            ax.barh(y, values, color=colors, height=0.6)
            ax.set_xlabel("percent")
        for i, h in enumerate(figs[::-1]):
            if h.get("goal"):
                ax.plot([h["target"], h["target"]], [i - 0.4, i + 0.4], color="black",
                        linewidth=2)
            at = max(h["value"], 1.0) * 1.08 if unit == "x" else h["value"] + 2
            ax.text(at, i, label(h), va="center", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(svg)
    if png:
        fig.savefig(png, dpi=130)
    plt.close(fig)


def plot_svg(title, groups, svg):
    """A plain SVG of the same chart, for machines without matplotlib."""
    width, left, right, row, top = 1300, 640, 40, 26, 50
    plot_w = width - left - right
    parts, y = [], top
    for unit, figs in groups:
        y += 20
        if unit == "x":
            values = [h["value"] for h in figs] + [h["target"] for h in figs if h.get("goal")]
            lo, hi = math.log10(min(values + [1.0]) / 1.6), math.log10(max(values + [1.0]) * 6)
            scale = lambda v: left + (math.log10(v) - lo) / (hi - lo) * plot_w
            base = scale(1.0)  # bars start at parity
            parts.append('<text x="%d" y="%d" font-size="12">ratios (log scale; line at 1x)</text>'
                         % (left, y - 6))
        else:
            hi = max([h["value"] for h in figs] + [100.0]) * 1.6
            scale = lambda v: left + v / hi * plot_w
            base = scale(0.0)
            parts.append('<text x="%d" y="%d" font-size="12">percent</text>' % (left, y - 6))
        y0 = y
        for h in figs:
            x1 = scale(h["value"])
            parts.append('<text x="%d" y="%d" font-size="11" text-anchor="end">%s</text>'
                         % (left - 8, y + 15, escape(h["name"])))
            parts.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>'
                         % (min(base, x1), y + 4, abs(x1 - base), row - 8, color(h)))
            if h.get("goal"):
                xt = scale(h["target"])
                parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" '
                             'stroke-width="2"/>' % (xt, y + 1, xt, y + row - 1))
            parts.append('<text x="%.1f" y="%d" font-size="11">%s</text>'
                         % (max(base, x1) + 6, y + 15, escape(label(h))))
            y += row
        parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/>'
                     % (base, y0, base, y))
        y += 20
    head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'font-family="sans-serif">' % (width, y + 10))
    parts.insert(0, '<rect width="100%" height="100%" fill="white"/>')
    parts.insert(1, '<text x="10" y="24" font-size="14">%s</text>' % escape(title))
    with open(svg, "w") as f:
        f.write(head + "\n" + "\n".join(parts) + "\n</svg>\n")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="collect.py's results JSON (or one benchmark's JSON)")
    p.add_argument("--out", required=True, help="the SVG to write")
    p.add_argument("--png", help="also a PNG (needs matplotlib)")
    p.add_argument("--no-matplotlib", action="store_true", help="write the SVG by hand")
    a = p.parse_args()
    title, figures = load_headline(a.results)
    groups = [(u, [h for h in figures if h["unit"] == u]) for u in ("x", "%")]
    groups = [(u, f) for u, f in groups if f]
    if not groups:
        raise SystemExit("plot.py: no headline ratio or percentage to plot in %s" % a.results)
    use_mpl = not a.no_matplotlib
    if use_mpl and importlib.util.find_spec("matplotlib") is None:
        print("plot.py: matplotlib is not installed; writing the SVG by hand (no PNG)")
        use_mpl = False
    if use_mpl:
        plot_matplotlib(title, groups, a.out, a.png)
    else:
        plot_svg(title, groups, a.out)
    print("wrote " + a.out + (" and " + a.png if use_mpl and a.png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
