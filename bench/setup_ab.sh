#!/usr/bin/env bash
# Time to a usable world, two jobkit builds side by side and torch in the same allocation: per
# round and layout, bench/jobkit_loop's "init" (start of main to the end of the first barrier:
# identity, endpoint exchange, the world's tree and node segments; the slowest rank and rank 0) of
# BASE_BUILD, then of NEW_BUILD, then of NEW_BUILD with JOBKIT_PMIX_GDS=launcher (the launcher's
# PMIx data store), then torch's init_process_group("gloo", env://) on rank 0 (after Python and
# torch are imported, as bench/peers/torch_gloo.py times it; and, as from_exec_us, from its
# process's start: Python's start and `import torch` included). Alternating, so that the machine's
# load hits every side alike; compare medians over ROUNDS.
#
#   bench/setup_ab.sh OUT_DIR BASE_BUILD NEW_BUILD
# Every jobkit_loop runs through bench/from_exec.sh, so its lines also carry the time from the
# process's start (from_exec_us, rank0_from_exec_us: the dynamic loader's work included).
# Environment: ROUNDS (default 5), LAYOUTS (default "1x4 3x24"), TORCH (default 1; 0 skips torch),
# LAUNCHER_GDS (default 1; 0 skips the JOBKIT_PMIX_GDS=launcher side),
# EXTRA_BUILD (a third build, side "extra", e.g. one configured with -Dnccl=disabled -Dcuda=disabled).
# Writes OUT_DIR/setup_ab.jsonl and prints the medians (bench/setup_ab_summary.py).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
[[ $# -eq 3 ]] || { echo "usage: $0 OUT_DIR BASE_BUILD NEW_BUILD" >&2; exit 2; }
out=$(realpath -m "$1")
base=$(realpath -m "$2")
new=$(realpath -m "$3")
for b in "$base" "$new"; do
  [[ -x $b/bench/jobkit_loop ]] || { echo "$0: $b/bench/jobkit_loop missing: build it first" >&2; exit 1; }
done

if [[ -z ${JOBKIT_SETUP_AB_INSIDE:-} ]]; then
  [[ -n ${SLURM_CONF:-} ]] || eval "$("$repo/slurm/dev-cluster.sh" env)"
  mkdir -p "$out"
  : >"$out/setup_ab.jsonl"
  JOBKIT_SETUP_AB_INSIDE=1 salloc --quiet -N3 -n64 --overcommit --time=30 "$0" "$out" "$base" "$new"
  /usr/bin/python3 "$here/setup_ab_summary.py" "$out/setup_ab.jsonl"
  exit 0
fi

echo "setup_ab: allocation $SLURM_JOB_ID on $SLURM_JOB_NODELIST" >&2
step() { srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 --overcommit "$@"; }
record() { # SIDE ROUND: tags each JSON line
  sed "s/^{/{\"series\":\"setup_ab\",\"side\":\"$1\",\"round\":$2,/" >>"$out/setup_ab.jsonl"
}
for layout in ${LAYOUTS:-1x4 3x24}; do
  nodes=${layout%x*} ranks=${layout#*x}
  for round in $(seq "${ROUNDS:-5}"); do
    echo "setup_ab: $nodes x $ranks, round $round" >&2
    step -N"$nodes" -n"$ranks" "$here/from_exec.sh" "$base/bench/jobkit_loop" 1 0 0 | grep '"init"' | record base "$round"
    step -N"$nodes" -n"$ranks" "$here/from_exec.sh" "$new/bench/jobkit_loop" 1 0 0 | grep '"init"' | record new "$round"
    if [[ ${LAUNCHER_GDS:-1} != 0 ]]; then
      JOBKIT_PMIX_GDS=launcher step -N"$nodes" -n"$ranks" "$here/from_exec.sh" "$new/bench/jobkit_loop" 1 0 0 |
        grep '"init"' | record new-launcher-gds "$round"
    fi
    if [[ -n ${EXTRA_BUILD:-} ]]; then
      step -N"$nodes" -n"$ranks" "$here/from_exec.sh" "$EXTRA_BUILD/bench/jobkit_loop" 1 0 0 | grep '"init"' |
        record extra "$round"
    fi
    if [[ ${TORCH:-1} != 0 ]]; then
      PEERS=torch TORCH_ITERS=1 "$here/peers/run_all.sh" "$nodes" "$ranks" 1 "$new" 2>/dev/null |
        grep '"init_process_group"' | record torch "$round"
    fi
  done
done
