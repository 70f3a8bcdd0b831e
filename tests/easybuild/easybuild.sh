#!/usr/bin/env bash
# Installs jobkit with EasyBuild from easybuild/jobkit-<version>.eb and uses it through its module:
#  1. packs this checkout (tracked and untracked, not ignored, files) into jobkit-<version>.tar.gz
#     with a top directory jobkit-<version>/, as `meson dist --formats gztar` lays out a release;
#  2. copies easybuild/*.eb and writes the tarball's sha256 into jobkit's (eb --inject-checksums);
#  3. eb --robot builds Meson and Ninja (modules of the system's) and jobkit into WORK_DIR/eb;
#  4. in a bash with Lmod: `module use WORK_DIR/eb/modules/all; module load jobkit/<version>`,
#     then `jobkit --help`, `pkg-config --modversion jobkit`, `cmake --find-package`, and the
#     suite's consumers built against the module: tests/consumer_cmake (find_package(jobkit)
#     through the module's $CMAKE_PREFIX_PATH) and tests/consumer's meson.build (dependency('jobkit')
#     through the module's $PKG_CONFIG_PATH: no subproject, no wrap), each run single-rank.
# Each phase is timed. Everything it writes is under WORK_DIR (removed first); it installs nothing:
# eb (pip install easybuild; scripts/install-easybuild.sh puts it in /opt/jobkit-easybuild) and Lmod
# (apt-get install lmod) must be there, or it exits 77 (skip).
# eb runs with a configuration of its own (no config files, no $EASYBUILD_* of the caller).
# usage: tests/easybuild/easybuild.sh WORK_DIR
#   EB=/path/to/eb        another eb than the one on PATH
#   TARBALL=FILE          build FILE (e.g. `meson dist --formats gztar`'s jobkit-<version>.tar.gz)
#                         instead of packing the checkout
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
[[ $# == 1 ]] || { echo "usage: $0 WORK_DIR" >&2; exit 2; }
work=$1
version=$(sed -n "s/^  version: '\(.*\)',$/\1/p" "$repo/meson.build")
name=jobkit-$version
minor=${version%.*}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

eb=${EB:-$(command -v eb || true)}
# scripts/install-deps.sh installs it in a venv of its own.
[[ -n $eb ]] || [[ ! -x /opt/jobkit-easybuild/bin/eb ]] || eb=/opt/jobkit-easybuild/bin/eb
[[ -n $eb && -x $eb ]] || skip "eb is not installed (pip install easybuild, or set EB=/path/to/eb)"
# eb (a shell script) runs the first python on PATH unless told: the one of its venv, when it has one.
[[ -n ${EB_PYTHON:-} || ! -x ${eb%/*}/python ]] || export EB_PYTHON=${eb%/*}/python
lmod_init=
for f in ${LMOD_PKG:+"$LMOD_PKG/init/bash"} /usr/share/lmod/lmod/init/bash /usr/share/lmod/init/bash \
         /opt/apps/lmod/lmod/init/bash; do
  [[ -r $f ]] && { lmod_init=$f; break; }
done
[[ -n $lmod_init ]] || skip "Lmod is not installed (apt-get install lmod: /usr/share/lmod/lmod/init/bash)"
for tool in cmake pkg-config meson ninja; do
  command -v $tool >/dev/null || skip "$tool is not installed (scripts/install-deps.sh installs it)"
done
[[ -f $repo/easybuild/$name.eb ]] || fail "no easybuild/$name.eb for meson.build's version $version"

case $work in /*) ;; *) work=$PWD/$work ;; esac
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd -P)

# Lmod's init reads variables that may be unset; eb needs its $LMOD_CMD.
set +u
# shellcheck disable=SC1090
source "$lmod_init"
set -u
export MODULEPATH=  # only the modules installed here
module --force purge >/dev/null 2>&1 || true

# EasyBuild: nothing of the caller's configuration, everything under $work/eb, root allowed.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^EASYBUILD_' || true)
mkdir -p "$work/config"
export XDG_CONFIG_HOME=$work/config XDG_CONFIG_DIRS=$work/config
# meson compiles through ccache when it is on PATH: only into the cache the caller names (the suite's,
# scripts/test.sh's CCACHE_DIR), never into one outside $work that nobody asked for.
[[ -n ${CCACHE_DIR:-} ]] || export CCACHE_DISABLE=1
mkdir -p "$work/tmp"
export TMPDIR=$work/tmp
eb_args=(--prefix="$work/eb" --tmpdir="$work/tmp" --modules-tool=Lmod --module-syntax=Lua)
[[ $(id -u) != 0 ]] || eb_args+=(--allow-use-as-root-and-accept-consequences)

timings=()
# phase NAME COMMAND...: runs COMMAND in this shell (module load must stay loaded), timed with
# bash's `time`, whose line goes to $work/time.txt, then to the log and the summary.
phase() {
  local label=$1 status=0 t; shift
  echo "== $label"
  TIMEFORMAT="%R s real, %U s user, %S s sys"
  { time "$@" 2>&4; } 4>&2 2>"$work/time.txt" || status=$?
  t=$(tail -n 1 "$work/time.txt")
  echo "== $label: $t"
  timings+=("$(printf '%-46s %s' "$label" "$t")")
  return $status
}

pack() {
  local tarball=$work/eb/sources/j/jobkit/$name.tar.gz
  mkdir -p "${tarball%/*}"
  if [[ -n ${TARBALL:-} ]]; then
    cp "$TARBALL" "$tarball" || return 1
    tar -tzf "$tarball" "$name/meson.build" >/dev/null || { echo "$TARBALL has no $name/meson.build"; return 1; }
  else
    git -C "$repo" rev-parse --git-dir >/dev/null || { echo "$repo is not a git checkout: set TARBALL"; return 1; }
    (cd "$repo" && git ls-files -co --exclude-standard -z |
      tar --null -czf "$tarball" --transform "s,^,$name/," -T -) || return 1
  fi
  ls -l "$tarball"
}

inject() {
  mkdir -p "$work/easyconfigs"
  cp "$repo"/easybuild/*.eb "$work/easyconfigs/"
  # A unity build, as the consumers' builds of jobkit are: the module's build is under test, not the
  # code, which each platform's own build compiles file by file (docs/testing.md).
  echo "configopts += ' -Dunity=on -Dunity_size=100'" >>"$work/easyconfigs/$name.eb"
  "$eb" "${eb_args[@]}" "$work/easyconfigs/$name.eb" --inject-checksums --force >"$work/inject.log" 2>&1 ||
    { cat "$work/inject.log"; return 1; }
  rm -f "$work/easyconfigs/"*.bak_*
  grep '^checksums' "$work/easyconfigs/$name.eb"
}

build() {
  "$eb" "${eb_args[@]}" --robot="$work/easyconfigs" "$work/easyconfigs/$name.eb" >"$work/eb.log" 2>&1 ||
    { tail -n 60 "$work/eb.log"; return 1; }
  grep -E '^(== COMPLETED|== Build succeeded|   \* \[)' "$work/eb.log"
}

phase "pack $name.tar.gz" pack || fail "the source tarball"
phase "eb --inject-checksums" inject || fail "eb --inject-checksums"
phase "eb --robot $name.eb (Meson, Ninja, jobkit)" build || fail "eb $name.eb (log: $work/eb.log)"

modules=$work/eb/modules/all
root=$work/eb/software/jobkit/$version
[[ -f $modules/jobkit/$version.lua ]] || fail "no module file $modules/jobkit/$version.lua"

load() {
  module use "$modules"
  module load "jobkit/$version"
  [[ ${EBROOTJOBKIT:-} == "$root" ]] || { module list; return 1; }
  module list 2>&1
}

cli() {
  local where out
  where=$(command -v jobkit)
  [[ $where == "$root/bin/jobkit" ]] || { echo "jobkit is $where, not the module's"; return 1; }
  jobkit --help | head -n 3
  out=$(jobkit --version)
  echo "$out"
  [[ $out == "jobkit $version" ]] || { echo "jobkit --version: $out"; return 1; }
}

pkgconfig() {
  local v prefix
  v=$(pkg-config --modversion jobkit)
  prefix=$(pkg-config --variable=prefix jobkit)
  echo "pkg-config: jobkit $v in $prefix; cflags: $(pkg-config --cflags jobkit); libs: $(pkg-config --libs jobkit)"
  [[ $v == "$version" && $prefix == "$root" ]] || return 1
  # jobkit.pc needs fmt.pc only: libpmix is opened at run time, so a node or a module without
  # pmix.pc can build against jobkit.
  local alone=$work/pkgconfig-without-pmix
  mkdir -p "$alone"
  cp "$(pkg-config --variable=pcfiledir fmt)/fmt.pc" "$alone/"
  PKG_CONFIG_LIBDIR=$root/lib/pkgconfig:$alone pkg-config --cflags --libs jobkit ||
    { echo "jobkit.pc needs more than fmt.pc"; return 1; }
}

cmake_find() {
  local out
  # cmake --find-package writes CMakeFiles/ into the current directory.
  mkdir -p "$work/find-package" && cd "$work/find-package" || return 1
  out=$(cmake --find-package -DNAME=jobkit -DCOMPILER_ID=GNU -DLANGUAGE=CXX -DMODE=EXIST)
  echo "cmake --find-package: $out"
  [[ $out == "jobkit found." ]] || return 1
  out=$(cmake --find-package -DNAME=jobkit -DCOMPILER_ID=GNU -DLANGUAGE=CXX -DMODE=COMPILE)
  echo "cmake --find-package (compile): $out"
  cd "$work" || return 1
  [[ $out == *"-I$root/include"* ]]
}

# run_consumer PROGRAM: runs it single-rank; it must load libjobkit from the module.
run_consumer() {
  local out
  out=$(env -u RANK -u WORLD_SIZE -u SLURM_STEP_NUM_TASKS -u PMIX_RANK "$1") || { echo "$out"; return 1; }
  echo "$out"
  grep -q '"source":"default"' <<<"$out" || { echo "unexpected identity"; return 1; }
  out=$(ldd "$1")
  grep -q "libjobkit.so.* => $root/lib/" <<<"$out" || { echo "libjobkit is not the module's: $out"; return 1; }
}

consumer_cmake() {
  local dir=$work/consumer-cmake generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  # No CMAKE_PREFIX_PATH given: the module's environment variable is what finds jobkit.
  cmake -S "$repo/tests/consumer_cmake" -B "$dir" "${generator[@]}" \
    -DCONSUMER_EXPECT_NCCL=0 -DCONSUMER_VERSION="$minor" >"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
  grep 'consumer:' "$dir.log"
  grep -q "jobkit $version SHARED from $root/" "$dir.log" || { cat "$dir.log"; echo "not the module's jobkit"; return 1; }
  cmake --build "$dir" >>"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
  run_consumer "$dir/consumer"
}

consumer_meson() {
  local dir=$work/consumer-meson
  mkdir -p "$dir"
  # The suite's consumer without its wrap: dependency('jobkit') is the module's jobkit.pc.
  cp "$repo/tests/consumer/meson.build" "$repo/tests/consumer/main.cpp" "$dir/"
  (cd "$dir" && meson setup --wrap-mode=nofallback build) >"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
  grep -E 'Run-time dependency jobkit found' "$dir.log"
  grep -qE "Run-time dependency jobkit found: YES $version" "$dir.log" || { cat "$dir.log"; return 1; }
  ninja -C "$dir/build" >>"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
  run_consumer "$dir/build/consumer"
}

phase "module use + module load jobkit/$version" load || fail "module load jobkit/$version"
phase "jobkit --help, --version" cli || fail "the module's jobkit command"
phase "pkg-config --modversion jobkit" pkgconfig || fail "pkg-config does not find the module's jobkit.pc"
phase "cmake --find-package jobkit" cmake_find || fail "cmake --find-package does not find the module's jobkit"
phase "CMake consumer (tests/consumer_cmake)" consumer_cmake || fail "the CMake consumer against the module"
phase "meson consumer (tests/consumer)" consumer_meson || fail "the meson consumer against the module"

echo "== times"
printf '%s\n' "${timings[@]}"
echo "OK"
