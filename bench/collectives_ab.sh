#!/usr/bin/env bash
# Two jobkit builds side by side in one allocation, alternating per round: bench/jobkit_loop's
# small operations on LOOP_LAYOUTS (default 1 x 4; the loop and statistic of the comparison with
# Open MPI), and `jobkit bench` (each operation alternating with a collecting PMIx fence) on 3 x 64,
# the top of the growth series (GROWTH_TOP=0 leaves it out). WITH_MPI=1 adds Open MPI's
# bench/peers/mpi_bench (of NEW_BUILD) to each round of the loop as a third side. Medians over
# rounds of each line's median (us) and the ratios new / base and new / mpi.
#
#   bench/collectives_ab.sh OUT_DIR BASE_BUILD NEW_BUILD
# Environment: ROUNDS (default 3), ITERS (default 1000 for jobkit_loop, 300 for jobkit bench),
# LARGE_BYTES and LARGE_ITERS (default 0: none; jobkit_loop's broadcast_into and all_gather_into of
# that many bytes, that many times: the buffer tree),
# LOOP_LAYOUTS (default "1x4"), LOOP_WORDS (jobkit_loop's words for both jobkit sides, e.g. "steps":
# stop_requested, jobkit::progress and train_step), GROWTH_TOP (default 1), WITH_MPI (default 0), PIN (none, cyclic or
# block: bench/pin.sh binds every task of every side to one CPU), BASE_ENV and NEW_ENV ("NAME=value
# ..." for that side's steps: one build against itself with a setting changed, e.g.
# BASE_ENV=JOBKIT_WHERE=0 for the cost of `jobkit where`'s record).
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
    rows[(r.get("nodes", 0), r["ranks"], r["op"], r["bytes"], r["side"])].append(r["median_us"])
cells = lambda v: ", ".join(f"{x:.0f}" for x in v)
print("| nodes x ranks | operation | bytes | base median (us), every round | new median (us), every round | "
      "mpi median (us), every round | new / base | new / mpi |")
print("|---|---|---|---|---|---|---|---|")
for (nodes, ranks, op, size, side), v in sorted(rows.items()):
    if side != "base":
        continue
    w = rows.get((nodes, ranks, op, size, "new"), [])
    m = rows.get((nodes, ranks, op, size, "mpi"), [])
    if w:
        ratio = statistics.median(w) / statistics.median(v)
        to_mpi = f"{statistics.median(w) / statistics.median(m):.2f}" if m else ""
        print(f"| {nodes} x {ranks} | {op} | {size} | {cells(v)} | {cells(w)} | {cells(m)} | {ratio:.2f} | {to_mpi} |")
PY
  exit 0
fi
source "$here/step.sh"
# side_step SIDE STEP_ARGS...: step with that side's BASE_ENV or NEW_ENV exported.
side_step() {
  local side=$1 vars=
  shift
  [[ $side == base ]] && vars=${BASE_ENV:-}
  [[ $side == new ]] && vars=${NEW_ENV:-}
  (
    for v in $vars; do export "$v"; done
    step "$@"
  )
}
record() { sed "s/^{/{\"side\":\"$1\",\"round\":$2,/" >>"$out/collectives_ab.jsonl"; }
sides=(base new)
[[ ${WITH_MPI:-0} == 1 ]] && sides+=(mpi)
for round in $(seq "${ROUNDS:-3}"); do
  for layout in ${LOOP_LAYOUTS:-1x4}; do
    for side in "${sides[@]}"; do
      loop=$base/bench/jobkit_loop
      [[ $side == new ]] && loop=$new/bench/jobkit_loop
      read -ra words <<<"${LOOP_WORDS:-}"
      [[ $side == mpi ]] && loop=$new/bench/peers/mpi_bench && words=()
      echo "collectives_ab: round $round, $layout, $side" >&2
      # Open MPI now and then crashes in its shared-memory setup on the dev cluster: that round
      # then has no mpi line, and says so.
      OMPI_MCA_mpi_yield_when_idle=1 side_step "$side" -N"${layout%x*}" -n"${layout#*x}" "$loop" "${ITERS:-1000}" 100 "${LARGE_BYTES:-0}" "${LARGE_ITERS:-0}" "${words[@]}" |
        grep -v '"init"' | record "$side" "$round" ||
        { [[ $side == mpi ]] && echo "collectives_ab: $side failed in round $round on $layout" >&2; } || exit 1
    done
  done
  [[ ${GROWTH_TOP:-1} == 1 ]] || continue
  for side in base new; do
    build=$base
    [[ $side == new ]] && build=$new
    echo "collectives_ab: round $round, 3 x 64, $side" >&2
    side_step "$side" -N3 -n64 "$build/src/cli/jobkit" bench --json --iters "${ITERS:-300}" --ops barrier,all_reduce,all_gather \
      --max-bytes 8 | record "$side" "$round"
  done
done
