#!/usr/bin/env python3
"""Markdown summary of bench/compare.sh's results.jsonl: jobkit against the raw PMIx fence
measured in the same run (paired iterations), torch.distributed gloo and Open MPI.
usage: summarize.py results.jsonl"""
import json
import statistics
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def find(rows, impl, op, ranks, nodes, bytes_=None, series=None):
    for r in rows:
        if (r["impl"] == impl and r["op"] == op and r["ranks"] == ranks and r["nodes"] == nodes
                and (bytes_ is None or r["bytes"] == bytes_) and r.get("series") == series):
            return r
    return None


def us(r):
    return f"{r['median_us']:.0f}" if r else "-"


def main():
    rows = load(sys.argv[1])
    growth_loop = [r for r in rows if r.get("series") == "growth_loop"]
    rows = [r for r in rows if r.get("series") != "growth_loop"]
    out = []
    same = [r for r in rows if r.get("series") == "same_loop"]
    for nodes, ranks in sorted({(r["nodes"], r["ranks"]) for r in same}):
        out.append(f"### Same loop, same statistic: {nodes} node(s) x {ranks} ranks\n")
        out.append("bench/jobkit_loop, bench/peers/mpi_bench, bench/peers/pmix_floor (collecting fence) and "
                   "bench/peers/torch_gloo.py, alternating steps of one allocation. median: over iterations of "
                   "the slowest rank's time (us); loop avg: the slowest rank's loop time per operation (us); "
                   "CPU: the highest share of a core a rank used during the loop; each cell lists every round.\n")
        out.append("| operation | bytes | jobkit median | MPI median | jobkit / MPI | fence median | torch median | "
                   "torch / jobkit | jobkit loop avg | MPI loop avg | jobkit MB/s | MPI MB/s | torch MB/s | "
                   "jobkit CPU % | MPI CPU % | torch CPU % |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        keys = []
        for r in same:
            if (r["nodes"], r["ranks"]) == (nodes, ranks) and r["impl"] == "jobkit" and r["op"] != "init" \
                    and (r["op"], r["bytes"]) not in keys:
                keys.append((r["op"], r["bytes"]))
        # The peers' names for jobkit_loop's operations.
        torch_op = {"barrier": "barrier", "allreduce": "all_reduce", "bcast": "broadcast", "allgather": "all_gather"}
        for op, size in keys:
            def of(impl, name=op):
                return [r for r in same if r["impl"] == impl and (r["nodes"], r["ranks"], r["op"], r["bytes"]) ==
                        (nodes, ranks, name, size)]
            mine, mpi = of("jobkit"), of("mpi")
            fence = of("pmix", "fence_collect") if op == "barrier" else []
            torch = of("torch_gloo", torch_op[op]) if op in torch_op else []
            def cells(rs, key, fmt):
                return ", ".join(fmt.format(r[key]) for r in rs if key in r) or "-"
            def ratios(a_rows, b_rows):
                return ", ".join(f"{a['median_us'] / b['median_us']:.2f}" for a, b in zip(a_rows, b_rows)
                                 if b["median_us"] > 0) or "-"
            out.append(f"| {op} | {size} | {cells(mine, 'median_us', '{:.0f}')} | {cells(mpi, 'median_us', '{:.0f}')} "
                       f"| {ratios(mine, mpi)} | {cells(fence, 'median_us', '{:.0f}')} "
                       f"| {cells(torch, 'median_us', '{:.0f}')} | {ratios(torch, mine)} "
                       f"| {cells(mine, 'loop_avg_us', '{:.0f}')} | {cells(mpi, 'loop_avg_us', '{:.0f}')} "
                       f"| {cells(mine, 'mb_per_s', '{:.0f}')} | {cells(mpi, 'mb_per_s', '{:.0f}')} "
                       f"| {cells(torch, 'mb_per_s', '{:.0f}')} "
                       f"| {cells(mine, 'cpu_pct', '{:.0f}')} | {cells(mpi, 'cpu_pct', '{:.0f}')} "
                       f"| {cells(torch, 'cpu_pct', '{:.0f}')} |")
        out.append("")
    setup = [r for r in rows if r.get("series") == "setup"]
    if setup:
        out.append("### Time to a usable world (ms; each cell lists every round)\n")
        out.append("jobkit: identity and the data path's setup (the first barrier), rank 0's own and the slowest "
                   "rank's; Open MPI: MPI_Init on rank 0; torch: init_process_group(gloo, env://) on rank 0.\n")
        out.append("| layout | jobkit rank 0 | jobkit slowest rank | MPI_Init rank 0 | torch rank 0 | torch / jobkit (rank 0) |")
        out.append("|---|---|---|---|---|---|")
        for nodes, ranks in sorted({(r["nodes"], r["ranks"]) for r in setup}):
            def of(impl, key="median_us"):
                return [r[key] / 1000 for r in setup if r["impl"] == impl and (r["nodes"], r["ranks"]) == (nodes, ranks)
                        and key in r]
            mine0, mine, mpi, torch = of("jobkit", "rank0_median_us"), of("jobkit"), of("mpi"), of("torch_gloo")
            def cells(v):
                return ", ".join(f"{x:.0f}" for x in v) or "-"
            ratio = ", ".join(f"{t / j:.1f}x" for j, t in zip(mine0, torch)) or "-"
            out.append(f"| {nodes} x {ranks} | {cells(mine0)} | {cells(mine)} | {cells(mpi)} | {cells(torch)} | {ratio} |")
        out.append("")
    rows = [r for r in rows if r.get("series") != "setup"]
    layouts = sorted({(r["nodes"], r["ranks"]) for r in rows if r["impl"] == "jobkit" and "series" not in r})
    rows = [r for r in rows if r.get("series") != "same_loop"]
    for nodes, ranks in layouts:
        out.append(f"### {nodes} node(s) x {ranks} ranks\n")
        out.append("Small operations against the raw collecting PMIx fence, timed in alternation with it "
                   "(median over iterations of the slowest rank, microseconds):\n")
        out.append("| operation | bytes | jobkit median | jobkit p99 | fence median | ratio | target |")
        out.append("|---|---|---|---|---|---|---|")
        for r in rows:
            if r["impl"] == "jobkit" and (r["nodes"], r["ranks"]) == (nodes, ranks) and "ratio_to_fence" in r \
                    and "series" not in r:
                target = 1.2 if r["op"] == "barrier" else 1.3
                verdict = "met" if r["ratio_to_fence"] <= target else "MISSED"
                out.append(f"| {r['op']} | {r['bytes']} | {r['median_us']:.0f} | {r['p99_us']:.0f} | "
                           f"{r['fence_median_us']:.0f} | {r['ratio_to_fence']:.2f} | <= {target} ({verdict}) |")
        out.append("")
        out.append("Against the peers (separate steps of the same allocation):\n")
        out.append("| operation | jobkit | torch gloo | gloo / jobkit | Open MPI | raw fence (pmix_floor) |")
        out.append("|---|---|---|---|---|---|")
        floor = find(rows, "pmix", "fence_collect", ranks, nodes)
        pairs = [("barrier", find(rows, "jobkit", "barrier", ranks, nodes), "barrier", "barrier"),
                 ("broadcast (small object)", find(rows, "jobkit", "broadcast", ranks, nodes, 1024),
                  "broadcast_object_list", "bcast"),
                 ("all_gather (small object)", find(rows, "jobkit", "all_gather", ranks, nodes, 1024),
                  "all_gather_object", "allgather"),
                 ("all_reduce (scalar)", find(rows, "jobkit", "all_reduce", ranks, nodes, 8), "all_reduce",
                  "allreduce")]
        for label, mine, torch_op, mpi_op in pairs:
            torch = find(rows, "torch_gloo", torch_op, ranks, nodes)
            mpi = next((r for r in rows if r["impl"] == "mpi" and r["op"] == mpi_op and r["ranks"] == ranks
                        and r["nodes"] == nodes), None)
            speedup = f"{torch['median_us'] / mine['median_us']:.1f}x" if torch and mine else "-"
            out.append(f"| {label} | {us(mine)} | {us(torch)} | {speedup} | {us(mpi)} | {us(floor)} |")
        out.append("")
        big = [r for r in rows if r["impl"] == "jobkit" and (r["nodes"], r["ranks"]) == (nodes, ranks)
               and "mb_per_s" in r and "series" not in r]
        if big:
            out.append("Large payloads (all_gather: each rank sends bytes / ranks):\n")
            out.append("| operation | bytes | median ms | MB/s |")
            out.append("|---|---|---|---|")
            for r in big:
                out.append(f"| {r['op']} | {r['bytes']} | {r['median_us'] / 1000:.1f} | {r['mb_per_s']:.0f} |")
            out.append("")
    growth = [r for r in rows if r.get("series") == "growth"]
    if growth:
        top = max(r["ranks"] for r in growth)
        out.append(f"### Growth from 2 to {top} ranks (3 nodes from 3 ranks on; more than 24 ranks overcommit 24 CPUs)\n")
        out.append("Median of the slowest rank per iteration (us), each operation alternating with a collecting "
                   "PMIx fence timed the same way; setup: jobkit_loop's time to a usable world (slowest rank, ms). "
                   "Growth: the value at the largest size over the value at the smallest.\n")
        ops = [("barrier", 0), ("all_reduce", 8), ("all_gather", 8)]
        head = "| ranks | nodes |"
        for op, size in ops:
            head += f" {op}{' ' + str(size) + ' B' if size else ''} | fence (paired) | ratio |"
        out.append(head + " setup ms |")
        out.append("|---|---|" + "---|---|---|" * len(ops) + "---|")
        sizes = sorted({r["ranks"] for r in growth})
        def find_op(ranks, op, size):
            return next((r for r in growth if r["ranks"] == ranks and r["op"] == op and r["bytes"] == size
                         and "fence_median_us" in r), None)
        for ranks in sizes:
            nodes = next(r["nodes"] for r in growth if r["ranks"] == ranks)
            cells = [str(ranks), str(nodes)]
            for op, size in ops:
                r = find_op(ranks, op, size)
                cells += [f"{r['median_us']:.0f}", f"{r['fence_median_us']:.0f}", f"{r['ratio_to_fence']:.2f}"] \
                    if r else ["-"] * 3
            init = next((r for r in growth if r["ranks"] == ranks and r["op"] == "init"), None)
            cells.append(f"{init['median_us'] / 1000:.0f}" if init else "-")
            out.append("| " + " | ".join(cells) + " |")
        first, last = sizes[0], sizes[-1]
        cells = ["growth", f"{first} to {last}"]
        for op, size in ops:
            a, b = find_op(first, op, size), find_op(last, op, size)
            cells += [f"{b['median_us'] / a['median_us']:.1f}x", f"{b['fence_median_us'] / a['fence_median_us']:.1f}x",
                      ""] if a and b else ["-"] * 3
        ia = next((r for r in growth if r["ranks"] == first and r["op"] == "init"), None)
        ib = next((r for r in growth if r["ranks"] == last and r["op"] == "init"), None)
        cells.append(f"{ib['median_us'] / ia['median_us']:.1f}x" if ia and ib else "-")
        out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out += growth_by_one_loop(growth_loop)
    print("\n".join(out))


def growth_by_one_loop(rows):
    """compare.sh's growth_loop: medians over rounds, by size, and the growth from the smallest."""
    if not rows:
        return []
    # (label, impl, op, bytes (None: any), field, divisor)
    columns = [("barrier", "jobkit", "barrier", 0, "median_us", 1),
               ("all_reduce 8 B", "jobkit", "allreduce", 8, "median_us", 1),
               ("all_gather 8 B", "jobkit", "allgather", 8, "median_us", 1),
               ("fence", "pmix", "fence_collect", 0, "median_us", 1),
               ("setup ms", "jobkit", "init", None, "median_us", 1000),
               ("PMIx setup ms", "pmix", "init", None, "median_us", 1000),
               ("setup from exec ms", "jobkit", "init", None, "from_exec_us", 1000),
               ("PMIx setup from exec ms", "pmix", "init", None, "from_exec_us", 1000),
               ("setup CPU ms per rank", "jobkit", "init", None, "cpu_ms_per_rank", 1),
               ("PMIx setup CPU ms per rank", "pmix", "init", None, "cpu_ms_per_rank", 1)]
    rounds = len({r["round"] for r in rows})

    def value(ranks, impl, op, size, field, divisor):
        v = [r for r in rows if r["ranks"] == ranks and r["impl"] == impl and r["op"] == op
             and (size is None or r["bytes"] == size) and field in r]
        # PMIx's setup: the faster of its two data stores (launcher's, "hash") at each size, as jobkit picks.
        stores = ["launcher", "hash"] if impl == "pmix" and op == "init" else [None]
        medians = [statistics.median(w) for w in
                   ([r[field] / divisor for r in v if store is None or r.get("gds", store) == store] for store in stores)
                   if w]
        return min(medians) if medians else None

    sizes = sorted({r["ranks"] for r in rows})
    out = [f"### Growth from {sizes[0]} to {sizes[-1]} ranks by one loop (compare.sh growth_loop)\n",
           f"Median over {rounds} rounds of each run's median of the slowest rank per iteration (us); every "
           "operation back to back in its own loop (jobkit_loop, pmix_floor), the runs alternating; setup: "
           "the slowest rank's time to a usable world (jobkit: the first barrier; PMIx: PMIx_Init and one "
           "collecting fence, the median of the faster data store); setup CPU: the mean over ranks of the CPU "
           "time a rank used from its start to a usable world (getrusage). Ratio: jobkit's barrier over the fence.\n",
           "| ranks | nodes | " + " | ".join(c[0] for c in columns) + " | barrier / fence |",
           "|---|---|" + "---|" * (len(columns) + 1)]
    table = {n: [value(n, *c[1:]) for c in columns] for n in sizes}
    for n in sizes:
        nodes = next(r["nodes"] for r in rows if r["ranks"] == n)
        cells = [f"{x:,.0f}" if x is not None else "-" for x in table[n]]
        b, f = table[n][0], table[n][3]
        ratio = f"{b / f:.2f}" if b and f else "-"
        out.append(f"| {n} | {nodes} | " + " | ".join(cells) + f" | {ratio} |")
    first, last = table[sizes[0]], table[sizes[-1]]
    growth = [f"{b / a:.1f}x" if a and b else "-" for a, b in zip(first, last)]
    out.append(f"| growth | {sizes[0]} to {sizes[-1]} | " + " | ".join(growth) + " | |")
    out.append("")
    return out


if __name__ == "__main__":
    main()
