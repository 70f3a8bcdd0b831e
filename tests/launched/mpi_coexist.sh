#!/usr/bin/env bash
# usage: mpi_coexist.sh LAUNCHER(mpirun|srun) ORDER(mpi-first|jobkit-first) BINARY
set -euo pipefail
source "$(dirname "$0")/lib.sh"
launcher=$1
order=$2
binary=$3
if [[ $launcher == mpirun ]]; then
  need_mpirun
  ranks=3
  out=$(timeout 60 "${mpirun_[@]}" -np $ranks "$binary" "$order")
else
  need_cluster
  ranks=4
  out=$(timeout 60 srun --mpi=pmix -N2 -n$ranks "$binary" "$order")
fi
echo "$out"
oks=$(grep -c '^ok rank' <<<"$out" || true)
((oks == ranks)) || { echo "FAIL: $oks of $ranks ranks reported ok"; exit 1; }
