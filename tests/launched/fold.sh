#!/usr/bin/env bash
# `jobkit fold` on a 48-rank step over 3 nodes (fold_step.py: a config alike on all ranks but one,
# warnings, a traceback alike on all ranks but one), its output checked by fold_check.py.
#   command   jobkit fold -- srun ...: stdout and stderr folded apart, exit status srun's (0)
#   filter    srun --label ... 2>&1 | jobkit fold --ranks 48: one merged stream
#   killed    rank 3 killed (SIGKILL) in the middle of a line: its partial line kept, exit status srun's
#   bad-exit  rank 3 exits with 3, srun --kill-on-bad-exit=1 ends the others: exit status srun's
# fold gets a window of 30 s: the step is over before, so every block is written by the rule that
# every rank said it, or at the end. On a loaded machine (the suite runs both platforms at once) the
# ranks' alike lines came seconds apart; when the window writes a block is test_fold's part.
# In the command modes `srun` is a wrapper that runs the real srun and records its exit status,
# which fold's must equal.
# usage: fold.sh MODE JOBKIT FOLD_STEP_PY FOLD_CHECK_PY SHARED_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes command filter killed bad-exit
mode=$1
jobkit=$2
step_py=$3
check_py=$4
shared=$5
need_cluster
python=/usr/bin/python3  # the nodes' interpreter (the nodes share this machine's files)
work=$shared/$mode.$$
rm -rf "$work" && mkdir -p "$work/bin" "$work/step"
step_mode=$mode
[[ $mode == command || $mode == filter ]] && step_mode=normal
srun_args=(--mpi=pmix -N3 -n48 --overcommit)  # 48 tasks on 3 nodes of 8 CPUs
[[ $mode == bad-exit ]] && srun_args+=(--kill-on-bad-exit=1)

# show FILE TITLE: prints the file into the test log.
show() {
  echo "---- $2 ($(wc -l <"$1") lines)"
  cat "$1"
  echo "----"
}

start=$(date +%s%N)
if [[ $mode == filter ]]; then
  # srun's output is kept ($work/raw, left there when the test fails): fed to `jobkit fold` again,
  # it shows a failure again, and fold_check.py reads from it whether srun kept each rank's order.
  timeout 120 srun "${srun_args[@]}" --label "$python" "$step_py" normal "$work/step" 2>&1 | tee "$work/raw" |
    timeout 120 "$jobkit" fold --ranks 48 --window 30000 >"$work/merged" 2>"$work/fold-err"
  statuses=("${PIPESTATUS[0]}" "${PIPESTATUS[2]}")
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  show "$work/merged" "folded, stdout and stderr merged"
  show "$work/fold-err" "jobkit fold's stderr"
  echo "elapsed: $elapsed_ms ms, srun exit status ${statuses[0]}, jobkit fold exit status ${statuses[1]}"
  ((statuses[1] != 124)) || fail "jobkit fold hung"
  ((statuses[0] == 0)) || fail "srun's exit status ${statuses[0]}"
  ((statuses[1] == 0)) || fail "jobkit fold's exit status ${statuses[1]}"
  "$python" "$check_py" mix "$work/merged" --raw "$work/raw" --ranks 48 ||
    fail "the folded output is wrong (above); srun's output: $work/raw"
else
  real_srun=$(command -v srun)
  cat >"$work/bin/srun" <<EOF
#!/usr/bin/env bash
"$real_srun" "\$@"
status=\$?
echo "\$status" >"$work/srun-status"
exit "\$status"
EOF
  chmod +x "$work/bin/srun"
  PATH=$work/bin:$PATH timeout 120 "$jobkit" fold --window 30000 -- srun "${srun_args[@]}" "$python" "$step_py" "$step_mode" \
    "$work/step" >"$work/out" 2>"$work/err"
  status=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  show "$work/out" "folded stdout"
  show "$work/err" "folded stderr"
  srun_status=$(cat "$work/srun-status" 2>/dev/null) || srun_status="none (srun did not end)"
  echo "elapsed: $elapsed_ms ms, jobkit fold exit status $status, srun's $srun_status"
  ((status != 124)) || fail "jobkit fold hung"
  [[ $status == "$srun_status" ]] || fail "jobkit fold's exit status $status is not srun's, $srun_status"
  case $mode in
    command) ((status == 0)) || fail "exit status $status" ;;
    killed)
      ((status != 0)) || fail "exit status 0 though rank 3 was killed"
      grep -qx 'srun: error: c1: task 3: Killed' "$work/err" ||
        fail "srun's line on rank 3's death did not pass through" ;;
    bad-exit)
      ((status != 0)) || fail "exit status 0 though rank 3 exited with 3"
      grep -qx 'srun: error: c1: task 3: Exited with exit code 3' "$work/err" ||
        fail "srun's line on rank 3's exit did not pass through" ;;
  esac
  "$python" "$check_py" "$step_mode" "$work/out" "$work/err" --ranks 48 || fail "the folded output is wrong (above)"
fi
rm -rf "$work"
echo ok
