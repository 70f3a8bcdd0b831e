#!/usr/bin/env bash
# The Python module `jobkit` on the dev cluster (tests/launched/python_check.py).
# usage: python.sh MODE PYTHON PYTHONPATH SHARED_DIR
#   MODE: identity-uneven, identity-cyclic, semantics-uneven, semantics-cyclic, throw-main, die,
#         hang, interrupt, torch
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes identity-uneven identity-cyclic semantics-uneven semantics-cyclic throw-main die hang interrupt torch
mode=$1
python=$2
export PYTHONPATH=$3
shared=$4
need_cluster
mkdir -p "$shared"
check=("$python" "$here/python_check.py")
step=(timeout 90 srun --mpi=pmix)
case $mode in
  identity-uneven) run_step "${step[@]}" -N3 -n7 "${check[@]}" identity ;;  # 5+1+1
  identity-cyclic) run_step "${step[@]}" -N3 -n8 --distribution=cyclic "${check[@]}" identity ;;
  semantics-uneven) run_step "${step[@]}" -N3 -n7 "${check[@]}" semantics "$shared" ;;
  semantics-cyclic) run_step "${step[@]}" -N3 -n8 --distribution=cyclic "${check[@]}" semantics "$shared" ;;
  torch)
    "$python" -c 'import torch' 2>/dev/null || skip "torch not installed for $python (apt-get install python3-torch)"
    run_step env -u MASTER_ADDR -u MASTER_PORT "${step[@]}" -N3 -n7 "${check[@]}" torch ;;
  *) run_step "${step[@]}" -N3 -n7 "${check[@]}" "$mode" ;;
esac
case $mode in
  identity-*)
    ((status == 0)) || fail "exit status $status"
    (($(count 'identity ok') == $(count 'identity'))) || fail "an identity differs from Slurm's view" ;;
  semantics-*)
    ((status == 0)) || fail "exit status $status"
    (($(count 'semantics ok') == $(count 'semantics'))) || fail "a helper or collective misbehaved" ;;
  throw-main)
    (($(count 'rank 0: own exception: tokenizer download failed') == 1)) || fail "rank 0 did not get its own exception"
    (($(count 'peer failure: .* at python_check.py:[0-9]*: the callable threw on rank 0 (c1): ValueError: tokenizer download failed') == 6)) ||
      fail "not every other rank got rank 0's message with the Python call site" ;;
  die)
    ((status != 0)) || fail "the step succeeded"
    (($(count 'raised after .*rank 6 (c3) closed its connection .*during all_gather at python_check.py:[0-9]*') == 6)) ||
      fail "not every surviving rank named the dead rank and the call site"
    (($(count 'without noticing') == 0)) || fail "a rank missed the death"
    # Seconds from entering the all_gather the dead rank never reached to the exception.
    slow=$(awk '/raised after/ && $5 >= 5' <<<"$out")
    [[ -z $slow ]] || fail "ranks raised 5 s or more after the death: $slow" ;;
  hang)
    ((status == 0)) || fail "exit status $status"
    (($(count 'timeout after [23]\..*barrier at python_check.py:[0-9]* timed out after 2000 ms') == 6)) ||
      fail "not every waiting rank raised jobkit.TimeoutError at its deadline"
    (($(count 'rank(s) 2 never arrived') >= 1)) || fail "no rank named the missing rank" ;;
  interrupt)
    ((status == 0)) || fail "exit status $status"
    (($(count 'rank 0: interrupted (KeyboardInterrupt) after 1\.') == 1)) || fail "SIGINT did not end rank 0's wait"
    (($(count 'rank 1: interrupted (SystemExit) after 1\.') == 1)) || fail "SIGTERM did not end rank 1's wait"
    (($(count 'PeerFailureError after 0\..*a signal interrupted rank [01] (c1) in a jobkit call at python_check.py') == 5)) ||
      fail "the other ranks did not learn of the interrupt at once" ;;
  torch)
    ((status == 0)) || fail "exit status $status"
    (($(count 'nccl refused: NcclError\|nccl refused: CudaError') == 7)) || fail "nccl did not fail cleanly"
    (($(count 'torch ok all_reduce 28') == 7)) || fail "init_process_group or all_reduce failed" ;;
esac
echo ok
