#!/usr/bin/env bash
# Installs the packages jobkit builds and tests with (as root), on Debian 12 (bookworm) or Debian 13
# (trixie, the root made by scripts/debian13.sh). Skips apt when every package is already there. With
# --fuzz, also what scripts/fuzz.sh needs (plain builds need no clang). `--list [CODENAME]` prints the
# package list of this platform (or of bookworm or trixie) and exits: scripts/debian13.sh caches its
# root by that list.
set -euo pipefail
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [[ ${1:-} == --list && -n ${2:-} ]]; then codename=$2; fi
packages=(
  g++ meson ninja-build pkg-config git python3   # build and test tools
  ccache                                         # meson compiles through it when found (scripts/test.sh's cache)
  dpkg-dev                                       # meson's Debian libdir (lib/<multiarch>), which CMake's find_package searches
  cmake                                          # the CMake consumer test (tests/consumer_cmake)
  libpmix-dev libpmix-bin libfmt-dev catch2      # jobkit's dependencies
  libslurm-dev                                   # slurm/slurm.h: time_left and requeue (libslurm is opened at run time)
  libpmi2-0-dev                                  # Slurm's PMI-2 (srun --mpi=pmi2; libpmi2 is opened at run time)
  slurmctld slurmd slurm-client munge            # the dev cluster (srun --mpi=pmix)
  iproute2 procps                                # the dev cluster's network namespaces; ps, pkill in tests
  nftables                                       # the lost-node tests cut a dev-cluster node off (tests/launched/lost_node.sh)
  openmpi-bin libopenmpi-dev                     # a second PMIx launcher, MPI coexistence tests
  python3-torch                                  # jobkit exec tests and the torch gloo peer benchmark
  python3-matplotlib                             # bench/plot.py: the figures of bench/RESULTS.md (test plots)
  pybind11-dev python3-dev                       # the Python module (python/jobkit)
  python3-pytest python3-mesonpy python3-venv    # its unit tests, pip install . and a venv to try it in
  python3-mypy                                   # the mypy test (tests/python/mypy.sh)
)
case $codename in
  bookworm)
    packages+=(clang-format)   # the format check (scripts/check-format.sh) runs on Debian 12 only
    packages+=(debootstrap)    # the Debian 13 root (scripts/debian13.sh)
    # clang 16 (14, Debian's default, lacks std::source_location), its libFuzzer and sanitizer
    # runtimes, llvm-symbolizer.
    fuzz_packages=(clang-16 libclang-rt-16-dev llvm-16) ;;
  trixie)
    # The sanitizer and fuzz runs stay on Debian 12 (scripts/test.sh).
    [[ ${1:-} != --fuzz ]] || { echo "install-deps: the fuzz targets are built on Debian 12 only" >&2; exit 1; }
    fuzz_packages=() ;;
  *) echo "install-deps: Debian 12 (bookworm) or 13 (trixie) expected, not '$codename'" >&2
     exit 1 ;;
esac
[[ ${1:-} == --fuzz ]] && packages+=("${fuzz_packages[@]}")
if [[ ${1:-} == --list ]]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  ((EUID == 0)) || { echo "install-deps: run as root to install: ${missing[*]}" >&2; exit 1; }
  echo "install-deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
