#!/usr/bin/env bash
# Builds tests/consumer against jobkit as a wrap subproject and runs it: packs jobkit's working
# tree into the consumer's packagefiles (no download), writes the wrap, builds it with jobkit as a
# shared and as a static library (unoptimised, without debug information, as a unity build: the
# build is under test, not the code; each platform's own build compiles file by file), runs both.
# usage: run.sh WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
work=$1
version=$(sed -n "s/^  version: '\(.*\)',$/\1/p" "$repo/meson.build")
name=jobkit-$version

rm -rf "$work"
mkdir -p "$work/subprojects/packagefiles"
cp "$here/meson.build" "$here/main.cpp" "$work/"
tarball=$work/subprojects/packagefiles/$name.tar.gz
(cd "$repo" && git ls-files -co --exclude-standard -z |
  tar --null -czf "$tarball" --transform "s,^,$name/," -T -)
cat >"$work/subprojects/jobkit.wrap" <<WRAP
[wrap-file]
directory = $name
source_filename = $name.tar.gz
source_hash = $(sha256sum "$tarball" | cut -d' ' -f1)

[provide]
dependency_names = jobkit
WRAP

cd "$work"
for library in shared static; do
  meson setup --wrap-mode=nodownload -Dunity=subprojects -Dunity_size=100 -Dbuildtype=plain -Ddefault_library=$library "build-$library"
  ninja -C "build-$library"
  out=$(env -u RANK -u WORLD_SIZE -u SLURM_STEP_NUM_TASKS -u PMIX_RANK "./build-$library/consumer")
  echo "$library: $out"
  grep -q '"source":"default"' <<<"$out" || { echo "FAIL: unexpected identity ($library)"; exit 1; }
done
