"""jobkit.compat.composer on every rank of a step (called by python_compat.py): the getters against
jobkit's identity, the collectives over the world and a node's group on jobkit, get_sampler's
shards, then the torch.distributed route after initialize_dist("cpu"). Expected values come from
the identity, so they hold on any layout (uneven, cyclic, one node)."""
import math
import os
from functools import reduce

import torch
import torch.distributed

import jobkit
from jobkit.compat import composer as dist


def run() -> list:
    failures = []

    def expect(ok, what):
        if not ok:
            failures.append(what)

    me = jobkit.identity()
    n, r, src = me.world_size, me.rank, me.world_size - 1
    mine = (dist.get_global_rank(), dist.get_world_size(), dist.get_local_rank(), dist.get_local_world_size(),
            dist.get_node_rank())
    expect(mine == (r, n, me.local_rank, me.local_world_size, me.node_rank), f"getters {mine}")

    everyone = dist.all_gather_object((r, me.hostname, me.local_rank, me.local_world_size, me.node_rank))
    expect([e[0] for e in everyone] == list(range(n)), f"all_gather_object order {everyone}")
    here = [e for e in everyone if e[1] == me.hostname]
    expect(sorted(e[2] for e in here) == list(range(len(here))) and all(e[3] == len(here) for e in here),
           f"local ranks and sizes on {me.hostname}: {here}")
    expect(len({e[4] for e in here}) == 1 and len({(e[1], e[4]) for e in everyone}) == me.num_nodes,
           f"node ranks {everyone}")
    dist.barrier()

    t = torch.tensor([r + 1.0, -(r + 1.0)], dtype=torch.float64)
    dist.all_reduce(t)
    expect(t.tolist() == [n * (n + 1) / 2, -n * (n + 1) / 2], f"all_reduce SUM {t.tolist()}")
    for op, value in (("MAX", n), ("min", 1), ("PRODUCT", math.factorial(n))):
        t = torch.tensor([r + 1], dtype=torch.int64)
        dist.all_reduce(t, op)
        expect(t.item() == value, f"all_reduce {op}: {t.item()}, not {value}")
    t = torch.tensor([r * 5 + 3], dtype=torch.int32)
    dist.all_reduce(t, reduce_operation="BXOR")
    expect(t.item() == reduce(lambda a, b: a ^ b, (q * 5 + 3 for q in range(n))), f"all_reduce BXOR {t.item()}")

    t = torch.full((3,), float(r))
    dist.broadcast(t, src)
    expect(t.tolist() == [float(src)] * 3, f"broadcast from {src}: {t.tolist()}")
    objects = [r, me.hostname]
    dist.broadcast_object_list(objects, src=src)
    expect(objects == [src, everyone[src][1]], f"broadcast_object_list from {src}: {objects}")
    gathered = dist.all_gather(torch.tensor([r, me.local_rank], dtype=torch.int16))
    expect([g.tolist() for g in gathered] == [[e[0], e[2]] for e in everyone], "all_gather")
    gathered = dist.all_gather(torch.tensor([[r, 1], [2, 3]]).t())  # transposed: not contiguous
    expect([g.tolist() for g in gathered] == [[[q, 2], [1, 3]] for q in range(n)], "all_gather(transposed)")

    node = jobkit.node_group()
    expect(node.world_ranks == [e[0] for e in here], f"node group {node}")
    expect(dist.get_global_rank(node) == node.world_ranks.index(r), "get_global_rank(node group)")
    t = torch.ones(2, dtype=torch.float32)
    dist.all_reduce(t, "SUM", node)
    expect(t.tolist() == [float(len(here))] * 2, f"all_reduce over the node {t.tolist()}")
    objects = [me.local_rank, None]
    dist.broadcast_object_list(objects, node.world_ranks[-1], node)
    expect(objects == [len(here) - 1, None], f"broadcast_object_list over the node {objects}")
    expect(dist.all_gather_object(r, group=node) == node.world_ranks, "all_gather_object over the node")

    shard = list(dist.get_sampler(list(range(20))))
    shards = dist.all_gather_object(shard)
    expect(shard == (list(range(20)) * 2)[r:math.ceil(20 / n) * n:n], f"get_sampler shard {shard}")
    expect(set().union(*map(set, shards)) == set(range(20)), "get_sampler covers the dataset")

    dist.initialize_dist("cpu", timeout=60)
    world = None
    try:
        expect(dist.is_initialized() and torch.distributed.get_rank() == r, "initialize_dist")
        world = torch.distributed.group.WORLD
        expect(dist.get_global_rank(world) == r, "get_global_rank(WORLD)")
        t = torch.tensor([float(r)])
        dist.all_reduce(t, "SUM", group=world)
        expect(t.item() == n * (n - 1) / 2, f"torch all_reduce {t.item()}")
        t = torch.tensor([r + 1], dtype=torch.int64)
        dist.all_reduce(t, "product", group=world)  # a name in any case, as a torch ReduceOp
        expect(t.item() == math.factorial(n), f"torch all_reduce product {t.item()}")
        objects = [r]
        dist.broadcast_object_list(objects, src=src, group=world)
        expect(objects == [src], f"torch broadcast_object_list {objects}")
        expect(dist.all_gather_object(r, group=world) == list(range(n)), "torch all_gather_object")
        dist.barrier(world)
    finally:
        world = None  # python_compat.py destroys the process group once, after every seed
        jobkit.barrier()
    return failures


def side_by_side(dist, check, ctx) -> None:
    """The checks both composer modules take (python_compat.py runs them on jobkit.compat.composer and on
    composer's own dist.py), over torch's process group and ctx.node_group (a torch group of this node)."""
    me, node = ctx.me, ctx.node
    n, r, src = me.world_size, me.rank, me.world_size - 1
    getters = (dist.get_global_rank, dist.get_world_size, dist.get_local_rank, dist.get_local_world_size,
               dist.get_node_rank)
    identity = (r, n, me.local_rank, me.local_world_size, me.node_rank)
    check("getters", tuple(get() for get in getters), identity)
    saved = dict(os.environ)
    try:  # the launcher's variables unset: composer reads LOCAL_RANK, LOCAL_WORLD_SIZE and NODE_RANK only there
        for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK"):
            os.environ.pop(name, None)
        missing = "raises MissingEnvironmentError"
        check("getters without the variables", tuple(check.outcome(get) for get in getters), identity,
              seed=(r, n, missing, missing, missing))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    check("all_gather_object(rank)", dist.all_gather_object(r), list(range(n)))
    dist.barrier()
    t = torch.tensor([r + 1.0, -(r + 1.0)], dtype=torch.float64)
    dist.all_reduce(t)
    check("all_reduce SUM", t.tolist(), [n * (n + 1) / 2, -n * (n + 1) / 2])
    for op, value in (("MAX", n), ("min", 1), ("PRODUCT", math.factorial(n))):
        t = torch.tensor([r + 1], dtype=torch.int64)
        dist.all_reduce(t, op)
        check(f"all_reduce {op}", t.item(), value)
    t = torch.tensor([r * 5 + 3], dtype=torch.int32)
    dist.all_reduce(t, reduce_operation="BXOR")
    check("all_reduce BXOR", t.item(), reduce(lambda a, b: a ^ b, (q * 5 + 3 for q in range(n))))
    t = torch.full((3,), float(r))
    dist.broadcast(t, src)
    check(f"broadcast from {src}", t.tolist(), [float(src)] * 3)
    objects = [r, "x"]
    dist.broadcast_object_list(objects, src=src)
    check(f"broadcast_object_list from {src}", objects, [src, "x"])
    locals_ = [[q, ctx.hosts[:q].count(ctx.hosts[q])] for q in range(n)]  # rank and local rank of each
    for dtype in (torch.int32, torch.int16):  # composer's int16 goes to torch's gloo, which has no int16
        gathered = check.outcome(lambda: [g.tolist() for g in dist.all_gather(torch.tensor([r, me.local_rank],
                                                                                           dtype=dtype))])
        check(f"all_gather({dtype})", gathered, locals_, seed=check.SAME if dtype == torch.int32 else
              "raises RuntimeError")
    gathered = dist.all_gather(torch.tensor([[r, 1], [2, 3]]).t())  # transposed: not contiguous
    check("all_gather(transposed)", [g.tolist() for g in gathered], [[[q, 2], [1, 3]] for q in range(n)])
    check("get_global_rank(node group)", dist.get_global_rank(ctx.node_group), node.index(r))
    t = torch.ones(2, dtype=torch.float32)
    dist.all_reduce(t, "SUM", ctx.node_group)
    check("all_reduce over the node", t.tolist(), [float(len(node))] * 2)
    objects = [r, None]
    dist.broadcast_object_list(objects, node[-1], ctx.node_group)
    check("broadcast_object_list over the node", objects, [node[-1], None])
    # composer sizes the list by the world, not the group: torch fills the group's part, None the rest
    check("all_gather_object over the node", dist.all_gather_object(r, group=ctx.node_group), node,
          seed=node + [None] * (n - len(node)))
    shard = list(dist.get_sampler(list(range(20))))
    check("get_sampler shard", shard, (list(range(20)) * 2)[r:math.ceil(20 / n) * n:n])
