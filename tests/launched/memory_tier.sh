#!/usr/bin/env bash
# The memory tier of checkpoints (docs/checkpoints-memory.md), for real on the dev cluster, whose
# nodes each have their own /dev/shm: examples/train_requeue.cpp (a deterministic running sum, a
# checkpoint every 10 steps) under JOBKIT_CHECKPOINT_MEMORY, steps of 2 nodes x 2 ranks, each
# ending with exactly the result of an uninterrupted run; rank 0's checkpoint_loaded event
# (JOBKIT_RECOVERY_DIR/events.jsonl) says where each part came from.
# usage: memory_tier.sh MODE JOBKIT TRAIN_REQUEUE WORK_DIR
#   restore  successive steps of one allocation of c1-c3:
#            partner    a step on c1,c2 saves steps 10 and 20; the root's steps are moved away;
#                       the next step runs on c1,c3 (c2 lost, c3's memory empty): ranks 0-1 restore
#                       step 20 from c1's memory, ranks 2-3 (now on c3) fetch the copies that c1
#                       kept for c2's ranks, nothing comes from the root; it saves step 30
#            flipped    one byte flipped in c1's copy of rank 2's part of step 30 (the copy it
#                       made for c3's ranks), a step on c1,c2 (c3 lost): rank 2's fetched copy is
#                       refused, named (rank, node, step), and every rank loads step 30 from the
#                       root, once (no loop); it saves step 40
#            both-lost  rank 2's part of step 40 removed from c2 (its own) and c1 (its partner's
#                       copy), a step on c1,c2: both named, every rank loads the root's step 40
#            (No step runs on c2,c3 here; that layout's data path is step_subset.sh's, which
#            Slurm's misrouted direct modex kept from starting before jobkit fenced there.)
#   limit    JOBKIT_CHECKPOINT_MEMORY_LIMIT smaller than a part: the save of step 30 fails on every
#            rank naming the limit; neither the root nor any node's memory holds anything of step
#            30, and the root's steps 10 and 20 verify whole (jobkit checkpoint verify)
#   cleanup  a job that used the tier on c1-c3 and completed: the next job's checkpoints removes
#            its memory directory on each node; that job, killed (scancel --full -s KILL) after a
#            save, leaves its own (no epilog cleans /dev/shm here), which the job after it removes
set -uo pipefail
shopt -s extglob
source "$(dirname "$0")/lib.sh"
declare_modes restore limit cleanup
mode=$1
jobkit=$(realpath "$2")
train=$(realpath "$3")
work=$(realpath -m "$4/$mode")
memory=/dev/shm/jobkit
name="jobkit-memory-tier-test"

# Outside the allocation: find the cluster, then run this script again inside one allocation of
# the three nodes (the cleanup mode makes jobs of its own).
if [[ -z ${JOBKIT_MEMORY_TIER_TEST_INSIDE:-} ]]; then
  need_cluster
  rm -rf "$work" && mkdir -p "$work"
  trap 'scancel --name=$name 2>/dev/null' EXIT
  if [[ $mode != cleanup ]]; then
    start=$SECONDS
    timeout 150 salloc -Q -N3 --no-kill --ntasks-per-node=2 --time=5 --job-name=$name \
      env JOBKIT_MEMORY_TIER_TEST_INSIDE=1 bash "$0" "$@"
    status=$?
    echo "the allocation took $((SECONDS - start)) s, exit status $status"
    exit $status
  fi
fi

ckpt=$work/ckpt
events=$work/events
sum_of() { echo $((10 * $1 * ($1 + 1) / 2)); }  # 4 ranks (1+2+3+4), steps 0 to N-1

# train NODES STEPS [VAR=VALUE...]: the example on NODES (2 x 2 ranks) with the memory tier, 20 ms
# a step, a save every 10; $events holds only this step's events.
train() {
  local nodes=$1 steps=$2
  shift 2
  rm -rf "$events" "$work/result" && mkdir -p "$events"
  echo "--- step on $nodes, to step $steps"
  run_step timeout 60 env JOBKIT_CHECKPOINT_MEMORY=$memory JOBKIT_LOG_RANKS=all JOBKIT_RECOVERY_DIR="$events" "$@" \
    srun --mpi=pmix -w "$nodes" -N2 -n4 --ntasks-per-node=2 --kill-on-bad-exit=1 \
    "$train" --ckpt "$ckpt" --steps "$steps" --step-ms 20 --every 10 --result "$work/result"
}
# on_node NODE COMMAND: a bash command on NODE, inside its /dev/shm; $job is this job's memory
# directory of $ckpt there (a glob).
on_node() {
  timeout 30 srun -w "$1" -N1 -n1 env job="$memory/jobkit-ckpt-$SLURM_JOB_ID-*" bash -c "$2"
}
# exact STEPS: the step succeeded with an uninterrupted run's result.
exact() {
  ((status == 0)) || fail "the step failed (exit status $status)"
  [[ $(cat "$work/result" 2>/dev/null) == "$(sum_of "$1")" ]] ||
    fail "result '$(cat "$work/result" 2>/dev/null)', expected $(sum_of "$1") (an uninterrupted run)"
}
# loaded STEP MEMORY PARTNER SHARED: rank 0's log line and event say where each rank's part of STEP came from.
loaded() {
  grep -q "checkpoints: step $1 staged in [0-9.]* s: from memory ranks $2, from a partner's copy ranks $3, from the root ranks $4\$" <<<"$out" ||
    fail "no 'step $1 staged' line with memory $2, partner $3, root $4"
  local event
  event=$(grep '"checkpoint_loaded"' "$events/events.jsonl" 2>/dev/null)
  echo "event: $event"
  (($(grep -c . <<<"$event") == 1)) || fail "not one checkpoint_loaded event"
  grep -q "\"checkpoint_step\":$1,.*\"memory\":\"$2\",\"partner\":\"$3\",\"shared\":\"$4\"" <<<"$event" ||
    fail "the checkpoint_loaded event does not say step $1, memory $2, partner $3, shared $4"
}
# refused STEP RANK NODE WHOSE: the one warning that RANK's part of STEP in NODE's memory was not used.
refused() {
  local line="checkpoints: step $1: rank $2's part in the memory of node $3 ($4) is damaged or incomplete, not used"
  (($(count "$line") == 1)) || fail "not one '$line' warning ($(count "$line"))"
}

case $mode in
  restore)
    # partner
    train c1,c2 25
    exact 25
    grep -q 'attempt 0: no checkpoint, starting at step 0' <<<"$out" || fail "the first step did not start afresh"
    mkdir -p "$work/moved" && mv "$ckpt"/step-* "$work/moved/" || fail "cannot move the root's steps away"
    echo "the root now holds: $(ls -A "$ckpt" | xargs)"
    train c1,c3 40
    exact 40
    grep -q 'attempt 0: resuming from step 20 ' <<<"$out" || fail "the step on c1,c3 did not resume from step 20"
    loaded 20 0-1 2-3 none
    # flipped: c3 lost; c2's memory holds step 20 only, c1's step 30 with the copies of c3's parts
    on_node c1 'f=$(echo $job/step-000000000030/rank-2/state); [[ -f $f ]] || { echo "no $f on c1"; exit 1; }
      b=$(od -An -tu1 -N1 "$f"); printf "\\$(printf %03o $((b ^ 1)))" | dd of="$f" bs=1 count=1 conv=notrunc status=none
      echo "flipped the first byte of $f on $(hostname): $(head -c 40 "$f")"' || fail "cannot flip a byte on c1"
    train c1,c2 50
    exact 50
    refused 30 2 c1 "its partner's copy"
    grep -q "step 30 is not whole in memory: no complete, checksummed copy of the part of rank 2; every rank loads step 30 from the root" <<<"$out" ||
      fail "no warning that step 30 falls back to the root"
    grep -q 'attempt 0: resuming from step 30 ' <<<"$out" || fail "the step on c1,c2 did not resume from step 30"
    loaded 30 none none 0-3
    # both-lost: rank 2's part of step 40 gone from c2 (its own node) and c1 (its partner's copy)
    for node in c1 c2; do
      on_node $node 'rm -r $job/step-000000000040/rank-2 && echo "removed rank 2 of step 40 on $(hostname)"' ||
        fail "cannot remove rank 2's part on $node"
    done
    train c1,c2 60
    exact 60
    refused 40 2 c2 "its own node"
    refused 40 2 c1 "its partner's copy"
    grep -q 'attempt 0: resuming from step 40 ' <<<"$out" || fail "the last step did not resume from step 40"
    loaded 40 none none 0-3 ;;
  limit)
    train c1,c2 25
    exact 25
    train c1,c2 45 JOBKIT_CHECKPOINT_MEMORY_LIMIT=4
    ((status != 0)) || fail "the step with a 4-byte limit succeeded"
    grep -q 'attempt 0: resuming from step 20 ' <<<"$out" || fail "the limited step did not resume from step 20"
    refusal='checkpoint step 30 under .* was not committed: it does not fit in the memory tier of node c[12] .*over JOBKIT_CHECKPOINT_MEMORY_LIMIT=4'
    (($(count "$refusal") == 4)) || fail "not every rank (4) failed the save of step 30 naming the limit"
    ls -A "$ckpt" | grep -q '^step-000000000030' && fail "the root holds something of step 30"
    echo "the root holds: $(ls -A "$ckpt" | xargs)"
    for node in c1 c2; do
      held=$(on_node $node 'ls -A $job | xargs') || fail "cannot list the memory of $node"
      echo "$node's memory holds: $held"
      [[ $held == ".job step-000000000020" ]] || fail "$node's memory holds '$held', not just step 20"
    done
    for step in 10 20; do
      run_step timeout 60 env -u JOBKIT_CHECKPOINT_MEMORY srun --mpi=pmix -w c1,c2 -N2 -n4 --ntasks-per-node=2 \
        "$jobkit" checkpoint verify "$ckpt" $step
      ((status == 0)) || fail "jobkit checkpoint verify of the root's step $step failed"
    done ;;
  cleanup)
    # list_memory: "NODE: ENTRIES" of each node's memory directory, from a step of the job that runs it.
    list_memory='for n in c1 c2 c3; do echo "$n: $(srun -w $n -N1 -n1 ls -A '$memory' 2>/dev/null | xargs)"; done'
    export JOBKIT_CHECKPOINT_MEMORY=$memory JOBKIT_LOG_RANKS=all
    step="srun --mpi=pmix -N3 -n6 --kill-on-bad-exit=1 $train --step-ms 20 --every 10"
    run_step timeout 60 salloc -Q -N3 --ntasks-per-node=2 --time=5 --job-name=$name bash -c \
      "echo job \$SLURM_JOB_ID; $step --ckpt $work/ckpt-ended --steps 25 --result $work/result"
    ((status == 0)) || fail "the first job failed"
    ended=$(awk '$1 == "job" {print $2; exit}' <<<"$out")
    # --no-requeue: the example requeues its job when Slurm stops it with SIGTERM (a cancel is one).
    killed=$(sbatch --parsable --no-requeue -N3 --ntasks-per-node=2 --time=5 --job-name=$name \
      --output="$work/killed.out" --wrap "$step --ckpt $work/ckpt-killed --steps 3000") || fail "sbatch failed"
    deadline=$((SECONDS + 60))
    until ls "$work/ckpt-killed" 2>/dev/null | grep -q '^step-[0-9]*$'; do  # a save committed
      ((SECONDS < deadline)) || { cat "$work/killed.out"; fail "job $killed committed no save in 60 s"; }
      sleep 0.2
    done
    scancel --full -s KILL "$killed" || fail "scancel --full -s KILL $killed failed"  # every process of it, at once
    deadline=$((SECONDS + 60))
    # Until squeue names a final state or no longer knows the job (a failed squeue is asked again).
    while :; do
      if state=$(squeue -h -j "$killed" -o %T 2>"$work/squeue.err"); then
        [[ $state == @(PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED) ]] || break
      elif grep -q "Invalid job id" "$work/squeue.err"; then
        state=
        break
      fi
      ((SECONDS < deadline)) || fail "job $killed still $state 60 s after scancel -s KILL"
      sleep 0.5
    done
    echo "job $ended completed, job $killed killed: ${state:-gone}"
    run_step timeout 60 salloc -Q -N3 --ntasks-per-node=2 --time=5 --job-name=$name bash -c \
      "echo job \$SLURM_JOB_ID; echo before:; $list_memory; $step --ckpt $work/ckpt-next --steps 1; echo after:; $list_memory"
    ((status == 0)) || fail "the next job failed"
    next=$(awk '$1 == "job" {print $2; exit}' <<<"$out")
    before=$(sed -n '/^before:$/,/^after:$/p' <<<"$out")
    after=$(sed -n '/^after:$/,$p' <<<"$out")
    # The killed job's checkpoints swept the completed job's directories, the next job's the killed one's.
    for node in c1 c2 c3; do
      grep -q "^$node: .*jobkit-ckpt-$killed-" <<<"$before" || fail "job $killed left no memory directory on $node"
      grep -q "^$node: .*jobkit-ckpt-$ended-" <<<"$before" && fail "job $ended's memory directory outlived job $killed on $node"
      grep -q "^$node: .*jobkit-ckpt-\($ended\|$killed\)-" <<<"$after" && fail "an earlier job's memory directory is still on $node"
      grep -q "^$node: .*jobkit-ckpt-$next-" <<<"$after" || fail "job $next has no memory directory on $node"
    done
    removed="checkpoints: removed '$memory/jobkit-ckpt-%s-[0-9a-f]*', the memory tier of a job that has ended"
    # shellcheck disable=SC2059 # the pattern is ours
    (($(grep -c -- "$(printf "$removed" "$ended")" "$work/killed.out") == 3)) ||
      fail "job $killed did not log the removal of job $ended's directory on each of the 3 nodes"
    # shellcheck disable=SC2059
    (($(count "$(printf "$removed" "$killed")") == 3)) ||
      fail "job $next did not log the removal of job $killed's directory on each of the 3 nodes" ;;
esac
echo "PASS: $mode"
