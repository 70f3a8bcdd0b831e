#!/usr/bin/env bash
# The whole suite on both platforms: scripts/test.sh on this machine (Debian 12), then inside the
# Debian 13 root (scripts/debian13.sh, made or reused from its cache). Each platform's dev cluster is
# stopped when its tests end. Prints each platform's summary and, last, the line
# "N passed, N failed, N skipped" over both; exits non-zero when either platform failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${JOBKIT_BUILD_DIR:-build-test}
build13=$PWD/build-test-13
status=0
t0=$(date +%s)
# Debian 13's build first: Debian 12's cross-version tests run it (and Debian 13's run Debian 12's).
# JOBKIT_BUILD_DIR names Debian 12's build; Debian 13's is build-test-13.
JOBKIT_BUILD_DIR=$build13 scripts/debian13.sh run scripts/test.sh --build-only || status=1
JOBKIT_OTHER_BUILD_DIR=$build13 scripts/test.sh || status=1
slurm/dev-cluster.sh stop >/dev/null 2>&1
t1=$(date +%s)
JOBKIT_BUILD_DIR=$build13 JOBKIT_OTHER_BUILD_DIR=$(realpath -m "$build") scripts/debian13.sh run bash -c \
  'scripts/test.sh; s=$?; slurm/dev-cluster.sh stop >/dev/null 2>&1; exit $s' || status=1
t2=$(date +%s)
python3 - "$build/summary.txt" "$build13/summary.txt" "$((t1 - t0))" "$((t2 - t1))" <<'PY'
import re, sys
total = [0, 0, 0]
for path, name, seconds in ((sys.argv[1], "Debian 12", sys.argv[3]), (sys.argv[2], "Debian 13", sys.argv[4])):
    try:
        last = open(path).read().splitlines()[-1]
        counts = [int(n) for n in re.fullmatch(r"(\d+) passed, (\d+) failed, (\d+) skipped", last).groups()]
    except (OSError, IndexError, AttributeError):
        last, counts = "no summary (its build or setup failed)", [0, 1, 0]
    print(f"{name}: {last} ({seconds} s)")
    total = [a + b for a, b in zip(total, counts)]
print(f"{total[0]} passed, {total[1]} failed, {total[2]} skipped")
PY
exit $status
