#!/usr/bin/env bash
# Checks that every C++ file of the repository is formatted as .clang-format says (Debian's
# clang-format 14); prints the files that are not and exits 1. With --fix, formats them.
# With --tidy BUILD_DIR, runs clang-tidy (.clang-tidy) over src/ with that build's compile commands
# (clang-tidy 14 lacks std::source_location with libstdc++ 12: expect errors from it, read the warnings).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.c' '*.h' | grep -v '^tests/catch.hpp$')
case ${1:-} in
  --fix) clang-format -i "${files[@]}"; exit 0 ;;
  --tidy)
    mapfile -t sources < <(git ls-files 'src/*.cpp' | grep -v '^src/nccl/')
    clang-tidy -p "${2:?usage: check-format.sh --tidy BUILD_DIR}" --quiet "${sources[@]}"
    exit ;;
esac
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check-format: not formatted as .clang-format says (run scripts/check-format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
