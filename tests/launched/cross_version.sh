#!/usr/bin/env bash
# Both directions across versions: the programs of the OTHER platform's build, run under this
# platform's srun inside the other platform's root (tests/launched/in_root.sh, as a container is):
# on Debian 12, Debian 13's build (PMIx 5.0.7 client) under Slurm 22.05's PMIx 4.2.2 server; on
# Debian 13, Debian 12's build (PMIx 4.2.2 client) under Slurm 24.11's PMIx 5.0.7 server. Checks
# exact identity on an uneven and a cyclic layout and the collectives' values.
# usage: cross_version.sh MODE
# The other build: JOBKIT_OTHER_BUILD_DIR, by default build-test-13 (on Debian 12) or build-test
# (on Debian 13). scripts/test-all.sh builds both platforms side by side and marks a build that is
# still being made (OTHER/.jobkit-building): these tests, run last in their suite, wait for it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes identity cyclic stress groups
mode=$1

if [[ $(. /etc/os-release && echo "${VERSION_CODENAME:-}") == trixie ]]; then
  other=${JOBKIT_OTHER_BUILD_DIR:-$repo/build-test} other_name="Debian 12" root=/host
else
  other=${JOBKIT_OTHER_BUILD_DIR:-$repo/build-test-13} other_name="Debian 13"
  root=$("$repo/scripts/debian13.sh" path)
  [[ -f $root/.jobkit-ready ]] || skip "no Debian 13 root at $root (scripts/debian13.sh root makes it)"
fi
deadline=$((SECONDS + 1500))
[[ ! -e $other/.jobkit-building ]] || echo "waiting for the $other_name build at $other to end"
while [[ -e $other/.jobkit-building ]] && ((SECONDS < deadline)); do sleep 5; done
[[ ! -e $other/.jobkit-building ]] || fail "the $other_name build at $other was still being made after 1500 s"
jobkit=$other/src/cli/jobkit
collectives_check=$other/tests/launched/collectives_check
[[ -x $jobkit && -x $collectives_check ]] ||
  skip "no $other_name build at $other (scripts/test-all.sh builds both platforms before testing)"
[[ $(id -u) == 0 ]] || skip "needs root: in_root.sh enters the other root (chroot) inside each task"
need_cluster
in_other=("$here/in_root.sh" "$root")
echo "this platform: $(srun --version), PMIx server $(pkg-config --modversion pmix); running $other_name's build"
check=("$here/check_identity.py")

case $mode in
  identity)
    hostfile=$(mktemp /var/tmp/jobkit-hostfile.XXXXXX)
    trap 'rm -f "$hostfile"' EXIT
    printf '%s\n' c1 c1 c1 c1 c2 c2 c3 >"$hostfile"
    SLURM_HOSTFILE=$hostfile timeout 120 srun --mpi=pmix --distribution=arbitrary -n7 \
      "$here/probe.sh" "${in_other[@]}" "$jobkit" info --json |
      "${check[@]}" --ranks 7 --source pmix --launcher slurm --layout 4,2,1 ;;
  cyclic)
    timeout 120 srun --mpi=pmix -N3 -n6 --ntasks-per-node=2 --distribution=cyclic \
      "$here/probe.sh" "${in_other[@]}" "$jobkit" info --json |
      "${check[@]}" --ranks 6 --source pmix --launcher slurm --cyclic ;;
  stress)
    run_step timeout 300 srun --mpi=pmix -N3 -n12 "${in_other[@]}" "$collectives_check" stress 2000
    ((status == 0)) || fail "exit status $status"
    (($(count ' 0 bad values') == 12)) || fail "not every rank checked every value" ;;
  groups)
    run_step timeout 120 srun --mpi=pmix -N3 -n7 "${in_other[@]}" "$collectives_check" groups
    ((status == 0)) || fail "exit status $status"
    (($(count 'node group ok, leaders ok, explicit list ok') == 7)) || fail "a group does not match the layout" ;;
esac
echo ok
