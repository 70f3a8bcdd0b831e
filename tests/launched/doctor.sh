#!/usr/bin/env bash
# jobkit doctor on the dev cluster (no GPU here).
# usage: doctor.sh MODE JOBKIT   (MODE: see declare_modes below)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes plain nccl
mode=$1
jobkit=$2
need_cluster
case $mode in
  plain) run_step timeout 60 srun --mpi=pmix -N3 -n7 "$jobkit" doctor ;;
  nccl) run_step timeout 60 srun --mpi=pmix -N3 -n7 "$jobkit" doctor --nccl ;;
  *) fail "unknown mode $mode" ;;
esac
(($(count '^jobkit doctor: 7 ranks on 3 nodes') == 1)) || fail "rank 0 did not print the header once"
(($(grep -cE '^ +[0-6]  c[1-3] ' <<<"$out") == 7)) || fail "not one row per rank"
case $mode in
  plain)
    ((status == 0)) || fail "exit status $status"
    (($(count '^no problem found$') == 1)) || fail "problems reported on a CPU-only step" ;;
  nccl)
    ((status == 1)) || fail "exit status $status"
    for r in 0 1 2 3 4 5 6; do
      grep -q "^  rank $r (c[1-3]): cudaGetDeviceCount .*NCCL check skipped" <<<"$out" || fail "rank $r's problem is not named"
    done ;;
esac
echo ok
