# Sourced by the benchmark scripts: step [SRUN_OPTIONS...] PROGRAM [ARGS...] runs one job step of
# the allocation, every task through bench/pin.sh when PIN is cyclic or block.
step_pin=()
[[ ${PIN:-none} == none ]] || step_pin=("$(dirname "${BASH_SOURCE[0]}")/pin.sh")
step() {
  local options=()
  while [[ $1 == -* ]]; do options+=("$1"); shift; done
  srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 --overcommit "${options[@]}" "${step_pin[@]}" "$@"
}

# torch 2.4 and later ask env:// for a libuv TCPStore; Debian 13's torch 2.6 is built without libuv,
# so there the torch peer runs with USE_LIBUV=0 (as slurm/train-python.sbatch sets it): it changes
# the server of torch's rendezvous store only, not gloo's collectives.
if [[ -z ${USE_LIBUV:-} ]] && ! /usr/bin/python3 -c 'import torch.distributed as d
d.TCPStore("127.0.0.1", 0, 1, True, use_libuv=True, wait_for_workers=False)' 2>/dev/null; then
  export USE_LIBUV=0
fi
