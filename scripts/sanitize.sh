#!/usr/bin/env bash
# Sanitizers: builds the unit tests with g++ under ASan+UBSan (build-asan) and under TSan
# (build-tsan) and runs every unit test under both (leaks included; collectives, helpers, workspace
# and runtime run N threads as N ranks). Any report fails the test. Known reports from outside jobkit
# are suppressed by tests/sanitizers/*.supp, one reason per line. Both builds are without CUDA/NCCL,
# warnings as errors (scripts/test.sh has no other such build). The results are in each build
# directory's meson-logs/testlog.json, which scripts/test.sh counts.
#   scripts/sanitize.sh [asan|tsan]   (both when not given)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)
supp=$PWD/tests/sanitizers

setup() {  # dir, options...
  local dir=$1
  shift
  # -O0 (buildtype=debug): a quarter of -O2's compile time under ASan+UBSan, and no report optimised
  # away. A unity build (the library's files compiled a few at a time): each header is compiled
  # once per group rather than once per file (docs/testing.md, "Where the time goes"); each
  # platform's own build compiles file by file, so a file that does not stand alone is still found.
  local options=(-Dbuildtype=debug -Dunity=on -Dunity_size=100 -Dwerror=true -Dtests=enabled -Dcuda=disabled -Dnccl=disabled -Dcli=false -Dexamples=false -Dpython=disabled
    -Db_lundef=false --wrap-mode=nodownload "$@")
  scripts/meson-setup.sh "$dir" "${options[@]}"
  ninja -C "$dir"
}

# --timeout-multiplier 4: the tests' timeouts only catch hangs; under the sanitizers, beside the
# other lanes of scripts/test-all.sh on 2 cores, test_transport took more than its 60 s (ASan,
# 2026-11-27; 40 s on an idle machine; since split into the test_transport_* programs).
status=0
for kind in "${kinds[@]}"; do
  case $kind in
    asan)
      dir=${JOBKIT_ASAN_BUILD_DIR:-build-asan}
      setup "$dir" -Db_sanitize=address,undefined
      # fast_unwind_on_malloc=0: full allocation stacks through PMIx (built without frame pointers),
      # which lsan.supp matches on.
      ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1 \
      LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0 \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        meson test -C "$dir" --suite unit --no-rebuild --print-errorlogs --timeout-multiplier 4 || status=1
      ;;
    tsan)
      dir=${JOBKIT_TSAN_BUILD_DIR:-build-tsan}
      setup "$dir" -Db_sanitize=thread
      # die_after_fork=0: time_left's libslurm child (src/preemption/forked_call.cpp) starts a
      # thread after fork by design, which TSan otherwise ends the child for.
      TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:suppressions=$supp/tsan.supp:print_suppressions=0 \
        meson test -C "$dir" --suite unit --no-rebuild --print-errorlogs --timeout-multiplier 4 || status=1
      ;;
    *) echo "sanitize: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
  esac
done
exit $status
