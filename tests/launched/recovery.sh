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
#   batch-host    2 nodes: c1, the batch host, lost whole (every process of the node frozen, its
#                 slurmd's too, every packet dropped). Slurm (after SlurmdTimeout) would keep the
#                 --no-kill job allocated without its batch script: jobkit run's deputy on c2
#                 requeues it with c1 excluded once c2's ranks named c1 lost; the next start runs
#                 on c2,c3, blames c1 from the failure events that c2's ranks recorded, finishes
#   preempt-restart 2 nodes, partition low, a health check (HEALTH_CHECK) that takes 8 s once:
#                 rank 3 killed; while the restart's health check runs, a job of partition high
#                 pre-empts the job (Slurm signals the check's tasks, not the batch script): jobkit
#                 run sees the job's PreemptTime, blames no node, starts no new step and requeues
#                 the job; the pre-emption does not count as a restart; the next start finishes
#   nodes5        a cluster of its own, 5 nodes, at Slurm's default SlurmdTimeout of 300 s, steps of
#                 3 nodes x 2 ranks with SPARE_NODES=2 and the memory tier of checkpoints on:
#                   two lost   c2 and c3 lost at once (partners in the memory tier): both blamed
#                              (the survivors name one, or both; a node they did not name takes
#                              no connection from the batch host), the next step on c1,c4,c5
#                              loads the root's checkpoint, finishes
#                   dead spare c3 lost, and the spare c4's slurmd stopped (it still takes
#                              connections): the step on c1,c2,c4 cannot start on c4 (srun's task
#                              launch fails), c4 is blamed, the step on c1,c2,c5 restores from
#                              memory and c3's partner's copy with the root's checkpoints moved
#                              away, finishes
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes kill lost-spare lost-requeue crash-node no-progress hang batch-host preempt-restart nodes5
mode=$1
jobkit=$(realpath "$2")
train=$(realpath "$3")
work=$(realpath -m "$4/$mode")
need_cluster
[[ $("$repo/slurm/dev-cluster.sh" net-mode 2>/dev/null) == netns ]] ||
  skip "the dev cluster runs without network namespaces: no node can be cut off alone"
command -v nft >/dev/null || skip "nft not installed (apt-get install nftables)"
eval "$("$repo/slurm/dev-cluster.sh" settings)"
own_cluster=
if [[ $mode == nodes5 ]]; then
  # A cluster of its own beside the suite's (the next port block but one, the next subnet but
  # one: tests/launched/cpu_binding.sh takes the next), at Slurm's default SlurmdTimeout.
  export JOBKIT_CLUSTER_DIR=$cluster_dir-5 JOBKIT_CLUSTER_PORT=$((cluster_port + 200))
  export JOBKIT_CLUSTER_SUBNET=${cluster_subnet%.*}.$((${cluster_subnet##*.} + 2))
  export JOBKIT_CLUSTER_NET=netns JOBKIT_CLUSTER_SLURMD_TIMEOUT=300
  own_cluster=$repo/slurm/dev-cluster.sh
  "$own_cluster" start 5 || fail "could not start the 5-node cluster"
  eval "$("$own_cluster" env)"
  eval "$("$own_cluster" settings)"
  grep -q '^SlurmdTimeout=300$' "$SLURM_CONF" || fail "the 5-node cluster does not run at SlurmdTimeout=300"
fi
rm -rf "$work" && mkdir -p "$work"
export SBATCH_JOB_NAME=jobkit-recovery-test

steps=40
per_node=2
ranks=4  # every step of these jobs runs on 2 nodes
expected=$((ranks * (ranks + 1) / 2 * steps * (steps + 1) / 2))

frozen=()
cut_nodes=()
whole_node=
whole_pids=()
stopped_slurmd=
cleanup() {
  cleanup_faults
  [[ -z $stopped_slurmd ]] || kill -CONT "$stopped_slurmd"
  [[ -z $whole_node ]] || give_back "$whole_node"
  scancel --name=jobkit-recovery-test 2>/dev/null
  if [[ -n $own_cluster ]]; then "$own_cluster" stop >/dev/null 2>&1 || "$own_cluster" stop; fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# submit NODES SPARES [SBATCH OPTIONS...] -- [PROGRAM ARGS...]: prints the job id.
submit() {
  local nodes=$1 spares=$2 options=()
  shift 2
  while (($#)) && [[ $1 != -- ]]; do options+=("$1"); shift; done
  shift
  env JOBKIT="$jobkit" PROGRAM="$train" CHECKPOINTS="$work/ckpt" MAX_RESTARTS=4 SPARE_NODES="$spares" \
    NO_PROGRESS="${no_progress:-3}" HEALTH_CHECK="${health_check:-}" JOBKIT_LOG_RANKS=all \
    JOBKIT_LOST_NODE_TIMEOUT=2 sbatch --parsable --chdir="$work" --output="$work/job-%j.out" --nodes="$nodes" \
    --ntasks-per-node=$per_node --time=10 "${options[@]}" "$repo/slurm/train-requeue.sbatch" --steps "$steps" \
    --step-ms 250 --result "$work/result" "$@"
}
wait_ended() {
  local job=$1
  wait_job_ended "$job" "${2:-150}"
  out=$(unfold <"$work/job-$job.out")
  echo "$out"
  echo "job $job: $job_state after $(job_field "$job" Restarts) requeues"
}
# wait_for PATTERN FILE [SECONDS]: until a line of FILE matches (60 s at most by default).
wait_for() {
  local deadline=$((SECONDS + ${3:-60}))
  until grep -q -- "$1" "$2" 2>/dev/null; do
    ((SECONDS < deadline)) || { cat "$2"; fail "'$1' never appeared in $2"; }
    sleep 0.2
  done
}
# first_checkpoint: waits until the job's first step has committed its first checkpoint (step 10),
# so that the fault that follows comes mid-step with a checkpoint to resume from, and 30 steps of
# 250 ms are left for it to land in (a fixed sleep after the step's first line let a loaded
# machine's fault come after the 40 steps of 100 ms had ended: 2026-12-08, recovery-batch-host).
first_checkpoint() {
  wait_for 'attempt 0: no checkpoint' "$work/job-$job.out"
  local deadline=$((SECONDS + 60))
  until [[ -d $work/ckpt/step-000000000010 ]]; do
    ((SECONDS < deadline)) || { cat "$work/job-$job.out"; fail "the first checkpoint (step 10) was never committed"; }
    sleep 0.1
  done
}
exact() {
  [[ $(cat "$work/result" 2>/dev/null) == "$expected" ]] ||
    fail "result '$(cat "$work/result" 2>/dev/null)', expected $expected (an uninterrupted run)"
}
# cut NODE [all]: every packet of its namespace dropped but those with the controller's address
# (Slurm does not notice), or every one (all).
cut() {
  local keep="ip saddr != $cluster_subnet.254" keep_out="ip daddr != $cluster_subnet.254"
  [[ ${2:-} != all ]] || keep= keep_out=
  cut_nodes+=("$1")
  ip netns exec "jk$cluster_port-$1" nft -f - <<EOF || fail "nft could not cut $1 off"
table inet jobkit_lost_node {
  chain in { type filter hook input priority 0; iifname "eth0" $keep drop; }
  chain out { type filter hook output priority 0; oifname "eth0" $keep_out drop; }
}
EOF
}
# lose NODE [RANKS...]: its ranks (pids in result.pid.RANK; default 2 and 3, the step's second
# node) frozen, and the node cut off from all but the controller.
lose() {
  local node=$1 pid r
  shift
  (($#)) || set -- 2 3
  for r in "$@"; do
    pid=$(cat "$work/result.pid.$r") || fail "no pid of rank $r"
    frozen+=("$pid")
  done
  cut "$node"
  kill -STOP "${frozen[@]}"
  fault_ms=$(date +%s%3N)
}
# node_pids NODE: every process of the node (those in its slurmd's UTS namespace).
node_pids() {
  local slurmd ns p
  slurmd=$(cat "$cluster_dir/run/slurmd-$1.pid") || fail "no slurmd pid for $1"
  ns=$(stat -L -c %i "/proc/$slurmd/ns/uts") || fail "no namespace of $1's slurmd"
  for p in /proc/[0-9]*; do
    [[ $(stat -L -c %i "$p/ns/uts" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
  done
}
# lose_whole NODE: the node lost as when it loses power: every process of it frozen (its slurmd
# too), every packet dropped; Slurm notices after SlurmdTimeout.
lose_whole() {
  whole_node=$1
  mapfile -t whole_pids < <(node_pids "$1")
  ((${#whole_pids[@]} > 1)) || fail "no processes found on $1"
  cut "$1" all
  kill -STOP "${whole_pids[@]}"
  fault_ms=$(date +%s%3N)
}
# give_back NODE: the lost node's processes killed but its slurmd, which goes on: the node
# registers again and is back in the cluster (ReturnToService=2), idle within 90 s.
give_back() {
  local slurmd p deadline=$((SECONDS + 90))
  slurmd=$(cat "$cluster_dir/run/slurmd-$1.pid")
  for p in "${whole_pids[@]}"; do [[ $p == "$slurmd" ]] || kill -KILL "$p" 2>/dev/null; done
  ip netns exec "jk$cluster_port-$1" nft delete table inet jobkit_lost_node 2>/dev/null
  kill -CONT "$slurmd"
  whole_node=
  until [[ $(sinfo -h -n "$1" -p dev -o %t) == idle ]]; do
    ((SECONDS < deadline)) || { sinfo -N; echo "node $1 is not idle again"; return 1; }
    scontrol update nodename="$1" state=resume 2>/dev/null
    sleep 1
  done
}
# cleanup_faults: the frozen ranks killed, every cut node given its network back.
cleanup_faults() {
  local n
  for n in "${cut_nodes[@]}"; do ip netns exec "jk$cluster_port-$n" nft delete table inet jobkit_lost_node 2>/dev/null; done
  ((${#frozen[@]} == 0)) || kill -KILL "${frozen[@]}" 2>/dev/null
  cut_nodes=() frozen=()
}
ledger() { cat "$work/ckpt/jobkit-ledger-$job.jsonl" 2>/dev/null; }
# finished_in_the_job JOB: waits for its end; it completed, with the exact result, never requeued.
finished_in_the_job() {
  wait_ended "$1"
  [[ $(job_field "$1" JobState) == COMPLETED ]] || fail "the job did not complete"
  exact
  [[ $(job_field "$1" Restarts) == 0 ]] || fail "the job was requeued"
}

# requeued_once_without NODE SECONDS: the job's next start resumes within SECONDS of the fault,
# and the job completes with the exact result, requeued once, NODE excluded.
requeued_once_without() {
  wait_for 'attempt 1: resuming from step' "$work/job-$job.out" "$2"
  echo "measured: the next start resumed $((($(date +%s%3N) - fault_ms) / 1000)) s after the fault"
  wait_ended "$job"
  [[ $(job_field "$job" JobState) == COMPLETED ]] || fail "the job did not complete"
  exact
  [[ $(job_field "$job" Restarts) == 1 ]] || fail "the job was not requeued once"
  [[ $(job_field "$job" ExcNodeList) == "$1" ]] || fail "the job's excluded nodes are '$(job_field "$job" ExcNodeList)', not $1"
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
    first_checkpoint
    kill -KILL "$(cat "$work/result.pid.3")" || fail "cannot kill rank 3"
    fault_ms=$(date +%s%3N)
    finished_in_the_job "$job"
    grep -q 'jobkit run: restart 1: attempt 0: crash (status [0-9]*) on c2 (no node blamed), resuming from checkpoint [1-9]' <<<"$out" ||
      fail "the restart did not name the crash on c2"
    grep -q 'attempt 1: resuming from step [1-9]' <<<"$out" || fail "the next step did not resume from a checkpoint"
    measure ;;
  lost-spare)
    job=$(submit 3 1 -- --every 10) || fail "sbatch failed"
    first_checkpoint
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
    first_checkpoint
    lose c2
    # The first attempt requeues the job; the second starts once the first has ended.
    requeued_once_without c2 60
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
    [[ $(job_field "$job" Restarts) == 0 ]] || fail "the job was requeued" ;;
  batch-host)
    job=$(submit 2 0 --requeue -- --every 10) || fail "sbatch failed"
    first_checkpoint
    lose_whole c1
    # The deputy requeues the job; the requeue completes once Slurm declared c1 down, after
    # SlurmdTimeout (30 s here); the job starts again cred_expire (5 s) later, on c2,c3.
    wait_for 'requeueing job [0-9]* with c1 excluded' "$work/ckpt/.jobkit-run-$job/deputy.log" 30
    echo "measured: the deputy requeued the job $((($(date +%s%3N) - fault_ms) / 1000)) s after c1 was lost"
    cat "$work/ckpt/.jobkit-run-$job/deputy.log"
    requeued_once_without c1 150
    grep -q 'the jobkit run of an earlier start of this job (on c1, attempt 0) never ended' <<<"$out" ||
      fail "the next start did not say that the batch host's jobkit run never ended"
    grep -q "jobkit run: restart 1: attempt 0: lost batch host on c1 (c1 blamed: lost: jobkit's lost-node verdict (named by c2)" <<<"$out" ||
      fail "the next start did not blame c1 from c2's failure events"
    grep -q 'jobkit run: job [0-9]* step attempt 1 on c2,c3$' <<<"$out" || fail "the next start's step did not run on c2,c3"
    grep -q $'^c1\t[0-9]*\tlost' "$work/ckpt/.jobkit-run-$job/bad-nodes" || fail "c1 is not in the record of bad nodes"
    ledger | grep -q '"cause":"lost batch host","node":"c1","blamed":"c1"' || fail "the ledger has no lost batch host"
    give_back c1 || fail "c1 did not come back" ;;
  preempt-restart)
    # The health check takes 8 s once (one of its tasks), in the first check after a checkpoint:
    # the restart's.
    health_check="if ls -d $work/ckpt/step-* >/dev/null 2>&1 && mkdir $work/slept 2>/dev/null; then touch $work/in-check; sleep 8; fi"
    job=$(submit 2 0 --partition=low --requeue -- --every 10) || fail "sbatch failed"
    first_checkpoint
    kill -KILL "$(cat "$work/result.pid.3")" || fail "cannot kill rank 3"
    deadline=$((SECONDS + 30))
    until [[ -e $work/in-check ]]; do
      ((SECONDS < deadline)) || fail "the restart's health check never ran"
      sleep 0.2
    done
    # A job of partition high needs every CPU of the job's last node: Slurm pre-empts the job.
    node=$(scontrol show hostnames "$(job_field "$job" NodeList)" | tail -1)
    sbatch --parsable --partition=high --nodes=1 --ntasks=8 --nodelist="$node" --output=/dev/null --wrap='sleep 2' >/dev/null ||
      fail "the pre-empting job was not submitted"
    wait_for 'attempt 1: resuming from step' "$work/job-$job.out" 90
    wait_ended "$job"
    [[ $(job_field "$job" JobState) == COMPLETED ]] || fail "the job did not complete"
    exact
    [[ $(job_field "$job" Restarts) -ge 1 ]] || fail "the job was not requeued by the pre-emption"
    grep -q 'jobkit run: job [0-9]*: Slurm is pre-empting the job (PreemptTime [0-9T:-]*): no new step; requeueing it' <<<"$out" ||
      fail "jobkit run did not stop for the pre-emption in its restart"
    grep -q 'jobkit run: job [0-9]* attempt 0: pre-empted between steps: requeued' <<<"$out" ||
      fail "jobkit run did not say that it requeued the pre-empted job"
    ! grep -q 'health check .* failed' <<<"$out" || fail "the pre-empted health check blamed a node"
    [[ ! -s $work/ckpt/.jobkit-run-$job/bad-nodes ]] || fail "a node was blamed: $(cat "$work/ckpt/.jobkit-run-$job/bad-nodes")"
    [[ $(cat "$work/ckpt/.jobkit-run-$job/restarts") == 1 ]] ||
      fail "restarts counted: $(cat "$work/ckpt/.jobkit-run-$job/restarts"), expected 1 (the crash; not the pre-emption)"
    ledger | grep -q '"number":1,"attempt":0,"cause":"crash' || fail "the ledger lacks the crash's restart" ;;
  nodes5)
    ranks=6
    expected=$((ranks * (ranks + 1) / 2 * steps * (steps + 1) / 2))
    export JOBKIT_CHECKPOINT_MEMORY=/dev/shm/jobkit
    events() { grep "\"event\":\"checkpoint_loaded\",\"attempt\":$1," "$work/ckpt/.jobkit-run-$job/events.jsonl"; }
    # two lost: c2 (ranks 2-3) and c3 (ranks 4-5), neighbours in the memory tier's order.
    job=$(submit 5 2 -- --every 10) || fail "sbatch failed"
    first_checkpoint
    lose c2 2 3
    lose c3 4 5
    finished_in_the_job "$job"
    grep -q 'jobkit run: restart 1: attempt 0: lost nodes\? on c[23]\(,c[23]\)\? (c[23]\(,c[23]\)\? blamed: lost' <<<"$out" ||
      fail "the restart did not blame a lost node"
    for n in c2 c3; do
      grep -q $'^'$n$'\t[0-9]*\t\(lost\|unreachable\)' "$work/ckpt/.jobkit-run-$job/bad-nodes" || fail "$n is not in the record of bad nodes"
    done
    grep -q 'jobkit run: job [0-9]* step attempt 1 on c1,c4,c5$' <<<"$out" || fail "the next step did not run on c1,c4,c5"
    ! grep -q 'Task launch for' <<<"$out" || fail "a step was started on a lost node"
    echo "event: $(events 1)"
    events 1 | grep -q '"memory":"none","partner":"none","shared":"0-5"' ||
      fail "the step after two partners were lost did not load every part from the root"
    measure
    cleanup_faults
    # dead spare: c3 lost, and the spare c4 cut off too (Slurm sees neither).
    rm -rf "$work/ckpt" "$work"/result*
    job=$(submit 5 2 -- --every 10) || fail "sbatch failed"
    first_checkpoint
    lose c3 4 5
    stopped_slurmd=$(cat "$cluster_dir/run/slurmd-c4.pid") && kill -STOP "$stopped_slurmd" || fail "cannot stop c4's slurmd"
    # The root's whole steps moved away: the restore must come from memory.
    mkdir -p "$work/moved"
    for d in "$work"/ckpt/step-*; do [[ $d == *.partial* || ! -d $d ]] || mv "$d" "$work/moved/"; done
    # c4's slurmd goes on once the step is elsewhere (the job's end waits for every node's).
    wait_for 'jobkit run: job [0-9]* step attempt 2 on' "$work/job-$job.out" 90
    kill -CONT "$stopped_slurmd" && stopped_slurmd=
    finished_in_the_job "$job"
    grep -q 'jobkit run: restart 1: attempt 0: lost node on c3 (c3 blamed: lost' <<<"$out" || fail "c3 was not blamed"
    grep -q 'jobkit run: job [0-9]* step attempt 1 on c1,c2,c4$' <<<"$out" || fail "the second step did not take the spare c4"
    grep -q 'jobkit run: restart 2: attempt 1: launch failed on c4 (c4 blamed: the step could not start there' <<<"$out" ||
      fail "the failed launch on c4 did not blame it"
    grep -q 'jobkit run: job [0-9]* step attempt 2 on c1,c2,c5$' <<<"$out" || fail "the third step did not run on c1,c2,c5"
    echo "event: $(events 2)"
    events 2 | grep -q '"memory":"0-3","partner":"4-5","shared":"none"' ||
      fail "the step on c1,c2,c5 did not restore from memory and c3's partner's copy"
    ledger | grep -q '"cause":"launch failed","node":"c4","blamed":"c4"' || fail "the ledger has no failed launch" ;;
esac
echo "PASS: $mode"
