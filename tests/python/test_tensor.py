"""Array collectives, groups, ops and timeouts of `import jobkit` on one rank (no launcher): what
arrays are taken and how, in place; the errors raised before any communication. The reductions
across ranks are checked under mpirun/srun by tests/launched/python_tensor_check.py."""
import array
import datetime
import os
import subprocess
import sys

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import numpy as np
import pytest

import jobkit

torch = pytest.importorskip("torch")

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
          torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
OPS = ["sum", "prod", "min", "max", "avg", "band", "bor", "bxor"]


def allowed(dtype, op):
    if op in ("band", "bor", "bxor"):
        return not (dtype.is_floating_point or dtype.is_complex)
    if op == "avg":
        return dtype.is_floating_point or dtype.is_complex
    return not (dtype.is_complex and op in ("min", "max"))


def sample(dtype):
    if dtype == torch.bool:
        return torch.tensor([True, False, True])
    if dtype.is_complex:
        return torch.tensor([1 + 2j, -3.5j, 0.25], dtype=dtype)
    return torch.tensor([1, 3, 7], dtype=dtype) if not dtype.is_floating_point else torch.tensor(
        [1.5, -3.25, 1e3], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_all_reduce_in_place_every_dtype_and_op(dtype, op):
    t = sample(dtype)
    before = t.clone()
    pointer = t.data_ptr()
    if not allowed(dtype, op):
        with pytest.raises(jobkit.InvalidArgumentError, match=f"op={op} on dtype"):
            jobkit.all_reduce(t, op)
        return
    assert jobkit.all_reduce(t, op) is None
    assert t.data_ptr() == pointer and t.dtype == dtype
    assert torch.equal(t, before)  # one rank: every op leaves the values as they are


def test_empty_tensors():
    empty = torch.zeros(0)
    jobkit.all_reduce(empty)
    jobkit.broadcast(empty)
    jobkit.all_gather_into_tensor(torch.zeros(0), empty)
    assert empty.numel() == 0


def test_torch_reduce_op_strings_and_bad_ops():
    import torch.distributed as dist
    t = torch.tensor([2.0, 4.0])
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT, "Sum", "AVG", "product"):
        jobkit.all_reduce(t, op=op)
    assert t.tolist() == [2.0, 4.0]
    with pytest.raises(jobkit.InvalidArgumentError, match="op='mean'"):
        jobkit.all_reduce(t, "mean")
    with pytest.raises(jobkit.InvalidArgumentError, match="op=3"):
        jobkit.all_reduce(t, 3)


def test_numpy_and_buffers_in_place():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    jobkit.all_reduce(a, "max")
    jobkit.broadcast(a, 0)
    assert a.tolist() == [[0, 1, 2], [3, 4, 5]]
    b = bytearray(b"xyz")
    jobkit.broadcast(b, src=0)
    assert b == b"xyz"
    ints = array.array("q", [5, 6])
    jobkit.all_reduce(ints, "bor")
    assert list(ints) == [5, 6]
    with pytest.raises(jobkit.InvalidArgumentError, match="not C-contiguous"):
        jobkit.all_reduce(np.zeros((4, 4))[:, 1])
    with pytest.raises(jobkit.InvalidArgumentError, match="read-only"):
        frozen = np.zeros(3)
        frozen.flags.writeable = False
        jobkit.broadcast(frozen)
    with pytest.raises(jobkit.InvalidArgumentError, match="a CPU torch tensor, a numpy array or a writable buffer"):
        jobkit.broadcast(object())


def test_numpy_integer_scalars_stay_integers():
    big = np.int64(2 ** 62 + 1)  # not exact as a double
    result = jobkit.all_reduce(big)
    assert result == big and isinstance(result, np.int64)
    assert jobkit.all_reduce(np.float32(1.5), "max") == 1.5


def test_non_contiguous_and_device_tensors_are_refused():
    with pytest.raises(jobkit.InvalidArgumentError, match="not contiguous: pass t.contiguous"):
        jobkit.all_reduce(torch.zeros(4, 4).t())
    with pytest.raises(jobkit.InvalidArgumentError, match=r"device meta.*init_process_group\('nccl'\)"):
        jobkit.all_reduce(torch.zeros(4, device="meta"))
    with pytest.raises(jobkit.InvalidArgumentError, match="async_op=True"):
        jobkit.broadcast(torch.zeros(1), async_op=True)


def test_gathers_and_scatters_in_place():
    x = torch.arange(4, dtype=torch.bfloat16)
    out = torch.zeros(4, dtype=torch.bfloat16)
    jobkit.all_gather([out], x)
    assert torch.equal(out, x)
    flat = torch.zeros(1, 4, dtype=torch.bfloat16)
    jobkit.all_gather_into_tensor(flat, x)
    assert torch.equal(flat[0], x)
    with pytest.raises(jobkit.InvalidArgumentError, match=r"output is bfloat16\[3\], not 1 times input"):
        jobkit.all_gather_into_tensor(torch.zeros(3, dtype=torch.bfloat16), x)
    with pytest.raises(jobkit.InvalidArgumentError, match=r"tensor_list holds 2 arrays for a group of 1"):
        jobkit.all_gather([out, out], x)
    got = torch.zeros(4, dtype=torch.bfloat16)
    jobkit.gather(x, [got], dst=0)
    assert torch.equal(got, x)
    mine = torch.zeros(4, dtype=torch.bfloat16)
    jobkit.scatter(mine, [x], src=0)
    assert torch.equal(mine, x)
    with pytest.raises(jobkit.InvalidArgumentError, match=r"scatter_list\[0\] is int64\[4\] where bfloat16\[4\]"):
        jobkit.scatter(mine, [torch.zeros(4, dtype=torch.int64)], src=0)
    part = torch.zeros(4)
    jobkit.reduce_scatter(part, [torch.ones(4)], op="avg")
    assert part.tolist() == [1.0] * 4
    jobkit.reduce_scatter_tensor(part, torch.full((4,), 2.0))
    assert part.tolist() == [2.0] * 4


def test_groups_on_one_rank():
    g = jobkit.make_group([0])
    assert (g.rank(), g.size(), g.world_ranks) == (0, 1, [0])
    node = jobkit.node_group()
    assert node.world_ranks == [0]
    assert jobkit.node_leaders_group().world_ranks == [0]
    assert g.split(color=-1) is None
    half = g.split(color=0, key=5)
    assert half.world_ranks == [0]
    t = torch.tensor([3.0])
    jobkit.all_reduce(t, group=half)
    jobkit.broadcast(t, src=0, group=node)
    assert t.tolist() == [3.0]
    assert jobkit.all_reduce(7, group=g) == 7
    jobkit.barrier(group=g)
    assert jobkit.broadcast_object({"k": 1}, group=g) == {"k": 1}
    assert jobkit.all_gather_object("a", group=g) == ["a"]
    assert jobkit.gather_object(1, group=g) == [1]
    assert jobkit.scatter_object(["s"], group=g) == "s"
    assert jobkit.compute_and_broadcast(lambda: "c", group=g) == "c"
    assert jobkit.gather_from_all_ranks(lambda: 4, group=g) == [4]
    assert jobkit.reduce_and_broadcast(lambda: 2, lambda parts: sum(parts) + 1, group=g) == 3
    with pytest.raises(KeyError, match="raised here"):
        jobkit.compute_and_broadcast(lambda: {}["raised here"], group=jobkit.make_group([0]))
    with pytest.raises(jobkit.InvalidArgumentError, match="src=1 is not a world rank"):
        jobkit.broadcast(t, src=1, group=g)
    with pytest.raises(jobkit.InvalidArgumentError, match="group='node'"):
        jobkit.barrier(group="node")


def test_timeouts_take_timedelta_and_seconds():
    t = torch.ones(2)
    jobkit.all_reduce(t, timeout=datetime.timedelta(seconds=30))
    jobkit.barrier(timeout=2)
    jobkit.broadcast(t, timeout=1.5)
    for bad in (datetime.timedelta(0), -1, float("nan"), "10", True):
        with pytest.raises(jobkit.InvalidArgumentError, match=r"timeout="):
            jobkit.all_reduce(t, timeout=bad)


def test_jobkit_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import jobkit, numpy\n"
            "a = numpy.ones(3); jobkit.all_reduce(a, 'sum'); print(a.sum(), 'torch' in sys.modules and "
            "sys.modules['torch'] is not None)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMIX_", "OMPI_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["3.0", "False"]
