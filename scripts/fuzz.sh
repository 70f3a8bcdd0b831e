#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets of tests/fuzz with clang under ASan+UBSan (build-fuzz) and
# runs each for FUZZ_SECONDS (default 60; 0 replays the checked-in corpus only) on a copy of its
# corpus, as the meson tests of suite 'fuzz'. Prints one line per target (executions, corpus size,
# result) and exits non-zero on any crash, sanitizer report, leak or timeout, naming the reproducer.
# The results are in build-fuzz/meson-logs/testlog.json, which scripts/test.sh counts.
#   scripts/fuzz.sh [meson test arguments, e.g. fuzz-serialize]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --fuzz
build=${JOBKIT_FUZZ_BUILD_DIR:-build-fuzz}
export FUZZ_SECONDS=${FUZZ_SECONDS:-60}

# clang 16: Debian 12's default clang 14 cannot compile jobkit (no std::source_location with
# libstdc++ 12). -fsanitize=fuzzer-no-link gives libFuzzer coverage of the library too, not only of the targets.
# -O1, as libFuzzer's documentation builds its targets: the build is the checked lane's longest part,
# and -O1 compiles in less CPU than the project's default -O2 (docs/testing.md, "Where the time goes");
# a unity build for the same reason (scripts/sanitize.sh).
options=(-Dfuzz=true -Dunity=on -Dunity_size=100 -Dtests=disabled -Dcli=false -Dexamples=false -Dcuda=disabled -Dnccl=disabled -Dpython=disabled
  -Db_sanitize=address,undefined -Db_lundef=false
  "-Dcpp_args=-fsanitize=fuzzer-no-link -fno-sanitize-recover=all" -Doptimization=1 --wrap-mode=nodownload)
if [[ -f $build/build.ninja ]] && grep -q 'C++ compiler for the host machine: .*(clang 16\.' "$build/meson-logs/meson-log.txt"; then
  scripts/meson-setup.sh "$build" "${options[@]}"
else
  rm -rf "$build"  # not there, or set up with another compiler
  CC=clang-16 CXX=clang++-16 scripts/meson-setup.sh "$build" "${options[@]}"
fi
ninja -C "$build"

export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}
status=0
meson test -C "$build" --suite fuzz --no-rebuild --print-errorlogs "$@" || status=$?
python3 - "$build" <<'PY'
import json, sys
for line in open(f"{sys.argv[1]}/meson-logs/testlog.json"):
    t = json.loads(line)
    lines = [l for l in t.get("stdout", "").splitlines() if l.startswith("fuzz ")]
    print("\n".join(lines) if lines else f"{t['name']}: {t['result']}")
PY
exit $status
