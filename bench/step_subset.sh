#!/usr/bin/env bash
# Steps on a subset of an allocation's nodes under Slurm's mpi/pmix (bench/RESULTS.md, 2026-12-02):
# (1) whether every rank reads every other rank's key, with no fence (direct modex) and after a
# collecting fence, PMIx alone (bench/pmix_step_subset.c); (2) how often a step of two jobkit
# processes per rank (jobkit broadcast, then jobkit barrier: the step's second collecting fence)
# completes, per layout, with the endpoints fenced (the rule of pmix/facts.hpp, or forced on the
# first nodes) or with SLURM_JOB_NODELIST set to the step's nodes in srun's environment, with the
# machine's load at the end of each case.
# usage: bench/step_subset.sh BUILD_DIR [TRIALS]   (default 25; needs the dev cluster of 3+ nodes)
# One JSON line per case on stdout.
set -uo pipefail
build=$(realpath "$1")
trials=${2:-25}
if [[ -z ${JOBKIT_STEP_SUBSET_BENCH_INSIDE:-} ]]; then
  eval "$("$(dirname "$0")/../slurm/dev-cluster.sh" env)"
  exec timeout 3000 salloc -Q -N3 --ntasks-per-node=2 --time=60 \
    env JOBKIT_STEP_SUBSET_BENCH_INSIDE=1 bash "$0" "$@"
fi
unset SLURM_NTASKS SLURM_NPROCS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE
probe=$build/bench/pmix_step_subset
jobkit=$build/src/cli/jobkit
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# (1) PMIx alone: 12 gets per step (4 ranks x 3 peers), 5 s PMIX_TIMEOUT, the step bounded at 20 s.
for nodes in c1,c2 c1,c3 c2,c3; do
  for mode in direct fence; do
    start=$(date +%s%N)
    timeout 20 srun --mpi=pmix -w "$nodes" -N2 -n4 "$probe" "$mode" 5 >"$out" 2>&1
    status=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    echo "{\"case\":\"pmix_get\",\"job\":\"$SLURM_JOB_NODELIST\",\"step\":\"$nodes\",\"mode\":\"$mode\",\"ok_gets\":$(grep -c '"ok":true' "$out"),\"of\":12,\"exit\":$status,\"ms\":$ms}"
  done
done

# (2) jobkit, two processes per rank, JOBKIT_TIMEOUT=15. A failed step is "crossed" when both
# slurmstepds' dump of the pending ring fence (slurmd logs) says each contributed and forwarded
# but received nothing (loc=1/prev=0/fwd=1): their direct connection never made; else "other".
logs=$("$(dirname "$0")/../slurm/dev-cluster.sh" settings | sed -n 's/^cluster_dir=\([^ ]*\).*/\1/p')/log
trial() {  # LABEL NODES SRUN_ENV TASK_ENV
  local ok=0 crossed=0 other=0 id
  for ((i = 0; i < trials; i++)); do
    # shellcheck disable=SC2086 # the environments are VAR=VALUE words or empty
    if printf 'x\n' | timeout 60 env JOBKIT_TIMEOUT=15 $3 srun --mpi=pmix -w "$2" -N2 -n4 --kill-on-bad-exit=1 \
      bash -c "$4 '$jobkit' broadcast --root 3 >/dev/null && $4 '$jobkit' barrier" >"$out" 2>&1; then
      ok=$((ok + 1))
      continue
    fi
    sleep 3  # the slurmstepds dump their state as the step ends
    id=$(grep -o 'StepId=[0-9.]*' "$out" | head -1 | cut -d= -f2)
    if [[ -n $id ]] && (($(cat "$logs"/slurmd-c*.log | grep -F "[$id]" | grep -c 'contribs: loc=1/prev=0/fwd=1') == 2)); then
      crossed=$((crossed + 1))
    else
      other=$((other + 1))
    fi
  done
  echo "{\"case\":\"two_processes\",\"label\":\"$1\",\"step\":\"$2\",\"srun_env\":\"$3\",\"ok\":$ok,\"crossed\":$crossed,\"other\":$other,\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
}
trial fenced-by-rule c2,c3 "" ""
trial fenced-forced c1,c2 "" "SLURM_STEP_NODELIST=forced-fence"
trial fenced-forced c1,c3 "" "SLURM_STEP_NODELIST=forced-fence"
trial job-nodelist-override c2,c3 "SLURM_JOB_NODELIST=c[2-3] SLURM_NODELIST=c[2-3]" ""
trial on-demand c1,c2 "" ""
