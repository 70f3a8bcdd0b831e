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
    path.parent.mkdir()
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


def test_pins():
    for seed, pin in sp.PINS.items():
        name = os.path.basename(pin.url)
        assert name.startswith(f"{pin.dist.replace('-', '_')}-{pin.version}-") and name.endswith(".whl"), seed
        assert len(pin.sha256) == 64 and pin.files[0] == pin.module.replace(".", "/") + ".py", seed


def test_old_torch_skips(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "__version__", "1.13.1")
    monkeypatch.setattr(sys, "argv", ["seed_packages.py", "fetch"])
    assert sp.main() == 0
    assert capsys.readouterr().out.startswith("seed-packages SKIP: torch 1.13.1 here")
