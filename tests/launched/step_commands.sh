#!/usr/bin/env bash
# The jobkit command's step helpers on the dev cluster: on-main, once-per-node, n-at-a-time,
# zero-first, exec and env.
# usage: step_commands.sh MODE JOBKIT SHARED_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes on-main on-main-fail once-per-node once-per-node-fail n-at-a-time n-at-a-time-fail zero-first zero-first-fail zero-first-sigterm zero-first-sigkill env exec exec-refuse exec-overwrite exec-finalized
mode=$1
jobkit=$2
shared=$3
need_cluster
mkdir -p "$shared"
export JOBKIT_BIN=$jobkit SHARED=$shared/$mode.$$
rm -rf "$SHARED" && mkdir -p "$SHARED"
step=(timeout 90 srun --mpi=pmix -N3 -n7)
case $mode in
  on-main) run_step "${step[@]}" "$jobkit" on-main -- bash -c 'echo "ran on rank $SLURM_PROCID"' ;;
  on-main-fail) run_step "${step[@]}" "$jobkit" on-main -- bash -c 'exit 3' ;;
  once-per-node)
    run_step "${step[@]}" bash -c '"$JOBKIT_BIN" once-per-node -- bash -c "hostname > /tmp/staged.$SLURM_JOB_ID" &&
      echo "rank $SLURM_PROCID sees $(cat /tmp/staged.$SLURM_JOB_ID) on $(hostname)"' ;;
  once-per-node-fail) run_step "${step[@]}" "$jobkit" once-per-node -- bash -c '[[ $(hostname) != c2 ]]' ;;
  n-at-a-time)
    run_step "${step[@]}" "$jobkit" n-at-a-time 2 -- bash -c \
      'echo "$(date +%s%N) 1" >> "$SHARED/log"; sleep 0.3; echo "$(date +%s%N) -1" >> "$SHARED/log"' ;;
  n-at-a-time-fail)
    run_step "${step[@]}" "$jobkit" n-at-a-time 3 -- bash -c 'echo "ran $SLURM_PROCID"; [[ $SLURM_PROCID != 0 ]]' ;;
  zero-first)
    run_step "${step[@]}" "$jobkit" zero-first -- bash -c \
      'if [[ $SLURM_PROCID == 0 ]]; then sleep 1; touch "$SHARED/ready"; else [[ -e $SHARED/ready ]]; fi' ;;
  zero-first-fail)
    run_step "${step[@]}" "$jobkit" zero-first -- bash -c 'echo "ran $SLURM_PROCID"; [[ $SLURM_PROCID != 0 ]]' ;;
  zero-first-sigterm | zero-first-sigkill)
    # Signal the jobkit process that runs CMD, as Slurm or a user would. SIGTERM reaches CMD,
    # which ends with status 3, and jobkit reports it on every rank; SIGKILL: CMD must not outlive it.
    signal=${mode#zero-first-sig}
    (timeout 60 srun --mpi=pmix -N1 -n2 "$jobkit" zero-first -- \
      bash -c 'echo $$ > "$SHARED/child.$SLURM_PROCID"; sleep 8 & trap "kill $!; exit 3" TERM; wait' >"$SHARED/out" 2>&1
      echo $? >"$SHARED/status") &
    for _ in $(seq 200); do [[ -s $SHARED/child.0 ]] && break; sleep 0.1; done
    child=$(cat "$SHARED/child.0") || fail "CMD did not start"
    parent=$(ps -o ppid= -p "$child" | tr -d ' ')
    [[ $(ps -o comm= -p "$parent") == jobkit ]] || fail "the parent of CMD ($parent) is not jobkit"
    sleep 1
    start=$(date +%s%N)
    kill "-${signal^^}" "$parent"
    running() { [[ $(ps -o stat= -p "$1") == [^Z]* ]]; }  # a zombie has ended
    while running "$child" && (($(date +%s%N) - start < 5000000000)); do sleep 0.05; done
    gone_ms=$((($(date +%s%N) - start) / 1000000))
    wait
    out=$(cat "$SHARED/out")
    status=$(cat "$SHARED/status")
    echo "$out"
    echo "CMD gone $gone_ms ms after SIG${signal^^} to its jobkit process; srun exit status $status"
    ! running "$child" || { kill -KILL "$child"; fail "CMD outlived its jobkit process"; }
    ((gone_ms < 2000)) || fail "CMD took $gone_ms ms to end" ;;
  env) run_step "${step[@]}" "$jobkit" env ;;
  exec)
    /usr/bin/python3 -c 'import torch' 2>/dev/null || skip "torch not installed (apt-get install python3-torch)"
    # A torch without libuv (Debian 13's 2.6) needs USE_LIBUV=0 for env://, as slurm/train-python.sbatch sets it.
    template_use_libuv /usr/bin/python3
    run_step env ${use_libuv:+USE_LIBUV=$use_libuv} "${step[@]}" "$jobkit" exec -- /usr/bin/python3 "$here/torch_allreduce.py" ;;
  exec-refuse) run_step env RANK=5 "${step[@]}" "$jobkit" exec -- true ;;
  exec-finalized)
    # CMD inherits no PMIx connection: jobkit exec finalised PMIx before it exec'd (an unfinalised
    # one, reported lost when CMD exits, made Slurm cancel finished steps). Each rank lists its
    # sockets before it execs jobkit exec and again in CMD, the same process (exec_sockets.sh): the
    # lists must be the same. Not against another step's ranks: Slurm 22.05's slurmstepd authenticates
    # the PMIx direct connections between nodes through munged (pmixp_server.c) on one thread while
    # another forks the tasks, and libmunge's socket is not close-on-exec, so a task forked meanwhile
    # keeps that connection through its execs. So one rank once held 2 sockets where the ranks of
    # the same command without jobkit exec had held 1; with 30 tasks on one node and a PMIx fence,
    # such a Unix socket (its peer closed) was in several tasks before jobkit or any PMIx call.
    run_step "${step[@]}" "$here/exec_sockets.sh" before "$jobkit" ;;
  exec-overwrite) run_step env RANK=5 "${step[@]}" "$jobkit" exec --overwrite -- bash -c 'echo "RANK=$RANK of $SLURM_PROCID"' ;;
  *) fail "unknown mode $mode" ;;
esac
case $mode in
  on-main)
    ((status == 0)) || fail "exit status $status"
    [[ $(grep -c '^ran on rank' <<<"$out") == 1 && $(count '^ran on rank 0$') == 1 ]] || fail "not run on rank 0 alone" ;;
  on-main-fail)
    ((status == 3)) || fail "exit status $status, not the command's 3"
    (($(count "jobkit on-main: 'bash -c exit 3' failed on rank 0 (c1): exit status 3") == 7)) ||
      fail "not every rank reported where and how" ;;
  once-per-node)
    ((status == 0)) || fail "exit status $status"
    (($(grep -c 'sees' <<<"$out") == 7)) || fail "not every rank saw its node's staged file"
    (($(awk '/sees/ && $4 != $6' <<<"$out" | wc -l) == 0)) || fail "a rank saw another node's file" ;;
  once-per-node-fail)
    ((status == 1)) || fail "exit status $status"
    (($(count "failed on rank 5 (c2): exit status 1") == 7)) || fail "not every rank reported c2's failure" ;;
  n-at-a-time)
    ((status == 0)) || fail "exit status $status"
    peak=$(sort -n "$SHARED/log" | awk '{ now += $2; if (now > peak) peak = now } END { print peak }')
    (($(wc -l <"$SHARED/log") == 14)) || fail "not every rank ran once"
    ((peak <= 2)) || fail "$peak ran at once" ;;
  n-at-a-time-fail)
    ((status == 1)) || fail "exit status $status"
    (($(count "failed on rank 0 (c1): exit status 1") == 7)) || fail "not every rank reported rank 0's failure"
    (($(grep -c '^ran' <<<"$out") == 3)) || fail "later rounds ran after the failure" ;;
  zero-first)
    ((status == 0)) || fail "exit status $status: a rank started before rank 0 had finished" ;;
  zero-first-fail)
    ((status == 1)) || fail "exit status $status"
    (($(grep -c '^ran' <<<"$out") == 1)) || fail "ranks ran after rank 0 failed"
    (($(count "failed on rank 0 (c1)") == 7)) || fail "not every rank reported rank 0's failure" ;;
  zero-first-sigterm)
    ((status == 3)) || fail "exit status $status, not CMD's 3"
    (($(count "failed on rank 0 (c1): exit status 3") == 2)) || fail "CMD did not get the SIGTERM, or not every rank reported it" ;;
  zero-first-sigkill)
    ((status != 0 && status != 124)) || fail "srun exit status $status" ;;
  env)
    ((status == 0)) || fail "exit status $status"
    # Numeric, rank 0's, the same everywhere, and not loopback: the ranks span 3 nodes.
    (($(grep '^export MASTER_ADDR=' <<<"$out" | sort -u | wc -l) == 1)) || fail "ranks disagree on MASTER_ADDR"
    grep -qE '^export MASTER_ADDR=[0-9a-f.:]+$' <<<"$out" || fail "MASTER_ADDR is not a numeric address"
    if grep -q '^export MASTER_ADDR=127\.' <<<"$out"; then fail "MASTER_ADDR is loopback across nodes"; fi
    (($(grep '^export MASTER_PORT=' <<<"$out" | sort -u | wc -l) == 1)) || fail "ranks disagree on MASTER_PORT"
    [[ $(grep '^export RANK=' <<<"$out" | sort) == $(printf 'export RANK=%s\n' 0 1 2 3 4 5 6) ]] || fail "RANK values wrong" ;;
  exec)
    ((status == 0)) || fail "exit status $status"
    (($(count 'all_reduce 28 (expected 28) ok') == 7)) || fail "not every rank's all_reduce was right" ;;
  exec-finalized)
    if ((status != 0 || $(count '^rank [0-6]: sockets kept (') != 7)); then
      echo "the sockets of the ranks whose CMD holds others than before jobkit exec:"
      grep '^rank [0-9]* socket: ' <<<"$out"
      fail "exit status $status; not every rank's CMD holds the sockets it held before jobkit exec: a PMIx connection left open?"
    fi ;;
  exec-refuse)
    ((status == 2)) || fail "exit status $status"
    (($(count "jobkit: exec: RANK='5' is already set; jobkit sets these from the launcher (pass --overwrite") == 7)) ||
      fail "not every rank refused, naming RANK" ;;
  exec-overwrite)
    ((status == 0)) || fail "exit status $status"
    (($(awk -F'[= ]' '/^RANK=/ && $2 == $4' <<<"$out" | wc -l) == 7)) || fail "RANK was not replaced by the rank" ;;
esac
rm -rf "$SHARED"
echo ok
