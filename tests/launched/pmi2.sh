#!/usr/bin/env bash
# jobkit through Slurm's PMI-2 (srun --mpi=pmi2, for clusters without mpi/pmix) on the dev cluster.
# usage: pmi2.sh MODE JOBKIT_BINARY COLLECTIVES_CHECK
#   block, cyclic, plane: `jobkit info --json` with JOBKIT_IDENTITY=pmi2 (PMI2_Init and
#     PMI_process_mapping alone, no Slurm variable) checked against Slurm's truth, for srun's
#     default (5 + 1 + 1 ranks), cyclic and plane=2 placements of 7 ranks on 3 nodes
#   auto: the same, discovered (JOBKIT_IDENTITY unset: PMI-2 chosen, Slurm's variables cross-checked)
#   arbitrary: 4 + 2 + 1 ranks placed by a host file, where Slurm's mpi/pmi2 serves a mapping
#     with every task on a node of its own: the node values must come from Slurm's variables
#   groups, bulk: collectives_check's node groups, leaders, explicit lists, and bulk transfers
#   cli: jobkit broadcast and barrier
#   die: the last rank is killed during barriers: every other rank names it within 5 s
#   dead: a rank exits before reaching jobkit: the others fail at their 2 s deadline, saying PMI-2
#     cannot name the missing rank
#   no-library: JOBKIT_LIBPMI2 names no library: every rank says so and exits, none hangs
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes block cyclic plane auto arbitrary groups bulk cli die dead no-library
mode=$1
jobkit=$2
check_binary=$3
need_cluster
srun --mpi=list 2>&1 | grep -qw pmi2 || skip "this Slurm has no mpi/pmi2 plugin"
probe=("$here/probe.sh" "$jobkit" info --json)
check=("$here/check_identity.py" --ranks 7 --source pmi2 --launcher slurm)
step=(timeout 60 srun --mpi=pmi2)

case $mode in
  block | cyclic | plane)
    distribution=$mode
    [[ $mode == plane ]] && distribution=plane=2
    extra=()
    [[ $mode != block ]] && extra=(--cyclic)
    run_step env JOBKIT_IDENTITY=pmi2 "${step[@]}" -N3 -n7 --distribution="$distribution" "${probe[@]}"
    ((status == 0)) || fail "exit status $status"
    "${check[@]}" "${extra[@]}" <<<"$out" || fail "identity check" ;;
  auto)
    run_step "${step[@]}" -N3 -n7 "${probe[@]}"
    ((status == 0)) || fail "exit status $status"
    "${check[@]}" <<<"$out" || fail "identity check" ;;
  arbitrary)
    hostfile=$(mktemp /var/tmp/jobkit-hostfile.XXXXXX)
    trap 'rm -f "$hostfile"' EXIT
    printf '%s\n' c1 c1 c1 c1 c2 c2 c3 >"$hostfile"
    run_step env SLURM_HOSTFILE="$hostfile" "${step[@]}" --distribution=arbitrary -n7 "${probe[@]}"
    ((status == 0)) || fail "exit status $status"
    "${check[@]}" --layout 4,2,1 <<<"$out" || fail "identity check" ;;
  groups)
    run_step "${step[@]}" -N3 -n7 "$check_binary" groups
    ((status == 0)) || fail "exit status $status"
    (($(count 'node group ok, leaders ok, explicit list ok') == 7)) || fail "a group does not match the layout" ;;
  bulk)
    run_step timeout 120 srun --mpi=pmi2 -N3 -n9 --distribution=cyclic "$check_binary" bulk
    ((status == 0)) || fail "exit status $status"
    (($(count 'bulk [0-9]* checks, 0 bad values') == 9)) || fail "not every rank checked every value" ;;
  cli)
    export JOBKIT_BIN=$jobkit
    run_step bash -c "printf 'run-42\\n' | ${step[*]} -N3 -n7 '$jobkit' broadcast --root 3"
    ((status == 0)) || fail "broadcast: exit status $status"
    (($(count '^run-42$') == 7)) || fail "not every rank printed the broadcast line"
    run_step "${step[@]}" -N3 -n7 bash -c '"$JOBKIT_BIN" barrier && echo "rank $SLURM_PROCID passed"'
    ((status == 0)) || fail "barrier: exit status $status"
    (($(count 'passed') == 7)) || fail "not every rank passed the barrier" ;;
  die)
    run_step "${step[@]}" -N3 -n9 "$check_binary" die kill barrier
    last_rank_died_and_was_named ;;
  dead)
    export JOBKIT_BIN=$jobkit
    run_step "${step[@]}" -N3 -n7 bash -c \
      '[[ $SLURM_PROCID == 4 ]] && exit 5; "$JOBKIT_BIN" barrier --timeout 2; echo "rank $SLURM_PROCID status $?"'
    ((status != 0)) || fail "the step succeeded"
    (($(count 'status 1') == 6)) || fail "not every other rank failed with status 1"
    (($(count 'the PMI-2 fence over all ranks timed out after 2000 ms') == 6)) ||
      fail "not every other rank reported the deadline"
    (($(count "PMI-2) cannot say which rank never arrived.*--kill-on-bad-exit=1") == 6)) ||
      fail "not every other rank said why it cannot name the rank"
    ((elapsed_ms < 20000)) || fail "took ${elapsed_ms} ms" ;;
  no-library)
    run_step env JOBKIT_LIBPMI2=/nonexistent/libpmi2.so.0 "${step[@]}" -N2 -n3 "$jobkit" info
    ((status != 0)) || fail "the step succeeded"
    (($(count 'no PMI-2 client library could be loaded: tried /nonexistent/libpmi2.so.0') == 3)) ||
      fail "not every rank named the library it tried" ;;
esac
echo "ok"
