#!/usr/bin/env bash
# The Python module `jobkit` on the dev cluster (tests/launched/python_check.py).
# usage: python.sh MODE PYTHON PYTHONPATH SHARED_DIR
#   MODE: identity-uneven, identity-cyclic, semantics-uneven, semantics-cyclic, throw-main, die,
#         hang, interrupt, torch, preempt, torch-env, tensor-uneven, tensor-cyclic, compat-uneven,
#         compat-cyclic, exec-import-uneven, exec-import-cyclic
# exec-import-* also need JOBKIT_TEST_CLI, the jobkit program (meson sets it).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
declare_modes identity-uneven identity-cyclic semantics-uneven semantics-cyclic throw-main die hang interrupt torch preempt \
  torch-env tensor-uneven tensor-cyclic compat-uneven compat-cyclic exec-import-uneven exec-import-cyclic
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
  torch-env)  # python_torch.py: the variables and idempotence of jobkit.torch.init_process_group
    "$python" -c 'import torch' 2>/dev/null || skip "torch not installed for $python (apt-get install python3-torch)"
    run_step env -u MASTER_ADDR -u MASTER_PORT -u RANK -u LOCAL_RANK -u WORLD_SIZE "${step[@]}" -N3 -n7 \
      "$python" "$here/python_torch.py" ;;
  tensor-*)
    # Array collectives and groups (python_tensor_check.py); rank 1 then passes another dtype,
    # shape and op than the others on three fresh groups.
    "$python" -c 'import torch, numpy' 2>/dev/null || skip "torch or numpy not installed for $python"
    layout=(-N3 -n7)  # 5+1+1
    [[ $mode == tensor-cyclic ]] && layout=(-N3 -n8 --distribution=cyclic)
    run_step env -u MASTER_ADDR -u MASTER_PORT "${step[@]}" "${layout[@]}" "$python" "$here/python_tensor_check.py" ;;
  compat-*)
    # The seeds' names and signatures (jobkit.compat, python_compat.py and compat_<seed>.py), and
    # side by side with the seeds' own modules from their pinned PyPI releases (seed_packages.py:
    # fetched into a cache outside the checkout, or "SKIP: why").
    "$python" -c 'import torch, numpy' 2>/dev/null || skip "torch or numpy not installed for $python"
    packages=$("$python" "$here/seed_packages.py" fetch) || fail "seed_packages.py fetch failed"
    packages=${packages#seed-packages }
    layout=(-N3 -n7)  # 5+1+1
    [[ $mode == compat-cyclic ]] && layout=(-N3 -n8 --distribution=cyclic)
    # 180 s: both sides, five seeds, on a loaded machine (python_compat.py dumps its stacks at 170 s).
    run_step env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK timeout 180 srun --mpi=pmix \
      "${layout[@]}" "$python" "$here/python_compat.py" --shared "$shared" --seed-packages "$packages" ;;
  interrupt)
    # Two steps: SIGINT to rank 0, then SIGTERM to rank 1 (one signal per step: a second rank's
    # own signal would race with the first one's abort).
    run_step "${step[@]}" -N3 -n7 "${check[@]}" interrupt SIGINT
    first=$out
    run_step "${step[@]}" -N3 -n7 "${check[@]}" interrupt SIGTERM
    out="$first
$out" ;;
  preempt)
    # SIGUSR1 to rank 4 alone after 1.5 s: every rank stops at one step and commits; a second
    # step resumes from that checkpoint and ends with the uninterrupted sum.
    work=$shared/preempt.$$
    rm -rf "$work" && mkdir -p "$work"
    (sleep 1.5; for _ in $(seq 100); do [[ -s $work/pid.4 ]] && break; sleep 0.1; done; kill -USR1 "$(cat "$work/pid.4")") &
    run_step "${step[@]}" -N3 -n6 "${check[@]}" preempt "$work"
    wait
    first=$out
    ((status == 0)) || fail "the first run failed: $status"
    run_step "${step[@]}" -N3 -n6 "${check[@]}" preempt "$work"
    out="$first
$out" ;;
  exec-import-*)
    # A script that imports jobkit under `jobkit exec`, on layouts torchrun cannot make (torchrun
    # starts as many processes on every node): jobkit takes the torch variables it set itself.
    layout=(-N3 -n7)  # 5+1+1
    [[ $mode == exec-import-cyclic ]] && layout=(-N3 -n8 --distribution=cyclic)  # 6+1+1, ranks dealt cyclically
    run_step env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK \
      "${step[@]}" "${layout[@]}" "${JOBKIT_TEST_CLI:?the jobkit program}" exec --timeout 60 -- "${check[@]}" exec-import ;;
  *) run_step "${step[@]}" -N3 -n7 "${check[@]}" "$mode" ;;
esac
case $mode in
  preempt)
    ((status == 0)) || fail "the second run failed: $status"
    stops=$(grep -o 'stop at step [0-9]*: SIGUSR1 on rank 4' <<<"$out" | sort | uniq -c)
    echo "stops: $stops"
    [[ $(wc -l <<<"$stops") == 1 && $(awk '{print $1}' <<<"$stops") == 6 ]] || fail "the ranks did not stop at one step"
    (($(count 'resumed from step') == 6)) || fail "not every rank resumed"
    # 6 ranks, 40 steps: sum over r of (r + 1) * 40 * 41 / 2
    (($(count 'finished with total 17220') == 6)) || fail "the resumed run's total is wrong" ;;
  exec-import-*)
    ((status == 0)) || fail "exit status $status"
    ranks=7
    [[ $mode == exec-import-cyclic ]] && ranks=8
    (($(count 'exec-import ok') == ranks)) || fail "not every rank took jobkit exec's variables"
    # Each node holds as many ranks as its ranks' LOCAL_WORLD_SIZE says, and the layout is uneven
    # (Slurm packs -N3 -n7 as 5+1+1 and -N3 -n8 as 6+1+1 here, the latter's ranks dealt cyclically).
    sizes=()
    for node in 0 1 2; do
      size=$(grep -o "exec-import ok node $node/3 local [0-9]*/[0-9]*" <<<"$out" | sed 's|.*/||' | sort -u)
      [[ $size =~ ^[0-9]+$ ]] || fail "node $node's ranks give LOCAL_WORLD_SIZE '$size'"
      (($(count "exec-import ok node $node/3 ") == size)) || fail "node $node does not hold $size ranks"
      sizes+=("$size")
    done
    (($(printf '%s\n' "${sizes[@]}" | sort -u | wc -l) > 1)) || fail "the layout ${sizes[*]} is not uneven"
    echo "ranks per node: ${sizes[*]}" ;;
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
    (($(count 'PeerFailureError after [0-9.]* s: a signal interrupted rank 0 (c1) in a jobkit call at python_check.py') == 6)) ||
      fail "the other ranks did not learn of rank 0's interrupt"
    (($(count 'PeerFailureError after [0-9.]* s: a signal interrupted rank 1 (c1) in a jobkit call at python_check.py') == 6)) ||
      fail "the other ranks did not learn of rank 1's interrupt" ;;
  torch-env)
    ((status == 0)) || fail "exit status $status"
    (($(count 'torch-env ok all_reduce 28') == 7)) || fail "a rank's variables, idempotence or all_reduce was wrong" ;;
  tensor-*)
    ((status == 0)) || fail "exit status $status"
    ranks=$(count ': tensor ')
    ((ranks >= 7 && $(count ': tensor ok') == ranks)) || fail "an array collective or group misbehaved"
    # Every rank names rank 1 and both values of each mismatch (which other rank depends on who saw it).
    both() { grep -- "$1 mismatch: PeerFailureError: .*rank 1 (.*" <<<"$out" | grep -- "$2" | grep -c -- "$3" || true; }
    (($(both dtype 'of int64\[4\], op sum' 'of float32\[4\], op sum') == ranks)) || fail "a dtype mismatch was not named"
    (($(both shape 'of float32\[2, 2\]' 'of float32\[4\]') == ranks)) || fail "a shape mismatch was not named"
    (($(both op 'float32\[4\], op max' 'float32\[4\], op sum') == ranks)) || fail "an op mismatch was not named" ;;
  compat-*)
    ((status == 0)) || fail "exit status $status"
    ranks=7
    [[ $mode == compat-cyclic ]] && ranks=8
    for seed in axolotl composer modelopt olmo_core speechbrain; do
      (($(count ": compat $seed ok") == ranks)) || fail "jobkit.compat.$seed misbehaved on some rank"
      # Side by side: the seed's own module passed (or differed as its documentation says), was
      # pinned as not loadable here, or the whole comparison was skipped; rank 0's line shows which.
      (($(count ": compat $seed ok (seed's own\( .*: ok\| .*: not loaded: \|: SKIP: \)") == ranks)) ||
        fail "the side-by-side line of $seed is missing on some rank"
      grep -m1 "^rank 0 .*: compat $seed ok" <<<"$out" | sed 's/^rank 0 ([^)]*): /side by side: /'
    done
    [[ $packages != SKIP* ]] || echo "side by side: $packages" ;;
  torch)
    ((status == 0)) || fail "exit status $status"
    (($(count 'nccl refused: NcclError\|nccl refused: CudaError') == 7)) || fail "nccl did not fail cleanly"
    (($(count 'torch ok all_reduce 28') == 7)) || fail "init_process_group or all_reduce failed" ;;
esac
echo ok
