#!/usr/bin/env bash
# A node that goes silent: no FIN, no RST, every packet to and from it dropped (nftables in its
# network namespace; its traffic with the bridge address, slurmd's and srun's, is kept so that
# Slurm does not notice), on 3 nodes x 2 ranks looping barriers (lost_node_check.cpp).
# Usage: lost_node.sh MODE LOST_NODE_CHECK
#   idle       the last node goes silent (ranks frozen) while every rank sleeps; the others then
#              enter a barrier: they fail within the limit, naming the node and its ranks
#   mid        the same while the others already wait in the barrier for the last node's ranks
#   partition  the last node is cut off but its ranks keep running: every rank fails, the last
#              node's naming the node it lost
#   creation   the same while the others wait in make_group for the last node's ranks
#   default    mid at the default limit (8 s): within 10 s
#   stall      the last node's ranks stopped (SIGSTOP) for 3 s mid-loop: no failure, default limit
#   blackout   every packet to and from the last node dropped for 3 s mid-loop: no failure,
#              default limit
# LOST_NODE_LIMIT: the JOBKIT_LOST_NODE_TIMEOUT of idle, mid and partition (default 2; seconds).
# bench/lost_node.sh runs mid and default many times for the detection times of bench/RESULTS.md.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes idle mid creation partition default stall blackout
mode=$1
binary=$2
need_cluster
[[ $("$repo/slurm/dev-cluster.sh" net-mode 2>/dev/null) == netns ]] ||
  skip "the dev cluster runs without network namespaces: no node can be cut off alone"
command -v nft >/dev/null || skip "nft not installed (apt-get install nftables)"
eval "$("$repo/slurm/dev-cluster.sh" settings)"

limit=${LOST_NODE_LIMIT:-2}  # JOBKIT_LOST_NODE_TIMEOUT of the quick cases, seconds
case $mode in
  idle) args=(5000 5000 1) ;;
  mid | default) args=(60000 0 1) ;;
  creation) args=(60000 0 1 group) ;;
  partition) args=(5000 5000 1) ;;
  stall | blackout) args=(0 0 400) ;;
esac
[[ $mode == default || $mode == stall || $mode == blackout ]] && limit=

log=$(mktemp)
frozen=()
ns=
cut_off() {
  ip netns exec "$ns" nft -f - <<EOF
table inet jobkit_lost_node {
  chain in { type filter hook input priority 0; iifname "eth0" ip saddr != $cluster_subnet.254 drop; }
  chain out { type filter hook output priority 0; oifname "eth0" ip daddr != $cluster_subnet.254 drop; }
}
EOF
}
reconnect() { [[ -z $ns ]] || ip netns exec "$ns" nft delete table inet jobkit_lost_node 2>/dev/null; }
cleanup() {
  reconnect
  ((${#frozen[@]} == 0)) || kill -KILL "${frozen[@]}" 2>/dev/null
  rm -f "$log"
}
trap cleanup EXIT

start=$(date +%s%N)
timeout 120 srun --label --mpi=pmix -N3 --ntasks-per-node=2 \
  env ${limit:+JOBKIT_LOST_NODE_TIMEOUT=$limit} "$binary" "${args[@]}" >"$log" 2>&1 &
step=$!
for _ in $(seq 600); do
  (($(grep -c ' ready' "$log") == 6)) && break
  kill -0 $step 2>/dev/null || break
  sleep 0.1
done
(($(grep -c ' ready' "$log") == 6)) || { cat "$log"; fail "the ranks did not all start"; }
# srun --label: each line begins with its task's number.
host=$(sed -n 's/^ *[0-9]*: rank [0-9]* (\([^)]*\)) pid [0-9]* ready on the last node$/\1/p' "$log" | sort -u)
[[ $host =~ ^c[0-9]+$ ]] || { cat "$log"; fail "cannot tell the last node from '$host'"; }
ns=jk$cluster_port-$host
mapfile -t pids < <(sed -n 's/^ *[0-9]*: rank [0-9]* ([^)]*) pid \([0-9]*\) ready on the last node$/\1/p' "$log")
mapfile -t lost_ranks < <(sed -n 's/^ *[0-9]*: rank \([0-9]*\) ([^)]*) pid [0-9]* ready on the last node$/\1/p' "$log" | sort -n)
sleep 1

fault_ms=$(date +%s%3N)
case $mode in
  idle | mid | creation | default)
    cut_off || fail "nft could not cut $host off"
    kill -STOP "${pids[@]}"
    frozen=("${pids[@]}") ;;
  partition) cut_off || fail "nft could not cut $host off" ;;
  stall)
    kill -STOP "${pids[@]}"
    sleep 3
    kill -CONT "${pids[@]}" ;;
  blackout)
    cut_off || fail "nft could not cut $host off"
    sleep 3
    reconnect ;;
esac

# Survivors report and exit; the frozen ranks never do: end them once every other rank failed.
survivors=4
[[ $mode == partition ]] && survivors=6
if [[ $mode != stall && $mode != blackout ]]; then
  for _ in $(seq 600); do
    (($(grep -c ' failed at ' "$log") >= survivors)) && break
    sleep 0.1
  done
  ((${#frozen[@]} == 0)) || kill -KILL "${frozen[@]}" 2>/dev/null
  frozen=()
fi
wait $step
status=$?
out=$(cat "$log")
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$out"
echo "elapsed: $elapsed_ms ms, exit status $status, fault at $fault_ms, last node $host (ranks ${lost_ranks[*]})"
((status != 124)) || fail "the step hung"

case $mode in
  stall | blackout)
    ((status == 0)) || fail "exit status $status: a stall of 3 s failed the step"
    (($(count ' done$') == 6)) || fail "not every rank finished its barriers" ;;
  *)
    ((status != 0)) || fail "the step succeeded"
    bound=$((limit * 1000 + 3000))         # the limit, a second of keepalive, scheduling slack
    [[ $mode == idle ]] && bound=$((bound + 4000))  # the survivors enter the barrier 4 s after the fault
    [[ $mode == default ]] && bound=12000  # 8 s, the keepalive second, slack (RESULTS.md: measured)
    (($(count ' failed at ') == survivors)) || fail "$(count ' failed at ') ranks failed, not $survivors"
    while read -r r h at; do
      ms=$((at - fault_ms))
      echo "rank $r ($h) failed $ms ms after the fault"
      ((ms <= bound)) || fail "rank $r failed $ms ms after the fault, later than $bound ms"
    done < <(sed -n 's/^ *[0-9]*: rank \([0-9]*\) (\([^)]*\)) failed at \([0-9]*\)$/\1 \2 \3/p' <<<"$out")
    # Every survivor names the silent node and its ranks (the one that saw it, and the others by
    # its abort); in a partition the cut-off ranks name the node they lost.
    named="went silent during barrier at .*: its node $host answered nothing for .*ranks on $host in this group: ${lost_ranks[0]}, ${lost_ranks[1]}\)"
    [[ $mode == creation ]] &&
      named="creating group \[0,1,2,3,4,5\] on rank [0-9]+ \(c[0-9]+\): rank ${lost_ranks[0]} \($host\) never connected: its node $host .*the node is lost or cut off \(its ranks: ${lost_ranks[0]}, ${lost_ranks[1]}\)"
    for r in 0 1 2 3 4 5; do
      [[ " ${lost_ranks[*]} " == *" $r "* ]] && continue
      grep -Eq "^ *$r: rank error: .*$named" <<<"$out" || fail "rank $r did not name $host and its ranks"
    done
    if [[ $mode == partition ]]; then
      for r in "${lost_ranks[@]}"; do
        grep -Eq "^ *$r: rank error: .*went silent during barrier .*: its node c[0-9]+ answered nothing .*is lost or cut off from $host" <<<"$out" ||
          fail "rank $r on the cut-off node did not name the node it lost"
      done
    fi ;;
esac
echo "ok"
