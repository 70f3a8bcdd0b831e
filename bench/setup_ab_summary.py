#!/usr/bin/env python3
"""Medians of bench/setup_ab.sh's lines: per layout and side, the time to a usable world (ms)."""
import collections
import json
import statistics
import sys

rows = collections.defaultdict(lambda: {"slowest": [], "rank0": [], "exec_slowest": [], "exec_rank0": []})
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    key = (r["nodes"], r["ranks"], r["side"])
    if r["impl"] == "jobkit":
        rows[key]["slowest"].append(r["median_us"] / 1e3)
        rows[key]["rank0"].append(r["rank0_median_us"] / 1e3)
    else:
        rows[key]["rank0"].append(r["median_us"] / 1e3)
    if "from_exec_us" in r:
        rows[key]["exec_slowest"].append(r["from_exec_us"] / 1e3)
        rows[key]["exec_rank0"].append(r["rank0_from_exec_us"] / 1e3)


def med(v):
    return f"{statistics.median(v):,.0f}" if v else "-"


def spread(v):
    return ", ".join(f"{x:,.0f}" for x in v)


print("| layout | side | rounds | slowest rank, median (ms) | rank 0, median (ms) | rank 0, every round (ms) "
      "| from exec: slowest rank | from exec: rank 0 | from exec: rank 0, every round |")
print("|---|---|---|---|---|---|---|---|---|")
for (nodes, ranks, side), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2])):
    print(f"| {nodes} x {ranks} | {side} | {len(v['rank0'])} | {med(v['slowest'])} | {med(v['rank0'])} | "
          f"{spread(v['rank0'])} | {med(v['exec_slowest'])} | {med(v['exec_rank0'])} | {spread(v['exec_rank0'])} |")

for nodes, ranks in sorted({(k[0], k[1]) for k in rows}, key=lambda k: k[1]):
    torch = rows.get((nodes, ranks, "torch"), {}).get("rank0", [])
    if not torch:
        continue
    for side in ("base", "new", "new-launcher-gds", "extra"):
        mine = rows.get((nodes, ranks, side), {}).get("rank0", [])
        if mine:
            ratio = statistics.median(torch) / statistics.median(mine)
            print(f"{nodes} x {ranks}: torch / jobkit {side} (rank 0 medians): {ratio:.1f}x")
        mine = rows.get((nodes, ranks, side), {}).get("exec_rank0", [])
        if mine:
            ratio = statistics.median(torch) / statistics.median(mine)
            print(f"{nodes} x {ranks}: torch init_process_group / jobkit {side} from exec (rank 0 medians): "
                  f"{ratio:.1f}x")
            torch_exec = rows[(nodes, ranks, "torch")]["exec_rank0"]
            if torch_exec:
                ratio = statistics.median(torch_exec) / statistics.median(mine)
                print(f"{nodes} x {ranks}: torch / jobkit {side}, both from exec (rank 0 medians): {ratio:.1f}x")
