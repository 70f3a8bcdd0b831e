#!/usr/bin/env bash
# Runs a command (default: scripts/gpu-check.sh run) as on a GPU machine without jobkit's packages:
# in a private mount namespace (root) where the system's PMIx, fmt, Catch2, Open MPI, libevent, hwloc,
# munge, pkg-config, meson and ninja are hidden, so only .device/deps (scripts/gpu-check.sh fetch) can
# provide them. A development aid for scripts/gpu-check.sh; CI does not run it.
#   tests/gpu/bare-machine.sh scripts/gpu-check.sh run --build-dir .device/build-bare --quick
set -euo pipefail
cd "$(dirname "$0")/../.."
(($#)) || set -- scripts/gpu-check.sh run --build-dir .device/build-bare --quick
# shellcheck disable=SC2016 # the inner script expands its own variables
exec unshare --mount --propagation private bash -euo pipefail -c '
  empty=$(mktemp -d) blank=$(mktemp)
  lib=/usr/lib/x86_64-linux-gnu
  for d in $lib/pmix2 $lib/openmpi /usr/share/openmpi /etc/openmpi /usr/include/fmt /usr/include/catch2 \
           $lib/pkgconfig /usr/share/pkgconfig /usr/lib/python3/dist-packages/mesonbuild; do
    [[ -d $d ]] && mount --bind "$empty" "$d"
  done
  for f in $lib/libfmt.so* $lib/libopen-rte.so* $lib/libopen-pal.so* $lib/libevent_core* $lib/libevent_pthreads* \
           $lib/libhwloc.so* $lib/libmunge.so* /usr/bin/orterun /usr/bin/pkgconf /usr/bin/pkg-config /usr/bin/meson \
           /usr/bin/ninja /usr/bin/opal_wrapper; do
    [[ -e $f && ! -L $f ]] && mount --bind "$blank" "$f"
  done
  ! [[ -x $(command -v mpirun) ]] && ! [[ -x $(command -v meson) ]] && ! pkg-config --version &>/dev/null || { echo "bare-machine: hiding failed"; exit 2; }
  "$@"
' bare-machine "$@"
