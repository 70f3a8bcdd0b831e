#!/usr/bin/env bash
# The package as a type checker sees it: mypy --strict (tests/python/mypy.ini) over python/jobkit
# with its stub _jobkit.pyi and over typed_user.py, a user's file; a wrong use (of the identity
# functions and of a Group) must be reported, and the stub must name what the built extension has
# (mypy's stubtest).
# usage: mypy.sh PYTHON BUILD_PYTHONPATH
set -uo pipefail
python=$1
here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
mypy=("$python" -m mypy --config-file "$here/mypy.ini" --no-incremental)
cd "$repo/python" || exit 1
"${mypy[@]}" jobkit "$here/typed_user.py" || { echo "FAIL: mypy found errors"; exit 1; }
wrong=$("${mypy[@]}" --no-warn-unused-configs -c 'import jobkit
rank: str = jobkit.rank()
jobkit.select_device(visible_count="2")
size: str = jobkit.node_group().size()
jobkit.make_group("01")' 2>&1)
echo "$wrong"
grep -q 'Incompatible types in assignment (expression has type "int", variable has type "str")' <<<"$wrong" &&
  grep -q 'Argument "visible_count" to "select_device" has incompatible type "str"' <<<"$wrong" &&
  grep -q '<string>:4: error: Incompatible types in assignment (expression has type "int"' <<<"$wrong" &&
  grep -q 'Argument 1 to "make_group" has incompatible type "str"; expected "Sequence\[int\]"' <<<"$wrong" ||
  { echo "FAIL: mypy accepted a wrong use"; exit 1; }
cd "$2" || exit 1  # the built package: the extension beside its stub
"$python" -m mypy.stubtest --mypy-config-file "$here/mypy.ini" --allowlist "$here/stubtest-allowlist.txt" jobkit._jobkit ||
  { echo "FAIL: _jobkit.pyi differs from the built extension"; exit 1; }
echo ok
