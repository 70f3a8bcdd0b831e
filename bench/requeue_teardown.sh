#!/usr/bin/env bash
# How often a stop whose ranks are slow to exit is taken for what it is: slurm/train-requeue.sbatch
# runs examples/train_requeue.cpp on 3 nodes x 2 ranks, rank 3 taking 10 s in its exit handlers
# (longer than the dev cluster's KillWait of 5 s), is stopped by `scancel --signal=USR1` and must
# requeue as a stop (never counted as a crash) and resume from the committed step, RUNS times:
# tests/launched/preemption.sh's mode slow-teardown, which the suite runs twice.
#
#   bench/requeue_teardown.sh BUILD [RUNS]     (RUNS default 20; on the running dev cluster)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
(($# >= 1)) || { echo "usage: $0 BUILD [RUNS]" >&2; exit 2; }
build=$(realpath -m "$1")
[[ -x $build/src/cli/jobkit && -x $build/examples/jobkit-train-requeue ]] || { echo "$0: build $build first" >&2; exit 1; }
[[ -n ${SLURM_CONF:-} ]] || eval "$("$repo/slurm/dev-cluster.sh" env)"
JOBKIT_TEST_TEARDOWN_RUNS=${2:-20} "$repo/tests/launched/preemption.sh" slow-teardown "$build/src/cli/jobkit" \
  "$build/examples/jobkit-train-requeue" "$build/bench/requeue-teardown-work" | grep -E '^(measured|PASS|FAIL)'
