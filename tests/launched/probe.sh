#!/bin/sh
# One JSON line per rank: what jobkit says, next to the launcher's own variables and the real
# hostname, for check_identity.py to compare. The line is written at once, so lines of ranks
# sharing the launcher's stdout do not interleave.
out=$("$@") || exit $?
line="{\"jobkit\":$out,\"hostname\":\"$(hostname)\",\"env\":{"
sep=
for var in SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_STEP_NUM_TASKS SLURM_JOB_ID SLURM_STEP_ID \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE; do
  eval "value=\${$var-}"
  line="$line$sep\"$var\":\"$value\""
  sep=,
done
printf '%s}}\n' "$line"
