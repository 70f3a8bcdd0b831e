#!/usr/bin/env python3
"""Counts the meson test results of build directories (every meson-logs/testlog*.json in each).

Prints each test that failed or was skipped (with the reason a skipped test gave), optionally the
last lines of each failed test's output, the slowest tests, and last the line "N passed, N failed,
N skipped". A directory without any test log
counts as one failure (its build or its setup failed). With --ci a skip counts as a failure: CI
must run everything.

  scripts/test-summary.py [--ci] [--output-lines N] [--slowest N] [LABEL=]DIR...

LABEL (default: DIR) names the directory in what is printed.
"""
import argparse
import glob
import json
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="count a skipped test as failed")
    parser.add_argument("--slowest", type=int, default=0, metavar="N", help="print the N slowest tests")
    parser.add_argument("--output-lines", type=int, default=0, metavar="N",
                        help="print the last N lines of each failed test's output")
    parser.add_argument("dirs", nargs="+", metavar="[LABEL=]DIR")
    args = parser.parse_args()
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    durations = []
    for spec in args.dirs:
        label, _, path = spec.rpartition("=")
        label = label or path
        logs = sorted(glob.glob(os.path.join(path, "meson-logs", "testlog*.json")))
        if not logs:
            print(f"failed {label}: no tests ran (its build failed?)")
            counts["failed"] += 1
            continue
        for log in logs:
            for line in open(log, encoding="utf-8"):
                t = json.loads(line)
                name = f"{label}: {t['name']}"
                durations.append((float(t.get("duration") or 0), name))
                if t["result"] == "OK":
                    counts["passed"] += 1
                elif t["result"] == "SKIP":
                    reason = next((l for l in t.get("stdout", "").splitlines() if l.startswith("SKIP")), "")
                    print(f"skipped {name}: {reason}")
                    counts["failed" if args.ci else "skipped"] += 1
                else:
                    print(f"failed {name}: {t['result']}")
                    counts["failed"] += 1
                    if args.output_lines:
                        output = (t.get("stdout") or "") + (t.get("stderr") or "")
                        for l in output.splitlines()[-args.output_lines:]:
                            print(f"  | {l}")
    if args.slowest:
        print(f"The {args.slowest} slowest tests:")
        for seconds, name in sorted(durations, reverse=True)[: args.slowest]:
            print(f"  {seconds:7.1f} s  {name}")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
