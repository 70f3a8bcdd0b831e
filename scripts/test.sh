#!/usr/bin/env bash
# Installs what is missing, builds jobkit (warnings as errors), starts the dev cluster and runs
# every test. Last line: "N passed, N failed, N skipped".
# With CI=true a skipped test counts as failed: CI must run everything.
# On Debian 12 it also runs the unit tests under the sanitizers (their builds are the ones without
# CUDA/NCCL, warnings as errors) and the fuzz targets (FUZZ_SECONDS each, 30 here); on Debian 13
# (inside scripts/debian13.sh: `scripts/debian13.sh run scripts/test.sh`) the build with CUDA/NCCL
# and every unit, launched and Python test, in build directories of its own (build-test-13).
#   scripts/test.sh [--build-only]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [[ $codename == trixie ]]; then suffix=-13; else suffix=; fi
build=${JOBKIT_BUILD_DIR:-build-test$suffix}
rm -f "$build/summary.txt"

setup() {  # dir, options...
  local dir=$1
  shift
  if [[ -f $dir/build.ninja ]]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

setup "$build" -Dwerror=true -Dtests=enabled --wrap-mode=nodownload
ninja -C "$build"
# --build-only: scripts/test-all.sh builds both platforms before either tests (the cross-version
# tests run the other platform's build).
[[ ${1:-} != --build-only ]] || exit 0
checked=()
if [[ $codename != trixie ]]; then
  checked=(build-asan build-tsan build-fuzz)
fi

slurm/dev-cluster.sh start 3

status=0
meson test -C "$build" --print-errorlogs --num-processes 1 || status=$?
if [[ $codename != trixie ]]; then
  # The unit tests under ASan+UBSan and TSan, and every fuzz target for FUZZ_SECONDS.
  for d in build-asan build-tsan build-fuzz; do rm -f "$d/meson-logs/testlog.json"; done
  scripts/sanitize.sh || status=$?
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} scripts/fuzz.sh || status=$?
fi

python3 - "$build" "${CI:-}" "${checked[@]}" <<'PY' | tee "$build/summary.txt"
import json, os, sys
build, ci = sys.argv[1], sys.argv[2] == "true"
counts = {"passed": 0, "failed": 0, "skipped": 0}
for d in (build, *sys.argv[3:]):
    if not os.path.exists(f"{d}/meson-logs/testlog.json"):
        print(f"failed {d}: no tests ran (its build failed?)")
        counts["failed"] += 1
        continue
    for line in open(f"{d}/meson-logs/testlog.json"):
        t = json.loads(line)
        name = f"{d}: {t['name']}"
        if t["result"] == "OK":
            counts["passed"] += 1
        elif t["result"] == "SKIP":
            reason = next((l for l in t.get("stdout", "").splitlines() if l.startswith("SKIP")), "")
            print(f"skipped {name}: {reason}")
            counts["failed" if ci else "skipped"] += 1
        else:
            print(f"failed {name}: {t['result']}")
            counts["failed"] += 1
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
failed=$(tail -1 "$build/summary.txt" | sed 's/.* passed, \([0-9]*\) failed.*/\1/')
((status == 0 && failed == 0))
