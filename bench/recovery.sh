#!/usr/bin/env bash
# Time from a fault to the first step done after it (MTTR) under jobkit run, split into the
# ledger's phases, on the dev cluster: tests/launched/recovery.sh's `kill` (rank 3 killed with
# kill -9; 2 nodes x 2 ranks, 100 ms steps) and `lost-spare` (node c2's ranks frozen and its
# traffic dropped, JOBKIT_LOST_NODE_TIMEOUT=2, one spare) TRIALS times each.
# usage: bench/recovery.sh [TRIALS] [BUILD_DIR]   (default 10, build-test)
# Writes bench/results/recovery-<commit>.jsonl (one line per trial) and prints each kind's median,
# min and max; bench/RESULTS.md records them.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
trials=${1:-10}
build=$(realpath "${2:-$repo/build-test}")
rev=$(git -C "$repo" rev-parse --short HEAD)
results=$repo/bench/results/recovery-$rev.jsonl
mkdir -p "$repo/bench/results"
: >"$results"
work=$(mktemp -d /var/tmp/jobkit-recovery-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
for kind in kill lost-spare; do
  for ((t = 1; t <= trials; t++)); do
    out=$("$repo/tests/launched/recovery.sh" "$kind" "$build/src/cli/jobkit" "$build/examples/jobkit-train-requeue" \
      "$work/$kind-$t" 2>&1)
    status=$?
    line=$(grep -m1 '^measured: ' <<<"$out")
    if ((status != 0)) || [[ -z $line ]]; then
      echo "$kind trial $t failed (status $status):"
      tail -20 <<<"$out"
      continue
    fi
    seen=$(sed -n 's/.*failure seen \([0-9.-]*\) s later.*/\1/p' <<<"$line")
    phase() { sed -n "s/.*$1 +\([0-9.]*\) s.*/\1/p" <<<"$line"; }
    printf '{"kind":"%s","trial":%d,"detected_s":%s,"step_ended_s":%s,"step_started_s":%s,"world_ready_s":%s,"checkpoint_loaded_s":%s,"first_step_done_s":%s}\n' \
      "$kind" "$t" "$seen" "$(phase 'step ended')" "$(phase 'step started')" "$(phase 'world ready')" \
      "$(phase 'checkpoint loaded')" "$(phase 'first step done')" >>"$results"
    echo "$kind trial $t: $line"
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for kind in ("kill", "lost-spare"):
    r = [x for x in rows if x["kind"] == kind]
    if not r:
        continue
    print(f"{kind}: {len(r)} trials (seconds; phases from the failure seen, MTTR from the fault)")
    for key in ("detected_s", "step_ended_s", "step_started_s", "world_ready_s", "checkpoint_loaded_s", "first_step_done_s"):
        v = [x[key] for x in r]
        print(f"  {key:22} median {statistics.median(v):6.2f}  min {min(v):6.2f}  max {max(v):6.2f}")
    mttr = [x["detected_s"] + x["first_step_done_s"] for x in r]
    print(f"  {'MTTR (fault -> first step done)':22} median {statistics.median(mttr):6.2f}  min {min(mttr):6.2f}  max {max(mttr):6.2f}")
PY
