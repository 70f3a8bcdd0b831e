#!/usr/bin/env bash
# jobkit doctor on the dev cluster (no GPU here).
# usage: doctor.sh MODE JOBKIT   (MODE: see declare_modes below)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes plain nccl versions
mode=$1
jobkit=$2
need_cluster
case $mode in
  plain) run_step timeout 60 srun --mpi=pmix -N3 -n7 "$jobkit" doctor ;;
  nccl) run_step timeout 60 srun --mpi=pmix -N3 -n7 "$jobkit" doctor --nccl ;;
  # Rank 3 is told of another PMIx server version; every rank runs with PMIX_MCA_gds=hash.
  versions)
    run_step timeout 60 srun --mpi=pmix -N3 -n7 --export=ALL,PMIX_MCA_gds=hash bash -c \
      'if ((SLURM_PROCID == 3)); then export PMIX_VERSION=9.9.9; fi; exec "$0" doctor' "$jobkit" ;;
  *) fail "unknown mode $mode" ;;
esac
(($(count '^jobkit doctor: 7 ranks on 3 nodes') == 1)) || fail "rank 0 did not print the header once"
(($(grep -cE '^ +[0-6]  c[1-3] ' <<<"$out") == 7)) || fail "not one row per rank"
# The versions rank 0 sees: this libpmix, the server's PMIX_VERSION, the Slurm of `srun --version`.
client=$(pkg-config --modversion pmix 2>/dev/null || echo '[0-9.]+')
slurm=$(srun --version | awk '{print $2}')
(($(grep -cE "^pmix: client OpenPMIx ${client//./\\.}.*; server [0-9]+\.[0-9]+\.[0-9]+[^ ]* \(PMIX_VERSION\); PMIX_GDS_MODULE=[a-z0-9,]+; PMIX_MCA_gds=" <<<"$out") == 1)) ||
  fail "no single pmix versions line naming client $client and the server's PMIX_VERSION"
(($(count "^slurm: ${slurm//./\\.} (srun --version)$") == 1)) || fail "no single slurm line naming $slurm"
case $mode in
  plain)
    ((status == 0)) || fail "exit status $status"
    (($(count '^warning: ') == 0)) || fail "a warning on the dev cluster"
    (($(count '^no problem found$') == 1)) || fail "problems reported on a CPU-only step" ;;
  nccl)
    ((status == 1)) || fail "exit status $status"
    for r in 0 1 2 3 4 5 6; do
      grep -q "^  rank $r (c[1-3]): cudaGetDeviceCount .*NCCL check skipped" <<<"$out" || fail "rank $r's problem is not named"
    done ;;
  versions)
    ((status == 0)) || fail "exit status $status (warnings must not fail the doctor)"
    (($(count '^pmix: .*; PMIX_MCA_gds=hash$') == 1)) || fail "PMIX_MCA_gds=hash is not reported"
    (($(count '^note: PMIX_MCA_gds=hash is in effect') == 1)) || fail "no note on PMIX_MCA_gds"
    (($(count '^warning: rank [0-9] ') == 1)) || fail "not exactly one rank reported with other versions"
    (($(count '^warning: rank 3 (c[1-3]) sees other versions than rank 0: .*server 9\.9\.9') == 1)) ||
      fail "rank 3's other PMIx server version is not reported"
    (($(count '^no problem found$') == 1)) || fail "problems reported" ;;
esac
echo ok
