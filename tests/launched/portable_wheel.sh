#!/usr/bin/env bash
# The portable wheels (scripts/portable-wheel.sh: manylinux_2_28_x86_64, built by zig's clang against
# glibc 2.28, libpmix opened at run time), each file built once on Debian 12 and installed unchanged
# wherever this runs, into fresh venvs, then run under srun --mpi=pmix on 3 nodes:
#   each Python (the user's, pyenv's 3.11, and a 3.13, pyenv's, on Debian 12; python3.13 on Debian
#     13), the wheel alone: wheel_check.py on an uneven layout (identity against Slurm's, collectives), the
#     wheel's `jobkit info` (uneven) and `jobkit exec` (cyclic);
#   beside torch (PyPI's in a venv of the user's Python on Debian 12, Debian's on Debian 13): a DDP
#     step initialised by jobkit.torch.init_process_group under the wheel's own `jobkit exec`
#     (uneven); beside Debian's also an unchanged torch script under `jobkit exec` (env://, cyclic).
# So the cp313 file runs on both platforms' PMIx (4.2 and 5) and Slurm (22.05 and 24.11).
# usage: portable_wheel.sh --build DIR           builds the wheels the suite uses into DIR (for the
#                                                Pythons found here), DIR/.jobkit-building removed at the end
#        portable_wheel.sh SOURCE_DIR WORK_DIR
#   SOURCE_DIR  this repository (built by scripts/portable-wheel.sh from a copy, never written to)
#   WORK_DIR    emptied, then holds the venvs (and the wheels, when built here); every node must see it
# environment:
#   JOBKIT_PORTABLE_WHEELS  a directory of wheels built by --build (scripts/test-all.sh builds them once,
#                           beside the tests, for both platforms); while it holds .jobkit-building,
#                           this waits (at most 25 minutes). Unset: the wheels are built into WORK_DIR.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

# The venvs this platform tests a wheel in: "ROLE PYTHON" lines. ROLE plain: a venv of the wheel
# alone (wheel_check.py asserts that neither torch nor numpy is there); torch-venv: beside PyPI's
# torch; system-torch: a venv that sees the system's packages, beside its torch. The user's Python
# (find_python: pyenv's 3.11 on Debian 12; none in the Debian 13 root) plain and with PyPI's torch,
# and a Python 3.13 of another version than the user's (pyenv's on Debian 12, the system's on
# Debian 13) plain, and beside the system's torch where it is the system's.
pythons() {
  local user py313 tag=
  user=$(find_python)
  if [[ -n $user ]]; then
    printf 'plain %s\ntorch-venv %s\n' "$user" "$user"
    tag=$("$user" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  fi
  [[ $tag != 3.13 ]] || return 0
  for py313 in $(type -ap python3.13) "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3; do
    [[ -x $py313 ]] || continue
    "$py313" -c 'import ensurepip, venv' 2>/dev/null || continue
    echo "plain $py313"
    if [[ $("$py313" -c 'import sys; print(sys.base_prefix)') == /usr ]] &&
      "$py313" -c 'import torch' 2>/dev/null; then
      echo "system-torch $py313"
    fi
    return 0
  done
}

# build DIR: the wheels for every Python pythons() lists, into DIR; one for Python 3.13 always (the
# Debian 13 root's Python, whose test takes the wheel built here).
build() {
  local dir=$1 args=() py version have313=
  while read -r _ py; do
    args+=(--python "$py")
    version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || fail "$py does not run"
    [[ $version != 3.13 ]] || have313=yes
  done < <(pythons | sort -u -k2,2)
  [[ -n $have313 ]] ||
    fail "no Python 3.13 with venv here (pyenv install 3.13): Debian 13's portable-wheel test needs a cp313 wheel"
  export JOBKIT_WHEEL_CACHE=${JOBKIT_WHEEL_CACHE:-/var/cache/jobkit/portable-wheel}
  export CCACHE_DIR=${CCACHE_DIR:-${JOBKIT_CCACHE_DIR:-/var/cache/jobkit/ccache}}
  "$repo/scripts/portable-wheel.sh" "${args[@]}" "$dir"
}

if [[ ${1:-} == --build ]]; then
  [[ -n ${2:-} ]] || fail "usage: $0 --build DIR"
  mkdir -p "$2" || fail "cannot make DIR '$2'"
  # The marker goes however this ends, so that no test waits for a build that is over; the log
  # stays for the tests to show.
  trap 'rm -f "$2/.jobkit-building"' EXIT
  touch "$2/.jobkit-building"
  (build "$2") 2>&1 | tee "$2/build.log"
  exit "${PIPESTATUS[0]}"
fi

source_dir=${1:-}
work=${2:-}
[[ -f $source_dir/scripts/portable-wheel.sh ]] || fail "SOURCE_DIR '$source_dir' has no scripts/portable-wheel.sh"
[[ $work == /* && $work != / ]] || fail "WORK_DIR '$work' is not an absolute path below /"
case $work in /tmp | /tmp/*) fail "WORK_DIR '$work' is under /tmp, which every dev-cluster node has its own of" ;; esac
need_cluster
unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV JOBKIT_CLI
while read -r name; do unset "$name"; done < <(env | awk -F= '/^PIP_/ {print $1}')
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

if [[ -e $work && ! -e $work/.jobkit-portable-test && -n $(ls -A "$work" 2>/dev/null) ]]; then
  fail "WORK_DIR '$work' holds files this test did not make (no .jobkit-portable-test in it): not emptying it"
fi
rm -rf "$work" && mkdir -p "$work/check" && touch "$work/.jobkit-portable-test" || fail "cannot make WORK_DIR '$work'"
roles=$(pythons)
[[ -n $roles ]] || skip "no Python here of 3.13 or of the user's kind"
echo "$roles" | sed 's/^/python: /'

wheels=${JOBKIT_PORTABLE_WHEELS:-}
if [[ -n $wheels ]]; then
  for _ in $(seq 1500); do [[ -e $wheels/.jobkit-building ]] || break; sleep 1; done
  [[ ! -e $wheels/.jobkit-building ]] || fail "JOBKIT_PORTABLE_WHEELS=$wheels is still being built after 25 minutes"
else
  wheels=$work/wheels
  echo "JOBKIT_PORTABLE_WHEELS unset: building the wheels into $wheels"
  "$0" --build "$wheels" >/dev/null 2>&1 || { tail -30 "$wheels/build.log"; fail "scripts/portable-wheel.sh failed"; }
fi
# wheel_for PYTHON: sets wheel, the one manylinux_2_28 wheel of PYTHON's version in $wheels.
wheel_for() {
  local tag found
  tag=$("$1" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') || fail "$1 does not run"
  found=("$wheels"/jobkit-*-"$tag"-"$tag"-manylinux_2_28_x86_64.whl)
  if [[ ${#found[@]} != 1 || ! -f ${found[0]} ]]; then
    [[ ! -f $wheels/build.log ]] || { echo "the end of $wheels/build.log:"; tail -30 "$wheels/build.log"; }
    fail "not one $tag manylinux_2_28 wheel in $wheels: $(ls "$wheels" 2>/dev/null | tr '\n' ' ')"
  fi
  wheel=${found[0]}
}
version=$(meson introspect --projectinfo "$source_dir/meson.build" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])') || fail "no project version from meson introspect"

cp "$here/wheel_check.py" "$here/ddp_check.py" "$work/check/" || fail "cannot copy the checks"
clean=(env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK
  -u JOBKIT_TORCH_VARIABLES)
step=(timeout 600 srun --mpi=pmix --kill-on-bad-exit=1 --chdir="$work/check")
uneven=(-N3 -n7)                        # 5+1+1
cyclic=(-N3 -n8 --distribution=cyclic)  # 6+1+1, ranks dealt cyclically
small_uneven=(-N3 -n5)                  # 3+1+1
small_cyclic=(-N3 -n5 --distribution=cyclic)

# install ROLE PYTHON: a fresh venv with the wheel (and, for torch-venv, PyPI's torch); sets venv, py,
# cli and extension. The wheel's files are built for glibc 2.28: beyond wheel_venv's checks, they
# need no libstdc++ (their libc++ is inside).
install() {
  local role=$1 python=$2 options=()
  wheel_for "$python"
  venv=$work/venv-$role-$(basename "$wheel" | cut -d- -f3)
  [[ $role != system-torch ]] || options=(--system-site-packages)
  wheel_venv --forbid 'libstdc\+\+' "${options[@]}" "$venv" "$python" "$wheel"
  echo "--- $role: $(basename "$wheel") (sha256 $(sha256sum "$wheel" | cut -c1-16)) into $venv"
  if [[ $role == torch-venv ]]; then
    fetch_wheelhouse "$python"
    TIMEFORMAT="torch installed in %R s"
    time PIP_FIND_LINKS=$wheelhouse "$py" -m pip install --no-compile torch >>"$venv.log" 2>&1 ||
      { tail -20 "$venv.log"; fail "pip install torch failed"; }
  fi
}

# check RANKS WHAT ORDER INIT: the last DDP step's every rank trained, with ORDER and INIT.
check_ddp() {
  ((status == 0)) || fail "$2: exit status $status"
  (($(count "ddp ok $3 $4 ") == $1)) || fail "$2: not every one of the $1 ranks printed ddp ok"
  echo "--- $2: ok"
}

[[ -z $(timeout 60 srun -N3 --ntasks-per-node=1 bash -c "[[ -d $work/check ]] || hostname") ]] ||
  fail "a node does not see $work"
mapfile -t lines <<<"$roles"
for line in "${lines[@]}"; do
  read -r role python <<<"$line"
  install "$role" "$python"
  if [[ $role == plain ]]; then
    run_step "${clean[@]}" "${step[@]}" "${uneven[@]}" "$py" wheel_check.py "$version"
    ((status == 0 && $(grep -o '^rank [0-9]*: wheel ok' <<<"$out" | sort -u | wc -l) == 7)) ||
      fail "$role: wheel_check.py did not pass on every one of the 7 ranks"
    run_step "${clean[@]}" "${step[@]}" "${uneven[@]}" "$cli" info
    ((status == 0 && $(count '^rank [0-6]/7 ') == 7)) || fail "$role: the wheel's jobkit info did not give 7 ranks"
    run_step "${clean[@]}" "${step[@]}" "${cyclic[@]}" "$cli" exec --timeout 120 -- \
      "$py" -c 'import os; print("exec", os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_PORT"])'
    ((status == 0 && $(grep -c '^exec [0-7] 8 [0-9]' <<<"$out") == 8)) || fail "$role: the wheel's jobkit exec did not set every rank's variables"
    echo "--- $role: identity, collectives, jobkit info and jobkit exec: ok"
  fi
  if [[ $role == torch-venv || $role == system-torch ]]; then
    # Each rank imports torch (seconds of CPU): 5 ranks, and one DDP step (the python-venv test runs
    # more for its own wheel).
    run_step "${clean[@]}" "${step[@]}" "${small_uneven[@]}" "$cli" exec --timeout 120 -- "$py" ddp_check.py torch-first jobkit
    check_ddp 5 "$role: uneven, jobkit.torch.init_process_group under the wheel's jobkit exec" torch-first jobkit
    if [[ $role == system-torch ]]; then
      # A torch without libuv (Debian 13's 2.6) needs USE_LIBUV=0 for env://: the template's own check.
      template_use_libuv "$py"
      # The unchanged torch script is the step tests' one all_reduce (torch_allreduce.py): with more
      # of Debian's torch 2.6 in it (a DDP step), one rank of 5 once aborted after its work and
      # destroy_process_group, "terminate called without an active exception", in torch alone.
      cp "$here/torch_allreduce.py" "$work/check/" || fail "cannot copy torch_allreduce.py"
      run_step "${clean[@]}" ${use_libuv:+USE_LIBUV=$use_libuv} "${step[@]}" "${small_cyclic[@]}" "$cli" exec --timeout 120 -- \
        "$py" torch_allreduce.py
      ((status == 0 && $(count 'all_reduce 15 (expected 15) ok') == 5)) ||
        fail "$role: cyclic, an unchanged torch script under jobkit exec (env://): not every rank's all_reduce was right"
      echo "--- $role: cyclic, jobkit exec and env://, an unchanged torch script: ok"
    fi
  fi
done
echo ok
