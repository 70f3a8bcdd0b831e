# Shared by the launched tests: find the dev cluster or skip (exit 77, meson's skip status).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
first_argument=${1:-}
repo=$(cd "$here/../.." && pwd -P)

skip() {
  echo "SKIP: $*"
  exit 77
}

need_cluster() {
  command -v srun >/dev/null || skip "srun not installed (apt-get install slurm-client)"
  eval "$("$repo/slurm/dev-cluster.sh" env)"
  # A controller that cannot resolve the host srun registers stalls 10 s in each lookup (Debian's
  # libslurm retries; this was the Debian 13 root's case until scripts/debian13.sh gave it this
  # machine's /etc/hosts): ask for a minute before deciding that no cluster runs.
  local deadline=$((SECONDS + 60))
  until timeout 10 sinfo -h >/dev/null 2>&1; do
    ((SECONDS < deadline)) ||
      skip "no Slurm cluster answers at SLURM_CONF=$SLURM_CONF; start one with slurm/dev-cluster.sh start"
    sleep 1
  done
  local nodes
  nodes=$(sinfo -h -N -o %N | sort -u | wc -l)
  ((nodes >= 3)) || skip "the dev cluster has $nodes nodes, these tests need 3"
  # Launched tests run one at a time (all are is_parallel: false), so a job still running or
  # pending now is an earlier test's leftover (a hung srun keeps its allocation), which would make
  # this and every later test wait for nodes: cancel it, saying so.
  local left
  left=$(timeout 10 squeue -h -u "$(id -un)" -t PENDING,RUNNING,SUSPENDED -o %F 2>/dev/null | sort -u | xargs)
  if [[ -n $left ]]; then
    echo "NOTE: job(s) $left left by an earlier test: cancelled"
    # shellcheck disable=SC2086 # one argument per job
    scancel $left
  fi
  # A job may still be completing and hold its nodes (with the stalled lookup above, a
  # slurmstepd's step-complete message timed out and was resent 60 s later, the job completing
  # after 75 s): a step on those nodes would wait for them, and srun print that it waits. Wait up
  # to 150 s for the queue to empty.
  deadline=$((SECONDS + 150))
  while [[ -n $(timeout 10 squeue -h -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.5; done
  # A node an earlier test's fault left drained (Slurm's "Kill task failed": a slurmstepd that did
  # not see a rank end within UnkillableStepTimeout) would fail every later test that needs it: no
  # test drains one on purpose, so it is resumed, saying which and why.
  local drained
  drained=$(timeout 10 sinfo -h -N -t drain -o '%N: %E' 2>/dev/null | sort -u)
  if [[ -n $drained ]]; then
    echo "NOTE: node(s) drained by an earlier test, resumed: $(paste -sd ';' <<<"$drained")"
    timeout 10 scontrol update nodename="$(cut -d: -f1 <<<"$drained" | paste -sd, -)" state=resume ||
      echo "NOTE: scontrol could not resume them"
  fi
  # netns: every node is a host of its own on a network; loopback: all on 127.0.0.1.
  echo "network: $("$repo/slurm/dev-cluster.sh" net-mode 2>/dev/null || echo unknown)"
}

need_mpirun() {
  command -v mpirun >/dev/null || skip "mpirun not installed (apt-get install openmpi-bin)"
}

mpirun_=(mpirun --allow-run-as-root --oversubscribe)

fail() {
  echo "FAIL: $*"
  exit 1
}

# run_step CMD...: runs a step; keeps its output in $out, its exit status in $status and its wall
# time in $elapsed_ms, prints them, and fails when the step hung (timeout's status 124).
run_step() {
  local start
  start=$(date +%s%N)
  out=$("$@" 2>&1)
  status=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  echo "$out"
  echo "elapsed: $elapsed_ms ms, exit status $status"
  ((status != 124)) || fail "the step hung"
}

# count PATTERN: how many lines of the last step's output match (grep -c).
count() { grep -c -- "$1" <<<"$out" || true; }

# declare_modes MODE...: the modes of the sourcing script, declared once. `SCRIPT --modes` prints
# them (tests/launched/meson.build registers one test per mode from it); an unknown mode fails.
declare_modes() {
  if [[ $first_argument == --modes ]]; then
    echo "$*"
    exit 0
  fi
  local m
  for m in "$@"; do [[ $m == "$first_argument" ]] && return 0; done
  fail "unknown mode '$first_argument' (modes: $*)"
}

# no_segments_left: fails when the last step (whose rank 0 printed "job ID") left a shared memory
# segment of its own (/dev/shm/jobkit-ID.*) on any node; /dev/shm is private to each node.
no_segments_left() {
  local job node left
  job=$(awk '$1 == "job" {print $2; exit}' <<<"$out")
  [[ -n $job && $job != none ]] || fail "the step printed no job id"
  for node in $(sinfo -h -N -o %N | sort -u); do
    left=$(timeout 30 srun -w "$node" -N1 -n1 bash -c "ls /dev/shm | grep '^jobkit-$job\\.' || true")
    [[ -z $left ]] || fail "segments left on $node: $left"
  done
  echo "no shared memory segment of job $job left on any node"
}

# last_rank_died_and_was_named: the last step (collectives_check die HOW OP on -N3 -n9) failed,
# every one of the 8 survivors named rank 8 (c3) as gone, none finished without noticing, each
# noticed within 5 s of the death (by the ranks' own clocks: the nodes share this machine's), and
# no shared memory segment was left. Rank 8 shares c3 with its node leader: seen through its pidfd,
# or its group's departure. The whole step gets 30 s: after the ranks have exited, Slurm 24.11's
# srun took another 5 s to end the step in some runs ("Force Terminated"), Slurm 22.05's none.
last_rank_died_and_was_named() {
  ((status != 0)) || fail "the step succeeded"
  (($(count 'rank error: rank 8 (c3) \(closed its connection\|exited\|left the group\)') == 8)) ||
    fail "not every surviving rank named the dead rank"
  (($(count 'without noticing') == 0)) || fail "a rank missed the death"
  (($(count ' noticed at ') == 8)) || fail "not every surviving rank said when it noticed"
  late=$(awk '/ dies at / {died = $5} / noticed at / {at[$2] = $5}
    END {for (r in at) if ((at[r] - died) / 1e9 > 5) print "rank " r}' <<<"$out")
  [[ -z $late ]] || fail "noticed more than 5 s after the death: $late"
  ((elapsed_ms < 30000)) || fail "the step took ${elapsed_ms} ms, more than 30 s"
  no_segments_left
}

# job_field JOB NAME: a field of `scontrol show job` ("" once Slurm forgot the job).
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# wait_job_ended JOB [SECONDS]: until the batch job ended for good (not requeued), at most SECONDS
# (150 by default); its last state is in $job_state.
wait_job_ended() {
  local deadline=$((SECONDS + ${2:-150}))
  job_state=
  while ((SECONDS < deadline)); do
    job_state=$(job_field "$1" JobState)
    case $job_state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;; esac
    sleep 1
  done
}

# unfold: standard input with each line of `jobkit fold` ("[rank: 0-2,5] text") written once per
# rank ("[rank: 0] text", ...), every other line as it is: counts per rank hold whether the
# output was folded (the sbatch templates fold their steps) or not.
unfold() {
  awk '
    match($0, /^\[rank: [0-9][0-9,-]*\] /) {
      text = substr($0, RLENGTH + 1)
      n = split(substr($0, 8, RLENGTH - 9), parts, ",")
      for (i = 1; i <= n; i++) {
        m = split(parts[i], ends, "-")
        for (r = ends[1] + 0; r <= ends[m] + 0; r++) print "[rank: " r "] " text
      }
      next
    }
    { print }'
}

# The first python3 on PATH, else the first of pyenv's by name, whose prefix is not the system's and which has
# pip and venv; its minor version must be one PyPI's torch has wheels for (3.10 to 3.14).
find_python() {
  local candidate real
  for candidate in $(type -ap python3) "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3; do
    [[ -x $candidate ]] || continue
    real=$("$candidate" -c 'import sys, venv, ensurepip
if sys.base_prefix != "/usr" and (3, 10) <= sys.version_info[:2] <= (3, 14): print(sys.executable)' 2>/dev/null) ||
      continue
    [[ -n $real ]] && { echo "$real"; return 0; }
  done
  return 0
}

# fetch_wheelhouse PYTHON: sets $wheelhouse, the pinned files for PYTHON's version, fetched from
# PyPI once (into a .partial directory renamed when complete) and named by the requirements' hash.
fetch_wheelhouse() {
  local python=$1 requirements=$here/pypi-requirements.txt tag
  local cache=${JOBKIT_PYPI_WHEELS:-/var/cache/jobkit/pypi-wheels}
  tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') || fail "$python does not run"
  wheelhouse=$cache/$tag-$(sha256sum "$requirements" | cut -c1-12)
  [[ ! -d $wheelhouse ]] || return 0
  mkdir -p "$cache" || fail "cannot make JOBKIT_PYPI_WHEELS '$cache'"
  exec 9>"$cache/.lock"
  flock -w 1800 9 || fail "another fetch holds $cache/.lock"
  if [[ ! -d $wheelhouse ]]; then
    rm -rf "$wheelhouse.partial"
    TIMEFORMAT="wheelhouse fetched from PyPI in %R s"
    time (env -u PIP_NO_INDEX -u PIP_FIND_LINKS "$python" -m pip download --only-binary=:all: \
      --dest "$wheelhouse.partial" -r "$requirements" >"$cache/fetch.log" 2>&1) ||
      { tail -20 "$cache/fetch.log"; fail "pip download from PyPI failed (log: $cache/fetch.log)"; }
    mv "$wheelhouse.partial" "$wheelhouse" || fail "cannot rename $wheelhouse.partial"
  fi
  exec 9>&-
}

# template_use_libuv PYTHON: sets use_libuv to the USE_LIBUV that slurm/train-python.sbatch exports
# for PYTHON's torch (0 where that torch was built without libuv, Debian 13's 2.6: env:// then needs
# torch's other TCPStore server), empty where it exports none. The template's own check, taken from
# its text, so that a test runs a torch script as the template would.
template_use_libuv() {
  local template=$repo/slurm/train-python.sbatch snippet
  snippet=$(sed -n '/^if \[\[ -z ${USE_LIBUV/,/^fi/p' "$template")
  [[ -n $snippet ]] || fail "$template has no 'if [[ -z \${USE_LIBUV ... fi' check to take USE_LIBUV from"
  # shellcheck disable=SC2034 # the caller's
  use_libuv=$(PYTHON=$1 bash -c "$snippet"$'\necho "${USE_LIBUV:-}"') || fail "$template's USE_LIBUV check failed"
}

# wheel_venv [--forbid ERE] [VENV_OPTION...] VENV PYTHON WHEEL: a fresh venv VENV of PYTHON (each
# VENV_OPTION passed to `python -m venv`: --system-site-packages) with WHEEL installed from its file
# alone (pip's output in VENV.log). Sets py (VENV/bin/python), cli (VENV/bin/jobkit) and extension
# (jobkit._jobkit's file, which must be the venv's), and fails unless both of these binaries need
# no library beyond the system's (by ldd, whose output is kept whole before it is searched): none not
# found, no libjobkit (its objects are inside), no libpmix (opened at run time), no libfmt (compiled
# in), and none that matches ERE.
wheel_venv() {
  local forbid='not found|libjobkit|libpmix|libfmt' options=()
  while [[ ${1:-} == -* ]]; do
    if [[ $1 == --forbid ]]; then
      (($# >= 2)) || fail "wheel_venv: --forbid needs an ERE"
      forbid+="|$2"
      shift 2
    else
      options+=("$1")
      shift
    fi
  done
  (($# == 3)) || fail "usage: wheel_venv [--forbid ERE] [VENV_OPTION...] VENV PYTHON WHEEL"
  local venv=$1 python=$2 wheel=$3 file needed bad
  "$python" -m venv "${options[@]}" "$venv" || fail "$python -m venv ${options[*]} $venv failed"
  py=$venv/bin/python
  cli=$venv/bin/jobkit
  "$py" -m pip install --no-index --no-deps "$wheel" >"$venv.log" 2>&1 ||
    { tail -20 "$venv.log"; fail "pip install of $wheel into $venv failed (log: $venv.log)"; }
  [[ -x $cli ]] || fail "the venv $venv has no bin/jobkit from $(basename "$wheel")"
  # -I: neither the current directory nor the environment can put another jobkit first.
  extension=$("$py" -I -c 'import jobkit._jobkit as m; print(m.__file__)') || fail "$py cannot import jobkit"
  [[ $extension == "$venv"/lib/python3*/site-packages/jobkit/_jobkit.*.so ]] ||
    fail "jobkit._jobkit is not the venv's ($venv): $extension"
  for file in "$extension" "$cli"; do
    needed=$(ldd "$file") || fail "ldd $file failed"
    echo "ldd ${file#"$venv"/}:"
    echo "$needed"
    if bad=$(grep -E -- "$forbid" <<<"$needed"); then  # grep's 1 (no match) is the pass, under set -e too
      fail "${file#"$venv"/} of $(basename "$wheel") needs a library beyond the system's ($forbid): $bad"
    fi
  done
}
