#!/usr/bin/env bash
# `jobkit fold` on a 48-rank step over 3 nodes (fold_step.py: a config alike on all ranks but one,
# warnings, a traceback alike on all ranks but one), its output checked by fold_check.py.
#   command   jobkit fold -- srun ...: stdout and stderr folded apart, exit status srun's (0)
#   filter    srun --label ... 2>&1 | jobkit fold --ranks 48: one merged stream
#   killed    rank 3 killed (SIGKILL) in the middle of a line: its partial line kept, exit status srun's
#   bad-exit  rank 3 exits with 3, srun --kill-on-bad-exit=1 ends the others: exit status srun's
#   sigterm   SIGTERM to jobkit fold (not to srun) while every rank's line is held: srun gets it and
#             ends the step, the held lines are written, the exit status is srun's
#   sigint    two SIGINTs to jobkit fold within a second, as a second Ctrl-C: srun ends the step
# fold gets a window of 30 s: the step is over before, so every block is written by the rule that
# every rank said it, or at the end. On a loaded machine (the suite runs both platforms at once) the
# ranks' alike lines came seconds apart; when the window writes a block is test_fold's part.
# In the command modes `srun` is a wrapper that runs the real srun and records its exit status,
# which fold's must equal.
# usage: fold.sh MODE JOBKIT FOLD_STEP_PY FOLD_CHECK_PY SHARED_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes command filter killed bad-exit sigterm sigint
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

# srun_wrapper: `srun` on PATH runs the real srun, passes it SIGINT and SIGTERM, records its exit
# status in $work/srun-status (128+N when a signal N ended it) and ends as it ended.
srun_wrapper() {
  cat >"$work/bin/srun" <<EOF
#!$python
import os, signal, subprocess, sys
srun = subprocess.Popen(["$(command -v srun)"] + sys.argv[1:])
for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, lambda n, _: srun.send_signal(n))
status = srun.wait()
with open("$work/srun-status", "w") as f:
    f.write(str(status if status >= 0 else 128 - status))
if status < 0:
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
sys.exit(status)
EOF
  chmod +x "$work/bin/srun"
}

if [[ $mode == sigterm || $mode == sigint ]]; then
  # Each rank says a line of its own, then waits: its line is held for the window (30 s).
  srun_wrapper
  PATH=$work/bin:$PATH timeout 120 "$jobkit" fold --window 30000 -- srun --mpi=pmix -N3 -n6 \
    bash -c 'echo "rank $SLURM_PROCID waiting"; exec sleep 100' >"$work/out" 2>"$work/err" &
  timeout_pid=$!
  # The signals go to jobkit fold itself, not to timeout: timeout would pass each one to its whole
  # process group (srun included, directly) and follow it with SIGCONT, which is not the path
  # tested here and, on a loaded machine, left srun counting no second SIGINT.
  fold_pid=
  for _ in $(seq 100); do
    fold_pid=$(pgrep -P "$timeout_pid" | head -1)
    [[ -n $fold_pid ]] && break
    sleep 0.05
  done
  [[ -n $fold_pid ]] || fail "jobkit fold did not start"
  for _ in $(seq 300); do
    [[ $(squeue -h -s -o %i 2>/dev/null | grep -c '\.0$') -ge 1 ]] && break
    sleep 0.1
  done
  sleep 3  # the ranks have written their lines; fold holds them
  [[ ! -s $work/out ]] || fail "the lines were written before the window: $(cat "$work/out")"
  start=$(date +%s%N)
  if [[ $mode == sigterm ]]; then
    kill -TERM "$fold_pid"
  else
    # A second Ctrl-C: the second SIGINT once srun said it had the first, well within its second.
    kill -INT "$fold_pid"
    for _ in $(seq 250); do
      grep -q 'one more within 1 sec' "$work/err" && break
      sleep 0.02
    done
    kill -INT "$fold_pid"
  fi
  wait "$timeout_pid"
  status=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  show "$work/out" "folded stdout"
  show "$work/err" "folded stderr"
  srun_status=$(cat "$work/srun-status" 2>/dev/null) || srun_status="none (srun did not end)"
  echo "the step ended $elapsed_ms ms after the signal; jobkit fold exit status $status, srun's $srun_status"
  ((status != 124)) || fail "jobkit fold hung"
  ((elapsed_ms < 20000)) || fail "the step did not end within 20 s of the signal"
  [[ $status == "$srun_status" ]] || fail "jobkit fold's exit status $status is not srun's, $srun_status"
  ((status != 0)) || fail "exit status 0 though the step was ended by a signal"
  for r in 0 1 2 3 4 5; do
    grep -qx "\\[rank: $r\\] rank $r waiting" "$work/out" || fail "rank $r's held line was not written"
  done
  rm -rf "$work"
  echo ok
  exit 0
fi

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
  srun_wrapper
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
