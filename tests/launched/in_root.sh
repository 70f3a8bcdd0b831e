#!/usr/bin/env bash
# in_root.sh ROOT CMD...: runs CMD inside another platform's root from inside a step's task, as a
# container runtime would (pyxis/enroot, Apptainer): the task's environment (PMIX_*, SLURM_*) and
# network namespace, and its node's /proc, /dev, /dev/shm, /tmp, /sys, /etc/hosts and munge socket, with the
# repository and the dev cluster's state dir (where Slurm's PMIx server keeps its directory) at the
# same paths. Needs root (the dev cluster runs tasks as root). The cross-version tests run a
# program built on one Debian release under the other release's srun with it.
set -euo pipefail
root=$(realpath "$1")
shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cluster_dir=$(dirname "${SLURM_CONF:?in_root.sh runs inside a step of the dev cluster}")
exec unshare --mount --propagation private bash -c '
  set -euo pipefail
  root=$1 repo=$2 cluster_dir=$3
  shift 3
  bind() {  # what, where (made when missing and the root is writable)
    [[ -e $root$2 ]] || mkdir -p "$root$2"
    mount --rbind "$1" "$root$2"
  }
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  bind /dev /dev
  bind /dev/shm /dev/shm
  bind /sys /sys
  bind /tmp /tmp
  mount --bind /etc/hosts "$root/etc/hosts"
  # munge: the PMIx server authenticates its clients with the node'"'"'s munged (psec munge).
  [[ ! -d /run/munge ]] || bind /run/munge /run/munge
  bind "$repo" "$repo"
  bind "$cluster_dir" "$cluster_dir"
  exec chroot "$root" bash -c "cd \"\$0\" && exec \"\$@\"" "$PWD" "$@"
' in-root "$root" "$repo" "$cluster_dir" "$@"
