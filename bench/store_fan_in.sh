#!/usr/bin/env bash
# The c10d store's fan-in (bench/store_fan_in.py) on the dev cluster: for each layout of LAYOUTS
# ("NODESxTASKS_PER_NODE") and each of TRIALS trials, one step per store, in turn: tcp (jobkit.torch's
# default, torch's TCPStore found through jobkit), jobkit (a JobkitStore) and env (torch's TCPStore
# at MASTER_ADDR/MASTER_PORT, as a torchrun user sets it up). Every rank's line goes to OUT with the
# commit, the layout and the trial; a summary per store and layout is printed: the median over rounds
# of a round's time on its slowest rank, and the setup time of the slowest rank (medians over trials).
#
#   bench/store_fan_in.sh [OUT [BUILD_DIR]]   (defaults: bench/results/store-fan-in.jsonl, build)
# Environment: LAYOUTS (default "3x16 3x32"), TRIALS (default 3), ROUNDS (default 20), STEP_TIMEOUT
# (seconds for one step, default 600). Needs the dev
# cluster (slurm/dev-cluster.sh start 3) and torch for /usr/bin/python3.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
out=$(realpath -m "${1:-$here/results/store-fan-in.jsonl}")
build=$(realpath -m "${2:-$repo/build}")
[[ -d $build/python/jobkit ]] || { echo "$0: $build/python/jobkit missing: build first" >&2; exit 1; }
commit=$(git -C "$repo" rev-parse --short HEAD)
eval "$("$repo/slurm/dev-cluster.sh" env)"
first_node_address=$("$repo/slurm/dev-cluster.sh" settings | sed -n "s/.*cluster_subnet=\([0-9.]*\).*/\1/p").1
python=${PYTHON:-/usr/bin/python3}

for layout in ${LAYOUTS:-3x16 3x32}; do
  nodes=${layout%x*} per_node=${layout#*x}
  for trial in $(seq "${TRIALS:-3}"); do
    for kind in tcp jobkit env; do
      env -u RANK -u WORLD_SIZE MASTER_ADDR="$first_node_address" MASTER_PORT=29517 PYTHONPATH="$build/python" \
        timeout "${STEP_TIMEOUT:-600}" srun --mpi=pmix -N"$nodes" -n$((nodes * per_node)) --overcommit \
        "$python" "$here/store_fan_in.py" "$kind" "${ROUNDS:-20}" |
        sed "s/^{/{\"commit\":\"$commit\",\"layout\":\"$layout\",\"trial\":$trial,/" >>"$out"
      echo "$layout trial $trial $kind done" >&2
    done
  done
done

"$python" - "$out" "$commit" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"store_fan_in"' in l and f'"commit":"{sys.argv[2]}"' in l]
by = {}
for r in rows:
    by.setdefault((r["layout"], r["store"], r["trial"]), []).append(r)
summary = {}
for (layout, store, trial), ranks in by.items():
    rounds = [max(r["round_ms"][i] for r in ranks) for i in range(len(ranks[0]["round_ms"]))]
    summary.setdefault((layout, store), []).append((statistics.median(rounds), max(r["setup_ms"] for r in ranks)))
print(f"{'layout':<8} {'store':<7} {'round ms (median)':>18} {'setup ms':>10}  trials")
for (layout, store), values in sorted(summary.items()):
    print(f"{layout:<8} {store:<7} {statistics.median(v[0] for v in values):>18.2f} "
          f"{statistics.median(v[1] for v in values):>10.1f}  {len(values)}")
PY
