#!/usr/bin/python3
"""PNG plots of the benchmarks' results, with Debian's python3-matplotlib
(scripts/install-deps.sh --bench). The benchmark scripts call it at their end,
once their results are written (bench/lib.sh, bench_plot); it can also redraw
a plot from results written earlier:

  /usr/bin/python3 bench/plot.py allreduce bench/results/allreduce-latest.tsv \\
      [--conditions bench/results/allreduce-latest.json] \\
      [--out bench/results/allreduce-bandwidth.png]
      algbw against vector size per method (bench/allreduce.sh)
  /usr/bin/python3 bench/plot.py stragglers bench/results/stragglers-latest.json \\
      [--out bench/results/stragglers-tail.png]
      median and p99 time per allreduce, and slot hold per chunk, against the
      straggler's delay, slot timers off and on (bench/stragglers.sh)
  /usr/bin/python3 bench/plot.py multitenant bench/results/multitenant-latest.json \\
      [--out bench/results/multitenant-rates.png]
      aggregate rate of N jobs, colliding and apart, and their ratio
      (bench/multitenant.sh)

It prints the PNG's path. The same results give the same PNG, byte for byte
(no timestamp or version in its metadata). Every figure comes from the
results file; the title carries the conditions the script recorded there.
"""
import argparse
import json
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parse_stats  # noqa: E402  bench/allreduce.sh's summary: the same medians

plt.rcParams.update({
    "svg.hashsalt": "aggswitch",
    "font.size": 9,
    "axes.titlesize": 10,
    "figure.titlesize": 11,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
})
DPI = 120
# Methods in a fixed order, colour and line: aggswitch solid, baselines dashed.
METHOD_STYLE = {
    "udp": ("tab:blue", "-", "o"),
    "udp_large": ("tab:cyan", "-", "s"),
    "af_xdp": ("tab:red", "-", "o"),
    "af_xdp_large": ("tab:orange", "-", "s"),
    "gloo": ("tab:green", "--", "^"),
    "mpi": ("tab:purple", "--", "v"),
}
MODE_COLOR = {"off": "tab:gray", "on": "tab:orange", "colliding": "tab:red", "apart": "tab:blue"}


def footer(fig, header, failures, line_height):
    """The run's conditions, and what failed, in small print under the plot."""
    notes = [n for n in (header, failures) if n]
    fig.text(0.01, 0.01, "\n".join(notes), fontsize=7, color="0.3", va="bottom")
    fig.tight_layout(rect=(0, line_height * len(notes), 1, 1))


def save(fig, out):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    # No "Software" (matplotlib's version) nor any date: the same input, the same bytes.
    fig.savefig(out, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    print(out)


def size_label(b):
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return "%d MiB" % (b >> 20)
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return "%d KiB" % (b >> 10)
    return "%d B" % b


def log_if_wide(ax, values, axis="y", factor=10):
    """Log scale on the axis when its values span factor or more, and none is 0
    (a log scale would hide it)."""
    v = [x for x in values if x == x]  # not NaN (a missing figure)
    if v and min(v) > 0 and max(v) / min(v) >= factor:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        return True
    return False


def plain_log_ticks(ax):
    """Plain numbers (not 10^n) on a log y axis, at 1, 2 and 5 times each power of ten."""
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


# --- bench/allreduce.sh ------------------------------------------------------------


def allreduce(a):
    data = parse_stats.load_results(a.results)  # {size: {method: {metric: {repeat: [values]}}}}
    cond_path = a.conditions or os.path.splitext(a.results)[0] + ".json"
    cond = {}
    if os.path.exists(cond_path):
        with open(cond_path) as f:
            cond = json.load(f)
    mtu, large = int(cond.get("mtu", 1500)), int(cond.get("large_mtu", 3400))
    max_other = float(cond.get("max_other_cpu_share", parse_stats.ALLREDUCE_MAX_OTHER_SHARE))
    seen = {m for d in data.values() for m in d}
    methods = [m for m in cond.get("methods", METHOD_STYLE) if m in seen]
    methods += sorted(seen - set(methods))
    sizes = sorted(data)

    def label(m):
        name = parse_stats.ALLREDUCE_LABELS.get(m, m)
        if m in parse_stats.ALLREDUCE_TRANSPORTS:
            name += " %d" % (large if m.endswith("_large") else mtu)
        return name

    fig, ax = plt.subplots(figsize=(10.5, 5.4))
    all_bw, failed, disturbed_any = [], [], False
    for m in methods:
        color, ls, marker = METHOD_STYLE.get(m, ("black", "-", "o"))
        xs, ys = [], []
        for size in sizes:
            d = data[size]
            if m not in d:
                continue
            # As the summary: the median over the repeats of each run's time.
            t, _ = parse_stats.allreduce_medians(d, m)
            if 0 in parse_stats.pooled(d, m, "ok"):
                failed.append("%s at %s" % (label(m), size_label(size)))
            if t is None:
                continue
            xs.append(size)
            ys.append(size / t / 1e6)
            reps = d[m].get("time_s", {})
            for rep in sorted(reps):
                bw = size / statistics.median(reps[rep]) / 1e6
                share = max(d[m].get("other_cpu_share", {}).get(rep, [0]))
                disturbed = share > max_other
                disturbed_any |= disturbed
                ax.plot([size], [bw], marker=marker, ms=4, ls="none", alpha=0.6, color=color, zorder=2)
                if disturbed:  # marked over the median's marker, which may hide the repeat's
                    ax.plot([size], [bw], marker="x", ms=8, mew=1.5, ls="none", color="black", zorder=4)
                all_bw.append(bw)
        if xs:
            ax.plot(xs, ys, color=color, ls=ls, marker=marker, ms=7, lw=1.8, label=label(m), zorder=3)
            all_bw += ys
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(round(v)))))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(sizes) > 1:
        ax.set_xlim(sizes[0] / 1.5, sizes[-1] * 1.5)
    if log_if_wide(ax, all_bw):
        plain_log_ticks(ax)
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("vector size per rank (float32; log scale)")
    ax.set_ylabel("algorithm bandwidth (MB/s, 10^6 bytes / time per allreduce)")
    repeats = cond.get("repeats", "?")
    world = cond.get("world", 4)
    ports = cond.get("ports", "?")
    window = cond.get("window", "?")
    baselines = [parse_stats.ALLREDUCE_LABELS[m] for m in ("gloo", "mpi") if m in methods]
    transports = [t for t, ms in (("kernel UDP", ("udp", "udp_large")),
                                  ("AF_XDP", ("af_xdp", "af_xdp_large")))
                  if any(m in methods for m in ms)]
    what = []
    if transports:
        what.append("aggswitch on %s ports (window %s), agg-worker over %s"
                    % (ports, window, " and ".join(transports)))
    if baselines:
        what.append("%s over TCP loopback" % " and ".join(baselines))
    fig.suptitle(
        "float32 sum allreduce among %s ranks on one machine (bench/allreduce.sh), %s repeat(s)\n"
        "%s\nlarge markers: median over the repeats; small: each repeat"
        % (world, repeats, "; ".join(what)), fontsize=9.5)
    if disturbed_any:
        ax.plot([], [], marker="x", ms=8, mew=1.5, ls="none", color="black",
                label="disturbed run: other processes\nused > %.0f%% of the CPUs" % (100 * max_other))
    # Beside the plot, where it hides no line.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title="method (MTU, bytes)",
              title_fontsize=8, borderaxespad=0)
    footer(fig, cond.get("header", ""), "FAIL (no time): " + ", ".join(failed) if failed else "", 0.025)
    save(fig, a.out or os.path.join(os.path.dirname(a.results), "allreduce-bandwidth.png"))


# --- bench/stragglers.sh ----------------------------------------------------------------


def stragglers(a):
    with open(a.results) as f:
        doc = json.load(f)
    cfg = doc["config"]
    delays = [int(d) for d in str(cfg["delays"]).split()]
    max_other = float(cfg.get("max_other", 0.10))
    rows = {(s["delay_ms"], s["timers"]): s for s in doc["summary"] if "timers" in s}
    runs = [r for r in doc["runs"] if r.get("ok") == 1]

    panels = [
        ("delayed job: time per allreduce", "ms",
         [("delayed_median_s", "median"), ("delayed_p99_s", "p99")], 1e3),
        ("companion job (no straggler): time per allreduce", "ms",
         [("companion_median_s", "median"), ("companion_p99_s", "p99")], 1e3),
        ("delayed job: time each chunk held a slot", "ms",
         [("hold_ms_per_chunk", "hold")], 1.0),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.8))
    x = list(range(len(delays)))
    disturbed_any = False
    for ax, (title, unit, metrics, scale) in zip(axes, panels):
        bars = [(mode, metric, stat) for metric, stat in metrics for mode in ("off", "on")]
        width = 0.8 / len(bars)
        values = []
        for i, (mode, metric, stat) in enumerate(bars):
            offset = (i - (len(bars) - 1) / 2) * width
            ys = []
            for d in delays:
                v = rows.get((d, mode), {}).get(metric)
                ys.append(float("nan") if v is None else v * scale)
            p99 = stat == "p99"
            ax.bar([xi + offset for xi in x], ys, width, color=MODE_COLOR[mode], alpha=0.45 if p99 else 0.9,
                   hatch="//" if p99 else None, edgecolor=MODE_COLOR[mode], linewidth=0.8,
                   label="timers %s, %s" % (mode, stat))
            values += ys
            # Each repeat as a dot over its bar (hollow: a disturbed run).
            for xi, d in zip(x, delays):
                for r in runs:
                    if r["delay_ms"] != d or r["timers"] != mode or metric not in r:
                        continue
                    disturbed = r.get("other_cpu_share", 0) > max_other
                    disturbed_any |= disturbed
                    ax.plot([xi + offset], [r[metric] * scale], "o", ms=3, mec="black", mew=0.6,
                            mfc="none" if disturbed else "black", zorder=3)
                    values.append(r[metric] * scale)
        ax.set_xticks(x)
        ax.set_xticklabels(["%d ms" % d for d in delays])
        ax.set_xlabel("delay X of the straggler (rank %s) before each allreduce" % cfg.get("straggler", "?"))
        wide = log_if_wide(ax, values)
        top = max((v for v in values if v == v), default=1)  # room above the bars for the legend
        if wide:
            plain_log_ticks(ax)
            # Every bar starts at the power of ten below the smallest figure.
            low = min(v for v in values if v == v)
            ax.set_ylim(10 ** math.floor(math.log10(low)), top * 4)
        else:
            ax.set_ylim(0, top * 1.3)
        ax.set_ylabel("%s (%s%s)" % ("time per allreduce" if scale == 1e3 else
                                     "hold per chunk, summed over the switches", unit,
                                     ", log scale" if wide else ""))
        ax.set_title(title)
        ax.grid(axis="x", visible=False)
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    repeats = len({r["repeat"] for r in doc["runs"]})
    iterations = cfg.get("iterations")
    p99_note = ""
    if iterations is not None and int(iterations) < 100:
        p99_note = " (with fewer than 100, p99 is the largest)"
    fig.suptitle(
        "Straggler tail, slot timers off and on (bench/stragglers.sh): "
        "2 jobs of 8 ranks on 2 leaves + spine, int32 %s per rank, %s slots per switch (%s per job)\n"
        "timers on: %s ms at the leaves, %s ms at the spine; %s allreduces per job and phase%s;\n"
        "median and p99 over each rank's allreduces, then the median over the 8 ranks; "
        "bars: median over %d repeat(s), dots: each repeat%s"
        % (cfg["size"], cfg["slots"], cfg.get("slots_per_job", "?"), cfg["leaf_ms"], cfg["spine_ms"],
           "?" if iterations is None else iterations, p99_note, repeats,
           " (hollow: disturbed)" if disturbed_any else ""), fontsize=9.5)
    failed = sorted({(r["delay_ms"], r["timers"]) for r in doc["runs"] if r.get("ok") != 1})
    footer(fig, cfg.get("header", ""),
           "FAIL (left out): " + ", ".join("%d ms timers %s" % f for f in failed) if failed else "", 0.03)
    save(fig, a.out or os.path.join(os.path.dirname(a.results), "stragglers-tail.png"))


# --- bench/multitenant.sh -----------------------------------------------------------------


def multitenant(a):
    with open(a.results) as f:
        doc = json.load(f)
    cfg = doc["config"]
    runs = doc["runs"]
    jobs = sorted({r["jobs"] for r in runs})
    by = {}  # (jobs, mode) -> [runs]
    for r in runs:
        by.setdefault((r["jobs"], r["mode"]), []).append(r)
    summary = {s["jobs"]: s for s in doc["summary"]}

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    x = list(range(len(jobs)))
    width = 0.38
    for i, mode in enumerate(("colliding", "apart")):
        offset = (i - 0.5) * width
        ys = [summary[n]["%s_mb_s" % mode] for n in jobs]
        slots = ["/".join(sorted({str(r["slots"]) for r in by.get((n, mode), [])})) for n in jobs]
        collisions = [statistics.median(r["collisions"] for r in by[(n, mode)]) if by.get((n, mode)) else 0
                      for n in jobs]
        what = ("slot table that fits the quotas (%s)" % cfg["slots"] if mode == "colliding"
                else "%d-slot table" % cfg["apart_slots"])
        ax.bar([xi + offset for xi in x], ys, width, color=MODE_COLOR[mode], alpha=0.85,
               label="%s: %s" % (mode, what))
        for xi, n, y, s, c in zip(x, jobs, ys, slots, collisions):
            ax.annotate("%.1f\n%s slots\n%g collisions" % (y, s, c), (xi + offset, y), ha="center",
                        va="bottom", fontsize=6.5, xytext=(0, 3), textcoords="offset points")
            for r in by.get((n, mode), []):
                ax.plot([xi + offset], [r["rate_mb_s"]], "o", ms=3, color="black", zorder=3)
    ax.set_xticks(x)
    ax.set_xticklabels([str(n) for n in jobs])
    ax.set_xlabel("jobs at once (4 ranks each)")
    ax.set_ylabel("aggregate rate, all jobs (MB/s; MB = 10^6 bytes)")
    ax.set_ylim(0, max(s[k] for s in summary.values() for k in ("colliding_mb_s", "apart_mb_s")) * 1.45)
    ax.set_title("rate: bytes allreduced by all jobs / wall time")
    ax.legend(fontsize=7.5, loc="upper left")
    ax.grid(axis="x", visible=False)

    target = float(cfg.get("target_ratio", 0.7))
    ratios = [summary[n]["ratio"] for n in jobs]
    bx.bar(x, ratios, 0.5, color="tab:purple", alpha=0.8, label="median over repeats")
    for xi, n in zip(x, jobs):
        per = {}
        for r in by.get((n, "colliding"), []) + by.get((n, "apart"), []):
            per.setdefault(r["repeat"], {})[r["mode"]] = r["rate_mb_s"]
        for p in per.values():
            if "colliding" in p and "apart" in p:
                bx.plot([xi], [p["colliding"] / p["apart"]], "o", ms=3, color="black", zorder=3)
        bx.annotate("%.2f" % summary[n]["ratio"], (xi, summary[n]["ratio"]), ha="center", va="bottom",
                    fontsize=7.5, xytext=(0, 2), textcoords="offset points")
    bx.axhline(target, color="tab:red", ls="--", lw=1, label="target %.2f" % target)
    bx.set_xticks(x)
    bx.set_xticklabels([str(n) for n in jobs])
    bx.set_xlabel("jobs at once (4 ranks each)")
    bx.set_ylabel("colliding rate / apart rate (same N, same repeat)")
    bx.set_ylim(0, max(ratios + [target, 1.0]) * 1.35)
    bx.set_title("colliding / apart: each repeat (dots), median (bar)")
    bx.legend(fontsize=7.5, loc="upper left", ncol=2)
    bx.grid(axis="x", visible=False)
    fig.suptitle(
        "Tenants that collide (bench/multitenant.sh): int32 sum of %s per rank, window %s, "
        "%s spare slots, placement %s\n%s allreduces per job; %s repeat(s); dots: each repeat"
        % (cfg["size"], cfg["window"], cfg["spare"], cfg["placement"], cfg["iterations"], cfg["repeats"]),
        fontsize=9.5)
    fig.text(0.01, 0.01, "%s\n%s" % (cfg.get("command", ""), cfg.get("machine", "")), fontsize=7,
             color="0.3", va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, a.out or os.path.join(os.path.dirname(a.results), "multitenant-rates.png"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="kind", required=True)
    s = sub.add_parser("allreduce", help="bench/allreduce.sh's .tsv")
    s.add_argument("results", help="size method repeat metric value lines (allreduce-latest.tsv)")
    s.add_argument("--conditions", help="the run's conditions (default: the .json beside the .tsv)")
    s.add_argument("--out", help="PNG (default: allreduce-bandwidth.png beside the results)")
    s = sub.add_parser("stragglers", help="bench/stragglers.sh's .json")
    s.add_argument("results", help="stragglers-latest.json")
    s.add_argument("--out", help="PNG (default: stragglers-tail.png beside the results)")
    s = sub.add_parser("multitenant", help="bench/multitenant.sh's .json")
    s.add_argument("results", help="multitenant-latest.json")
    s.add_argument("--out", help="PNG (default: multitenant-rates.png beside the results)")
    a = p.parse_args()
    {"allreduce": allreduce, "stragglers": stragglers, "multitenant": multitenant}[a.kind](a)


if __name__ == "__main__":
    main()
