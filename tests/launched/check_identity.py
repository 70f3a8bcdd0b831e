#!/usr/bin/python3
"""Checks every rank's `jobkit info --json` against the launcher's truth.

Reads the lines of probe.sh on stdin. The truth is the real hostname of each rank and the
launcher's variables (SLURM_* under srun, OMPI_COMM_WORLD_* under mpirun), never jobkit's output.
"""
import argparse
import collections
import json
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--launcher", choices=["slurm", "mpirun"], required=True)
    parser.add_argument("--layout", help="tasks per node in node order, e.g. 4,2,1")
    parser.add_argument("--cyclic", action="store_true", help="expect round-robin rank placement")
    parser.add_argument("--components", help="a heterogeneous step's ranks per component, e.g. 2,3")
    args = parser.parse_args()

    failures = []

    def expect(condition, message):
        if not condition:
            failures.append(message)

    rows = []
    for line in sys.stdin:
        try:
            rows.append(json.loads(line))
        except ValueError:
            if line.strip():
                failures.append(f"not a probe line: {line.strip()!r}")
    expect(len(rows) == args.ranks, f"{len(rows)} ranks answered, expected {args.ranks}")
    by_rank = {}
    for row in rows:
        jk, env, host = row["jobkit"], row["env"], row["hostname"]
        if args.launcher == "slurm":
            truth_rank, truth_size = int(env["SLURM_PROCID"]), int(env["SLURM_STEP_NUM_TASKS"])
            truth_local = int(env["SLURM_LOCALID"])
        else:
            truth_rank, truth_size = int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"])
            truth_local = int(env["OMPI_COMM_WORLD_LOCAL_RANK"])
        who = f"rank {truth_rank} on {host}"
        expect(jk["rank"] == truth_rank, f"{who}: jobkit rank {jk['rank']}")
        expect(jk["world_size"] == truth_size == args.ranks, f"{who}: world size {jk['world_size']}")
        expect(jk["local_rank"] == truth_local, f"{who}: local rank {jk['local_rank']}")
        expect(jk["hostname"] == host, f"{who}: hostname {jk['hostname']!r}")
        expect(jk["source"] == args.source, f"{who}: source {jk['source']}, expected {args.source}")
        if args.launcher == "slurm":
            expect(jk["node_rank"] == int(env["SLURM_NODEID"]), f"{who}: node rank {jk['node_rank']}")
            expect(jk["job_id"] == env["SLURM_JOB_ID"], f"{who}: job id {jk['job_id']!r}")
            expect(jk["step_id"] == env["SLURM_STEP_ID"], f"{who}: step id {jk['step_id']!r}")
        expect(truth_rank not in by_rank, f"rank {truth_rank} answered twice")
        by_rank[truth_rank] = row

    expect(sorted(by_rank) == list(range(args.ranks)), f"ranks seen: {sorted(by_rank)}")

    hosts = collections.defaultdict(list)
    for rank in sorted(by_rank):
        hosts[by_rank[rank]["hostname"]].append(rank)
    node_of_host = {}
    for host, ranks in hosts.items():
        members = [by_rank[r]["jobkit"] for r in ranks]
        expect(sorted(m["local_rank"] for m in members) == list(range(len(ranks))),
               f"{host}: local ranks {sorted(m['local_rank'] for m in members)}")
        expect(all(m["local_world_size"] == len(ranks) for m in members),
               f"{host}: local world sizes {[m['local_world_size'] for m in members]}, {len(ranks)} ranks there")
        expect(all(m["num_nodes"] == len(hosts) for m in members), f"{host}: num_nodes, {len(hosts)} hosts")
        node_ranks = {m["node_rank"] for m in members}
        expect(len(node_ranks) == 1, f"{host}: several node ranks {node_ranks}")
        node_of_host[host] = min(node_ranks)
    expect(sorted(node_of_host.values()) == list(range(len(hosts))),
           f"node ranks {node_of_host} are not 0..{len(hosts) - 1}")

    if args.layout:
        layout = [len(hosts[h]) for h in sorted(hosts, key=node_of_host.get)]
        expect(layout == [int(n) for n in args.layout.split(",")], f"layout {layout}, expected {args.layout}")
    if args.cyclic:
        expect(any(ranks != list(range(ranks[0], ranks[0] + len(ranks))) for ranks in hosts.values()),
               f"placement {dict(hosts)} is not cyclic")

    # Heterogeneous jobs: Slurm numbers a step's ranks component after component; each component's
    # nodes are the hosts of its ranks (expanded by Slurm's own scontrol). Elsewhere, component 0
    # of 1 is the whole step.
    sizes = [int(n) for n in args.components.split(",")] if args.components else [args.ranks]
    first = 0
    for index, size in enumerate(sizes):
        ranks = range(first, first + size)
        hosts_of = sorted({by_rank[r]["hostname"] for r in ranks if r in by_rank}, key=node_of_host.get)
        for r in ranks:
            if r not in by_rank:
                continue
            jk = by_rank[r]["jobkit"]
            got = tuple(jk.get(k) for k in ("component", "num_components", "component_rank", "component_size"))
            want = (index, len(sizes), r - first, size)
            expect(got == want, f"rank {r}: component, of, rank, size {got}, expected {want}")
            if args.components:
                listed = subprocess.run(["scontrol", "show", "hostnames", str(jk.get("component_nodes"))], capture_output=True,
                                        text=True).stdout.split()
                expect(listed == hosts_of, f"rank {r}: component_nodes {jk.get('component_nodes')!r} is {listed}, "
                                           f"the component's ranks run on {hosts_of}")
            else:
                expect(jk.get("component_nodes") == "", f"rank {r}: component_nodes {jk.get('component_nodes')!r}")
        first += size

    for failure in failures:
        print("FAIL:", failure)
    print(f"{len(rows)} ranks checked on {len(hosts)} hosts: {dict(hosts)}",
          "OK" if not failures else f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
