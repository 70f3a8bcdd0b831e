#!/bin/bash
# Runs a program with JOBKIT_BENCH_EXEC_NS set to the wall clock (ns since the epoch, in µs steps)
# just before its exec, so that bench/jobkit_loop can time its "init" from its process's start, the
# dynamic loader's work before main included. bash's EPOCHREALTIME needs no fork.
# usage: from_exec.sh PROGRAM [ARGS...]
now=$EPOCHREALTIME
export JOBKIT_BENCH_EXEC_NS=${now/[.,]/}000
exec "$@"
