#!/usr/bin/env bash
# The sbatch templates of slurm/, submitted for real with sbatch --wait on the dev cluster, their
# output checked. The GPU template runs as a CPU variant (its --gpus-per-task line removed).
# usage: templates.sh MODE JOBKIT TRAIN_STEP WORK_DIR   (MODE: see declare_modes below)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes gpu-as-cpu python stage array
mode=$1
jobkit=$(realpath "$2")  # the batch script runs in $work
train_step=$(realpath "$3")
work=$(realpath -m "$4/$mode")
need_cluster
rm -rf "$work" && mkdir -p "$work"
templates=$repo/slurm
submit=(timeout 300 sbatch --wait --cpus-per-task=1 --chdir="$work" --output="$work/%x-%j.out")
case $mode in
  gpu-as-cpu)
    sed '/^#SBATCH --gpus-per-task/d' "$templates/train-gpu.sbatch" >"$work/train-cpu.sbatch"
    run_step env JOBKIT="$jobkit" PROGRAM="$train_step" "${submit[@]}" --nodes=3 --ntasks-per-node=2 \
      "$work/train-cpu.sbatch" 4 ;;
  python)
    /usr/bin/python3 -c 'import torch' 2>/dev/null || skip "torch not installed (apt-get install python3-torch)"
    run_step env JOBKIT="$jobkit" SCRIPT="$here/torch_allreduce.py" "${submit[@]}" --nodes=3 --ntasks=7 \
      "$templates/train-python.sbatch" ;;
  stage)
    mkdir -p "$work/dataset" && for i in 1 2 3; do echo "shard $i" >"$work/dataset/shard$i"; done
    cat >"$work/check.sh" <<'CHECK'
#!/usr/bin/env bash
echo "rank $SLURM_PROCID on $(hostname) sees $(ls "$DATA_DST" | wc -l) files"
CHECK
    chmod +x "$work/check.sh"
    run_step env JOBKIT="$jobkit" PROGRAM="$work/check.sh" DATA_SRC="$work/dataset" DATA_DST="/tmp/jobkit-stage-test" \
      "${submit[@]}" --nodes=3 --ntasks-per-node=2 "$templates/stage-data.sbatch" ;;
  array)
    run_step env JOBKIT="$jobkit" PROGRAM="$train_step" "${submit[@]}" --array=0-2 --output="$work/%x-%A_%a.out" \
      --ntasks-per-node=3 "$templates/array.sbatch" ;;
  *) fail "unknown mode $mode" ;;
esac
((status == 0)) || fail "sbatch --wait exit status $status"
out=$(cat "$work"/*.out | unfold)
echo "--- job output"
echo "$out"
case $mode in
  gpu-as-cpu)
    (($(count '(pmix)$') == 6)) || fail "the preflight did not print 6 ranks from PMIx"
    (($(count 'finished 4 steps') == 6)) || fail "not every rank finished the step" ;;
  python)
    (($(count 'all_reduce 28 (expected 28) ok') == 7)) || fail "not every rank's all_reduce was right" ;;
  stage)
    (($(count 'sees 3 files') == 6)) || fail "not every rank saw the staged files on its node"
    left=$(timeout 60 srun -N3 --ntasks-per-node=1 bash -c 'ls -d /tmp/jobkit-stage-test 2>/dev/null' || true)
    [[ -z $left ]] || fail "the node-local copy was not removed: $left" ;;
  array)
    for i in 0 1 2; do
      file=$(ls "$work"/sweep-*_"$i".out)
      grep -q "^\\[rank: 0\\] array task $i: config " "$file" || fail "array task $i did not run its config"
      (($(unfold <"$file" | grep -c 'finished 3 steps') == 3)) || fail "array task $i: not every rank finished"
    done ;;
esac
echo ok
