#!/usr/bin/env bash
# MTTR (fault -> first step done after it) of jobkit run beside its peers, in one run on the same dev
# cluster, trial by trial in turn (so that every kind sees the same load): issue 61's benchmark.
#   jobkit-kill          tests/launched/recovery.sh kill: jobkit run, rank 3 killed with kill -9
#                        (2 nodes x 2 ranks, 100 ms steps, a checkpoint every 10)
#   jobkit-lost-spare    tests/launched/recovery.sh lost-spare: c2's ranks frozen and its traffic dropped
#                        but the controller's, one spare, JOBKIT_LOST_NODE_TIMEOUT=2
#   jobkit-kill-torch    jobkit run with bench/recovery_torchrun.py (the torch script below) under
#                        slurm/train-python.sbatch (jobkit exec, env://, gloo), rank 3 killed with
#                        kill -9: the same program as torchrun's and ft_launcher's
#   torchrun-kill        torchrun --max-restarts=3, c10d rendezvous on the allocation's first node, one
#                        torchrun per node (srun), gloo, bench/recovery_torchrun.py (the same step in
#                        torch), rank 3 killed with kill -9; TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (see
#                        torchrun-kill-default)
#   torchrun-kill-default  the same with torch's defaults (the workers' store shared across rounds)
#   ft-kill              nvidia-resiliency-ext's ft_launcher in torchrun's place, its defaults
#   requeue240-kill      240736d's slurm/train-requeue.sbatch and example (built in OLD_BUILD_DIR):
#                        rank 3 killed, the template's `jobkit requeue`, Slurm's requeue (cred_expire
#                        of the cluster's slurm.conf)
#   torchrun-lost        torchrun on 3 nodes with --nnodes=2 (the third agent a spare: torch keeps
#                        it out of a full rendezvous), the node of ranks 2 and 3 lost as in
#                        jobkit-lost-spare; waited for LOST_BOUND_S (120) after the fault
#   ft-lost              the same under ft_launcher
# usage: bench/recovery_peers.sh [TRIALS] [BUILD_DIR] [OLD_BUILD_DIR]   (10, build-test, /work/wt-old240/build-test)
#   KINDS="..." the kinds to run (default: all above); TRIALS_DEFAULT (3): trials of
#   torchrun-kill-default; TRIALS_LOST (2): of torchrun-lost and ft-lost;
#   RESULTS_TAG: a suffix of the results file names (a partial rerun); PEERS_PYTHON: a Python with
#   torch and nvidia-resiliency-ext, on a path every node sees (default
#   /var/tmp/jobkit-benchrec/venv/bin/python), made as bench/RESULTS.md's figures were:
#     PY=$(bash -c 'source tests/launched/lib.sh; find_python'); tests/launched/venv.sh --fetch
#     "$PY" -m venv V && V/bin/pip install --no-index --find-links WHEELHOUSE torch==2.15.0
#     V/bin/pip install nvidia-resiliency-ext        # (WHEELHOUSE: the path venv.sh --fetch prints)
# Needs the dev cluster (3 nodes, netns mode) in SLURM_CONF / JOBKIT_CLUSTER_*. Writes
# bench/results/recovery-peers-<commit>.jsonl (one line per trial), the agents' logs of the
# lost-node trials beside it, and prints each kind's phases (median, min, max) and its MTTR's ratio
# to jobkit run's of the same fault.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
trials=${1:-10}
build=$(realpath "${2:-$repo/build-test}")
old_build=$(realpath "${3:-/work/wt-old240/build-test}")
old_src=$(git -C "$old_build/.." rev-parse --show-toplevel 2>/dev/null || dirname "$old_build")
python=${PEERS_PYTHON:-/var/tmp/jobkit-benchrec/venv/bin/python}
kinds=${KINDS:-jobkit-kill jobkit-lost-spare jobkit-kill-torch torchrun-kill torchrun-kill-default ft-kill requeue240-kill torchrun-lost ft-lost}
trials_default=${TRIALS_DEFAULT:-3}
trials_lost=${TRIALS_LOST:-2}
lost_bound=${LOST_BOUND_S:-120}
rev=$(git -C "$repo" rev-parse --short HEAD)
results=$repo/bench/results/recovery-peers-$rev${RESULTS_TAG:+-$RESULTS_TAG}.jsonl
logs=$repo/bench/results/recovery-peers-$rev${RESULTS_TAG:+-$RESULTS_TAG}-logs
script=$repo/bench/recovery_torchrun.py
parse=$repo/bench/recovery_peers.py
"$python" -c 'import torch' 2>/dev/null || { echo "PEERS_PYTHON '$python' cannot import torch"; exit 1; }
mkdir -p "$logs"
: >"$results"
eval "$("$repo/slurm/dev-cluster.sh" env)"
cluster_port='' cluster_subnet=''
eval "$("$repo/slurm/dev-cluster.sh" settings)"
work=$(mktemp -d /var/tmp/jobkit-recovery-peers.XXXXXX)
frozen=() cut_node=
cleanup_fault() {
  [[ -z $cut_node ]] || ip netns exec "jk$cluster_port-$cut_node" nft delete table inet jobkit_lost_node 2>/dev/null
  ((${#frozen[@]} == 0)) || kill -KILL "${frozen[@]}" 2>/dev/null
  frozen=() cut_node=
}
trap 'cleanup_fault; scancel --name=jobkit-recovery-peers 2>/dev/null; rm -rf "$work"' EXIT
export SBATCH_JOB_NAME=jobkit-recovery-peers

echo "recovery_peers: $(date -u +%FT%TZ), commit $rev, load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs," \
  "$(sinfo -h -N -o %N | sort -u | wc -l) nodes, $(grep -o 'cred_expire=[0-9]*' "$SLURM_CONF"), SlurmdTimeout=$(sed -n 's/^SlurmdTimeout=//p' "$SLURM_CONF")"
echo "torch: $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)," \
  "nvidia-resiliency-ext: $("$python" -m pip show nvidia-resiliency-ext 2>/dev/null | sed -n 's/^Version: //p')," \
  "240736d: $(git -C "$old_src" rev-parse --short HEAD 2>/dev/null)"

wait_gone() { # JOB BOUND_S: waits until the job left the queue, else cancels it
  local deadline=$((SECONDS + $2))
  while [[ -n $(squeue -h -j "$1" -o %i 2>/dev/null) ]]; do
    ((SECONDS < deadline)) || { scancel "$1"; sleep 2; return 1; }
    sleep 0.5
  done
}
wait_line() { # PATTERN FILE BOUND_S
  local deadline=$((SECONDS + $3))
  until grep -q -- "$1" "$2" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
record() { # KIND TRIAL JSON
  echo "{\"kind\":\"$1\",\"trial\":$2,${3#\{}" >>"$results"
  echo "$1 trial $2: $3"
}
# cut_off NODE PID...: the pids frozen, every packet of NODE's namespace dropped but the controller's
# (tests/launched/recovery.sh's lose()).
cut_off() {
  cut_node=$1
  shift
  frozen=("$@")
  ip netns exec "jk$cluster_port-$cut_node" nft -f - <<EOF || echo "nft could not cut $cut_node off"
table inet jobkit_lost_node {
  chain in { type filter hook input priority 0; iifname "eth0" ip saddr != $cluster_subnet.254 drop; }
  chain out { type filter hook output priority 0; oifname "eth0" ip daddr != $cluster_subnet.254 drop; }
}
EOF
  kill -STOP "${frozen[@]}"
}

jobkit_trial() { # MODE KIND TRIAL
  local out status line seen
  out=$("$repo/tests/launched/recovery.sh" "$1" "$build/src/cli/jobkit" "$build/examples/jobkit-train-requeue" \
    "$work/$2-$3" 2>&1)
  status=$?
  line=$(grep -m1 '^measured: ' <<<"$out")
  if ((status != 0)) || [[ -z $line ]]; then
    echo "$2 trial $3 failed (status $status):"
    tail -20 <<<"$out"
    record "$2" "$3" '{"failed":true}'
    return
  fi
  seen=$(sed -n 's/.*failure seen \([0-9.-]*\) s later.*/\1/p' <<<"$line")
  phase() { sed -n "s/.*$1 +\([0-9.]*\) s.*/\1/p" <<<"$line"; }
  record "$2" "$3" "$(python3 -c 'import json,sys; d=float(sys.argv[1]); v=[float(x) for x in sys.argv[2:]]
print(json.dumps({"detected_s": d, "step_ended_s": round(d + v[0], 3), "step_started_s": round(d + v[1], 3),
  "world_ready_s": round(d + v[2], 3), "checkpoint_loaded_s": round(d + v[3], 3), "first_step_done_s": round(d + v[4], 3),
  "mttr_s": round(d + v[4], 3)}))' "$seen" "$(phase 'step ended')" "$(phase 'step started')" "$(phase 'world ready')" \
    "$(phase 'checkpoint loaded')" "$(phase 'first step done')")"
}

torch_trial() { # KIND TRIAL
  local kind=$1 t=$2 w=$work/$1-$2 agent=--agent nodes=2 job fault pid host line bound=150
  rm -rf "$w" && mkdir -p "$w"
  [[ $kind == ft-* ]] && agent=--ft-agent
  [[ $kind == *-lost ]] && nodes=3
  local env_=(GLOO_SOCKET_IFNAME=eth0 PYTHONUNBUFFERED=1 LOGLEVEL=INFO)
  [[ $kind == torchrun-kill || $kind == torchrun-lost ]] && env_+=(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)
  cat >"$w/job.sh" <<EOF
#!/bin/bash
first=\$(scontrol show hostnames "\$SLURM_JOB_NODELIST" | head -1)
srun --mpi=none -N\$SLURM_NNODES -n\$SLURM_NNODES --ntasks-per-node=1 --kill-on-bad-exit=0 \\
  $python $script $agent --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=\$first:29500 \\
  --rdzv-id=\$SLURM_JOB_ID --max-restarts=3 $script --ckpt $w/ckpt --result $w/result
echo "srun status \$?"
EOF
  job=$(env "${env_[@]}" sbatch --parsable --chdir="$w" --output="$w/job.out" --nodes=$nodes --ntasks-per-node=2 \
    --time=10 "$w/job.sh") || { record "$kind" "$t" '{"failed":true,"why":"sbatch"}'; return; }
  if ! wait_line 'attempt 0: no checkpoint' "$w/job.out" 120; then
    scancel "$job"
    record "$kind" "$t" '{"failed":true,"why":"never started"}'
    return
  fi
  sleep 2
  if [[ $kind == *-lost ]]; then
    read -r pid host <"$w/result.pid.3"
    cut_off "$host" "$pid" "$(cut_pid "$w/result.pid.2")"
    fault=$(date +%s.%N)
    # Waits for a first step done after the fault, or the bound.
    local deadline=$((SECONDS + lost_bound))
    while ((SECONDS < deadline)); do
      [[ $(grep -c 'first step done' "$w/job.out") -ge 2 ]] && break
      [[ -n $(squeue -h -j "$job" -o %i 2>/dev/null) ]] || break
      sleep 0.5
    done
    sleep 3
    squeue -h -j "$job" -o "state at the bound: %T" >>"$w/job.out" 2>/dev/null
    scancel "$job"
    wait_gone "$job" 60
    cleanup_fault
    bound=0
  else
    read -r pid host <"$w/result.pid.3"
    kill -KILL "$pid"
    fault=$(date +%s.%N)
  fi
  ((bound == 0)) || wait_gone "$job" "$bound" || echo "$kind trial $t: job $job cancelled after $bound s"
  line=$("$python" "$parse" torch "$w/job.out" "$fault")
  line=${line%\}}
  line+=",\"exact\":$([[ $(cat "$w/result" 2>/dev/null) == 8200 ]] && echo true || echo false)"
  line+=",\"node\":\"$host\",\"job\":$job}"
  record "$kind" "$t" "$line"
  if [[ $kind == *-lost || $line != *'"mttr_s": '[0-9]* ]]; then
    grep -v "pynvml\|NumPy\|_conversion\|OMP_NUM\|run.py:982\|socket.cpp:207\|debug_logger" "$w/job.out" |
      cut -c1-400 >"$logs/$kind-$t.log"
  fi
}
cut_pid() { local p; read -r p _ <"$1"; echo "$p"; }

jobkit_torch_trial() { # KIND TRIAL
  local kind=$1 t=$2 w=$work/$1-$2 job fault pid host line
  rm -rf "$w" && mkdir -p "$w"
  job=$(env JOBKIT="$build/src/cli/jobkit" PYTHON="$python" SCRIPT="$script" CHECKPOINTS="$w/jk" MAX_RESTARTS=4 \
    FOLD=0 PYTHONUNBUFFERED=1 sbatch --parsable --chdir="$w" --output="$w/job.out" --nodes=2 --ntasks-per-node=2 \
    --cpus-per-task=1 --time=10 "$repo/slurm/train-python.sbatch" --ckpt "$w/ckpt" --result "$w/result") ||
    { record "$kind" "$t" '{"failed":true,"why":"sbatch"}'; return; }
  if ! wait_line 'attempt 0: no checkpoint' "$w/job.out" 120; then
    scancel "$job"
    record "$kind" "$t" '{"failed":true,"why":"never started"}'
    return
  fi
  sleep 2
  read -r pid host <"$w/result.pid.3"
  kill -KILL "$pid"
  fault=$(date +%s.%N)
  wait_gone "$job" 150 || echo "$kind trial $t: job $job cancelled after 150 s"
  line=$("$python" "$parse" torch "$w/job.out" "$fault" "$w/jk/jobkit-ledger-$job.jsonl")
  line=${line%\}}
  line+=",\"exact\":$([[ $(cat "$w/result" 2>/dev/null) == 8200 ]] && echo true || echo false)"
  line+=",\"node\":\"$host\",\"job\":$job}"
  record "$kind" "$t" "$line"
  [[ $line == *'"mttr_s": '[0-9]* ]] || cut -c1-400 "$w/job.out" >"$logs/$kind-$t.log"
}

requeue_trial() { # KIND TRIAL
  local kind=$1 t=$2 w=$work/$1-$2 job fault
  rm -rf "$w" && mkdir -p "$w"
  job=$(env JOBKIT="$old_build/src/cli/jobkit" PROGRAM="$old_build/examples/jobkit-train-requeue" CHECKPOINTS="$w/ckpt" \
    MAX_RESTARTS=4 JOBKIT_LOG_RANKS=all sbatch --parsable --chdir="$w" --output="$w/job.out" --nodes=2 \
    --ntasks-per-node=2 --time=10 "$old_src/slurm/train-requeue.sbatch" --steps 40 --step-ms 100 --every 10 \
    --result "$w/result") || { record "$kind" "$t" '{"failed":true,"why":"sbatch"}'; return; }
  "$python" "$parse" stamp "$w/job.out" "$w/stamped" "$w/stop" &
  local stamper=$!
  if ! wait_line 'attempt 0: no checkpoint' "$w/job.out" 120; then
    scancel "$job"
    touch "$w/stop"
    wait "$stamper"
    record "$kind" "$t" '{"failed":true,"why":"never started"}'
    return
  fi
  sleep 2
  kill -KILL "$(cat "$w/result.pid.3")"
  fault=$(date +%s.%N)
  wait_line 'finished' "$w/job.out" 400 || echo "$kind trial $t: never finished"
  wait_gone "$job" 60
  touch "$w/stop"
  wait "$stamper"
  local line restarts
  restarts=$(scontrol show job -o "$job" 2>/dev/null | tr ' ' '\n' | sed -n 's/^Restarts=//p')
  line=$("$python" "$parse" requeue "$w/stamped" "$fault" 0.1)
  line=${line%\}}
  line+=",\"exact\":$([[ $(cat "$w/result" 2>/dev/null) == 8200 ]] && echo true || echo false),\"restarts\":\"$restarts\",\"job\":$job}"
  record "$kind" "$t" "$line"
}

for ((t = 1; t <= trials; t++)); do
  for kind in $kinds; do
    case $kind in
      torchrun-kill-default) ((t <= trials_default)) || continue ;;
      *-lost) ((t <= trials_lost)) || continue ;;
    esac
    case $kind in
      jobkit-kill) jobkit_trial kill "$kind" "$t" ;;
      jobkit-lost-spare) jobkit_trial lost-spare "$kind" "$t" ;;
      jobkit-kill-torch) jobkit_torch_trial "$kind" "$t" ;;
      torchrun-* | ft-*) torch_trial "$kind" "$t" ;;
      requeue240-kill) requeue_trial "$kind" "$t" ;;
      *) echo "unknown kind $kind"; exit 2 ;;
    esac
  done
  echo "round $t done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
"$python" "$parse" summary "$results"
