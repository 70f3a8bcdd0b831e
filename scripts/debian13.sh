#!/usr/bin/env bash
# jobkit's second platform: a Debian 13 (trixie) root on this Debian 12 machine, with Debian 13's
# Slurm 24.11, OpenPMIx 5, Open MPI 5, gcc 14, Python 3.13 and torch 2.6. Run `scripts/debian13.sh
# --help` for usage.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/debian13.sh COMMAND

  root          Make the Debian 13 root if it is missing or stale, and print its path.
  run CMD...    Run CMD inside the root (made first if needed), as root, in this repository,
                which appears at the same path in there. The root gets its own /run, /dev/shm
                and /proc, this machine's /dev and /sys, and this machine's network stack (its
                dev cluster uses its own port and subnet, so it can run beside Debian 12's). The
                whole of this machine's file system is visible at /host in there.
                Everything CMD starts ends with it: each run is its own mount namespace.
  shell         An interactive shell inside the root (the same as `run bash`).
  path          Print the path the root has (or would have), without making it.
  -h, --help    This text.

The root is made with debootstrap (Debian 12's package) from Debian's trixie suite, then
scripts/install-deps.sh runs inside it. It is cached in JOBKIT_DEBIAN13_CACHE (default
/var/cache/jobkit), outside any checkout, under a name that hashes the recipe: trixie's package list,
the text of scripts/install-deps.sh and of the functions here that make and enter the root. A
change of any makes a new root (the old one is removed once the new one is ready). Making it takes
about 7 minutes and 2 GB. To force a fresh root, point JOBKIT_DEBIAN13_CACHE at an empty
directory.

Inside, the scripts know the platform from /etc/os-release: the dev cluster takes its own state
dir, port and subnet (/var/lib/jobkit-dev-cluster-13, 7217, 198.18.3; slurm/dev-cluster.sh
settings), and scripts/test.sh builds in build-test-13, so that the two platforms' clusters and
builds of one checkout never mix. Only JOBKIT_* variables (not JOBKIT_DEBIAN13_*), CI, FUZZ_SECONDS
and TERM pass from the caller's environment into the root.
EOF
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(dirname "$script_dir")
cache=${JOBKIT_DEBIAN13_CACHE:-/var/cache/jobkit}
mirror=${JOBKIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { echo "debian13: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The packages install-deps.sh installs on trixie, read without running it on this machine.
trixie_packages() { "$script_dir/install-deps.sh" --list trixie; }

# The root's name hashes its recipe: the packages, install-deps.sh (which installs them inside) and
# the text of every function that makes or enters it (declare -f: comments and layout do not count).
# A change to any of them names a new root, so the next run makes it from scratch.
root_path() {
  local hash
  hash=$({
    trixie_packages
    cat "$script_dir/install-deps.sh"
    echo "mirror $mirror"
    declare -f make_root enter_mounts in_root
  } | sha256sum | cut -c1-12)
  echo "$cache/debian13-$hash"
}

# Mounts what a command inside the root needs, in the current (private) mount namespace.
enter_mounts() { # root
  local root=$1
  # The root a mount point of its own: unshare and ip netns change the propagation of "/" in there.
  mount --bind "$root" "$root"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --make-rslave "$root/sys"
  mount -t tmpfs -o mode=755 tmpfs "$root/run"
  mkdir -p "$root/run/lock" "$root/host"
  mount --rbind / "$root/host"
  mount --make-rslave "$root/host"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  # This machine's names as it resolves them: slurmctld resolves the host srun registers (this
  # machine's name), and Debian's libslurm retries a failed lookup for 10 s holding the job's lock,
  # after which a slurmstepd's step-complete message times out and is sent again 60 s later.
  # A minbase root has no /etc/hosts of its own (make_root writes one; an older root may lack it).
  [[ -e $root/etc/hosts ]] || touch "$root/etc/hosts"
  { cat "$root/etc/hosts"; echo "# this machine's own (scripts/debian13.sh)"; cat /etc/hosts; } >"$root/run/hosts"
  mount --bind "$root/run/hosts" "$root/etc/hosts"
  mkdir -p "$root$repo_root"
  mount --rbind "$repo_root" "$root$repo_root"
  # NCCL and CUDA (not packaged in Debian 13), so that the GPU code builds there too.
  if [[ -d /usr/local/cuda ]]; then
    mkdir -p "$root/usr/local/cuda"
    mount --rbind "$(realpath /usr/local/cuda)" "$root/usr/local/cuda"
  fi
}

# Runs "$@" inside root (a private mount namespace, chroot), in the repository.
in_root() { # root cmd...
  local root=$1
  shift
  local keep=(TERM CI FUZZ_SECONDS)
  local v env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
  for v in "${keep[@]}"; do [[ -n ${!v+x} ]] && env+=("$v=${!v}"); done
  while IFS='=' read -r v _; do
    case $v in JOBKIT_DEBIAN13_*) ;; JOBKIT_*) env+=("$v=${!v}") ;; esac
  done < <(env)
  # The seeds' releases (tests/launched/seed_packages.py): this machine's cache, and its certificate
  # authorities for the download (a TLS proxy's are in this machine's bundle, not in the root's; the
  # files are checked against pinned digests either way).
  [[ -n ${JOBKIT_SEED_PACKAGES:-} ]] || env+=(JOBKIT_SEED_PACKAGES=/host/var/cache/jobkit/seed-packages)
  # scripts/test.sh's compiler cache: on this machine (kept when the root is made anew), beside
  # Debian 12's, with -13 appended.
  env+=("JOBKIT_CCACHE_DIR=/host${JOBKIT_CCACHE_DIR:-/var/cache/jobkit/ccache}-13")
  local authorities=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
  [[ -n ${JOBKIT_SEED_CA_FILE:-} || ! -f $authorities ]] || env+=(JOBKIT_SEED_CA_FILE=/host$authorities)
  unshare --mount --propagation private bash -c "
    set -euo pipefail
    $(declare -f enter_mounts)
    repo_root=$(printf %q "$repo_root")
    enter_mounts $(printf %q "$root")
    rc=0
    chroot $(printf %q "$root") /usr/bin/env -i $(printf '%q ' "${env[@]}") \
      bash -c 'cd \"\$0\" && exec \"\$@\"' $(printf %q "$repo_root") $(printf '%q ' "$@") || rc=\$?
    # What CMD left running (daemons such as munged) ends with it: every process of this mount
    # namespace but this shell.
    for pid in \$(pgrep --ns \$\$ --nslist mnt); do [[ \$pid == \$\$ ]] || kill -KILL \$pid 2>/dev/null || true; done
    exit \$rc
  "
}

make_root() {
  local root tmp
  root=$(root_path)
  if [[ -x $root/usr/bin/meson && -f $root/.jobkit-ready ]]; then
    echo "$root"
    return 0
  fi
  ((EUID == 0)) || die "must run as root (debootstrap, chroot, mounts)"
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  mkdir -p "$cache"
  exec 8>"$cache/.debian13.lock"
  flock -w 1800 8 || die "another scripts/debian13.sh holds $cache/.debian13.lock"
  if [[ -f $root/.jobkit-ready ]]; then echo "$root"; return 0; fi
  tmp=$root.partial
  rm -rf "$tmp"
  log "making $root (debootstrap trixie from $mirror, then scripts/install-deps.sh inside; a few minutes)"
  local t0=$SECONDS
  debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
  printf 'Types: deb\nURIs: %s\nSuites: trixie trixie-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$tmp/etc/apt/sources.list.d/debian.sources"
  rm -f "$tmp/etc/apt/sources.list"
  # debootstrap's minbase variant writes no /etc/hosts: the root's own names, as Debian's installer
  # writes them.
  [[ -e $tmp/etc/hosts ]] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$tmp/etc/hosts"
  # Services are started by the dev cluster, never by a package's postinst.
  printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
  chmod +x "$tmp/usr/sbin/policy-rc.d"
  in_root "$tmp" scripts/install-deps.sh >"$cache/install-deps.log" 2>&1 ||
    { tail -20 "$cache/install-deps.log" >&2; die "installing packages in the root failed (log: $cache/install-deps.log)"; }
  in_root "$tmp" apt-get clean
  touch "$tmp/.jobkit-ready"
  mv "$tmp" "$root"
  local old
  for old in "$cache"/debian13-*; do
    [[ $old == "$root" || $old == *.partial ]] && continue
    [[ -d $old ]] && { log "removing the stale root $old"; rm -rf --one-file-system "$old"; }
  done
  log "made $root in $((SECONDS - t0)) s"
  echo "$root"
}

case ${1:-} in
  root) make_root ;;
  path) root_path ;;
  run)
    shift
    (($#)) || die "usage: $0 run CMD..."
    root=$(make_root)
    in_root "$root" "$@" ;;
  shell) root=$(make_root); in_root "$root" bash ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
