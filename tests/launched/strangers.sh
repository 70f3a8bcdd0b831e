#!/usr/bin/env bash
# Strangers on the ranks' ports (issue: a shared cluster). A step of 3 nodes x 4 ranks runs rounds
# of group creations and checked collectives, once alone and once while a second step, one process
# on each node, keeps connecting to every rank's port: silent, garbage, a frame header with absurd
# sizes, a forged hello. Every value must be right and no rank may wait for a stranger.
# usage: strangers.sh BINARY
set -uo pipefail
source "$(dirname "$0")/lib.sh"
binary=$(realpath "$1")
need_cluster
echo "network: $("$repo/slurm/dev-cluster.sh" net-mode 2>/dev/null || echo loopback)"
rounds=${JOBKIT_CHURN_ROUNDS:-1500}
step=(srun --mpi=pmix -N3 -n12 --ntasks-per-node=4 env JOBKIT_TIMEOUT=60 JOBKIT_LOG_LEVEL=debug JOBKIT_LOG_RANKS=all
  "$binary" churn "$rounds")

check_step() { # label
  ((status == 0)) || fail "$1: exit status $status"
  (($(count ' 0 bad values') == 12)) || fail "$1: not every rank checked every value"
}

run_step timeout 300 "${step[@]}"
check_step "without strangers"
alone=$(awk '/^rank 0: churn/ {print $7}' <<<"$out")

work=$(mktemp -d "$repo/build-strangers.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A stranger that reaches no rank proves nothing (on a loaded machine its connections time out now
# and then): that step is run again, up to 3 times; the checks below hold for the step it reached.
for attempt in 1 2 3; do
  rm -f "$work"/ready.*
  run_step timeout 300 salloc -N3 -n12 --ntasks-per-node=4 bash -c "
    srun --overlap --mpi=none -N3 -n3 --ntasks-per-node=1 python3 '$here/stranger.py' '$(basename "$binary")' 12 '$work' >'$work/stranger' 2>&1 &
    stranger=\$!
    for _ in \$(seq 600); do [[ \$(ls '$work' | grep -c '^ready\\.') -ge 3 ]] && break; sleep 0.1; done  # every stranger looks
    ${step[*]}
    status=\$?
    wait \$stranger
    cat '$work/stranger'
    exit \$status"
  garbage=$(awk '/^stranger on /{for (i = 1; i < NF; i++) if ($i == "garbage") sum += $(i + 1)} END {print sum + 0}' <<<"$out")
  ((garbage > 0)) && break
  echo "attempt $attempt: the strangers reached no rank"
done
check_step "with strangers"
(($(count '^stranger on ') == 3)) || fail "the strangers did not run on every node"
dropped=$(count 'data path: dropped a connection from')
(($(count 'is not a jobkit hello') > 0)) || fail "no rank reported dropping a garbage-sending stranger"
(($(count 'its proof of membership is wrong') > 0)) || fail "no rank reported dropping a forged hello"
with=$(awk '/^rank 0: churn/ {print $7}' <<<"$out")
echo "strangers: $dropped connections dropped; $rounds rounds on rank 0: alone $alone s, with strangers $with s"
echo ok
