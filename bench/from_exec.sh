#!/bin/sh
# Runs a program with JOBKIT_BENCH_EXEC_NS set to the wall clock (ns) just before its exec, so that
# bench/jobkit_loop can time its "init" from its process's start, the dynamic loader's work before
# main included. The timestamp precedes the exec by the shell's read of date's output (< 1 ms).
# usage: from_exec.sh PROGRAM [ARGS...]
JOBKIT_BENCH_EXEC_NS=$(date +%s%N)
export JOBKIT_BENCH_EXEC_NS
exec "$@"
