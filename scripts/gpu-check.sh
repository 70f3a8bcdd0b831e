#!/usr/bin/env bash
# One prepared command that proves jobkit's NCCL path on a GPU machine (issue 15).
#
#   scripts/gpu-check.sh fetch            here (Debian 12, network to Debian's archive): download the
#                                         .debs a GPU machine lacks (PMIx, fmt, Catch2, Open MPI's
#                                         mpirun, pkgconf, meson, ninja) and unpack them into .device/deps
#   scripts/gpu-check.sh [run] [options]  there: build jobkit with CUDA and NCCL, run every check, write
#                                         report.txt and report.json
#
# Options of run:
#   --build-dir DIR  build directory (default .device/build-gpu); an existing one is reused
#   --no-build       use --build-dir as it is, without meson or ninja (the meson test in CI)
#   --out DIR        where report.txt, report.json and logs.tar.gz go (default <build-dir>/gpu-check)
#   --deps DIR|none  the unpacked packages (default .device/deps when it exists; none: the system's only)
#   --quick          fewer repetitions in the benchmark and shorter deadlines
#   --no-gpu-ok      exit 0 instead of 3 when no GPU is found and every GPU-free check passed (CI)
#
# Exit status: 0 every check passed on a GPU; 1 a check failed; 2 bad usage, or the build failed;
# 3 no GPU found: only the GPU-free checks ran, and they passed (0 with --no-gpu-ok).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$repo" || exit 2

say() { echo "gpu-check: $*"; }
have() {  # an executable program on PATH (command -v alone also names files that are not)
  local path
  path=$(command -v "$1" 2>/dev/null) && [[ -x $path ]]
}
die() {
  echo "gpu-check: $*" >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------
# fetch

# What the GPU machine lacks, and what those link (ldd libpmix.so.2, orterun, libopen-pal): libevent,
# hwloc, munge. zlib and libudev are on any Debian or Ubuntu; they go to fallback/, used only when the
# machine has none.
fetch_packages=(
  libpmix-dev libpmix2 libfmt-dev libfmt9 catch2
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libmunge2
  openmpi-bin openmpi-common libopenmpi3
  pkgconf pkgconf-bin libpkgconf3 meson ninja-build
)
fallback_packages=(zlib1g libudev1)

fetch() {
  { have apt-get && have dpkg-deb; } || die "fetch needs apt-get and dpkg (Debian 12)"
  local debs=.device/debs deps=.device/deps
  mkdir -p "$debs"
  (cd "$debs" && rm -f ./*.deb && apt-get -o APT::Sandbox::User=root download "${fetch_packages[@]}" "${fallback_packages[@]}") ||
    die "apt-get download failed (apt-get update first?)"
  rm -rf "$deps"
  mkdir -p "$deps/fallback"
  local deb name
  for deb in "$debs"/*.deb; do
    name=$(dpkg-deb -f "$deb" Package)
    if [[ " ${fallback_packages[*]} " == *" $name "* ]]; then
      dpkg-deb -x "$deb" "$deps/fallback"
    else
      dpkg-deb -x "$deb" "$deps"
    fi
    dpkg-deb -f "$deb" Package Version Architecture | paste -sd' ' >>"$deps/MANIFEST"
  done
  # What the check never uses: documentation, static libraries, MPI's Fortran, Java and OpenSHMEM.
  rm -rf "$deps/usr/share/doc" "$deps/usr/share/man" "$deps/usr/share/lintian" "$deps/fallback/usr/share"
  find "$deps/usr/lib" -name '*.a' -delete
  find "$deps/usr/lib/x86_64-linux-gnu" \( -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' -o -name 'libmpi_java*' \
    -o -name 'liboshmem*' -o -name 'mca_spml_*' -o -name 'mca_sshmem_*' -o -name 'mca_scoll_*' -o -name 'mca_atomic_*' \) -delete
  fix_pkgconfig "$deps"
  say "unpacked $(wc -l <"$deps/MANIFEST") packages into $deps ($(du -sh "$deps" | cut -f1)); carry that folder to the GPU machine"
  say "and run scripts/gpu-check.sh there"
}

# ---------------------------------------------------------------------------------------------
# The unpacked packages: pkg-config files rewritten for where the folder is now (Debian's name /usr
# and pmix.pc names its absolute libdir), and the search paths of the compiler, linker and loader.

fix_pkgconfig() {  # deps dir (absolute or relative)
  local deps pc
  deps=$(cd "$1" && pwd -P)
  rm -rf "$deps/pkgconfig"
  mkdir -p "$deps/pkgconfig"
  for pc in "$deps"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$deps"/usr/share/pkgconfig/*.pc "$deps"/usr/lib/pkgconfig/*.pc; do
    [[ -f $pc ]] || continue
    sed -e "s#=/usr\$#=$deps/usr#" -e "s#\([=[:space:]]\)\(-[IL]\)\?/usr/#\1\2$deps/usr/#g" \
      -e "s#-rpath -Wl,/usr/#-rpath -Wl,$deps/usr/#g" "$pc" >"$deps/pkgconfig/$(basename "$pc")"
  done
}

prepend() {  # variable, directory
  local current=${!1:-}
  [[ -d $2 ]] || return 0
  export "$1=$2${current:+:$current}"
}

use_deps() {  # deps dir
  local deps lib
  deps=$(cd "$1" && pwd -P)
  fix_pkgconfig "$deps"
  prepend PKG_CONFIG_PATH "$deps/pkgconfig"
  for lib in "$deps/usr/lib/x86_64-linux-gnu" "$deps/usr/lib/x86_64-linux-gnu/pmix2/lib"; do
    prepend LD_LIBRARY_PATH "$lib"
    prepend LIBRARY_PATH "$lib"
  done
  prepend CPATH "$deps/usr/include"
  for lib in libz.so.1 libudev.so.1; do
    if ! ldconfig -p 2>/dev/null | grep -q "$lib "; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$deps/fallback/usr/lib/x86_64-linux-gnu:$deps/fallback/lib/x86_64-linux-gnu"
      break
    fi
  done
  # PMIx and Open MPI find their plugins and help files relative to these prefixes.
  export PMIX_PREFIX="$deps/usr/lib/x86_64-linux-gnu/pmix2"
  if ! have pkg-config && [[ -x $deps/usr/bin/pkgconf ]]; then
    export PKG_CONFIG="$deps/usr/bin/pkgconf"
  fi
  if ! have mpirun && [[ -x $deps/usr/bin/orterun ]]; then
    export OPAL_PREFIX="$deps/usr" OPAL_SYSCONFDIR="$deps/etc/openmpi"
    export OMPI_MCA_mca_base_component_show_load_errors=0
    mpirun_path="$deps/usr/bin/orterun"
  fi
  if ! have meson && [[ -d $deps/usr/lib/python3/dist-packages/mesonbuild ]]; then
    prepend PYTHONPATH "$deps/usr/lib/python3/dist-packages"
    meson_cmd=(python3 -m mesonbuild.mesonmain)
  fi
  if ! have ninja && [[ -x $deps/usr/bin/ninja ]]; then
    export NINJA="$deps/usr/bin/ninja"  # meson looks here too
    ninja_cmd=$NINJA
  fi
  deps_used=$deps
}

# ---------------------------------------------------------------------------------------------
# run

build_dir=.device/build-gpu
out=""
deps_arg=""
no_build=0
quick=0
no_gpu_ok=0
meson_cmd=(meson)
ninja_cmd=ninja
mpirun_path=""
deps_used=""
system_ld_library_path=${LD_LIBRARY_PATH:-}  # before the carried packages are prepended

command=run
if (($#)) && [[ $1 != -* || $1 == -h || $1 == --help ]]; then
  command=$1
  shift
fi
case $command in
  fetch)
    (($# == 0)) || die "fetch takes no options"
    fetch
    exit $? ;;
  run) ;;
  -h | --help | help)
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \?//'
    exit 0 ;;
  *) die "unknown command '$command' (fetch or run; --help)" ;;
esac
while (($#)); do
  case $1 in
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --deps) deps_arg=${2:?--deps needs a directory or none}; shift ;;
    --no-build) no_build=1 ;;
    --quick) quick=1 ;;
    --no-gpu-ok) no_gpu_ok=1 ;;
    *) die "unknown option '$1' (see scripts/gpu-check.sh --help)" ;;
  esac
  shift
done
mkdir -p "$build_dir" || die "cannot create $build_dir"
build_dir=$(cd "$build_dir" && pwd -P)
out=${out:-$build_dir/gpu-check}
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd -P)
work=$build_dir/gpu-check-work
rm -rf "$work"
mkdir -p "$work/logs"
lines=$work/lines.tsv
steps=$work/steps.tsv
: >"$lines"
: >"$steps"

if [[ $deps_arg == none ]]; then
  :
elif [[ -n $deps_arg ]]; then
  [[ -d $deps_arg ]] || die "--deps $deps_arg: no such folder (scripts/gpu-check.sh fetch makes .device/deps)"
  use_deps "$deps_arg"
elif [[ -d .device/deps ]]; then
  use_deps .device/deps
fi
[[ -n $mpirun_path ]] || ! have mpirun || mpirun_path=$(command -v mpirun)

# A GPU is there when the driver lists one or its device file exists; CUDA not seeing it is a failure.
gpu_present=0
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  gpu_present=1
elif compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
  gpu_present=1
fi
secs() { echo $((quick ? $1 : $2)); }

record() {  # step, status, name, detail: a check of the script's own
  printf '%s\tCHECK\t%s\t%s\t%s\n' "$1" "$3" "$2" "${4//$'\t'/ }" >>"$lines"
}

# run_step NAME EXPECTED_STATUS LIMIT_S CMD...: runs CMD with a time limit, keeps its log, gathers its
# CHECK/TIME/INFO lines, and records a failure when it hangs, exits otherwise or reports nothing.
run_step() {
  local name=$1 expected=$2 limit=$3 rc start elapsed found failed
  shift 3
  start=$(date +%s%N)
  timeout -k 10 "$limit" "$@" >"$work/logs/$name.log" 2>&1
  rc=$?
  elapsed=$((($(date +%s%N) - start) / 1000000))
  grep -E $'^(CHECK|TIME|INFO)\t' "$work/logs/$name.log" | sed "s/^/$name\t/" >>"$lines"
  found=$(grep -cE $'^CHECK\t' "$work/logs/$name.log")
  if ((rc == 124 || rc == 137)); then
    record "$name" FAIL "step.$name" "timed out after $limit s: $(tail -3 "$work/logs/$name.log" | paste -sd' ')"
  elif ((rc != expected)) && ! grep -qE $'^CHECK\t[^\t]*\tFAIL' "$work/logs/$name.log"; then
    record "$name" FAIL "step.$name" "exit status $rc, expected $expected: $(grep -v $'\t' "$work/logs/$name.log" | tail -3 | paste -sd' ')"
  elif ((found == 0)) && [[ $name != doctor* && $name != unit-tests ]]; then
    record "$name" FAIL "step.$name" "reported no check"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$elapsed" "$*" >>"$steps"
  failed=$(grep -c $'^'"$name"$'\tCHECK\t[^\t]*\tFAIL' "$lines")
  say "$(printf '%-14s exit %-3s %6s ms  %s' "$name" "$rc" "$elapsed" "$( ((failed)) && echo "$failed FAILED" || echo ok)")"
}

target() {  # a target's file from the build's introspection data (no meson needed)
  python3 - "$build_dir/meson-info/intro-targets.json" "$1" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1])):
    if t["name"] == sys.argv[2] and t["type"] == "executable":
        print(t["filename"][0])
        break
PY
}

# --- build ---
build_status="reused (--no-build)"
nccl_root=""
if ((!no_build)); then
  command -v "${meson_cmd[0]}" >/dev/null || die "no meson (and no carried one: scripts/gpu-check.sh fetch)"
  have "$ninja_cmd" || die "no ninja (and no carried one: scripts/gpu-check.sh fetch)"
  if [[ -z ${CUDA_PATH:-} && ! -d /usr/local/cuda ]] && have nvcc; then
    CUDA_PATH=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    export CUDA_PATH
  fi
  cuda_home=${CUDA_PATH:-/usr/local/cuda}
  # NCCL: nccl.pc, CUDA's lib64, the system's, or else the Python wheel (nvidia-nccl-*), which has no
  # unversioned libnccl.so: a small prefix of links is made for it.
  nccl_root=${NCCL_ROOT:-}
  if [[ -z $nccl_root ]] && ! pkg-config --exists nccl 2>/dev/null &&
    ! compgen -G "$cuda_home/lib64/libnccl.so" >/dev/null && ! compgen -G '/usr/lib/x86_64-linux-gnu/libnccl.so' >/dev/null; then
    wheel=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0])' 2>/dev/null || true)
    if [[ -n $wheel && -f $wheel/include/nccl.h ]]; then
      nccl_root=$build_dir/nccl-from-wheel
      mkdir -p "$nccl_root/lib"
      ln -sfn "$wheel/include" "$nccl_root/include"
      ln -sf "$(compgen -G "$wheel/lib/libnccl.so*" | head -1)" "$nccl_root/lib/libnccl.so"
      prepend LD_LIBRARY_PATH "$wheel/lib"
      say "NCCL from the Python wheel at $wheel"
    fi
  fi
  [[ -n $nccl_root ]] && prepend LD_LIBRARY_PATH "$nccl_root/lib"
  setup=(-Dcuda=enabled -Dnccl=enabled -Dexamples=false -Dtests=auto --wrap-mode=nodownload)
  [[ -n $nccl_root ]] && setup+=("-Dnccl_root=$nccl_root")
  say "building in $build_dir"
  if [[ -f $build_dir/build.ninja ]]; then
    "${meson_cmd[@]}" setup --reconfigure "$build_dir" "${setup[@]}" >"$work/logs/build.log" 2>&1
  else
    "${meson_cmd[@]}" setup "$build_dir" "${setup[@]}" >"$work/logs/build.log" 2>&1
  fi && "$ninja_cmd" -C "$build_dir" >>"$work/logs/build.log" 2>&1
  build_rc=$?
  if ((build_rc != 0)); then
    tail -30 "$work/logs/build.log" >&2
    record build FAIL build "meson setup or ninja failed (exit $build_rc); see logs/build.log"
    build_status=failed
  else
    build_status=ok
  fi
fi

gpu_check=""
jobkit=""
if [[ $build_status != failed ]]; then
  [[ -f $build_dir/meson-info/intro-targets.json ]] || die "$build_dir is not a meson build directory"
  gpu_check=$(target gpu_check)
  jobkit=$(target jobkit)
  if [[ -z $gpu_check || ! -x $gpu_check ]]; then
    record build FAIL build "no gpu_check in $build_dir: a build without CUDA and NCCL (meson setup -Dcuda=enabled -Dnccl=enabled)"
    build_status=failed
  fi
fi

# --- checks ---
if [[ $build_status != failed ]]; then
  world1=(env JOBKIT_IDENTITY=default JOBKIT_TIMEOUT=120)  # jobkit's own deadlines end a hang first
  expect_gpu=()
  ((gpu_present)) && expect_gpu=(expect-gpu)
  run_step checks 0 300 "${world1[@]}" "$gpu_check" checks "${expect_gpu[@]}"
  run_step world2 0 120 env JOBKIT_IDENTITY=torchrun RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NODE_RANK=0 \
    "$gpu_check" child world2 20
  if ((gpu_present)); then
    run_step raw-deadline 0 120 "${world1[@]}" "$gpu_check" child raw-deadline "$(secs 2 5)"
    bench_args=()
    ((quick)) && bench_args=(quick)
    run_step bench 0 400 "${world1[@]}" "$gpu_check" bench "${bench_args[@]}"
  fi

  # jobkit doctor
  if [[ -n $jobkit && -x $jobkit ]]; then
    if ((gpu_present)); then
      run_step doctor-nccl 0 180 "${world1[@]}" "$jobkit" doctor --nccl --timeout 120
      if grep -q '^no problem found' "$work/logs/doctor-nccl.log"; then
        record doctor-nccl PASS doctor.nccl "$(grep -E '^ +0 ' "$work/logs/doctor-nccl.log" | head -1 | tr -s ' ')"
      else
        record doctor-nccl FAIL doctor.nccl "$(tail -3 "$work/logs/doctor-nccl.log" | paste -sd' ')"
      fi
    else
      run_step doctor 0 60 "${world1[@]}" "$jobkit" doctor
      if grep -q '^no problem found' "$work/logs/doctor.log"; then
        record doctor PASS doctor.plain "no GPU is no problem for a step without --nccl"
      else
        record doctor FAIL doctor.plain "$(tail -3 "$work/logs/doctor.log" | paste -sd' ')"
      fi
      run_step doctor-nccl 1 60 "${world1[@]}" "$jobkit" doctor --nccl --timeout 20
      if grep -q 'cudaGetDeviceCount.*NCCL check skipped' "$work/logs/doctor-nccl.log"; then
        record doctor-nccl PASS doctor.nccl.no_gpu "exit 1, naming the CUDA error: $(grep -m1 'cudaGetDeviceCount' "$work/logs/doctor-nccl.log" | sed 's/^ *//')"
      else
        record doctor-nccl FAIL doctor.nccl.no_gpu "the missing GPU is not named: $(tail -2 "$work/logs/doctor-nccl.log" | paste -sd' ')"
      fi
    fi
  else
    record doctor SKIP doctor "no jobkit program in this build (-Dcli=false)"
  fi

  # PMIx-launched runs: 2 ranks under Open MPI's mpirun.
  if [[ -n $mpirun_path ]]; then
    mpirun_=("$mpirun_path" --allow-run-as-root --oversubscribe -np 2)
    if [[ -n $deps_used && $mpirun_path != "$deps_used"/* ]]; then
      # The machine's own mpirun loads the machine's PMIx: the carried libraries go to the ranks only.
      mpirun_=(env -u PMIX_PREFIX "LD_LIBRARY_PATH=$system_ld_library_path" "$mpirun_path" --allow-run-as-root
        --oversubscribe -np 2 -x "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" -x "PMIX_PREFIX=$PMIX_PREFIX")
    fi
    deadline=$(secs 2 5)
    run_step mpirun-ids 0 120 "${mpirun_[@]}" "$gpu_check" launched ids 30
    run_step mpirun-fence 0 120 "${mpirun_[@]}" "$gpu_check" launched fence "$deadline"
    if ((gpu_present)); then
      run_step mpirun-init 0 120 "${mpirun_[@]}" "$gpu_check" launched init "$deadline"
      run_step mpirun-pair 0 120 "${mpirun_[@]}" "$gpu_check" launched pair 60
      run_step mpirun-teardown 0 120 "${mpirun_[@]}" "$gpu_check" launched teardown "$deadline"
    fi
  else
    record launched SKIP launched "no launcher (mpirun) here: only world size 1 ran"
  fi

  # The unit tests of this build, GPU visible (test_nccl among them), where Catch2 was found; not
  # with --no-build, which may run inside meson test on the same build.
  if ((gpu_present && !no_build)) && python3 -c 'import json,sys; sys.exit(not any(t["name"] == "test_nccl" for t in json.load(open(sys.argv[1]))))' \
    "$build_dir/meson-info/intro-targets.json" 2>/dev/null; then
    run_step unit-tests 0 600 "${meson_cmd[@]}" test -C "$build_dir" --suite unit --no-rebuild --print-errorlogs
    if grep -qE '^Fail: +0' "$work/logs/unit-tests.log"; then
      record unit-tests PASS unit_tests "$(grep -E '^(Ok|Fail|Skipped):' "$work/logs/unit-tests.log" | paste -sd' ')"
    fi
  fi
fi

# --- report ---
nvidia_smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>/dev/null || true)
nvcc_version=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1 || true)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$lines" "$steps" "$out" "$gpu_present" "$build_status" "$nvidia_smi" "$nvcc_version" "$commit" \
  "$build_dir" "${deps_used:-none}" "${mpirun_path:-none}" "$quick" <<'PY'
import json, os, socket, sys, time
(lines, steps, out, gpu_present, build_status, smi, nvcc, commit, build_dir, deps, mpirun,
 quick) = sys.argv[1:]
checks, timings, info = [], [], {}
for line in open(lines):
    parts = line.rstrip("\n").split("\t")
    step, kind = parts[0], parts[1]
    if kind == "CHECK" and len(parts) >= 4:
        checks.append({"step": step, "name": parts[2], "status": parts[3], "detail": parts[4] if len(parts) > 4 else ""})
    elif kind == "TIME" and len(parts) >= 5:
        timings.append({"step": step, "name": parts[2], "value": float(parts[3]), "unit": parts[4],
                        "detail": parts[5] if len(parts) > 5 else ""})
    elif kind == "INFO" and len(parts) >= 4:
        info[f"{step}.{parts[2]}"] = parts[3]
step_list = []
for line in open(steps):
    name, rc, ms, cmd = line.rstrip("\n").split("\t", 3)
    step_list.append({"step": name, "exit": int(rc), "ms": int(ms), "command": cmd})
count = {s: sum(c["status"] == s for c in checks) for s in ("PASS", "FAIL", "SKIP", "WARN")}
gpu = gpu_present == "1"
failed = count["FAIL"] > 0 or build_status == "failed"
if build_status == "failed":
    verdict, code = "FAILED: the build failed, nothing ran", 2
elif failed:
    verdict, code = "FAILED", 1
elif not gpu:
    verdict, code = "no GPU: only the GPU-free checks ran", 3
else:
    verdict, code = "passed on a GPU", 0
launched = any(s["step"].startswith("mpirun") for s in step_list)
report = {
    "verdict": verdict, "exit_status": code, "host": socket.gethostname(),
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": commit, "build_dir": build_dir,
    "build": build_status, "deps": deps, "mpirun": mpirun, "quick": quick == "1",
    "gpu_found": gpu, "nvidia_smi": smi or None, "nvcc": nvcc or None,
    "cuda_runtime": info.get("checks.cuda_runtime"), "cuda_driver_api": info.get("checks.cuda_driver_api"),
    "nccl_runtime": info.get("checks.nccl_runtime"), "nccl_header": info.get("checks.nccl_header"),
    "world_sizes_run": [1, 2] if launched else [1],
    "counts": count, "steps": step_list, "checks": checks, "timings": timings, "info": info,
}
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
    f.write("\n")
w = []
w.append(f"jobkit gpu-check: {verdict}")
w.append(f"host {report['host']}, {report['date']}, commit {commit}, build {build_status} ({build_dir})")
w.append(f"GPU: {smi or 'none found (nvidia-smi lists none, no /dev/nvidia*)'}")
w.append(f"CUDA runtime {report['cuda_runtime']}, driver API {report['cuda_driver_api']}, toolkit {nvcc or '?'}; "
         f"NCCL {report['nccl_runtime']} (header {report['nccl_header']})")
w.append(f"packages from: {deps}; launcher: {mpirun}; world sizes run: "
         + ("1, and 2 under mpirun" if launched else "1 only (no mpirun here)"))
w.append("")
w.append(f"checks: {count['PASS']} passed, {count['FAIL']} failed, {count['SKIP']} skipped, {count['WARN']} warnings")
for c in checks:
    if c["status"] != "PASS":
        w.append(f"  {c['status']:<4} {c['step']}: {c['name']}: {c['detail']}")
w.append("passed: " + ", ".join(c["name"] for c in checks if c["status"] == "PASS"))
if timings:
    w.append("")
    w.append("timings:")
    for t in timings:
        w.append(f"  {t['name']:<42} {t['value']:>12.3f} {t['unit']:<3} {t['detail']}")
w.append("")
w.append("steps: " + ", ".join(f"{s['step']} (exit {s['exit']}, {s['ms']} ms)" for s in step_list))
text = "\n".join(w) + "\n"
with open(os.path.join(out, "report.txt"), "w") as f:
    f.write(text)
print(text, end="")
sys.exit(code)
PY
status=$?
tar -czf "$out/logs.tar.gz" -C "$work" logs lines.tsv steps.tsv 2>/dev/null
say "report: $out/report.txt, $out/report.json, logs in $out/logs.tar.gz"
if ((status == 3 && no_gpu_ok)); then
  say "no GPU found: only the GPU-free checks ran (exit 0: --no-gpu-ok)"
  exit 0
fi
((status == 3)) && say "no GPU found: only the GPU-free checks ran (exit 3)"
exit $status
