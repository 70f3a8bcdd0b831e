#!/usr/bin/env bash
# Setup costs by node count over links with a fixed delay, so that the network, not the CPU
# scheduler of this 2-core machine, sets the time (docs/dev-cluster.md, "Per-link delay").
# For each N of NODES it starts a dev cluster of N nodes with JOBKIT_CLUSTER_DELAY_MS=DELAY_MS,
# runs one rank per node and records, ROUNDS times:
#   bench/peers/pmix_floor: "init" (PMIx_Init and one collecting fence), fence_collect (a collecting
#     fence with nothing put: Slurm runs it as a tree) and fence_nocollect;
#   bench/pmix_data_fence: fence_data (64 B put by every rank, then a collecting fence: a ring);
#   bench/jobkit_loop LOOP_ITERS 5 0, with JOBKIT_BENCH_SETUP_AT a common instant after every
#     rank's start: jobkit's "init" (from the rank's start to its first barrier: identity and the
#     data path's setup, launch skew included), "setup" (the data path's setup and first barrier
#     alone, from that instant) and "barrier" (LOOP_ITERS barriers, max over ranks per iteration);
#     with BASE (another build directory, e.g. of an earlier commit), the same from it, as
#     "impl":"jobkit-base", in the same allocation;
#   jobkit barrier with JOBKIT_LOG_LEVEL=debug: "placement", rank 0's time to read every rank's
#     node from the launcher's job data (PMIx_Resolve_nodes and PMIx_Resolve_peers of each node).
# Every JSON line gets "series":"delay_scale","delay_ms":D,"round":R and goes to OUT (a .jsonl
# file, appended). The cluster is stopped at the end.
#
#   bench/delay_scale.sh [OUT [BUILD_DIR]]    (defaults: bench/results/delay-scale.jsonl, build-test)
# Environment: NODES (default "4 8 16 32"), DELAY_MS (2), ROUNDS (1), ITERS (fence iterations, 20),
# LOOP_ITERS (barriers, 50), BASE (unset).
# The cluster is its own, not the default one: JOBKIT_CLUSTER_DIR, _PORT and _SUBNET default here
# to /var/lib/jobkit-dev-cluster-delay, 8817 and 198.18.5.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
out=$(realpath -m "${1:-$here/results/delay-scale.jsonl}")
build=$(realpath -m "${2:-$repo/build-test}")
for b in bench/peers/pmix_floor bench/pmix_data_fence bench/jobkit_loop src/cli/jobkit; do
  [[ -x $build/$b ]] || { echo "$0: $build/$b missing: build first (ninja -C $build)" >&2; exit 1; }
done
base=${BASE:+$(realpath -m "$BASE")}
[[ -z $base || -x $base/bench/jobkit_loop ]] || { echo "$0: $base/bench/jobkit_loop missing" >&2; exit 1; }
export JOBKIT_CLUSTER_DIR=${JOBKIT_CLUSTER_DIR:-/var/lib/jobkit-dev-cluster-delay}
export JOBKIT_CLUSTER_PORT=${JOBKIT_CLUSTER_PORT:-8817}
export JOBKIT_CLUSTER_SUBNET=${JOBKIT_CLUSTER_SUBNET:-198.18.5}
export JOBKIT_CLUSTER_NET=netns
delay=${DELAY_MS:-2}
iters=${ITERS:-20}
cluster=$repo/slurm/dev-cluster.sh
trap '"$cluster" stop >&2' EXIT
eval "$("$cluster" env)"
mkdir -p "$(dirname "$out")"

for n in ${NODES:-4 8 16 32}; do
  JOBKIT_CLUSTER_DELAY_MS=$delay "$cluster" start "$n" >&2
  for round in $(seq "${ROUNDS:-1}"); do
    echo "delay_scale: $n nodes, delay $delay ms, round $round" >&2
    tag="s/^{/{\"series\":\"delay_scale\",\"delay_ms\":$delay,\"round\":$round,/"
    {
      srun --mpi=pmix -N"$n" -n"$n" "$build/bench/peers/pmix_floor" "$iters" 2
      srun --mpi=pmix -N"$n" -n"$n" "$build/bench/pmix_data_fence" "$iters" 2 64
      JOBKIT_LOG_LEVEL=debug srun --mpi=pmix -N"$n" -n"$n" "$build/src/cli/jobkit" barrier 2>&1 |
        sed -n "s/^\[rank: 0\] DEBUG: data path: endpoints read on demand, .* (read in \([0-9]*\) us)/{\"impl\":\"jobkit\",\"op\":\"placement\",\"ranks\":$n,\"nodes\":$n,\"median_us\":\1,\"timing\":\"rank0\"}/p"
      for b in "$build" ${base:+"$base"}; do
        impl=jobkit
        [[ $b == "$build" ]] || impl=jobkit-base
        # Every rank has started 2 s plus 40 ms per node after now (1.3 s at 64 nodes, measured).
        JOBKIT_BENCH_SETUP_AT=$(($(date +%s%N) + (2000 + 40 * n) * 1000000)) \
          srun --mpi=pmix -N"$n" -n"$n" "$b/bench/jobkit_loop" "${LOOP_ITERS:-50}" 5 0 |
          grep '"init"\|"setup"\|"barrier"' | sed "s/\"impl\":\"jobkit\"/\"impl\":\"$impl\"/"
      done
    } | sed "$tag" | tee -a "$out"
  done
done
