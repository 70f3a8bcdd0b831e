"""The Python module without a launcher: single-rank defaults, every call's local behaviour,
errors as jobkit.Error subclasses naming the rank, host and the Python call site."""
import array
import dataclasses
import datetime
import inspect
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import pytest

import jobkit


def line_of(marker):
    """The line of this file holding `marker` (a comment), as jobkit names call sites."""
    with open(__file__) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith("# " + marker):
                return f"test_jobkit.py:{number}"
    raise AssertionError(marker)


def test_identity_defaults():
    me = jobkit.identity()
    counts = (me.rank, me.world_size, me.local_rank, me.local_world_size, me.node_rank, me.num_nodes)
    assert counts == (0, 1, 0, 1, 0, 1)
    assert me.source == "default" and me.job_id == "" and me.hostname
    assert (me.restart_count, me.array_job_id, me.array_task_id) == (0, "", -1)
    assert (me.component, me.num_components, me.component_rank, me.component_size, me.component_nodes) == (0, 1, 0, 1, "")
    assert jobkit.component_group().size() == 1
    assert (jobkit.rank(), jobkit.world_size(), jobkit.local_rank(), jobkit.local_world_size()) == (0, 1, 0, 1)
    assert (jobkit.node_rank(), jobkit.num_nodes()) == (0, 1)
    assert jobkit.is_main_process() and jobkit.is_local_main_process() and not jobkit.is_distributed()
    with pytest.raises(dataclasses.FrozenInstanceError):
        me.rank = 3
    assert jobkit.identity() is me


def test_rank_prefixed_message_without_launcher():
    assert jobkit.rank_prefixed_message("hello") == "hello"


def test_logging_filter_and_formatter():
    stream = io.StringIO()
    logger = logging.getLogger("jobkit-test")
    handler = jobkit.install_logging(logger, stream=stream, fmt="%(levelname)s %(message)s [%(rank)s]")
    try:
        logger.info("seen on the main rank")
        assert stream.getvalue() == "INFO seen on the main rank [0]\n"
        handler.filters.clear()
        handler.addFilter(jobkit.RankFilter("3-5"))
        logger.info("not on rank 0")
        logger.warning("warnings everywhere")
        assert stream.getvalue().splitlines()[1:] == ["WARNING warnings everywhere [0]"]
    finally:
        logger.removeHandler(handler)


def test_logging_honours_jobkit_log_ranks(monkeypatch):
    monkeypatch.setenv("JOBKIT_LOG_RANKS", "1,2")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    assert not jobkit.RankFilter().filter(record)
    monkeypatch.setenv("JOBKIT_LOG_RANKS", "local-main")
    assert jobkit.RankFilter().filter(record)
    monkeypatch.setenv("JOBKIT_LOG_RANKS", "every")
    with pytest.raises(jobkit.InvalidArgumentError, match="JOBKIT_LOG_RANKS"):
        jobkit.RankFilter()


def test_object_collectives_on_one_rank():
    jobkit.barrier()
    value = {"a": [1, 2], "b": b"\x00"}
    assert jobkit.broadcast_object(value) is value
    assert jobkit.all_gather_object(value) == [value]
    assert jobkit.gather_object(3) == [3]
    assert jobkit.scatter_object(["only"]) == "only"
    assert jobkit.compute_and_broadcast(lambda: {"x": 1}) == {"x": 1}
    assert jobkit.gather_from_all_ranks(lambda: 5) == [5]
    assert jobkit.reduce_and_broadcast(lambda: 2, lambda parts: sum(parts) * 10) == 20


def test_bulk_collectives_write_into_buffers():
    buffer = bytearray(b"abc")
    jobkit.broadcast_into(buffer)
    assert buffer == b"abc"
    mine, every = array.array("i", [7, 8]), array.array("i", [0, 0])
    jobkit.all_gather_into(mine, every)
    assert list(every) == [7, 8]
    with pytest.raises(jobkit.InvalidArgumentError, match=r"output is int32\[1\], not 1 times input int32\[2\]"):
        jobkit.all_gather_into(mine, array.array("i", [0]))
    with pytest.raises(BufferError):
        jobkit.broadcast_into(b"read-only")


def test_all_reduce():
    assert jobkit.all_reduce(3) == 3 and isinstance(jobkit.all_reduce(3), int)
    assert jobkit.all_reduce(2.5, "max") == 2.5
    assert jobkit.all_reduce([1, 2.5], "SUM") == [1.0, 2.5]
    assert jobkit.all_reduce((6, 3), "bxor") == (6, 3)
    assert jobkit.all_reduce(-(2 ** 62), "product") == -(2 ** 62)
    with pytest.raises(jobkit.InvalidArgumentError, match="integral"):
        jobkit.all_reduce(1.5, "band")
    assert jobkit.all_reduce([1, 3], "avg") == [1.0, 3.0]
    with pytest.raises(jobkit.InvalidArgumentError, match="op='mean'"):
        jobkit.all_reduce(1, "mean")


def test_avg_of_integer_numbers_is_a_float_as_documented():
    """avg of numbers returns floats, numpy's integers included (before: numpy.int64(avg), truncated);
    an integer array, reduced in place, cannot hold it: refused by the C++ library's rule."""
    assert type(jobkit.all_reduce(3, "avg")) is float and type(jobkit.all_reduce(True, "avg")) is float
    np = pytest.importorskip("numpy")
    average = jobkit.all_reduce(np.int64(3), op="avg")
    assert type(average) is float and average == 3.0
    assert jobkit.all_reduce((np.int32(1), np.int64(3)), "avg") == (1.0, 3.0)
    assert type(jobkit.all_reduce(np.int64(3), op="sum")) is np.int64  # other ops keep the type
    assert type(jobkit.all_reduce(np.float32(1.5), op="avg")) is np.float32
    with pytest.raises(jobkit.InvalidArgumentError, match="op=avg on dtype int64"):
        jobkit.all_reduce(np.array([3], dtype=np.int64), op="avg")


def test_errors_name_rank_host_and_python_call_site():
    host = jobkit.identity().hostname
    with pytest.raises(jobkit.InvalidArgumentError) as caught:
        jobkit.broadcast_object(1, src=2)  # bad root
    assert isinstance(caught.value, ValueError) and caught.value.code == "invalid_argument"
    assert f"rank 0 ({host})" in str(caught.value) and line_of("bad root") in str(caught.value)
    with pytest.raises(jobkit.InvalidArgumentError, match="timeout"):
        jobkit.barrier(timeout=-1)
    assert issubclass(jobkit.TimeoutError, TimeoutError) and issubclass(jobkit.TimeoutError, jobkit.Error)
    for name in ("InvalidEnvironmentError", "PmixError", "PeerFailureError", "NcclError", "CudaError", "IoError",
                 "SchedulerError", "InternalError"):
        assert issubclass(getattr(jobkit, name), jobkit.Error)


COLLECTIVES = ["barrier", "broadcast_object", "all_gather_object", "gather_object", "scatter_object",
               "compute_and_broadcast", "gather_from_all_ranks", "reduce_and_broadcast", "broadcast_into",
               "all_gather_into", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "gather", "scatter"]


@pytest.mark.parametrize("name", COLLECTIVES)
def test_every_collective_takes_the_group_where_torch_does_and_timeout_by_keyword(name):
    """torch.distributed's order: the tensors or object with src/dst/op, then group, then async_op
    where torch has it; timeout= is keyword-only, last."""
    params = inspect.signature(getattr(jobkit, name)).parameters
    names = list(params)
    assert names[-1] == "timeout" and params["timeout"].kind == inspect.Parameter.KEYWORD_ONLY
    positional = [n for n in names if params[n].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    expected = ["group", "async_op"] if "async_op" in params else ["group"]
    assert positional[-len(expected):] == expected, names


@pytest.mark.parametrize("timeout", [5, 2.5, datetime.timedelta(seconds=5)], ids=["int", "float", "timedelta"])
def test_a_timeout_passed_where_the_group_goes_is_refused(timeout):
    """A timeout by position where the group now is (the object collectives' third argument was their
    timeout) is an InvalidArgumentError naming the argument and its value and saying timeout= is
    keyword-only, before anything runs; never taken for a group or async_op."""
    ran = []

    def fn():
        ran.append(1)
        return 1

    buffer, mine, every = bytearray(b"ab"), array.array("i", [1]), array.array("i", [0])
    calls = {
        "barrier": lambda: jobkit.barrier(timeout),
        "broadcast_object": lambda: jobkit.broadcast_object("x", 0, timeout),
        "all_gather_object": lambda: jobkit.all_gather_object("x", timeout),
        "gather_object": lambda: jobkit.gather_object("x", 0, timeout),
        "scatter_object": lambda: jobkit.scatter_object(["x"], 0, timeout),
        "compute_and_broadcast": lambda: jobkit.compute_and_broadcast(fn, 0, timeout),
        "gather_from_all_ranks": lambda: jobkit.gather_from_all_ranks(fn, 0, timeout),
        "reduce_and_broadcast": lambda: jobkit.reduce_and_broadcast(fn, sum, timeout),
        "broadcast_into": lambda: jobkit.broadcast_into(buffer, 0, timeout),
        "all_gather_into": lambda: jobkit.all_gather_into(mine, every, timeout),
        "all_reduce": lambda: jobkit.all_reduce(mine, "sum", timeout),
        "broadcast": lambda: jobkit.broadcast(buffer, 0, timeout),
        "all_gather": lambda: jobkit.all_gather([every], mine, timeout),
        "all_gather_into_tensor": lambda: jobkit.all_gather_into_tensor(every, mine, timeout),
        "reduce_scatter": lambda: jobkit.reduce_scatter(every, [mine], "sum", timeout),
        "reduce_scatter_tensor": lambda: jobkit.reduce_scatter_tensor(every, mine, "sum", timeout),
        "gather": lambda: jobkit.gather(mine, [every], 0, timeout),
        "scatter": lambda: jobkit.scatter(every, [mine], 0, timeout),
    }
    assert sorted(calls) == sorted(COLLECTIVES)
    for name, call in calls.items():
        with pytest.raises(jobkit.InvalidArgumentError) as caught:
            call()
        text = str(caught.value)
        assert f"{name}: group={timeout!r}: " in text and "timeout= is keyword-only" in text, text
    async_calls = {"all_reduce": lambda: jobkit.all_reduce(mine, "sum", None, timeout),
                   "broadcast": lambda: jobkit.broadcast(buffer, 0, None, timeout),
                   "gather": lambda: jobkit.gather(mine, [every], 0, None, timeout)}
    for name, call in async_calls.items():
        with pytest.raises(jobkit.InvalidArgumentError, match="timeout= is keyword-only") as caught:
            call()
        assert f"{name}: async_op={timeout!r}: " in str(caught.value)
    assert ran == [] and buffer == b"ab" and list(every) == [0]
    assert jobkit.broadcast_object("x", 0, None, timeout=timeout) == "x"
    assert jobkit.all_gather_object("x", None, timeout=timeout) == ["x"]
    assert jobkit.compute_and_broadcast(fn, 0, None, timeout=timeout) == 1 and ran == [1]


def test_main_process_only_and_run_on_main():
    calls = []

    @jobkit.main_process_only
    def prepare(x, y=1):
        calls.append(x)
        return x + y

    assert prepare(2, y=3) == 5 and calls == [2]

    @jobkit.main_process_only(timeout=30)
    def fails():
        raise KeyError("own exception")

    with pytest.raises(KeyError):  # the main rank gets its own exception back
        fails()
    post = []
    assert jobkit.run_on_main(lambda a: a * 2, args=(4,), post_func=post.append, post_args=("p",)) == 8
    assert post == []  # post_func runs on the other ranks only...
    assert jobkit.run_on_main(lambda: 1, post_func=post.append, post_args=("p",), run_post_on_main=True) == 1
    assert post == ["p"]  # ...or on every rank with run_post_on_main
    with pytest.raises(jobkit.InvalidArgumentError, match="post_func= by name"):
        jobkit.run_on_main(lambda: 1, post.append)


def test_once_per_node_and_run_once_per_node():
    @jobkit.once_per_node
    def download():
        return "done"

    assert download() == "done"
    assert jobkit.run_once_per_node(lambda: "ran", post_func=lambda: "post") == "ran"
    assert jobkit.run_once_per_node(lambda: "ran", post_func=lambda: "post", run_post_on_all=True) == "post"


def test_zero_first_forms():
    assert jobkit.zero_first(lambda: 7)() == 7
    assert jobkit.local_zero_first(lambda: 8)() == 8
    with jobkit.local_zero_first(timeout=5):
        ran = True
    assert ran
    with pytest.raises(jobkit.InvalidArgumentError, match="inside zero_first at test_jobkit.py"):
        with jobkit.zero_first():  # the C++ nesting rule: staggered sections do not nest
            with jobkit.local_zero_first():
                pass
    with pytest.raises(RuntimeError, match="body"):
        with jobkit.zero_first():
            raise RuntimeError("body failed")
    with pytest.raises(jobkit.InvalidArgumentError):
        with jobkit.zero_first(lambda: 1):
            pass
    stage = jobkit.zero_first()
    with stage:
        with pytest.raises(jobkit.InvalidArgumentError, match="entered already"):
            with stage:
                pass
    with stage:  # the first entry ended well: the object can be entered again
        pass


def test_nesting_runs_directly():
    @jobkit.main_process_only
    def outer():
        return jobkit.run_on_main(lambda: "inner") + jobkit.zero_first(lambda: "!")()

    assert outer() == "inner!"


def test_do_n_at_a_time_and_fs_local_rank(tmp_path):
    assert jobkit.do_n_at_a_time(lambda: 4) == 4
    assert jobkit.do_n_at_a_time(lambda: 5, n=2) == 5
    assert jobkit.fs_local_rank(tmp_path) == 0


def test_workspace_and_node_local_gather(tmp_path):
    with jobkit.Workspace(tmp_path) as ws:
        ws.write(b"\x01\x02", config='{"k": 1}')
        assert ws.read(0) == ('{"k": 1}', b"\x01\x02")
        assert os.path.isfile(ws.path_of(0)) and ws.directory.startswith(str(tmp_path))
        directory = ws.directory
        with pytest.raises(jobkit.InvalidArgumentError):
            ws.read(1)
    assert not os.path.exists(directory)
    assert jobkit.node_local_gather(b"payload", config="c") == ([("c", b"payload")], "shared_memory")
    group = jobkit.make_group([0])  # a Group as group=, as for the collectives
    assert jobkit.node_local_gather(b"g", group=group) == ([("", b"g")], "shared_memory")
    with jobkit.Workspace(tmp_path / "g", group=group) as ws:
        ws.write(b"\x03")
        assert ws.read(0) == ("", b"\x03")


def test_version():
    assert jobkit.__version__ and sys.modules["jobkit._jobkit"].__version__ == jobkit.__version__


def test_ctrl_c_ends_a_wait(tmp_path):
    """The workspace waits for a state nobody writes; SIGINT (Ctrl-C) ends the wait at once."""
    with jobkit.Workspace(tmp_path) as ws:
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            ws.read(0, timeout=20)
        assert time.monotonic() - start < 3
        with pytest.raises(jobkit.TimeoutError, match="test_jobkit.py"):
            ws.read(0, timeout=0.2)


def store_cases(store, dist):
    """torch's own store test cases (StoreTestBase: set/get, compare_set, add, simple wait, and
    TCPStore's num_keys, delete_key and timeouts), through the PrefixStore that
    init_process_group puts around a store."""
    prefixed = dist.PrefixStore("test/", store)
    prefixed.set("key0", "value0")
    prefixed.set("key1", b"value1")
    assert prefixed.get("key0") == b"value0" and prefixed.get("key1") == b"value1"
    assert prefixed.compare_set("cs", "", "first") == b"first"  # absent, expected "": set
    assert prefixed.compare_set("cs", "wrong", "second") == b"first"
    assert prefixed.compare_set("cs", "first", "second") == b"second"
    assert prefixed.add("counter", 3) == 3 and prefixed.add("counter", 2) == 5
    prefixed.wait(["key0", "key1"])
    prefixed.wait(["key0"], datetime.timedelta(seconds=1))
    keys_before = prefixed.num_keys()
    prefixed.set("doomed", "x")
    assert prefixed.num_keys() == keys_before + 1
    assert prefixed.delete_key("doomed") and not prefixed.delete_key("doomed")
    assert prefixed.num_keys() == keys_before
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="(?i)timeout"):  # what torch's code catches
        prefixed.wait(["absent"], datetime.timedelta(seconds=0.2))
    assert time.monotonic() - start < 5
    prefixed.set_timeout(datetime.timedelta(seconds=0.2))
    with pytest.raises(RuntimeError, match="(?i)timeout"):
        prefixed.get("absent")


def test_torch_init_process_group_on_one_rank(monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    import jobkit.torch

    for name in ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    for kind in (None, "jobkit"):
        store = jobkit.torch.init_process_group("gloo", store=kind)
        try:
            assert isinstance(store, jobkit.torch.JobkitStore if kind else dist.TCPStore)
            value = torch.tensor([2.0])
            dist.all_reduce(value)
            assert value.item() == 2.0 and dist.get_world_size() == 1
            store_cases(store, dist)
        finally:
            dist.destroy_process_group()
    with pytest.raises(jobkit.InvalidArgumentError, match="store='tcp'"):
        jobkit.torch.init_process_group("gloo", store="tcp")
    own = dist.HashStore()  # a Store of the caller's: used as it is
    assert jobkit.torch.init_process_group("gloo", store=own) is own
    dist.destroy_process_group()
    if torch.cuda.is_available() and dist.is_nccl_available():  # a GPU machine (scripts/gpu-check.sh)
        jobkit.torch.init_process_group("nccl")
        try:
            value = torch.tensor([3.0], device=jobkit.torch.device())
            dist.all_reduce(value)
            assert value.item() == 3.0 and value.device.type == "cuda"
        finally:
            dist.destroy_process_group()
    else:
        with pytest.raises((jobkit.NcclError, jobkit.CudaError)):
            jobkit.torch.init_process_group("nccl")


def test_stop_guard_agrees_on_a_signal_and_restores_handlers():
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: seen.append("python"))
    try:
        with jobkit.StopGuard() as stop:
            assert not stop.stop_requested()
            assert stop.cause.reason == "none"
            os.kill(os.getpid(), signal.SIGUSR1)
            assert stop.stop_requested()
            assert stop.cause.reason == "signal"
            assert stop.cause.signal == signal.SIGUSR1
            assert str(stop.cause) == "SIGUSR1 on rank 0"
            assert stop.stop_requested()  # stays stopped
        assert seen == []  # the guard took the signal, not Python's handler
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == ["python"]  # and gave it back
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_stop_guard_options_are_checked():
    with pytest.raises(jobkit.InvalidArgumentError, match="check_every=0"):
        jobkit.StopGuard(check_every=0)
    with pytest.raises(jobkit.InvalidArgumentError, match="cannot be caught"):
        jobkit.StopGuard(signals=[signal.SIGKILL])
    with pytest.raises(jobkit.InvalidArgumentError, match="time_margin"):
        jobkit.StopGuard(time_margin=-1)


def test_time_left_and_requeue_outside_slurm(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOB_END_TIME", raising=False)
    assert jobkit.time_left() is None
    with pytest.raises(jobkit.InvalidEnvironmentError, match="SLURM_JOB_ID is not set"):
        jobkit.requeue()


def test_time_left_from_slurm_job_end_time(monkeypatch):
    monkeypatch.setenv("JOBKIT_LIBSLURM", "/nonexistent/libslurm.so")
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time()) + 600))
    assert 598 <= jobkit.time_left() <= 600
    monkeypatch.setenv("SLURM_JOB_END_TIME", "soon")
    with pytest.raises(jobkit.InvalidEnvironmentError, match="SLURM_JOB_END_TIME='soon'"):
        jobkit.time_left()
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time()) + 600))
    assert 598 <= jobkit.time_left(datetime.timedelta(seconds=0.5)) <= 600
    for bad in (-1, float("nan"), "60", True):
        with pytest.raises(jobkit.InvalidArgumentError, match="max_age="):
            jobkit.time_left(bad)  # type: ignore[arg-type]


def test_checkpoints_commit_latest_verify(tmp_path):
    saved = jobkit.Checkpoints(tmp_path / "ckpt", keep=1)
    assert saved.latest() is None
    for step in (1, 2):
        with open(os.path.join(saved.begin(step), "state"), "w") as f:
            f.write(f"state {step}")
        assert saved.pending_step == step
        saved.commit()
    assert saved.latest() == 2
    saved.verify(2)
    with open(os.path.join(saved.part(2), "state")) as f:
        assert f.read() == "state 2"
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["step-000000000002"]
    with open(os.path.join(saved.part(2), "state"), "w") as f:
        f.write("damaged")
    with pytest.raises(jobkit.IoError, match="is damaged"):
        saved.verify(2)
    with pytest.raises(jobkit.IoError, match=r"commit\(\) without begin\(\)"):
        saved.commit()


def test_checkpoints_requeue_outside_slurm_is_recorded_not_done(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)  # never a real requeue from a test
    saved = jobkit.Checkpoints(tmp_path / "ckpt")
    with jobkit.StopGuard() as stop:
        saved.begin(5)
        with pytest.raises(jobkit.InvalidArgumentError, match="rank 0 began step 5 and did not commit it"):
            saved.requeue(stop.cause)
        saved.commit()
        assert saved.requeue(stop.cause) is False
        # A StopCause made by hand: its seconds keep the rule of spans (no overflowing conversion).
        for bad in (float("inf"), float("-inf"), float("nan"), 1e300):
            made = dataclasses.replace(stop.cause, reason="time_limit", time_left=bad)
            with pytest.raises(jobkit.InvalidArgumentError, match=r"time_left=(-?inf|nan|1e\+300): "):
                saved.requeue(made)
    records = [name for name in os.listdir(tmp_path / "ckpt") if name.startswith(".stopped-")]
    assert len(records) == 1 and records[0].endswith(".r0")
    with open(tmp_path / "ckpt" / records[0]) as f:
        assert f.read() == "no stop agreed; not requeued: requeue: not in a Slurm job (SLURM_JOB_ID is not set)\n"


def test_helpers_take_a_timedelta_as_collectives_do(tmp_path):
    """Every timeout of the helpers is seconds or a datetime.timedelta, checked as the collectives' are."""
    five = datetime.timedelta(seconds=5)
    assert jobkit.fs_local_rank(str(tmp_path), timeout=five) == 0
    with jobkit.zero_first(timeout=five):
        pass
    assert jobkit.run_on_main(lambda: 7, timeout=five) == 7
    assert jobkit.do_n_at_a_time(lambda: 3, n=1, timeout=five) == 3
    with pytest.raises(jobkit.InvalidArgumentError, match=r"timeout=datetime.timedelta\(days=-1"):
        jobkit.fs_local_rank(str(tmp_path), timeout=datetime.timedelta(seconds=-1))
    with pytest.raises(jobkit.InvalidArgumentError, match="a number of seconds, a datetime.timedelta or None"):
        jobkit.run_on_main(lambda: 7, timeout="5")  # type: ignore[arg-type]


def test_one_timeout_rule_for_python_and_cpp():
    """timeout= keeps the C++ library's rule of JOBKIT_TIMEOUT and --timeout: more than 0 seconds,
    finite, at most 1e9; the edges are refused in Python as there, before any wait."""
    rule = "must be more than 0 seconds, finite and at most 1e9"
    for bad in (0, -1, 1e300, float("inf"), float("nan"), datetime.timedelta(days=20000 * 365)):
        with pytest.raises(jobkit.InvalidArgumentError, match=rf"^timeout=.*: {rule}$"):
            jobkit.barrier(timeout=bad)
    assert jobkit.run_on_main(lambda: 5, timeout=1e9) == 5  # the largest, and a fraction of a millisecond:
    assert jobkit.run_on_main(lambda: 6, timeout=0.0001) == 6


HUGE = datetime.timedelta(days=20000 * 365)  # 6.3e11 s
BAD_SPANS = (-1, -0.5, 1e300, float("inf"), float("-inf"), float("nan"), 10 ** 400, HUGE,
             datetime.timedelta(seconds=-1))
SPAN_RULE = "must be 0 or more seconds, finite and at most 1e9"


def test_one_rule_for_margins_and_ages(monkeypatch):
    """StopGuard's time_margin and time_left's max_age keep the C++ library's rule of a span in
    seconds (duration_from_seconds): a timeout's, but 0 is taken (no margin; ask every time)."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("JOBKIT_LIBSLURM", "/nonexistent/libslurm.so")
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time()) + 600))
    for bad in BAD_SPANS:
        with pytest.raises(jobkit.InvalidArgumentError, match=rf"^StopGuard: time_margin={re.escape(repr(bad))}: "
                                                             rf"{SPAN_RULE}$"):
            jobkit.StopGuard(time_margin=bad)
        with pytest.raises(jobkit.InvalidArgumentError, match=rf"^time_left: max_age={re.escape(repr(bad))}: "
                                                             rf"{SPAN_RULE}$"):
            jobkit.time_left(bad)
    for wrong in ("60", True, None):
        with pytest.raises(jobkit.InvalidArgumentError, match=r"a number of seconds or a datetime.timedelta$"):
            jobkit.StopGuard(time_margin=wrong)  # type: ignore[arg-type]
        with pytest.raises(jobkit.InvalidArgumentError, match=r"^time_left: max_age=.*: a number of seconds"):
            jobkit.time_left(wrong)  # type: ignore[arg-type]
    goods = [0, 0.5, 1e9, datetime.timedelta(minutes=5), datetime.timedelta(0)]
    try:
        import numpy as np
        goods += [np.int64(300), np.float32(0.5)]  # real numbers of any type, as float() took them
    except ImportError:
        pass
    for good in goods:
        with jobkit.StopGuard(time_margin=good) as stop:
            assert stop.stop_requested() == (good == 1e9)  # 600 s left: below a margin of 1e9 s only
        assert 598 <= jobkit.time_left(good) <= 600
    # The rule is applied once, in jobkit._timeout: the extension takes its milliseconds as they are.
    assert 598 <= jobkit._jobkit.time_left(1500) <= 600


def test_the_report_of_torch_collectives_keeps_the_rule_of_spans():
    """where_report_after (the threshold of torch's collectives, _torch_where.py) takes its deadline
    by the rule of spans: 0 (none: never), else a quarter of it, at least 10 s."""
    after = jobkit._jobkit.where_report_after
    assert after(0) == 0 and after(20) == 10 and after(1800) == 450 and after(1e9) == 2.5e8
    for bad in BAD_SPANS:
        seconds = bad.total_seconds() if isinstance(bad, datetime.timedelta) else float(min(bad, 1e308))
        with pytest.raises(jobkit.InvalidArgumentError, match=rf"deadline_s=.*: {SPAN_RULE}"):
            after(seconds)


def test_the_waits_torch_timed_are_clipped_merged_and_counted_once():
    """_torch_where._waits (the waits that come off a rank's compute time, docs/progress.md) takes
    the entries the recorder timed (an end, NCCL's time_discovered_completed_ns, and a start:
    duration_ms before the end, else time_discovered_started_ns; never the creation, which is when
    NCCL queued it), clips each to after the last poll, merges overlaps, and leaves out gloo's
    entries (no end), untimed ones and those ended before the last poll."""
    from jobkit import _torch_where as tw

    ms = 1_000_000
    entries = [
        {"time_created_ns": 100 * ms, "time_discovered_completed_ns": 150 * ms, "duration_ms": 30.0},  # 120-150
        {"time_created_ns": 140 * ms, "time_discovered_started_ns": 145 * ms,
         "time_discovered_completed_ns": 170 * ms},  # 145-170: overlaps the first
        {"time_created_ns": 190 * ms, "time_discovered_started_ns": 200 * ms,
         "time_discovered_completed_ns": 210 * ms, "duration_ms": float("nan")},  # 200-210
        {"time_created_ns": 20 * ms, "time_discovered_started_ns": 30 * ms,
         "time_discovered_completed_ns": 90 * ms},  # ended before the last poll
        {"time_created_ns": 95 * ms, "time_discovered_completed_ns": 115 * ms, "duration_ms": 5},  # clipped
        {"time_created_ns": 220 * ms, "time_discovered_completed_ns": 260 * ms},  # not timed: only queued
        {"time_created_ns": 300 * ms, "time_discovered_completed_ns": 0, "retired": False},  # gloo's
    ]
    waits, newest = tw._waits(entries, 110 * ms)
    assert waits == [(110 * ms, 115 * ms), (120 * ms, 170 * ms), (200 * ms, 210 * ms)]
    assert newest == 210 * ms
    # The next poll counts nothing twice.
    assert tw._waits(entries, newest) == ([], newest)
    # The collectives in progress, oldest first: the tracker names the oldest begun since the last progress.
    pending = tw._in_progress(entries + [{"time_created_ns": 250 * ms, "retired": False,
                                          "profiling_name": "gloo:all_reduce"}])
    assert [e["time_created_ns"] for e in pending] == [250 * ms, 300 * ms]
    assert tw._name(pending[0]) == "torch gloo:all_reduce"
    assert tw._in_progress([{"time_created_ns": 5, "retired": True}]) == []


def test_the_recorder_is_read_once_per_poll():
    """_torch_where._entries reads each backend's dump, and a fallback dump (the one without
    backend=, which gives the same entries again in torch 2.15) only where none of them answered."""
    from jobkit import _torch_where as tw

    calls = []

    def dump(name, entries=None):
        def function(**arguments):
            calls.append(name)
            if entries is None:
                raise TypeError("an argument this torch does not take")
            return json.dumps({"entries": entries}).encode()
        return function

    gloo = [{"record_id": 1}]
    answered = [tw._Dump(dump("gloo", gloo), backend="gloo"), tw._Dump(dump("default", gloo), fallback=True)]
    assert tw._entries(answered) == gloo and calls == ["gloo"]
    calls.clear()
    refused = [tw._Dump(dump("gloo"), backend="gloo"), tw._Dump(dump("default", gloo), fallback=True)]
    assert tw._entries(refused) == gloo and calls == ["gloo", "default"]


def test_the_recorder_watch_ends_before_the_interpreter_does(tmp_path):
    """The watch's thread is joined at exit (atexit), not left running into the interpreter's
    finalisation, where a daemon thread that takes the GIL from inside C++ ends the process with
    std::terminate: the exit's handlers end it, promptly."""
    script = tmp_path / "watched.py"
    script.write_text(
        "import json, time\n"
        "from jobkit import _torch_where as tw\n"
        "polls = []\n"
        "def dump(**arguments):\n"
        "    polls.append(1)\n"
        "    return json.dumps({'entries': []}).encode()\n"
        "thread = tw._start([tw._Dump(dump)], 0, False, False)\n"
        "while not polls: time.sleep(0.05)\n"
        "import atexit\n"
        "atexit._run_exitfuncs()  # what the interpreter's exit runs first\n"
        "print('ended' if not thread.is_alive() else 'still running', flush=True)\n")
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and done.stdout == "ended\n", done
    assert time.monotonic() - began < 30  # the watch's 1 s pause ended at once, not waited out


def test_one_timeout_rule_for_a_jobkit_store():
    """A JobkitStore's timeout keeps the rule of every timeout= (more than 0 seconds, finite, at
    most 1e9): when made, at wait(keys, timeout), and for the timeout torch's set_timeout() sets;
    0 is torch's no timeout."""
    pytest.importorskip("torch")
    import jobkit.torch

    rule = "must be more than 0 seconds, finite and at most 1e9"
    for bad in BAD_SPANS:
        with pytest.raises(jobkit.InvalidArgumentError,
                           match=rf"^JobkitStore: timeout={re.escape(repr(bad))}: {rule}$"):
            jobkit.torch.JobkitStore(bad)
    store = jobkit.torch.JobkitStore(2.5)
    assert store.timeout == datetime.timedelta(seconds=2.5)
    store.set("key", "value")
    for bad in BAD_SPANS:
        with pytest.raises(jobkit.InvalidArgumentError,
                           match=rf"^JobkitStore.wait: timeout={re.escape(repr(bad))}: {rule}$"):
            store.wait(["key"], bad)
    store.wait(["key"], 1e9)
    # 0 is torch's Store::kNoTimeout (no timeout): the longest wait jobkit's rule allows.
    for none in (0, 0.0, datetime.timedelta(0)):
        store.wait(["key"], none)
    assert jobkit.torch.JobkitStore(0).timeout == datetime.timedelta(0)
    store.set_timeout(datetime.timedelta(0))
    assert store.get("key") == b"value"
    # Real numbers of any type, as every timeout= takes them.
    np = pytest.importorskip("numpy")
    assert jobkit.torch.JobkitStore(np.int64(3)).timeout == datetime.timedelta(seconds=3)
    store.wait(["key"], np.float32(0.5))
    with pytest.raises(RuntimeError, match=r"timeout: keys \['absent'\] not set within 0.001 s"):
        store.wait(["absent"], datetime.timedelta(microseconds=1))  # rounded up to a millisecond
    store.set_timeout(HUGE)
    with pytest.raises(jobkit.InvalidArgumentError, match=rf"^JobkitStore.get: timeout={re.escape(repr(HUGE))}: "):
        store.get("key")
    store.set_timeout(datetime.timedelta(seconds=1))
    assert store.get("key") == b"value"


def test_a_closed_workspace_and_an_int_payload_are_refused(tmp_path):
    """After close() a Workspace says it is closed; an int payload is no buffer (bytes(5) would be
    five zero bytes, silently)."""
    ws = jobkit.Workspace(str(tmp_path / "ws"))
    with pytest.raises(jobkit.InvalidArgumentError, match="payload=5: bytes or another buffer, not an int"):
        ws.write(5)  # type: ignore[arg-type]
    ws.write(b"abc", "cfg")
    assert ws.read(0) == ("cfg", b"abc")
    ws.close()
    with pytest.raises(jobkit.InvalidArgumentError, match="this Workspace is closed"):
        ws.read(0)
    with pytest.raises(jobkit.InvalidArgumentError, match="payload=3"):
        jobkit.node_local_gather(3)  # type: ignore[arg-type]


def test_python_exceptions_cross_unchanged():
    """Last: a failed collective leaves the world group unusable in this process, as in C++."""
    class Custom(Exception):
        pass

    def boom():
        raise Custom("kept")

    with pytest.raises(Custom, match="kept"):
        jobkit.compute_and_broadcast(boom)
    with pytest.raises(Custom):
        jobkit.zero_first(boom)()
    # The reduction runs on rank 0, inside the collective: rank 0 gets its exception back as it
    # was raised, and the other ranks the collective's failure naming it (tests/unit/test_collectives.cpp).
    with pytest.raises(Custom, match="kept"):
        jobkit.reduce_and_broadcast(lambda: 1, lambda parts: boom())



def test_progress_marks() -> None:
    # Outside a Slurm step tracking is off: a mark does nothing; a bad bound is refused all the same.
    jobkit.progress()
    jobkit.long_step(30)
    jobkit.long_step(datetime.timedelta(minutes=5))
    with pytest.raises(jobkit.InvalidArgumentError, match="long_step: bound=-1"):
        jobkit.long_step(-1)
    assert "progress" in jobkit.__all__ and "long_step" in jobkit.__all__
