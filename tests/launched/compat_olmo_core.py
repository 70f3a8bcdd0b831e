"""jobkit.compat.olmo_core on every rank of a step (run by python_compat.py): each function's
multi-rank behaviour against values computed from jobkit.identity() and the gathered host names,
so that it holds on any layout (block, cyclic, uneven nodes). Every rank makes the same calls."""
import datetime
import os
import time

import jobkit
from jobkit.compat import olmo_core as du


def run() -> list:
    failures = []

    def check(what, got, expected):
        if got != expected:
            failures.append(f"{what}: got {got!r}, expected {expected!r}")

    me = jobkit.identity()
    r, W = me.rank, me.world_size
    hosts = du.all_gather_object(me.hostname)
    on_my_node = [q for q in range(W) if hosts[q] == me.hostname]
    local_ranks = [sum(1 for q in range(p) if hosts[q] == hosts[p]) for p in range(W)]

    check("get_rank()", du.get_rank(), r)
    check("get_world_size()", du.get_world_size(), W)
    check("get_local_rank()", du.get_local_rank(), on_my_node.index(r))
    check("get_local_world_size()", du.get_local_world_size(), len(on_my_node))
    check("get_num_nodes()", du.get_num_nodes(), len(set(hosts)))
    check("is_distributed()", du.is_distributed(), W > 1)
    check("get_global_rank(W-1)", du.get_global_rank(W - 1), W - 1)
    node = jobkit.node_group()
    check("get_rank(node group)", du.get_rank(node), on_my_node.index(r))
    check("get_world_size(node group)", du.get_world_size(node), len(on_my_node))
    check("get_global_rank(last, node group)", du.get_global_rank(len(on_my_node) - 1, node), on_my_node[-1])
    if "FS_LOCAL_RANK" not in os.environ and "OLMO_SHARED_FS" not in os.environ:
        check("get_fs_local_rank() before init_distributed", du.get_fs_local_rank(), me.local_rank)

    du.barrier()
    du.barrier(node)
    check("all_gather_object(rank)", du.all_gather_object(r), list(range(W)))
    check("all_gather_object(rank, node group)", du.all_gather_object(r, node), on_my_node)
    check("broadcast_object(src=last)", du.broadcast_object({"from": r}, W - 1), {"from": W - 1})
    check("scatter_object (a broadcast)", du.scatter_object(("o", r)), ("o", 0))
    check("synchronize_value(float, src=last)", du.synchronize_value(0.1 + r, "cpu", W - 1), 0.1 + (W - 1))
    check("synchronize_value(2**60 + rank)", du.synchronize_value(2**60 + r, "cpu"), 2**60)
    check("synchronize_flag(rank == 0)", du.synchronize_flag(r == 0, "cpu"), True)
    check("all_reduce_value(rank)", du.all_reduce_value(r, "cpu"), W * (W - 1) // 2)
    check("all_reduce_value(rank + 0.1, max)", du.all_reduce_value(r + 0.1, "cpu", "max"), W - 1 + 0.1)
    check("all_reduce_value(rank == 0, min)", du.all_reduce_value(r == 0, "cpu", "min"), W == 1)
    check("all_reduce_value(1, node group)", du.all_reduce_value(1, "cpu", group=node), len(on_my_node))
    check("all_reduce_value(2**53 + rank)", du.all_reduce_value(2**53 + r, "cpu"), W * 2**53 + W * (W - 1) // 2)
    check("all_reduce_value(rank, avg)", du.all_reduce_value(r, "cpu", "avg"), (W - 1) / 2)
    check("all_reduce_value(0.1 * rank) exactly", du.all_reduce_value(0.1 * r, "cpu", "max"), 0.1 * (W - 1))
    grid = [list(range(i, min(i + 2, W))) for i in range(0, W, 2)]  # rows of two ranks
    check("get_mesh_coordinates(grid)", du.get_mesh_coordinates(grid), [r // 2, r % 2])

    def staggered(tag):
        """f for do_n_at_a_time: when it ran here, and its own result."""
        def f():
            start = time.monotonic()
            time.sleep(0.02)
            return (tag, r, start, time.monotonic())
        return f

    for name, result in [("default n", du.do_n_at_a_time(staggered("a"))),
                         ("n=1 over the node group", du.do_n_at_a_time(staggered("b"), n=1, process_group=node)),
                         ("n=2, world_size, local_rank", du.do_n_at_a_time(staggered("c"), n=2, world_size=W,
                                                                           local_rank=r))]:
        check(f"do_n_at_a_time({name}) result", result[:2], (result[0], r))
        if name != "n=2, world_size, local_rank":  # one rank of a node at a time: no overlap on a host
            spans = sorted(du.all_gather_object(result[2:], node))
            overlapping = [i for i in range(1, len(spans)) if spans[i][0] < spans[i - 1][1]]
            check(f"do_n_at_a_time({name}): ranks of host {me.hostname} overlapping", overlapping, [])

    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return failures
    ramp = torch.arange(r + 1, dtype=torch.float64)
    gathered = du.all_gather(ramp)  # jobkit's path: a size per rank
    check("all_gather(arange(rank + 1))", [t.tolist() for t in gathered], [list(range(q + 1)) for q in range(W)])
    t = torch.full((2,), float(r))
    check("synchronize_value(tensor, src=last)", du.synchronize_value(t, "cpu", W - 1).tolist(), [W - 1.0] * 2)
    t = torch.tensor([r, 1])
    du.all_reduce_value(t, "cpu", dist.ReduceOp.MAX)
    check("all_reduce_value(tensor, ReduceOp.MAX)", t.tolist(), [W - 1, 1])

    saved, here = dict(os.environ), os.getcwd()
    os.chdir(os.path.dirname(os.path.abspath(__file__)))  # the same directory on every rank, for the probe
    world = None
    try:
        du.init_distributed("gloo", timeout=datetime.timedelta(seconds=30), shared_filesytem=False)
        world = dist.group.WORLD
        check("is_distributed() after init", du.is_distributed(), True)
        check("get_rank(WORLD)", du.get_rank(world), r)
        check("get_world_size(WORLD)", du.get_world_size(world), W)
        check("get_global_rank(W-1, WORLD)", du.get_global_rank(W - 1, world), W - 1)
        fs = du.all_gather_object(du.get_fs_local_rank())
        if fs not in (list(range(W)), local_ranks):  # one file system for all, or one per node
            failures.append(f"get_fs_local_rank() after the probe: {fs}, neither the ranks nor the local ranks")
        du.barrier(world)
        check("broadcast_object(WORLD, src=last)", du.broadcast_object([r], W - 1, world), [W - 1])
        check("all_gather_object(WORLD)", du.all_gather_object(r, world), list(range(W)))
        check("all_reduce_value(rank, WORLD)", du.all_reduce_value(r, "cpu", group=world), W * (W - 1) // 2)
        check("all_reduce_value(rank + 0.5, max, WORLD)", du.all_reduce_value(r + 0.5, "cpu", "max", world), W - 0.5)
        check("synchronize_flag(rank == 0, WORLD)", du.synchronize_flag(r == 0, "cpu", world), True)
        check("all_reduce_value(rank == 0, min, WORLD)", du.all_reduce_value(r == 0, "cpu", "min", world), W == 1)
        check("all_reduce_value(True, WORLD)", du.all_reduce_value(True, "cpu", group=world), True)
        average = du.all_reduce_value(r, "cpu", "avg", world)
        check("all_reduce_value(rank, avg, WORLD)", (average, type(average)), ((W - 1) / 2, float))
        check("all_reduce_value(2**53 + rank, WORLD)", du.all_reduce_value(2**53 + r, "cpu", group=world),
              W * 2**53 + W * (W - 1) // 2)
        same = du.all_gather(torch.tensor([r, r]), world)
        check("all_gather(WORLD)", [x.tolist() for x in same], [[q, q] for q in range(W)])
        check("do_n_at_a_time(WORLD)", du.do_n_at_a_time(lambda: r, n=2, process_group=world), r)
        du.validate_env_vars()  # init_process_group exported jobkit's identity
        probed = du.get_fs_local_rank()
        check("probe decision, no variables", du._every_rank_probes(), True)
        if r == W - 1:
            os.environ["FS_LOCAL_RANK"] = str(probed)  # on one rank only: no rank may probe alone
        check("probe decision, FS_LOCAL_RANK on the last rank", du._every_rank_probes(), False)
        du.init_distributed("gloo", shared_filesytem=False)  # kept; probes nowhere (else a rank would wait)
        check("get_fs_local_rank() with FS_LOCAL_RANK on the last rank", du.get_fs_local_rank(), probed)
    finally:
        world = None  # python_compat.py destroys the process group once, after every seed
        jobkit.barrier()
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    return failures


def side_by_side(du, check, ctx) -> None:
    """The checks both OLMo-core modules take (python_compat.py runs them on jobkit.compat.olmo_core and
    on OLMo-core's own distributed/utils.py), over torch's process group and ctx.node_group (a torch
    group of this node), with jobkit's identity in the variables (jobkit.torch.init_process_group)."""
    import torch
    import torch.distributed as dist

    me, node, cpu = ctx.me, ctx.node, torch.device("cpu")
    r, W = me.rank, me.world_size
    f32 = lambda x: torch.tensor(x, dtype=torch.float32).item()  # noqa: E731  the seed's float32 tensors
    check("get_rank()", du.get_rank(), r)
    check("get_world_size()", du.get_world_size(), W)
    check("get_local_rank()", du.get_local_rank(), node.index(r))
    check("get_local_world_size()", du.get_local_world_size(), len(node))
    check("get_num_nodes()", du.get_num_nodes(), len(set(ctx.hosts)), seed=W // len(node))  # NUM_NODES unset
    check("is_distributed()", du.is_distributed(), W > 1)
    check("get_global_rank(W-1)", du.get_global_rank(W - 1), W - 1)
    check("get_rank(node group)", du.get_rank(ctx.node_group), node.index(r))
    check("get_world_size(node group)", du.get_world_size(ctx.node_group), len(node))
    check("get_global_rank(last, node group)", du.get_global_rank(len(node) - 1, ctx.node_group), node[-1])
    du.barrier()
    du.barrier(ctx.node_group)
    check("all_gather_object(rank)", du.all_gather_object(r), list(range(W)))
    check("all_gather_object(rank, node group)", du.all_gather_object(r, ctx.node_group), node)
    check("broadcast_object(src=last)", du.broadcast_object({"from": r}, W - 1), {"from": W - 1})
    check("synchronize_value(float, src=last)", du.synchronize_value(0.1 + r, cpu, W - 1), 0.1 + (W - 1),
          seed=f32(0.1 + (W - 1)))
    check("synchronize_value(2**60 + rank)", du.synchronize_value(2**60 + r, cpu), 2**60)
    check("synchronize_flag(rank == 0)", du.synchronize_flag(r == 0, cpu), True)
    check("all_reduce_value(rank)", du.all_reduce_value(r, cpu), W * (W - 1) // 2)
    check("all_reduce_value(rank + 0.1, MAX)", du.all_reduce_value(r + 0.1, cpu, dist.ReduceOp.MAX), W - 1 + 0.1,
          seed=f32(W - 1 + 0.1))
    check("all_reduce_value(1, node group)", du.all_reduce_value(1, cpu, group=ctx.node_group), len(node))
    check("all_reduce_value(2**53 + rank)", du.all_reduce_value(2**53 + r, cpu), W * 2**53 + W * (W - 1) // 2)
    t = torch.tensor([r, 1])
    du.all_reduce_value(t, cpu, dist.ReduceOp.MAX)
    check("all_reduce_value(tensor, MAX) in place", t.tolist(), [W - 1, 1])
    t = torch.full((2,), float(r))
    check("synchronize_value(tensor, src=last)", du.synchronize_value(t, cpu, W - 1).tolist(), [W - 1.0] * 2)
    same = du.all_gather(torch.tensor([r, r]))
    check("all_gather", [x.tolist() for x in same], [[q, q] for q in range(W)])
    check("do_n_at_a_time(n=2)", du.do_n_at_a_time(lambda: r, n=2), r)
