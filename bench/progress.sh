#!/usr/bin/env bash
# Progress tracking's detection latency against its learned bound (docs/progress.md, issue 62), on
# the dev cluster, under `jobkit run`: bench/progress_step.py on 3 nodes x 2 ranks, 0.3 s steps
# paced by a stop agreement, a first step of 10 steps, a save of 5 steps, the default factor (5)
# and a 1 s floor (so that the bound in effect is the learned one, 5 x the longest interval).
#   stop, stuck, all   TRIALS jobs each: rank 3 SIGSTOPped mid-step; rank 2 stuck in a Python
#                      function outside any jobkit call; every rank stuck in its own code. Each
#                      trial: the time from the fault to the first `hang` event, that event's
#                      bound (learned), to jobkit run's seeing it (the ledger's `failed`), and to the
#                      step ended (the ledger's step_ended); the restarted step must finish.
#   clean              CLEAN jobs without a fault, rank 4 at half speed: any `hang` event is a
#                      false positive; the first `straggler` event's steps and scores.
# usage: bench/progress.sh [TRIALS] [CLEAN] [BUILD_DIR]   (default 10, 20, build-test)
# Environment: KINDS (default "stop stuck all clean"), PYTHON (default python3), and the
# progress knobs, exported to the jobs (defaults below).
# Writes bench/results/progress-<commit>.jsonl (one line per job) and prints the summary that
# bench/RESULTS.md records.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
trials=${1:-10}
clean=${2:-20}
build=$(realpath "${3:-$repo/build-test}")
python=${PYTHON:-python3}
jobkit=$build/src/cli/jobkit
[[ -x $jobkit && -d $build/python/jobkit ]] || { echo "$0: build $build first" >&2; exit 1; }
[[ -n ${SLURM_CONF:-} ]] || eval "$("$repo/slurm/dev-cluster.sh" env)"
rev=$(git -C "$repo" rev-parse --short HEAD)
results=$repo/bench/results/progress-$rev.jsonl
mkdir -p "$repo/bench/results"
: >"$results"
work=$(mktemp -d /var/tmp/jobkit-progress-bench.XXXXXX)
trap 'scancel --name=jobkit-progress-bench 2>/dev/null; rm -rf "$work"' EXIT
export PYTHONPATH=$build/python
export JOBKIT_PROGRESS_FLOOR=${JOBKIT_PROGRESS_FLOOR:-1} JOBKIT_PROGRESS_FACTOR=${JOBKIT_PROGRESS_FACTOR:-5} \
  JOBKIT_PROGRESS_FIRST_STEP=${JOBKIT_PROGRESS_FIRST_STEP:-5} \
  JOBKIT_PROGRESS_CHECKPOINT_FLOOR=${JOBKIT_PROGRESS_CHECKPOINT_FLOOR:-10} \
  JOBKIT_STRAGGLER_EVERY=${JOBKIT_STRAGGLER_EVERY:-10} JOBKIT_TIMEOUT=${JOBKIT_TIMEOUT:-60}
echo "progress bench at $rev: floor $JOBKIT_PROGRESS_FLOOR s, factor $JOBKIT_PROGRESS_FACTOR, first step" \
  "$JOBKIT_PROGRESS_FIRST_STEP s, straggler every $JOBKIT_STRAGGLER_EVERY; load $(cut -d' ' -f1-3 /proc/loadavg)"

# trial KIND N: one job; appends its line to $results.
trial() {
  local kind=$1 n=$2 dir=$work/$1-$2 job load
  mkdir -p "$dir"
  load=$(cut -d' ' -f1 /proc/loadavg)
  job=$(sbatch --parsable --wait --job-name=jobkit-progress-bench --chdir="$dir" --output="$dir/job.out" -N3 \
    --ntasks-per-node=2 --time=5 --no-kill \
    --wrap "exec '$jobkit' run --checkpoints '$dir/ck' --max-restarts 2 -- srun --mpi=pmix '$python' \
'$repo/bench/progress_step.py' $kind '$dir/ck'" 2>"$dir/sbatch.err")
  local status=$?
  job=${job%%;*}
  "$python" - "$kind" "$n" "$job" "$status" "$dir" "$load" >>"$results" <<'PY' || { echo "$kind $n: job $job:"; tail -30 "$dir/job.out"; }
import json, re, sys
kind, n, job, status, d, load = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
out = open(f"{d}/job.out").read()
def lines(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []
ev = lines(f"{d}/ck/.jobkit-run-{job}/events.jsonl")
ledger = lines(f"{d}/ck/jobkit-ledger-{job}.jsonl")
row = {"kind": kind, "trial": n, "job": job, "sbatch_status": status, "load1": load}
run = [x["run"] for x in ledger if "run" in x]
row["outcome"] = run[0]["outcome"] if run else None
hangs = [e for e in ev if e["event"] == "hang" and e["attempt"] == 0]
row["hang_events"] = len(hangs)
row["hang_ranks"] = sorted(e["rank"] for e in hangs)
strag = [e for e in ev if e["event"] == "straggler" and e["attempt"] == 0]
if strag:
    row["straggler_steps"] = strag[0]["steps"]
    row["straggler_ranks"] = [s["rank"] for s in strag[0]["stragglers"]]
    row["scores"] = strag[0]["scores"]
if kind != "clean":
    fault = re.search(r"bench-fault ([0-9.]+)", out)
    restarts = [x["restart"] for x in ledger if "restart" in x]
    if not fault or not hangs or not restarts:
        print(f"{kind} {n}: job {job}: fault {bool(fault)}, {len(hangs)} hang events, {len(restarts)} restarts",
              file=sys.stderr)
        sys.exit(1)
    fault = float(fault.group(1))
    first = min(hangs, key=lambda e: e["time"])
    r = restarts[0]
    row.update(cause=r["cause"], bound_s=first["bound_seconds"], phase=first["phase"],
               found_s=round(first["time"] - fault, 3), idle_s=first["idle_seconds"],
               seen_s=round(r["failed"] - fault, 3),
               ended_after_found_s=round(r["failed"] + r["phases_s"]["failure_to_step_ended"] - first["time"], 3),
               in_call=sorted({e["rank"] for e in hangs if e["in_call"]}))
    row["found_over_bound"] = round(row["found_s"] / row["bound_s"], 3)
print(json.dumps(row))
PY
  tail -1 "$results"
}

for kind in ${KINDS:-stop stuck all clean}; do
  count=$trials
  [[ $kind == clean ]] && count=$clean
  for ((t = 1; t <= count; t++)); do trial "$kind" "$t"; done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def span(v):
    return f"median {statistics.median(v):5.2f}  min {min(v):5.2f}  max {max(v):5.2f}" if v else "none"
for kind in ("stop", "stuck", "all"):
    r = [x for x in rows if x["kind"] == kind and "found_s" in x]
    if not r:
        continue
    done = sum(1 for x in r if x["outcome"] == "finished")
    print(f"{kind}: {len(r)} trials, {done} finished after the restart; phases {sorted({x['phase'] for x in r})}")
    for key in ("bound_s", "found_s", "found_over_bound", "seen_s", "ended_after_found_s"):
        print(f"  {key:20} {span([x[key] for x in r])}")
    print(f"  within 2x the bound: {sum(x['found_over_bound'] <= 2 for x in r)}/{len(r)}; "
          f"ended within 10 s after: {sum(x['ended_after_found_s'] <= 10 for x in r)}/{len(r)}")
c = [x for x in rows if x["kind"] == "clean"]
if c:
    fp = sum(x["hang_events"] > 0 for x in c)
    done = sum(1 for x in c if x["outcome"] == "finished")
    print(f"clean: {len(c)} runs, {done} finished, {fp} with a hang event (false positives)")
    named = [x for x in c if x.get("straggler_ranks") == [4]]
    print(f"  rank 4 (half speed) named alone at the first exchange: {len(named)}/{len(c)}; steps "
          f"{span([x['straggler_steps'] for x in named])}")
    s4 = [x["scores"][4] for x in c if "scores" in x]
    others = [abs(s - 1) for x in c if "scores" in x for i, s in enumerate(x["scores"]) if i != 4]
    print(f"  rank 4's score {span(s4)}; the others' |score - 1| at most {max(others) if others else None}")
PY
