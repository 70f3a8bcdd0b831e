#!/usr/bin/env bash
# jobkit's collectives against Open MPI, the raw PMIx fence and torch.distributed gloo, all in one
# Slurm allocation on the dev cluster. Sections (SECTIONS, default all three, in this order):
#   same_loop  jobkit (bench/jobkit_loop), Open MPI (bench/peers/mpi_bench), the collecting PMIx
#              fence (bench/peers/pmix_floor) and torch gloo (bench/peers/torch_gloo.py) timed by
#              one loop and one statistic, alternately, ROUNDS times, on 1 x 4, 3 x 8 and 3 x 24,
#              64 MiB bcast/allgather included, with the CPU share of the waiting ranks
#   peers      jobkit bench (paired with the PMIx fence) and bench/peers/run_all.sh, 1 x 4 and 3 x 24
#   growth     barrier, all_reduce and all_gather (8 B) from 2 to 64 ranks, each paired with the
#              PMIx fence, and the time to a usable world at each size
#   growth_loop the same sizes by same_loop's method: jobkit_loop and pmix_floor (the collecting
#              fence, and its own "init": PMIx_Init plus one fence, with the launcher's data store
#              and with "hash") alternately, each operation
#              back to back in its own loop, ROUNDS times, both from exec (bench/from_exec.sh).
#              Not in the default set. In `growth` the operation timed right after a fence takes
#              the fence's release skew (the last rank out of PMIx_Fence); this one does not mix them.
#   setup      time to a usable world on 1 x 4 and 3 x 24: jobkit (identity and the data path's
#              setup: jobkit_loop's "init"), MPI_Init (mpi_bench) and torch's init_process_group
#              (gloo, env://), ROUNDS times
# Writes OUT_DIR/results.jsonl (every JSON line of every run) and OUT_DIR/summary.md
# (bench/summarize.py), and prints the summary.
#
#   bench/compare.sh [OUT_DIR [BUILD_DIR]]     (defaults: /tmp/jobkit-compare, build-test)
# bench/results keeps only the runs bench/RESULTS.md cites, named by what they measure: copy them there.
# Environment: ITERS (jobkit and C peers, default 1000), TORCH_ITERS (default 200), SECTIONS,
# ROUNDS (default 2), LARGE_BYTES (default 64 MiB), LARGE_ITERS (default 5), LAYOUTS (same_loop's,
# default "1x4 3x8 3x24"), PIN (none, cyclic or block: bench/pin.sh binds every task of every side),
# IMPLS (same_loop's sides, default "jobkit mpi fence torch").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
out=$(realpath -m "${1:-/tmp/jobkit-compare}")
build=$(realpath -m "${2:-$repo/build-test}")
jobkit=$build/src/cli/jobkit
[[ -x $jobkit ]] || { echo "$0: $jobkit missing: build first (meson setup $build && ninja -C $build)" >&2; exit 1; }

if [[ -z ${JOBKIT_COMPARE_INSIDE:-} ]]; then
  [[ -n ${SLURM_CONF:-} ]] || eval "$("$repo/slurm/dev-cluster.sh" env)"
  mkdir -p "$out"
  : >"$out/results.jsonl"
  # One allocation for every step: 3 nodes, 64 tasks (more than the 24 CPUs: --overcommit).
  JOBKIT_COMPARE_INSIDE=1 salloc --quiet -N3 -n64 --overcommit --time=30 "$0" "$out" "$build"
  /usr/bin/python3 "$here/summarize.py" "$out/results.jsonl" | tee "$out/summary.md"
  exit 0
fi

iters=${ITERS:-1000}
torch_iters=${TORCH_ITERS:-200}
sections=${SECTIONS:-same_loop peers growth}
record() { tee -a "$out/results.jsonl"; }
source "$here/step.sh"
echo "compare: allocation $SLURM_JOB_ID on $SLURM_JOB_NODELIST" >&2
section() { [[ " $sections " == *" $1 "* ]]; }

# Open MPI yields when idle, as the nodes are oversubscribed; the same loop and statistic for both.
if section same_loop; then
  for layout in ${LAYOUTS:-1x4 3x8 3x24}; do
    nodes=${layout%x*} ranks=${layout#*x}
    for round in $(seq "${ROUNDS:-2}"); do
      for impl in ${IMPLS:-jobkit mpi fence torch}; do
        echo "compare: same loop, $impl, $nodes x $ranks, round $round" >&2
        case $impl in
          jobkit | mpi)
            binary=$build/bench/jobkit_loop
            [[ $impl == mpi ]] && binary=$build/bench/peers/mpi_bench
            # Open MPI now and then crashes in MPI_Init on the dev cluster (a SIGSEGV in ob1's
            # receive callback, 72 ranks on 2 cores): its step is run again, at most twice, and
            # each retry is said here. jobkit's is not.
            for attempt in 1 2 3; do
              if lines=$(OMPI_MCA_mpi_yield_when_idle=1 step -N"$nodes" -n"$ranks" "$binary" "$iters" 100 \
                "${LARGE_BYTES:-67108864}" "${LARGE_ITERS:-5}"); then
                printf '%s\n' "$lines"
                break
              fi
              [[ $impl == mpi && $attempt -lt 3 ]] || exit 1
              echo "compare: Open MPI's step failed (attempt $attempt of 3), run again" >&2
            done ;;
          fence) step -N"$nodes" -n"$ranks" "$build/bench/peers/pmix_floor" "$iters" 100 ;;
          torch)
            port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')
            step -N"$nodes" -n"$ranks" "$here/peers/run_torch_gloo.sh" "$port" "$torch_iters" 20 \
              "$((torch_iters / 5 > 0 ? torch_iters / 5 : 1))" "${LARGE_BYTES:-67108864}" "${LARGE_ITERS:-5}" ;;
        esac | sed "s/^{/{\"series\":\"same_loop\",\"round\":$round,/" | record
      done
    done
  done
fi

if section setup; then
  for layout in "1 4" "3 24"; do
    read -r nodes ranks <<<"$layout"
    for round in $(seq "${ROUNDS:-2}"); do
      echo "compare: setup, $nodes x $ranks, round $round" >&2
      tag="s/^{/{\"series\":\"setup\",\"round\":$round,/"
      step -N"$nodes" -n"$ranks" "$build/bench/jobkit_loop" 1 0 0 | grep '"init"' | sed "$tag" | record
      step -N"$nodes" -n"$ranks" "$build/bench/peers/mpi_bench" 1 0 0 | grep '"init"' | sed "$tag" | record
      PEERS=torch TORCH_ITERS=1 "$here/peers/run_all.sh" "$nodes" "$ranks" 1 "$build" | grep '"init_process_group"' |
        sed "$tag" | record
    done
  done
fi

if section peers; then
  for layout in "1 4" "3 24"; do
    read -r nodes ranks <<<"$layout"
    echo "compare: jobkit bench, $nodes x $ranks" >&2
    step -N"$nodes" -n"$ranks" "$jobkit" bench --json --iters "$iters" | record
    echo "compare: peers, $nodes x $ranks" >&2
    TORCH_ITERS=$torch_iters "$here/peers/run_all.sh" "$nodes" "$ranks" "$iters" "$build" | record
  done
fi

if section growth; then
  for ranks in 2 4 8 16 32 64; do
    nodes=$((ranks < 3 ? ranks : 3))
    echo "compare: growth, $nodes x $ranks" >&2
    step -N"$nodes" -n"$ranks" "$jobkit" bench --json --iters "$iters" --ops barrier,all_reduce,all_gather \
      --max-bytes 8 | sed 's/^{/{"series":"growth",/' | record
    step -N"$nodes" -n"$ranks" "$build/bench/jobkit_loop" 1 0 0 | grep '"init"' | sed 's/^{/{"series":"growth",/' | record
  done
fi

if section growth_loop; then
  for ranks in 2 4 8 16 32 64; do
    nodes=$((ranks < 3 ? ranks : 3))
    for round in $(seq "${ROUNDS:-2}"); do
      echo "compare: growth by one loop, $nodes x $ranks, round $round" >&2
      tag="s/^{/{\"series\":\"growth_loop\",\"round\":$round,/"
      step -N"$nodes" -n"$ranks" "$here/from_exec.sh" "$build/bench/jobkit_loop" "$iters" 100 0 0 | sed "$tag" | record
      step -N"$nodes" -n"$ranks" "$here/from_exec.sh" "$build/bench/peers/pmix_floor" "$iters" 100 | sed "$tag" | record
      PMIX_FLOOR_GDS=hash step -N"$nodes" -n"$ranks" "$here/from_exec.sh" "$build/bench/peers/pmix_floor" 1 0 |
        grep '"init"' | sed "$tag" | record
    done
  done
fi
