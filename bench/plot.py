#!/usr/bin/python3
"""Figures of bench/RESULTS.md's comparison, drawn from the JSON lines of bench/compare.sh's
same_loop section (jobkit_loop, mpi_bench, pmix_floor, torch_gloo.py; fields: impl, op, bytes,
nodes, ranks, round, median_us, loop_avg_us, mb_per_s, cpu_pct, rank0_median_us).

usage: plot.py [--out DIR | --table] [LABEL=FILE.jsonl ...]
Without inputs: the Debian 12 and Debian 13 runs in bench/results. Writes DIR/*.png (default
bench/results/plots) and prints each path; with --table, prints RESULTS.md's table instead.
Needs matplotlib (Debian: python3-matplotlib)."""
import argparse
import json
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_INPUTS = [
    "Debian 12: Open MPI 4.1, torch 1.13=" + os.path.join(HERE, "results", "same-loop-debian12.jsonl"),
    "Debian 13: Open MPI 5.0.7=" + os.path.join(HERE, "results", "same-loop-debian13.jsonl"),
]
LAYOUTS = [(1, 4), (3, 8), (3, 24)]
SMALL = [("barrier", 0, "barrier"), ("allreduce", 8, "all_reduce 8 B"), ("bcast", 64, "broadcast 64 B"),
         ("bcast", 1024, "broadcast 1 KiB"), ("allgather", 8, "all_gather 8 B")]
LARGE = [("bcast", "broadcast 64 MiB"), ("allgather", "all_gather 64 MiB")]
IMPLS = [("jobkit", "jobkit", "tab:blue"), ("mpi", "Open MPI", "tab:orange"),
         ("pmix", "PMIx fence", "tab:gray"), ("torch_gloo", "torch gloo", "tab:red")]
# torch_gloo.py and the C peers name the same operation differently.
OP_NAMES = {"all_reduce": "allreduce", "broadcast": "bcast", "all_gather": "allgather", "fence_collect": "barrier"}


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                r["op"] = OP_NAMES.get(r["op"], r["op"])
                rows.append(r)
    if not rows:
        sys.exit(f"plot.py: {path} has no JSON lines")
    return rows


def values(rows, impl, layout, op, field, large=False, nbytes=None):
    """The field's value in every round for one impl, layout and operation."""
    out = []
    for r in rows:
        if r["impl"] != impl or (r["nodes"], r["ranks"]) != layout or r["op"] != op or field not in r:
            continue
        if large != (r["bytes"] >= 1 << 20) or (nbytes is not None and r["bytes"] != nbytes):
            continue
        out.append(float(r[field]))
    return out


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def label(layout):
    return f"{layout[0]} x {layout[1]}"


def panels(inputs, title, ylabel, log=True):
    fig, axes = plt.subplots(1, len(inputs), figsize=(6.2 * len(inputs), 4.6),
                             sharey=not log, squeeze=False)
    fig.suptitle(title)
    for ax, (name, _) in zip(axes[0], inputs):
        ax.set_title(name, fontsize=10)
        if log:
            ax.set_yscale("log")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    return fig, axes[0]


def grouped(ax, groups, series, width):
    """Bars: one group per entry of groups, one bar per series (name, color, values per group), each
    bar the geometric mean of its rounds with every round drawn as a dot; absent values leave a gap."""
    n = len(series)
    for i, (name, color, per_group) in enumerate(series):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        heights = [geomean(v) for v in per_group]
        ax.bar(xs, [0 if math.isnan(h) else h for h in heights], width, label=name, color=color)
        for x, v in zip(xs, per_group):
            ax.plot([x] * len(v), v, "k.", markersize=3)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    if ax.get_yscale() == "log":  # bars start at 0, which a log axis cannot show: fit it to the values
        shown = [x for _, _, per_group in series for v in per_group for x in v if x > 0]
        low, high = min(shown) / 1.6, max(shown) * 1.6
        ax.set_ylim(low, high)
        if high / low < 100:  # under two decades a log axis shows one or no power of ten: label more
            ax.yaxis.set_minor_locator(matplotlib.ticker.LogLocator(subs=(2, 3, 5)))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))


def legend(fig, axes):
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))


def save(fig, out, name, written):
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)


def ratio_figure(inputs, out, written):
    fig, axes = panels(inputs, "jobkit / Open MPI, time per operation (loop average; under 1: jobkit faster)",
                       "jobkit time / Open MPI time")
    colors = plt.get_cmap("tab10")
    for ax, (_, rows) in zip(axes, inputs):
        series = []
        for k, (op, nbytes, name) in enumerate(SMALL):
            per_layout = []
            for layout in LAYOUTS:
                j = values(rows, "jobkit", layout, op, "loop_avg_us", nbytes=nbytes)
                m = values(rows, "mpi", layout, op, "loop_avg_us", nbytes=nbytes)
                per_layout.append([a / b for a, b in zip(j, m)])
            series.append((name, colors(k), per_layout))
        grouped(ax, [label(lay) for lay in LAYOUTS], series, 0.16)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    bottom = min(ax.get_ylim()[0] for ax in axes)
    top = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:  # one scale for both platforms
        ax.set_ylim(bottom, top)
        ax.set_xlabel("nodes x ranks")
    legend(fig, axes)
    save(fig, out, "ratio-to-openmpi", written)


def small_ops_figure(inputs, out, written):
    fig, axes = panels(inputs, "barrier and 8-byte all_reduce: median over iterations of the slowest rank",
                       "time per operation (µs, log)")
    for ax, (_, rows) in zip(axes, inputs):
        groups, per_impl = [], {impl: [] for impl, _, _ in IMPLS}
        for layout in LAYOUTS:
            for op in ("barrier", "allreduce"):
                groups.append(f"{label(layout)}\n{op.replace('allreduce', 'all_reduce')}")
                for impl, _, _ in IMPLS:
                    per_impl[impl].append(values(rows, impl, layout, op, "median_us"))
        grouped(ax, groups, [(name, color, per_impl[impl]) for impl, name, color in IMPLS], 0.2)
        ax.tick_params(axis="x", labelsize=8)
    legend(fig, axes)
    save(fig, out, "small-ops", written)


def bandwidth_figure(inputs, out, written):
    fig, axes = panels(inputs, "64 MiB payloads: throughput (higher is better)", "MB/s (log)")
    for ax, (_, rows) in zip(axes, inputs):
        groups, per_impl = [], {impl: [] for impl, _, _ in IMPLS}
        for layout in LAYOUTS:
            for op, name in LARGE:
                groups.append(f"{label(layout)}\n{name.split()[0]}")
                for impl, _, _ in IMPLS:
                    per_impl[impl].append(values(rows, impl, layout, op, "mb_per_s", large=True))
        shown = [(name, color, per_impl[impl]) for impl, name, color in IMPLS if impl != "pmix"]
        grouped(ax, groups, shown, 0.25)
        ax.tick_params(axis="x", labelsize=8)
    legend(fig, axes)
    save(fig, out, "bandwidth-64mib", written)


def setup_figure(inputs, out, written):
    fig, axes = panels(inputs, "time to a usable world, rank 0 (jobkit: identity and first barrier; "
                       "MPI_Init; PMIx_Init and a fence; torch: init_process_group alone)", "ms (log)")
    fig.texts[0].set_fontsize(9)
    fields = {"jobkit": ("init", "rank0_median_us"), "mpi": ("init", "median_us"),
              "pmix": ("init", "rank0_median_us"), "torch_gloo": ("init_process_group", "median_us")}
    for ax, (_, rows) in zip(axes, inputs):
        per_impl = {}
        for impl, _, _ in IMPLS:
            op, field = fields[impl]
            per_impl[impl] = [[v / 1000 for v in values(rows, impl, lay, op, field)] for lay in LAYOUTS]
        grouped(ax, [label(lay) for lay in LAYOUTS], [(n, c, per_impl[i]) for i, n, c in IMPLS], 0.2)
        ax.set_xlabel("nodes x ranks")
    legend(fig, axes)
    save(fig, out, "setup", written)


def cpu_figure(inputs, out, written):
    fig, axes = panels(inputs, "CPU while waiting: the busiest rank's share of a core during the small-operation loops",
                       "% of a core", log=False)
    fig.texts[0].set_fontsize(10)
    for ax, (_, rows) in zip(axes, inputs):
        series = []
        for impl, name, color in IMPLS:
            if impl == "pmix":
                continue  # pmix_floor reports no CPU share
            per_layout = []
            for layout in LAYOUTS:
                # One value per round: the mean over the small operations of that round.
                by_round = {}
                for r in rows:
                    if (r["impl"] == impl and (r["nodes"], r["ranks"]) == layout and "cpu_pct" in r
                            and r["bytes"] < 1 << 20):
                        by_round.setdefault(r["round"], []).append(float(r["cpu_pct"]))
                per_layout.append([statistics.mean(v) for v in by_round.values()])
            series.append((name, color, per_layout))
        grouped(ax, [label(lay) for lay in LAYOUTS], series, 0.25)
        ax.set_xlabel("nodes x ranks")
    legend(fig, axes)
    save(fig, out, "cpu-waiting", written)


def mean_or_none(xs):
    return statistics.mean(xs) if xs else None


def fmt(x):
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x < 10 else f"{x:.0f}"


def table(inputs):
    """RESULTS.md's table: per layout and measure, the mean of the rounds for each side, and
    jobkit's over Open MPI's (times, or CPU shares; for MB/s Open MPI's over jobkit's, so that under
    1 always means jobkit better)."""
    measures = [(f"{name} (µs, loop avg)", op, nbytes, False, "loop_avg_us") for op, nbytes, name in SMALL]
    measures += [(f"{name} (MB/s)", op, None, True, "mb_per_s") for op, name in LARGE]
    head = ["layout", "measure"]
    with_torch = [any(r["impl"] == "torch_gloo" for r in rows) for _, rows in inputs]
    for (name, _), torch in zip(inputs, with_torch):
        head += [f"{name.split(':')[0]}: jobkit", "Open MPI", "jobkit / MPI", "PMIx fence"] + ["torch gloo"] * torch
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for layout in LAYOUTS:
        rows_out = []
        for mname, op, nbytes, large, field in measures:
            cells = []
            for _, rows in inputs:
                j, m, t = (mean_or_none(values(rows, impl, layout, op, field, large, nbytes))
                           for impl in ("jobkit", "mpi", "torch_gloo"))
                fence = mean_or_none(values(rows, "pmix", layout, "barrier", "median_us")) if op == "barrier" else None
                ratio = None if j is None or m is None else (m / j if large else j / m)
                cells += [fmt(j), fmt(m), f"{ratio:.2f}" if ratio else "-", fmt(fence)] + [fmt(t)] * (t is not None)
            rows_out.append([mname] + cells)
        cells = []
        for _, rows in inputs:  # setup: rank 0, ms (torch: its init_process_group call alone)
            v = {impl: mean_or_none([x / 1000 for x in values(rows, impl, layout, op, f)])
                 for impl, op, f in (("jobkit", "init", "rank0_median_us"), ("mpi", "init", "median_us"),
                                     ("pmix", "init", "rank0_median_us"),
                                     ("torch_gloo", "init_process_group", "median_us"))}
            cells += [fmt(v["jobkit"]), fmt(v["mpi"]), f"{v['jobkit'] / v['mpi']:.2f}", fmt(v["pmix"])]
            cells += [fmt(v["torch_gloo"])] * (v["torch_gloo"] is not None)
        rows_out.append(["setup, rank 0 (ms)"] + cells)
        cells = []
        for _, rows in inputs:  # the busiest rank's CPU share in the small-operation loops
            v = {impl: mean_or_none([float(r["cpu_pct"]) for r in rows if r["impl"] == impl and "cpu_pct" in r
                                     and (r["nodes"], r["ranks"]) == layout and r["bytes"] < 1 << 20])
                 for impl in ("jobkit", "mpi", "torch_gloo")}
            cells += [fmt(v["jobkit"]), fmt(v["mpi"]), f"{v['jobkit'] / v['mpi']:.2f}", "-"]
            cells += [fmt(v["torch_gloo"])] * (v["torch_gloo"] is not None)
        rows_out.append(["CPU while waiting (% of a core)"] + cells)
        for r in rows_out:
            print(f"| {label(layout)} | " + " | ".join(r) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(HERE, "results", "plots"))
    p.add_argument("--table", action="store_true", help="print the markdown table, draw nothing")
    p.add_argument("inputs", nargs="*", help="LABEL=FILE.jsonl (default: the Debian 12 and 13 runs)")
    a = p.parse_args()
    inputs = []
    for spec in a.inputs or DEFAULT_INPUTS:
        name, sep, path = spec.rpartition("=")
        inputs.append((name if sep else os.path.basename(path), load(path)))
    if a.table:
        return table(inputs)
    os.makedirs(a.out, exist_ok=True)
    written = []
    for draw in (ratio_figure, small_ops_figure, bandwidth_figure, setup_figure, cpu_figure):
        draw(inputs, a.out, written)
    print("\n".join(written))


if __name__ == "__main__":
    main()
