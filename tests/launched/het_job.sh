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
probe=("$here/probe.sh" "$jobkit" info --json)
check=("$here/check_identity.py" --ranks 5 --launcher slurm --layout 2,2,1 --components 2,3)

case $mode in
  identity-pmix)
    timeout 120 srun --mpi=pmix -N1 -n2 "${probe[@]}" : -N2 -n3 "${probe[@]}" | "${check[@]}" --source pmix ;;
  identity-none)
    timeout 120 srun --mpi=none -N1 -n2 "${probe[@]}" : -N2 -n3 "${probe[@]}" | "${check[@]}" --source slurm ;;
  batch)
    out_file=$work/het-batch.out
    rm -f "$out_file"
    cat >"$work/het.sbatch" <<EOS
#!/bin/bash
#SBATCH -N1 -n2
#SBATCH hetjob
#SBATCH -N2 -n3
set -u
export PYTHONPATH=$PYTHONPATH
step=(timeout 90 srun --mpi=pmix --kill-on-bad-exit=1)
echo "== both components"
"\${step[@]}" --het-group=0,1 "$python" "$here/het_check.py" 2,3; echo "status \$?"
echo "== both components, jobkit barrier"
"\${step[@]}" --het-group=0,1 "$jobkit" barrier --timeout 60; echo "status \$?"
echo "== both components, jobkit exec"
"\${step[@]}" --het-group=0,1 "$jobkit" exec -- "$python" "$here/het_check.py" 2,3; echo "status \$?"
echo "== component 1"
HET_FIRST_COMPONENT=1 "\${step[@]}" --het-group=1 "$python" "$here/het_check.py" 3; echo "status \$?"
echo "== plain srun"
"\${step[@]}" "$python" "$here/het_check.py" 2; echo "status \$?"
EOS
    timeout 600 sbatch --wait -o "$out_file" "$work/het.sbatch"
    out=$(cat "$out_file")
    echo "$out"
    [[ $(grep -c '^status 0$' <<<"$out") == 5 ]] || fail "not every step of the het job succeeded"
    (($(count ": OK$") == 5 + 5 + 3 + 2)) || fail "not every rank of the Python steps said OK"
    ;;
esac
