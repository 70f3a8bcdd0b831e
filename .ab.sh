#!/usr/bin/env bash
# usage: ab.sh OUT ROUNDS LAYOUT ITERS LARGE side=build ...
out=$1 rounds=$2 layout=$3 iters=$4 large=$5; shift 5
: > "$out"
export PIN=cyclic
for r in $(seq "$rounds"); do
  for pair in "$@"; do
    side=${pair%%=*} b=${pair#*=}
    bin=$b/bench/jobkit_loop
    [[ $side == mpi* ]] && bin=$b/bench/peers/mpi_bench
    OMPI_MCA_mpi_yield_when_idle=1 srun --mpi=pmix -N"${layout%x*}" -n"${layout#*x}" --overcommit /work/main/bench/pin.sh "$bin" "$iters" 100 "$large" 5 2>/dev/null |
      grep -v '"init"' | sed "s/^{/{\"side\":\"$side\",\"round\":$r,/" >> "$out"
  done
done
python3 - "$out" <<'PY'
import json,sys,collections,statistics
rows=collections.defaultdict(list)
for l in open(sys.argv[1]):
    d=json.loads(l); k=(d['op'],d['bytes'])
    v=d.get('mb_per_s') if d['bytes']>1024 else d['loop_avg_us']
    rows[(k,d['side'])].append(v)
sides=[]
for (k,s) in rows:
    if s not in sides: sides.append(s)
for k in sorted({k for k,_ in rows}):
    print(k, '  '.join(f"{s}: "+",".join(f"{x:.1f}" for x in rows[(k,s)])+f" (med {statistics.median(rows[(k,s)]):.1f})" for s in sides if (k,s) in rows))
PY
