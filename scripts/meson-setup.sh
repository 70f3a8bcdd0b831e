#!/usr/bin/env bash
# Configures this checkout in a build directory: a new one, or the existing one reconfigured.
# Prints meson's output only when it fails. CC and CXX pass through the environment.
#   scripts/meson-setup.sh BUILD_DIR [MESON OPTION...]
# meson runs with the build directory as its working directory, never the checkout: meson's CMake
# module runs `cmake --system-information`, which makes and deletes __cmake_systeminformation in its
# working directory, so two setups begun in one checkout at once (scripts/test-all.sh's lanes, or
# a lane's tests beside its sanitizer builds) broke each other ("Unable to find cmake").
set -euo pipefail
(($#)) || { echo "usage: scripts/meson-setup.sh BUILD_DIR [MESON OPTION...]" >&2; exit 2; }
source=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "$1")
shift
again=()
[[ ! -f $dir/build.ninja ]] || again=(--reconfigure)
mkdir -p "$dir"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cd "$dir"
meson setup "${again[@]}" . "$source" "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
