#!/usr/bin/env bash
# `jobkit where` on running steps of the dev cluster: each step runs in the background (srun makes
# its job), `jobkit where JOB` is asked while it waits, its folded report checked, the step ended.
#   python     7 ranks on 3 nodes: rank 5 in load_shard() (where_step.py), the others in
#              jobkit.barrier: both groups with file:line, the awaited rank and its node
#   cpp        the same with `jobkit barrier` (C++) and rank 5 in `sleep`, outside jobkit
#   no-jobkit  every rank in `sleep`: what /proc says
#   stopped    the python step with c2's ranks stopped (SIGSTOP): named as not answering
#   signals    the python step with ranks 5 and 6 outside jobkit: rank 5 registered its stack dump
#              on another signal (JOBKIT_WHERE_SIGNAL=45) than the agent's default, rank 6 set its
#              own back to SIG_DFL; both survive `jobkit where` (twice), rank 5 with its stack,
#              rank 6 without one, saying why
#   two-steps  two steps of one job at once (2 ranks on c1, 6 on c2 and c3): both reported
#   self-report        the python step with JOBKIT_WHERE_REPORT_AFTER=3 and a barrier of 20 s: rank 0
#              logs the folded report by itself, and every deadline message points to it
#   self-report-cpp    the same with `jobkit barrier` (C++) and rank 5 in `sleep`
#   bad-input  a job id that is not one, a job that is not running, no SLURM_JOB_ID, another
#              user's job (as nobody, where nobody can run the build's jobkit)
# usage: where.sh MODE JOBKIT PYTHON PYTHONPATH WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes python cpp no-jobkit stopped signals two-steps self-report self-report-cpp bad-input
mode=$1
jobkit=$(realpath "$2")
python=$3
export PYTHONPATH=$4
work=$(realpath -m "$5/$mode.$$")
need_cluster
rm -rf "$work" && mkdir -p "$work"
step_py=$here/where_step.py
line_of() { grep -n "# $1\$" "$step_py" | cut -d: -f1; }

# start_step NAME SRUN_ARGS...: srun in the background; sets $job once its step runs.
start_step() {
  local name=$1
  shift
  timeout 250 srun --mpi=pmix --job-name="jobkit-where-$name" "$@" >"$work/$name.out" 2>&1 &
  job=
  for _ in $(seq 300); do
    job=$(squeue -h -n "jobkit-where-$name" -t R -o %i | head -1)
    [[ -n $job ]] && [[ -n $(squeue -h -s -j "$job" -o %i | grep -E "^$job\.[0-9]+$") ]] && break
    sleep 0.1
  done
  [[ -n $job ]] || fail "the step did not start: $(cat "$work/$name.out")"
}

# ask JOB...: runs jobkit where, keeps its output in $out and its time in $elapsed_ms.
ask() {
  local start
  start=$(date +%s%N)
  out=$(timeout 60 "$jobkit" where "$@" 2>&1)
  status=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  echo "--- jobkit where $* (exit status $status, $elapsed_ms ms)"
  echo "$out"
  ((status != 124)) || fail "jobkit where hung"
}

# wait_for PATTERN...: asks again until the report has a line matching each PATTERN (the ranks may still
# be starting: on a loaded machine a rank's start took 30 s), up to 120 s.
wait_for() {
  local deadline=$((SECONDS + 120)) pattern missing
  while ((SECONDS < deadline)); do
    ask "$job"
    missing=
    for pattern in "$@"; do grep -qE -- "$pattern" <<<"$out" || missing=$pattern; done
    [[ -z $missing ]] && return 0
    sleep 1
  done
  fail "no line matches '$missing'"
}

# At the end, the steps are cancelled. Ranks killed so leave their nodes' shared memory segments
# (/dev/shm/jobkit-JOB.*, which a rank removes when it ends well): removed here, so that a later
# test's check for leftovers finds none of these.
cleanup() {
  local names="jobkit-where-$mode,jobkit-where-first" jobs j
  jobs=$(squeue -h -n "$names" -o %i 2>/dev/null | tr '\n' ' ')
  # By id (scancel takes one name only). SIGKILL to the steps first: a rank of `jobkit barrier`
  # waits out SIGTERM until Slurm's KillWait (30 s), and the next test would wait for these nodes.
  if [[ -n $jobs ]]; then
    scancel --signal=KILL $jobs 2>/dev/null
    scancel $jobs 2>/dev/null
  fi
  for _ in $(seq 300); do [[ -z $(squeue -h -n "$names" -o %i 2>/dev/null) ]] && break; sleep 0.1; done
  for j in $jobs; do
    timeout 30 srun -N3 --ntasks-per-node=1 bash -c "rm -f /dev/shm/jobkit-$j.*" >/dev/null 2>&1
  done
  rm -rf "$work"
}
trap cleanup EXIT
case $mode in
  python | stopped)
    start_step "$mode" -N3 -n7 "$python" "$step_py" 200
    barrier="in barrier at where_step.py:$(line_of BARRIER_LINE)"
    stack="load_shard where_step.py:$(line_of LOAD_LINE) <- train_step where_step.py:$(line_of STEP_LINE)"
    if [[ $mode == python ]]; then
      wait_for "^\[rank: 0-4,6\] $barrier for [0-9]+(-[0-9]+)? s, waiting for rank 5 \(c2\)$"
      grep -qE "^\[rank: 5\] not in jobkit: $stack <- <module> where_step.py:[0-9]+$" <<<"$out" ||
        fail "rank 5's Python stack is not in the report"
      # 5 s is the aim (0.1 to 0.3 s measured here); 20 s the bound, with slack for a loaded machine.
      ((elapsed_ms < 20000)) || fail "the report took $elapsed_ms ms, more than 20 s"
      (($(grep -c . <<<"$out") == 3)) || fail "the report is not 3 lines"
    else
      wait_for "^\[rank: 0-4,6\] $barrier"
      # c2 runs ranks 5 (block layout of 7 on 3 nodes: 0-4, 5, 6): stop it.
      # The dev cluster's nodes share this machine's processes: c2's are those whose Slurm says so.
      pids=()
      for pid in $(pgrep -f where_step.py); do
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=c2" && pids+=("$pid")
      done
      ((${#pids[@]} > 0)) || fail "no process of the step on c2"
      kill -STOP "${pids[@]}"
      ask "$job"
      grep -qE "^\[rank: 5\] not answering: python3 T \(stopped\)" <<<"$out" || fail "the stopped rank is not named"
      grep -qE "^\[rank: 0-4,6\] $barrier for " <<<"$out" || fail "the other ranks are not in the report"
      ((elapsed_ms < 20000)) || fail "the report took $elapsed_ms ms, more than 20 s"
      kill -CONT "${pids[@]}"
    fi ;;
  signals)
    # Rank 5 (c2) registers on 45; the agent, run from here, has no JOBKIT_WHERE_SIGNAL (its old
    # default, SIGRTMIN+6, would have ended rank 5). Rank 6 (c3) catches no signal for its dump.
    unset JOBKIT_WHERE_SIGNAL
    WHERE_STEP_OWN_SIGNAL=5:45 WHERE_STEP_UNCAUGHT=6 start_step "$mode" -N3 -n7 "$python" "$step_py" 200 5,6
    barrier="in barrier at where_step.py:$(line_of BARRIER_LINE)"
    stack="load_shard where_step.py:$(line_of LOAD_LINE) <- train_step where_step.py:$(line_of STEP_LINE)"
    alive() {  # the step's processes of rank $1 still running
      local pid n=0
      for pid in $(pgrep -f where_step.py); do
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_PROCID=$1" && n=$((n + 1))
      done
      ((n > 0))
    }
    for round in 1 2; do
      wait_for "^\[rank: 0-4\] $barrier for [0-9]+(-[0-9]+)? s, waiting for ranks 5-6 \(c2, c3\)$" \
        "^\[rank: 5\] not in jobkit: $stack <- <module> where_step.py:[0-9]+$" \
        "^\[rank: 6\] not in jobkit: .* \(signal [0-9]+ not caught by pid [0-9]+; no stack taken\)$"
      (($(grep -c . <<<"$out") == 4)) || fail "the report is not 4 lines (round $round)"
      sleep 1  # a signal's default action would have ended the rank by now
      alive 5 || fail "rank 5 did not survive jobkit where (round $round)"
      alive 6 || fail "rank 6 did not survive jobkit where (round $round)"
    done
    ! grep -qi "real-time signal" "$work/$mode.out" || fail "a rank was ended by a signal: $(cat "$work/$mode.out")" ;;
  cpp)
    start_step "$mode" -N3 -n7 bash -c \
      'if [[ $SLURM_PROCID == 5 ]]; then exec sleep 200; else exec "$0" barrier --timeout 260; fi' "$jobkit"
    wait_for '^\[rank: 0-4,6\] in barrier at jobkit barrier for [0-9]+(-[0-9]+)? s, waiting for rank 5 \(c2\)$'
    grep -qE '^\[rank: 5\] not in jobkit: sleep S \(sleeping\)' <<<"$out" || fail "rank 5's state is not in the report" ;;
  no-jobkit)
    start_step "$mode" -N3 -n7 sleep 200
    wait_for '^\[rank: 0-6\] not in jobkit: sleep S \(sleeping\)' ;;
  two-steps)
    # One allocation, two steps in it.
    salloc_out=$work/salloc.out
    timeout 250 salloc -N3 --ntasks-per-node=3 --job-name=jobkit-where-first bash -c "
      srun --mpi=pmix -N1 -n2 -w c1 '$python' '$step_py' 200 1 &
      srun --mpi=pmix -N2 -n6 -w c2,c3 '$python' '$step_py' 200 &
      wait" >"$salloc_out" 2>&1 &
    for _ in $(seq 300); do
      job=$(squeue -h -n jobkit-where-first -t R -o %i | head -1)
      [[ -n $job ]] && (($(squeue -h -s -j "$job" -o %i | grep -cE "^$job\.[0-9]+$") == 2)) && break
      sleep 0.1
    done
    (($(squeue -h -s -j "$job" -o %i | grep -cE "^$job\.[0-9]+$") == 2)) || fail "the two steps did not start"
    # Both steps at once, each once it is where it stays (a step still starting up is in neither).
    wait_for "^\[rank: 0-4\] in barrier at where_step.py:[0-9]+ .*waiting for rank 5 \(c3\)$" \
      "^\[rank: 0\] in barrier at where_step.py:[0-9]+ for [0-9]+ s, waiting for rank 1 \(c1\)$"
    (($(grep -c '^step ' <<<"$out") == 2)) || fail "not both steps were reported" ;;
  self-report | self-report-cpp)
    # The report comes from the step itself: rank 0 runs `jobkit where` (JOBKIT_CLI) after 3 s.
    export JOBKIT_WHERE_REPORT_AFTER=3 JOBKIT_CLI=$jobkit
    if [[ $mode == self-report ]]; then
      start_step "$mode" -N3 -n7 "$python" "$step_py" 200 5 20
      site="where_step.py:$(line_of BARRIER_LINE)"
      stack="not in jobkit: load_shard where_step.py:$(line_of LOAD_LINE) <- train_step where_step.py:$(line_of STEP_LINE)"
    else
      start_step "$mode" -N3 -n7 bash -c \
        'if [[ $SLURM_PROCID == 5 ]]; then exec sleep 200; else exec "$0" barrier --timeout 20; fi' "$jobkit"
      site='jobkit barrier'
      stack='not in jobkit: sleep S \(sleeping\)'
    fi
    log=$work/$mode.out
    # Rank 0's deadline passes 20 s after its barrier began; the others' close to it.
    for _ in $(seq 900); do
      (($(grep -c "where every rank was after 3 s" "$log") >= 6)) && break
      sleep 0.2
    done
    echo "--- the step's output"
    cat "$log"
    grep -qE "^\[rank: 0\] WARNING: barrier at $site has waited [3-9] s; where every rank is \(jobkit where $job\.0\):$" "$log" ||
      fail "rank 0 did not report within 3 to 9 s of its wait"
    grep -qE "^  \[rank: 0-4,6\] in barrier at $site for [0-9]+(-[0-9]+)? s, waiting for rank 5 \(c2\)$" "$log" ||
      fail "the report does not show the waiting ranks"
    grep -qE "^  \[rank: 5\] $stack" "$log" || fail "the report does not show rank 5"
    (($(grep -c "has waited" "$log") == 1)) || fail "the step reported more than once"
    # Every deadline message points to the report: rank 0's own, and the others' to rank 0 (its
    # node is named once the group is connected; here it never was).
    (($(grep -cE "where every rank was after 3 s: the report rank 0( \(c1\))? logged" "$log") == 5)) ||
      fail "the other ranks' deadline messages do not point to rank 0's report"
    grep -q "where every rank was after 3 s: the report this rank logged" "$log" ||
      fail "rank 0's deadline message does not point to its report" ;;
  bad-input)
    ask notajob
    ((status == 2)) && grep -qx "jobkit: where: 'notajob' is not a job id (JOBID or JOBID.STEP, digits)" <<<"$out" ||
      fail "a bad job id was not refused"
    ask 999999
    ((status == 2)) && grep -q "^jobkit: where: " <<<"$out" || fail "a job that does not exist was not refused"
    out=$(env -u SLURM_JOB_ID "$jobkit" where 2>&1)
    [[ $out == "jobkit: where: no JOBID given and SLURM_JOB_ID is not set (run it inside the allocation)" ]] ||
      fail "no job: $out"
    start_step "$mode" -N1 -n1 sleep 100
    ask "$job.7"
    ((status == 2)) && grep -qx "jobkit: where: step $job.7 is not running" <<<"$out" ||
      fail "a step that is not running was not refused"
    # Another user's job: Slurm refuses the overlapping step, and that is the one line.
    if runuser -u nobody -- test -x "$jobkit"; then
      out=$(timeout 60 runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" "$jobkit" where "$job" 2>&1)
      status=$?
      echo "--- as nobody (exit status $status): $out"
      ((status == 2)) && [[ $(grep -c . <<<"$out") == 1 ]] &&
        grep -qE "^jobkit: where: srun --overlap into job $job failed \(exit status [0-9]+\): .*(denied|not permitted)" <<<"$out" ||
        fail "another user's job was not refused in one line"
    else
      echo "--- another user's job: not checked ($jobkit is not reachable by user nobody)"
    fi ;;
esac
echo ok
