"""jobkit.torch on GPU nodes and the package's native feel, without a launcher: the device rule by
its inputs (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS and the devices each task sees), the variables
and idempotence of init_process_group, rank_zero_*, install_logging, and `from jobkit import *`."""
import builtins
import dataclasses
import datetime
import io
import logging
import os
import warnings

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_", "CUDA_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import pytest

import jobkit

IDENTITY_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                      "JOBKIT_TORCH_VARIABLES")


@pytest.fixture(autouse=True)
def no_identity_variables():
    """init_process_group sets them in os.environ: each test starts and ends without them."""
    for name in IDENTITY_VARIABLES:
        os.environ.pop(name, None)
    yield
    for name in IDENTITY_VARIABLES:
        os.environ.pop(name, None)


def as_rank(monkeypatch, **fields):
    """This process seen as another rank (the identity's fields replaced)."""
    monkeypatch.setattr(jobkit._identity, "_cached", dataclasses.replace(jobkit.identity(), **fields))


def seen_count():
    """How many devices CUDA shows a task: the entries of CUDA_VISIBLE_DEVICES (this test's
    nodes have 4 GPUs: unset shows all 4)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return 4 if visible is None else len([d for d in visible.split(",") if d])


# (what Slurm did, SLURM_STEP_GPUS, each local rank's CUDA_VISIBLE_DEVICES, the devices chosen)
SLURM_LAYOUTS = [
    ("--gpus-per-task=1, devices constrained", "0,1,2,3", ["0", "0", "0", "0"], ["cuda:0"] * 4),
    ("--gpus-per-task=1, not constrained", "0,1,2,3", ["0", "1", "2", "3"], ["cuda:0"] * 4),
    ("--gpus-per-node=4, shared by the tasks", "0,1,2,3", ["0,1,2,3"] * 4, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]),
    ("no GPU binding, 4 GPUs visible", None, [None] * 4, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]),
    ("no GPU asked for", None, [""] * 4, ["cpu"] * 4),
]


@pytest.mark.parametrize("layout", SLURM_LAYOUTS, ids=[layout[0] for layout in SLURM_LAYOUTS])
def test_device_rule_under_slurm_layouts(monkeypatch, layout):
    _, step_gpus, visible, expected = layout
    if step_gpus is not None:
        monkeypatch.setenv("SLURM_STEP_GPUS", step_gpus)
    for local_rank in range(4):
        as_rank(monkeypatch, local_rank=local_rank, local_world_size=4)
        if visible[local_rank] is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible[local_rank])
        assert jobkit.select_device(seen_count()) == expected[local_rank]


def test_device_rule_refuses_fewer_devices_than_ranks(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("SLURM_STEP_GPUS", "4,5")
    as_rank(monkeypatch, local_rank=1, local_world_size=4)
    with pytest.raises(jobkit.InvalidEnvironmentError) as raised:
        jobkit.select_device(seen_count())
    message = str(raised.value)
    assert "(local rank 1 of 4) sees 2 CUDA devices (CUDA_VISIBLE_DEVICES='0,1', SLURM_STEP_GPUS='4,5')" in message
    assert "--gpus-per-task=1" in message
    assert jobkit.select_device(8, local_rank=3, local_world_size=4) == "cuda:3"  # explicit arguments win
    with pytest.raises(jobkit.InvalidArgumentError, match="visible_count=-1"):
        jobkit.select_device(-1)


def test_torch_device_counts_with_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    import jobkit.torch

    as_rank(monkeypatch, local_rank=2, local_world_size=4)
    for count, expected in ((0, "cpu"), (1, "cuda:0"), (4, "cuda:2")):
        monkeypatch.setattr(torch.cuda, "device_count", lambda count=count: count)
        assert jobkit.torch.device() == torch.device(expected)
        assert jobkit.select_device() == expected


def test_nccl_init_sets_the_bound_gpu_on_every_local_rank(monkeypatch):
    """The issue: under --gpus-per-task=1 every task sees one device, and local rank 1 or more
    must use cuda:0, not cuda:<local rank>."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    import jobkit.torch

    chosen, initialised = [], []
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", seen_count)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: initialised.append((backend, kwargs)))
    monkeypatch.setattr(jobkit.torch, "_make_store", lambda store, me, timeout: f"store({timeout})")
    monkeypatch.setenv("SLURM_STEP_GPUS", "0,1,2,3")
    for local_rank in range(4):
        as_rank(monkeypatch, local_rank=local_rank, local_world_size=4)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(local_rank))
        assert jobkit.torch.init_process_group("nccl", timeout=12.5) == "store(0:00:12.500000)"
        assert os.environ["LOCAL_RANK"] == str(local_rank) and os.environ["LOCAL_WORLD_SIZE"] == "4"
        for name in IDENTITY_VARIABLES:  # the next "rank" runs in this same process
            del os.environ[name]
    assert chosen == [0, 0, 0, 0]
    assert [backend for backend, _ in initialised] == ["nccl"] * 4
    assert initialised[0][1]["timeout"].total_seconds() == 12.5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(jobkit.CudaError, match="sees no CUDA device"):
        jobkit.torch.init_process_group("nccl")


BAD_TIMEOUTS = [0, -1, -0.5, float("nan"), float("inf"), True, "5", [5], datetime.timedelta(0),
                datetime.timedelta(seconds=-1)]
GOOD_TIMEOUTS = [1, 0.25, 1e9, datetime.timedelta(seconds=90), datetime.timedelta(microseconds=1)]


def reason(error, value):
    """What an InvalidArgumentError says of `timeout=value`, without the caller's name and the
    context jobkit adds (rank, host, call site)."""
    text = str(error)
    named = f"timeout={value!r}: "
    assert named in text, text
    return text.split(named, 1)[1].split(" (on ", 1)[0]


@pytest.mark.parametrize("bad", BAD_TIMEOUTS, ids=repr)
def test_one_timeout_rule_for_the_collectives_and_init_process_group(bad):
    """jobkit's calls and jobkit.torch.init_process_group read a timeout by the same rule
    (jobkit/_timeout.py): the same values refused with the same words, the same values taken."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    import jobkit.torch

    with pytest.raises(jobkit.InvalidArgumentError) as collective:
        jobkit.barrier(timeout=bad)
    with pytest.raises(jobkit.InvalidArgumentError) as torch_side:
        jobkit.torch.init_process_group("gloo", timeout=bad)
    assert not dist.is_initialized()
    assert "init_process_group: timeout=" in str(torch_side.value)
    assert reason(collective.value, bad) == reason(torch_side.value, bad)


def test_the_timeouts_taken_are_the_same_for_init_process_group():
    pytest.importorskip("torch")
    import jobkit.torch

    for good in GOOD_TIMEOUTS:
        span = jobkit.torch._timedelta(good)
        assert span.total_seconds() == pytest.approx(jobkit._timeout.seconds(good))
    assert jobkit.torch._timedelta(None) == datetime.timedelta(minutes=30) and jobkit._timeout.seconds(None) is None


def test_init_process_group_exports_identity_and_is_idempotent(monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    import jobkit.torch

    for name in ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(jobkit.InvalidEnvironmentError, match=r"RANK='3' \(jobkit: 0\)"):
        jobkit.torch.init_process_group("gloo")
    assert not dist.is_initialized()
    monkeypatch.setenv("RANK", "0")  # the same value is no conflict
    with pytest.raises(jobkit.InvalidArgumentError, match="timeout"):
        jobkit.torch.init_process_group("gloo", timeout=-1)
    store = jobkit.torch.init_process_group("gloo", timeout=30.0)
    try:
        me = jobkit.identity()
        assert {name: os.environ[name] for name in IDENTITY_VARIABLES} == {
            "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
            "NODE_RANK": str(me.node_rank), "GROUP_RANK": str(me.node_rank),
            "JOBKIT_TORCH_VARIABLES": f"0,0,1,1,{me.node_rank},{me.num_nodes}"}
        assert dist.get_rank() == 0 and dist.get_world_size() == 1
        assert jobkit.torch.init_process_group("gloo", timeout=30) is store  # the same, quietly
        assert jobkit.torch.init_process_group("gloo", timeout=datetime.timedelta(seconds=30)) is store
        refusal = r"other arguments: timeout=0:00:10 \(first call: 0:00:30\)$"
        with pytest.raises(jobkit.InvalidArgumentError, match=refusal):
            jobkit.torch.init_process_group("gloo", timeout=10)
        with pytest.raises(jobkit.InvalidArgumentError, match=r"backend='nccl' \(first call: 'gloo'\)"):
            jobkit.torch.init_process_group("nccl", timeout=30)
        value = torch.tensor([4.0])
        dist.all_reduce(value)
        assert value.item() == 4.0
    finally:
        dist.destroy_process_group()
    jobkit.torch.init_process_group("gloo", timeout=5)  # again after destroy_process_group
    assert dist.is_initialized()
    dist.destroy_process_group()


def test_rank_zero_only_info_and_warn(monkeypatch, caplog):
    calls = []

    @jobkit.rank_zero_only
    def save(step, name="model"):
        """Saves."""
        calls.append((step, name))
        return f"{name}-{step}"

    assert save.__name__ == "save" and save.__doc__ == "Saves."
    with caplog.at_level(logging.INFO, logger="jobkit"):
        assert save(3, name="m") == "m-3"
        jobkit.rank_zero_info("step %d", 7)
        with pytest.warns(UserWarning, match="on rank zero"):
            jobkit.rank_zero_warn("on rank zero")
        as_rank(monkeypatch, rank=1)
        assert save(4) is None
        jobkit.rank_zero_info("not from rank 1")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            jobkit.rank_zero_warn("not from rank 1")
    assert calls == [(3, "m")]
    assert [(r.name, r.getMessage(), r.filename) for r in caplog.records] == [("jobkit", "step 7", "test_native.py")]


def test_install_logging_is_idempotent_and_records_carry_ranks():
    logger = logging.getLogger("jobkit-native-test")
    first = io.StringIO()
    second = io.StringIO()
    jobkit.install_logging(logger, stream=first)
    handler = jobkit.install_logging(logger, stream=second,
                                     fmt="%(message)s g=%(global_rank)s l=%(local_rank)s n=%(node_rank)s")
    try:
        assert logger.handlers == [handler]
        logger.info("once")
        assert first.getvalue() == "" and second.getvalue() == "once g=0 l=0 n=0\n"
        other = logging.StreamHandler(io.StringIO())
        logger.addHandler(other)  # a handler of the user's own stays
        jobkit.install_logging(logger, stream=second)
        assert len(logger.handlers) == 2 and other in logger.handlers
    finally:
        logger.handlers.clear()


def test_star_import_shadows_no_builtin():
    namespace = {}
    exec("from jobkit import *", namespace)
    assert set(jobkit.__all__) <= set(namespace)
    assert [name for name in jobkit.__all__ if hasattr(builtins, name)] == []
    assert "TimeoutError" not in jobkit.__all__ and issubclass(jobkit.TimeoutError, builtins.TimeoutError)
    documented = ["Identity", "identity", "rank", "world_size", "local_rank", "local_world_size", "node_rank",
                  "num_nodes", "is_main_process", "is_local_main_process", "is_distributed", "rank_prefixed_message",
                  "select_device", "RankFilter", "RankFormatter", "install_logging", "rank_zero_only",
                  "rank_zero_info", "rank_zero_warn"]
    assert [name for name in documented if not getattr(jobkit, name).__doc__] == []
