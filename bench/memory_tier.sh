#!/usr/bin/env bash
# The memory tier of checkpoints (docs/checkpoints-memory.md, issue 63) on the dev cluster, in one
# allocation of c1-c3, steps of 2 nodes x 2 ranks, bench/checkpoint_memory:
#   save: per part size, SAVES saves of one file per rank to a root without the tier and the same
#         to a root with it, in turn, in one step on c1,c2: first with the tier's saves to memory
#         only (save-memory-only: the saves between two of the root's), then with every save to
#         the root too;
#   restore, REPS times each, a new step each time, timed from latest() to its last byte read:
#     memory-own    on c1,c2, every rank's part in its node's memory
#     partner       on c1,c3 with c3's memory emptied first: ranks 0-1 from c1's memory, ranks
#                   2-3 fetch the copies c1 keeps for c2's ranks over the data path
#     root-cold     on c1,c2 with the tier off, the page cache dropped first
#     root-warm     the same right after, the root's files in the page cache
#     root-cold-verify  as root-cold, with verify(step) before the read: every byte's CRC-32C
#                   checked, as the memory tier checks what it restores
#   Before memory-own and partner the page cache is dropped too, so that their disk_read_bytes
#   (/proc/self/io read_bytes, summed over the ranks) are the bytes they read from the root's disk.
# usage: bench/memory_tier.sh BUILD_DIR WORK_DIR [MIB...]   (default: 1 64 512; root: dropping the
#        page cache needs it). The "shared" root is WORK_DIR (on this machine's disk). One JSON
#        line per save and restore on stdout, with the load average before each step.
#        JOBKIT_MEMORY_BENCH_REPS: the restores of each kind per size (default 3).
set -uo pipefail
build=$(realpath "$1")
work=$(realpath -m "$2")
shift 2
sizes=("$@")
((${#sizes[@]})) || sizes=(1 64 512)
if [[ -z ${JOBKIT_MEMORY_BENCH_INSIDE:-} ]]; then
  eval "$("$(dirname "$0")/../slurm/dev-cluster.sh" env)"
  exec timeout 3000 salloc -Q -N3 --ntasks-per-node=2 --time=60 \
    env JOBKIT_MEMORY_BENCH_INSIDE=1 bash "$0" "$build" "$work" "${sizes[@]}"
fi
unset SLURM_NTASKS SLURM_NPROCS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE JOBKIT_CHECKPOINT_MEMORY
bench=$build/bench/checkpoint_memory
memory=/dev/shm/jobkit-bench
reps=${JOBKIT_MEMORY_BENCH_REPS:-3}

load() { cut -d' ' -f1 /proc/loadavg; }
drop_caches() { sync && echo 3 >/proc/sys/vm/drop_caches; }
# clear NODES: this job's memory directories removed on each of NODES.
clear_memory() {
  srun --overlap -w "$1" -N"$(tr ',' '\n' <<<"$1" | wc -l)" --ntasks-per-node=1 rm -rf "$memory"
}
step() {  # NODES ARGS...: one step of 2 x 2 ranks; its rank 0's JSON lines, with the load added
  local nodes=$1 l
  shift
  l=$(load)
  timeout 600 srun --mpi=pmix -w "$nodes" -N2 -n4 --ntasks-per-node=2 --kill-on-bad-exit=1 "$bench" "$@" |
    sed "s/}\$/,\"load\":$l,\"nodes\":\"$nodes\"}/"
}

# Each node's /dev/shm is a tmpfs of its own, all of them drawing on this machine's memory.
shm=$(srun --overlap -w c1 -N1 -n1 df -m --output=size /dev/shm | tail -1 | tr -d ' ')
echo "{\"op\":\"memory\",\"available_mib\":$(free -m | awk '/^Mem:/ {print $7}'),\"node_shm_size_mib\":$shm}"
for mib in "${sizes[@]}"; do
  saves=20
  ((mib >= 64)) && saves=10
  ((mib >= 512)) && saves=5
  rm -rf "$work/$mib" && mkdir -p "$work/$mib"
  clear_memory c1,c2,c3
  step c1,c2 save-memory-only "$mib" "$saves" "$work/$mib/plain" "$work/$mib/memory-only" "$memory"
  rm -rf "$work/$mib/plain" "$work/$mib/memory-only"
  clear_memory c1,c2,c3
  step c1,c2 save "$mib" "$saves" "$work/$mib/plain" "$work/$mib/tier" "$memory"
  rm -rf "$work/$mib/plain"
  for ((r = 0; r < reps; r++)); do
    drop_caches
    step c1,c2 restore "$work/$mib/tier" "$memory" memory-own
    clear_memory c3
    drop_caches
    step c1,c3 restore "$work/$mib/tier" "$memory" partner
    drop_caches
    step c1,c2 restore "$work/$mib/tier" none root-cold
    step c1,c2 restore "$work/$mib/tier" none root-warm
    drop_caches
    step c1,c2 restore "$work/$mib/tier" none root-cold-verify
  done
  clear_memory c1,c2,c3
  rm -rf "${work:?}/$mib"
done
