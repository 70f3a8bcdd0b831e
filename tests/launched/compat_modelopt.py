"""jobkit.compat.modelopt on every rank of a step (called by python_compat.py): NFSWorkspace in a
node-local directory (each rank reads the states of its node's ranks), get_tensors_parallel over
each node's ranks, get_configs_parallel over every rank in reverse order (None configs left out)
and over the even ranks with a jobkit.Group, and an exception in the first rank's block. Expected
values come from the identity, so they hold on any layout."""
import os
import shutil
import tempfile

import torch

import jobkit
from jobkit.compat import modelopt as distribute


def run() -> list:
    failures = []

    def expect(ok, what):
        if not ok:
            failures.append(what)

    me = jobkit.identity()
    n, r = me.world_size, me.rank
    hosts = [host for _, host in jobkit.all_gather_object((r, me.hostname))]
    node = [q for q in range(n) if hosts[q] == me.hostname]

    root = jobkit.broadcast_object(os.path.join(tempfile.gettempdir(), f"jobkit-compat-modelopt-{os.getpid()}"),
                                   timeout=30)
    ws = distribute.NFSWorkspace(root)
    expect(ws.is_initialized and ws.rank == r, "NFSWorkspace")
    ws.write_configs_and_weights({"rank": r, "host": me.hostname}, {"w": torch.full((2,), float(r))})
    jobkit.barrier(timeout=30)
    for q in node:
        config, weights = ws.read_configs_and_weights_from_rank(q)
        expect(config == {"rank": q, "host": me.hostname} and weights["w"].tolist() == [float(q)] * 2,
               f"NFSWorkspace state of rank {q}: {config} {weights}")

    if len(node) > 1:  # shared memory on one node; a node with one rank has nothing to gather
        with distribute.get_tensors_parallel(torch.full((3,), float(r), dtype=torch.bfloat16), node) as tensors:
            want = [[float(q)] * 3 for q in node] if r == node[0] else []
            expect([t.tolist() for t in tensors] == want and all(t.dtype == torch.bfloat16 for t in tensors),
                   f"get_tensors_parallel over {node}: {tensors}")
    if n == 1:
        shutil.rmtree(root)
        return failures

    reverse = list(range(n - 1, -1, -1))  # the first rank is the last world rank, on any node
    skipped = 1 if n > 2 else -1  # a rank other than the first passes None
    config = None if r == skipped else {"rank": r, "weight": torch.arange(r + 1)}
    with distribute.get_configs_parallel(config, reverse, None) as configs:
        want = [q for q in reverse if q != skipped] if r == n - 1 else []
        expect([c["rank"] if isinstance(c, dict) else c for c in configs] == want
               and all(c["weight"].tolist() == list(range(c["rank"] + 1)) for c in configs if isinstance(c, dict)),
               f"get_configs_parallel over {reverse}: {configs}")

    even = list(range(0, n, 2))
    if len(even) > 1 and r in even:
        group = jobkit.make_group(even, timeout=30)
        with distribute.get_configs_parallel(f"config {r}", even, group, workspace_path=root) as configs:
            expect(configs == ([f"config {q}" for q in even] if r == 0 else []), f"over {even}: {configs}")

    try:
        with distribute.get_tensors_parallel(torch.tensor([r]), [0, 1] + list(range(2, n))) as tensors:
            if r == 0:
                raise KeyError("the first rank's block raised")
            expect(tensors == [], "get_tensors_parallel: [] on the other ranks")
    except KeyError:
        expect(r == 0, "the block's exception reached another rank")
    expect(jobkit.all_gather_object(r, timeout=30) == list(range(n)), "a collective after the block")
    if me.local_rank == 0:
        shutil.rmtree(root)
    return failures
