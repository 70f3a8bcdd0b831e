#!/usr/bin/env bash
# Recovery inside the allocation (jobkit run, docs/recovery.md), for real on the dev cluster:
# slurm/train-requeue.sbatch runs examples/train_requeue.cpp (a deterministic running sum, a
# checkpoint every 10 steps), a fault is made, and the job must end with exactly the result of an
# uninterrupted run.
# usage: recovery.sh MODE JOBKIT TRAIN_REQUEUE WORK_DIR
#   kill          2 nodes: rank 3 killed (kill -9) mid-run: a new step in the same job (Restarts=0)
#                 resumes from the newest checkpoint; no node blamed (a first crash)
#   lost-spare    3 nodes, SPARE_NODES=1: the step on c1,c2; c2's ranks frozen and its traffic
#                 dropped but for the controller's (Slurm does not notice): the next step runs on
#                 c1,c3 in the same job (Restarts=0), and c2 is recorded as bad
#   lost-requeue  2 nodes, no spare: c2 lost the same way: the job is requeued with c2 excluded,
#                 and its next attempt runs on c1,c3
#   crash-node    3 nodes, SPARE_NODES=1: a rank on c2 crashes at its first save in every step:
#                 c2 is blamed after its second crash, the next step runs on c1,c3, and finishes
#   hang          2 nodes: rank 3 stops itself (SIGSTOP) at step 25: the others' progress watch
#                 reports it within its learned bound (quick knobs below), jobkit run saves
#                 `jobkit where`'s report, ends the step and starts a new one, which finishes
#   no-progress   a crash at the save of step 20 in every step, on c1 then c2: the job stops
#                 after NO_PROGRESS=1 restart (exit status 93), not requeued, no node blamed
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes kill lost-spare lost-requeue crash-node no-progress hang
mode=$1
jobkit=$(realpath "$2")
train=$(realpath "$3")
work=$(realpath -m "$4/$mode")
need_cluster
[[ $("$repo/slurm/dev-cluster.sh" net-mode 2>/dev/null) == netns ]] ||
  skip "the dev cluster runs without network namespaces: no node can be cut off alone"
command -v nft >/dev/null || skip "nft not installed (apt-get install nftables)"
eval "$("$repo/slurm/dev-cluster.sh" settings)"
rm -rf "$work" && mkdir -p "$work"
export SBATCH_JOB_NAME=jobkit-recovery-test

steps=40
per_node=2
ranks=4  # every step of these jobs runs on 2 nodes
expected=$((ranks * (ranks + 1) / 2 * steps * (steps + 1) / 2))

frozen=()
cut_node=
cleanup() {
  [[ -z $cut_node ]] || ip netns exec "jk$cluster_port-$cut_node" nft delete table inet jobkit_lost_node 2>/dev/null
  ((${#frozen[@]} == 0)) || kill -KILL "${frozen[@]}" 2>/dev/null
  scancel --name=jobkit-recovery-test 2>/dev/null
}
trap cleanup EXIT

# submit NODES SPARES [SBATCH OPTIONS...] -- [PROGRAM ARGS...]: prints the job id.
submit() {
  local nodes=$1 spares=$2 options=()
  shift 2
  while (($#)) && [[ $1 != -- ]]; do options+=("$1"); shift; done
  shift
  env JOBKIT="$jobkit" PROGRAM="$train" CHECKPOINTS="$work/ckpt" MAX_RESTARTS=4 SPARE_NODES="$spares" \
    NO_PROGRESS="${no_progress:-3}" JOBKIT_LOG_RANKS=all \
    JOBKIT_LOST_NODE_TIMEOUT=2 sbatch --parsable --chdir="$work" --output="$work/job-%j.out" --nodes="$nodes" \
    --ntasks-per-node=$per_node --time=10 "${options[@]}" "$repo/slurm/train-requeue.sbatch" --steps "$steps" \
    --step-ms 100 --result "$work/result" "$@"
}
field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
wait_ended() {
  local job=$1 deadline=$((SECONDS + ${2:-150})) state
  while ((SECONDS < deadline)); do
    state=$(field "$job" JobState)
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
    sleep 1
  done
  out=$(unfold <"$work/job-$job.out")
  echo "$out"
  echo "job $job: $state after $(field "$job" Restarts) requeues"
}
wait_for() {
  local deadline=$((SECONDS + 60))
  until grep -q -- "$1" "$2" 2>/dev/null; do
    ((SECONDS < deadline)) || { cat "$2"; fail "'$1' never appeared in $2"; }
    sleep 0.2
  done
}
exact() {
  [[ $(cat "$work/result" 2>/dev/null) == "$expected" ]] ||
    fail "result '$(cat "$work/result" 2>/dev/null)', expected $expected (an uninterrupted run)"
}
# lose NODE: its ranks (pids in result.pid.RANK: ranks 2 and 3 run on the step's second node)
# frozen, every packet of its namespace dropped but those with the controller's address.
lose() {
  cut_node=$1
  local pid
  for r in 2 3; do
    pid=$(cat "$work/result.pid.$r") || fail "no pid of rank $r"
    frozen+=("$pid")
  done
  ip netns exec "jk$cluster_port-$cut_node" nft -f - <<EOF || fail "nft could not cut $cut_node off"
table inet jobkit_lost_node {
  chain in { type filter hook input priority 0; iifname "eth0" ip saddr != $cluster_subnet.254 drop; }
  chain out { type filter hook output priority 0; oifname "eth0" ip daddr != $cluster_subnet.254 drop; }
}
EOF
  kill -STOP "${frozen[@]}"
  fault_ms=$(date +%s%3N)
}
ledger() { cat "$work/ckpt/jobkit-ledger-$job.jsonl" 2>/dev/null; }
# finished_in_the_job JOB: waits for its end; it completed, with the exact result, never requeued.
finished_in_the_job() {
  wait_ended "$1"
  [[ $(field "$1" JobState) == COMPLETED ]] || fail "the job did not complete"
  exact
  [[ $(field "$1" Restarts) == 0 ]] || fail "the job was requeued"
}

# measure: the fault's time against the ledger's failure and the restart's line.
measure() {
  local line failed
  line=$(grep -m1 'jobkit run: restart 1:' <<<"$out")
  failed=$(ledger | sed -n 's/.*"failed":\([0-9.]*\).*/\1/p' | head -1)
  echo "measured: fault at $fault_ms ms, failure seen $(awk -v f="$failed" -v t="$fault_ms" 'BEGIN { printf "%.2f", f - t / 1000 }') s later; $line"
}

case $mode in
  kill)
    job=$(submit 2 0 -- --every 10) || fail "sbatch failed"
    wait_for 'attempt 0: no checkpoint' "$work/job-$job.out"
    sleep 2
    kill -KILL "$(cat "$work/result.pid.3")" || fail "cannot kill rank 3"
    fault_ms=$(date +%s%3N)
    finished_in_the_job "$job"
    grep -q 'jobkit run: restart 1: attempt 0: crash (status [0-9]*) on c2 (no node blamed), resuming from checkpoint [1-9]' <<<"$out" ||
      fail "the restart did not name the crash on c2"
    grep -q 'attempt 1: resuming from step [1-9]' <<<"$out" || fail "the next step did not resume from a checkpoint"
    measure ;;
  lost-spare)
    job=$(submit 3 1 -- --every 10) || fail "sbatch failed"
    wait_for 'attempt 0: no checkpoint' "$work/job-$job.out"
    sleep 2
    lose c2
    finished_in_the_job "$job"
    grep -q 'jobkit run: restart 1: attempt 0: lost node on c2 (c2 blamed: lost' <<<"$out" ||
      fail "the restart did not blame c2 as lost"
    grep -q 'jobkit run: job [0-9]* step attempt 1 on c1,c3$' <<<"$out" || fail "the next step did not run on c1,c3"
    grep -q 'attempt 1: resuming from step [1-9]' <<<"$out" || fail "the next step did not resume from a checkpoint"
    grep -q $'^c2\t[0-9]*\tlost' "$work/ckpt/.jobkit-run-$job/bad-nodes" || fail "c2 is not in the record of bad nodes"
    ledger | grep -q '"cause":"lost node","node":"c2","blamed":"c2"' || fail "the ledger has no lost-node restart"
    ledger | grep -q '"run":{.*"outcome":"finished"' || fail "the ledger has no finished run"
    measure ;;
  lost-requeue)
    job=$(submit 2 0 -- --every 10) || fail "sbatch failed"
    wait_for 'attempt 0: no checkpoint' "$work/job-$job.out"
    sleep 2
    lose c2
    # The first attempt requeues the job; the second starts once the first has ended.
    wait_for 'attempt 1: resuming from step' "$work/job-$job.out"
    wait_ended "$job"
    [[ $(field "$job" JobState) == COMPLETED ]] || fail "the job did not complete"
    exact
    [[ $(field "$job" Restarts) == 1 ]] || fail "the job was not requeued once"
    [[ $(field "$job" ExcNodeList) == c2 ]] || fail "the job's excluded nodes are '$(field "$job" ExcNodeList)', not c2"
    grep -q 'healthy nodes of the 2 the step needs: requeueing the job with c2 excluded' <<<"$out" ||
      fail "jobkit run did not requeue with c2 excluded"
    grep -q 'jobkit run: job [0-9]* step attempt 1 on c[13],c[13]$' <<<"$out" ||
      fail "the requeued job's step did not run on c1 and c3" ;;
  crash-node)
    job=$(submit 3 1 -- --every 10 --crash-node c2) || fail "sbatch failed"
    finished_in_the_job "$job"
    grep -q 'restart 1: attempt 0: crash (status [0-9]*) on c2 (no node blamed)' <<<"$out" ||
      fail "the first crash on c2 was blamed, or not seen"
    grep -q 'restart 2: attempt 1: crash (status [0-9]*) on c2 (c2 blamed: crashed twice' <<<"$out" ||
      fail "the second crash on c2 did not blame it"
    grep -q 'jobkit run: job [0-9]* step attempt 2 on c1,c3$' <<<"$out" || fail "the third step did not run on c1,c3" ;;
  hang)
    export JOBKIT_PROGRESS_FLOOR=1 JOBKIT_PROGRESS_FACTOR=3 JOBKIT_PROGRESS_FIRST_STEP=2 \
      JOBKIT_PROGRESS_CHECKPOINT_FLOOR=10
    job=$(submit 2 0 -- --every 10 --hang-rank 3 --hang-step 25) || fail "sbatch failed"
    finished_in_the_job "$job"
    grep -q 'hanging on purpose at step 25' <<<"$out" || fail "rank 3 did not hang"
    grep -q 'jobkit run: job [0-9]* step attempt 0: rank [0-9]* on c[12] made no progress past its bound' <<<"$out" ||
      fail "jobkit run did not say the hang"
    grep -q 'jobkit run: restart 1: attempt 0: hang (no node blamed), resuming from checkpoint 20' <<<"$out" ||
      fail "the hang was not restarted from checkpoint 20"
    report=$work/ckpt/.jobkit-run-$job/where-0.txt
    [[ -s $report ]] || fail "no where report saved"
    echo "--- the saved report"
    cat "$report"
    grep -q 'rank: 3\]' "$report" || fail "the report does not show rank 3" ;;
  no-progress)
    # Rank (2 x attempt) mod 4 crashes at the save of step 20: on c1, then on c2; NO_PROGRESS=1.
    no_progress=1
    job=$(submit 3 1 --no-requeue -- --every 10 --crash-step 20 --crash-rank-by-attempt) || fail "sbatch failed"
    wait_ended "$job"
    grep -q 'attempt [0-9]*: jobkit run ended with status 93' <<<"$out" || fail "jobkit run did not end with 93"
    grep -q 'no progress: the newest checkpoint (10) did not advance in 1 restart(s) in a row' <<<"$out" ||
      fail "jobkit run did not say why it stopped"
    [[ $(field "$job" Restarts) == 0 ]] || fail "the job was requeued" ;;
esac
echo "PASS: $mode"
