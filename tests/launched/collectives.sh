#!/usr/bin/env bash
# jobkit's collectives on the dev cluster (3 nodes; 24 ranks for the stress test, else 9 or 7).
# usage: collectives.sh MODE BINARY
#   MODE: stress, groups, late, mismatch, timeout, throw, die-HOW-OP (HOW: exit kill abort term;
#   OP: barrier broadcast all_gather broadcast_into), bulk (broadcast_into and all_gather_into
#   checked byte by byte, cyclic layout), bulk-sizes (one rank passes another size), node-death-mate, node-death-leader (one node: a node-mate, then
#   the node's leader is killed while the others wait in shared memory), idle-node, idle-nodes (CPU
#   time of ranks waiting 5 s in a barrier, on one node and on 3 nodes x 3), setup-stress (STEPS
#   steps, default 12, of block, cyclic, arbitrary and uneven layouts, one rank late by up to 0.9 s:
#   the setup that reads endpoints on demand, then 30 groups of varying members, every value
#   checked), setup-stress-mpirun (the same under mpirun, one host)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes setup-stress setup-stress-mpirun stress groups bulk bulk-sizes bulk-sizes-gather die-kill-broadcast_into late mismatch timeout throw die-exit-barrier die-kill-broadcast die-abort-all_gather die-term-barrier die-kill-all_gather die-exit-broadcast slow-and-dead node-death-mate node-death-leader idle-node idle-nodes
mode=$1
binary=$2

# setup_steps LAUNCH...: STEPS steps of `binary setup 30`, each with one random rank late by up to
# 0.9 s; LAUNCH is called with the step's number and must run its arguments as the step.
setup_steps() {
  local passed=0 i ranks late
  for ((i = 0; i < ${STEPS:-12}; i++)); do
    run_step "$@" "$i" bash -c 'r=${PMIX_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
      [[ $r == "$LATE" ]] && sleep "0.$DELAY"; exec "$0" setup 30' "$binary"
    ranks=$(count 'setup and 30 groups')
    if ((status == 0)) && ((ranks == $(count ' 0 bad values'))) && ((ranks >= 4)); then
      passed=$((passed + 1))
    else
      fail "step $i: exit status $status, $ranks ranks reported"
    fi
  done
  echo "setup stress: $passed steps passed"
}
layouts=("-N3 -n7" "-N3 -n6 --distribution=cyclic" "-n5 --distribution=arbitrary" "-N3 -n12 --distribution=cyclic"
  "-N2 -n4 --distribution=cyclic" "-N3 -n9")
hostfile=$(mktemp /var/tmp/jobkit-hostfile.XXXXXX)
trap 'rm -f "$hostfile"' EXIT
printf '%s\n' c1 c2 c1 c3 c1 >"$hostfile"
# srun_step I CMD...: step I of the stress under Slurm, its layout by I, a random rank late.
srun_step() {
  local layout=${layouts[$(($1 % ${#layouts[@]}))]} n
  shift
  n=$(sed 's/.*-n\([0-9]*\).*/\1/' <<<"$layout")
  local -a hosts=()
  [[ $layout != *arbitrary* ]] || hosts=(env SLURM_HOSTFILE="$hostfile")
  # shellcheck disable=SC2086
  LATE=$((RANDOM % n)) DELAY=$((RANDOM % 10)) "${hosts[@]}" timeout 120 srun --mpi=pmix $layout "$@"
}
mpirun_step() {
  local n=$((4 + $1 % 3))
  shift
  LATE=$((RANDOM % n)) DELAY=$((RANDOM % 10)) timeout 120 "${mpirun_[@]}" -x LATE -x DELAY -np "$n" "$@"
}
case $mode in
  setup-stress-mpirun)
    need_mpirun
    setup_steps mpirun_step
    exit ;;
esac
need_cluster

step=(timeout 60 srun --mpi=pmix -N3 -n9)
case $mode in
  setup-stress) setup_steps srun_step ;;
  stress) run_step timeout 850 srun --mpi=pmix -N3 -n24 "$binary" stress "${JOBKIT_STRESS_OPS:-100000}" ;;
  groups) run_step timeout 60 srun --mpi=pmix -N3 -n7 "$binary" groups ;;  # 5+1+1 ranks
  bulk) run_step timeout 120 srun --mpi=pmix -N3 -n9 --distribution=cyclic "$binary" bulk ;;
  bulk-sizes) run_step "${step[@]}" "$binary" bulk-sizes ;;
  bulk-sizes-gather) run_step timeout 60 srun --mpi=pmix -N3 --ntasks-per-node=3 --distribution=cyclic "$binary" bulk-sizes-gather ;;
  late) run_step "${step[@]}" "$binary" late 3 ;;
  die-*)
    how=${mode#die-}
    run_step "${step[@]}" "$binary" die "${how%%-*}" "${how#*-}" ;;
  mismatch | timeout | throw) run_step "${step[@]}" "$binary" "$mode" ;;
  node-death-mate) run_step timeout 60 srun --mpi=pmix -N1 -n4 "$binary" node-death 2 ;;
  node-death-leader) run_step timeout 60 srun --mpi=pmix -N1 -n4 "$binary" node-death 0 ;;
  idle-node) run_step timeout 60 srun --mpi=pmix -N1 -n4 "$binary" idle 5 ;;
  idle-nodes) run_step timeout 60 srun --mpi=pmix -N3 -n9 --ntasks-per-node=3 "$binary" idle 5 ;;
  slow-and-dead) run_step timeout 60 srun --mpi=pmix -N3 -n9 --ntasks-per-node=3 "$binary" "$mode" ;;
  *) fail "unknown mode $mode" ;;
esac

case $mode in
  setup-stress) ;;
  stress)
    ((status == 0)) || fail "exit status $status"
    (($(count ' 0 bad values') == 24)) || fail "not every rank checked every value" ;;
  groups)
    ((status == 0)) || fail "exit status $status"
    (($(count 'node group ok, leaders ok, explicit list ok') == 7)) || fail "a group does not match the layout" ;;
  late)
    ((status == 0)) || fail "exit status $status"
    # Every rank but the late one (rank 8) must have waited about 3 s.
    early=$(awk '/left the barrier/ && $2 != "8" && $6 < 2.5' <<<"$out")
    [[ -z $early ]] || fail "ranks left the barrier early: $early"
    (($(count 'left the barrier') == 9)) || fail "not every rank left the barrier" ;;
  die-*)
    last_rank_died_and_was_named ;;
  node-death-*)
    ((status != 0)) || fail "the step succeeded"
    victim=$(awk '/ dies at / {print $2}' <<<"$out")
    [[ -n $victim ]] || fail "the victim did not die"
    (($(count "rank error: rank $victim ([^)]*) exited during barrier at collectives_check.cpp:[0-9]*: the process died") == 3)) ||
      fail "not every surviving rank named the dead rank"
    (($(count 'without noticing') == 0)) || fail "a rank missed the death"
    # Its node-mates hold no socket to it: they must see the end of its process within 5 s.
    late=$(awk '/ dies at / {died = $5} / noticed at / {at[$2] = $5}
      END {for (r in at) if ((at[r] - died) / 1e9 > 5) print "rank " r}' <<<"$out")
    [[ -z $late ]] || fail "noticed more than 5 s after the death: $late"
    no_segments_left ;;
  idle-*)
    ((status == 0)) || fail "exit status $status"
    waiting=$(($(count 'waited') - 1))
    ((waiting >= 3)) || fail "not every rank reported its waiting"
    # Waiting in shared memory or on sockets costs at most 1 % of a core (the late rank slept).
    busy=$(awk '/waited/ && $4 > 4 && $11 > 1' <<<"$out")
    [[ -z $busy ]] || fail "ranks used more than 1 % of a core while waiting: $busy"
    no_segments_left ;;
  slow-and-dead)
    ((status != 0)) || fail "the step succeeded"
    # Ranks 3 and 4 wait for rank 5 in the tree (3 is its node leader): the death must reach them
    # through their parent at once, not when rank 5 arrives.
    slow=$(awk '/failed after/ && $2 != "5" && $5 > 3' <<<"$out")
    [[ -z $slow ]] || fail "ranks learnt of the death late: $slow"
    (($(count 'failed after') >= 7)) || fail "not every surviving rank reported the death" ;;
  bulk)
    ((status == 0)) || fail "exit status $status"
    (($(count 'bulk [0-9]* checks, 0 bad values') == 9)) || fail "not every rank checked every value" ;;
  bulk-sizes)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'passed silently') == 0)) || fail "a rank passed the broadcast"
    (($(count 'rank error: broadcast_into(root 0) at collectives_check.cpp:[0-9]*: rank 8 (c3) passed a buffer of 8008 bytes but rank [0-9]* ([^)]*) one of 8000 bytes') >= 1)) ||
      fail "no error names rank 8 and both sizes"
    (($(count 'rank error: broadcast_into(root 0) at collectives_check.cpp:[0-9]*: ') == 9)) ||
      fail "not every rank failed with the call site" ;;
  bulk-sizes-gather)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'passed silently') == 0)) || fail "a rank passed the all_gather_into"
    (($(count 'rank error: all_gather_into at collectives_check.cpp:[0-9]*: rank [678] (c[123]) passed a buffer of 48024 bytes but rank [0-9]* ([^)]*) one of 48000 bytes') >= 3)) ||
      fail "no error on each node names its last rank and both sizes"
    (($(count 'rank error: all_gather_into at collectives_check.cpp:[0-9]*: ') == 9)) ||
      fail "not every rank failed with the call site" ;;
  mismatch)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'collectives out of step') == 9)) || fail "not every rank reported the mismatch"
    grep -q 'in barrier #2 at collectives_check.cpp:[0-9]* while rank 0 (c1) is in broadcast(root 0) #2 at collectives_check.cpp:[0-9]*' <<<"$out" ||
      fail "the report does not name both call sites" ;;
  timeout)
    ((status != 0)) || fail "the step succeeded"
    # The ranks whose deadline expired name rank 8; rank 8 learns of the failure when it arrives.
    (($(count 'rank timeout_error: barrier at collectives_check.cpp:[0-9]* timed out after 1000 ms on rank [0-9]* ([^)]*): rank(s) 8 never arrived') >= 1)) ||
      fail "no timeout_error names rank 8"
    (($(count 'rank timeout_error: ') == 9)) || fail "not every rank got a timeout_error"
    (($(count 'did not time out') == 0)) || fail "a rank passed the barrier" ;;
  throw)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'rank exception: no space left on /scratch') == 1)) || fail "the root did not get its own exception"
    (($(count 'rank error: compute_and_broadcast(root 1) at collectives_check.cpp:[0-9]*: the callable threw on rank 1 (c1): no space left on /scratch') == 8)) ||
      fail "not every other rank got the root's message" ;;
esac
echo "ok"
