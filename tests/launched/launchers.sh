#!/usr/bin/env bash
# What each launcher's PMIx server serves, and jobkit's identity under it, on uneven and cyclic
# layouts over the dev cluster's 3 nodes:
#   srun        srun --mpi=pmix -N3 -n7 (block: uneven) and -N3 -n6 -m cyclic
#   mpirun      Open MPI's mpirun inside an allocation (sbatch; mpirun starts its daemons with srun):
#               --host c1:4,c2:2,c3:1 (uneven) and --host c1:2,c2:2,c3:2 --map-by node (cyclic)
#   mpirun-gap  mpirun on c1 placing ranks on c2 and c3 only: the launcher's node ids are 1 and 2
#               (mpirun's host is node 0), jobkit's node ranks must be 0 and 1
# Writes launchers-MODE.md (tests/launched/launcher_table.py: each key's PMIx type and value per
# rank) into OUT_DIR, then checks `jobkit info --json` of every rank with check_identity.py.
# usage: launchers.sh MODE JOBKIT_BINARY PMIX_KEYS_BINARY OUT_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes srun mpirun mpirun-gap
mode=$1
jobkit=$2
keys=$3
out_dir=$4
check=("$here/check_identity.py")
need_cluster
[[ $mode == srun ]] || need_mpirun
work=$(mktemp -d "$out_dir/launchers-$mode.XXXXXX")
trap 'rm -rf "$work"' EXIT
table=$out_dir/launchers-$mode.md
launcher_version() {
  if [[ $mode == srun ]]; then srun --version; else mpirun --version | head -1; fi
}

# layout NAME RANKS CHECK_ARGS -- LAUNCH...: the key dump and the identity probe under LAUNCH.
layouts=()
layout() {
  local name=$1 ranks=$2 check_args=$3
  shift 4
  echo "--- $name: $*"
  mkdir "$work/$name"
  run_step "$@" "$keys" "$work/$name" >/dev/null || :
  ((status == 0)) || fail "the key dump ($name) failed: $out"
  cat "$work/$name"/rank-*.keys >"$work/$name.keys" || fail "no key lines ($name)"
  run_step "$@" "$here/probe.sh" "$jobkit" info --json || :
  ((status == 0)) || fail "jobkit info ($name) failed"
  # shellcheck disable=SC2086 # check_args are words
  grep '^{' <<<"$out" | "${check[@]}" --ranks "$ranks" --source pmix $check_args ||
    fail "jobkit's identity ($name) is not the launcher's"
  layouts+=("$name=$work/$name.keys")
}

case $mode in
  srun)
    layout uneven 7 "--launcher slurm" -- timeout 90 srun --mpi=pmix -N3 -n7
    layout cyclic 6 "--launcher slurm --cyclic" -- timeout 90 srun --mpi=pmix -N3 -n6 -m cyclic
    ;;
  mpirun | mpirun-gap)
    # Inside an allocation: a batch script on c1 (the allocation's first node) runs mpirun, which
    # starts its daemons on the other nodes with srun (Open MPI 5: srun --external-launcher).
    mpirun_in_allocation() {
      local script=$work/mpirun.sbatch log=$work/mpirun.log
      {
        echo '#!/bin/bash'
        echo 'export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1'
        printf '%q ' mpirun --bind-to none "$@"
        echo
      } >"$script"
      timeout 120 sbatch -Q --wait -N3 --ntasks-per-node=4 -o "$log" "$script" || { cat "$log"; return 1; }
      cat "$log"
    }
    if [[ $mode == mpirun ]]; then
      layout uneven 7 "--launcher mpirun --layout 4,2,1" -- mpirun_in_allocation --host c1:4,c2:2,c3:1 -n 7
      layout cyclic 6 "--launcher mpirun --cyclic --layout 2,2,2" -- \
        mpirun_in_allocation --host c1:2,c2:2,c3:2 -n 6 --map-by node
    else
      layout gap 4 "--launcher mpirun --layout 2,2" -- mpirun_in_allocation --host c2:2,c3:2 -n 4
      # The reproduction itself: mpirun's node ids for c2 and c3 are not 0 and 1.
      ids=$(awk '$3 == "of=self" && $4 == "key=PMIX_NODEID" {print $6}' "$work/gap.keys" | sort -u | tr '\n' ' ')
      echo "PMIX_NODEID of the ranks: $ids"
      [[ $ids == "value=1 value=2 " ]] || echo "note: no gap in the node ids this time ($ids)"
    fi
    ;;
esac

"$here/launcher_table.py" --title "$(launcher_version) ($(uname -n), $(date -u +%Y-%m-%d), jobkit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown))" \
  "${layouts[@]}" >"$table"
echo "table written: $table"
cat "$table"
