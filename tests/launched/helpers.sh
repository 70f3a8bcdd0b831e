#!/usr/bin/env bash
# The who-runs-what helpers on the dev cluster.
# usage: helpers.sh MODE BINARY SHARED_DIR
#   MODE: semantics-uneven, semantics-cyclic, throw-main, throw-node, throw-rounds, nested, long,
#         long-control, late-setup
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes semantics-uneven semantics-cyclic throw-main throw-node throw-rounds nested long long-control late-setup
mode=$1
binary=$2
shared=$3
need_cluster
mkdir -p "$shared"
step=(timeout 90 srun --mpi=pmix)
case $mode in
  semantics-uneven) run_step "${step[@]}" -N3 -n7 "$binary" semantics "$shared" ;;  # 5+1+1
  semantics-cyclic) run_step "${step[@]}" -N3 -n8 --distribution=cyclic "$binary" semantics "$shared" ;;
  throw-node) run_step "${step[@]}" -N3 -n9 --ntasks-per-node=3 "$binary" throw-node ;;
  throw-main | throw-rounds | nested) run_step "${step[@]}" -N3 -n7 "$binary" "$mode" ;;
  long)
    # Slurm's PMIx timeout shortened to 3 s; rank 0's part of zero_first lasts 8 s.
    export SLURM_PMIX_TIMEOUT=3
    run_step "${step[@]}" -N3 -n7 "$binary" long 8 ;;
  long-control)
    # Proves the shortened timeout bites: the same 8 s, spent before the first collective, makes
    # the launcher end the other ranks' reads of rank 0's endpoint (a direct get) that set up the
    # data path.
    export SLURM_PMIX_TIMEOUT=3
    run_step "${step[@]}" --kill-on-bad-exit=1 -N3 -n7 "$binary" late-setup 8 ;;
  late-setup)
    # Rank 0 reaches its first collective 5 s late under the launcher's own timeouts: its four
    # node-mates' reads of its endpoint wait for it (PMIx's server ends a read of a node-mate's key
    # not yet committed after 2 s unless the reader says how long it waits).
    unset SLURM_PMIX_TIMEOUT
    run_step "${step[@]}" --kill-on-bad-exit=1 -N3 -n7 "$binary" late-setup 5 ;;
  *) fail "unknown mode $mode" ;;
esac
case $mode in
  semantics-*)
    ((status == 0)) || fail "exit status $status"
    (($(count 'semantics ok') == $(grep -c 'semantics' <<<"$out"))) || fail "a rank saw a wrong order" ;;
  throw-main)
    (($(count 'rank exception: tokenizer download failed') == 1)) || fail "rank 0 did not get its own exception"
    (($(count 'rank error: .*the callable threw on rank 0 (c1): tokenizer download failed') == 6)) ||
      fail "not every other rank got rank 0's message" ;;
  throw-node)
    (($(count 'rank exception: disk full on the node') == 1)) || fail "the runner did not get its own exception"
    # Its node's other ranks fail with its message; the other nodes fail at the next barrier.
    (($(count 'rank error: once_per_node at helpers_check.cpp:[0-9]*: fn threw on rank 3 (c2): disk full') == 2)) ||
      fail "the runner's node-mates did not get its message"
    (($(count 'no failure arrived') == 0)) || fail "a rank missed the failure" ;;
  throw-rounds)
    (($(count 'rank exception: checkpoint upload failed') == 1)) || fail "the failing rank did not get its exception"
    (($(count 'rank error: do_n_at_a_time at helpers_check.cpp:[0-9]*: fn threw on rank 6 (c3): checkpoint upload failed') == 6)) ||
      fail "not every other rank got the message" ;;
  nested)
    (($(count 'barrier at helpers_check.cpp:[0-9]* on a group of 7 ranks is called inside main_process_only at helpers_check.cpp:[0-9]*') == 7)) ||
      fail "not every rank reported the nested barrier"
    ((elapsed_ms < 10000)) || fail "took ${elapsed_ms} ms" ;;
  long)
    ((status == 0)) || fail "exit status $status"
    (($(count 'zero_first done') == 7)) || fail "not every rank finished" ;;
  late-setup)
    ((status == 0)) || fail "exit status $status: a rank 5 s late failed the data path's setup"
    (($(count 'no failure arrived') == 7)) || fail "not every rank passed the barrier" ;;
  long-control)
    ((status != 0)) || fail "the late rank went unnoticed: SLURM_PMIX_TIMEOUT=3 did not take effect"
    (($(count 'timed out in the launcher (for Slurm: SLURM_PMIX_TIMEOUT') >= 1)) || fail "no rank reported the PMIx timeout" ;;
esac
echo ok
