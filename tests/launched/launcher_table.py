#!/usr/bin/python3
"""Turns pmix_keys lines (one per key per rank) into a markdown table per layout.

usage: launcher_table.py --title TITLE NAME=FILE...
Each row is one key as one rank sees it of someone (self, the job, the next rank, a node); the
columns are the PMIx data type and each rank's value, or the status of a failed PMIx_Get.
"""
import argparse
import re
import sys

LINE = re.compile(r"^pmix-key rank=(\d+) of=(\S+) key=(\S+) (?:type=(\S+) value=(.*)|status=(.*))$")


def table(path):
    rows = {}  # (of, key) -> {rank: (type, value)}
    ranks = set()
    with open(path) as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if not m:
                raise SystemExit(f"{path}: not a key line: {line!r}")
            rank, of, key, type_, value, status = m.groups()
            rank = int(rank)
            ranks.add(rank)
            rows.setdefault((of, key), {})[rank] = (type_ or "-", value if type_ else status)
    ranks = sorted(ranks)
    out = ["| key | of | type | " + " | ".join(f"rank {r}" for r in ranks) + " |",
           "|---|---|---|" + "---|" * len(ranks)]
    order = {"self": 0, "job": 1, "next": 2}
    for (of, key), by_rank in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0], 3), kv[0][0], kv[0][1])):
        types = sorted({t for t, _ in by_rank.values() if t != "-"}) or ["-"]
        cells = [f"`{by_rank[r][1]}`" if r in by_rank else "" for r in ranks]
        out.append(f"| `{key}` | {of} | {', '.join(types)} | " + " | ".join(cells) + " |")
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--title", required=True)
    parser.add_argument("layouts", nargs="+", metavar="NAME=FILE")
    args = parser.parse_args()
    print(f"### {args.title}\n")
    for layout in args.layouts:
        name, path = layout.split("=", 1)
        print(f"#### {name}\n")
        print("\n".join(table(path)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
