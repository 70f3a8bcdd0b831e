"""jobkit.compat.speechbrain without a launcher: SpeechBrain's names, signatures and single-rank
behaviour, its section counters and deadlock guard, and its argument errors."""
import inspect
import os
import subprocess
import sys
import types

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import pytest

import jobkit
from jobkit.compat import speechbrain as sb


def test_names_and_signatures_are_speechbrains():
    assert sorted(sb.__all__) == sorted([
        "MainProcessContext", "OncePerNodeContext", "ddp_all_reduce", "ddp_barrier", "ddp_broadcast",
        "ddp_init_group", "ddp_prevent_block", "get_local_rank", "get_rank", "if_main_process", "infer_device",
        "is_distributed_initialized", "is_local_rank_zero", "main_process_only", "once_per_node",
        "rank_prefixed_message", "run_on_main", "run_once_per_node"])
    positional = {
        "rank_prefixed_message": ["message"], "get_rank": [], "get_local_rank": [], "infer_device": [],
        "run_on_main": ["func", "args", "kwargs", "post_func", "post_args", "post_kwargs", "run_post_on_main"],
        "run_once_per_node": ["func", "args", "kwargs", "post_func", "post_args", "post_kwargs",
                              "run_post_on_all"],
        "is_distributed_initialized": [], "if_main_process": [], "is_local_rank_zero": [],
        "main_process_only": ["function"], "once_per_node": ["function"], "ddp_prevent_block": [],
        "ddp_barrier": [], "ddp_broadcast": ["communication_object", "src"],
        "ddp_all_reduce": ["communication_object", "reduce_op"], "ddp_init_group": ["run_opts"]}
    for name, expected in positional.items():
        function = getattr(sb, name)
        assert function.__doc__, name
        parameters = inspect.signature(function).parameters.values()
        assert [p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD] == expected, name
    defaults = {p.name: p.default for p in inspect.signature(sb.run_on_main).parameters.values()}
    assert defaults["args"] is None and defaults["post_func"] is None and defaults["run_post_on_main"] is False
    assert inspect.signature(sb.run_once_per_node).parameters["run_post_on_all"].default is False
    assert inspect.signature(sb.ddp_broadcast).parameters["src"].default == 0
    assert sb.MainProcessContext.__doc__ and sb.OncePerNodeContext.__doc__


def test_import_does_not_need_torch():
    code = "import sys, jobkit.compat.speechbrain; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "False\n"


def test_identity_without_a_launcher():
    assert sb.get_rank() is None and sb.get_local_rank() is None  # SpeechBrain's None: no launcher
    assert sb.rank_prefixed_message("hello") == "hello"
    assert sb.is_distributed_initialized() is False
    assert sb.if_main_process() is True and sb.is_local_rank_zero() is True


@pytest.mark.parametrize("count, device", [(0, "cpu"), (1, "cuda:0"), (4, "cuda:0")])
def test_infer_device(monkeypatch, count, device):
    """One rank (local rank 0 of 1) seeing `count` devices; the in-between case (more than one
    device, fewer than the node's ranks) needs several ranks: tests/launched/compat_speechbrain.py."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    assert sb.infer_device() == device


def test_contexts_count_and_prevent_block():
    assert sb.ddp_prevent_block() is True  # one rank
    assert (sb.MAIN_PROC_ONLY, sb.NODE_ONCE_ONLY) == (0, 0)
    with sb.MainProcessContext():
        with sb.OncePerNodeContext():
            assert (sb.MAIN_PROC_ONLY, sb.NODE_ONCE_ONLY) == (1, 1)
    with pytest.raises(KeyError):
        with sb.MainProcessContext():
            raise KeyError("left through an exception")
    assert (sb.MAIN_PROC_ONLY, sb.NODE_ONCE_ONLY) == (0, 0)


def test_main_process_only_and_once_per_node_enter_their_sections():
    @sb.main_process_only
    def prepare(x, y=1):
        assert sb.MAIN_PROC_ONLY == 1
        sb.ddp_barrier()  # SpeechBrain's deadlock guard: no-ops inside the section
        assert sb.ddp_broadcast("mine", src=0) == "mine"
        return x + y

    assert prepare(2, y=3) == 5

    @sb.once_per_node
    def download():
        assert sb.NODE_ONCE_ONLY == 1
        return sb.ddp_all_reduce(3, "sum")

    assert download() == 3
    assert (sb.MAIN_PROC_ONLY, sb.NODE_ONCE_ONLY) == (0, 0)

    @sb.main_process_only
    def fails():
        raise KeyError("own exception")

    with pytest.raises(KeyError):
        fails()
    assert sb.MAIN_PROC_ONLY == 0
    assert sb.main_process_only(lambda: sb.run_on_main(lambda: "nested"))() == "nested"
    with pytest.raises(jobkit.InvalidArgumentError, match="inside once_per_node"):  # jobkit's nesting rule
        sb.once_per_node(sb.main_process_only(lambda: 1))()
    assert (sb.MAIN_PROC_ONLY, sb.NODE_ONCE_ONLY) == (0, 0)


def test_run_on_main():
    post = []
    inside = []
    assert sb.run_on_main(lambda a, b: inside.append(sb.MAIN_PROC_ONLY) or a * b, args=[4], kwargs={"b": 2},
                          post_func=post.append, post_args=["p"]) == 8
    assert inside == [1] and post == []  # post_func runs on the other ranks only...
    assert sb.run_on_main(lambda: 1, post_func=lambda item: post.append(item), post_kwargs={"item": "q"},
                          run_post_on_main=True, timeout=5) == 1
    assert post == ["q"]  # ...or on every rank with run_post_on_main
    with pytest.raises(jobkit.InvalidArgumentError, match="post_func= by name"):
        sb.run_on_main(lambda: 1, post.append)


def test_run_once_per_node():
    assert sb.run_once_per_node(lambda: sb.NODE_ONCE_ONLY) == 1
    assert sb.run_once_per_node(lambda: "ran", post_func=lambda: "post") == "ran"
    assert sb.run_once_per_node(lambda: "ran", post_func=lambda x: x, post_args=["post"], run_post_on_all=True) \
        == "post"
    with pytest.raises(jobkit.InvalidArgumentError, match="post_func= by name"):
        sb.run_once_per_node(lambda: 1, lambda: 2)


def test_barrier_and_broadcast():
    assert sb.ddp_barrier() is None and sb.ddp_barrier(timeout=5) is None
    with pytest.raises(jobkit.InvalidArgumentError, match="timeout=0"):
        sb.ddp_barrier(timeout=0)
    assert sb.ddp_broadcast({"a": 1}) == {"a": 1}
    assert sb.ddp_broadcast([1, 2], 0, timeout=5) == [1, 2]
    for bad in (1, -1, True, "0"):
        with pytest.raises(jobkit.InvalidArgumentError, match=rf"ddp_broadcast\(src={bad!r}\)"):
            sb.ddp_broadcast("x", src=bad)


def test_all_reduce():
    torch = pytest.importorskip("torch")
    import torch.distributed

    tensor = torch.tensor([1.0, 2.0])
    assert sb.ddp_all_reduce(tensor, torch.distributed.ReduceOp.SUM) is tensor  # SpeechBrain: "or itself if
    # DDP not initialised"; the reductions across ranks: tests/launched/compat_speechbrain.py
    on_gpu = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"), is_cuda=True)
    assert sb.ddp_all_reduce(on_gpu, "sum") is on_gpu  # no torch.distributed on one rank: unchanged


def test_reduce_op_names_for_torch():
    torch = pytest.importorskip("torch")
    from jobkit.compat._route import torch_op

    ops = torch.distributed.ReduceOp
    assert (torch_op("sum"), torch_op("avg"), torch_op("prod"), torch_op("MAX")) == (ops.SUM, ops.AVG, ops.PRODUCT,
                                                                                       ops.MAX)
    with pytest.raises(jobkit.InvalidArgumentError, match="ddp_all_reduce: op='mean'"):
        torch_op("mean", "ddp_all_reduce")


def test_decorators_keep_the_functions_name_and_docstring():
    def prepare():
        """Downloads the data."""

    for decorator in (sb.main_process_only, sb.once_per_node):
        assert (decorator(prepare).__name__, decorator(prepare).__doc__) == ("prepare", "Downloads the data.")


def test_ddp_init_group_on_one_rank_does_nothing():
    torch = pytest.importorskip("torch")
    import torch.distributed

    for run_opts in ({"distributed_backend": "gloo"}, {}, ["--distributed_backend", "gloo"],
                     ["--distributed_backend=nccl"], []):
        assert sb.ddp_init_group(run_opts) is None
    assert not torch.distributed.is_initialized()
    for bad, match in (({"distributed_backend": "tcp"}, "distributed_backend='tcp'"),
                       (["--distributed_backend=ucc"], "distributed_backend='ucc'"),
                       ("--distributed_backend=gloo", "run_opts='--distributed_backend=gloo'"),
                       (None, "run_opts=None")):
        with pytest.raises(jobkit.InvalidArgumentError, match=match):
            sb.ddp_init_group(bad)
