"""jobkit.compat.axolotl without a launcher: axolotl's names, signatures and single-rank behaviour,
and its argument errors."""
import inspect
import os
import subprocess
import sys

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import pytest

import jobkit
from jobkit.compat import axolotl as dist


def test_names_and_signatures_are_axolotls():
    assert sorted(dist.__all__) == ["barrier", "compute_and_broadcast", "gather_from_all_ranks",
                                    "gather_scalar_from_all_ranks", "is_distributed", "is_main_process",
                                    "reduce_and_broadcast", "zero_first", "zero_only"]
    positional = {"barrier": [], "compute_and_broadcast": ["fn"], "gather_from_all_ranks": ["fn", "world_size"],
                  "gather_scalar_from_all_ranks": ["fn", "world_size"], "is_distributed": [],
                  "is_main_process": [], "reduce_and_broadcast": ["fn1", "fn2"], "zero_first": ["is_main"],
                  "zero_only": []}
    for name, expected in positional.items():
        function = getattr(dist, name)
        assert function.__doc__, name
        parameters = inspect.signature(function).parameters.values()
        assert [p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD] == expected, name
    assert inspect.signature(dist.gather_from_all_ranks).parameters["world_size"].default == 1
    assert inspect.signature(dist.gather_scalar_from_all_ranks).parameters["world_size"].default == 1


def test_import_does_not_need_torch():
    code = "import sys, jobkit.compat.axolotl; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "False\n"


def test_identity_on_one_rank():
    assert dist.is_distributed() is False
    assert dist.is_main_process() is True


def test_barrier():
    assert dist.barrier() is None
    assert dist.barrier(timeout=5) is None
    with pytest.raises(jobkit.InvalidArgumentError, match="timeout=-1"):
        dist.barrier(timeout=-1)


def test_compute_and_broadcast_is_exact():
    assert dist.compute_and_broadcast(lambda: 3) == 3
    value = dist.compute_and_broadcast(lambda: 3.0)
    assert value == 3.0 and isinstance(value, float)  # axolotl: int 3
    assert dist.compute_and_broadcast(lambda: 2 ** 40 + 1) == 2 ** 40 + 1  # axolotl: float32 loses it
    assert dist.compute_and_broadcast(lambda: {"n": [1, 2]}, timeout=5) == {"n": [1, 2]}

    def fails():
        raise KeyError("fn failed")

    with pytest.raises(KeyError, match="fn failed"):
        dist.compute_and_broadcast(fails)


@pytest.mark.parametrize("gather", [dist.gather_from_all_ranks, dist.gather_scalar_from_all_ranks])
def test_gathers(gather):
    assert gather(lambda: 5) == [5]
    assert gather(lambda: 0.5, 1) == [0.5]
    assert gather(lambda: 7, world_size=1, timeout=5) == [7]
    assert gather(lambda: 2 ** 53 + 1) == [2 ** 53 + 1]
    for bad in (2, 0, -1, True, "1", 1.0):
        with pytest.raises(jobkit.InvalidArgumentError, match=rf"{gather.__name__}\(world_size={bad!r}\)"):
            gather(lambda: 5, bad)


def test_reduce_and_broadcast():
    seen = []

    def reduce(values):
        seen.append(values)
        return sum(values) / len(values)

    assert dist.reduce_and_broadcast(lambda: 4, reduce) == 4.0
    assert seen == [[4]]
    assert dist.reduce_and_broadcast(lambda: "a", lambda values: "".join(values), timeout=5) == "a"


def test_zero_first_runs_the_block_on_each_rank():
    ran = []
    for is_main in (True, False):
        with dist.zero_first(is_main):
            ran.append(is_main)
    assert ran == [True, False]
    with dist.zero_first(True, timeout=5):
        pass
    with pytest.raises(RuntimeError, match="block failed"):
        with dist.zero_first(True):
            raise RuntimeError("block failed")
    for bad in (None, jobkit.is_main_process):
        with pytest.raises(jobkit.InvalidArgumentError, match=r"zero_first\(is_main="):
            with dist.zero_first(bad):
                pass


def fake_gather(monkeypatch, others):
    """jobkit.all_gather_object as on several ranks: this rank's value first, then others'; the
    calls are recorded."""
    calls = []

    def gather(obj, timeout=None):
        calls.append(obj)
        return [obj] + others

    monkeypatch.setattr(jobkit, "all_gather_object", gather)
    return calls


def test_zero_first_reports_a_failed_first_rank(monkeypatch):
    calls = fake_gather(monkeypatch, [None, "KeyError: 'boom'"])
    ran = []
    with pytest.raises(jobkit.PeerFailureError, match="rank 2: KeyError: 'boom'"):
        with dist.zero_first(False):  # waits on entry: the block does not run
            ran.append(1)
    assert ran == [] and calls == [None]
    with pytest.raises(jobkit.PeerFailureError, match="rank 2: KeyError"):  # a first rank that succeeded
        with dist.zero_first(True):
            ran.append(2)
    assert ran == [2] and calls == [None, None]


def test_zero_first_tells_a_failure_to_the_others(monkeypatch):
    calls = fake_gather(monkeypatch, [None, "KeyError: 'boom'"])
    with pytest.raises(RuntimeError, match="block failed"):  # its own error, not PeerFailureError
        with dist.zero_first(True):
            raise RuntimeError("block failed")
    assert calls == ["RuntimeError: block failed"]  # the one call, on leaving, carries the error
    calls = fake_gather(monkeypatch, [None, None])
    with dist.zero_first(True):
        assert calls == []  # a first rank does not wait before its block
    assert calls == [None]


def test_zero_first_after_a_caught_failure():
    for _ in range(2):
        with pytest.raises(KeyError):
            with dist.zero_first(True, timeout=5):
                raise KeyError("caught")
    assert jobkit.all_gather_object(7, timeout=5) == [7]


def test_zero_only_yields_whether_main():
    with dist.zero_only() as main:
        assert main is True
