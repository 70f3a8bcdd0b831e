#!/usr/bin/env bash
# Time to detect a lost node: tests/launched/lost_node.sh (3 nodes x 2 ranks; the last node's
# ranks frozen and its packets dropped while the others wait in a barrier) run TRIALS times at the
# default limit (mode default, JOBKIT_LOST_NODE_TIMEOUT unset: 8 s) and at each limit of LIMITS
# (mode mid). Each survivor's time from the fault to its failure goes to OUT as one JSON line
# ("series":"lost_node","limit_s","trial","rank","host","ms"); a summary per limit is printed: the
# median and worst over trials of the first and of the last survivor to fail.
#
#   bench/lost_node.sh [OUT [BUILD_DIR]]   (defaults: bench/results/lost-node.jsonl, build-test)
# Environment: TRIALS (default 20), LIMITS (default "1"; whole seconds). Needs the default dev
# cluster running in netns mode (slurm/dev-cluster.sh start 3) and nft.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
out=$(realpath -m "${1:-$here/results/lost-node.jsonl}")
build=$(realpath -m "${2:-$repo/build-test}")
check=$build/tests/launched/lost_node_check
[[ -x $check ]] || { echo "$0: $check missing: build first (ninja -C $build)" >&2; exit 1; }
commit=$(git -C "$repo" rev-parse --short HEAD)

run() {  # run LIMIT MODE TRIAL
  local limit=$1 mode=$2 trial=$3 log
  log=$(LOST_NODE_LIMIT=$limit "$repo/tests/launched/lost_node.sh" "$mode" "$check" 2>&1) || {
    echo "$log" | tail -20 >&2
    echo "$0: trial $trial at $limit s failed" >&2
    return 1
  }
  sed -n 's/^rank \([0-9]*\) (\([^)]*\)) failed \([0-9]*\) ms after the fault$/\1 \2 \3/p' <<<"$log" |
    while read -r rank host ms; do
      printf '{"series":"lost_node","commit":"%s","limit_s":%s,"trial":%d,"rank":%d,"host":"%s","ms":%d}\n' \
        "$commit" "$limit" "$trial" "$rank" "$host" "$ms"
    done >>"$out"
}

for trial in $(seq "${TRIALS:-20}"); do
  run 8 default "$trial"
  for limit in ${LIMITS:-1}; do run "$limit" mid "$trial"; done
  echo "trial $trial done" >&2
done

/usr/bin/python3 - "$out" "$commit" <<'EOF'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("series") == "lost_node" and r.get("commit") == sys.argv[2]]
by = defaultdict(lambda: defaultdict(list))
for r in rows:
    by[r["limit_s"]][r["trial"]].append(r["ms"])
for limit, trials in sorted(by.items()):
    first = sorted(min(v) for v in trials.values())
    last = sorted(max(v) for v in trials.values())
    print(f"limit {limit} s, {len(trials)} trials: first survivor median {statistics.median(first):.0f} ms, "
          f"worst {first[-1]} ms; last survivor median {statistics.median(last):.0f} ms, worst {last[-1]} ms")
EOF
