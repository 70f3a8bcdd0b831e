"""jobkit.compat.olmo_core on one rank without a launcher: OLMo-core's names, signatures and
defaults, each function's single-process behaviour, argument errors, and torch.distributed's path
after init_distributed("gloo")."""
import datetime
import inspect
import os
import types

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import pytest

import jobkit
from jobkit.compat import olmo_core as du

PAGE = ["init_distributed", "validate_env_vars", "is_distributed", "barrier", "get_rank", "get_global_rank",
        "get_local_rank", "get_fs_local_rank", "get_world_size", "get_local_world_size", "get_num_nodes",
        "synchronize_value", "synchronize_flag", "all_reduce_value", "broadcast_object", "all_gather",
        "all_gather_object", "get_mesh_coordinates", "backend_supports_cuda", "backend_supports_cpu",
        "do_n_at_a_time"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """The variables these functions read or init_distributed sets: unset in each test, restored after."""
    for name in ("FS_LOCAL_RANK", "OLMO_SHARED_FS", "NUM_NODES", "TORCH_NCCL_AVOID_RECORD_STREAMS",
                 "TORCH_DIST_INIT_BARRIER", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "RANK", "LOCAL_RANK",
                 "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(du, "_probed_fs_local_rank", None)


class FakeGpuTensor:
    """A tensor on a GPU, as the route sees it: a torch object with a device of type cuda."""
    device = types.SimpleNamespace(type="cuda")

    def to(self, device):
        return self


FakeGpuTensor.__module__ = "torch"


def signature(fn):
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values()]


def test_every_function_of_the_page_with_the_seeds_signature():
    assert sorted(du.__all__) == sorted(PAGE + ["scatter_object"])
    for name in du.__all__:
        assert getattr(du, name).__doc__, name
    empty, kw, pos = inspect.Parameter.empty, "KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD"
    assert signature(du.init_distributed) == [
        ("backend", pos, "nccl"), ("timeout", pos, datetime.timedelta(seconds=1800)), ("shared_filesytem", pos, True),
        ("kwargs", "VAR_KEYWORD", empty)]
    assert signature(du.synchronize_value) == [("value", pos, empty), ("device", pos, empty), ("src", pos, 0),
                                               ("group", pos, None)]
    assert signature(du.all_reduce_value) == [("value", pos, empty), ("device", pos, empty), ("op", pos, "sum"),
                                              ("group", pos, None)]
    assert signature(du.do_n_at_a_time) == [("f", pos, empty), ("n", kw, None), ("process_group", kw, None),
                                            ("world_size", kw, None), ("local_rank", kw, None)]
    assert signature(du.get_global_rank) == [("group_rank", pos, empty), ("group", pos, None)]
    assert signature(du.get_mesh_coordinates) == [("mesh", pos, empty), ("rank", pos, None)]


def test_identity_getters_on_one_rank():
    assert (du.get_rank(), du.get_world_size(), du.get_local_rank(), du.get_local_world_size(), du.get_num_nodes()) \
        == (0, 1, 0, 1, 1)
    assert du.is_distributed() is False
    assert du.get_global_rank(0) == 0
    alone = jobkit.make_group([0])
    assert (du.get_rank(alone), du.get_world_size(alone), du.get_global_rank(0, alone)) == (0, 1, 0)
    for bad in (1, -1, "0"):
        with pytest.raises(jobkit.InvalidArgumentError, match=f"group_rank={bad!r}"):
            du.get_global_rank(bad)
    with pytest.raises(jobkit.InvalidArgumentError, match="group='world'"):
        du.get_rank("world")


def test_getters_read_no_identity_variables(monkeypatch):
    monkeypatch.setenv("NUM_NODES", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert (du.get_num_nodes(), du.get_local_world_size()) == (1, 1)


def test_fs_local_rank_overrides(monkeypatch):
    assert du.get_fs_local_rank() == 0
    monkeypatch.setenv("OLMO_SHARED_FS", "1")
    assert du.get_fs_local_rank() == 0
    monkeypatch.setenv("FS_LOCAL_RANK", "3")
    assert du.get_fs_local_rank() == 3
    monkeypatch.setenv("FS_LOCAL_RANK", "x")
    with pytest.raises(jobkit.InvalidEnvironmentError, match="FS_LOCAL_RANK='x'"):
        du.get_fs_local_rank()


def test_validate_env_vars(monkeypatch):
    du.validate_env_vars()  # nothing set: nothing to disagree
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    du.validate_env_vars()
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("NUM_NODES", "2")
    with pytest.raises(jobkit.InvalidEnvironmentError, match=r"RANK='2' \(jobkit: 0\), NUM_NODES='2' \(jobkit: 1\)"):
        du.validate_env_vars()


def test_barrier_and_objects_on_one_rank():
    du.barrier()
    du.barrier(jobkit.make_group([0]))
    with pytest.raises(jobkit.InvalidArgumentError, match="group=3"):
        du.barrier(3)
    obj = {"a": [1, 2]}
    assert du.broadcast_object(obj) is obj and du.scatter_object(obj) is obj
    assert du.all_gather_object(obj) == [obj]
    with pytest.raises(jobkit.InvalidArgumentError):
        du.broadcast_object(obj, src=1)


def test_value_types_on_one_rank():
    """The types that come back; the values' exactness across ranks: tests/launched/compat_olmo_core.py."""
    assert du.synchronize_flag(True, "cpu") is True and du.synchronize_flag(False, "cpu") is False
    assert du.all_reduce_value(True, "cpu") is True
    assert type(du.all_reduce_value(3, "cpu", "avg")) is float
    with pytest.raises(jobkit.InvalidArgumentError, match="op='mean'"):
        du.all_reduce_value(1, "cpu", "mean")


def test_tensors_on_one_rank():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    t = torch.tensor([1.5, 2.5])
    assert du.synchronize_value(t, "cpu") is t
    assert du.all_reduce_value(t, "cpu", dist.ReduceOp.MAX) is t
    assert du.all_gather(t) == [t]
    group = torch.device("cpu")  # a torch object as group=, as a ProcessGroup would be
    du.barrier(group)  # one rank before init_distributed: nothing to do, as OLMo-core
    assert (du.get_rank(group), du.get_world_size(group), du.all_reduce_value(True, "cpu", group=group)) == (0, 1, True)
    fake = FakeGpuTensor()
    assert du.all_gather(fake) == [fake] and du.all_reduce_value(fake, "cuda") is fake
    alone = jobkit.make_group([0])
    for call in (lambda: du.all_gather(fake, alone), lambda: du.synchronize_value(fake, "cuda", group=alone),
                 lambda: du.all_reduce_value(fake, "cuda", group=alone)):
        with pytest.raises(jobkit.InvalidArgumentError, match="group=jobkit.Group.* with a tensor on .*cuda"):
            call()


def test_torch_route_on_several_ranks_needs_init_distributed(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(jobkit, "world_size", lambda: 2)  # as the route sees two ranks
    with pytest.raises(jobkit.InvalidArgumentError, match="barrier: group=device.* needs torch.distributed"):
        du.barrier(torch.device("cpu"))


def test_mesh_coordinates():
    grid = [[0, 1, 2], [3, 4, 5]]
    assert du.get_mesh_coordinates(grid, 4) == [1, 1]
    assert du.get_mesh_coordinates(grid) == [0, 0]  # this rank
    assert du.get_mesh_coordinates(grid, 9) is None
    torch = pytest.importorskip("torch")

    class Mesh:  # torch's DeviceMesh keeps its grid as .mesh
        mesh = torch.arange(8).reshape(2, 2, 2)

    assert du.get_mesh_coordinates(Mesh(), 6) == [1, 1, 0]
    with pytest.raises(jobkit.InvalidArgumentError, match="rank 1 is in the mesh 2 times"):
        du.get_mesh_coordinates([[0, 1], [1, 2]], 1)


def test_backends():
    assert du.backend_supports_cuda("nccl") and du.backend_supports_cuda("cpu:gloo,cuda:nccl")
    assert not du.backend_supports_cuda("gloo")
    assert du.backend_supports_cpu("gloo") and du.backend_supports_cpu("mpi") and not du.backend_supports_cpu("nccl")
    assert du.backend_supports_cpu() is True
    torch = pytest.importorskip("torch")
    assert du.backend_supports_cuda() == torch.cuda.is_available()
    with pytest.raises(jobkit.InvalidArgumentError, match="backend=1"):
        du.backend_supports_cuda(1)


def test_do_n_at_a_time():
    calls = []
    assert du.do_n_at_a_time(lambda: calls.append(1) or "done") == "done"
    assert du.do_n_at_a_time(lambda: calls.append(2) or 2, n=3) == 2
    assert du.do_n_at_a_time(lambda: calls.append(3) or 3, process_group=jobkit.make_group([0])) == 3
    assert du.do_n_at_a_time(lambda: calls.append(4) or 4, world_size=1, local_rank=0) == 4
    assert calls == [1, 2, 3, 4]
    for bad in (0, -2, 1.5):
        with pytest.raises(jobkit.InvalidArgumentError, match=f"n={bad!r}"):
            du.do_n_at_a_time(lambda: None, n=bad)
    assert calls == [1, 2, 3, 4]


def test_init_distributed_gloo_and_torch_groups():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    du.init_distributed("gloo", timeout=datetime.timedelta(seconds=60), shared_filesytem=False)
    try:
        assert du.is_distributed() and du.backend_supports_cpu() and not du.backend_supports_cuda()
        assert os.environ["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1" and "OLMO_SHARED_FS" not in os.environ
        assert du.get_fs_local_rank() == 0 and du._probed_fs_local_rank == 0
        du.init_distributed("gloo")  # initialised already: kept
        assert os.environ["OLMO_SHARED_FS"] == "1"
        with pytest.raises(jobkit.InvalidArgumentError, match="backend 'gloo'"):
            du.init_distributed("nccl")
        world = dist.group.WORLD
        assert (du.get_rank(world), du.get_world_size(world), du.get_global_rank(0, world)) == (0, 1, 0)
        du.barrier(world)
        assert du.broadcast_object("x", 0, world) == "x" and du.all_gather_object(5, world) == [5]
        assert du.synchronize_value(0.25, "cpu", 0, world) == 0.25
        assert du.all_reduce_value(0.1, "cpu", group=world) == 0.1  # float64 through the tensor
        assert du.all_reduce_value(3, "cpu", "prod", world) == 3 and du.all_reduce_value(2, "cpu", "Max", world) == 2
        assert du.all_reduce_value(True, "cpu", "max", world) is True  # gloo takes no bool tensor: int64
        assert du.all_reduce_value(False, "cpu", group=world) is False
        average = du.all_reduce_value(3, "cpu", "avg", world)
        assert average == 3.0 and type(average) is float  # as on jobkit's route
        assert du.all_reduce_value(2**60 + 1, "cpu", group=world) == 2**60 + 1  # int64, not float64
        with pytest.raises(jobkit.InvalidArgumentError, match="op='mean'"):
            du.all_reduce_value(1, "cpu", "mean", world)
        t = torch.arange(3)
        assert du.all_reduce_value(t, "cpu", group=world) is t
        assert [x.tolist() for x in du.all_gather(t, world)] == [[0, 1, 2]]
        assert du.do_n_at_a_time(lambda: "ran", process_group=world) == "ran"
    finally:
        dist.destroy_process_group()
