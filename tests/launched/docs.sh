#!/usr/bin/env bash
# The docs' code (README.md, docs/*.md), compiled and run as their reader would: docs_code.py says
# how each fenced block is run and which markers leave a block out. Steps run on the dev cluster;
# a shell block runs with a dev cluster of its own (it may start and stop one), hence root.
# usage: docs.sh PYTHON PYTHON_PATH BUILD_ROOT
set -uo pipefail
source "$(dirname "$0")/lib.sh"
(($# == 3)) || fail "usage: docs.sh PYTHON PYTHON_PATH BUILD_ROOT"
[[ $(id -u) == 0 ]] || skip "needs root: a shell block of the docs starts a dev cluster of its own"
need_cluster
"$1" "$here/docs_code.py" "$repo" "$3" "$1" "$2" "$3/tests/launched/docs-work" || fail "a block of the docs failed (above)"
echo "docs ok"
