#!/usr/bin/env bash
# jobkit where no libpmix can be loaded (a login node, a laptop, a CI runner): libjobkit, the jobkit
# program and the Python module record no libpmix (readelf), start, and give the single-rank
# defaults; a process that a PMIx launcher started (PMIX_NAMESPACE, PMIX_RANK) gets an error naming
# libpmix.so.2, every path tried and the launcher's namespace. libpmix is hidden by bind-mounting
# /dev/null over each file the loader could find (unshare -m: this process's view only; root).
#   run.sh JOBKIT LIBJOBKIT [PYTHON [PYTHONPATH]]
# JOBKIT and LIBJOBKIT may be "-": the Python module alone (tests/launched/venv.sh: a wheel's).
set -uo pipefail
jobkit=$1 library=$2 python=${3:-} pythonpath=${4:-}
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

files=()
[[ $jobkit == - ]] || files+=("$library" "$jobkit")
if [[ -n $python ]]; then
  module=$(PYTHONPATH=$pythonpath "$python" -c 'import jobkit._jobkit as m; print(m.__file__)') ||
    fail "$python cannot import jobkit._jobkit"
  files+=("$module")
fi
for file in "${files[@]}"; do
  needed=$(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  echo "$(basename "$file") needs: $needed"
  [[ $needed != *libpmix* ]] || fail "$file records libpmix: it would not load where PMIx is not installed"
done

((EUID == 0)) || skip "hiding libpmix takes a mount namespace (root)"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
# Every libpmix.so.2 the loader or jobkit's own search could find, as the files they name.
hidden=()
for candidate in $(ldconfig -p | awk '/libpmix\.so\.2 /{print $NF}') \
  "$(pkg-config --variable=libdir pmix 2>/dev/null)/libpmix.so.2"; do
  [[ -e $candidate ]] && hidden+=("$(readlink -f "$candidate")")
done
((${#hidden[@]})) || fail "no libpmix.so.2 found to hide (ldconfig -p, pkg-config pmix)"
mapfile -t hidden < <(printf '%s\n' "${hidden[@]}" | sort -u)
echo "hidden: ${hidden[*]}"

# without_pmix CMD...: CMD where those files are /dev/null, outside any launcher's environment.
without_pmix() {
  local mounts=""
  for file in "${hidden[@]}"; do mounts+="mount --bind /dev/null '$file' && "; done
  env -u SLURM_JOB_ID -u SLURM_STEP_ID -u SLURM_PROCID -u SLURM_NTASKS -u OMPI_COMM_WORLD_SIZE \
    -u PMIX_RANK -u PMIX_NAMESPACE -u PMI_RANK -u RANK -u WORLD_SIZE -u LOCAL_RANK \
    unshare -m bash -c "$mounts exec \"\$@\"" without_pmix "$@" 2>&1
}

# What a PMIx launcher sets (a server that is not there: jobkit must fail before reaching it).
launched=(env PMIX_NAMESPACE=jk.no-pmix PMIX_RANK=0 'PMIX_SERVER_URI41=pmix-server.1;tcp4://127.0.0.1:9')

if [[ $jobkit != - ]]; then
  out=$(without_pmix "$jobkit" info) || fail "jobkit info without libpmix: $out"
  echo "$out"
  [[ $out == "rank 0/1 local 0/1 node 0/1"* ]] || fail "jobkit info without libpmix is not the single-rank default"
  out=$(without_pmix "$jobkit" doctor) || fail "jobkit doctor without libpmix: $out"
  echo "$out" | head -3
  grep -q "^pmix: client none loaded (.*libpmix.so.2" <<<"$out" || fail "jobkit doctor does not say that no libpmix loaded"

  out=$(without_pmix "${launched[@]}" "$jobkit" info)
  status=$?
  echo "$out (exit status $status)"
  ((status != 0)) || fail "jobkit info under a PMIx launcher without libpmix succeeded"
  for text in "PMIX_NAMESPACE='jk.no-pmix'" "needs libpmix.so.2 (PMIx " "tried:" "LD_LIBRARY_PATH"; do
    grep -qF "$text" <<<"$out" || fail "the error does not say: $text"
  done
fi

if [[ -n $python ]]; then
  out=$(PYTHONPATH=$pythonpath without_pmix "$python" -c '
import jobkit
assert (jobkit.rank(), jobkit.world_size(), jobkit.local_rank()) == (0, 1, 0), jobkit.identity()
print("python:", jobkit.identity())') || fail "import jobkit without libpmix: $out"
  echo "$out"
  out=$(PYTHONPATH=$pythonpath without_pmix "${launched[@]}" "$python" -c '
import jobkit
try:
    jobkit.rank()
except jobkit.PmixError as e:
    print("raised:", type(e).__name__, e)
else:
    raise SystemExit("no error")') || fail "python under a PMIx launcher without libpmix: $out"
  echo "$out"
  grep -qF "raised:" <<<"$out" && grep -qF "needs libpmix.so.2" <<<"$out" || fail "python's error does not name libpmix.so.2"
fi
echo ok
