#!/usr/bin/env bash
# The whole suite on both platforms, side by side: Debian 12 on this machine and Debian 13 in its
# root (scripts/debian13.sh, made or reused from its cache), each platform a lane of its own (and,
# beside them, the fetch of PyPI's files for the python-venv test when they are not cached, and the
# build of the portable wheels that both platforms' portable-wheel tests install):
#   Debian 12: its build, then its tests (scripts/test.sh --build-only, --no-checked) and, beside
#              them, its unit tests under ASan+UBSan and TSan and its fuzz targets (--checked-only);
#   Debian 13: the root (made when its recipe changed), its build, then its tests.
# Each platform tests on its own dev cluster (own state dir, port and subnet) while the other runs.
# The cross-version tests run the other platform's build: while a lane builds, its build directory
# holds .jobkit-building, and those tests (last in their suite) wait until it is gone.
# Prints each phase's time, the ten slowest tests, each platform's summary and, last, the line
# "N passed, N failed, N skipped" over both; exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(realpath -m "${JOBKIT_BUILD_DIR:-build-test}")
build13=$PWD/build-test-13
times=$(mktemp)
logs=$(mktemp -d)
mkdir -p "$build" "$build13"
touch "$build/.jobkit-building" "$build13/.jobkit-building"
trap 'rm -f "$times" "$build/.jobkit-building" "$build13/.jobkit-building" "$build13/portable-wheels/.jobkit-building"; rm -rf "$logs"' EXIT
t0=$(date +%s)

# phase NAME CMD...: runs CMD, and records when it started and ended and how it exited (its output
# is also kept, for the end of the run: a CI shows only the last lines).
phase() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  echo "=== $name: started at +$((start - t0)) s"
  "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  echo "$name $((start - t0)) $(($(date +%s) - t0)) $rc" >>"$times"
  echo "=== $name: ended at +$(($(date +%s) - t0)) s (exit status $rc)"
  return $rc
}

# Both platforms' lanes write lines of their own: each line of Debian 13's is prefixed.
prefix() { sed -u "s/^/[debian13] /"; }

status=0
# Every package of this machine first (apt is not shared between the lanes), debootstrap included.
phase install-deps scripts/install-deps.sh --fuzz || status=1
phase install-easybuild scripts/install-easybuild.sh || status=1

# PyPI's files for the python-venv test (torch with its CUDA libraries, about 3 GB), fetched beside
# the builds when not cached: the network's time, not the CPUs'.
phase pypi-wheels tests/launched/venv.sh --fetch > >(sed -u "s/^/[pypi-wheels] /") 2>&1 &
fetch=$!
# The portable wheels (scripts/portable-wheel.sh), built once here for both platforms' portable-wheel
# tests, which wait while the directory holds .jobkit-building; at a lower CPU priority, beside the
# builds (zig's compiler under ccache: seconds when cached). In Debian 13's build directory, which
# is inside the repository, so that the root sees it at the same path.
export JOBKIT_PORTABLE_WHEELS=$build13/portable-wheels
rm -rf "$JOBKIT_PORTABLE_WHEELS" && mkdir -p "$JOBKIT_PORTABLE_WHEELS" && touch "$JOBKIT_PORTABLE_WHEELS/.jobkit-building"
{
  phase portable-wheels nice -n 10 tests/launched/portable_wheel.sh --build "$JOBKIT_PORTABLE_WHEELS"
  s=$?
  rm -f "$JOBKIT_PORTABLE_WHEELS/.jobkit-building"
  exit $s
} > >(sed -u "s/^/[portable-wheels] /") 2>&1 &
portable=$!

# built DIR: the build in DIR has ended, well or not.
built() { rm -f "$1/.jobkit-building"; }

(
  s=0
  { phase debian13-root scripts/debian13.sh root &&
    phase debian13-build env JOBKIT_BUILD_DIR="$build13" scripts/debian13.sh run scripts/test.sh --build-only; } || s=1
  built "$build13"
  ((s == 0)) || exit 1
  phase debian13-tests env JOBKIT_BUILD_DIR="$build13" JOBKIT_OTHER_BUILD_DIR="$build" scripts/debian13.sh run \
    bash -c 'scripts/test.sh; s=$?; slurm/dev-cluster.sh stop >/dev/null 2>&1; exit $s'
) > >(prefix) 2>&1 &
lane13=$!
(
  s=0
  phase debian12-build env JOBKIT_BUILD_DIR="$build" scripts/test.sh --build-only || s=1
  built "$build"
  ((s == 0)) || exit 1
  # The sanitizer and fuzz runs (CPU-bound, no cluster) beside this lane's tests, at a lower CPU
  # priority: Debian 13's build (then its tests) is the run's longest path, and the launched tests
  # wait on time, not CPU.
  phase debian12-sanitizers-fuzz nice -n 10 scripts/test.sh --checked-only > >(sed -u "s/^/[debian12-checked] /") 2>&1 &
  checked=$!
  phase debian12-tests env JOBKIT_BUILD_DIR="$build" JOBKIT_OTHER_BUILD_DIR="$build13" scripts/test.sh --no-checked ||
    s=1
  slurm/dev-cluster.sh stop >/dev/null 2>&1
  wait $checked || s=1
  exit $s
) &
lane12=$!
wait $lane12 || status=1
wait $lane13 || status=1
wait $fetch || status=1
wait $portable || status=1
# The prefixing sed of the lanes above ends with them; give its last lines a moment.
sleep 1

echo
echo "Phases (seconds from the start of scripts/test-all.sh):"
sort -n -k2 "$times" | awk '{printf "  %-26s %6d -> %6d  %6d s  exit %d\n", $1, $2, $3, $3 - $2, $4}'
echo "Whole run: $(($(date +%s) - t0)) s"
# The end of each failed phase's output, here at the end where a CI's short log shows it.
while read -r name _ _ rc; do
  ((rc == 0)) || { echo "--- $name failed (exit $rc); its last lines:"; tail -25 "$logs/$name.log"; }
done <"$times"
ci=()
[[ ${CI:-} != true ]] || ci=(--ci)
# The summary of each platform (its own failures and skips listed), then over both: each failed
# test with the end of its output (a CI's short log shows only the end of the run), the slowest ten
# and the total.
for spec in "Debian 12=$build" "Debian 13=$build13"; do
  name=${spec%%=*}
  dir=${spec#*=}
  dirs=("$name=$dir")
  [[ $name != "Debian 12" ]] || dirs+=("$name ASan=build-asan" "$name TSan=build-tsan" "$name fuzz=build-fuzz")
  echo "$name: $(scripts/test-summary.py "${ci[@]}" "${dirs[@]}" | tail -1)"
done
scripts/test-summary.py "${ci[@]}" --output-lines 60 --slowest 10 "Debian 12=$build" "Debian 12 ASan=build-asan" \
  "Debian 12 TSan=build-tsan" "Debian 12 fuzz=build-fuzz" "Debian 13=$build13" >"$times.summary"
cat "$times.summary"
failed=$(tail -1 "$times.summary" | sed 's/.* passed, \([0-9]*\) failed.*/\1/')
rm -f "$times.summary"
[[ $failed == 0 ]] || status=1
exit $status
