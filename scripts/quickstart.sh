#!/usr/bin/env bash
# Installs what is missing, builds jobkit, starts the 3-node dev cluster and runs the example
# step: once plainly (single-rank defaults), then under srun on 7 ranks over 3 nodes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
[[ -d build ]] || meson setup build
ninja -C build
slurm/dev-cluster.sh start 3
eval "$(slurm/dev-cluster.sh env)"
echo "--- ./build/examples/jobkit-hello"
./build/examples/jobkit-hello
echo "--- srun --mpi=pmix -N3 -n7 ./build/examples/jobkit-hello"
srun --mpi=pmix -N3 -n7 ./build/examples/jobkit-hello
