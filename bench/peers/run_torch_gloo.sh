#!/usr/bin/env bash
# PEER HARNESS ONLY (not part of jobkit): runs bench/peers/torch_gloo.py inside a Slurm step,
# deriving torch's env:// rendezvous variables from Slurm's. A later jobkit feature is meant to set
# RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT itself; this wrapper only stands in for it here.
#
#   srun --mpi=pmix -N3 -n24 bench/peers/run_torch_gloo.sh MASTER_PORT [torch_gloo.py args...]
#
#   RANK        = SLURM_PROCID
#   WORLD_SIZE  = SLURM_STEP_NUM_TASKS
#   MASTER_ADDR = first host of `scontrol show hostnames $SLURM_STEP_NODELIST`
#   MASTER_PORT = first argument (chosen by the caller; must be free on MASTER_ADDR)
# These four are always set here (an inherited RANK from the caller's shell would be wrong in every
# task). Other variables pass through, e.g. GLOO_SOCKET_IFNAME (gloo's interface; unset, this script
# picks the interface of the node's first global IPv4 address).
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
  echo "usage: srun ... $0 MASTER_PORT [torch_gloo.py args...]" >&2
  exit 2
fi
port=$1
shift
: "${SLURM_PROCID:?not inside a Slurm step (SLURM_PROCID unset)}"
: "${SLURM_STEP_NUM_TASKS:?not inside a Slurm step (SLURM_STEP_NUM_TASKS unset)}"
: "${SLURM_STEP_NODELIST:?not inside a Slurm step (SLURM_STEP_NODELIST unset)}"

export RANK=$SLURM_PROCID
export WORLD_SIZE=$SLURM_STEP_NUM_TASKS
MASTER_ADDR=$(scontrol show hostnames "$SLURM_STEP_NODELIST" | head -n1)
[[ -n $MASTER_ADDR ]] || { echo "$0: no host in SLURM_STEP_NODELIST=$SLURM_STEP_NODELIST" >&2; exit 1; }
export MASTER_ADDR
export MASTER_PORT=$port
# gloo announces the address this host's name resolves to (127.0.1.1 on Debian): give it the
# interface of this node's first global address instead, unless the caller chose one.
if [[ -z ${GLOO_SOCKET_IFNAME:-} ]]; then
  GLOO_SOCKET_IFNAME=$(ip -o -4 addr show scope global 2>/dev/null | awk 'NR == 1 {print $2}')
  [[ -n $GLOO_SOCKET_IFNAME ]] && export GLOO_SOCKET_IFNAME || unset GLOO_SOCKET_IFNAME
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# Through from_exec.sh, as jobkit_loop runs: torch_gloo.py's from_exec_us counts Python's start.
exec "$here/../from_exec.sh" /usr/bin/python3 "$here/torch_gloo.py" "$@"
