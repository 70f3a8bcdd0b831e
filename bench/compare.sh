#!/usr/bin/env bash
# jobkit's collectives against the raw PMIx fence, torch.distributed gloo and Open MPI, all in one
# Slurm allocation on the dev cluster: 1 node x 4 ranks and 3 nodes x 24 ranks, then the growth
# of barrier and all_reduce from 2 to 32 ranks. Writes OUT_DIR/results.jsonl (every JSON line of
# every run) and OUT_DIR/summary.md (bench/summarize.py), and prints the summary.
#
#   bench/compare.sh [OUT_DIR [BUILD_DIR]]     (defaults: bench/results, build-test)
# Environment: ITERS (jobkit and C peers, default 1000), TORCH_ITERS (default 200).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
out=$(realpath -m "${1:-$here/results}")
build=$(realpath -m "${2:-$repo/build-test}")
jobkit=$build/src/cli/jobkit
[[ -x $jobkit ]] || { echo "$0: $jobkit missing: build first (meson setup $build && ninja -C $build)" >&2; exit 1; }

if [[ -z ${JOBKIT_COMPARE_INSIDE:-} ]]; then
  [[ -n ${SLURM_CONF:-} ]] || eval "$("$repo/slurm/dev-cluster.sh" env)"
  mkdir -p "$out"
  : >"$out/results.jsonl"
  # One allocation for every step: 3 nodes, 32 tasks (more than the 24 CPUs: --overcommit).
  JOBKIT_COMPARE_INSIDE=1 salloc --quiet -N3 -n32 --overcommit --time=30 "$0" "$out" "$build"
  /usr/bin/python3 "$here/summarize.py" "$out/results.jsonl" | tee "$out/summary.md"
  exit 0
fi

iters=${ITERS:-1000}
torch_iters=${TORCH_ITERS:-200}
record() { tee -a "$out/results.jsonl"; }
step() { srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 --overcommit "$@"; }
echo "compare: allocation $SLURM_JOB_ID on $SLURM_JOB_NODELIST" >&2

for layout in "1 4" "3 24"; do
  read -r nodes ranks <<<"$layout"
  echo "compare: jobkit bench, $nodes x $ranks" >&2
  step -N"$nodes" -n"$ranks" "$jobkit" bench --json --iters "$iters" | record
  echo "compare: peers, $nodes x $ranks" >&2
  TORCH_ITERS=$torch_iters "$here/peers/run_all.sh" "$nodes" "$ranks" "$iters" "$build" | record
done

for ranks in 2 4 8 16 32; do
  nodes=$((ranks < 3 ? ranks : 3))
  echo "compare: growth, $nodes x $ranks" >&2
  step -N"$nodes" -n"$ranks" "$jobkit" bench --json --iters "$iters" --ops barrier,all_reduce --max-bytes 8 |
    sed 's/^{/{"series":"growth",/' | record
done
