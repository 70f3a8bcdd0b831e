#!/usr/bin/env bash
# The jobkit program without a launcher: help, version, info, and exit status 2 with one line on
# bad input or a bad environment.
# usage: cli.sh JOBKIT_BINARY
set -uo pipefail
jobkit=$1
failures=0
clean=(env -u PMIX_RANK -u PMIX_NAMESPACE -u SLURM_STEP_NUM_TASKS -u RANK -u WORLD_SIZE -u LOCAL_RANK
  -u LOCAL_WORLD_SIZE -u NODE_RANK -u GROUP_RANK -u JOBKIT_IDENTITY)

expect() {  # description, expected status, expected output pattern (grep -E), command...
  local what=$1 status=$2 pattern=$3
  shift 3
  local out rc
  out=$("${clean[@]}" "$@" 2>&1)
  rc=$?
  if ((rc != status)) || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: $what: exit $rc (expected $status), output: $out"
    failures=$((failures + 1))
  elif ((status == 2)) && (($(wc -l <<<"$out") != 1)); then
    echo "FAIL: $what: the error is not one line: $out"
    failures=$((failures + 1))
  else
    echo "ok: $what"
  fi
}

expect "--version" 0 '^jobkit [0-9]+\.[0-9]+\.[0-9]+$' "$jobkit" --version
# libjobkit loads NCCL and the CUDA runtime at its first NCCL call (jobkit doctor's), not at start.
expect "no NCCL or CUDA runtime among the libraries loaded at start" 0 '^none$' \
  bash -c '! ldd "$1" | grep -E "libnccl|libcudart" && echo none' _ "$jobkit"
expect "--help" 0 'usage: jobkit' "$jobkit" --help
expect "info --help" 0 'usage: jobkit info' "$jobkit" info --help
expect "info" 0 '^rank 0/1 local 0/1 node 0/1 host .+ \(default\)$' "$jobkit" info
expect "info --json" 0 \
  '^\{"rank":0,"world_size":1,"local_rank":0,"local_world_size":1,"node_rank":0,"num_nodes":1,"hostname":".+","job_id":"","step_id":"","restart_count":0,"array_job_id":"","array_task_id":null,"component":0,"num_components":1,"component_rank":0,"component_size":1,"component_nodes":"","source":"default"\}$' \
  "$jobkit" info --json
expect "info from torchrun variables" 0 '"rank":3,"world_size":4,.*"source":"torchrun"' \
  env RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 NODE_RANK=1 "$jobkit" info --json
expect "no command" 2 '^jobkit: no command given' "$jobkit"
expect "unknown command" 2 "^jobkit: unknown command 'bogus'" "$jobkit" bogus
expect "unknown option" 2 "^jobkit: info: unknown argument '--yaml'" "$jobkit" info --yaml
expect "bad RANK" 2 "^jobkit: RANK='abc' is not a non-negative integer$" env RANK=abc WORLD_SIZE=2 "$jobkit" info
expect "bad JOBKIT_IDENTITY" 2 "^jobkit: JOBKIT_IDENTITY='slrum'" env JOBKIT_IDENTITY=slrum "$jobkit" info
expect "partial Slurm step" 2 "^jobkit: partial Slurm step environment" env SLURM_STEP_NUM_TASKS=2 "$jobkit" info
expect "barrier --help" 0 'usage: jobkit barrier' "$jobkit" barrier --help
expect "broadcast --help" 0 'usage: jobkit broadcast' "$jobkit" broadcast --help
expect "bench --help" 0 'usage: jobkit bench' "$jobkit" bench --help
expect "barrier of one rank" 0 '^$' "$jobkit" barrier --timeout 2.5
expect "broadcast of one rank copies stdin" 0 '^hello world$' bash -c "echo 'hello world' | '$jobkit' broadcast"
expect "bad --timeout" 2 "^jobkit: --timeout='soon' is not a positive number of seconds" "$jobkit" barrier --timeout soon
expect "--timeout without a value" 2 "^jobkit: barrier: --timeout needs a value$" "$jobkit" barrier --timeout
expect "bad --root" 2 "^jobkit: --root='-1' is not a rank$" "$jobkit" broadcast --root -1
expect "--root outside the step" 2 "^jobkit: broadcast: --root=3 is not a rank of this step \\(ranks 0 to 0\\)$" \
  "$jobkit" broadcast --root 3
expect "bad JOBKIT_TIMEOUT" 2 "^jobkit: JOBKIT_TIMEOUT='0' is not a positive number of seconds" \
  env JOBKIT_TIMEOUT=0 "$jobkit" barrier
expect "bench --iters 0" 2 "^jobkit: bench: --iters='0' is not an integer >= 1$" "$jobkit" bench --iters 0
expect "bench unknown op" 2 "^jobkit: bench: --ops names an unknown operation 'allreduce'$" "$jobkit" bench --ops allreduce
expect "bench of one rank" 0 '"op":"barrier","ranks":1' "$jobkit" bench --json --iters 5 --warmup 1 --max-bytes 1024
ckpt=$(mktemp -d)
trap 'rm -rf "$ckpt"' EXIT
expect "checkpoint latest of an empty root" 0 '^$' "$jobkit" checkpoint latest "$ckpt"
expect "checkpoint begin" 0 "^$ckpt/step-000000000012.partial.nojob.r0/rank-0$" "$jobkit" checkpoint begin "$ckpt" 12
expect "checkpoint commit" 0 '^$' bash -c "echo w > '$ckpt/step-000000000012.partial.nojob.r0/rank-0/w' &&
  '$jobkit' checkpoint commit '$ckpt' 12"
expect "checkpoint latest after a commit" 0 '^12$' "$jobkit" checkpoint latest "$ckpt"
expect "checkpoint part" 0 "^$ckpt/step-000000000012/rank-0$" "$jobkit" checkpoint part "$ckpt" 12
expect "checkpoint commit without begin" 1 "^jobkit: checkpoint step 13 under '$ckpt' was not committed: rank 0 \\(.*\\): its part '.*' is missing" \
  "$jobkit" checkpoint commit "$ckpt" 13
expect "checkpoint bad step" 2 "^jobkit: checkpoint: STEP='x1' is not a step number" "$jobkit" checkpoint begin "$ckpt" x1
expect "checkpoint bad --keep" 2 "^jobkit: checkpoint: --keep='-2' is not a count$" \
  "$jobkit" checkpoint commit "$ckpt" 12 --keep -2
expect "checkpoint begin --timeout" 2 "^jobkit: checkpoint: --timeout does not apply to 'begin', which waits for no other rank" \
  "$jobkit" checkpoint begin "$ckpt" 14 --timeout 5
expect "checkpoint unknown action" 2 "^jobkit: checkpoint: expected .* or 'verify DIR STEP'" "$jobkit" checkpoint frob "$ckpt"
expect "help names checkpoint verify" 0 'checkpoint latest, begin, commit, part, verify' "$jobkit" --help
expect "info --help names pmi2" 0 'came from \(pmix, pmi2, slurm,' "$jobkit" info --help
expect "checkpoint without action" 2 '^jobkit: checkpoint: no action given' "$jobkit" checkpoint
expect "checkpoint --help" 0 'usage: jobkit checkpoint latest DIR' "$jobkit" checkpoint --help
expect "time-left outside Slurm" 0 '^unknown$' env -u SLURM_JOB_ID -u SLURM_JOB_END_TIME "$jobkit" time-left
# 50 to 60: the program starts late on a loaded machine (58 seen beside the other lanes).
expect "time-left from SLURM_JOB_END_TIME" 0 '^(5[0-9]|60)$' \
  env SLURM_JOB_END_TIME=$(($(date +%s) + 60)) JOBKIT_LIBSLURM=/nonexistent/libslurm.so "$jobkit" time-left
expect "time-left past SLURM_JOB_END_TIME" 0 '^0$' env SLURM_JOB_END_TIME=1000000000 "$jobkit" time-left
expect "time-left with a bad SLURM_JOB_END_TIME" 2 \
  "^jobkit: SLURM_JOB_END_TIME='soon' is not a time \\(seconds since 1970, as Slurm sets it\\)$" \
  env SLURM_JOB_END_TIME=soon "$jobkit" time-left
expect "time-left without libslurm" 0 '^unknown$' \
  env -u SLURM_JOB_END_TIME SLURM_JOB_ID=1234 JOBKIT_LIBSLURM=/nonexistent/libslurm.so "$jobkit" time-left
expect "requeue outside Slurm" 2 "^jobkit: requeue: not in a Slurm job \\(SLURM_JOB_ID is not set\\)$" \
  env -u SLURM_JOB_ID "$jobkit" requeue
expect "requeue with a bad job id" 2 "^jobkit: SLURM_JOB_ID='7;rm' is not a Slurm job id$" \
  env SLURM_JOB_ID='7;rm' "$jobkit" requeue
expect "fold --help" 0 'usage: jobkit fold' "$jobkit" fold --help
expect "fold as a filter" 0 '^\[rank: 0-1\] hello$' bash -c "printf '0: hello\n1: hello\n' | '$jobkit' fold --ranks 2"
expect "fold keeps a line without a label" 0 '^srun: error: x$' bash -c "printf 'srun: error: x\n' | '$jobkit' fold"
expect "fold passes a command's exit status" 3 '^\[rank: 0\] out$' "$jobkit" fold -- bash -c 'echo "[rank: 0] out"; exit 3'
expect "fold passes a command's death by a signal" 137 '^$' "$jobkit" fold -- bash -c 'kill -KILL $$'
expect "fold keeps stderr apart" 0 '^\[rank: 0\] to stderr$' bash -c "'$jobkit' fold -- bash -c 'echo \"[rank: 0] to stderr\" >&2' 2>&1 >/dev/null"
expect "fold with a bad --window" 2 "^jobkit: fold: --window='1s' is not a whole number from 1 to 3600000$" "$jobkit" fold --window 1s -- true
expect "fold with a bad --ranks" 2 "^jobkit: fold: --ranks='0' is not a whole number from 1 to 16777216$" "$jobkit" fold --ranks 0
expect "fold without a command after --" 2 "^jobkit: fold: no command after '--'" "$jobkit" fold --
expect "fold with an unknown option" 2 "^jobkit: fold: unknown argument '--fast'" "$jobkit" fold --fast
expect "fold with a bad SLURM_NTASKS" 2 "^jobkit: fold: SLURM_NTASKS='many' is not a number of tasks" \
  bash -c "echo | SLURM_NTASKS=many '$jobkit' fold"
expect "fold with a command that is not there" 2 "^jobkit: fold: cannot run '/nonexistent/srun': No such file or directory$" \
  "$jobkit" fold -- /nonexistent/srun -n2 true
expect "fold with srun's task count past 2^24" 2 \
  "^jobkit: fold: srun's -N='100000' times --ntasks-per-node='100000' \\(10000000000\\) asks for more than 16777216 tasks" \
  "$jobkit" fold -- /nonexistent/srun -N 100000 --ntasks-per-node=100000 true
expect "fold with a SLURM_NTASKS past 2^24" 2 "^jobkit: fold: SLURM_NTASKS='16777217' is not a number of tasks from 1 to 16777216" \
  bash -c "echo | SLURM_NTASKS=16777217 '$jobkit' fold"

# A signal sent to fold reaches its command while the command runs, its output closed or not; once
# the command has exited and left its output open in a process of its own, it ends fold. Either
# way fold ends within seconds, by SIGTERM (143), not when the sleep ends.
signalled() {  # description, command...
  local what=$1 leftover
  shift
  leftover=$(mktemp)
  "${clean[@]}" LEFTOVER="$leftover" "$jobkit" fold -- "$@" </dev/null >/dev/null 2>&1 &
  local pid=$! waited=0 rc
  while [[ ! -s $leftover ]] && ((waited < 50)); do  # the command is running (it writes the file)
    sleep 0.1
    waited=$((waited + 1))
  done
  sleep 0.5 # fold has read its streams' end, or the command's exit
  waited=0
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null && ((waited < 100)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: $what: fold still runs 10 s after SIGTERM"
    failures=$((failures + 1))
    kill -KILL "$pid"
  fi
  wait "$pid"
  rc=$?
  if ((waited < 100)) && ((rc != 143)); then
    echo "FAIL: $what: exit $rc (expected 143)"
    failures=$((failures + 1))
  elif ((waited < 100)); then
    echo "ok: $what"
  fi
  if [[ -s $leftover ]]; then kill "$(cat "$leftover")" 2>/dev/null; fi
  rm -f "$leftover"
}
signalled "fold passes SIGTERM on once its command's output is closed" \
  sh -c 'echo $$ >"$LEFTOVER"; exec sleep 30 >&- 2>&-'
signalled "fold ends by SIGTERM once its command exited, its output held open" \
  sh -c 'sleep 30 & echo $! >"$LEFTOVER"; exit 0'
expect "where --help" 0 'usage: jobkit where' "$jobkit" where --help
expect "where without a job" 2 "^jobkit: where: no JOBID given and SLURM_JOB_ID is not set" env -u SLURM_JOB_ID "$jobkit" where
expect "where with a bad job id" 2 "^jobkit: where: '12x' is not a job id \\(JOBID or JOBID.STEP, digits\\)$" "$jobkit" where 12x
expect "where with a bad --timeout" 2 "^jobkit: where: --timeout='0' is not a whole number of seconds from 1 to 3600$" \
  "$jobkit" where 12 --timeout 0
expect "where --agent without a step" 2 "^jobkit: where: --agent needs JOB STEP$" "$jobkit" where --agent 12
# jobkit run refuses bad input before any step starts (no srun is run: none is needed here).
job=(env SLURM_JOB_ID=77 SLURM_JOB_NODELIST='c[1-3]' SLURM_NTASKS_PER_NODE=2)
run_dir=$(mktemp -d)
run=("$jobkit" run --checkpoints "$run_dir")
expect "run: SPARE_NODES not a number" 2 "^jobkit: run: --spare-nodes='two' \(SPARE_NODES in the templates\) is not a whole number from 0 to 100000$" \
  "${job[@]}" "${run[@]}" --spare-nodes two -- srun true
expect "run: SPARE_NODES negative" 2 "^jobkit: run: --spare-nodes='-1' \(SPARE_NODES in the templates\) is not a whole number" \
  "${job[@]}" "${run[@]}" --spare-nodes -1 -- srun true
expect "run: SPARE_NODES leaving no node" 2 '^jobkit: run: --spare-nodes=3 \(SPARE_NODES in the templates\) leaves no node for the step: the allocation has 3 nodes \(c1,c2,c3\)$' \
  "${job[@]}" "${run[@]}" --spare-nodes 3 -- srun true
expect "run: outside a job" 2 '^jobkit: run: SLURM_JOB_ID is not set' env -u SLURM_JOB_ID "${run[@]}" -- srun true
expect "run: srun's own nodes refused" 2 "^jobkit: run: srun's -w is jobkit run's to set" \
  "${job[@]}" "${run[@]}" -- srun -w c1 true
expect "run: not an srun step" 2 "^jobkit: run: the step must be an srun command line" "${job[@]}" "${run[@]}" -- mpirun true
expect "run: a total of tasks without tasks per node, with spares" 2 '^jobkit: run: --spare-nodes=1 runs the step on fewer nodes than the allocation, and the job gives its tasks as a total \(SLURM_NTASKS=6\)' \
  env SLURM_JOB_ID=77 SLURM_JOB_NODELIST='c[1-3]' SLURM_NTASKS=6 "${run[@]}" --spare-nodes 1 -- srun true
rm -rf "$run_dir"

exit $((failures > 0))
