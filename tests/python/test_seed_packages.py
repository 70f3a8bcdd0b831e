"""tests/launched/seed_packages.py without PyPI: a wheel made here, served from a file:// URL, is
fetched into a cache, verified by sha256 and its module loaded; a wrong digest, an unreachable
server with an empty cache and a torch older than 2.6 are refused with their reason."""
import hashlib
import importlib.util
import os
import sys
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("seed_packages", os.path.join(HERE, "..", "launched", "seed_packages.py"))
assert spec is not None and spec.loader is not None
sp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sp)


def wheel(tmp_path, body="def answer():\n    return 42\n"):
    """A wheel holding fakeseed/utils/distributed.py, and a Pin of it served from tmp_path."""
    path = tmp_path / "server" / "fakeseed-1.0-py3-none-any.whl"
    path.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("fakeseed/utils/distributed.py", body)
        z.writestr("fakeseed/other.py", "raise ImportError('never loaded')\n")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return sp.Pin("fakeseed", "1.0", path.name, digest, "fakeseed.utils.distributed",
                  ("fakeseed/utils/distributed.py",), True)


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.setattr(sp, "HOST", (tmp_path / "server").as_uri() + "/")
    yield tmp_path
    sys.modules.pop("fakeseed.utils.distributed", None)


def test_fetch_verify_load(served, monkeypatch):
    pin = wheel(served)
    monkeypatch.setitem(sp.PINS, "fakeseed", pin)
    cache = str(served / "cache")
    where = sp.fetch_one(pin, cache)
    assert sorted(os.listdir(os.path.join(where, "tree", "fakeseed"))) == ["utils"]  # only the listed files
    (served / "server" / pin.url).unlink()  # cached: no server needed any more
    assert sp.fetch_one(pin, cache) == where
    assert sp.load("fakeseed", cache).answer() == 42
    assert sp.label("fakeseed") == "fakeseed 1.0"


def test_wrong_digest_refused(served, monkeypatch):
    pin = wheel(served)._replace(sha256="0" * 64)
    with pytest.raises(sp.Unavailable, match="sha256 [0-9a-f]{64}, pinned 0{64}"):
        sp.fetch_one(pin, str(served / "cache"))
    monkeypatch.setitem(sp.PINS, "fakeseed", pin)
    with pytest.raises(sp.Unavailable, match="missing or not the pinned sha256"):
        sp.load("fakeseed", str(served / "cache"))


def test_unreachable_and_empty_cache(served):
    pin = wheel(served)._replace(url="missing/fakeseed-1.0-py3-none-any.whl")
    with pytest.raises(sp.Unavailable, match="unreachable .* and not in .*fakeseed-1.0"):
        sp.fetch_one(pin, str(served / "cache"))
    assert not [f for f in os.listdir(served / "cache" / "fakeseed-1.0") if f.endswith(".part")]


def test_module_that_cannot_load(served, monkeypatch):
    pin = wheel(served, body="import a_dependency_not_installed\n")
    monkeypatch.setitem(sp.PINS, "fakeseed", pin)
    sp.fetch_one(pin, str(served / "cache"))
    with pytest.raises(sp.Unavailable, match="ModuleNotFoundError: No module named 'a_dependency_not_installed'"):
        sp.load("fakeseed", str(served / "cache"))
    assert "fakeseed.utils.distributed" not in sys.modules


def needed_wheel(tmp_path, members):
    """A wheel of the package fakedep (members: name -> text) and a Pin of its whole fakedep/."""
    path = tmp_path / "server" / "fakedep-2.0-py3-none-any.whl"
    path.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return sp.Pin("fakedep", "2.0", path.name, digest, "fakedep", ("fakedep/",), True)


def test_needs_on_sys_path(served, monkeypatch):
    dep = needed_wheel(served, {"fakedep/__init__.py": "from .inner import VALUE\n", "fakedep/inner.py": "VALUE = 7\n",
                                "fakedep-2.0.dist-info/METADATA": "", "other/x.py": ""})
    pin = wheel(served, body="import fakedep\ndef answer():\n    return fakedep.VALUE * 6\n")._replace(needs=(dep,))
    monkeypatch.setitem(sp.PINS, "fakeseed", pin)
    monkeypatch.setattr(sys, "path", list(sys.path))
    cache = str(served / "cache")
    sp.fetch_one(pin, cache)
    with pytest.raises(sp.Unavailable, match="fakedep-2.0-py3-none-any.whl: missing"):  # the need not fetched
        sp.load("fakeseed", cache)
    where = sp.fetch_one(dep, cache)
    assert sorted(os.listdir(os.path.join(where, "tree"))) == ["fakedep"]  # the prefix's files only
    try:
        assert sp.load("fakeseed", cache).answer() == 42
    finally:
        sys.modules.pop("fakedep", None), sys.modules.pop("fakedep.inner", None)


def test_member_outside_the_tree_refused(served):
    dep = needed_wheel(served, {"fakedep/../../escaped.py": "", "fakedep/ok.py": ""})
    with pytest.raises(sp.Unavailable, match="member 'fakedep/../../escaped.py' would land outside"):
        sp.fetch_one(dep, str(served / "cache"))
    assert not (served / "escaped.py").exists() and not (served / "cache" / "escaped.py").exists()


def test_pins():
    for seed, main in sp.PINS.items():
        assert len(main.files) >= 1 and main.files[0] == main.module.replace(".", "/") + ".py", seed
        for pin in (main, *main.needs):
            name = os.path.basename(pin.url)
            assert name.startswith(f"{pin.dist.replace('-', '_')}-{pin.version}-") and name.endswith(".whl"), seed
            assert len(pin.sha256) == 64 and (pin is main or pin.loads and not pin.needs), seed


def test_old_torch_skips(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "__version__", "1.13.1")
    monkeypatch.setattr(sys, "argv", ["seed_packages.py", "fetch"])
    assert sp.main() == 0
    assert capsys.readouterr().out.startswith("seed-packages SKIP: torch 1.13.1 here")


def test_axolotl_stand_ins_only_where_missing(monkeypatch):
    """safetensors and huggingface_hub stand in where Python lacks them; a real one is kept."""
    real = type(sys)("huggingface_hub")
    monkeypatch.setitem(sys.modules, "huggingface_hub", real)
    for name in ("safetensors", "safetensors.torch", "huggingface_hub.utils"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sp.importlib.util, "find_spec", lambda name, *args: None)
    try:
        sp._parents("axolotl", "unused")
        assert sys.modules["huggingface_hub"] is real and "huggingface_hub.utils" not in sys.modules
        with pytest.raises(NotImplementedError, match="safetensors is a stand-in here"):
            sys.modules["safetensors.torch"].load_file("model.safetensors")
    finally:
        sys.modules.pop("safetensors", None), sys.modules.pop("safetensors.torch", None)
