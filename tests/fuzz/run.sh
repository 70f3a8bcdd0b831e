#!/usr/bin/env bash
# Runs one libFuzzer target for FUZZ_SECONDS (default 60; 0: only replay the corpus) on a fresh copy
# of its checked-in corpus, and prints one line: executions, corpus size, result. Any crash,
# sanitizer report, leak, timeout or out-of-memory fails (exit 1) and names the reproducer.
# Used as a meson test (tests/fuzz/meson.build) and through scripts/fuzz.sh.
#   run.sh NAME FUZZER CORPUS_DIR MAX_LEN WORK_DIR
set -uo pipefail
name=$1 fuzzer=$2 corpus=$3 max_len=$4 work=$5
seconds=${FUZZ_SECONDS:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz $name: FUZZ_SECONDS='$seconds' is not a whole number"; exit 1; }

# UBSan reports must stop the run (they only print otherwise); stacks for every report.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}

rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp -R "$corpus/." "$work/corpus/"
seeds=$(find "$work/corpus" -type f | wc -l)

# libFuzzer's own exit codes are 77 (meson: skipped) and 70: ask for plain ones.
args=(-rss_limit_mb=2048 -max_len="$max_len" -timeout=10 -print_final_stats=1
      -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$work/artifacts/")
if ((seconds > 0)); then
  args+=(-max_total_time="$seconds")
else
  args+=(-runs=0)  # execute every corpus input once, then stop
fi
log=$work/fuzz.log
start=$(date +%s)
# The guard only matters if libFuzzer itself hangs: it stops at -max_total_time.
timeout --kill-after=10 $((seconds + 300)) "$fuzzer" "${args[@]}" "$work/corpus" >"$log" 2>&1
status=$?
elapsed=$(($(date +%s) - start))

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
# libFuzzer's count (the folder also keeps inputs that a smaller one has replaced since).
size=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | sed 's/corp: //')
[[ -n $size ]] || size=$(find "$work/corpus" -type f | wc -l)
if ((status == 0)); then
  echo "fuzz $name: ${runs:-?} executions in ${elapsed} s, corpus $seeds -> $size inputs, ok"
  exit 0
fi
cat "$log"
reproducer=$(find "$work/artifacts" -type f | head -1)
kind=crash
[[ -n $reproducer ]] && kind=$(basename "$reproducer" | sed 's/-.*//')
((status == 124 || status == 137)) && kind="hang of libFuzzer itself"
echo "fuzz $name: ${runs:-?} executions in ${elapsed} s, corpus $seeds -> $size inputs, FAILED ($kind, exit $status)"
if [[ -n $reproducer ]]; then
  echo "fuzz $name: reproducer $reproducer"
  echo "fuzz $name: rerun with: $fuzzer $reproducer"
fi
exit 1
