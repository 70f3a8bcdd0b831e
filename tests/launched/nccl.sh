#!/usr/bin/env bash
# The NCCL id exchange through PMIx on the dev cluster (3 nodes, uneven), without a GPU.
# usage: nccl.sh MODE BINARY   (MODE: see declare_modes below)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes ids ids-scalable die-root die-other no-gpu
mode=$1
binary=$2
need_cluster
step=(timeout 60 srun --mpi=pmix -N3 -n7)  # 5 + 1 + 1 ranks
case $mode in
  ids) run_step "${step[@]}" "$binary" ids 128 ;;
  ids-scalable) run_step "${step[@]}" "$binary" ids 3 ;;  # 3 ids, from ranks 0, 2 and 4
  die-root) run_step "${step[@]}" "$binary" die 0 ;;
  die-other) run_step "${step[@]}" "$binary" die 6 ;;
  no-gpu) run_step "${step[@]}" "$binary" no-gpu ;;
  *) fail "unknown mode $mode" ;;
esac
case $mode in
  ids | ids-scalable)
    ((status == 0)) || fail "exit status $status"
    expected=$([[ $mode == ids ]] && echo 1 || echo 3)
    (($(count "$expected id(s), identical on every rank") == 7)) || fail "not every rank holds the same $expected id(s)"
    (($(grep -o 'digest [0-9a-f]*' <<<"$out" | sort -u | wc -l) == 1)) || fail "the ids differ between ranks" ;;
  die-*)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'identical on every rank') == 0)) || fail "a rank finished the exchange without the dead rank"
    if [[ $mode == die-other ]]; then  # Slurm leaves this one to jobkit: the survivors must name rank 6
      (($(count 'rank 6 (c3) closed its connection') >= 1)) || fail "no rank named the dead rank"
    fi
    # Slurm 24.11's srun may take 5 s more to end the step (lib.sh, last_rank_died_and_was_named).
    ((elapsed_ms < 30000)) || fail "took ${elapsed_ms} ms" ;;
  no-gpu)
    ((status == 3)) || fail "exit status $status"
    (($(count 'rank error (cuda): cudaGetDeviceCount (CUDA_VISIBLE_DEVICES') == 7)) || fail "not every rank got a clean CUDA error" ;;
esac
echo ok
