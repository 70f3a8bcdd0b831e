#!/usr/bin/env bash
# Heterogeneous jobs (srun A : B, and srun --het-group in a het batch job): every rank's identity
# with its component, collectives across components, a component's group, `jobkit exec`.
# usage: het_job.sh MODE JOBKIT PYTHON PYTHONPATH WORK_DIR
#   identity-pmix, identity-none: `srun -N1 -n2 ... : -N2 -n3 ...` (uneven: 2 on c1, then 2+1)
#   batch: an sbatch het job of the same shape; its steps over both components (the Python module,
#          `jobkit barrier`, `jobkit exec`), over component 1 alone, and a plain srun (component 0)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes identity-pmix identity-none batch
mode=$1
jobkit=$2
python=$3
export PYTHONPATH=$4
work=$5
need_cluster
mkdir -p "$work"
name=jobkit-het-test
trap 'scancel --name=$name 2>/dev/null' EXIT
probe=("$here/probe.sh" "$jobkit" info --json)
check=("$here/check_identity.py" --ranks 5 --launcher slurm --layout 2,2,1 --components 2,3)
# Slurm before 24.11: srun --mpi=pmix over several components may not return after every task has
# exited (its mpi/pmix plugin starts one abort agent per component and joins one that never stops;
# SchedMD ticket 16817, fixed in 24.11.0; docs/launchers.md). There a step whose every task said
# that it exited with status 0 has succeeded; anything else still fails.
slurm_version=$(srun --version | awk '{print $2}')
srun_hang=fail
[[ $(printf '%s\n' "$slurm_version" 24.11 | sort -V | head -1) == 24.11 ]] || srun_hang=tolerated
echo "Slurm $slurm_version: a srun that does not return after its tasks exited: $srun_hang"

# identity MPI SOURCE: `srun A : B` with every rank's identity checked, within 120 s (the wait for
# the allocation included). probe.sh prints a rank's line only after its jobkit exited with status 0:
# when all five lines came and srun has not returned 20 s later, the hang is srun's (the bug above)
# where it is tolerated, and fails elsewhere.
identity() {
  local file=$work/identity-$1.out pid deadline=$((SECONDS + 120)) all_exited=
  : >"$file"  # empty before srun starts: the loop below counts its lines
  srun --mpi="$1" -J "$name" -t 2 -N1 -n2 "${probe[@]}" : -t 2 -N2 -n3 "${probe[@]}" >"$file" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    [[ -n $all_exited ]] || (($(grep -c '^{"jobkit"' "$file") < 5)) || all_exited=$SECONDS
    if ((SECONDS > deadline)) || { [[ -n $all_exited ]] && ((SECONDS - all_exited > 20)); }; then
      kill -KILL "$pid"
      break
    fi
    sleep 0.5
  done
  wait "$pid"
  status=$?
  out=$(cat "$file")
  echo "$out"
  if ((status == 137)); then
    [[ $srun_hang == tolerated && -n $all_exited ]] || fail "the step hung"
    echo "NOTE: every rank exited with status 0, srun did not return: Slurm $slurm_version's ticket 16817"
  elif ((status != 0)); then
    fail "srun exit status $status"
  fi
  "${check[@]}" --source "$2" <<<"$out"
}

case $mode in
  identity-pmix) identity pmix pmix ;;
  identity-none) identity none slurm ;;
  batch)
    out_file=$work/het-batch.out
    rm -f "$out_file"
    job=$(sbatch --parsable -J "$name" -o "$out_file" "$here/het_steps.sh" "$here" "$jobkit" "$python" "$work" \
      "$srun_hang") || fail "sbatch failed"
    deadline=$((SECONDS + 480))
    # Until the job has left the queue (a squeue that fails counts as "still there").
    while ! queue=$(timeout 10 squeue -h -o %A 2>/dev/null) || grep -qx "$job" <<<"$queue"; do
      ((SECONDS < deadline)) || { cat "$out_file"; fail "job $job ran past 480 s (cancelled on exit)"; }
      sleep 1
    done
    out=$(cat "$out_file")
    echo "$out"
    [[ $(grep -c '^status 0$' <<<"$out") == 5 ]] || fail "not every step of the het job succeeded"
    (($(count ": OK$") == 5 + 5 + 3 + 2)) || fail "not every rank of the Python steps said OK"
    ;;
esac
