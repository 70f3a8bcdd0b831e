# Sourced by the benchmark scripts: step [SRUN_OPTIONS...] PROGRAM [ARGS...] runs one job step of
# the allocation, every task through bench/pin.sh when PIN is cyclic or block.
step_pin=()
[[ ${PIN:-none} == none ]] || step_pin=("$(dirname "${BASH_SOURCE[0]}")/pin.sh")
step() {
  local options=()
  while [[ $1 == -* ]]; do options+=("$1"); shift; done
  srun --mpi=pmix --distribution=block --kill-on-bad-exit=1 --overcommit "${options[@]}" "${step_pin[@]}" "$@"
}
