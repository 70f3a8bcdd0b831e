# Shared by the launched tests: find the dev cluster or skip (exit 77, meson's skip status).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)

skip() {
  echo "SKIP: $*"
  exit 77
}

need_cluster() {
  command -v srun >/dev/null || skip "srun not installed (apt-get install slurm-client)"
  eval "$("$repo/slurm/dev-cluster.sh" env)"
  timeout 10 sinfo -h >/dev/null 2>&1 ||
    skip "no Slurm cluster answers at SLURM_CONF=$SLURM_CONF; start one with slurm/dev-cluster.sh start"
  local nodes
  nodes=$(sinfo -h -N -o %N | sort -u | wc -l)
  ((nodes >= 3)) || skip "the dev cluster has $nodes nodes, these tests need 3"
}

need_mpirun() {
  command -v mpirun >/dev/null || skip "mpirun not installed (apt-get install openmpi-bin)"
}

mpirun_=(mpirun --allow-run-as-root --oversubscribe)
