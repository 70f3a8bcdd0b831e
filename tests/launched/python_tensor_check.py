"""Array collectives and groups of `import jobkit` across ranks (tests/launched/python.sh, mode
tensor; on one host: mpirun -np 4 python3 python_tensor_check.py).

Every dtype and op of all_reduce, each collective, in place (the same storage after the call), a
split into evens and odds, the node group and node leaders, and mismatches of dtype, shape and op
on fresh groups (each fails that group on every member, naming both ranks and both values). Each
rank prints "tensor ok" when every check passed, and one line per mismatch it raised.
"""
import functools
import sys

import numpy as np
import torch
import torch.distributed as dist

import jobkit

failures = 0
me = jobkit.identity()
n = me.world_size

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
          torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
OPS = ["sum", "prod", "min", "max", "avg", "band", "bor", "bxor"]


def say(line):
    """One write per line, so that lines of different ranks do not interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def expect(ok, what):
    global failures
    if not ok:
        failures += 1
        say(f"rank {me.rank}: WRONG: {what}")


def allowed(dtype, op):
    if op in ("band", "bor", "bxor"):
        return not (dtype.is_floating_point or dtype.is_complex)
    if op == "avg":
        return dtype.is_floating_point or dtype.is_complex
    return not (dtype.is_complex and op in ("min", "max"))


def value(rank, dtype, count=5):
    """Rank `rank`'s input: small integers (1 to 3), exact in every dtype and in their products."""
    base = (torch.arange(count) + rank) % 3 + 1
    if dtype == torch.bool:
        return base == 2
    if dtype.is_complex:
        return (base + 1j * (base % 2)).to(dtype)
    return base.to(dtype)


def wide(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else torch.int64 if not (
        dtype.is_floating_point or dtype.is_complex or dtype == torch.bool) else dtype


def expected(ranks, dtype, op):
    """The reduction in rank order, in float32 for 16-bit floats, rounded once."""
    bools = dtype == torch.bool
    combine = {"sum": (lambda a, b: a | b) if bools else (lambda a, b: a + b),
               "avg": lambda a, b: a + b,
               "prod": (lambda a, b: a & b) if bools else (lambda a, b: a * b),
               "min": (lambda a, b: a & b) if bools else torch.minimum,
               "max": (lambda a, b: a | b) if bools else torch.maximum,
               "band": lambda a, b: a & b, "bor": lambda a, b: a | b, "bxor": lambda a, b: a ^ b}[op]
    total = functools.reduce(combine, [value(r, dtype).to(wide(dtype)) for r in ranks])
    if op == "avg":
        # Each part divided by the count, correctly rounded (as jobkit does): torch 2.6 divides a
        # complex tensor by a number as complex division, which may round the last bit otherwise.
        k = len(ranks)
        total = torch.complex(total.real / k, total.imag / k) if dtype.is_complex else total / k
    return total.to(dtype)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def all_reduce_every_dtype_and_op(group=None):
    ranks = list(range(n)) if group is None else group.world_ranks
    for dtype in DTYPES:
        for op in OPS:
            if not allowed(dtype, op):
                continue
            t = value(me.rank, dtype)
            pointer = t.data_ptr()
            jobkit.all_reduce(t, op, group=group)
            want = expected(ranks, dtype, op)
            expect(same(t, want) and t.data_ptr() == pointer, f"all_reduce {dtype} {op} over {ranks}: {t} != {want}")
    t = value(me.rank, torch.float32)
    jobkit.all_reduce(t, dist.ReduceOp.MAX, group=group)
    expect(same(t, expected(ranks, torch.float32, "max")), "all_reduce with torch's ReduceOp.MAX")
    a = value(me.rank, torch.int32).numpy()
    jobkit.all_reduce(a, "SUM", group=group)
    expect(a.tolist() == expected(ranks, torch.int32, "sum").tolist(), "all_reduce of a numpy array")


def each_collective(dtype):
    last = n - 1
    t = value(me.rank, dtype)
    pointer = t.data_ptr()
    jobkit.broadcast(t, src=last)
    expect(same(t, value(last, dtype)) and t.data_ptr() == pointer, f"broadcast {dtype}")

    outs = [torch.zeros(5, dtype=dtype) for _ in range(n)]
    pointers = [o.data_ptr() for o in outs]
    jobkit.all_gather(outs, value(me.rank, dtype))
    expect(all(same(outs[r], value(r, dtype)) for r in range(n)) and [o.data_ptr() for o in outs] == pointers,
           f"all_gather {dtype}")

    uneven = [torch.zeros(r + 1, dtype=dtype) for r in range(n)]  # rank r sends r + 1 elements
    jobkit.all_gather(uneven, value(me.rank, dtype, me.rank + 1))
    expect(all(same(uneven[r], value(r, dtype, r + 1)) for r in range(n)), f"all_gather of sizes per rank {dtype}")

    flat = torch.zeros(n, 5, dtype=dtype)
    jobkit.all_gather_into_tensor(flat, value(me.rank, dtype))
    expect(all(same(flat[r], value(r, dtype)) for r in range(n)), f"all_gather_into_tensor {dtype}")

    dst = 1 % n
    gathered = [torch.zeros(5, dtype=dtype) for _ in range(n)] if me.rank == dst else None
    jobkit.gather(value(me.rank, dtype), gathered, dst=dst)
    if me.rank == dst:
        expect(all(same(gathered[r], value(r, dtype)) for r in range(n)), f"gather {dtype}")

    mine = torch.zeros(5, dtype=dtype)
    parts = [value(r + 10, dtype) for r in range(n)] if me.rank == 0 else None
    jobkit.scatter(mine, parts, src=0)
    expect(same(mine, value(me.rank + 10, dtype)), f"scatter {dtype}")

    if dtype.is_complex or dtype == torch.bool:
        return
    out = torch.zeros(5, dtype=dtype)
    jobkit.reduce_scatter(out, [value(me.rank + r, dtype) for r in range(n)], op="max")
    want = functools.reduce(torch.maximum, [value(r + me.rank, dtype) for r in range(n)])
    expect(same(out, want), f"reduce_scatter {dtype}")
    jobkit.reduce_scatter_tensor(out, torch.cat([value(me.rank + r, dtype) for r in range(n)]), op="min")
    want = functools.reduce(torch.minimum, [value(r + me.rank, dtype) for r in range(n)])
    expect(same(out, want), f"reduce_scatter_tensor {dtype}")


def groups():
    world = jobkit.make_group(list(range(n)))
    half = world.split(color=me.rank % 2, key=-me.rank)  # reversed order within each half
    members = sorted((r for r in range(n) if r % 2 == me.rank % 2), reverse=True)
    expect(half.world_ranks == members and half.rank() == members.index(me.rank), f"split: {half.world_ranks}")
    all_reduce_every_dtype_and_op(half)
    t = value(me.rank, torch.bfloat16)
    jobkit.broadcast(t, src=members[-1], group=half)
    expect(same(t, value(members[-1], torch.bfloat16)), "broadcast in a split")
    expect(jobkit.all_gather_object(me.rank, group=half) == members, "all_gather_object in a split")
    expect(jobkit.all_reduce(1, group=half) == len(members), "all_reduce of a number in a split")
    expect(jobkit.compute_and_broadcast(lambda: me.rank * 10, src=members[0], group=half) == members[0] * 10,
           "compute_and_broadcast in a split")
    expect(jobkit.reduce_and_broadcast(lambda: me.rank, lambda parts: parts, group=half) == members,
           "reduce_and_broadcast in a split")
    gathered = jobkit.gather_from_all_ranks(lambda: me.rank, dst=members[-1], group=half)
    expect(gathered == (members if me.rank == members[-1] else None), "gather_from_all_ranks in a split")
    jobkit.barrier(group=half)

    node = jobkit.node_group()
    ones = torch.ones(3, dtype=torch.int64)
    jobkit.all_reduce(ones, group=node)
    expect(ones.tolist() == [me.local_world_size] * 3 and node.size() == me.local_world_size, "node group")
    if me.local_rank == 0:
        leaders = jobkit.node_leaders_group()
        count = torch.ones(1)
        jobkit.all_reduce(count, "sum", group=leaders)
        expect(count.item() == me.num_nodes and leaders.size() == me.num_nodes, "node leaders group")
    jobkit.barrier()


def mismatch(what, make):
    """make() -> the call; on a fresh group of every rank, which the mismatch leaves unusable."""
    group = jobkit.make_group(list(range(n)))
    try:
        make(group)
    except jobkit.Error as e:
        say(f"rank {me.rank}: {what} mismatch: {type(e).__name__}: {e}")
        return
    expect(False, f"the {what} mismatch passed")


def rejections():
    try:
        jobkit.all_reduce(torch.zeros(2, device="meta"))
        expect(False, "a tensor on device meta was taken")
    except jobkit.InvalidArgumentError as e:
        expect("init_process_group('nccl')" in str(e), f"the device error says what to use: {e}")


def main():
    all_reduce_every_dtype_and_op()
    for dtype in DTYPES:
        each_collective(dtype)
    b = bytearray(b"abcd" if me.rank == 0 else b"....")
    jobkit.broadcast(b, src=0)
    expect(b == b"abcd", "broadcast of a bytearray")
    for kind in (np.uint16, np.uint32, np.uint64):  # dtypes torch 1.13 lacks
        bits = np.full(3, 1 << me.rank, dtype=kind)
        jobkit.all_reduce(bits, "bor")
        total = np.full(3, me.rank + 1, dtype=kind)
        jobkit.all_reduce(total, "sum")
        expect(bits.tolist() == [(1 << n) - 1] * 3 and total.tolist() == [n * (n + 1) // 2] * 3,
               f"all_reduce of numpy {kind.__name__}")
    arr = np.full(4, me.rank, dtype=np.float64)
    jobkit.broadcast(arr, src=n - 1)
    expect(arr.tolist() == [n - 1] * 4, "broadcast of a numpy array")
    groups()
    rejections()
    say(f"rank {me.rank}: tensor {'ok' if failures == 0 else 'FAILED'}")
    jobkit.barrier()
    # Mismatches: rank 1 differs from the others.
    odd = me.rank == 1
    mismatch("dtype", lambda g: jobkit.all_reduce(torch.ones(4, dtype=torch.int64 if odd else torch.float32), group=g))
    mismatch("shape", lambda g: jobkit.broadcast(torch.ones((2, 2) if odd else (4,)), src=0, group=g))
    mismatch("op", lambda g: jobkit.all_reduce(torch.ones(4), "max" if odd else "sum", group=g))
    jobkit.barrier()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
