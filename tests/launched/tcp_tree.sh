#!/usr/bin/env bash
# The control-plane data path on the dev cluster (3 nodes, 9 or 24 ranks).
# usage: tcp_tree.sh MODE BINARY   (MODE: stress, late, die-exit, die-kill, die-abort, die-term, mismatch)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mode=$1
binary=$2
need_cluster
fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s%N)
case $mode in
  stress)
    out=$(timeout 500 srun --mpi=pmix -N3 -n24 "$binary" stress "${JOBKIT_STRESS_OPS:-20000}" 2>&1)
    status=$? ;;
  late)
    out=$(timeout 60 srun --mpi=pmix -N3 -n9 "$binary" late 3 2>&1)
    status=$? ;;
  die-*)
    out=$(timeout 60 srun --mpi=pmix -N3 -n9 "$binary" die "${mode#die-}" 2>&1)
    status=$? ;;
  mismatch)
    out=$(timeout 60 srun --mpi=pmix -N3 -n9 "$binary" mismatch 2>&1)
    status=$? ;;
  *) fail "unknown mode $mode" ;;
esac
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$out"
echo "elapsed: $elapsed_ms ms, exit status $status"
((status != 124)) || fail "the step hung"
count() { grep -c -- "$1" <<<"$out" || true; }

case $mode in
  stress)
    ((status == 0)) || fail "exit status $status"
    (($(count ' 0 bad values') == 24)) || fail "not every rank checked every value" ;;
  late)
    ((status == 0)) || fail "exit status $status"
    # Every rank but the late one (rank 8) must have waited about 3 s.
    early=$(awk '/left the barrier/ && $2 != "8" && $6 < 2.5' <<<"$out")
    [[ -z $early ]] || fail "ranks left the barrier early: $early"
    (($(count 'left the barrier') == 9)) || fail "not every rank left the barrier" ;;
  die-*)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'rank error: rank 8 (c3) closed its connection') == 8)) ||
      fail "not every surviving rank named the dead rank"
    (($(count 'without noticing') == 0)) || fail "a rank missed the death"
    ((elapsed_ms < 5000)) || fail "took ${elapsed_ms} ms, more than 5 s" ;;
  mismatch)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'collectives out of step') == 9)) || fail "not every rank reported the mismatch"
    grep -q 'barrier #1 at tcp_tree_check.cpp:barrier.*broadcast #1 at tcp_tree_check.cpp:other' <<<"$out" ||
      fail "the report does not name both call sites" ;;
esac
echo "ok"
