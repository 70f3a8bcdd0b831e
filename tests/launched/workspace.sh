#!/usr/bin/env bash
# jobkit's workspace and node_local_gather on the dev cluster (3 nodes; each has its own /tmp and
# /dev/shm, every other path is shared). The workspaces live next to BINARY, in the shared tree.
# usage: workspace.sh MODE BINARY
#   MODE: gather-cross, gather-node, race, steps, kill, blocked, exit-before, missing
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes gather-cross gather-node race steps kill blocked exit-before missing
mode=$1
binary=$2
need_cluster

root=$(cd "$(dirname "$binary")" && pwd -P)/workspace-root/$mode
rm -rf "$root"
mkdir -p "$root"

# The jobkit segments left in /dev/shm on every node (each node has its own).
segments_left() {
  timeout 30 srun -N3 --ntasks-per-node=1 sh -c 'ls /dev/shm | sed "s/^/$(hostname): /"' 2>&1 | grep 'jobkit-'
}

check_clean() {
  local left
  left=$(find "$root" -mindepth 1)
  [[ -z $left ]] || fail "files left in the workspace root: $left"
  left=$(segments_left)
  [[ -z $left ]] || fail "shared memory segments left: $left"
}

step=(timeout 60 srun --mpi=pmix)
case $mode in
  gather-cross) run_step "${step[@]}" -N3 -n7 "$binary" gather-cross "$root" ;;
  gather-node) run_step "${step[@]}" -N3 -n7 "$binary" gather-node ;;
  race) run_step timeout 300 srun --mpi=pmix -N3 -n3 "$binary" race "$root" "${JOBKIT_RACE_WRITES:-3000}" ;;
  steps)
    # Two steps of one job at the same time, with the same ranks on the same nodes.
    run_step timeout 120 salloc -N3 -n6 bash -c "
      rm -f '$root'.half-*
      srun --overlap --mpi=pmix -N3 -n6 '$binary' steps '$root' 40 >'$root.a' 2>&1 & a=\$!
      srun --overlap --mpi=pmix -N3 -n6 '$binary' steps '$root' 40 >'$root.b' 2>&1 & b=\$!
      wait \$a; sa=\$?; wait \$b; sb=\$?
      cat '$root.a' '$root.b'; rm -f '$root.a' '$root.b' '$root'.half-*
      echo \"statuses \$sa \$sb\"; exit \$((sa + sb))" ;;
  kill) run_step "${step[@]}" -N1 -n4 -w c2 "$binary" kill ;;
  blocked) run_step "${step[@]}" -N1 -n3 -w c3 "$binary" blocked ;;
  exit-before) run_step "${step[@]}" -N3 -n7 "$binary" exit-before ;;
  missing) run_step "${step[@]}" -N3 -n7 "$binary" missing "$root" ;;
  *) fail "unknown mode $mode" ;;
esac

case $mode in
  gather-cross)
    ((status == 0)) || fail "exit status $status"
    (($(count 'cross-node (no workspace) route collectives, .*0 bad states') == 7)) || fail "the collectives gather is wrong"
    (($(count 'cross-node (workspace) route workspace, .*0 bad states') == 7)) || fail "the workspace gather is wrong"
    (($(count 'gathered 7, 0 bad') == 2)) || fail "rank 5 did not gather 7 states twice" ;;
  gather-node)
    ((status == 0)) || fail "exit status $status"
    (($(count 'node group route shared_memory, .*0 bad states') == 7)) || fail "a node gather is wrong"
    (($(count 'node group route shared_memory, gathered') == 3)) || fail "not one gathering rank per node"
    # The layout varies with the cluster's load: compare with the first node's ranks.
    first_node=$(count 'reversed node list')
    ((first_node > 1)) || fail "the first node holds $first_node ranks, too few for the test"
    (($(count 'reversed node list route shared_memory, .*0 bad states') == first_node)) || fail "the reversed gather is wrong"
    (($(count 'reversed node list route shared_memory, gathered') == 1)) || fail "not one gathering rank" ;;
  race)
    ((status == 0)) || fail "exit status $status"
    grep -q "rank 2: wrote ${JOBKIT_RACE_WRITES:-3000} states" <<<"$out" || fail "the writer did not finish"
    grep -Eq 'rank 0: [0-9]+ reads .* [0-9]+ distinct states, 0 partial' <<<"$out" || fail "a read saw a partial state"
    distinct=$(sed -n 's/.* \([0-9]*\) distinct states.*/\1/p' <<<"$out")
    ((distinct > 1)) || fail "the reader never saw the state change: no race took place" ;;
  steps)
    ((status == 0)) || fail "exit status $status"
    (($(count 'states checked, 0 not of this step and round') == 12)) || fail "a step saw the other's data"
    (($(count '^rank [0-9] step 0:') == 6 && $(count '^rank [0-9] step 1:') == 6)) || fail "not two steps of 6 ranks"
    read -r start0 end0 < <(sed -n 's/^step 0 ran from \([0-9]*\) to \([0-9]*\)$/\1 \2/p' <<<"$out")
    read -r start1 end1 < <(sed -n 's/^step 1 ran from \([0-9]*\) to \([0-9]*\)$/\1 \2/p' <<<"$out")
    overlap=$(((end0 < end1 ? end0 : end1) - (start0 > start1 ? start0 : start1)))
    ((overlap > 0)) || fail "the two steps did not run at the same time" ;;
  kill)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'rank 3: killing myself while holding /dev/shm/jobkit-') == 1)) || fail "rank 3 was not killed holding its segment"
    # Its node-mates see it through its pidfd (they wait in shared memory), or its closed connection.
    (($(count 'rank error: rank 3 (c2) \(closed its connection\|exited\)') == 3)) || fail "not every other rank named the dead rank"
    (($(count 'despite the death') == 0)) || fail "a rank missed the death"
    check_clean
    run_step "${step[@]}" -N1 -n4 -w c2 "$binary" gather-node
    ((status == 0)) || fail "the next run failed: exit status $status"
    (($(count 'node group route shared_memory, .*0 bad states') == 4)) || fail "the next run gathered wrong states" ;;
  blocked)
    ((status != 0)) || fail "the step succeeded"
    # The failing rank says it; the others name their own call (the barrier they waited in) first.
    (($(count 'rank error: \(barrier at workspace_check.cpp:[0-9]*: \)\?node_local_gather: rank 2 (c3) cannot remove the shared memory segment /jobkit-[0-9]*\.[0-9]*-2 left by an earlier attempt') == 3)) ||
      fail "not every rank got the failing rank's message"
    (($(count 'despite the obstacle') == 0)) || fail "a rank passed the gather" ;;
  exit-before)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'rank error: rank 6 (c3) closed its connection') == 6)) || fail "not every other rank named the rank that exited"
    (($(count 'succeeded without') == 0)) || fail "a rank passed the gather"
    # Each survivor's own gather time (JOBKIT_TIMEOUT's deadline is minutes): the whole step's time
    # also holds its launch, which took over 10 s once on a loaded machine.
    (($(count 'the gather failed after') == 6)) || fail "not every other rank timed its failed gather"
    while read -r ms; do
      ((ms < 10000)) || fail "a gather failed after ${ms} ms: a rank waited for a deadline"
    done < <(sed -n 's/.*the gather failed after \([0-9]*\) ms.*/\1/p' <<<"$out") ;;
  missing)
    ((status != 0)) || fail "the step succeeded"
    for r in 0 1 2 3 4 5 6; do
      target=$(((r + 1) % 7))
      grep -Eq "^rank timeout_error: workspace: the state of rank $target \(c[123]\) did not appear at $root/jobkit-ws-[0-9]+\.[0-9]+/rank-$target\.state within 1000 ms \(read on rank $r " <<<"$out" ||
        fail "rank $r's error does not name rank $target, its path and the deadline"
    done ;;
esac
check_clean
echo "ok"
