#!/usr/bin/env bash
# Installs what is missing, builds jobkit (warnings as errors), starts the dev cluster and runs
# every test of this platform. Last line: "N passed, N failed, N skipped" (also in BUILD/summary.txt).
# With CI=true a skipped test counts as failed: CI must run everything.
# On Debian 12 it also runs the unit tests under the sanitizers (their builds are the ones without
# CUDA/NCCL, warnings as errors) and the fuzz targets (FUZZ_SECONDS each, 30 here); on Debian 13
# (inside scripts/debian13.sh: `scripts/debian13.sh run scripts/test.sh`) the build with CUDA/NCCL
# and every unit, launched and Python test, in build directories of its own (build-test-13).
# The launched tests (suite `launched`, one at a time on the dev cluster) run beside the others
# (unit, style, consumer, gpu: one at a time too), each set with its own log (meson-logs/testlog-*.json).
#   scripts/test.sh [--build-only | --checked-only | --no-checked]
#     --build-only    install and build only (scripts/test-all.sh builds both platforms first: the
#                     cross-version tests run the other platform's build)
#     --checked-only  Debian 12: only the sanitizer runs and the fuzz targets
#     --no-checked    Debian 12: everything but those (scripts/test-all.sh runs them beside these
#                     tests)
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
case $part in all | --build-only | --checked-only | --no-checked) ;; *)
  echo "usage: scripts/test.sh [--build-only | --checked-only | --no-checked]" >&2; exit 2 ;;
esac
scripts/install-deps.sh
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [[ $codename == trixie ]]; then suffix=-13; else suffix=; fi
build=${JOBKIT_BUILD_DIR:-build-test$suffix}
ci=()
[[ ${CI:-} != true ]] || ci=(--ci)
# meson compiles through ccache when it is on PATH: each platform's objects are cached outside the
# checkout, so that a run after a small change rebuilds little. The results never depend on it
# (an empty directory only makes the builds slower).
export CCACHE_DIR=${JOBKIT_CCACHE_DIR:-/var/cache/jobkit/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-3G}
# Paths below this checkout hashed relative to it, and the build directory's path not hashed (it
# is in the debug information only): a clone elsewhere hits the same entries.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}

# The unit tests under ASan+UBSan and TSan, and every fuzz target for FUZZ_SECONDS (Debian 12).
checked() {
  local status=0 d
  for d in build-asan build-tsan build-fuzz; do rm -f "$d"/meson-logs/testlog*.json; done
  scripts/sanitize.sh || status=1
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} scripts/fuzz.sh || status=1
  return $status
}
checked_dirs=()
if [[ $codename != trixie ]]; then checked_dirs=(build-asan build-tsan build-fuzz); fi

if [[ $part == --checked-only ]]; then
  ((${#checked_dirs[@]})) || { echo "test.sh: the sanitizer and fuzz runs are Debian 12's" >&2; exit 2; }
  status=0
  checked || status=1
  scripts/test-summary.py "${ci[@]}" "${checked_dirs[@]}" || status=1
  exit $status
fi

rm -f "$build/summary.txt"
scripts/meson-setup.sh "$build" -Dwerror=true -Dtests=enabled --wrap-mode=nodownload
ninja -C "$build"
[[ $part != --build-only ]] || exit 0

slurm/dev-cluster.sh start 3

status=0
rm -f "$build"/meson-logs/testlog*.json
# Everything but the launched tests beside the launched ones; its output follows theirs.
other_out=$build/meson-logs/other-output.txt
# One at a time, with --timeout-multiplier 3: their timeouts only catch hangs, and they share 2
# cores with the launched tests (and, under scripts/test-all.sh, with the other platform's lane and
# the sanitizer builds: on 2026-11-27 the consumer tests, two at a time there, passed their 600 and
# 900 s without ending).
# At a lower CPU priority (nice 10): the consumer tests' builds are throughput work, while the
# launched tests wait on time (and, under scripts/test-all.sh, the other platform's build is the
# run's longest path).
nice -n 10 meson test -C "$build" --no-rebuild --print-errorlogs --no-suite launched --num-processes 1 \
  --timeout-multiplier 3 --logbase testlog-other >"$other_out" 2>&1 &
other=$!
meson test -C "$build" --no-rebuild --print-errorlogs --suite launched --num-processes 1 \
  --logbase testlog-launched || status=1
wait $other || status=1
echo "--- the tests without a cluster (unit, style, consumer, gpu) ---"
cat "$other_out"
counted=("$build")
if [[ $part == all && ${#checked_dirs[@]} -gt 0 ]]; then
  checked || status=1
  counted+=("${checked_dirs[@]}")
fi

scripts/test-summary.py "${ci[@]}" "${counted[@]}" | tee "$build/summary.txt"
failed=$(tail -1 "$build/summary.txt" | sed 's/.* passed, \([0-9]*\) failed.*/\1/')
((status == 0 && failed == 0))
