"""jobkit.compat.composer without a launcher: composer.utils.dist's signatures and single-rank
behaviour, argument errors, and the torch.distributed route after initialize_dist."""
import inspect
import os
import types

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import pytest
import torch
import torch.distributed

import jobkit
from jobkit.compat import composer as dist
from jobkit.compat._route import torch_op


class FakeProcessGroup:
    """A torch ProcessGroup, as the route sees it (an object of torch's)."""


FakeProcessGroup.__module__ = "torch.distributed"

SIGNATURES = {
    "all_gather": "(tensor, group=None)",
    "all_gather_object": "(obj, group=None)",
    "all_reduce": "(tensor, reduce_operation='SUM', group=None)",
    "barrier": "(group=None)",
    "broadcast": "(tensor, src, group=None)",
    "broadcast_object_list": "(object_list, src=0, group=None)",
    "get_global_rank": "(group=None)",
    "get_local_rank": "()",
    "get_local_world_size": "()",
    "get_node_rank": "()",
    "get_sampler": "(dataset, *, drop_last=False, shuffle=False, num_replicas=None, rank=None)",
    "get_world_size": "()",
    "initialize_dist": "(device=None, timeout=300.0)",
    "is_available": "()",
    "is_initialized": "()",
}


def untyped(function):
    """The signature without annotations, as composer's documentation writes it."""
    parameters = [p.replace(annotation=inspect.Parameter.empty)
                  for p in inspect.signature(function).parameters.values()]
    return str(inspect.Signature(parameters))


def test_names_and_signatures():
    assert sorted(dist.__all__) == sorted(SIGNATURES)
    for name, signature in SIGNATURES.items():
        assert untyped(getattr(dist, name)) == signature, name
        assert getattr(dist, name).__doc__, name


def test_identity_defaults():
    assert (dist.get_global_rank(), dist.get_world_size(), dist.get_local_rank(), dist.get_local_world_size(),
            dist.get_node_rank()) == (0, 1, 0, 1, 0)
    assert dist.get_global_rank(jobkit.node_group()) == 0


def test_identity_ignores_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert (dist.get_global_rank(), dist.get_world_size(), dist.get_local_world_size()) == (0, 1, 1)


def test_collectives_on_one_rank():
    dist.barrier()
    dist.barrier(jobkit.node_group())
    t = torch.tensor([1.5, -2.0])
    dist.all_reduce(t, "product")  # the values per op: tests/launched/compat_composer.py
    dist.broadcast(t, 0)
    dist.broadcast(t, src=0, group=jobkit.node_group())
    assert t.tolist() == [1.5, -2.0]
    gathered = dist.all_gather(torch.arange(4, dtype=torch.int32).reshape(2, 2))
    assert len(gathered) == 1 and gathered[0].dtype == torch.int32 and gathered[0].tolist() == [[0, 1], [2, 3]]
    assert dist.all_gather_object({"a": (1, 2)}) == [{"a": (1, 2)}]
    assert dist.all_gather_object(7, group=jobkit.node_group()) == [7]


def test_all_gather_of_a_tensor_that_requires_grad():
    t = torch.ones(3, requires_grad=True)
    (copy,) = dist.all_gather(t)
    assert copy.tolist() == [1.0, 1.0, 1.0] and copy is not t


def test_all_gather_of_a_transposed_tensor():
    t = torch.arange(6).reshape(2, 3).t()
    (copy,) = dist.all_gather(t)
    assert copy.is_contiguous() and copy.tolist() == [[0, 3], [1, 4], [2, 5]]


def test_op_names_as_torch_reduce_ops():
    ops = torch.distributed.ReduceOp
    for names, op in ((("SUM", "sum"), ops.SUM), (("PRODUCT", "prod", "Product"), ops.PRODUCT),
                      (("MIN", "min"), ops.MIN), (("MAX", "Max"), ops.MAX), (("AVG", "average"), ops.AVG),
                      (("BAND",), ops.BAND), (("bor",), ops.BOR), (("BXOR",), ops.BXOR)):
        for name in names:
            assert torch_op(name) == op, name
    assert torch_op(ops.MAX) is ops.MAX
    with pytest.raises(jobkit.InvalidArgumentError, match="op='MEAN'"):
        torch_op("MEAN")


def test_broadcast_object_list_fills_the_list_in_place():
    objects = [1, "two", {"three": 3}]
    same = objects
    assert dist.broadcast_object_list(objects) is None
    assert objects is same and objects == [1, "two", {"three": 3}]
    dist.broadcast_object_list(objects, src=0, group=jobkit.node_group())
    assert objects == [1, "two", {"three": 3}]


def test_argument_errors():
    t = torch.zeros(2)
    with pytest.raises(jobkit.InvalidArgumentError, match="reduce_operation='MEAN'"):
        dist.all_reduce(t, "MEAN")
    with pytest.raises(jobkit.InvalidArgumentError, match="reduce_operation=None"):
        dist.all_reduce(t, None)
    with pytest.raises(jobkit.InvalidArgumentError, match="tensor=3"):
        dist.all_reduce(3)
    with pytest.raises(jobkit.InvalidArgumentError, match="object_list=\\(1, 2\\)"):
        dist.broadcast_object_list((1, 2))
    with pytest.raises(jobkit.InvalidArgumentError, match="src=1"):
        dist.broadcast(t, 1, group=jobkit.node_group())
    with pytest.raises(jobkit.InvalidArgumentError, match="not contiguous"):
        dist.all_reduce(torch.zeros(2, 2).t())
    with pytest.raises(TypeError):
        dist.broadcast(t)  # src has no default, as in composer


def test_gpu_tensors_and_torch_groups_are_no_ops_on_one_rank_without_torch_distributed():
    assert not torch.distributed.is_initialized()
    fake = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))  # a tensor on a GPU, as the route sees it
    group = FakeProcessGroup()
    dist.all_reduce(fake)
    dist.broadcast(fake, 0)
    assert dist.all_gather(fake) == [fake]
    dist.barrier(group)
    assert dist.all_gather_object("x", group) == ["x"]
    objects = [1]
    dist.broadcast_object_list(objects, 0, group)
    assert objects == [1]
    with pytest.raises(jobkit.InvalidArgumentError, match="group=jobkit.Group.* with a tensor on .*cuda"):
        dist.all_reduce(fake, group=jobkit.node_group())
    with pytest.raises(jobkit.InvalidArgumentError, match="barrier: group=<object"):
        dist.barrier(object())  # neither a jobkit.Group nor torch's


def test_torch_route_on_several_ranks_needs_torch_distributed(monkeypatch):
    monkeypatch.setattr(jobkit, "world_size", lambda: 2)  # as the route sees two ranks
    fake = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))
    with pytest.raises(jobkit.InvalidArgumentError, match="a tensor on .*cuda.* needs torch.distributed"):
        dist.all_reduce(fake)
    with pytest.raises(jobkit.InvalidArgumentError, match="group=<.*FakeProcessGroup.* needs torch.distributed"):
        dist.barrier(FakeProcessGroup())


def test_get_sampler():
    sampler = dist.get_sampler(list(range(10)))
    assert isinstance(sampler, torch.utils.data.DistributedSampler)
    assert (sampler.num_replicas, sampler.rank, sampler.shuffle, sampler.drop_last) == (1, 0, False, False)
    assert list(sampler) == list(range(10))
    second = dist.get_sampler(list(range(10)), num_replicas=3, rank=1, drop_last=True, shuffle=True)
    assert (second.num_replicas, second.rank, second.shuffle, second.drop_last) == (3, 1, True, True)
    assert len(list(second)) == 3
    with pytest.raises(jobkit.InvalidArgumentError, match="rank=2"):
        dist.get_sampler(list(range(10)), num_replicas=2, rank=2)
    with pytest.raises(jobkit.InvalidArgumentError, match="num_replicas=0"):
        dist.get_sampler(list(range(10)), num_replicas=0)
    with pytest.raises(TypeError):
        dist.get_sampler(list(range(10)), True)  # keyword-only, as in composer


def test_is_available_and_initialized():
    assert dist.is_available() is True
    assert dist.is_initialized() is False


def test_initialize_dist_argument_errors():
    with pytest.raises(jobkit.InvalidArgumentError, match="device='tpu'"):
        dist.initialize_dist("tpu")
    with pytest.raises(jobkit.InvalidArgumentError, match="device=42"):
        dist.initialize_dist(42)
    with pytest.raises(jobkit.InvalidArgumentError, match="timeout=-1"):
        dist.initialize_dist("cpu", timeout=-1)
    assert not torch.distributed.is_initialized()


def test_initialize_dist_and_the_torch_route():
    """Last: it leaves torch.distributed initialised until its end."""
    device = types.SimpleNamespace(dist_backend="gloo")  # a composer Device, as initialize_dist sees it
    try:
        dist.initialize_dist(device, timeout=60)
        assert dist.is_initialized() and torch.distributed.get_backend() == "gloo"
        assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_WORLD_SIZE"]) == ("0", "1", "1")
        dist.initialize_dist("cpu")  # the same backend: returns
        with pytest.raises(jobkit.InvalidArgumentError, match="device='gpu' needs backend nccl"):
            dist.initialize_dist("gpu")
        world = torch.distributed.group.WORLD
        assert dist.get_global_rank(world) == 0
        t = torch.tensor([2.0, 3.0])
        dist.all_reduce(t, "PRODUCT", group=world)
        dist.broadcast(t, 0, group=world)
        assert t.tolist() == [2.0, 3.0]
        assert [g.tolist() for g in dist.all_gather(t, group=world)] == [[2.0, 3.0]]
        assert dist.all_gather_object({"k": 1}, group=world) == [{"k": 1}]
        objects = ["a", None]
        dist.broadcast_object_list(objects, group=world)
        assert objects == ["a", None]
        dist.barrier(world)
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
