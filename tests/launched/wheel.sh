#!/usr/bin/env bash
# The wheel: `pip wheel` of this source tree, installed into a fresh venv (no system site packages,
# so no torch and no numpy), imported from there and run under srun --mpi=pmix on 3 nodes
# (tests/launched/wheel_check.py on every rank).
# usage: wheel.sh PYTHON SOURCE_DIR WORK_DIR
#   PYTHON      the interpreter the wheel is built for and the venv made from (the one meson found)
#   SOURCE_DIR  this repository; it is copied into WORK_DIR and built there, never written to
#   WORK_DIR    emptied, then holds the copy, the wheel and the venv; every node must see it (a dev
#               cluster node's /tmp is its own)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
python=${1:-}
source_dir=${2:-}
work=${3:-}
[[ -x $python ]] || fail "PYTHON '$python' is not an executable"
[[ -f $source_dir/pyproject.toml && -f $source_dir/meson.build ]] ||
  fail "SOURCE_DIR '$source_dir' has no pyproject.toml and meson.build"
[[ $work == /* && $work != / ]] || fail "WORK_DIR '$work' is not an absolute path below /"
case $work in /tmp | /tmp/*) fail "WORK_DIR '$work' is under /tmp, which every dev-cluster node has its own of" ;; esac
source_dir=$(cd "$source_dir" && pwd -P)
need_cluster
"$python" -c 'import mesonpy' 2>/dev/null || skip "meson-python not installed for $python (apt-get install python3-mesonpy)"
"$python" -c 'import ensurepip, venv' 2>/dev/null || skip "no venv with pip for $python (apt-get install python3-venv)"

# What the user's environment could slip in: another module path, a venv, pip's settings (an index,
# a cache, a version check over the network).
unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV JOBKIT_CLI
while read -r name; do unset "$name"; done < <(env | awk -F= '/^PIP_/ {print $1}')
export PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

version=$(meson introspect --projectinfo "$source_dir/meson.build" |
  "$python" -c 'import json, sys; print(json.load(sys.stdin)["version"])') ||
  fail "meson introspect --projectinfo $source_dir/meson.build gave no version"
[[ $version =~ ^[0-9]+(\.[0-9]+)*$ ]] || fail "the project's version '$version' is not N.N.N"
echo "project version $version"

# WORK_DIR is emptied only when it is this test's own (its marker) or already empty.
if [[ -e $work && ! -e $work/.jobkit-wheel-test && -n $(ls -A "$work" 2>/dev/null) ]]; then
  fail "WORK_DIR '$work' holds files this test did not make (no .jobkit-wheel-test in it): not emptying it"
fi
rm -rf "$work" && mkdir -p "$work/src" "$work/dist" "$work/check" && touch "$work/.jobkit-wheel-test" ||
  fail "cannot make WORK_DIR '$work'"
# meson-python builds in a temporary .mesonpy-* directory inside the source tree and (0.12, Debian
# 12) writes .mesonpy-native-file.ini there: build a copy, so that the checkout is never written.
# The copy leaves out what .gitignore names (build directories, .git) and WORK_DIR itself.
excludes=(--exclude=./.git --exclude='./build*' --exclude='./.mesonpy-*' --exclude=./.device --exclude=__pycache__)
relative=$(realpath -m --relative-to="$source_dir" "$work")
[[ $relative == ..* ]] || excludes+=(--exclude="./$relative")
tar -C "$source_dir" "${excludes[@]}" -cf - . | tar -C "$work/src" -xf - || fail "cannot copy $source_dir to $work/src"

# pip: the interpreter's own where it has one (Debian 12's python3-pip); otherwise (Debian 13 ships
# none with python3) the pip that ensurepip puts into a venv that sees the system's packages, for
# Debian's meson-python and pybind11.
if "$python" -m pip --version >/dev/null 2>&1; then
  builder=$python
else
  "$python" -m venv --system-site-packages "$work/builder" || fail "python -m venv --system-site-packages failed"
  builder=$work/builder/bin/python
fi
echo "building with $("$builder" -m pip --version)"
# pyproject.toml's build (release), as a user gets it, two compilers at a time, in a build directory
# of a fixed name (so that ccache, when there, finds it again; meson-python 0.12 calls the setting
# builddir, 0.13 and later build-dir), at a lower CPU priority (throughput work beside the other tests),
# as a unity build (less CPU; the platform's own build compiles every file alone).
key=build-dir
[[ $("$builder" -c 'import mesonpy; print(mesonpy.__version__)') != 0.12.* ]] || key=builddir
TIMEFORMAT="wheel built in %R s (CPU: user %U s, sys %S s)"
time (cd "$work" && nice -n 10 "$builder" -m pip wheel -v --no-build-isolation --no-deps -w "$work/dist" \
  --config-settings=compile-args=-j2 --config-settings=setup-args=-Dunity=on --config-settings=setup-args=-Dunity_size=100 \
  --config-settings=$key="$work/build" "$work/src" >"$work/build.log" 2>&1) ||
  { tail -40 "$work/build.log"; fail "pip wheel failed (log: $work/build.log)"; }
wheels=("$work"/dist/*.whl)
((${#wheels[@]} == 1)) && [[ -f ${wheels[0]} ]] || fail "pip wheel made not exactly one wheel: $(ls "$work/dist")"
wheel=${wheels[0]}
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"
[[ $(basename "$wheel") == jobkit-"$version"-*.whl ]] || fail "the wheel's name does not carry version $version"

# What the wheel holds: the package, its extension (libjobkit's objects inside), its stub and its
# subpackage, and the jobkit command (libjobkit's objects inside too); no shared library, no header.
"$python" - "$wheel" <<'EOF' || fail "the wheel's contents are wrong"
import re, sys, zipfile
listed = zipfile.ZipFile(sys.argv[1]).namelist()
print("\n".join("  " + n for n in listed))
# Where each file installs: NAME-VERSION.data/purelib/ and /platlib/ are site-packages too.
names = [re.sub(r"^[^/]+\.data/(purelib|platlib)/", "", n) for n in listed]
commands = [n for n in names if re.fullmatch(r"[^/]+\.data/scripts/jobkit", n)]
bad = [n for n in names if not (n.startswith("jobkit/") or n.split("/")[0].endswith(".dist-info") or n in commands)]
# Every module of the package (python/jobkit/meson.build's package_files), its stub and its subpackage.
modules = ["__init__", "_checkpoints", "_collectives", "_helpers", "_identity", "_logging", "_preemption", "_store",
           "_timeout", "_workspace", "torch"]
need = [f"jobkit/{m}.py" for m in modules] + ["jobkit/_jobkit.pyi", "jobkit/py.typed", "jobkit/compat/__init__.py"]
missing = [n for n in need if n not in names]
extensions = [n for n in names if n.startswith("jobkit/_jobkit.") and n.endswith(".so")]
libraries = [n for n in names if "libjobkit" in n or ".libs/" in n or n.endswith((".h", ".hpp"))]
for what, value in (("outside the package", bad), ("missing", missing), ("beside the extension", libraries)):
    if value:
        print(f"wheel: {what}: {value}")
if len(extensions) != 1:
    print(f"wheel: not one extension jobkit/_jobkit.*.so: {extensions}")
if len(commands) != 1:
    print(f"wheel: not one jobkit command in its scripts: {commands}")
sys.exit(1 if bad or missing or libraries or len(extensions) != 1 or len(commands) != 1 else 0)
EOF

# A fresh venv: no system site packages, pip from ensurepip; the wheel from the file alone (its
# dependencies not installed). The extension and the command need no libjobkit.so (libjobkit's
# objects are inside both), no libpmix (opened at run time: under srun below, the system's) and no
# libfmt (compiled in: pyproject.toml).
cd "$work/check" || fail "no $work/check"  # no jobkit/ here, so the import can only be the venv's
venv=$work/venv
wheel_venv "$venv" "$python" "$wheel"
echo "installed into $venv: $(tail -1 "$venv.log")"
echo "extension: $extension"
for module in numpy torch; do
  ! "$py" -c "import $module" 2>/dev/null || fail "the fresh venv imports $module"
done

# Every rank: wheel_check.py from a directory of its own, through the venv's python by its path.
cp "$here/wheel_check.py" "$work/check/" || fail "cannot copy wheel_check.py"
[[ -z $(timeout 60 srun -N3 --ntasks-per-node=1 bash -c "[[ -x $venv/bin/python ]] || hostname") ]] ||
  fail "a node does not see $venv"
run_step timeout 90 srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n5 --chdir="$work/check" \
  "$venv/bin/python" "$work/check/wheel_check.py" "$version"
((status == 0)) || fail "exit status $status"
oks=$(grep -o '^rank [0-9]*: wheel ok' <<<"$out" | sort -u | wc -l)
((oks == 5 && $(count 'wheel FAILED') == 0)) || fail "$oks of the 5 ranks printed ok"

# The wheel's command as a user runs it from the venv, not on PATH: identity, a collective, and
# jobkit exec handing the venv's python torch's variables.
run_step timeout 60 srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n5 --chdir="$work/check" "$venv/bin/jobkit" info
((status == 0 && $(count '^rank [0-4]/5 ') == 5)) || fail "the wheel's jobkit info did not give 5 ranks"
run_step timeout 60 srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n5 --chdir="$work/check" "$venv/bin/jobkit" barrier
((status == 0)) || fail "the wheel's jobkit barrier failed"
run_step timeout 90 srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n5 --chdir="$work/check" "$venv/bin/jobkit" exec -- \
  "$venv/bin/python" -c 'import os; print("exec", os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_PORT"])'
((status == 0 && $(grep -c '^exec [0-4] 5 [0-9]' <<<"$out") == 5)) || fail "the wheel's jobkit exec did not set every rank's variables"
echo ok
