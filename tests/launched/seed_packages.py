"""The seeds' own distributed modules from their PyPI releases, for the side-by-side compat checks.

Each release below is a pure-Python wheel, pinned by URL and sha256. Only the module under test is
loaded (importlib, under its own name), with none of the package's dependencies installed: where
its imports reach into its own package, the files it needs come from the same wheel, and a parent
package is an empty stand-in. Stand-ins never replace a function under test or one it calls for its
result (see STAND_INS). A release the module needs besides torch (axolotl: accelerate, whose
PartialState decides axolotl's is_distributed(), three files of transformers, tqdm) is a Pin of the
seed's `needs`, pinned, fetched and verified the same way; the files taken from it go on sys.path.

usage: seed_packages.py fetch    downloads what is missing into the cache and verifies every wheel;
                                 prints "seed-packages DIR" or "seed-packages SKIP: reason" (exit 0)
The cache: $JOBKIT_SEED_PACKAGES, else /var/cache/jobkit/seed-packages (outside any checkout),
one directory per release (<name>-<version>/) with the wheel and the files taken from it.
$JOBKIT_SEED_CA_FILE: a bundle of certificate authorities for the download (behind a TLS proxy).
"""
import ast
import hashlib
import importlib.util
import logging
import os
import shutil
import ssl
import sys
import tempfile
import types
import typing
import urllib.request
import zipfile
from typing import NamedTuple

HOST = "https://files.pythonhosted.org/packages/"


class Pin(NamedTuple):
    dist: str
    version: str
    url: str  # under HOST
    sha256: str
    module: str  # the seed's module under test (of a need: the module the seed imports from it)
    files: tuple  # the wheel's files it needs (the module's own file first; "pkg/": all under pkg/)
    loads: bool  # what was found on Debian 13 (python 3.13, torch 2.6) when pinned
    needs: tuple = ()  # Pins of the releases it imports; their files' trees go on sys.path


# What axolotl's distributed.py imports besides torch: accelerate 1.13.0 (axolotl 0.19.0's own pin,
# whole: PartialState decides is_distributed()), three files of transformers (is_torch_*_available)
# and tqdm (transformers' logging.py imports it).
AXOLOTL_NEEDS = (
    Pin("accelerate", "1.13.0", "7e/46/02ac5e262d4af18054b3e922b2baedbb2a03289ee792162de60a865defc5/"
        "accelerate-1.13.0-py3-none-any.whl", "cf1a3efb96c18f7b152eb0fa7490f3710b19c3f395699358f08decca2b8b62e0",
        "accelerate", ("accelerate/",), True),
    Pin("transformers", "5.16.1", "0d/4d/ee3728674c0bbc637bb4af88ccf0be697f92e4e90b55f5dc110c44d61b61/"
        "transformers-5.16.1-py3-none-any.whl", "2f2d5b98a5ad3718713653734298fa620754ed683702a635ebb587df3ed29c7e",
        "transformers.utils.import_utils",
        ("transformers/utils/import_utils.py", "transformers/utils/logging.py", "transformers/_typing.py"), True),
    Pin("tqdm", "4.67.1", "d0/30/dc54f88dd4a2b5dc8a0279bdd7270e735851848b762aeb1c1184ed1f6b14/"
        "tqdm-4.67.1-py3-none-any.whl", "26445eca388f82e72884e0d580d5464cd801a3ea01e63e5601bdff9ba6a48de2",
        "tqdm", ("tqdm/",), True),
)

PINS = {
    "axolotl": Pin(
        "axolotl", "0.19.0", "86/d6/98c3b575af7cc775792af0c9eee4957935b544ceb9f0fec05db2a97e7466/"
        "axolotl-0.19.0-py3-none-any.whl", "f28eb3ad3709975eec4adfe13307dd980c7e7917cc43cb03f2c6f26c007135cc",
        "axolotl.utils.distributed", ("axolotl/utils/distributed.py",), True, AXOLOTL_NEEDS),
    "composer": Pin(
        "mosaicml", "0.32.1", "4c/ad/eb9101cf2a0288984c5d1bc3a80409277e5861c877338b406949e6177e81/"
        "mosaicml-0.32.1-py3-none-any.whl", "d5dc601cec7af281d6a30ab8baccb7c495ee0044237893a991081f54617f8919",
        "composer.utils.dist", ("composer/utils/dist.py", "composer/utils/device.py"), True),
    "modelopt": Pin(
        "nvidia-modelopt", "0.47.0", "6d/46/f32f6183f6a26db8c6bf5c70f89f68ae2cc55c3fbb981016a772c93c4fc2/"
        "nvidia_modelopt-0.47.0-py3-none-any.whl", "db13e62d7efe4a1512e8b8c3f479e28d64022306f94a194f13234e7dca1d3120",
        "modelopt.torch.export.distribute",
        ("modelopt/torch/export/distribute.py", "modelopt/torch/utils/distributed.py",
         "modelopt/torch/utils/serialization.py"), True),
    "olmo_core": Pin(
        "ai2-olmo-core", "3.0.0", "ab/f2/b46159009fb078c5df234119f304ca6e211142e1a6f6bc9b100c2dc58419/"
        "ai2_olmo_core-3.0.0-py3-none-any.whl", "9006e75b51c05ef8d701826f5f45980672ebade86f8050e185ae26b4626b4ad5",
        "olmo_core.distributed.utils", ("olmo_core/distributed/utils.py", "olmo_core/exceptions.py",
                                        "olmo_core/utils.py"), True),
    "speechbrain": Pin(
        "speechbrain", "1.1.2", "38/c7/e66ed19df444c56a9c6176c153b4b373803384651b455d38ee9fef97db62/"
        "speechbrain-1.1.2-py3-none-any.whl", "9fea4144c917ea58bcf13f17a1a1759179ed7472a30ec8416e7c7c8cf21d9c9a",
        "speechbrain.utils.distributed", ("speechbrain/utils/distributed.py",), True),
}

# What stands in for the rest of a seed's package, and why (none of it is under test):
STAND_INS = {
    "axolotl": "accelerate whole (its wheel's accelerate/); of transformers only utils/import_utils.py, "
               "utils/logging.py and _typing.py, under namespace packages (is_torch_cuda/mps/npu_available, real); "
               "where this Python lacks them (Debian 13's does): huggingface_hub.utils holding only the "
               "progress-bar switches that transformers' logging.py reads at import (huggingface_hub 1.x needs httpx "
               "and more), and safetensors and safetensors.torch whose functions raise (accelerate imports them at "
               "module level, a compiled package; PartialState never calls them)",
    "composer": "empty packages composer, composer.utils (dist.py imports composer.utils.device, taken from the "
                "wheel)",
    "modelopt": "empty packages modelopt, modelopt.torch, modelopt.torch.export; modelopt.torch.utils holding the "
                "wheel's distributed and safe_load; export.model_config_utils (needs modelopt.torch.quantization) "
                "raising, so get_configs_parallel is compared on None configs only",
    "olmo_core": "empty packages olmo_core, olmo_core.distributed; olmo_core.utils holding the wheel's own "
                 "move_to_device, set_env_var and log_or_print (its file imports rich)",
}


class Unavailable(Exception):
    """The seed's module cannot be used here; the message says why."""


def cache_dir() -> str:
    return os.environ.get("JOBKIT_SEED_PACKAGES") or "/var/cache/jobkit/seed-packages"


def label(seed: str) -> str:
    return f"{PINS[seed].dist} {PINS[seed].version}"


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _release_dir(pin: Pin, cache: str) -> str:
    return os.path.join(cache, f"{pin.dist}-{pin.version}")


def fetch_one(pin: Pin, cache: str) -> str:
    """The release's directory: the wheel, verified, and its files under tree/. Raises Unavailable."""
    where = _release_dir(pin, cache)
    wheel = os.path.join(where, os.path.basename(pin.url))
    if not os.path.exists(wheel):
        os.makedirs(where, exist_ok=True)
        part = tempfile.NamedTemporaryFile(dir=where, suffix=".part", delete=False)
        try:
            authorities = os.environ.get("JOBKIT_SEED_CA_FILE")  # a proxy's certificate authorities
            context = ssl.create_default_context(cafile=authorities) if authorities else None
            with part, urllib.request.urlopen(HOST + pin.url, timeout=60, context=context) as response:
                shutil.copyfileobj(response, part)
        except OSError as e:
            os.unlink(part.name)
            raise Unavailable(f"{pin.dist} {pin.version}: {HOST + pin.url} unreachable ({e}) and not in {where}")
        os.replace(part.name, wheel)
    got = _sha256(wheel)
    if got != pin.sha256:
        raise Unavailable(f"{wheel}: sha256 {got}, pinned {pin.sha256} (remove it to fetch again)")
    tree = os.path.join(where, "tree")
    if not all(os.path.exists(os.path.join(tree, f)) for f in pin.files):
        fresh = tempfile.mkdtemp(dir=where)
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if any(n == f or f.endswith("/") and n.startswith(f) and
                                                    not n.endswith("/") for f in pin.files)]
            for name in names:
                if name.startswith("/") or ".." in name.split("/"):  # the pinned wheels have none
                    raise Unavailable(f"{wheel}: member {name!r} would land outside {fresh}")
                os.makedirs(os.path.dirname(os.path.join(fresh, name)), exist_ok=True)
                with z.open(name) as src, open(os.path.join(fresh, name), "wb") as dst:
                    shutil.copyfileobj(src, dst)
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(fresh, tree)
    return where


def _package(name: str) -> types.ModuleType:
    """An empty stand-in package, made once."""
    if name not in sys.modules:
        module = types.ModuleType(name)
        module.__path__ = []
        sys.modules[name] = module
    return sys.modules[name]


def _load(name: str, tree: str) -> types.ModuleType:
    """The wheel's file for module ``name``, loaded under that name (and set on its parent)."""
    path = os.path.join(tree, *name.split(".")) + ".py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def _functions_of(path: str, names: set, into: types.ModuleType) -> None:
    """Runs the definitions of the functions ``names`` from the file at path (the seed's own code)
    in the namespace of ``into``."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    body = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    if {node.name for node in body} != names:
        raise Unavailable(f"{path} lacks {sorted(names - {node.name for node in body})}")
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), into.__dict__)


def _parents(seed: str, tree: str) -> None:
    """The stand-ins of STAND_INS and the wheel's helper files the module imports."""
    if seed == "axolotl":  # stand-ins where this Python lacks the package
        if "huggingface_hub" not in sys.modules and importlib.util.find_spec("huggingface_hub") is None:
            hub = _package("huggingface_hub.utils")
            hub.are_progress_bars_disabled, hub.enable_progress_bars, hub.disable_progress_bars = (
                lambda name=None: True, lambda name=None: None, lambda name=None: None)
            _package("huggingface_hub").utils = hub
        if "safetensors" not in sys.modules and importlib.util.find_spec("safetensors") is None:
            def not_loaded(*args, **kwargs):
                raise NotImplementedError("safetensors is a stand-in here (seed_packages.STAND_INS)")

            _package("safetensors").safe_open = not_loaded
            _package("safetensors.torch").__dict__.update(dict.fromkeys(("load_file", "save_file", "load_model",
                                                                          "save_model"), not_loaded))
    elif seed == "composer":
        _package("composer"), _package("composer.utils")
        _load("composer.utils.device", tree)
    elif seed == "modelopt":
        for name in ("modelopt", "modelopt.torch", "modelopt.torch.utils", "modelopt.torch.export"):
            _package(name)
        _load("modelopt.torch.utils.distributed", tree)
        sys.modules["modelopt.torch.utils"].safe_load = _load("modelopt.torch.utils.serialization", tree).safe_load
        converters = types.ModuleType("modelopt.torch.export.model_config_utils")

        def not_loaded(*args, **kwargs):
            raise NotImplementedError("model_config_utils is not loaded (it imports modelopt.torch.quantization)")

        for name in ("model_config_from_dict", "model_config_to_dict", "restore_model_config",
                     "split_config_and_weights"):
            setattr(converters, name, not_loaded)
        sys.modules[converters.__name__] = converters
    elif seed == "olmo_core":
        _package("olmo_core"), _package("olmo_core.distributed")
        _load("olmo_core.exceptions", tree)
        utils = types.ModuleType("olmo_core.utils")
        utils.__dict__.update(os=os, logging=logging, torch=__import__("torch"), Optional=typing.Optional,
                              T=typing.TypeVar("T"), log=logging.getLogger("olmo_core.utils"),
                              _LOGGING_CONFIGURED=False)
        _functions_of(os.path.join(tree, "olmo_core", "utils.py"), {"move_to_device", "set_env_var", "log_or_print"},
                      utils)
        sys.modules["olmo_core.utils"] = utils


def load(seed: str, cache: str) -> types.ModuleType:
    """The seed's own module from its pinned release in cache (fetched before). Raises Unavailable."""
    pin = PINS[seed]
    where = _release_dir(pin, cache)
    for each in (pin, *pin.needs):
        wheel = os.path.join(_release_dir(each, cache), os.path.basename(each.url))
        if not os.path.exists(wheel) or _sha256(wheel) != each.sha256:
            raise Unavailable(f"{wheel}: missing or not the pinned sha256")
    if pin.module in sys.modules:
        return sys.modules[pin.module]
    tree = os.path.join(where, "tree")
    for each in pin.needs:
        sys.path.insert(0, os.path.join(_release_dir(each, cache), "tree"))
    try:
        _parents(seed, tree)
        return _load(pin.module, tree)
    except Unavailable:
        raise
    except Exception as e:
        raise Unavailable(f"{type(e).__name__}: {e}") from e


def torch_too_old() -> str:
    """Why the pinned releases cannot run with this torch, or ""."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 6):
        return f"torch {torch.__version__} here: the pinned releases import torch >= 2.6 APIs (DTensor, fully_shard, " \
               "torch.accelerator); compared on Debian 13 only"
    return ""


def main() -> int:
    if sys.argv[1:] != ["fetch"]:
        print(__doc__, file=sys.stderr)
        return 2
    why = torch_too_old()
    cache = cache_dir()
    try:
        if not why:
            for pin in PINS.values():
                for each in (pin, *pin.needs):
                    fetch_one(each, cache)
    except (Unavailable, OSError) as e:
        why = str(e)
    print(f"seed-packages SKIP: {why}" if why else f"seed-packages {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
