#!/usr/bin/env bash
# Builds tests/consumer_cmake with CMake against installed copies of jobkit and runs it:
#  1. the jobkit just built (BUILD_ROOT), installed with `meson install --destdir` into WORK_DIR;
#  2. jobkit from this working tree built as a static library (same CUDA/NCCL choice) and
#     installed with `--prefix` into WORK_DIR.
# For each: find_package(jobkit <major.minor>) + jobkit::jobkit builds and runs single-rank;
# COMPONENTS nccl is found exactly when jobkit was built with NCCL (then a program using
# <jobkit/nccl.hpp> and NCCL builds and runs) and otherwise fails saying jobkit was built without
# NCCL; OPTIONAL_COMPONENTS nccl sets jobkit_nccl_FOUND accordingly; (1.) the next minor version
# is refused.
# usage: run.sh WORK_DIR BUILD_ROOT nccl|no-nccl [NCCL_ROOT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
work=$1 build_root=$2 nccl=$3 nccl_root=${4:-}
version=$(sed -n "s/^  version: '\(.*\)',$/\1/p" "$repo/meson.build")  # 0.1.0
minor=${version%.*}                                                     # 0.1: what is asked for
next_minor=${minor%%.*}.$((${minor#*.} + 1))                            # 0.2: refused
case $nccl in nccl) expect_nccl=1 ;; no-nccl) expect_nccl=0 ;; *) echo "usage: $0 WORK_DIR BUILD_ROOT nccl|no-nccl [NCCL_ROOT]" >&2; exit 2 ;; esac
if ! command -v cmake >/dev/null; then
  echo "SKIP: cmake is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

rm -rf "$work"
mkdir -p "$work"

fail() { echo "FAIL: $*"; exit 1; }
# says FILE TEXT: FILE contains TEXT, whatever CMake's line wrapping.
says() { grep -qF "$2" <<<"$(tr -s ' \n' '  ' <"$1")"; }

# configure NAME PREFIX ARGS...: configures the consumer into $work/NAME; output in $work/NAME.log.
configure() {
  local name=$1 prefix=$2; shift 2
  cmake -S "$here" -B "$work/$name" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCONSUMER_EXPECT_NCCL=$expect_nccl -DCONSUMER_VERSION=$minor "$@" >"$work/$name.log" 2>&1
}

# check LABEL PREFIX LIBRARY_TYPE
check() {
  local label=$1 prefix=$2 type=$3 out
  echo "== $label: jobkit installed in $prefix"

  configure "$label-plain" "$prefix" || { cat "$work/$label-plain.log"; fail "$label: find_package(jobkit 0.1)"; }
  grep 'consumer:' "$work/$label-plain.log"
  grep -q "jobkit $version $type from $prefix/" "$work/$label-plain.log" ||
    fail "$label: not the $type jobkit in $prefix"
  cmake --build "$work/$label-plain"
  out=$(env -u RANK -u WORLD_SIZE -u SLURM_STEP_NUM_TASKS -u PMIX_RANK "$work/$label-plain/consumer")
  echo "$label consumer: $out"
  grep -q '"source":"default"' <<<"$out" || fail "$label: unexpected identity"
  if [[ $type == SHARED ]]; then
    out=$(ldd "$work/$label-plain/consumer")
    grep -q "libjobkit.so.* => $prefix/" <<<"$out" || fail "$label: the consumer does not load libjobkit from $prefix: $out"
  fi

  if configure "$label-nccl" "$prefix" -DCONSUMER_MODE=nccl; then
    ((expect_nccl)) || { cat "$work/$label-nccl.log"; fail "$label: COMPONENTS nccl found in a build without NCCL"; }
    cmake --build "$work/$label-nccl" --target consumer_nccl
    out=$("$work/$label-nccl/consumer_nccl") || fail "$label: consumer_nccl: $out"
    echo "$label consumer_nccl: $out"
  else
    ((!expect_nccl)) || { cat "$work/$label-nccl.log"; fail "$label: COMPONENTS nccl not found in a build with NCCL"; }
    says "$work/$label-nccl.log" 'was built without NCCL' ||
      { cat "$work/$label-nccl.log"; fail "$label: COMPONENTS nccl failed without saying why"; }
    echo "$label: COMPONENTS nccl refused as expected:"
    grep -A6 'Reason given by package' "$work/$label-nccl.log"
  fi

  configure "$label-optional" "$prefix" -DCONSUMER_MODE=optional ||
    { cat "$work/$label-optional.log"; fail "$label: OPTIONAL_COMPONENTS nccl"; }
  local want=FALSE
  ((expect_nccl)) && want=TRUE
  grep -q "jobkit_HAS_NCCL=$want jobkit_nccl_FOUND=$want" "$work/$label-optional.log" ||
    { cat "$work/$label-optional.log"; fail "$label: OPTIONAL_COMPONENTS nccl: expected jobkit_nccl_FOUND=$want"; }
  echo "$label: OPTIONAL_COMPONENTS nccl: jobkit_nccl_FOUND=$want"

  [[ $label == installed ]] || return 0  # the version file is the same in both
  if configure "$label-version" "$prefix" -DCONSUMER_VERSION=$next_minor; then
    fail "$label: find_package(jobkit $next_minor) accepted jobkit $version"
  fi
  says "$work/$label-version.log" "requested version \"$next_minor\"" ||
    { cat "$work/$label-version.log"; fail "$label: find_package(jobkit $next_minor) failed for another reason"; }
  echo "$label: find_package(jobkit $next_minor) refused as expected"
}

# 1. The jobkit just built, as it is (its library type), relocated by --destdir.
meson install -C "$build_root" --no-rebuild --quiet --destdir "$work/destdir" >/dev/null
prefix=$(meson introspect "$build_root" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
type=$(meson introspect "$build_root" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "default_library"))')
[[ $type == static ]] && type=STATIC || type=SHARED
check installed "$work/destdir$prefix" $type

# 2. A static jobkit from the same tree, with the same CUDA/NCCL choice, installed with --prefix
#    (unoptimised, as a unity build: the package is under test, not the code, and both compile in
#    less CPU; each platform's own build compiles file by file).
feature=disabled
((expect_nccl)) && feature=enabled
# From $work: meson's CMake module scratches in its working directory (scripts/meson-setup.sh).
(cd "$work" && meson setup "$work/build-static" "$repo" --wrap-mode=nodownload --prefix "$work/static-prefix" \
  -Dbuildtype=plain -Dunity=on -Dunity_size=100 -Ddefault_library=static -Dtests=disabled -Dcli=false -Dexamples=false -Dpython=disabled \
  -Dcuda=$feature -Dnccl=$feature -Dnccl_root="$nccl_root") >"$work/build-static.log" 2>&1 ||
  { cat "$work/build-static.log"; fail "meson setup of the static jobkit"; }
meson compile -C "$work/build-static" jobkit >>"$work/build-static.log" 2>&1 ||
  { cat "$work/build-static.log"; fail "building the static jobkit"; }
meson install -C "$work/build-static" --no-rebuild --quiet >/dev/null
check static "$work/static-prefix" STATIC
echo "OK"
