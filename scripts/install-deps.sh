#!/usr/bin/env bash
# Installs the Debian 12 packages jobkit builds and tests with (as root). Skips apt when every
# package is already there. With --fuzz, also what scripts/fuzz.sh needs (plain builds need no clang).
set -euo pipefail
packages=(
  g++ meson ninja-build pkg-config git python3   # build and test tools
  clang-format                                   # the format check (scripts/check-format.sh)
  cmake                                          # the CMake consumer test (tests/consumer_cmake)
  libpmix-dev libpmix-bin libfmt-dev catch2      # jobkit's dependencies
  libslurm-dev                                   # slurm/slurm.h: time_left and requeue (libslurm is opened at run time)
  slurmctld slurmd slurm-client munge            # the dev cluster (srun --mpi=pmix)
  openmpi-bin libopenmpi-dev                     # a second PMIx launcher, MPI coexistence tests
  python3-torch                                  # jobkit exec tests and the torch gloo peer benchmark
  pybind11-dev python3-dev                       # the Python module (python/jobkit)
  python3-pytest python3-mesonpy python3-venv    # its unit tests, pip install . and a venv to try it in
)
# clang 16 (14, Debian's default, lacks std::source_location), its libFuzzer and sanitizer runtimes,
# llvm-symbolizer.
fuzz_packages=(clang-16 libclang-rt-16-dev llvm-16)
[[ ${1:-} == --fuzz ]] && packages+=("${fuzz_packages[@]}")
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
