#!/usr/bin/python3
"""One rank of a heterogeneous job's step (tests/launched/het_job.sh): its identity against Slurm's
numbering, collectives across the components, and its component's group.

usage: het_check.py SIZES   (the step's ranks per component in component order, e.g. 2,3)
The truth is Slurm's rule, not jobkit: a step numbers its ranks component after component.
"""
import os
import subprocess
import sys

import jobkit

sizes = [int(n) for n in sys.argv[1].split(",")]
first = int(os.environ.get("HET_FIRST_COMPONENT", "0"))  # the step's first het group (srun --het-group)
me = jobkit.identity()
rank = int(os.environ["SLURM_PROCID"])
offsets = [sum(sizes[:i]) for i in range(len(sizes))]
index = max(i for i in range(len(sizes)) if offsets[i] <= rank)
problems = []
want = {"rank": rank, "world_size": sum(sizes), "component": first + index,
        "num_components": int(os.environ["SLURM_HET_SIZE"]), "component_rank": rank - offsets[index],
        "component_size": sizes[index]}
for key, value in want.items():
    if getattr(me, key) != value:
        problems.append(f"{key} {getattr(me, key)}, expected {value}")

# Across components: the world's sum of ranks, and a broadcast from the last rank.
total = jobkit.all_reduce(rank)
if total != sum(range(sum(sizes))):
    problems.append(f"all_reduce over the world gave {total}")
last = jobkit.broadcast_object(rank, src=sum(sizes) - 1)
if last != sum(sizes) - 1:
    problems.append(f"broadcast_object from the last rank gave {last}")
# The component's own group: its size, its sum of ranks, and its first rank on every member.
group = jobkit.component_group()
if group.size() != sizes[index] or group.rank() != rank - offsets[index]:
    problems.append(f"component_group: rank {group.rank()} of {group.size()}")
in_component = jobkit.all_reduce(rank, group=group)
if in_component != sum(range(offsets[index], offsets[index] + sizes[index])):
    problems.append(f"all_reduce over the component gave {in_component}")
nodes = jobkit.all_gather_object(me.hostname, group=group)
# component_nodes names the hosts of the component's ranks, in order (Slurm's scontrol expands it).
listed = subprocess.run(["scontrol", "show", "hostnames", me.component_nodes], capture_output=True,
                        text=True).stdout.split()
if sorted(listed) != sorted(set(nodes)):
    problems.append(f"component_nodes {me.component_nodes!r} is {listed}, its ranks run on {sorted(set(nodes))}")
jobkit.barrier()

print(f"rank {rank}: component {me.component}/{me.num_components} rank {me.component_rank}/{me.component_size} "
      f"on {me.component_nodes} hosts {sorted(set(nodes))}: " + ("; ".join(problems) if problems else "OK"),
      flush=True)
sys.exit(1 if problems else 0)
