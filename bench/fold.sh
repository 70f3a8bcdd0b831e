#!/usr/bin/env bash
# `jobkit fold` against `cat` on a synthetic `srun --label` log of a training step (bench/fold_log.py:
# a config dump, warnings, a line per rank and step, tracebacks), for each rank count of RANKS: the
# log is written to a temporary file (LINES lines in all, LINES / ranks per rank), read once into
# the page cache, then `cat`, `jobkit fold --ranks R --window 1000` and the same with `--numbers` each
# read it on stdin into /dev/null (`--window 1000`: a live step's window, which a file read without
# it would not have), by one loop and one statistic, REPEATS times in turn (cat, fold,
# fold --numbers, cat, ...), each bound to one CPU (`taskset -c CPU`, as Slurm binds a one-CPU task)
# under /usr/bin/time for its maximum RSS. The wall time is bash's EPOCHREALTIME around the whole
# command (taskset, time and the exec included: the "exec floor" below the table is that for
# `true`). Prints a markdown table for bench/RESULTS.md: the median wall time, input lines per
# second at the median, fold's lines per second over cat's (under 1: slower than cat), the largest
# maximum RSS over the repeats and the lines the command wrote (one more run, into wc -l).
#
#   bench/fold.sh [JOBKIT] [RANKS...]     (defaults: build/src/cli/jobkit, 512)
# Environment: LINES (default 1000000), REPEATS (default 5), SEED (default 1), CPU (default 0),
# RUN_TIMEOUT (seconds for one run, default 600), TMPDIR (where the logs go: 75 MB each),
# PYTHON (default python3).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
jobkit=$repo/build/src/cli/jobkit
if [[ $# -gt 0 && ! $1 =~ ^[0-9]+$ ]]; then jobkit=$(realpath -m "$1"); shift; fi
rank_counts=("${@:-512}")
[[ -x $jobkit ]] || { echo "$0: $jobkit missing: build first (meson setup build && ninja -C build)" >&2; exit 1; }
"$jobkit" fold --help >/dev/null || { echo "$0: $jobkit has no working 'fold' command" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "$0: needs /usr/bin/time (GNU time) for the maximum RSS" >&2; exit 1; }
total_lines=${LINES:-1000000}
repeats=${REPEATS:-5}
cpu=${CPU:-0}
python=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/jobkit-fold-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# One run: sets wall_s and rss_kb; a run that fails or times out ends the benchmark.
run_once() {
  local log=$1 t0 t1 rc=0
  shift
  t0=$EPOCHREALTIME
  timeout "${RUN_TIMEOUT:-600}" taskset -c "$cpu" /usr/bin/time -f %M -o "$tmp/rss" "$@" <"$log" >/dev/null || rc=$?
  t1=$EPOCHREALTIME
  if ((rc)); then
    echo "$0: '$*' < $log ended with status $rc$( ((rc == 124)) && echo " (over RUN_TIMEOUT=${RUN_TIMEOUT:-600} s)")" >&2
    tail -n 5 "$tmp/rss" >&2 || true
    exit 1
  fi
  wall_s=$(awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.6f", b - a }')
  rss_kb=$(tail -n 1 "$tmp/rss")
}

# The command line of a side at a rank count, into argv.
sides=(cat fold fold_numbers)
side_argv() {
  case $1 in
    cat) argv=(cat) ;;
    fold) argv=("$jobkit" fold --ranks "$2" --window 1000) ;;
    fold_numbers) argv=("$jobkit" fold --ranks "$2" --window 1000 --numbers) ;;
  esac
}

rows=$tmp/rows.tsv
: >"$rows"
for ranks in "${rank_counts[@]}"; do
  log=$tmp/srun-label-$ranks.log
  per_rank=$(((total_lines + ranks - 1) / ranks))
  start=$EPOCHREALTIME
  "$python" "$here/fold_log.py" "$ranks" "$per_rank" "${SEED:-1}" >"$log"
  input_lines=$(wc -l <"$log")
  bytes=$(stat -c %s "$log")
  echo "fold.sh: $ranks ranks: $input_lines lines, $bytes bytes, written in" \
    "$(awk -v a="${start/,/.}" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }') s" >&2
  cat "$log" >/dev/null  # into the page cache
  declare -A walls=() rss=()
  for ((i = 1; i <= repeats; i++)); do
    for side in "${sides[@]}"; do
      side_argv "$side" "$ranks"
      run_once "$log" "${argv[@]}"
      walls[$side]+="$wall_s "
      rss[$side]+="$rss_kb "
      echo "fold.sh: $ranks ranks, round $i, $side: $wall_s s, $rss_kb KB" >&2
    done
  done
  for side in "${sides[@]}"; do
    side_argv "$side" "$ranks"
    out_lines=$(taskset -c "$cpu" "${argv[@]}" <"$log" | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$ranks" "$input_lines" "$bytes" "$side" \
      "${walls[$side]}" "${rss[$side]}" "$out_lines" >>"$rows"
  done
  unset walls rss
  rm -f "$log"
done

floor=()
for ((i = 1; i <= repeats; i++)); do
  run_once /dev/null true
  floor+=("$wall_s")
done

"$python" - "$rows" "${floor[@]}" <<'EOF'
import statistics
import sys

names = {"cat": "`cat`", "fold": "`jobkit fold --ranks R --window 1000`", "fold_numbers": "`jobkit fold --ranks R --window 1000 --numbers`"}


def num(x):
    """About three significant figures, thousands separated, as bench/RESULTS.md writes them."""
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:#.3g}"


print("| ranks | log | command | median ms | lines/s | fold / cat (lines/s) | max RSS (MB) | lines out |")
print("|---|---|---|---|---|---|---|---|")
cat_rate = {}
for row in open(sys.argv[1]):
    ranks, lines, size, side, walls, rss, out = row.rstrip("\n").split("\t")
    lines = int(lines)
    walls = [float(w) for w in walls.split()]
    median = statistics.median(walls)
    rate = lines / median
    if side == "cat":
        cat_rate[ranks] = rate
    ratio = "-" if side == "cat" else f"{rate / cat_rate[ranks]:#.3g}"
    rss_mb = max(int(k) for k in rss.split()) / 1024
    log = f"{lines:,} lines, {int(size) / 1e6:.0f} MB"
    print(f"| {int(ranks):,} | {log} | {names[side]} | {num(median * 1e3)} | {num(rate / 1e6)} M | {ratio} | "
          f"{num(rss_mb)} | {int(out):,} |")
floor = statistics.median(float(w) for w in sys.argv[2:])
print(f"\nexec floor (`taskset` + `/usr/bin/time` + `true`, median of {len(sys.argv) - 2}): {floor * 1e3:.1f} ms")
EOF
