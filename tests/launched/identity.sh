#!/usr/bin/env bash
# Launches `jobkit info --json` on every rank and checks it against the launcher's truth.
# usage: identity.sh MODE JOBKIT_BINARY
set -euo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes 1x1 1x4 uneven cyclic subset none 3x8 mpirun
mode=$1
jobkit=$2
probe=("$here/probe.sh" "$jobkit" info --json)
check=("$here/check_identity.py")

case $mode in
  mpirun)
    need_mpirun
    "${mpirun_[@]}" -np 3 "${probe[@]}" | "${check[@]}" --ranks 3 --source pmix --launcher mpirun
    exit
    ;;
esac

need_cluster
case $mode in
  1x1)
    srun --mpi=pmix -N1 -n1 "${probe[@]}" | "${check[@]}" --ranks 1 --source pmix --launcher slurm ;;
  1x4)
    srun --mpi=pmix -N1 -n4 "${probe[@]}" | "${check[@]}" --ranks 4 --source pmix --launcher slurm --layout 4 ;;
  uneven)
    # 4 + 2 + 1 tasks over 3 nodes, placed explicitly.
    hostfile=$(mktemp /var/tmp/jobkit-hostfile.XXXXXX)
    trap 'rm -f "$hostfile"' EXIT
    printf '%s\n' c1 c1 c1 c1 c2 c2 c3 >"$hostfile"
    SLURM_HOSTFILE=$hostfile srun --mpi=pmix --distribution=arbitrary -n7 "${probe[@]}" |
      "${check[@]}" --ranks 7 --source pmix --launcher slurm --layout 4,2,1 ;;
  cyclic)
    srun --mpi=pmix -N3 -n7 --distribution=cyclic "${probe[@]}" |
      "${check[@]}" --ranks 7 --source pmix --launcher slurm --cyclic ;;
  subset)
    # A step on 2 of the allocation's 3 nodes: node ranks and sizes are the step's.
    salloc -Q -N3 --ntasks-per-node=2 srun --mpi=pmix -N2 -n3 -w c2,c3 "${probe[@]}" |
      "${check[@]}" --ranks 3 --source pmix --launcher slurm --layout 2,1 ;;
  none)
    srun --mpi=none -N3 -n7 "${probe[@]}" | "${check[@]}" --ranks 7 --source slurm --launcher slurm ;;
  3x8)
    srun --mpi=pmix -N3 -n24 "${probe[@]}" | "${check[@]}" --ranks 24 --source pmix --launcher slurm --layout 8,8,8 ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2 ;;
esac
