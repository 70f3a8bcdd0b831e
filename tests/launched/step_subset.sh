#!/usr/bin/env bash
# Steps on a subset of their allocation's nodes (an allocation of c1-c3), as `jobkit run` makes
# them once a node is blamed: the data path starts wherever the step runs. Slurm's mpi/pmix sends a
# direct modex request for a rank on the step's k-th node to the job's k-th node (pmix/facts.hpp,
# bench/RESULTS.md 2026-12-02), so where the two differ jobkit reads the endpoints after one
# collecting fence instead (DEBUG "endpoints through a collecting fence"), and on the job's first
# nodes on demand, as before. Each step: 2 nodes x 2 ranks, one jobkit broadcast from rank 3 (one
# process per rank: in a 2-node step on c2,c3 a second collecting fence of the step, by a second
# process, hung 5 times in 35, Slurm's direct connection between the two slurmstepds never made:
# bench/RESULTS.md 2026-12-02), JOBKIT_TIMEOUT=20.
# usage: step_subset.sh MODE JOBKIT
#   later   a step on c2,c3 (without the allocation's first node): every endpoint read on demand
#           was never answered before (each rank's data path setup failed at its deadline)
#   gap     a step on c1,c3 (c2 left out): on demand, a read of a c3 rank's endpoint was never
#           answered (jobkit's own connections only read c1's, so it passed by luck)
#   first   a step on c1,c2 (the allocation's first nodes): endpoints still read on demand
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes later gap first
mode=$1
jobkit=$(realpath "$2")
name="jobkit-step-subset-test"

if [[ -z ${JOBKIT_STEP_SUBSET_TEST_INSIDE:-} ]]; then
  need_cluster
  trap 'scancel --name=$name 2>/dev/null' EXIT
  timeout 150 salloc -Q -N3 --ntasks-per-node=2 --time=5 --job-name=$name \
    env JOBKIT_STEP_SUBSET_TEST_INSIDE=1 bash "$0" "$@"
  exit $?
fi

case $mode in
  later) nodes=c2,c3 on_demand=no ;;
  gap) nodes=c1,c3 on_demand=no ;;
  first) nodes=c1,c2 on_demand=yes ;;
esac
[[ $SLURM_JOB_NODELIST == "c[1-3]" ]] || fail "the allocation is $SLURM_JOB_NODELIST, not c[1-3]"
echo "--- a step on $nodes of the allocation $SLURM_JOB_NODELIST"
run_step bash -c "printf 'subset-42\\n' | timeout 60 env JOBKIT_TIMEOUT=20 JOBKIT_LOG_LEVEL=debug JOBKIT_LOG_RANKS=all \
  srun --mpi=pmix -w $nodes -N2 -n4 --ntasks-per-node=2 --kill-on-bad-exit=1 \
  bash -c '\"$jobkit\" broadcast --root 3 && echo \"rank \$SLURM_PROCID on \$(hostname) passed\"'"
((status == 0)) || fail "the step failed (exit status $status)"
((elapsed_ms < 15000)) || fail "the step took $elapsed_ms ms"
(($(count '^subset-42$') == 4)) || fail "$(count '^subset-42$') of 4 ranks printed the broadcast line"
for rank in 0 1 2 3; do
  (($(count "^rank $rank on c[1-3] passed$") == 1)) || fail "rank $rank did not end its broadcast"
done
fenced=$(count 'endpoints through a collecting fence, not read on demand')
demand=$(count 'endpoints read on demand')
if [[ $on_demand == yes ]]; then
  ((fenced == 0 && demand == 4)) || fail "on the first nodes: $demand rank(s) read endpoints on demand, $fenced fenced"
else
  ((fenced == 4 && demand == 0)) || fail "off the first nodes: $fenced rank(s) fenced, $demand read on demand"
  (($(count "node .* of the step (SLURM_STEP_NODELIST=") == 4)) || fail "the reason is not named"
fi
echo "PASS: $mode"
