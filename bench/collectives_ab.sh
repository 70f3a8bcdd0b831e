#!/usr/bin/env bash
# Two jobkit builds side by side in one allocation, alternating per round: bench/jobkit_loop's
# small operations on 1 x 4 (the loop and statistic of the comparison with Open MPI), and
# `jobkit bench` (each operation alternating with a collecting PMIx fence) on 3 x 64, the top of
# the growth series. Medians over rounds of each line's median (us) and the ratio new / base.
#
#   bench/collectives_ab.sh OUT_DIR BASE_BUILD NEW_BUILD
# Environment: ROUNDS (default 3), ITERS (default 1000 for jobkit_loop, 300 for jobkit bench).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
[[ $# -eq 3 ]] || { echo "usage: $0 OUT_DIR BASE_BUILD NEW_BUILD" >&2; exit 2; }
out=$(realpath -m "$1") base=$(realpath -m "$2") new=$(realpath -m "$3")
for b in "$base" "$new"; do
  [[ -x $b/bench/jobkit_loop && -x $b/src/cli/jobkit ]] || { echo "$0: build $b first" >&2; exit 1; }
done
if [[ -z ${JOBKIT_AB_INSIDE:-} ]]; then
  [[ -n ${SLURM_CONF:-} ]] || eval "$("$repo/slurm/dev-cluster.sh" env)"
  mkdir -p "$out"
  : >"$out/collectives_ab.jsonl"
  JOBKIT_AB_INSIDE=1 salloc --quiet -N3 -n64 --overcommit --time=30 "$0" "$out" "$base" "$new"
  /usr/bin/python3 - "$out/collectives_ab.jsonl" <<'PY'
import collections, json, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows[(r["ranks"], r["op"], r["bytes"], r["side"])].append(r["median_us"])
print("| ranks | operation | bytes | base median (us), every round | new median (us), every round | new / base |")
print("|---|---|---|---|---|---|")
for (ranks, op, size, side), v in sorted(rows.items()):
    if side != "base":
        continue
    w = rows.get((ranks, op, size, "new"), [])
    if w:
        ratio = statistics.median(w) / statistics.median(v)
        print(f"| {ranks} | {op} | {size} | {', '.join(f'{x:.0f}' for x in v)} | {', '.join(f'{x:.0f}' for x in w)} | {ratio:.2f} |")
PY
  exit 0
fi
step() { srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 --overcommit "$@"; }
record() { sed "s/^{/{\"side\":\"$1\",\"round\":$2,/" >>"$out/collectives_ab.jsonl"; }
for round in $(seq "${ROUNDS:-3}"); do
  for side in base new; do
    build=$base
    [[ $side == new ]] && build=$new
    echo "collectives_ab: round $round, $side" >&2
    step -N1 -n4 "$build/bench/jobkit_loop" "${ITERS:-1000}" 100 0 0 | grep -v '"init"' | record "$side" "$round"
    step -N3 -n64 "$build/src/cli/jobkit" bench --json --iters "${ITERS:-300}" --ops barrier,all_reduce,all_gather \
      --max-bytes 8 | record "$side" "$round"
  done
done
