"""jobkit.compat.modelopt without a launcher: ModelOpt's distribute signatures, NFSWorkspace on one
rank, and the argument errors of the gathers (which need two ranks or more to run)."""
import inspect
import os

for name in list(os.environ):  # no launcher: the documented single-rank defaults
    if name.startswith(("SLURM_", "PMIX_", "OMPI_", "JOBKIT_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        del os.environ[name]

import pytest
import torch

import jobkit
from jobkit.compat import modelopt as distribute


def untyped(function):
    """The signature without annotations, as ModelOpt's documentation writes it."""
    parameters = [p.replace(annotation=inspect.Parameter.empty)
                  for p in inspect.signature(function).parameters.values()]
    return str(inspect.Signature(parameters))


def test_names_and_signatures():
    assert sorted(distribute.__all__) == ["NFSWorkspace", "get_configs_parallel", "get_tensors_parallel"]
    expected = {
        distribute.NFSWorkspace.__init__: "(self, workspace_path=None)",
        distribute.NFSWorkspace.write_configs_and_weights: "(self, config_json, weights)",
        distribute.NFSWorkspace.read_configs_and_weights_from_rank: "(self, target_rank)",
        distribute.get_configs_parallel: "(config, ranks, group, workspace_path=None)",
        distribute.get_tensors_parallel: "(tensor, ranks, group=None)",
    }
    for function, signature in expected.items():
        assert untyped(function) == signature, function
        assert function.__doc__, function
    assert distribute.NFSWorkspace.__doc__ and distribute.NFSWorkspace.is_initialized.__doc__


def test_workspace_without_a_path():
    ws = distribute.NFSWorkspace()
    assert ws.is_initialized is False and ws.rank == 0
    with pytest.raises(jobkit.InvalidArgumentError, match="not initialized"):
        ws.write_configs_and_weights({}, {})
    with pytest.raises(ValueError, match="not initialized"):  # ModelOpt's ValueError
        ws.read_configs_and_weights_from_rank(0)


def test_workspace_writes_and_reads(tmp_path):
    root = tmp_path / "a" / "b"
    ws = distribute.NFSWorkspace(str(root))
    assert ws.is_initialized and root.is_dir() and ws.rank == 0
    assert ws.read_configs_and_weights_from_rank(0) == (None, None)
    weights = {"w": torch.arange(6, dtype=torch.float16).reshape(2, 3)}
    ws.write_configs_and_weights({"layers": 2, "name": "x"}, weights)
    ws.write_configs_and_weights({"layers": 3, "name": "y"}, weights)  # replaces the state
    config, read = ws.read_configs_and_weights_from_rank(0)
    assert config == {"layers": 3, "name": "y"}
    assert read["w"].dtype == torch.float16 and torch.equal(read["w"], weights["w"])
    assert sorted(p.name for p in root.iterdir()) == ["rank_0_state.pth"]  # no temporary file left
    again = distribute.NFSWorkspace(root)  # a Path too; removes this rank's earlier state
    assert again.read_configs_and_weights_from_rank(0) == (None, None)


def test_workspace_configs_with_floats(tmp_path):
    """torch 1.13's weights_only=True loader refuses pickled floats: the config is stored as JSON."""
    ws = distribute.NFSWorkspace(tmp_path)
    config = {"eps": 1e-05, "rope": {"base": 10000.0, "scale": [0.5, 2.5]}, "big": float("inf"), "n": 3,
              "act": None, "bias": False}
    ws.write_configs_and_weights(config, {"w": torch.tensor([1.5, -2.25])})
    read, weights = ws.read_configs_and_weights_from_rank(0)
    assert read == config and isinstance(read["rope"]["base"], float) and isinstance(read["n"], int)
    assert weights["w"].tolist() == [1.5, -2.25]
    state = torch.load(tmp_path / "rank_0_state.pth", weights_only=True)  # what was stored: JSON text
    assert sorted(state) == ["config_text", "weight"] and '"eps": 1e-05' in state["config_text"]


def test_workspace_reads_a_modelopt_state(tmp_path):
    ws = distribute.NFSWorkspace(tmp_path)
    torch.save({"config": {"layers": 2}, "weight": {"w": torch.ones(1)}}, tmp_path / "rank_0_state.pth")
    config, weights = ws.read_configs_and_weights_from_rank(0)
    assert config == {"layers": 2} and weights["w"].tolist() == [1.0]


def test_workspace_config_must_be_json(tmp_path):
    ws = distribute.NFSWorkspace(tmp_path)
    with pytest.raises(jobkit.InvalidArgumentError, match=r"config_json\['a'\]\[1\]: key 2 is not a string"):
        ws.write_configs_and_weights({"a": [0, {2: "x"}]}, {})
    with pytest.raises(jobkit.InvalidArgumentError, match="not JSON serializable"):
        ws.write_configs_and_weights({"w": torch.ones(1)}, {})
    assert ws.read_configs_and_weights_from_rank(0) == (None, None)  # nothing written


def test_workspace_target_rank(tmp_path):
    ws = distribute.NFSWorkspace(tmp_path)
    for bad in (1, -1, "0", True):
        with pytest.raises(jobkit.InvalidArgumentError, match=f"target_rank={bad!r}"):
            ws.read_configs_and_weights_from_rank(bad)


def test_gather_argument_errors():
    t = torch.zeros(2)
    for ranks in ([0], [0, 0], [], [0, "1"]):
        with pytest.raises(jobkit.InvalidArgumentError, match="ranks="):
            with distribute.get_tensors_parallel(t, ranks):
                pass
        with pytest.raises(jobkit.InvalidArgumentError, match="ranks="):
            with distribute.get_configs_parallel({"a": 1}, ranks, None):
                pass
    with pytest.raises(jobkit.InvalidArgumentError, match="does not hold this rank, 0"):
        with distribute.get_tensors_parallel(t, [1, 2]):
            pass
    with pytest.raises(jobkit.InvalidArgumentError, match="tensor=None"):
        with distribute.get_tensors_parallel(None, [0, 1]):
            pass
    with pytest.raises(jobkit.InvalidArgumentError, match="group=jobkit.Group"):
        with distribute.get_configs_parallel({"a": 1}, [0, 1], jobkit.node_group()):
            pass
