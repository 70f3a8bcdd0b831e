"""jobkit.compat.axolotl on every rank of a step (run by python_compat.py): each function's
multi-rank behaviour, with the expected values computed from jobkit.identity(), so that the checks
hold on any layout. Every rank makes the same collective calls in the same order."""
import os
import tempfile
import time
import uuid

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
