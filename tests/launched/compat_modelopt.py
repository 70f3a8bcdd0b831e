"""jobkit.compat.modelopt on every rank of a step (called by python_compat.py): NFSWorkspace in a
node-local directory (each rank reads the states of its node's ranks; configs with floats),
get_tensors_parallel over each node's ranks, get_configs_parallel over every rank in reverse order
(None configs left out), over the even ranks with a jobkit.Group, and over every rank with configs
too large for the collectives and a workspace next to this file (the workspace route when the ranks
span nodes, shared memory on one node), a member that fails before the gather, and an exception in
the first rank's block. Expected values come from the identity, so they hold on any layout."""
import os
import pickle
import shutil
import tempfile
import uuid

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
    def state(q):
        """Rank q's config, with floats (torch 1.13's weights_only loader refuses pickled floats)."""
        return {"rank": q, "host": me.hostname, "eps": 1e-5 * (q + 1), "scales": [0.5, q + 0.25]}

    ws.write_configs_and_weights(state(r), {"w": torch.full((2,), float(r))})
    jobkit.barrier(timeout=30)
    for q in node:
        config, weights = ws.read_configs_and_weights_from_rank(q)
        expect(config == state(q) and isinstance(config["scales"][0], float)
               and weights["w"].tolist() == [float(q)] * 2, f"NFSWorkspace state of rank {q}: {config} {weights}")

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

    expect(large_configs(n, r, hosts), "get_configs_parallel of large configs")
    for what, failing in before_the_gather(n, r):
        expect(not failing, f"{what}: {failing}")

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


def large_configs(n, r, hosts):
    """3 MiB configs over every rank with a workspace: their total is over node_local_gather's
    4 MiB for the collectives, so ranks on several nodes take the workspace route (on one node:
    shared memory). A spy on jobkit.node_local_gather records the route. True when all held."""
    shared = jobkit.broadcast_object(
        os.path.join(os.environ.get("COMPAT_SHARED_DIR") or os.path.dirname(os.path.abspath(__file__)),
                     f".compat-modelopt-{uuid.uuid4().hex}"), timeout=30)
    os.makedirs(shared, exist_ok=True)
    routes, real = [], jobkit.node_local_gather

    def spy(*args, **kwargs):
        states, route = real(*args, **kwargs)
        routes.append(route)
        return states, route

    def blob(q):
        return bytes([q % 251]) * (3 << 20)

    jobkit.node_local_gather = spy
    try:
        with distribute.get_configs_parallel({"rank": r, "blob": blob(r)}, list(range(n)), None,
                                             workspace_path=shared) as configs:
            ok = [c["rank"] for c in configs] == (list(range(n)) if r == 0 else []) and \
                all(c["blob"] == blob(c["rank"]) for c in configs)
    finally:
        jobkit.node_local_gather = real
    jobkit.barrier(timeout=30)
    if r == 0:
        shutil.rmtree(shared, ignore_errors=True)
    return ok and routes == ["workspace" if len(set(hosts)) > 1 else "shared_memory"]


def before_the_gather(n, r):
    """A config that does not pickle, then a tensor without .cpu(), on the last rank: it raises its
    own error, the others jobkit.PeerFailureError naming it, nobody runs the block, and the next
    collective pairs. Yields (what, failures)."""
    bad = n - 1
    cases = (("get_configs_parallel", lambda: distribute.get_configs_parallel(
                  (lambda: 0) if r == bad else r, list(range(n)), None)),
             ("get_tensors_parallel", lambda: distribute.get_tensors_parallel(
                  object() if r == bad else torch.zeros(1), list(range(n)))))
    for what, enter in cases:
        outcome = "no error"
        try:
            with enter():
                outcome = "the block ran"
        except (pickle.PicklingError, AttributeError):
            outcome = "own"
        except jobkit.PeerFailureError as e:
            outcome = "peer" if f"rank {bad}: " in str(e) else f"peer, but it says {e}"
        want = "own" if r == bad else "peer"
        after = jobkit.all_gather_object(r, timeout=30)
        yield what, ([] if outcome == want else [f"{outcome}, not {want}"]) + \
            ([] if after == list(range(n)) else [f"the next collective gave {after}"])


def side_by_side(distribute, check, ctx) -> None:
    """The checks both ModelOpt modules take (python_compat.py runs them on jobkit.compat.modelopt and on
    ModelOpt's own export/distribute.py): NFSWorkspace in a directory every node sees, every rank reading
    every rank's state; get_tensors_parallel and get_configs_parallel (None on all but the first) over
    this node's ranks with ctx.node_group, a torch group of them, as ModelOpt's barrier group."""
    import torch.distributed

    me, node = ctx.me, ctx.node
    shared = os.environ.get("COMPAT_SHARED_DIR") or os.path.dirname(os.path.abspath(__file__))
    root = jobkit.broadcast_object(os.path.join(shared, f"modelopt-side-by-side-{uuid.uuid4().hex}"), timeout=30)
    ws = distribute.NFSWorkspace(root)
    check("NFSWorkspace", ws.is_initialized, True)
    torch.distributed.barrier()  # ModelOpt's rank 0 makes the directory, and nothing waits for it
    state = lambda q: {"rank": q, "eps": 1e-5 * (q + 1), "scales": [0.5, q + 0.25]}  # noqa: E731
    ws.write_configs_and_weights(state(me.rank), {"w": torch.full((2,), float(me.rank))})
    torch.distributed.barrier()
    states = [ws.read_configs_and_weights_from_rank(q) for q in range(me.world_size)]
    check("NFSWorkspace states", [(c, w["w"].tolist()) for c, w in states],
          [(state(q), [float(q)] * 2) for q in range(me.world_size)])
    torch.distributed.barrier()
    if me.rank == 0:
        shutil.rmtree(root)
    if len(node) < 2:  # ModelOpt's asserts two ranks or more
        return
    with distribute.get_tensors_parallel(torch.full((3,), float(me.rank), dtype=torch.bfloat16), node,
                                         ctx.node_group) as tensors:
        check("get_tensors_parallel", [(t.tolist(), t.dtype) for t in tensors],
              [([float(q)] * 3, torch.bfloat16) for q in node] if me.rank == node[0] else [])
    config = {"rank": me.rank} if me.rank == node[0] else None
    with distribute.get_configs_parallel(config, node, ctx.node_group) as configs:
        check("get_configs_parallel (None on the others)", configs, [config] if me.rank == node[0] else [])
