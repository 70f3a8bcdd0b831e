"""jobkit.compat.axolotl on every rank of a step (run by python_compat.py): each function's
multi-rank behaviour, with the expected values computed from jobkit.identity(), so that the checks
hold on any layout. Every rank makes the same collective calls in the same order. side_by_side: the
checks both modules take, jobkit's and axolotl's own (with the real accelerate)."""
import os
import tempfile
import time
import uuid

import torch

import jobkit
from jobkit.compat import axolotl as dist

T = 30  # seconds: every wait's deadline


def run() -> list:
    me = jobkit.identity()
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    check(dist.is_distributed() == (me.world_size > 1), f"is_distributed() on {me.world_size} ranks")
    check(dist.is_main_process() == (me.rank == 0), "is_main_process()")
    dist.barrier(timeout=T)

    calls = []
    value = dist.compute_and_broadcast(lambda: calls.append(me.rank) or ("from", me.rank, 2 ** 40 + 1), timeout=T)
    check(value == ("from", 0, 2 ** 40 + 1), f"compute_and_broadcast gave {value!r}")
    check(calls == ([0] if me.rank == 0 else []), f"compute_and_broadcast ran fn on {calls}")
    three = dist.compute_and_broadcast(lambda: 3.0, timeout=T)
    check(isinstance(three, float) and three == 3.0, f"compute_and_broadcast(3.0) gave {three!r}")

    gathered = dist.gather_from_all_ranks(lambda: (me.rank, me.hostname), me.world_size, timeout=T)
    if me.rank == 0:
        check(gathered is not None and [r for r, _ in gathered] == list(range(me.world_size))
              and gathered[0][1] == me.hostname, f"gather_from_all_ranks gave {gathered!r}")
    else:
        check(gathered is None, f"gather_from_all_ranks gave {gathered!r} off rank 0")
    scalars = dist.gather_scalar_from_all_ranks(lambda: me.rank * 0.5 + 2 ** 30, timeout=T)  # world_size default 1
    expected = [r * 0.5 + 2 ** 30 for r in range(me.world_size)] if me.rank == 0 else None
    check(scalars == expected, f"gather_scalar_from_all_ranks gave {scalars!r}")
    if me.world_size > 1:  # refused on every rank before any communication
        try:
            dist.gather_from_all_ranks(lambda: 1, me.world_size + 1, timeout=T)
            check(False, "gather_from_all_ranks took a wrong world_size")
        except jobkit.InvalidArgumentError as e:
            check(f"world_size={me.world_size + 1}" in str(e), f"the world_size error says {e}")

    reducers = []
    reduced = dist.reduce_and_broadcast(lambda: me.rank, lambda xs: reducers.append(1) or (sum(xs), len(xs)),
                                        timeout=T)
    check(reduced == (me.world_size * (me.world_size - 1) // 2, me.world_size), f"reduce_and_broadcast: {reduced}")
    check(len(reducers) == (1 if me.rank == 0 else 0), "reduce_and_broadcast ran fn2 off rank 0")

    # zero_first: a node's first rank writes a marker (late, after a sleep) that its others must see on entry
    key, host0 = jobkit.broadcast_object((uuid.uuid4().hex, me.hostname), timeout=T)
    where = os.path.join(tempfile.gettempdir(), f"jobkit-compat-axolotl-{key}")
    for first, name in ((me.local_rank == 0, "local"), (me.rank == 0, "global")):
        marker = f"{where}-{name}-{me.hostname}"
        with dist.zero_first(first, timeout=T):
            if first:
                time.sleep(0.2)
                open(marker, "w").close()
            elif name == "local" or me.hostname == host0:  # the global first rank writes on its node only
                check(os.path.exists(marker), f"zero_first({name}): a rank went in before its first rank left")
        dist.barrier(timeout=T)
        if first:
            os.remove(marker)

    # zero_first: ranks 0 and 1 go first and rank 1's block raises (caught): rank 1 gets its own
    # error, every other rank jobkit.PeerFailureError naming rank 1 (rank 0 on leaving, the others
    # at the with, without running their block); the next collective still pairs
    ran, outcome = False, None
    try:
        with dist.zero_first(me.rank < 2, timeout=T):
            ran = True
            if me.rank == 1:
                raise KeyError("rank 1's block raised")
    except KeyError:
        outcome = "own"
    except jobkit.PeerFailureError as e:
        outcome = "peer" if "rank 1: KeyError" in str(e) else f"peer, but it says {e}"
    want = "own" if me.rank == 1 else "peer" if me.world_size > 1 else None
    check(outcome == want, f"zero_first with a failing first rank: {outcome}, not {want}")
    check(ran == (me.rank < 2), f"zero_first with a failing first rank: the block ran={ran}")
    gathered = jobkit.all_gather_object(me.rank, timeout=T)
    check(gathered == list(range(me.world_size)), f"a collective after the failed zero_first: {gathered}")

    with dist.zero_only() as main:
        check(main == (me.rank == 0), f"zero_only() yielded {main}")
    return failures


def _accelerate_state(dist, ctx, cpu: bool) -> None:
    """The seed's state made anew (nothing on jobkit's module, which has none): accelerate's PartialState,
    a singleton that axolotl makes on first use as PartialState(timeout=...), that is with cpu=False;
    with cpu=True it is made first, as `accelerate launch --cpu` and Accelerator(cpu=True) do."""
    if not hasattr(dist, "PartialState"):
        return
    dist.PartialState._reset_state()
    dist.distributed_state = None
    if cpu:
        saved = dict(os.environ)
        try:  # accelerate asks for MASTER_ADDR on several nodes (unused: torch is initialised) and
            os.environ.setdefault("MASTER_ADDR", ctx.hosts[0])  # sets the thread count without OMP_NUM_THREADS
            os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
            dist.PartialState(cpu=True)
        finally:
            os.environ.clear()
            os.environ.update(saved)


def side_by_side(dist, check, ctx) -> None:
    """The checks both axolotl modules take (python_compat.py runs them on jobkit.compat.axolotl and on
    axolotl's own utils/distributed.py with the real accelerate), over torch's gloo group. Not run on
    the seed, because they would hang the step (read from its code): a zero_first block that raises on a first rank (that rank
    skips its barrier after the block, the others wait in theirs), gather_from_all_ranks with its default
    world_size=1 on several ranks, and gather_from_all_ranks under the state of the first part (every
    rank calls torch's gather as its destination: the others raise, rank 0 waits). Nor reduce_and_broadcast
    or compute_and_broadcast of a value that is not one number: rank 0 broadcasts a longer tensor than
    the others' one-number placeholder, and gloo aborts the processes (seen with a tuple: "op.preamble.length
    <= op.nbytes. 8 vs 4")."""
    me, n, r = ctx.me, ctx.me.world_size, ctx.me.rank
    on_0 = lambda value: value if r == 0 else None  # noqa: E731
    f32 = lambda value: int(torch.tensor(value, dtype=torch.float32).item())  # noqa: E731  the seed's squeeze

    # As axolotl makes accelerate's state on nodes without a GPU (the dev cluster's): PartialState()
    # finds no GPU and, without cpu=True, no distribution, so the seed is on one rank everywhere
    # (barrier a no-op); every rank is its "main" and runs fn, and torch's broadcast still pairs.
    if not torch.cuda.is_available():
        _accelerate_state(dist, ctx, cpu=False)
        check("is_distributed() (no GPU)", dist.is_distributed(), n > 1, seed=False)
        check("is_main_process() (no GPU)", dist.is_main_process(), r == 0, seed=True)
        ran = []
        value = dist.compute_and_broadcast(lambda: ran.append(r) or 2 ** 24 + 1)
        check("compute_and_broadcast(2**24 + 1) (no GPU): value, ran here", (value, ran),
              (2 ** 24 + 1, on_0([0]) or []), seed=(f32(2 ** 24 + 1), [r]))
        check("gather_scalar_from_all_ranks (no GPU)", dist.gather_scalar_from_all_ranks(lambda: r + 0.5, n),
              on_0([q + 0.5 for q in range(n)]), seed=[r + 0.5])
        check("reduce_and_broadcast(sum) (no GPU)", dist.reduce_and_broadcast(lambda: r, sum), n * (n - 1) // 2,
              seed=r)

    # accelerate's state for CPUs (cpu=True): distributed over torch's gloo group.
    _accelerate_state(dist, ctx, cpu=True)
    check("is_distributed()", dist.is_distributed(), n > 1)
    check("is_main_process()", dist.is_main_process(), r == 0)
    dist.barrier()
    ran = []
    value = dist.compute_and_broadcast(lambda: ran.append(r) or 2 ** 24 + 1)
    check("compute_and_broadcast(2**24 + 1): value, ran here", (value, ran), (2 ** 24 + 1, on_0([0]) or []),
          seed=(f32(2 ** 24 + 1), on_0([0]) or []))
    value = dist.compute_and_broadcast(lambda: 3.0)
    check("compute_and_broadcast(3.0)", (type(value).__name__, value), ("float", 3.0), seed=("int", 3))
    check("gather_from_all_ranks", dist.gather_from_all_ranks(lambda: r * 0.25 - 1, n),
          on_0([q * 0.25 - 1 for q in range(n)]))
    check("gather_scalar_from_all_ranks(2**30 + rank)", dist.gather_scalar_from_all_ranks(lambda: 2 ** 30 + r, n),
          on_0([2 ** 30 + q for q in range(n)]), seed=on_0([f32(2 ** 30 + q) for q in range(n)]))
    check("reduce_and_broadcast(sum)", dist.reduce_and_broadcast(lambda: r + 0.5, sum), n * n / 2)

    # zero_first(local main): a node's first rank writes a marker late; its others must see it on entry
    key = jobkit.broadcast_object(uuid.uuid4().hex)
    marker = os.path.join(tempfile.gettempdir(), f"jobkit-compat-axolotl-{key}-{me.hostname}")
    first = me.local_rank == 0
    with dist.zero_first(first):
        if first:
            time.sleep(0.2)
            open(marker, "w").close()
        seen = first or os.path.exists(marker)
    check("zero_first(local main): the first rank's block ran before the others'", seen, True)
    dist.barrier()
    if first:
        os.remove(marker)
