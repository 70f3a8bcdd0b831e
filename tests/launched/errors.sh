#!/usr/bin/env bash
# Contradicting environments under a real launcher: every rank refuses with exit 2 and one line
# naming the variables, and the step ends promptly.
# usage: errors.sh MODE JOBKIT_BINARY
set -euo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes contradiction spawned partial
mode=$1
jobkit=$2
need_cluster

out=$(mktemp /var/tmp/jobkit-errors.XXXXXX)
trap 'rm -f "$out"' EXIT
status=0
case $mode in
  contradiction)
    # Variables of another job leaked into the step.
    RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 NODE_RANK=1 \
      timeout 60 srun --mpi=pmix -N2 -n4 "$jobkit" info >"$out" 2>&1 || status=$?
    expected=("contradicts" "WORLD_SIZE='8'")
    ranks=4 ;;
  spawned)
    # Two processes started inside each Slurm task (torchrun inside srun): each inherits the
    # task's PMIX_RANK and SLURM_PROCID.
    timeout 60 srun --mpi=pmix -N2 -n2 bash -c '
      for i in 0 1; do
        TORCHELASTIC_RUN_ID=t RANK=$((2 * SLURM_PROCID + i)) WORLD_SIZE=4 LOCAL_RANK=$i \
          LOCAL_WORLD_SIZE=2 NODE_RANK=$SLURM_NODEID "$0" info &
      done
      fail=0; for i in 0 1; do wait -n || fail=$?; done; exit $fail' "$jobkit" >"$out" 2>&1 || status=$?
    expected=("torchrun inside srun" "WORLD_SIZE='4'")
    ranks=4 ;;
  partial)
    # A Slurm step environment with one variable removed.
    timeout 60 srun --mpi=none -N2 -n2 env -u SLURM_LOCALID "$jobkit" info >"$out" 2>&1 || status=$?
    expected=("partial Slurm step environment" "SLURM_LOCALID")
    ranks=2 ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2 ;;
esac
cat "$out"
failed=0
if ((status == 0)); then
  echo "FAIL: the step succeeded"
  failed=1
fi
((status != 124)) || { echo "FAIL: the step hung"; failed=1; }
lines=$(grep -c '^jobkit: ' "$out" || true)
if ((lines != ranks)); then
  echo "FAIL: $lines error lines, expected one per rank ($ranks)"
  failed=1
fi
for part in "${expected[@]}"; do
  grep -qF -- "$part" "$out" || { echo "FAIL: no message contains: $part"; failed=1; }
done
grep -q '^rank ' "$out" && { echo "FAIL: a rank printed an identity"; failed=1; }
exit $failed
