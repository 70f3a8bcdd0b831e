#!/usr/bin/env bash
# jobkit barrier and jobkit broadcast on the dev cluster.
# usage: cli_collectives.sh MODE JOBKIT   (MODE: see declare_modes below)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes broadcast barrier late dead timeout survivors
mode=$1
jobkit=$2
need_cluster
export JOBKIT_BIN=$jobkit
step=(timeout 60 srun --mpi=pmix -N3 -n7)
case $mode in
  broadcast)
    # Only rank 3 reads stdin (srun gives every task the same stdin).
    run_step bash -c "printf 'run-42\\nsecond line\\n' | ${step[*]} '$jobkit' broadcast --root 3" ;;
  barrier) run_step "${step[@]}" bash -c '"$JOBKIT_BIN" barrier && echo "rank $SLURM_PROCID passed"' ;;
  late)
    run_step "${step[@]}" bash -c '[[ $SLURM_PROCID == 6 ]] && sleep 3; s=$(date +%s%N); "$JOBKIT_BIN" barrier;
      echo "rank $SLURM_PROCID waited $((($(date +%s%N) - s) / 1000000)) ms"' ;;
  dead)
    # Rank 4 (on c1 with ranks 0-3) exits before it starts jobkit: no process of it ever reaches
    # PMIx, so only the deadline can end the others' wait (srun --kill-on-bad-exit=1 would end the
    # step at once). Its node-mates name it; the other nodes' ranks say it is elsewhere.
    run_step "${step[@]}" bash -c \
      '[[ $SLURM_PROCID == 4 ]] && exit 5; "$JOBKIT_BIN" barrier --timeout 2; echo "rank $SLURM_PROCID status $?"' ;;
  timeout)
    run_step "${step[@]}" bash -c \
      '[[ $SLURM_PROCID == 6 ]] && sleep 4; "$JOBKIT_BIN" barrier --timeout 1; echo "rank $SLURM_PROCID status $?"' ;;
  survivors)
    # Rank 2 never starts jobkit (it sleeps past the others' 5 s); every other rank's message
    # says its own call (barrier at its call site) and the deadline that passed, whether it saw
    # the missing rank itself or learnt it from the rank that did.
    run_step timeout 60 srun --mpi=pmix -N3 -n4 bash -c \
      '[[ $SLURM_PROCID == 2 ]] && { sleep 9; exit 0; }; "$JOBKIT_BIN" barrier --timeout 5; echo "rank $SLURM_PROCID status $?"' ;;
  *) fail "unknown mode $mode" ;;
esac
case $mode in
  broadcast)
    ((status == 0)) || fail "exit status $status"
    (($(count '^run-42$') == 7)) || fail "not every rank printed the first line"
    (($(grep -c '^second line' <<<"$out") == 7)) || fail "not every rank printed the second line" ;;
  barrier)
    ((status == 0)) || fail "exit status $status"
    (($(count 'passed') == 7)) || fail "not every rank passed" ;;
  late)
    ((status == 0)) || fail "exit status $status"
    early=$(awk '/waited/ && $2 != "6" && $4 < 2500' <<<"$out")
    [[ -z $early ]] || fail "ranks left the barrier early: $early" ;;
  dead)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'status 1') == 6)) || fail "not every other rank failed with status 1"
    # No fence: rank 4's node leader (rank 0) waits for its connection until the deadline, names it
    # and tells the ranks connected to it (its children on c2 and c3 learn it in their barrier). A
    # rank that timed out at the same moment names rank 4 from its node's roll call, or says the
    # missing rank is on another node; a rank of another node whose own deadline came before its
    # leader's message (a loaded machine starts the ranks' barriers up to a second apart) says that
    # the missing rank is outside its subtree.
    (($(count '^jobkit: ') == 6)) || fail "not every other rank reported the deadline"
    (($(count 'rank 0 (c1): no connection from rank 4 (c1) within the call.s 2 s; rank(s) 4 never reached jobkit .*--kill-on-bad-exit=1') == 1)) ||
      fail "rank 4's node leader did not name it"
    vague=$(grep '^jobkit: ' <<<"$out" |
      grep -v 'no connection from rank 4 (c1)\|rank(s) 4 never reached jobkit\|every rank on c[23] reached jobkit, so the missing rank is on another node' |
      grep -v 'on rank [56] (c[23]) waiting for the result from rank 0 (c1): some rank outside this rank.s subtree never arrived' || true)
    [[ -z $vague ]] || fail "a rank neither named rank 4 nor said the missing rank is elsewhere: $vague"
    ((elapsed_ms < 20000)) || fail "took ${elapsed_ms} ms: the 2 s deadline did not end the wait" ;;
  timeout)
    (($(count 'status 1') == 7)) || fail "not every rank failed with status 1"
    # No fence: the ranks waiting for rank 6's connection (its node leader, rank 0, which tells
    # the ranks connected to it) name it; rank 6, late, finds rank 0 gone; the others time out.
    (($(count '^jobkit: ') == 7)) || fail "not every rank failed"
    vague=$(grep '^jobkit: ' <<<"$out" |
      grep -v 'no connection from rank 6 (c3)\|timed out after [0-9]* ms\|gave no answer within [0-9]* ms' || true)
    [[ -z $vague ]] || fail "not every rank reported the deadline: $vague" ;;
  survivors)
    (($(count 'status 1') == 3)) || fail "not every other rank failed with status 1"
    (($(count '^jobkit: ') == 3)) || fail "not every other rank failed"
    vague=$(grep '^jobkit: ' <<<"$out" | grep -Ev '^jobkit: barrier at jobkit barrier[: ].*(5 s|after [0-9]+ ms)' || true)
    [[ -z $vague ]] || fail "a rank did not say its call and the 5 s that passed: $vague"
    # Each names rank 2, or says where the missing rank is not: on its node, or in its subtree (a
    # rank whose own deadline came before the message of the rank that saw it).
    (($(grep -c 'rank 2 (c[0-9])\|the missing rank is on another node\|some rank outside this rank.s subtree never arrived' <<<"$out") == 3)) ||
      fail "a rank neither named rank 2 nor said the missing rank is elsewhere" ;;
esac
echo ok
