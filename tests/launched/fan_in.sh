#!/usr/bin/env bash
# Fan-in that holds: a step of 16 nodes x 4 ranks sets up its groups (world, node, node leaders,
# even and odd ranks) and checks the values of its collectives (collectives_check stress) while
# every node's net.core.somaxconn is 8 (per network namespace), rank 0 (a node leader) runs under
# RLIMIT_NOFILE 64, and 20 % of the SYNs to and from the last node are dropped (nftables; its
# traffic with the bridge address, Slurm's, kept): every fifth in each direction, the first one
# included, not a random fifth (the last node sees only a few SYNs: with random drops, 2026-11-26's
# CI run saw none dropped at all). Connections refused or reset are retried with
# backoff, at most 8 tries, each logged at DEBUG: the test prints how many there were.
# The cluster is its own, of 16 nodes, stopped at the end: JOBKIT_CLUSTER_DIR, _PORT and _SUBNET
# default here to /var/lib/jobkit-dev-cluster-fan-in, 8917 and 198.18.9 on Debian 12, and to
# /var/lib/jobkit-dev-cluster-fan-in-13, 9317 and 198.18.12 on Debian 13, whose suite runs at the
# same time on this machine's network stack (scripts/test-all.sh).
# Usage: fan_in.sh MODE COLLECTIVES_CHECK   (MODE: sixteen)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes sixteen
binary=$(realpath "$2")
if [[ $(. /etc/os-release && echo "${VERSION_CODENAME:-}") == trixie ]]; then
  defaults=(/var/lib/jobkit-dev-cluster-fan-in-13 9317 198.18.12)
else
  defaults=(/var/lib/jobkit-dev-cluster-fan-in 8917 198.18.9)
fi
export JOBKIT_CLUSTER_DIR=${JOBKIT_FAN_IN_CLUSTER_DIR:-${defaults[0]}}
export JOBKIT_CLUSTER_PORT=${JOBKIT_FAN_IN_CLUSTER_PORT:-${defaults[1]}}
export JOBKIT_CLUSTER_SUBNET=${JOBKIT_FAN_IN_CLUSTER_SUBNET:-${defaults[2]}}
export JOBKIT_CLUSTER_NET=netns
command -v srun >/dev/null || skip "srun not installed (apt-get install slurm-client)"
command -v nft >/dev/null || skip "nft not installed (apt-get install nftables)"
trap '"$repo/slurm/dev-cluster.sh" stop >/dev/null 2>&1' EXIT
"$repo/slurm/dev-cluster.sh" start 16 || fail "a dev cluster of 16 nodes did not start"
need_cluster
eval "$("$repo/slurm/dev-cluster.sh" settings)"

for i in $(seq 16); do
  ip netns exec "jk$cluster_port-c$i" sysctl -qw net.core.somaxconn=8 || fail "cannot set somaxconn on c$i"
done
ip netns exec "jk$cluster_port-c16" nft -f - <<EOF || fail "nft could not drop SYNs on c16"
table inet jobkit_fan_in {
  chain in { type filter hook input priority 0; iifname "eth0" ip saddr != $cluster_subnet.254 tcp flags & (syn | ack) == syn numgen inc mod 5 == 0 counter drop; }
  chain out { type filter hook output priority 0; oifname "eth0" ip daddr != $cluster_subnet.254 tcp flags & (syn | ack) == syn numgen inc mod 5 == 0 counter drop; }
}
EOF

run_step timeout 600 srun --mpi=pmix -N16 --ntasks-per-node=4 env JOBKIT_LOG_LEVEL=debug JOBKIT_LOG_RANKS=all \
  bash -c 'if [[ $SLURM_PROCID == 0 ]]; then ulimit -n 64 || exit 9; echo "rank 0: RLIMIT_NOFILE $(ulimit -n)"; fi; exec "$0" stress 2000' "$binary"
drops=$(ip netns exec "jk$cluster_port-c16" nft list table inet jobkit_fan_in | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | awk "{s += \$1} END {print s + 0}")
retries=$(count 'cannot connect to .* yet')
echo "SYNs dropped on c16: $drops; connections retried: $retries"
((status == 0)) || fail "exit status $status"
(($(count 'rank 0: RLIMIT_NOFILE 64') == 1)) || fail "rank 0 did not run under RLIMIT_NOFILE 64"
(($(count ' 0 bad values') == 64)) || fail "not every rank checked every value"
((drops > 0)) || fail "no SYN was dropped: the loss was not there"
echo "ok"
