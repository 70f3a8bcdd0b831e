#!/usr/bin/env bash
# One PMIx client per process (tests/launched/one_runtime.cpp): a program with its own runtime
# goes through the library's parts that log or reach the process's runtime, on an uneven layout;
# every rank must report ok, and the library's log lines must carry the program's identity.
# usage: one_runtime.sh PROGRAM WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
(($# == 2)) || fail "usage: one_runtime.sh PROGRAM WORK_DIR"
need_cluster
work=$(realpath -m "$2")
rm -rf "$work" && mkdir -p "$work" || fail "cannot make $work"
ranks=5
out=$(JOBKIT_LOG_LEVEL=debug JOBKIT_LOG_RANKS=all timeout 120 srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n$ranks \
  --distribution=cyclic "$1" "$work/ckpt" 2>&1)
status=$?
echo "$out"
((status == 0)) || fail "the step exited $status"
(($(count '^ok rank') == ranks)) || fail "not every rank reported ok"
# The library's own warning (time_left's): before any runtime unprefixed, as a single-rank
# process's; then as the program's runtime logs it, with its rank.
(($(count '^WARNING: time_left: .*/nonexistent/before/') == ranks)) ||
  fail "time_left's warning before the runtime was not a single-rank process's"
(($(count '^\[rank: [0-4]\] WARNING: time_left: .*/nonexistent/during/') == ranks)) ||
  fail "time_left's warning did not carry each rank's prefix"
echo ok
