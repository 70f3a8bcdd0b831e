#!/usr/bin/env bash
# The path of a torch user with a Python of their own: a fresh venv of a Python that is not the
# system's, a wheel of <checkout> built with pip's build isolation (meson-python, meson, ninja and
# pybind11 from PyPI) that needs no library but libc, libm, libstdc++ and libgcc_s (auditwheel
# show), installed with pip; PyPI's torch, then a DDP step (tests/launched/ddp_check.py) under srun on 3
# nodes, uneven and cyclic, both import orders, initialised by jobkit.torch.init_process_group and
# by torch's env:// under `jobkit exec` (a script that imports jobkit, and an unchanged torch
# script). PyPI's files come from a wheelhouse fetched once into a cache outside the checkout
# (pypi-requirements.txt pins them).
# usage: venv.sh --find-python          prints the Python it would use, or nothing (meson registers
#                                       the test only where it prints one)
#        venv.sh --fetch                fetches that Python's wheelhouse unless cached (scripts/test-all.sh
#                                       begins with it, beside the builds)
#        venv.sh PYTHON SOURCE_DIR WORK_DIR
#   PYTHON      a Python whose prefix is not /usr (the user's: pyenv's, conda's, a python.org build)
#   SOURCE_DIR  this repository; copied into WORK_DIR and built there, never written to
#   WORK_DIR    emptied, then holds the copy, the build, the venv; every node must see it
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)

source "$here/lib.sh"

case ${1:-} in
  --find-python) find_python; exit 0 ;;
  --fetch)
    python=$(find_python)
    [[ -n $python ]] || { echo "venv.sh: no Python of the user's kind here: nothing to fetch"; exit 0; }
    fetch_wheelhouse "$python"
    echo "wheelhouse: $wheelhouse ($(ls "$wheelhouse" | wc -l) files, $(du -sh "$wheelhouse" | cut -f1))"
    exit 0 ;;
esac
python=${1:-}
source_dir=${2:-}
work=${3:-}
[[ -x $python ]] || fail "PYTHON '$python' is not an executable"
[[ -f $source_dir/pyproject.toml ]] || fail "SOURCE_DIR '$source_dir' has no pyproject.toml"
[[ $work == /* && $work != / ]] || fail "WORK_DIR '$work' is not an absolute path below /"
case $work in /tmp | /tmp/*) fail "WORK_DIR '$work' is under /tmp, which every dev-cluster node has its own of" ;; esac
source_dir=$(cd "$source_dir" && pwd -P)
need_cluster
echo "python: $python ($("$python" -c 'import sys; print(sys.version.split()[0], "prefix", sys.base_prefix)'))"

# What the user's environment could slip in; pip takes only the wheelhouse below.
unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV
while read -r name; do unset "$name"; done < <(env | awk -F= '/^PIP_/ {print $1}')
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
fetch_wheelhouse "$python"

echo "wheelhouse: $wheelhouse ($(ls "$wheelhouse" | wc -l) files, $(du -sh "$wheelhouse" | cut -f1))"
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$wheelhouse

if [[ -e $work && ! -e $work/.jobkit-venv-test && -n $(ls -A "$work" 2>/dev/null) ]]; then
  fail "WORK_DIR '$work' holds files this test did not make (no .jobkit-venv-test in it): not emptying it"
fi
rm -rf "$work" && mkdir -p "$work/src" "$work/check" && touch "$work/.jobkit-venv-test" || fail "cannot make WORK_DIR '$work'"
# The tracked and untracked files git does not ignore: what a clean clone holds.
(cd "$source_dir" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$work/src" -xf - ||
  fail "cannot copy $source_dir to $work/src"

venv=$work/venv
"$python" -m venv "$venv" || fail "$python -m venv $venv failed"
py=$venv/bin/python
# pyproject.toml's build, as a user gets it: build isolation (the build tools pip installs into a
# throwaway environment, here from the wheelhouse), two compilers at a time, a fixed build
# directory (so that ccache, when there, finds it again), at a lower CPU priority (throughput work
# beside the other tests), as a unity build (less CPU; the platform's own build compiles every file
# alone).
TIMEFORMAT="wheel built in %R s (CPU: user %U s, sys %S s)"
time (cd "$work/check" && nice -n 10 "$py" -m pip wheel -v --no-deps --wheel-dir "$work/dist" --config-settings=compile-args=-j2 --config-settings=setup-args=-Dunity=on --config-settings=setup-args=-Dunity_size=100 \
  --config-settings=build-dir="$work/build" "$work/src" >"$work/build.log" 2>&1) ||
  { tail -40 "$work/build.log"; fail "pip wheel $work/src failed (log: $work/build.log)"; }
grep -E "Successfully built|meson-python|Collecting (meson|pybind11|ninja)" "$work/build.log" | head -8
wheel=$(ls "$work"/dist/jobkit-*.whl) || fail "no wheel in $work/dist"
# What the wheel needs from the machine (auditwheel, PyPI's): only what every Linux has, since
# libpmix is opened at run time and fmt is compiled in (pyproject.toml).
"$py" -m pip install auditwheel >"$work/auditwheel.log" 2>&1 || { tail -5 "$work/auditwheel.log"; fail "pip install auditwheel failed"; }
shown=$("$venv/bin/auditwheel" show "$wheel" 2>&1) || fail "auditwheel show $wheel failed: $shown"
echo "$shown" | sed 's/^/  auditwheel: /'
shown=$(tr '\n' ' ' <<<"$shown")
[[ $shown != *"external shared libraries are required"* ]] || fail "the wheel needs a library outside the system's"
for library in $(grep -o 'lib[A-Za-z0-9_+.-]*\.so[.0-9]*' <<<"$shown" | sort -u); do
  case $library in libc.so.6 | libm.so.6 | libstdc++.so.6 | libgcc_s.so.1 | ld-linux-x86-64.so.2) ;;
    *) fail "auditwheel names $library: the wheel should need only libc, libm, libstdc++ and libgcc_s" ;;
  esac
done
"$py" -m pip install "$wheel" >>"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; fail "pip install $wheel failed"; }
TIMEFORMAT="torch installed in %R s"
# --no-compile: torch's thousands of .py files compiled when first imported, not all at install.
time "$py" -m pip install --no-compile torch >"$work/torch.log" 2>&1 || { tail -20 "$work/torch.log"; fail "pip install torch failed"; }

cd "$work/check" || fail "no $work/check"
"$py" - "$venv" <<'EOF' || fail "the venv's jobkit or torch is wrong"
import sys, jobkit, jobkit._jobkit, torch
venv = sys.argv[1]
for module in (jobkit._jobkit, torch):
    print(f"{module.__name__} {getattr(module, '__version__', '')} from {module.__file__}")
    assert module.__file__.startswith(venv + "/"), f"{module.__name__} is not the venv's"
# No launcher here: the single-rank defaults.
assert (jobkit.rank(), jobkit.world_size()) == (0, 1), (jobkit.rank(), jobkit.world_size())
print("single rank:", jobkit.identity())
EOF
ldd "$("$py" -c 'import jobkit._jobkit as m; print(m.__file__)')" | sed 's/^/  /'
# Where no libpmix can be loaded: the wheel's module imports and gives the single-rank defaults.
"$here/../no_pmix/run.sh" - - "$py" | sed 's/^/  no libpmix: /'
rc=${PIPESTATUS[0]}
((rc == 0 || rc == 77)) || fail "the wheel's module without libpmix (tests/no_pmix/run.sh)"
[[ -z $(timeout 60 srun -N3 --ntasks-per-node=1 bash -c "[[ -x $py ]] || hostname") ]] || fail "a node does not see $venv"

cp "$here/ddp_check.py" "$work/check/" || fail "cannot copy ddp_check.py"
clean=(env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK
  -u JOBKIT_TORCH_VARIABLES)
step=(timeout 600 srun --mpi=pmix --kill-on-bad-exit=1 --chdir="$work/check")
uneven=(-N3 -n7)                          # 5+1+1
cyclic=(-N3 -n8 --distribution=cyclic)    # 6+1+1, ranks dealt cyclically
# check RANKS WHAT ORDER INIT: the last step's every rank trained, with ORDER and INIT.
check() {
  ((status == 0)) || fail "$2: exit status $status"
  (($(count "ddp ok $3 $4 ") == $1)) || fail "$2: not every one of the $1 ranks printed ddp ok"
  echo "--- $2: ok"
}
run_step "${clean[@]}" "${step[@]}" "${uneven[@]}" "$py" ddp_check.py jobkit-first jobkit
check 7 "uneven, jobkit.torch.init_process_group" jobkit-first jobkit
run_step "${clean[@]}" "${step[@]}" "${cyclic[@]}" "$py" ddp_check.py torch-first jobkit
check 8 "cyclic, jobkit.torch.init_process_group" torch-first jobkit
# jobkit exec: the wheel's own command, from the venv's bin/.
cli=$venv/bin/jobkit
[[ -x $cli ]] || fail "the venv has no bin/jobkit from the wheel"
run_step "${clean[@]}" "${step[@]}" "${uneven[@]}" "$cli" exec --timeout 120 -- "$py" ddp_check.py torch-first env
check 7 "uneven, jobkit exec and env://" torch-first env
run_step "${clean[@]}" "${step[@]}" "${cyclic[@]}" "$cli" exec --timeout 120 -- "$py" ddp_check.py torch-only env
check 8 "cyclic, jobkit exec and env://, an unchanged torch script" torch-only env

# A step that waits in torch's own barrier: rank 3 sleeps 15 s; rank 0 reports where every rank is
# by itself after 3 s, naming torch's collective from its flight recorder (PyPI's torch has one),
# through the wheel's jobkit command (JOBKIT_CLI unset: import jobkit sets it to the venv's).
cp "$here/torch_hang.py" "$work/check/" || fail "cannot copy torch_hang.py"
line_of() { grep -n "# $1\$" "$here/torch_hang.py" | cut -d: -f1; }
run_step "${clean[@]}" -u JOBKIT_CLI JOBKIT_WHERE_REPORT_AFTER=3 "${step[@]}" -N3 -n4 "$py" torch_hang.py 15 3
((status == 0)) || fail "torch's barrier: exit status $status"
(($(count "torch-where ok ") == 4)) || fail "torch's barrier: not every rank passed it"
grep -qE "^\[rank: 0\] WARNING: torch gloo:barrier at torch_hang.py:$(line_of BARRIER_LINE) has waited [3-9] s; where every rank is \(jobkit where [0-9]+\.0\):\$" <<<"$out" ||
  fail "rank 0 did not report torch's barrier by itself within 3 to 9 s"
grep -qE "^  \[rank: 3\] not in jobkit: load_shard torch_hang.py:$(line_of LOAD_LINE) <- train_step torch_hang.py:$(line_of STEP_LINE)" <<<"$out" ||
  fail "the report does not show rank 3's stack"
grep -qE "^  \[rank: 0-2\] not in jobkit: .*train_step torch_hang.py:$(line_of BARRIER_LINE)" <<<"$out" ||
  fail "the report does not show the ranks in torch's barrier"
echo "--- torch's barrier reported by the step itself: ok"

# Progress tracking in a torch step (docs/progress.md): 20 steps of torch's all_reduce and
# jobkit.progress(), then rank 3 stops itself (SIGSTOP). Every other rank waits in torch's
# all_reduce past its learned bound (a floor of 2 s), and its `hang` event names that collective and
# its line, read from torch's flight recorder by the rank's own watch; then the step is ended. Once
# initialised by jobkit.torch, once by torch's env:// under `jobkit exec`.
cp "$here/torch_progress.py" "$work/check/" || fail "cannot copy torch_progress.py"
# torch_progress INIT LAUNCH...: the step, and its hang events checked.
torch_progress() {
  local init=$1 recovery=$work/recovery-$1
  shift
  mkdir -p "$recovery" || fail "cannot make $recovery"
  # A first-step allowance of 5 s: it also holds for that long after the first step boundary
  # whatever happens (docs/progress.md), so it must end well before step 21. A loaded machine's
  # start-up can pass it (hangs of phase "first-step", not counted here).
  "${clean[@]}" JOBKIT_RECOVERY_DIR="$recovery" JOBKIT_RECOVERY_ATTEMPT=0 JOBKIT_PROGRESS_FLOOR=2 \
    JOBKIT_PROGRESS_FACTOR=3 JOBKIT_PROGRESS_FIRST_STEP=5 timeout 120 srun --mpi=pmix --chdir="$work/check" \
    --job-name=jobkit-venv-progress -N3 -n4 "$@" "$py" torch_progress.py "$init" 20 3 >"$work/torch-progress-$init.out" 2>&1 &
  local srun_pid=$!
  for _ in $(seq 600); do
    (($(grep '"event":"hang"' "$recovery/events.jsonl" 2>/dev/null | grep -c '"phase":"step"') >= 3)) && break
    kill -0 "$srun_pid" 2>/dev/null || break
    sleep 0.1
  done
  # The events as they stand, before scancel: its SIGCONT wakes rank 3, whose watch would record a
  # hang of its own.
  cp "$recovery/events.jsonl" "$recovery/checked.jsonl" 2>/dev/null
  scancel --name=jobkit-venv-progress 2>/dev/null
  wait "$srun_pid" 2>/dev/null
  cat "$work/torch-progress-$init.out" "$recovery/checked.jsonl" 2>/dev/null | tail -20
  "$py" - "$recovery/checked.jsonl" "torch_progress.py:$(grep -n '# ALL_REDUCE_LINE$' "$here/torch_progress.py" | cut -d: -f1)" <<'PY' ||
import json, re, sys
# A hang in the first step (its start-up: a loaded machine's torch imports, seen at 17 s) is no part
# of this check; only those of the steps after it.
hangs = [e for e in map(json.loads, filter(str.strip, open(sys.argv[1])))
         if e["event"] == "hang" and e.get("phase") == "step"]
ranks = sorted(e["rank"] for e in hangs)
assert ranks == [0, 1, 2], f"hang events from ranks {ranks}, not 0, 1 and 2"
for e in hangs:
    assert e["in_call"] and re.fullmatch(r"torch gloo:all_?reduce", e["call"]), f"rank {e['rank']}: {e}"
    assert e["site"] == sys.argv[2], f"rank {e['rank']}: site {e['site']}, not {sys.argv[2]}"
    assert "(torch's flight recorder)" in e["where"], f"rank {e['rank']}: {e['where']}"
PY
    fail "$init: the hang events do not name torch's all_reduce at its line"
  echo "--- a torch step's hang named in torch's all_reduce ($init): ok"
}
torch_progress jobkit
torch_progress env "$cli" exec --timeout 120 --

# The DDP template from this venv alone (the wheel's module and command, PyPI's torch): its GPU line
# removed, 3 nodes x 2 tasks, signalled once step 10 is committed: it stops, requeues itself from
# inside the step, resumes and finishes.
sed '/^#SBATCH --gpus-per-task/d' "$repo/slurm/train-ddp-gpu.sbatch" >"$work/train-ddp-cpu.sbatch"
job=$(env -u JOBKIT_CLI JOBKIT="$cli" PYTHON="$py" SCRIPT="$repo/examples/train_ddp.py" CHECKPOINTS="$work/ckpt" \
  MAX_RESTARTS=0 sbatch --parsable --job-name=jobkit-venv-ddp --chdir="$work/check" --output="$work/ddp-template.out" \
  --cpus-per-task=1 --nodes=3 --ntasks-per-node=2 --time=10 "$work/train-ddp-cpu.sbatch" --steps 300 --every 10) ||
  fail "sbatch of the DDP template failed"
trap 'scancel "$job" 2>/dev/null' EXIT
for _ in $(seq 900); do [[ -d $work/ckpt/step-000000000010 ]] && break; sleep 0.1; done
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job failed"
wait_job_ended "$job" 300
state=$job_state
out=$(unfold <"$work/ddp-template.out")
echo "$out" | tail -20
[[ $state == COMPLETED ]] || fail "the DDP template's job ended ${state:-unknown}"
(($(count 'INFO: stopped (SIGUSR1 on rank [0-9]*) at a committed checkpoint: job [0-9]* requeued') == 1)) ||
  fail "the DDP template's attempt 0 did not stop and requeue"
(($(count 'attempt 1: finished') == 1)) || fail "the DDP template's attempt 1 did not finish"
(($(count 'rank [0-9]: finished at step 300, weights') == 6)) || fail "not every rank finished at step 300"
echo "--- the DDP template from the venv alone: ok"
echo ok
