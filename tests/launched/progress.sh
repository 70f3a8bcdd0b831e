#!/usr/bin/env bash
# Progress tracking on the dev cluster (docs/progress.md): a Python step of 3 nodes x 2 ranks with
# JOBKIT_RECOVERY_DIR set, its events.jsonl read.
#   faults  (progress_step.py faults) a fault-free part first: a first step 10 times the others and
#           a save 5 times a step make no `hang`; rank 4, twice as slow, is named as the straggler
#           within 20 steps and the others score within 10 % of 1. Then rank 3 stopped (SIGSTOP)
#           and rank 2 stuck in a Python function: `hang` events from every rank but 3 within
#           their bound, rank 2's outside any jobkit call, the others' in the stop agreement;
#           meanwhile `jobkit where` shows every rank's straggler score by node, rank 4 (c3)
#           marked as the straggler, the others within 10 % of 1
#   all     every rank stuck in its own code: every rank reports, outside any jobkit call
#   restart one batch job under `jobkit run` (progress_step.py restart): its first step hangs with
#           rank 2 stuck in a Python function, its second with every rank stuck in its own code;
#           each hang is found, `jobkit where`'s report saved (the rank, its node, its Python
#           place), the step ended and restarted inside the allocation from the newest
#           checkpoint, no node blamed; the third step finishes with the exact result
#   bad     JOBKIT_PROGRESS_FACTOR=fast: the step fails naming the variable and its value
# usage: progress.sh MODE JOBKIT PYTHON PYTHONPATH WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes faults all restart bad
mode=$1
jobkit=$(realpath "$2")
python=$3
export PYTHONPATH=$4
work=$(realpath -m "$5/$mode.$$")
need_cluster
rm -rf "$work" && mkdir -p "$work"
recovery=$(mktemp -d /var/tmp/jobkit-progress-XXXXXX)
trap 'rm -rf "$recovery"' EXIT
events=$recovery/events.jsonl
# Quick bounds: a step of 0.4 s (paced by rank 4) learns max(1 s, 3 x 0.4 s); the save (2 s) is over
# that, under its own floor; the first step (2 s) under the start-up allowance.
export JOBKIT_RECOVERY_DIR=$recovery JOBKIT_RECOVERY_ATTEMPT=0 JOBKIT_PROGRESS_FLOOR=1 JOBKIT_PROGRESS_FACTOR=3 \
  JOBKIT_PROGRESS_FIRST_STEP=5 JOBKIT_PROGRESS_CHECKPOINT_FLOOR=10 JOBKIT_STRAGGLER_EVERY=10 JOBKIT_TIMEOUT=40

# events_check PYTHON_CODE: runs the code with `ev` the list of events (dicts); it prints and exits 1 on a failure.
events_check() {
  "$python" - "$events" "$1" <<'PY'
import json, sys
ev = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
for e in ev: print(json.dumps(e))
exec(sys.argv[2])
PY
}

if [[ $mode == bad ]]; then
  run_step timeout 60 env JOBKIT_PROGRESS_FACTOR=fast srun --mpi=pmix -N1 -n1 "$python" "$here/progress_step.py" bad "$work/ck"
  ((status == 3)) || fail "the step's exit status is $status, not 3 (refused)"
  (($(count "JOBKIT_PROGRESS_FACTOR='fast': must be a number from 1 to 1000") == 1)) ||
    fail "the malformed factor was not named"
  echo "PASS"
  exit 0
fi

if [[ $mode == restart ]]; then
  # jobkit run sets the recovery directory and attempt of each step (beside the checkpoints).
  unset JOBKIT_RECOVERY_DIR JOBKIT_RECOVERY_ATTEMPT
  export JOBKIT_PROGRESS_FIRST_STEP=2 JOBKIT_CLI=$jobkit
  trap 'rm -rf "$recovery"; scancel --name=jobkit-progress-restart 2>/dev/null' EXIT
  job=$(sbatch --parsable --job-name=jobkit-progress-restart --chdir="$work" --output="$work/job.out" -N3 \
    --ntasks-per-node=2 --time=5 --no-kill --wrap "'$jobkit' run --checkpoints '$work/ck' --max-restarts 4 -- \
      srun --mpi=pmix '$python' '$here/progress_step.py' restart '$work/ck' '$work/result'") || fail "sbatch failed"
  wait_job_ended "$job" 120
  out=$(unfold <"$work/job.out")
  echo "$out"
  [[ $job_state == COMPLETED ]] || fail "the job's state is '$job_state', not COMPLETED"
  run_dir=$work/ck/.jobkit-run-$job
  expected=$((21 * 210)) # the sum over 20 steps of every rank's (rank + 1) x step
  [[ $(cat "$work/result" 2>/dev/null) == "$expected" ]] ||
    fail "result '$(cat "$work/result" 2>/dev/null)', expected $expected (an uninterrupted run)"
  grep -q 'jobkit run: job [0-9]* step attempt 0: rank [0-9]* on c[123] made no progress past its bound' <<<"$out" ||
    fail "jobkit run did not say the first hang"
  grep -q 'jobkit run: restart 1: attempt 0: hang on c2 (no node blamed), resuming from checkpoint 10' <<<"$out" ||
    fail "the first hang was not placed on c2 and restarted from checkpoint 10"
  grep -q 'jobkit run: restart 2: attempt 1: hang (no node blamed), resuming from checkpoint 15' <<<"$out" ||
    fail "the second hang was not restarted from checkpoint 15"
  grep -q 'jobkit run: job [0-9]* step attempt 2 on c1,c2,c3$' <<<"$out" || fail "the third step did not run on c1,c2,c3"
  (($(grep -c 'jobkit run: restart [0-9]*:' <<<"$out") == 2)) || fail "not two restarts"
  for attempt in 0 1; do
    echo "--- the saved report of attempt $attempt"
    cat "$run_dir/where-$attempt.txt" || fail "no where report saved for attempt $attempt"
  done
  echo "--- the ledger"
  cat "$work/ck/jobkit-ledger-$job.jsonl"
  (($(grep -c '"cause":"hang"' "$work/ck/jobkit-ledger-$job.jsonl") == 2)) || fail "the ledger has not two hang restarts"
  "$python" - "$run_dir/where-0.txt" "$run_dir/where-1.txt" <<'PY' || fail "the saved reports do not show the stuck ranks"
import re, sys
# A folded line per place: "[rank: 0-1,3-5] in all_reduce at progress_step.py:NN for 3 s, waiting
# for rank 2 (c2)", "[rank: 2] not in jobkit: load_shard progress_step.py:NN <- <module> ...".
for path, stuck in ((sys.argv[1], {2}), (sys.argv[2], set(range(6)))):
    text = open(path).read()
    ranks = set()
    for m in re.finditer(r"^\[rank: ([0-9,-]+)\] (.*)$", text, re.M):
        if "not in jobkit: load_shard progress_step.py:" not in m.group(2):
            continue
        for part in m.group(1).split(","):
            a, _, b = part.partition("-")
            ranks.update(range(int(a), int(b or a) + 1))
    assert ranks == stuck, f"{path}: ranks {sorted(ranks)} shown in load_shard, not {sorted(stuck)}"
    if stuck == {2}:
        assert "waiting for rank 2 (c2)" in text, f"{path}: the others do not wait for rank 2 (c2)"
    print(f"{path}: ranks {sorted(ranks)} in load_shard, as expected")
PY
  echo "PASS"
  exit 0
fi

timeout 120 srun --mpi=pmix --job-name="jobkit-progress-$mode" -N3 --ntasks-per-node=2 \
  "$python" "$here/progress_step.py" "$mode" "$work/ck" >"$work/step.out" 2>&1 &
srun_pid=$!
expected=6
[[ $mode == faults ]] && expected=5
# Every expected rank's hang, or 90 s.
for _ in $(seq 900); do
  n=$(grep -c '"event":"hang"' "$events" 2>/dev/null || true)
  ((n >= expected)) && break
  kill -0 "$srun_pid" 2>/dev/null || break
  sleep 0.1
done
sleep 2 # a second report of one hang would come within a second or two
# The events as they were before the step is ended: Slurm sends SIGCONT before SIGKILL, and a
# stopped rank that wakes may report the wait it was stopped in.
cp "$events" "$events.before" 2>/dev/null
events=$events.before
job=$(squeue -h -n "jobkit-progress-$mode" -o %i | head -1)
# The hung step's `jobkit where` report, before it is ended: the scores of the last exchange.
[[ -n $job ]] && timeout 60 "$jobkit" where "$job" >"$work/where.txt" 2>&1
[[ -n $job ]] && scancel -s KILL "$job"
wait "$srun_pid"
cat "$work/step.out"
[[ -f $events ]] || fail "no events.jsonl"
done_at=$(awk '/fault-free part done at/ {print $NF; exit}' "$work/step.out")
[[ -n $done_at ]] || fail "the fault-free part did not end"

events_check "
done_at = $done_at
hangs = [e for e in ev if e['event'] == 'hang']
early = [e for e in hangs if e['time'] < done_at]
assert not early, f'a hang reported in the fault-free part: {early}'
ranks = sorted(e['rank'] for e in hangs)
want = [0, 1, 2, 4, 5] if '$mode' == 'faults' else [0, 1, 2, 3, 4, 5]
assert ranks == want, f'hang events from ranks {ranks}, not {want} (once each)'
for e in hangs:
    # Found within 2x its bound plus the watcher's second (generous: a loaded machine).
    assert e['time'] - done_at < 2 * e['bound_seconds'] + 8, f'late: {e}'
    assert e['phase'] in ('step', 'first-step'), e
    outside = '$mode' == 'all' or e['rank'] == 2
    if outside:
        assert not e['in_call'] and e['where'].startswith('outside any jobkit call'), e
    else:
        assert e['in_call'] and e['call'].startswith('all_reduce') and 'progress_step.py' in e['site'], e
assert [e['rank'] for e in ev if e['event'] == 'first_step_done'] == [0], 'first_step_done: rank 0 once'
if '$mode' == 'faults':
    s = [e for e in ev if e['event'] == 'straggler']
    # (its step counts the boundaries before the first stop agreement too: the Checkpoints' collectives)
    assert s and s[0]['steps'] <= 26, f'no straggler named within 20 steps: {s}'
    assert [x['rank'] for x in s[0]['stragglers']] == [4], s[0]
    scores = s[0]['scores']
    assert scores[4] < 0.75, scores
    assert all(abs(x - 1) <= 0.1 for r, x in enumerate(scores) if r != 4), f'others not within 10 % of 1: {scores}'
print('events: as expected')
" || fail "events.jsonl is not as expected"
echo "--- jobkit where"
cat "$work/where.txt"
if [[ $mode == faults ]]; then
  "$python" - "$work/where.txt" <<'PY' || fail "jobkit where does not show the straggler scores as expected"
import re, sys
text = open(sys.argv[1]).read()
assert "straggler scores (" in text, "no block of straggler scores"
block = text[text.index("straggler scores ("):].splitlines()[1:]
scores = {}
for line in block:
    m = re.fullmatch(r"  (c[0-9]+): (.*)", line)
    assert m, f"not a node's line of scores: {line!r}"
    for rank, score, marked in re.findall(r"rank ([0-9]+) ([0-9.]+)( \(straggler\))?", m.group(2)):
        scores[int(rank)] = (m.group(1), float(score), bool(marked))
assert sorted(scores) == list(range(6)), f"scores of ranks {sorted(scores)}, not 0-5"
assert scores[4][0] == "c3" and scores[4][1] < 0.75 and scores[4][2], f"rank 4 not the straggler on c3: {scores[4]}"
for r, (node, score, marked) in scores.items():
    assert node == f"c{r // 2 + 1}", f"rank {r} on {node}"
    if r != 4:
        assert abs(score - 1) <= 0.1 and not marked, f"rank {r}: {score}, not within 10 % of 1"
print("jobkit where: the scores as expected")
PY
  grep -q 'straggler: rank 4 (c3) scored' "$work/step.out" || fail "no straggler line naming rank 4 and its node"
  [[ -s $recovery/progress-bound.json ]] || fail "no progress-bound.json"
  cat "$recovery/progress-bound.json"
fi
echo "PASS"
