#!/usr/bin/env bash
# Binds this task to one CPU and execs the command: PIN=cyclic puts local task i on the
# (i mod n)-th CPU this task may use, PIN=block spreads the node's tasks in consecutive blocks,
# PIN=none (or unset) binds nothing. The benchmarks use it where the launcher binds nothing (the
# dev cluster's TaskPlugin=task/none), so that both sides of a comparison run with the same
# placement rather than the one the kernel's scheduler happens to pick: on 2 cores, 4 unbound
# ranks land 2 + 2 or 1 + 3, and each placement has its own timings.
#   PIN=cyclic bench/pin.sh PROGRAM [ARGS...]      (under srun: needs SLURM_LOCALID)
set -euo pipefail
mode=${PIN:-none}
[[ $mode == none ]] && exec "$@"
local_id=${SLURM_LOCALID:?bench/pin.sh runs under srun (SLURM_LOCALID is not set)}
# This node's task count: SLURM_STEP_TASKS_PER_NODE reads like "3(x2),2", one entry per node.
counts=()
IFS=, read -ra entries <<<"${SLURM_STEP_TASKS_PER_NODE:?}"
for entry in "${entries[@]}"; do
  repeat=1
  [[ $entry == *'(x'* ]] && repeat=${entry#*(x} repeat=${repeat%)}
  for ((i = 0; i < repeat; i++)); do counts+=("${entry%%(*}"); done
done
tasks=${counts[${SLURM_NODEID:-0}]}
cpus=()
IFS=, read -ra ranges <<<"$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
for range in "${ranges[@]}"; do
  for ((cpu = ${range%-*}; cpu <= ${range#*-}; cpu++)); do cpus+=("$cpu"); done
done
case $mode in
  cyclic) index=$((local_id % ${#cpus[@]})) ;;
  block) index=$((local_id * ${#cpus[@]} / tasks)) ;;
  *) echo "bench/pin.sh: PIN='$mode' is not cyclic, block or none" >&2; exit 2 ;;
esac
exec taskset -c "${cpus[$index]}" "$@"
