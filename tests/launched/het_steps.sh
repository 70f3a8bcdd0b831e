#!/bin/bash
# The batch script of het_job.sh's batch mode: a heterogeneous job of two components (-N1 -n2, then
# -N2 -n3) whose steps run over both components (the Python module, `jobkit barrier`, `jobkit
# exec`), over component 1 alone, and on component 0 (a plain srun). Prints "== STEP", the step's
# output and "status N" for each.
# usage (sbatch runs a copy of this file, hence the paths): het_steps.sh HERE JOBKIT PYTHON WORK SRUN_HANG
#   SRUN_HANG "tolerated": this Slurm's srun may not return from a step over several components
#   after every task has exited (before 24.11; het_job.sh); a step whose every task said it exited
#   with status 0 has then succeeded. "fail": such a step fails.
#SBATCH -N1 -n2 -t 5
#SBATCH hetjob
#SBATCH -N2 -n3 -t 5
set -u
here=$1 jobkit=$2 python=$3 work=$4 srun_hang=$5

# run TITLE SRUN_OPTIONS... -- CMD...: one step, each task saying how its command exited.
run() {
  local title=$1 options=() status tasks steps
  shift
  while [[ $1 != -- ]]; do options+=("$1"); shift; done
  shift
  echo "== $title"
  timeout -k 5 30 srun --mpi=pmix --kill-on-bad-exit=1 "${options[@]}" \
    sh -c '"$@"; s=$?; echo "task $SLURM_PROCID exited $s"; exit $s' task "$@" >"$work/step.out" 2>&1
  status=$?
  cat "$work/step.out"
  tasks=$(grep -c '^task [0-9]* exited 0$' "$work/step.out")
  # Slurm's bug leaves no step behind (every slurmstepd has ended): a step still listed is not it.
  steps=$(timeout 10 squeue -h -s -j "$SLURM_JOB_ID" -o %i 2>/dev/null | grep -vE '\.(batch|extern)$')
  if ((status == 124 || status == 137)) && [[ $srun_hang == tolerated ]] && ((tasks == 5)) && [[ -z $steps ]]; then
    echo "NOTE: every task exited with status 0 and srun did not return (Slurm's ticket 16817)"
    status=0
  fi
  echo "status $status"
}

run "both components" --het-group=0,1 -- "$python" "$here/het_check.py" 2,3
run "both components, jobkit barrier" --het-group=0,1 -- "$jobkit" barrier --timeout 20
run "both components, jobkit exec" --het-group=0,1 -- "$jobkit" exec -- "$python" "$here/het_check.py" 2,3
run "component 1" --het-group=1 --export=ALL,HET_FIRST_COMPONENT=1 -- "$python" "$here/het_check.py" 3
run "plain srun" -- "$python" "$here/het_check.py" 2
