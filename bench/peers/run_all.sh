#!/usr/bin/env bash
# PEER benchmarks (not part of jobkit): runs pmix_floor, mpi_bench and torch_gloo.py, each as one
# Slurm step, for one layout, and writes every JSON line to stdout (progress and timings: stderr).
#
#   bench/peers/run_all.sh N_NODES N_RANKS [ITERS [BUILD_DIR]]
#
#   ITERS      timed iterations for pmix_floor and mpi_bench (default: their own, 2000) and for
#              torch_gloo.py unless TORCH_ITERS is set (default: its own, 500);
#              torch's all_gather_object runs a fifth as many
#   BUILD_DIR  meson build dir holding bench/peers/{pmix_floor,mpi_bench}
#              (4th argument, else $BUILD_DIR, else /work/main/build)
# Environment:
#   SLURM_CONF     default: the dev cluster's (slurm/dev-cluster.sh env) when unset
#   MASTER_PORT    torch rendezvous port (default: a port free on this machine right now)
#   PEER_TIMEOUT   seconds allowed per step (default 300)
#   TORCH_ITERS    timed iterations for torch_gloo.py only (it is ~10-100x slower than the others)
#   PEERS          which peers to run (default "pmix mpi torch")
# Tasks are placed with --distribution=block (e.g. -N3 -n24: 8 per node); --kill-on-bad-exit=1
# ends a step as soon as one task fails (otherwise the others wait in a collective until timeout).
set -uo pipefail

usage() { echo "usage: $0 N_NODES N_RANKS [ITERS [BUILD_DIR]]" >&2; exit 2; }
[[ $# -ge 2 && $# -le 4 ]] || usage
nodes=$1 ranks=$2 iters=${3:-}
[[ $nodes =~ ^[1-9][0-9]*$ && $ranks =~ ^[1-9][0-9]*$ ]] || usage
[[ -z $iters || $iters =~ ^[1-9][0-9]*$ ]] || usage
((ranks >= nodes)) || { echo "$0: N_RANKS must be >= N_NODES" >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
build=${4:-${BUILD_DIR:-/work/main/build}}
bindir=$build/bench/peers
timeout_s=${PEER_TIMEOUT:-300}
peers=${PEERS:-pmix mpi torch}

if [[ -z ${SLURM_CONF:-} && -x $repo/slurm/dev-cluster.sh ]]; then
  eval "$("$repo/slurm/dev-cluster.sh" env)"
fi
command -v srun >/dev/null || { echo "$0: srun not found" >&2; exit 1; }
timeout 15 sinfo -h >/dev/null 2>&1 ||
  { echo "$0: Slurm does not answer (start it: slurm/dev-cluster.sh start)" >&2; exit 1; }

srun_=(srun --mpi=pmix -N"$nodes" -n"$ranks" --distribution=block --kill-on-bad-exit=1)
status=0

step() { # NAME CMD... : runs one step, JSON lines to stdout, wall time to stderr
  local name=$1 t0 t1 rc
  shift
  echo "run_all: $name: $*" >&2
  t0=${EPOCHREALTIME/[.,]/}
  timeout "$timeout_s" "$@"
  rc=$?
  t1=${EPOCHREALTIME/[.,]/}
  printf 'run_all: %s: exit %d, %d.%01d s\n' "$name" "$rc" $(((t1 - t0) / 1000000)) \
    $(((t1 - t0) % 1000000 / 100000)) >&2
  ((rc == 0)) || status=1
}

for p in $peers; do
  case $p in
  pmix)
    [[ -x $bindir/pmix_floor ]] || { echo "$0: $bindir/pmix_floor missing (build with meson)" >&2; status=1; continue; }
    step pmix_floor "${srun_[@]}" "$bindir/pmix_floor" ${iters:+"$iters"} ;;
  mpi)
    [[ -x $bindir/mpi_bench ]] || { echo "$0: $bindir/mpi_bench missing (MPI not found at build?)" >&2; status=1; continue; }
    # Direct launch: Open MPI does not know the node is oversubscribed (Slurm grants 8 CPUs per
    # node), so it would busy-poll; with more ranks than cores that makes every op ~100x slower.
    step mpi_bench env OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}" \
      "${srun_[@]}" "$bindir/mpi_bench" ${iters:+"$iters"} ;;
  torch)
    port=${MASTER_PORT:-$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')}
    titers=${TORCH_ITERS:-$iters}
    [[ -z $titers || $titers =~ ^[1-9][0-9]*$ ]] || { echo "$0: bad TORCH_ITERS" >&2; exit 2; }
    targs=()
    [[ -n $titers ]] && targs=("$titers" 20 "$((titers / 5 > 0 ? titers / 5 : 1))")
    step torch_gloo "${srun_[@]}" "$here/run_torch_gloo.sh" "$port" "${targs[@]}" ;;
  *) echo "$0: unknown peer '$p' (pmix, mpi, torch)" >&2; status=1 ;;
  esac
done
exit $status
