#!/usr/bin/env bash
# The Debian 13 root's name follows its recipe (scripts/debian13.sh path): a change to the package
# list, to scripts/install-deps.sh, to the mirror, or to any function that makes or enters the root
# names another root, so the next run makes it from scratch; a comment does not.
# usage: debian13_recipe.sh REPOSITORY
set -euo pipefail
repo=$(cd "${1:?usage: debian13_recipe.sh REPOSITORY}" && pwd -P)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export JOBKIT_DEBIAN13_CACHE=$work/cache
unset JOBKIT_DEBIAN_MIRROR
fail() { echo "FAIL: $*"; exit 1; }

# path_after WHAT SED_SCRIPT FILE: the root's path after SED_SCRIPT changed FILE of a fresh copy.
path_after() {
  local what=$1 script=$2 file=$3
  rm -rf "$work/copy" && mkdir -p "$work/copy/scripts"
  cp "$repo/scripts/debian13.sh" "$repo/scripts/install-deps.sh" "$work/copy/scripts/"
  if [[ -n $script ]]; then
    cp "$work/copy/scripts/$file" "$work/before"
    sed -i "$script" "$work/copy/scripts/$file"
    ! cmp -s "$work/before" "$work/copy/scripts/$file" || fail "$what: the edit changed nothing in $file"
  fi
  "$work/copy/scripts/debian13.sh" path
}

base=$(path_after "the recipe as it is" "" "")
[[ $base == "$work/cache/debian13-"* ]] || fail "the root's path '$base' is not in JOBKIT_DEBIAN13_CACHE"
[[ $base == "$("$repo/scripts/debian13.sh" path)" ]] || fail "a copy of the scripts names another root"
echo "root: $base"
changed() {  # WHAT SED_SCRIPT FILE
  local path
  path=$(path_after "$@")
  [[ $path != "$base" ]] || fail "$1 did not change the root's path"
  echo "$1: $path"
}
changed "a command added where the root is made" '/^  in_root "\$tmp" apt-get clean$/a\  true' debian13.sh
changed "a mount changed where the root is entered" 's|mount -t tmpfs -o mode=1777 tmpfs "\$root/dev/shm"|mount -t tmpfs -o mode=1777,size=1g tmpfs "$root/dev/shm"|' debian13.sh
changed "what passes into the root" 's|local keep=(TERM CI FUZZ_SECONDS)|local keep=(TERM CI FUZZ_SECONDS LANG)|' debian13.sh
changed "a package added for trixie" 's|^  trixie)$|  trixie)\n    packages+=(less)|' install-deps.sh
changed "how packages are installed" 's|apt-get install -y -qq --no-install-recommends|apt-get install -y -qq|' install-deps.sh
path=$(JOBKIT_DEBIAN_MIRROR=http://mirror.example/debian "$repo/scripts/debian13.sh" path)
[[ $path != "$base" ]] || fail "another mirror did not change the root's path"
echo "another mirror: $path"
path=$(path_after "a comment" 's|^  # The root a mount point of its own.*|  # (a comment changed)|' debian13.sh)
[[ $path == "$base" ]] || fail "a comment in a function changed the root's path"
echo "a comment changed: the same root"
echo ok
