#!/usr/bin/env bash
# The CPU-hungry templates (train-gpu, train-python: #SBATCH --cpus-per-task=8) under CPU
# binding, as real clusters bind tasks (task/affinity): every task's CPU set, read from
# /proc/self/status inside the step, must hold the CPUs per task that the template asks for.
#
# The suite's cluster runs without binding, so this test starts a second dev cluster of its
# own (JOBKIT_CLUSTER_BIND=1: task/affinity, nodes with this machine's real CPUs; its own
# state dir, port and subnet) and stops it at the end, whatever happens: the suite's cluster
# is never touched. The template's CPU count is scaled to what a node has (8 -> 2 on a
# 2-CPU machine). Each template runs twice:
# - as submitted plainly: steps may use every CPU of the job (Slurm's default);
# - with SLURM_EXACT=1: steps get only what they ask for. This shows a template whose srun
#   does not pass on --cpus-per-task (Slurm 22.05 to 23.02 do not take it from the job) even
#   with one task per node; without --exact that needs 2 tasks x 2 CPUs on a node, which
#   the layout uses when the machine has 4 CPUs or more.
# usage: cpu_binding.sh JOBKIT WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
jobkit=$(realpath "$1")
work=$(realpath -m "$2")

[[ $(id -u) == 0 ]] || skip "needs root: it starts a dev cluster of its own (slurm/dev-cluster.sh)"
if ! command -v srun >/dev/null || ! command -v slurmd >/dev/null; then
  skip "Slurm not installed (apt-get install slurmctld slurmd slurm-client munge)"
fi

cluster=$repo/slurm/dev-cluster.sh
# The suite's cluster's settings (this platform's defaults unless set); the binding cluster takes
# the next port block and the next subnet.
eval "$("$cluster" settings)"
# The network mode of the suite's cluster, if one runs; else dev-cluster.sh's own choice.
net=$("$cluster" net-mode 2>/dev/null) || net=${JOBKIT_CLUSTER_NET:-auto}
export JOBKIT_CLUSTER_DIR=$cluster_dir-bind
export JOBKIT_CLUSTER_PORT=$((cluster_port + 100))
export JOBKIT_CLUSTER_SUBNET=${cluster_subnet%.*}.$((${cluster_subnet##*.} + 1))
export JOBKIT_CLUSTER_NET=$net JOBKIT_CLUSTER_BIND=1

stop_cluster() { "$cluster" stop >/dev/null 2>&1 || "$cluster" stop; }
trap stop_cluster EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

start=$(date +%s%N)
"$cluster" start 3 || fail "could not start the binding cluster"
echo "binding cluster started in $((($(date +%s%N) - start) / 1000000)) ms"
echo "network: $("$cluster" net-mode)"
eval "$("$cluster" env)"
grep -q '^TaskPlugin=task/affinity' "$SLURM_CONF" || fail "the binding cluster does not run task/affinity"

cpus=$(sinfo -h -N -o %c | sort -u)
[[ $cpus =~ ^[1-9][0-9]*$ ]] || fail "the nodes do not all have one CPU count: $cpus"
if ((cpus >= 4)); then tasks_per_node=2; else tasks_per_node=1; fi
per_task=$((cpus / tasks_per_node))
echo "cpu binding: task/affinity, $cpus CPUs per node: $tasks_per_node task(s) per node x $per_task CPUs"

rm -rf "$work" && mkdir -p "$work"
cat >"$work/cpuset.sh" <<'EOF'
#!/usr/bin/env bash
# One line per task: its rank, node and CPU set (from the kernel, as bound by Slurm).
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
echo "cpuset: rank ${RANK:-$SLURM_PROCID} on $(hostname) cpus $cpus"
EOF
cat >"$work/cpuset.py" <<'EOF'
import os, socket
cpus = sorted(os.sched_getaffinity(0))
print(f"cpuset: rank {os.environ['RANK']} on {socket.gethostname()} cpus {','.join(map(str, cpus))}",
      flush=True)
EOF
chmod +x "$work/cpuset.sh"

# expand_cpus LIST: the CPUs a list such as 0-3,6 names, one per word.
expand_cpus() {
  local part
  local IFS=,
  for part in $1; do
    if [[ $part == *-* ]]; then seq -s ' ' "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done | paste -sd' '
}

# check TEMPLATE EXACT: submits a copy of slurm/TEMPLATE with its CPUs per task scaled to
# the nodes, and checks every task's CPU set; on failure, says why and returns 1.
check() {
  local template=$1 exact=$2 asked copy name
  name=${template%.sbatch}${exact:+-exact}
  asked=$(sed -n 's/^#SBATCH --cpus-per-task=\([0-9]*\).*/\1/p' "$repo/slurm/$template")
  [[ $asked =~ ^[0-9]+$ ]] || fail "$template has no #SBATCH --cpus-per-task line"
  ((asked >= per_task)) || fail "$template asks $asked CPUs per task, fewer than this test's $per_task"
  copy=$work/$name.sbatch
  # The GPU template runs as a CPU variant (its --gpus-per-task line removed).
  sed -e '/^#SBATCH --gpus-per-task/d' \
    -e "s/^#SBATCH --cpus-per-task=$asked\\b/#SBATCH --cpus-per-task=$per_task/" \
    "$repo/slurm/$template" >"$copy"
  echo "=== $template (asks $asked CPUs per task; submitted with $per_task)${exact:+, SLURM_EXACT=1}"
  rm -f "$work"/*.out
  run_step env ${exact:+SLURM_EXACT=1} JOBKIT="$jobkit" PROGRAM="$work/cpuset.sh" SCRIPT="$work/cpuset.py" \
    PYTHON=/usr/bin/python3 timeout 300 sbatch --wait --chdir="$work" --output="$work/%x-%j.out" \
    --nodes=3 --ntasks-per-node="$tasks_per_node" "$copy"
  ((status == 0)) || { echo "FAIL: $name: sbatch --wait exit status $status"; return 1; }
  out=$(cat "$work"/*.out | unfold | sed "s/^\\[rank: [0-9]*\\] //")  # each rank's lines, as it wrote them
  echo "--- job output"
  echo "$out"
  local lines rank host list c bad=0 ranks=$((3 * tasks_per_node))
  local -a cpuset
  local -A seen=()
  lines=$(grep '^cpuset: ' <<<"$out")
  (($(grep -c . <<<"$lines") == ranks)) || { echo "FAIL: $name: expected $ranks cpuset lines, one per task"; return 1; }
  while read -r _ _ rank _ host _ list; do
    read -ra cpuset <<<"$(expand_cpus "$list")"
    if ((${#cpuset[@]} != per_task)); then
      echo "rank $rank on $host: CPUs $list (${#cpuset[@]}), expected $per_task"
      bad=1
    fi
    for c in "${cpuset[@]}"; do  # tasks on one node must not share CPUs
      if [[ -n ${seen[$host/$c]+x} ]]; then echo "rank $rank on $host shares CPU $c"; bad=1; fi
      seen[$host/$c]=1
    done
  done <<<"$lines"
  ((bad == 0)) || { echo "FAIL: $name: not every task got the $per_task CPUs per task it asked for"; return 1; }
  echo "$name: every task has $per_task CPUs"
}

failed=()
for template in train-gpu.sbatch train-python.sbatch; do
  for exact in "" 1; do
    check "$template" "$exact" || failed+=("${template%.sbatch}${exact:+-exact}")
  done
done
((${#failed[@]} == 0)) || fail "tasks without the CPUs they asked for: ${failed[*]}"
echo ok
