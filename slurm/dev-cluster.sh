#!/usr/bin/env bash
# A real multi-node Slurm cluster on this one machine, for developing and testing jobkit.
# Run `slurm/dev-cluster.sh --help` for usage.
set -euo pipefail

PATH=$PATH:/usr/sbin:/sbin

usage() {
  cat <<'EOF'
Usage: slurm/dev-cluster.sh COMMAND

A real multi-node Slurm cluster (slurmctld + one slurmd per node) on this machine.
Needs root and the Debian packages: slurmctld slurmd slurm-client munge libpmix-dev libpmix-bin.

Commands:
  start [N]   Start (or restart) a cluster of N nodes c1..cN, 8 CPUs each, in one
              partition "dev" (default N: $JOBKIT_CLUSTER_NODES or 3). A no-op when a
              healthy cluster with the same settings already runs; any other settings
              (node count, network or binding mode, ...) restart it. Cleans up what a
              crashed earlier run left. Waits until every node is idle, then prints one
              summary line that names the network mode.
  stop        Stop slurmctld, every slurmd and every process still running on a node, and
              remove the cluster's network (namespaces, veth pairs, bridge). Succeeds when
              nothing runs. munged is left running (it is a machine-wide service that
              other users of munge may rely on).
  status      Show the daemons, the network mode and `sinfo`; exit status 0 only when the
              cluster is healthy.
  net-mode    Print the network mode of the running cluster, one word: netns or loopback
              (exit status 1 and nothing on stdout when no cluster runs). Tests print it.
  env         Print `export SLURM_CONF=...`; use as: eval "$(slurm/dev-cluster.sh env)"
  settings    Print the state dir, port and subnet in effect, as shell assignments
              (cluster_dir=... cluster_port=... cluster_subnet=...).
  -h, --help  This text.

Each node runs in its own mount and UTS namespace: its own hostname (c1, c2, ...), its own
empty /tmp and /dev/shm, and its own /etc/hosts in which c1..cN resolve. Every other path is
shared by all nodes, like a shared file system on a real cluster. A node's slurmd runs in the
foreground under a shell of the node that starts it again, 1 s later, when it crashed (ended by
SIGILL, SIGABRT, SIGBUS, SIGFPE or SIGSEGV; log/node-init-cN.log says so), as a node's service
manager would: a crash of one slurmd must not leave the node down for every later test. A
slurmd ended any other way (stop, SIGKILL, its own exit) stays ended.

Network modes (JOBKIT_CLUSTER_NET):
  netns     Each node is a host of its own on a network: its own network namespace with
            loopback and one interface, eth0, whose only address is SUBNET.i (node ci; no
            IPv6 link-local address), on a bridge jk<PORT>-br that has SUBNET.254 on the
            machine's side, where slurmctld and the clients (srun, sbatch) run. In every
            node's /etc/hosts, cj is SUBNET.j, except that the last node maps its own name
            to 127.0.1.1 (as Debian's installer does): a rank that publishes a loopback
            address, or an address it resolved on its own node, fails across nodes.
            Nothing is routed off the machine (198.18.0.0/15 is reserved for testing).
  loopback  The old layout: every node on the machine's network stack, all of c1..cN
            resolve to 127.0.0.1. For machines where network namespaces cannot be made.
  auto      netns when a network namespace, a veth pair and a bridge can be made, else
            loopback (with a warning). The default.

Per-link delay (netns mode; JOBKIT_CLUSTER_DELAY_MS=MS): instead of the bridge and veth pairs,
every node's eth0 and the machine's side (jk<PORT>-sw, SUBNET.254) are tap devices of one
userspace switch, jk-delay-switch (tools/delay-switch, compiled by `start` into the state dir's
bin/), that holds every frame MS milliseconds (fractions allowed, 0: no delay) before it
delivers it: a round trip between two nodes, or between a node and slurmctld/srun, takes at
least 2 x MS. Frames keep their order on each link; at most 8192 wait, more are dropped and
counted, with its CPU time, in log/delay-switch.log when the cluster stops. No sch_netem here,
hence the switch. Unset (the default): the bridge, no delay.

Partitions: "dev" (the default; never pre-empted; jobs share CPUs), "low" and "high" (no
sharing): a job of "high" that needs the CPUs of a "low" job pre-empts it: every task gets
SIGCONT and SIGTERM, SIGKILL after GraceTime ($JOBKIT_CLUSTER_GRACE_TIME, default 10 s), and the job
is requeued (it may start again 5 s later, cred_expire).

CPU binding (JOBKIT_CLUSTER_BIND=1): TaskPlugin=task/affinity, as real clusters bind tasks,
and every node declares the machine's real CPUs and topology (`slurmd -C`, e.g. 2 CPUs)
instead of 8, so that each task's CPU set is what the job asked for. Every node is on the
same CPUs of this machine (jobs may share them: OverSubscribe=FORCE).

Slurm 22.05 (Debian 12) and 24.11 (Debian 13, inside scripts/debian13.sh) are both supported:
from Slurm 24.05 on, a cgroup.conf with CgroupPlugin=disabled lets slurmd run without systemd.

Environment (the defaults in brackets are Debian 13's):
  JOBKIT_CLUSTER_DIR           state dir: slurm.conf, hosts, logs, spool, state, pid files
                               (default /var/lib/jobkit-dev-cluster [-13]; not under /tmp or /dev/shm)
  JOBKIT_CLUSTER_NODES         default node count for `start` (3)
  JOBKIT_CLUSTER_PORT          slurmctld port; node i listens on PORT+i (default 6817 [7217])
  JOBKIT_CLUSTER_SHARED_PATHS  colon-separated paths under /tmp or /dev/shm that every node
                               must still see (the per-node tmpfs would hide them). Default:
                               the repository containing this script, if it is under /tmp.
  JOBKIT_CLUSTER_START_TIMEOUT seconds `start` waits for the nodes to become idle (60, and
                               one more per node above 30)
  JOBKIT_CLUSTER_NET           network mode: netns, loopback or auto (default auto; see above)
  JOBKIT_CLUSTER_SUBNET        netns mode: the first three numbers of the nodes' /24, inside
                               198.18.0.0/15 (default 198.18.0 [198.18.3]); two clusters need two subnets
  JOBKIT_CLUSTER_DELAY_MS      netns mode: each frame's one-way delay between nodes and to the
                               machine's side, in ms, through jk-delay-switch (unset: none, a bridge)
  JOBKIT_CLUSTER_DEBIAN_HOSTS  netns mode: 1 (default): the last node maps its own name to
                               127.0.1.1, as Debian does; 0: to its address, like the others
  JOBKIT_CLUSTER_GRACE_TIME    partition "low": seconds from SIGTERM to SIGKILL on pre-emption (10)
  JOBKIT_CLUSTER_SLURMD_TIMEOUT seconds before slurmctld declares a silent node DOWN (30; Slurm's
                               own default is 300)
  JOBKIT_CLUSTER_BIND          1: bind tasks to CPUs (task/affinity, real CPU counts); 0: no
                               binding, 8 CPUs per node (default 0)
EOF
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(dirname "$script_dir")

# Each platform's cluster has its own state dir, port and subnet, so that Debian 12's and
# Debian 13's (scripts/debian13.sh, which shares this machine's network stack and processes) can
# run side by side.
if [[ $(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") == trixie ]]; then
  default_dir=/var/lib/jobkit-dev-cluster-13 default_port=7217 default_subnet=198.18.3
else
  default_dir=/var/lib/jobkit-dev-cluster default_port=6817 default_subnet=198.18.0
fi
dir=$(realpath -m "${JOBKIT_CLUSTER_DIR:-$default_dir}")
conf=$dir/slurm.conf
port_base=${JOBKIT_CLUSTER_PORT:-$default_port}
start_timeout=${JOBKIT_CLUSTER_START_TIMEOUT:-}
delay_ms=${JOBKIT_CLUSTER_DELAY_MS-}
net_req=${JOBKIT_CLUSTER_NET:-auto}
subnet=${JOBKIT_CLUSTER_SUBNET:-$default_subnet}
bind=${JOBKIT_CLUSTER_BIND:-0}
grace_time=${JOBKIT_CLUSTER_GRACE_TIME:-10}
slurmd_timeout=${JOBKIT_CLUSTER_SLURMD_TIMEOUT:-30}
debian_hosts=${JOBKIT_CLUSTER_DEBIAN_HOSTS:-1}
host=$(hostname -s)

log() { echo "dev-cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

check_state_dir() {
  case $dir/ in
    /tmp/* | /dev/shm/*)
      die "JOBKIT_CLUSTER_DIR=$dir is under /tmp or /dev/shm; every node mounts its own" \
        "tmpfs there, so the cluster's files must live elsewhere (e.g. /var/lib/jobkit-dev-cluster)" ;;
  esac
}

check_prerequisites() {
  [[ $(id -u) == 0 ]] || die "must run as root (it starts daemons in their own mount namespaces)"
  local cmd missing=()
  for cmd in slurmctld:slurmctld slurmd:slurmd srun:slurm-client sinfo:slurm-client \
    scontrol:slurm-client munged:munge munge:munge unshare:util-linux flock:util-linux \
    nsenter:util-linux mountpoint:util-linux \
    mount:mount; do
    command -v "${cmd%%:*}" >/dev/null || missing+=("${cmd#*:} (for ${cmd%%:*})")
  done
  compgen -G '/usr/lib/*/slurm-wlm/mpi_pmix*.so' >/dev/null ||
    missing+=("slurm-wlm-basic-plugins (for mpi_pmix_v4.so)")
  # mpi_pmix_v4.so dlopen()s the unversioned libpmix.so, which only libpmix-dev ships.
  compgen -G '/usr/lib/*/pmix2/lib/libpmix.so' >/dev/null ||
    missing+=("libpmix-dev (for pmix2/lib/libpmix.so)")
  ((${#missing[@]} == 0)) || die "missing packages: ${missing[*]}; install with" \
    "apt-get install slurmctld slurmd slurm-client munge libpmix-dev libpmix-bin"
}

port_check() {
  if ! [[ $port_base =~ ^[0-9]+$ ]] || ((port_base < 1 || port_base > 65000)); then
    die "JOBKIT_CLUSTER_PORT must be a port number, got '$port_base'"
  fi
}

settings_check() {
  case $net_req in
    netns | loopback | auto) ;;
    *) die "JOBKIT_CLUSTER_NET must be netns, loopback or auto, got '$net_req'" ;;
  esac
  local octet='([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])'
  [[ $subnet =~ ^198\.1[89]\.$octet$ ]] || die "JOBKIT_CLUSTER_SUBNET must be the first three" \
    "numbers of a /24 inside 198.18.0.0/15 (the range reserved for network tests), e.g." \
    "198.18.0; got '$subnet'"
  case $bind in
    0 | 1) ;;
    *) die "JOBKIT_CLUSTER_BIND must be 0 or 1, got '$bind'" ;;
  esac
  case $debian_hosts in
    0 | 1) ;;
    *) die "JOBKIT_CLUSTER_DEBIAN_HOSTS must be 0 or 1, got '$debian_hosts'" ;;
  esac
  [[ $slurmd_timeout =~ ^[1-9][0-9]{0,4}$ ]] || die "JOBKIT_CLUSTER_SLURMD_TIMEOUT must be a whole" \
    "number of seconds from 1 to 99999, got '$slurmd_timeout'"
  if [[ -n ${JOBKIT_CLUSTER_DELAY_MS+set} ]]; then
    [[ $delay_ms =~ ^[0-9]{1,4}(\.[0-9]{1,3})?$ ]] || die "JOBKIT_CLUSTER_DELAY_MS must be a" \
      "number of milliseconds below 10000 (at most 3 decimals), got '$delay_ms'"
    [[ $net_req != loopback ]] || die "JOBKIT_CLUSTER_DELAY_MS needs the netns network mode" \
      "(JOBKIT_CLUSTER_NET=netns or auto), not loopback"
  fi
}

# The delay in microseconds, for jk-delay-switch.
delay_us() {
  local whole=${delay_ms%%.*} frac=
  [[ $delay_ms == *.* ]] && frac=${delay_ms#*.}
  frac=${frac}000
  echo $((10#$whole * 1000 + 10#${frac:0:3}))
}

# --- network ------------------------------------------------------------------------------
# netns mode: node ci lives in network namespace jk<PORT>-ci; its veth pair is eth0 in there
# and jk<PORT>-ci on the machine's side, a port of the bridge jk<PORT>-br. Names carry the
# port so that two clusters (two ports) never share one; all fit in 15 characters. With a delay
# (JOBKIT_CLUSTER_DELAY_MS), jk<PORT>-sw (the machine's side) and jk<PORT>-ci are instead taps of
# jk-delay-switch, and node ci's tap is moved into its namespace as eth0.

net_prefix() { echo "jk$port_base-"; }
node_netns() { echo "$(net_prefix)$1"; }
bridge_name() { echo "$(net_prefix)br"; }
switch_link() { echo "$(net_prefix)sw"; }
# The machine's side of the running cluster's network: the bridge, or the delay switch's tap.
host_link() { if [[ -s $dir/run/delay ]]; then switch_link; else bridge_name; fi; }

# node_addr I MODE / ctld_addr MODE: the address slurm.conf gives node cI / slurmctld.
node_addr() { if [[ $2 == netns ]]; then echo "$subnet.$1"; else echo 127.0.0.1; fi; }
ctld_addr() { if [[ $1 == netns ]]; then echo "$subnet.254"; else echo 127.0.0.1; fi; }

# Whether this machine lets us make a network namespace, a veth pair into it and a bridge.
netns_works() {
  command -v ip >/dev/null || return 1
  local ns br ok=1
  ns=$(net_prefix)probe
  br=$(net_prefix)pb
  ip link del "$ns" 2>/dev/null || true
  ip link del "$br" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  if ip netns add "$ns" 2>/dev/null && ip link add "$br" type bridge 2>/dev/null &&
    ip link add "$ns" type veth peer name eth0 netns "$ns" 2>/dev/null &&
    ip link set "$ns" master "$br" 2>/dev/null && ip -n "$ns" link set lo up 2>/dev/null; then
    ok=0
  fi
  ip link del "$ns" 2>/dev/null || true
  ip link del "$br" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  return $ok
}

# The network mode that `start` uses, one word, from JOBKIT_CLUSTER_NET.
resolve_net_mode() {
  case $net_req in
    loopback) echo loopback ;;
    netns)
      netns_works || die "JOBKIT_CLUSTER_NET=netns, but no network namespace, veth pair and" \
        "bridge can be made here (ip netns add, ip link add type veth/bridge failed: needs" \
        "root, iproute2 and CAP_NET_ADMIN); use JOBKIT_CLUSTER_NET=loopback (or auto)"
      echo netns ;;
    auto)
      if netns_works; then
        echo netns
      else
        log "warning: no network namespace can be made here (ip netns add failed);" \
          "falling back to the loopback network mode: every node shares this machine's network"
        echo loopback
      fi ;;
  esac
}

# The running (or last started) cluster's network mode; fails when none is recorded.
recorded_net_mode() {
  local m
  m=$(cat "$dir/run/net-mode" 2>/dev/null) && [[ -n $m ]] && echo "$m"
}

# The network devices and namespaces of this cluster that exist: those recorded by `start`
# in run/net (also those of a crashed run with other settings) and any named with this
# port's prefix.
net_objects() { # kind: link or netns
  local kind=$1 k name where prefix
  prefix=$(net_prefix)
  if [[ $kind == link ]]; then where=/sys/class/net; else where=/run/netns; fi
  {
    if [[ -s $dir/run/net ]]; then
      while read -r k name; do
        if [[ $k == "$kind" && -n $name ]]; then echo "$where/$name"; fi
      done <"$dir/run/net"
    fi
    echo "$where/$prefix"*
  } | tr ' ' '\n' | sort -u | while read -r name; do
    if [[ -e $name ]]; then echo "${name##*/}"; fi
  done
}

# Removes the cluster's network: veth pairs (deleting one end deletes both), namespaces,
# bridge. Run after every process of the cluster has gone.
net_down() {
  command -v ip >/dev/null || return 0
  local name left=()
  while read -r name; do
    ip link del "$name" 2>/dev/null || true
  done < <(net_objects link)
  while read -r name; do
    ip netns del "$name" 2>/dev/null || true
  done < <(net_objects netns)
  while read -r name; do [[ -n $name ]] && left+=("link $name"); done < <(net_objects link)
  while read -r name; do [[ -n $name ]] && left+=("netns $name"); done < <(net_objects netns)
  ((${#left[@]} == 0)) || die "could not remove the cluster's network: ${left[*]}"
  rm -f "$dir/run/net"
}

# Makes the bridge, and per node a namespace with lo and eth0 (its one address), recording
# each object in run/net before making it, so that `stop` removes even a half-made network.
net_up() { # N
  local n=$1 i ns br used
  used=$(ip -o -4 addr show to "$subnet.0/24" 2>/dev/null | awk '{print $2}' | paste -sd' ')
  [[ -z $used ]] || die "subnet $subnet.0/24 is already used on this machine (by $used);" \
    "pick another with JOBKIT_CLUSTER_SUBNET (e.g. 198.18.1)"
  if [[ -s $dir/run/delay ]]; then
    br=$(switch_link)
    start_delay_switch "$n"
  else
    br=$(bridge_name)
    echo "link $br" >>"$dir/run/net"
    ip link add "$br" type bridge || die "ip link add $br type bridge failed"
  fi
  ip link set "$br" addrgenmode none
  ip addr add "$subnet.254/24" dev "$br"
  ip link set "$br" up
  for ((i = 1; i <= n; i++)); do
    ns=$(node_netns "c$i")
    printf 'netns %s\nlink %s\n' "$ns" "$ns" >>"$dir/run/net"
    ip netns add "$ns" || die "ip netns add $ns failed"
    if [[ -s $dir/run/delay ]]; then
      ip link set "$ns" netns "$ns" name eth0 || die "could not move the tap $ns into its namespace"
    else
      ip link add "$ns" type veth peer name eth0 netns "$ns" || die "ip link add $ns type veth failed"
      ip link set "$ns" addrgenmode none
      ip link set "$ns" master "$br" up
    fi
    ip -n "$ns" link set lo up
    # No IPv6 link-local address: eth0's one address is the node's only non-loopback one.
    ip -n "$ns" link set eth0 addrgenmode none
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
}

# The delay switch, compiled from tools/delay-switch into the state dir when missing or older
# than its source (the cluster needs no build dir).
delay_switch_bin() {
  local src=$repo_root/tools/delay-switch/delay_switch.cpp bin=$dir/bin/jk-delay-switch
  [[ -f $src ]] || die "$src is missing: JOBKIT_CLUSTER_DELAY_MS needs the delay switch's source"
  if [[ ! -x $bin || $src -nt $bin ]]; then
    mkdir -p "$dir/bin"
    "${CXX:-c++}" -std=c++20 -O2 -o "$bin.tmp" "$src" >&2 || die "could not compile $src"
    mv "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

# Starts jk-delay-switch with the taps jk<PORT>-sw and jk<PORT>-c1..cN, recorded in run/net; its
# command line names our slurm.conf, so that `stop` ends it like the daemons (the taps go with it).
start_delay_switch() { # N
  local n=$1 i bin pidf=$dir/run/delay-switch.pid deadline
  local -a taps=("$(switch_link)")
  for ((i = 1; i <= n; i++)); do taps+=("$(node_netns "c$i")"); done
  printf 'link %s\n' "${taps[@]}" >>"$dir/run/net"
  bin=$(delay_switch_bin)
  rm -f "$pidf"
  setsid "$bin" --delay-us "$(delay_us)" --pid-file "$pidf" --tag "$conf" "${taps[@]}" \
    </dev/null >>"$dir/log/delay-switch.log" 2>&1 9>&- &
  deadline=$((SECONDS + 10))
  until [[ -s $pidf ]]; do
    kill -0 $! 2>/dev/null || die "jk-delay-switch failed: $(tail -n 3 "$dir/log/delay-switch.log")"
    ((SECONDS < deadline)) || die "jk-delay-switch did not start within 10 s"
    sleep 0.05
  done
}

# Each node's /etc/hosts, as "$dir/node/cI/hosts".
write_hosts() { # N mode
  local n=$1 mode=$2 i j
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$dir/node/c$i"
    if [[ $mode == netns ]]; then
      {
        echo "# /etc/hosts of node c$i, written by slurm/dev-cluster.sh"
        echo "127.0.0.1 localhost"
        echo "::1 localhost ip6-localhost ip6-loopback"
        echo "$(ctld_addr netns) $host"
        for ((j = 1; j <= n; j++)); do
          if ((j == i && i == n && debian_hosts == 1)); then
            echo "127.0.1.1 c$j  # Debian's default for a machine's own name: not reachable from other nodes"
          else
            echo "$(node_addr "$j" netns) c$j"
          fi
        done
      } >"$dir/node/c$i/hosts"
    else
      {
        cat /etc/hosts
        for ((j = 1; j <= n; j++)); do echo "127.0.0.1 c$j"; done
      } >"$dir/node/c$i/hosts"
    fi
  done
}

# The CPUs part of each NodeName line: 8 CPUs without binding; with binding, the machine's
# real CPUs and topology, which task/affinity can honour.
node_cpus() {
  if [[ $bind == 1 ]]; then
    local spec
    spec=$(slurmd -C 2>/dev/null | head -n 1 |
      grep -oE '\b(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | paste -sd' ')
    [[ $spec == CPUs=* ]] || die "slurmd -C did not report this machine's CPUs"
    echo "$spec"
  else
    echo "CPUs=8"
  fi
}

# The shared paths that the per-node tmpfs on /tmp or /dev/shm would hide, one per line.
shared_paths() {
  local spec p
  if [[ -n ${JOBKIT_CLUSTER_SHARED_PATHS+set} ]]; then
    spec=$JOBKIT_CLUSTER_SHARED_PATHS
  else
    spec=$repo_root
  fi
  local IFS=:
  for p in $spec; do
    [[ -n $p ]] || continue
    p=$(realpath -m "$p")
    case $p in
      /tmp | /dev/shm) die "JOBKIT_CLUSTER_SHARED_PATHS may not contain $p itself" ;;
      /tmp/* | /dev/shm/*) echo "$p" ;;
    esac
  done | sort -u
}

# Slurm 22.05's mpi/pmix plugin names a step's directory and socket in the node's spool after the
# job and step ids (pmix.JOB.STEP, stepd.slurm.pmix.JOB.STEP). When a step ends abnormally they
# can stay behind, and the step of the same id in the job's next attempt (a requeue keeps the job
# id) then fails to launch on that node: "pmixp_stepd_init() failed", which srun reports as
# "task N launch failed: Unspecified error" (reproduced by leaving such a directory before a
# step). Every attempt's end removes them; the job's processes are gone when the epilog runs.
write_epilog() {
  cat >"$dir/run/epilog.sh" <<EOF
#!/bin/sh
spool="$dir/spool/\$SLURMD_NODENAME"
case "\$SLURM_JOB_ID" in *[!0-9]* | '') exit 0 ;; esac
rm -rf "\$spool/pmix.\$SLURM_JOB_ID."* "\$spool/stepd.slurm.pmix.\$SLURM_JOB_ID."* 2>/dev/null
exit 0
EOF
  chmod 755 "$dir/run/epilog.sh"
}

# Slurm 24.05 and later call the cgroup plugin from slurmd whatever the other plugins are, and
# its default (autodetect -> cgroup/v2) needs systemd; "disabled" (new in 24.05) makes it a no-op.
# Older releases do not know that value, and need no cgroup.conf with these plugins.
write_cgroup_conf() {
  local version
  version=$(slurmd -V 2>/dev/null | awk '{print $2}')
  rm -f "$dir/cgroup.conf"
  if [[ $(printf '%s\n24.05\n' "$version" | sort -V | head -n 1) == 24.05 ]]; then
    echo "CgroupPlugin=disabled  # written by slurm/dev-cluster.sh for Slurm $version" >"$dir/cgroup.conf"
  fi
}

generate_conf() { # N net-mode node-cpus
  local n=$1 mode=$2 cpus=$3 i task hosts_note=
  # Part of the conf so that a change of it restarts the cluster.
  if [[ $mode == netns && $debian_hosts == 1 ]]; then
    hosts_note=" c$n maps its own name to 127.0.1.1 (Debian's default)."
  fi
  if [[ $mode == netns && -n ${JOBKIT_CLUSTER_DELAY_MS+set} ]]; then
    hosts_note+=" Per-link delay: $delay_ms ms (jk-delay-switch)."
  fi
  if [[ $bind == 1 ]]; then
    task="# Root without cgroups: track step processes by parentage; bind every task to its CPUs
# (sched_setaffinity), as real clusters do (task/affinity or task/cgroup).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity"
  else
    task="# Root without cgroups: track step processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none"
  fi
  cat <<EOF
# Generated by slurm/dev-cluster.sh; rewritten on every start. Network mode: $mode.$hosts_note
ClusterName=jobkitdev
SlurmctldHost=$host($(ctld_addr "$mode"))
SlurmctldPort=$port_base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
$task
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Lets a node claim more CPUs than the machine has.
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=$slurmd_timeout
MessageTimeout=10
KillWait=5
InactiveLimit=0
WaitTime=0
MinJobAge=60
# Pre-emption and requeue, as production clusters configure them: a job of partition "high"
# pre-empts jobs of partition "low" (SIGCONT + SIGTERM to every task, SIGKILL after GraceTime,
# then requeue). "dev" is never pre-empted. A requeued job waits cred_expire seconds before it
# may start again (120 by default); the scheduler looks every sched_interval seconds.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
AuthInfo=cred_expire=5
SchedulerParameters=sched_interval=2,bf_interval=1
# Removes what Slurm's mpi/pmix plugin may leave of an attempt in the spool (see write_epilog).
Epilog=$dir/run/epilog.sh
EOF
  for ((i = 1; i <= n; i++)); do
    echo "NodeName=c$i NodeHostname=c$i NodeAddr=$(node_addr "$i" "$mode") Port=$((port_base + i))" \
      "$cpus State=UNKNOWN"
  done
  echo "PartitionName=dev Nodes=c[1-$n] Default=YES MaxTime=INFINITE OverSubscribe=FORCE:8 State=UP" \
    "PriorityTier=1 PreemptMode=OFF"
  echo "PartitionName=low Nodes=c[1-$n] MaxTime=INFINITE OverSubscribe=NO State=UP PriorityTier=1" \
    "PreemptMode=REQUEUE GraceTime=$grace_time"
  echo "PartitionName=high Nodes=c[1-$n] MaxTime=INFINITE OverSubscribe=NO State=UP PriorityTier=2 PreemptMode=OFF"
}

# --- process bookkeeping ------------------------------------------------------------------

# Reads /proc without forking per process: stop scans every process several times.
has_arg() { # pid word: the command line of pid contains word as one argument
  local -a args
  mapfile -d '' -t args 2>/dev/null <"/proc/$1/cmdline" || return 1
  local a
  for a in "${args[@]}"; do [[ $a == "$2" ]] && return 0; done
  return 1
}

# pid from a pid file, only if that process is still one of this cluster's daemons.
daemon_pid() { # pidfile
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && has_arg "$pid" "$conf" || return 1
  echo "$pid"
}

ctld_pid() { daemon_pid "$dir/run/slurmctld.pid"; }
slurmd_pid() { daemon_pid "$dir/run/slurmd-$1.pid"; }

node_count() { cat "$dir/run/nodes" 2>/dev/null || echo 0; }

# "mntns utsns" ids of a process, as recorded per node in run/node-ns.
ns_ids() { echo "$(stat -L -c %i "/proc/$1/ns/mnt") $(stat -L -c %i "/proc/$1/ns/uts")"; }

# Every process of this cluster:
# - the daemons: their command line names our slurm.conf;
# - everything inside a node's namespaces (slurmstepd and the tasks of steps). A node's
#   namespaces are those recorded at start (run/node-ns) and those of any slurmstepd whose
#   working directory is our log dir (slurmd chdirs there; slurmstepd overwrites its
#   environment and command line); this also finds the orphans of a lost node-ns file.
#   Namespaces match as a pair of mount and UTS ids, so that a reused id of a dead
#   namespace cannot match an unrelated process;
# - everything in one of the cluster's network namespaces (netns mode), whatever its mount
#   namespace: it would keep the namespace alive;
# - clients (srun, salloc, sbatch --wait) talking to this cluster: once it is gone they
#   would wait forever.
cluster_pids() {
  local -A nodens=() mnt=() uts=() net=() netns=() comms=()
  local line p path id comm
  if [[ -s $dir/run/node-ns ]]; then
    while read -r line; do [[ -n $line ]] && nodens[$line]=1; done <"$dir/run/node-ns"
  fi
  while read -r line; do
    [[ -n $line ]] || continue
    id=$(stat -L -c %i "/run/netns/$line" 2>/dev/null) && netns[$id]=1
  done < <(net_objects netns)
  if ((${#netns[@]})); then
    while read -r path id; do
      p=${path#/proc/}
      net[${p%%/*}]=$id
    done < <(stat -L -c '%n %i' /proc/[0-9]*/ns/net 2>/dev/null)
  fi
  while read -r path id; do
    p=${path#/proc/}
    mnt[${p%%/*}]=$id
  done < <(stat -L -c '%n %i' /proc/[0-9]*/ns/mnt 2>/dev/null)
  while read -r path id; do
    p=${path#/proc/}
    uts[${p%%/*}]=$id
  done < <(stat -L -c '%n %i' /proc/[0-9]*/ns/uts 2>/dev/null)
  for p in "${!mnt[@]}"; do
    read -r comm 2>/dev/null <"/proc/$p/comm" || continue
    comms[$p]=$comm
    if [[ $comm == slurmstepd && /proc/$p/cwd -ef $dir/log ]]; then
      nodens["${mnt[$p]} ${uts[$p]:-}"]=1
    fi
  done
  for p in "${!comms[@]}"; do
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    if [[ -n ${nodens["${mnt[$p]} ${uts[$p]:-}"]+x} || -n ${netns[${net[$p]:-none}]+x} ]] ||
      has_arg "$p" "$conf"; then
      echo "$p"
      continue
    fi
    case ${comms[$p]} in
      srun | salloc | sbatch | sattach)
        local -a environ=()
        mapfile -d '' -t environ 2>/dev/null <"/proc/$p/environ" || continue
        for line in "${environ[@]}"; do
          [[ $line == "SLURM_CONF=$conf" ]] && { echo "$p"; break; }
        done ;;
    esac
  done
  return 0
}

do_stop() {
  local pids deadline
  pids=$(cluster_pids)
  if [[ -n $pids ]]; then
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    # 5 s of grace, however long a scan of /proc takes on a busy machine.
    deadline=$((SECONDS + 5))
    while :; do
      sleep 0.2
      pids=$(cluster_pids)
      [[ -n $pids && $SECONDS -lt $deadline ]] || break
    done
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
      sleep 0.5
      pids=$(cluster_pids)
      [[ -z $pids ]] || die "processes of the cluster survived SIGKILL: $pids"
    fi
  fi
  net_down
  rm -f "$dir"/run/*.pid "$dir/run/node-ns" "$dir/run/nodes" "$dir/run/net-mode" "$dir/run/delay"
}

# --- health ---------------------------------------------------------------------------------

# Node states as "name state" lines, e.g. "c1 idle".
node_states() { SLURM_CONF=$conf timeout 15 sinfo -h -N -p dev -o '%N %t' 2>/dev/null; }

# healthy N [strict]: daemons alive, controller answers, exactly N nodes that respond.
# strict: every node idle; otherwise busy nodes (jobs of other users) count as healthy.
healthy() {
  local n=$1 strict=${2:-} i states
  [[ $(node_count) == "$n" ]] || return 1
  if [[ $(recorded_net_mode) == netns ]]; then
    [[ -e /sys/class/net/$(host_link) ]] || return 1
    if [[ -s $dir/run/delay ]]; then daemon_pid "$dir/run/delay-switch.pid" >/dev/null || return 1; fi
  fi
  ctld_pid >/dev/null || return 1
  for ((i = 1; i <= n; i++)); do slurmd_pid "c$i" >/dev/null || return 1; done
  states=$(node_states) || return 1
  [[ $(wc -l <<<"$states") == "$n" ]] || return 1
  if [[ -n $strict ]]; then
    if grep -qv ' idle$' <<<"$states"; then return 1; fi
  else
    if grep -qvE ' (idle|mix|alloc|comp)$' <<<"$states"; then return 1; fi
  fi
}

# --- node launch ----------------------------------------------------------------------------

# Runs as root inside a fresh mount + UTS namespace (see start_node); ends by running slurmd in
# the foreground, again after a crash (the usage text).
# Must be self-contained: it is shipped to `bash -c` with `declare -f`.
node_main() { # node dir conf net-mode shared-path...
  local node=$1 dir=$2 conf=$3 mode=$4
  shift 4
  hostname "$node"
  mount --bind "$dir/node/$node/hosts" /etc/hosts
  local keep=$dir/node/$node/keep mp p
  # This mount namespace copied the handles of every named network namespace on the machine
  # (/run/netns/*): drop them, or the node would keep other clusters' namespaces alive.
  for p in /run/netns/*; do
    if mountpoint -q "$p"; then umount --lazy "$p"; fi
  done
  if [[ $mode == netns ]]; then
    # The node's own /sys, whose class/net shows its network (as `ip netns exec` does), with
    # the machine's cgroup file systems bound back in: slurmd will not start without them.
    mkdir -p "$keep/cgroup"
    mount --rbind /sys/fs/cgroup "$keep/cgroup"
    mount -t sysfs sysfs /sys
    mount --rbind "$keep/cgroup" /sys/fs/cgroup
    umount --lazy "$keep/cgroup"
  fi
  for mp in /tmp /dev/shm; do
    local under=()
    for p in "$@"; do [[ $p == "$mp"/* ]] && under+=("$p"); done
    # Keep a handle on the machine's /tmp (or /dev/shm) so the shared paths under it can
    # be bound back on top of the node's own tmpfs.
    if ((${#under[@]})); then
      mkdir -p "$keep$mp"
      mount --rbind "$mp" "$keep$mp"
    fi
    mount -t tmpfs -o mode=1777 tmpfs "$mp"
    for p in "${under[@]}"; do
      if [[ -d $keep$p ]]; then
        mkdir -p "$p"
      else
        mkdir -p "$(dirname "$p")"
        touch "$p"
      fi
      mount --rbind "$keep$p" "$p"
    done
    if ((${#under[@]})); then umount --lazy "$keep$mp"; fi
  done
  # No descriptor of whoever started the cluster stays open in the node (a pipe's reader would
  # wait for this shell); 0-2 go to node-init's log (start_node).
  local fd
  for fd in $(ls /proc/$$/fd); do
    if ((fd > 2)); then eval "exec $fd>&-"; fi
  done
  # Where a daemonizing slurmd would chdir (its log file's directory): its slurmstepds inherit it
  # (cluster_pids tells its orphans by it), and a crash's core file lands there.
  cd "$dir/log"
  local rc
  while :; do
    rc=0
    slurmd -D -f "$conf" -N "$node" || rc=$?
    case $rc in
      132 | 134 | 135 | 136 | 139) ;;
      *) exit "$rc" ;;
    esac
    echo "$(date '+%FT%T') dev-cluster: slurmd of $node ended by signal $((rc - 128)); starting it again"
    sleep 1
  done
}

start_node() { # node net-mode shared-path...
  local node=$1 mode=$2
  shift 2
  local -a enter=()
  # netns mode: nsenter enters the node's network namespace and nothing else (unlike
  # `ip netns exec`, which would also replace /sys, hiding /sys/fs/cgroup); unshare then
  # makes the node's mount and UTS namespaces, where node_main mounts a /sys of its own.
  if [[ $mode == netns ]]; then enter=(nsenter "--net=/run/netns/$(node_netns "$node")"); fi
  mkdir -p "$dir/spool/$node"
  # 9>&- : the daemon must not inherit the lock on the state dir. setsid: the node is a session
  # of its own, as a daemon is, out of the caller's process group (which a test's timeout kills).
  setsid "${enter[@]}" unshare --mount --uts --propagation private \
    bash -c "set -euo pipefail; $(declare -f node_main); node_main \"\$@\"" \
    node-init "$node" "$dir" "$conf" "$mode" "$@" \
    </dev/null >>"$dir/log/node-init-$node.log" 2>&1 9>&- &
}

# A daemon that will never come up says so in its log; no need to wait for the timeout.
daemon_failed() { grep -qsE 'fatal:|Unable to bind' "$dir"/log/*.log; }

show_logs() {
  local f
  for f in "$dir"/log/*.log; do
    [[ -s $f ]] || continue
    echo "----- tail of $f" >&2
    tail -n 15 "$f" >&2
  done
}

lock_state_dir() {
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock -w 120 9 || die "another dev-cluster.sh holds $dir/.lock"
}

ensure_munge() {
  munge -n </dev/null >/dev/null 2>&1 && return 0
  if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge
  chown munge:munge /run/munge
  munged --force 9>&- </dev/null >/dev/null 2>&1 || die "munged failed to start (see /var/log/munge/munged.log)"
  munge -n </dev/null >/dev/null 2>&1 || die "munged started but munge -n fails"
}

cmd_start() {
  local n=${1:-${JOBKIT_CLUSTER_NODES:-3}}
  if ! [[ $n =~ ^[1-9][0-9]*$ ]] || ((n > 64)); then die "node count must be 1..64, got '$n'"; fi
  # 64 slurmd's registering on 2 cores take longer than 3.
  [[ -n $start_timeout ]] || start_timeout=$((n > 30 ? 30 + n : 60))
  check_state_dir
  check_prerequisites
  port_check
  settings_check
  local t0=$SECONDS shared new_conf i mode cpus
  shared=$(shared_paths)
  cpus=$(node_cpus)
  lock_state_dir
  mode=$(resolve_net_mode)
  [[ $mode == netns || -z ${JOBKIT_CLUSTER_DELAY_MS+set} ]] ||
    die "JOBKIT_CLUSTER_DELAY_MS needs the netns network mode, which cannot be used here"
  new_conf=$(generate_conf "$n" "$mode" "$cpus")

  if [[ -f $conf && $(cat "$conf") == "$new_conf" &&
    $(cat "$dir/run/shared-paths" 2>/dev/null) == "$shared" ]] && healthy "$n"; then
    echo "jobkit dev cluster already running: $n nodes c[1-$n] x $(describe_cpus "$cpus")," \
      "network: $(describe_net "$mode"), SLURM_CONF=$conf"
    return 0
  fi

  do_stop
  ensure_munge

  # Fresh runtime state on every start: job ids restart, no stale jobs of other node sets.
  rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/node" "$dir/hosts"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/node"
  printf '%s\n' "$new_conf" >"$conf"
  write_cgroup_conf
  write_epilog
  printf '%s\n' "$shared" >"$dir/run/shared-paths"
  echo "$mode" >"$dir/run/net-mode"
  if [[ $mode == netns && -n ${JOBKIT_CLUSTER_DELAY_MS+set} ]]; then echo "$delay_ms" >"$dir/run/delay"; fi
  write_hosts "$n" "$mode"

  local -a shared_arr=()
  local p
  while read -r p; do
    [[ -n $p ]] || continue
    # A shared path that does not exist yet is created, so that it is shared once filled.
    [[ -e $p ]] || mkdir -p "$p"
    shared_arr+=("$p")
  done <<<"$shared"

  echo "$n" >"$dir/run/nodes"
  if [[ $mode == netns ]]; then
    # net_up dies in a subshell so that the half-made network is removed here.
    (net_up "$n") || { do_stop; die "could not make the cluster's network (see above)"; }
  fi
  slurmctld -f "$conf" 9>&- </dev/null >>"$dir/log/slurmctld-stdout.log" 2>&1 ||
    { show_logs; do_stop; die "slurmctld failed to start"; }
  for ((i = 1; i <= n; i++)); do
    start_node "c$i" "$mode" "${shared_arr[@]}"
  done

  # Record each node's namespaces so `stop` finds its leftover step processes.
  local pid deadline=$((SECONDS + start_timeout))
  for ((i = 1; i <= n; i++)); do
    until pid=$(slurmd_pid "c$i"); do
      if ((SECONDS >= deadline)) || daemon_failed; then
        show_logs
        do_stop
        die "slurmd for c$i did not start"
      fi
      sleep 0.1
    done
    ns_ids "$pid" >>"$dir/run/node-ns"
  done

  until healthy "$n" strict; do
    if ((SECONDS >= deadline)) || daemon_failed; then
      node_states >&2 || true
      show_logs
      do_stop
      die "nodes not idle after $((SECONDS - t0))s"
    fi
    sleep 0.5
  done
  echo "jobkit dev cluster up: $n nodes c[1-$n] x $(describe_cpus "$cpus"), partition dev," \
    "network: $(describe_net "$mode"), SLURM_CONF=$conf ($((SECONDS - t0))s)"
}

describe_net() { # mode
  if [[ $1 == netns && -s $dir/run/delay ]]; then
    echo "netns (node ci at $subnet.i, jk-delay-switch holding every frame $(cat "$dir/run/delay") ms," \
      "$(switch_link) at $subnet.254)"
  elif [[ $1 == netns ]]; then
    echo "netns (node ci at $subnet.i, bridge $(bridge_name) at $subnet.254)"
  else
    echo "loopback (every node on 127.0.0.1)"
  fi
}

describe_cpus() { # node-cpus
  local c=${1%% *}
  if [[ $bind == 1 ]]; then
    echo "${c#CPUs=} CPUs, tasks bound to CPUs (task/affinity)"
  else
    echo "${c#CPUs=} CPUs"
  fi
}

cmd_stop() {
  check_state_dir
  port_check
  [[ $(id -u) == 0 ]] || die "must run as root"
  [[ -d $dir ]] || return 0
  lock_state_dir
  do_stop
  echo "jobkit dev cluster stopped"
}

cmd_status() {
  check_state_dir
  local n i pid rc=0
  n=$(node_count)
  if ((n == 0)); then
    echo "jobkit dev cluster: not running (state dir $dir)"
    return 1
  fi
  echo "state dir: $dir"
  echo "SLURM_CONF=$conf"
  if pid=$(ctld_pid); then echo "slurmctld: pid $pid"; else echo "slurmctld: NOT RUNNING"; rc=1; fi
  for ((i = 1; i <= n; i++)); do
    if pid=$(slurmd_pid "c$i"); then echo "slurmd c$i: pid $pid"; else echo "slurmd c$i: NOT RUNNING"; rc=1; fi
  done
  echo "shared paths: $(paste -sd: "$dir/run/shared-paths" 2>/dev/null | grep . || echo "(none)")"
  local mode
  mode=$(recorded_net_mode) || mode=unknown
  echo "network: $mode"
  sed -n 's/.*\(c[0-9]* maps its own name to 127.0.1.1\).*/  \1 in its \/etc\/hosts/p' "$conf"
  if [[ $mode == netns && -s $dir/run/delay ]]; then
    if pid=$(daemon_pid "$dir/run/delay-switch.pid"); then
      echo "  jk-delay-switch: pid $pid, every frame held $(cat "$dir/run/delay") ms"
    else
      echo "  jk-delay-switch: NOT RUNNING"
      rc=1
    fi
  fi
  if [[ $mode == netns ]]; then
    local what=bridge
    [[ ! -s $dir/run/delay ]] || what="delay switch's tap"
    echo "  $what $(host_link) $(ip -br -4 addr show dev "$(host_link)" 2>/dev/null |
      awk '{print $2, $3}' || echo "MISSING")"
    for ((i = 1; i <= n; i++)); do
      echo "  c$i: netns $(node_netns "c$i"), $(ip -n "$(node_netns "c$i")" -br -4 addr show dev eth0 2>/dev/null |
        awk '{print $1, $3}' || echo "MISSING")"
    done
  fi
  if grep -qs '^TaskPlugin=task/affinity' "$conf"; then
    echo "cpu binding: on (task/affinity)"
  else
    echo "cpu binding: off (task/none)"
  fi
  SLURM_CONF=$conf timeout 15 sinfo -N -o '%N %P %t %c %O' || rc=1
  SLURM_CONF=$conf timeout 15 squeue || rc=1
  if ((rc == 0)) && healthy "$n"; then
    echo "jobkit dev cluster: running, $n nodes, healthy"
  else
    echo "jobkit dev cluster: UNHEALTHY (run: $0 start $n)"
    rc=1
  fi
  return $rc
}

cmd_net_mode() {
  check_state_dir
  local mode
  ((${#} == 0)) || die "usage: $0 net-mode"
  if (($(node_count) == 0)) || ! mode=$(recorded_net_mode); then
    log "no cluster runs (state dir $dir); start one with: $0 start"
    return 1
  fi
  echo "$mode"
}

cmd_env() {
  check_state_dir
  [[ -f $conf ]] || log "warning: no cluster configured yet; run: $0 start"
  printf 'export SLURM_CONF=%q\n' "$conf"
}

cmd_settings() {
  printf 'cluster_dir=%q cluster_port=%q cluster_subnet=%q\n' "$dir" "$port_base" "$subnet"
}

case ${1:-} in
  settings) cmd_settings ;;
  start) shift; (($# <= 1)) || die "usage: $0 start [N]"; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  net-mode) shift; cmd_net_mode "$@" ;;
  env) cmd_env ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
