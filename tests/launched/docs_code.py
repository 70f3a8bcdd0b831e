#!/usr/bin/env python3
"""The docs' code, compiled and run: every fenced block of README.md and docs/*.md.

A block is run as the reader would run it, unless the comment just above its fence says otherwise:

  (no marker)                          a whole program or command: run (below)
  <!-- docs-code: fragment -->         a part of a program or command line: Python's and shell's
                                       syntax checked; C++ compiled (below)
  <!-- docs-code: fragment             the same, for C++, with the declarations the reader has
  DECLARATIONS                         (`double loss = 1.0;`, `std::string load_config();`): the
  -->                                  comment is not rendered, the compiler reads it
  <!-- docs-code: not run: REASON -->  a whole command this suite does not run here (REASON: it
                                       installs packages, is the suite itself, needs a GPU, ...):
                                       its syntax checked
  <!-- docs-code: on the dev cluster -->
                                       a shell block of commands a user types on a cluster, with
                                       `jobkit` and `python3` on PATH: run on the suite's dev
                                       cluster (below)
  <!-- docs-code: with the block above as NAME -->
                                       the same, for a block that runs the program or script of the
                                       runnable block above it, which it calls NAME (`./train`,
                                       `train.py`)

A fence without a language, or `text`, is output (an error message, a file listing): not code.
Any other language (ini, meson, cmake) needs one of the markers: this test knows no way to run it.

Run: a `cpp` block is compiled against the build (its uninstalled pkg-config file) and run as a
step of 4 ranks on 2 nodes of the dev cluster; a `python` block runs as such a step with the
build's module on PYTHONPATH; a `sh` block runs under `bash -euo pipefail` in a directory where
`build` is the build and `slurm`, `scripts`, `examples` are the checkout's, with a dev cluster of
its own (so that `slurm/dev-cluster.sh start` in a block starts a private one). A shell block "on
the dev cluster" or "with the block above" runs instead on the suite's dev cluster, in such a
directory (which every node sees) with the build's `jobkit` and the suite's Python first on PATH as
`jobkit` and `python3` and the build's module on PYTHONPATH; "with the block above", the directory
also holds the program (or script) above under its NAME. Every run must exit 0 within its time.

A C++ fragment is compiled (not linked) as one function's body, with its `#include` lines and then
its declarations above that function and `<jobkit/jobkit.hpp>` included; one
that includes <jobkit/nccl.hpp> also sees CUDA's headers and is left out (said so) from a build
without NCCL.

Then the Python signatures the docs show (an inline `name(params)` in docs/python.md whose name is
the package's) are checked against the module: each parameter shown exists under that name, in
that order, keyword-only where the docs put it after `*`, with the default the docs give.

usage: docs_code.py REPO BUILD_ROOT PYTHON PYTHON_PATH WORK_DIR [--list]
  WORK_DIR  emptied, then holds the blocks and their programs; every node must see it (the dev
            cluster's nodes have a /tmp of their own)
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
import shutil
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```([^\s`]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(
    r"<!--\s*docs-code:\s*(?P<kind>fragment|not run:|on the dev cluster|with the block above as)[ \t]*(?P<rest>.*?)\s*-->\s*$", re.S
)
RUNNABLE = {"cpp", "python", "sh"}
OUTPUT = {"", "text"}


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    body: str
    kind: str  # run, fragment, not-run, output, cluster (on the dev cluster), after (with the block above)
    reason: str = ""  # not-run: why; fragment: the C++ declarations; after: the name of the block above

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line} ({self.lang or 'text'})"


def marker_before(text: str, start: int) -> re.Match | None:
    """The docs-code comment that ends just above a fence at start, if any."""
    before = text[:start].rstrip("\n")
    if not before.endswith("-->"):
        return None
    return MARKER.fullmatch(before[before.rfind("<!--") :].strip())


def blocks(repo: Path) -> list[Block]:
    found = []
    for path in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]:
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            marker = marker_before(text, m.start())
            lang = m.group(1)
            if lang in OUTPUT:
                kind, reason = "output", ""
            elif marker is None:
                kind, reason = "run", ""
            else:
                kind = {
                    "fragment": "fragment",
                    "not run:": "not-run",
                    "on the dev cluster": "cluster",
                    "with the block above as": "after",
                }[marker.group("kind")]
                reason = marker.group("rest").strip()
            found.append(Block(path.relative_to(repo), line, lang, m.group(2), kind, reason))
    return found


def run(cmd: list[str], timeout: int, **kwargs) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(timed out after {timeout} s)"
    return p.returncode, p.stdout


def tail(text: str, n: int = 25) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-n:])


class Runner:
    def __init__(self, repo: Path, build: Path, python: str, python_path: str, work: Path):
        self.repo, self.build, self.python, self.python_path, self.work = repo, build, python, python_path, work
        self.step = ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "-N2", "-n4"]
        self.above: Path | None = None  # the program or script of the last runnable block
        self.flags: tuple[list[str], str | None] | None = None  # pkg-config's answer, asked once

    def syntax(self, b: Block) -> str | None:
        if b.lang == "python":
            try:
                compile(b.body, str(b.path), "exec")
            except SyntaxError as e:
                return f"not Python: {e}"
        elif b.lang == "sh":
            rc, out = run(["bash", "-n", "-c", b.body], 30)
            if rc != 0:
                return f"not shell: {out.strip()}"
        return None

    def compile_flags(self) -> tuple[list[str], str | None]:
        if self.flags is None:
            env = dict(os.environ, PKG_CONFIG_PATH=str(self.build / "meson-uninstalled"))
            rc, flags = run(["pkg-config", "--cflags", "--libs", "jobkit"], 30, env=env)
            self.flags = (flags.split(), None) if rc == 0 else (
                [], f"pkg-config found no uninstalled jobkit in {self.build}/meson-uninstalled: {flags.strip()}")
        return list(self.flags[0]), self.flags[1]  # a copy: a block may add its own

    def block_dir(self, n: int) -> Path:
        """A shell block's own directory, with the build, slurm/, scripts/ and examples/ in it."""
        here = self.work / f"sh{n}"
        (here / "bin").mkdir(parents=True)
        (here / "build").symlink_to(self.build)
        for name in ("slurm", "scripts", "examples"):
            (here / name).symlink_to(self.repo / name)
        return here

    def cpp(self, b: Block, n: int) -> str | None:
        src = self.work / f"block{n}.cpp"
        exe = self.work / f"block{n}"
        src.write_text(b.body)
        flags, why = self.compile_flags()
        if why:
            return why
        libdir = self.build / "src"
        cmd = ["c++", "-std=c++20", "-O0", "-o", str(exe), str(src), *flags, f"-Wl,-rpath,{libdir}"]
        rc, out = run(cmd, 400)
        if rc != 0:
            return f"does not compile:\n{tail(out)}"
        if "int main(" not in b.body:
            return None
        self.above = exe
        rc, out = run([*self.step, "timeout", "120", str(exe)], 180)
        print(tail(out, 8))
        return None if rc == 0 else f"the step exited {rc}:\n{tail(out)}"

    def cpp_fragment(self, b: Block, n: int) -> str | None:
        """Compiles a fragment as a function's body below its includes and declarations."""
        lines = b.body.splitlines()
        includes = [line for line in lines if line.lstrip().startswith("#include")]
        body = ["" if line.lstrip().startswith("#include") else line for line in lines]  # lines kept in place
        flags, why = self.compile_flags()
        if why:
            return why
        if any("jobkit/nccl.hpp" in line for line in includes):
            config = (self.build / "include" / "jobkit" / "config.hpp").read_text()
            if "#define JOBKIT_HAS_NCCL 1" not in config:
                print(f"   (not compiled: this build has no NCCL, which {b.where} includes)")
                return None
            cuda = Path(os.environ.get("CUDA_PATH", "/usr/local/cuda")) / "include"
            flags.append(f"-I{cuda}")
        src = self.work / f"fragment{n}.cpp"
        src.write_text(
            "\n".join(
                [
                    "#include <jobkit/jobkit.hpp>",
                    *includes,
                    f"#line 1 \"{b.path}:{b.line} (the declarations above the block)\"",
                    b.reason,
                    "[[maybe_unused]] static int docs_fragment() {",
                    f"#line {b.line + 1} \"{b.path}\"",
                    *body,
                    "  return 0;",
                    "}",
                    "",
                ]
            )
        )
        cmd = ["c++", "-std=c++20", "-fsyntax-only", str(src), *flags]
        rc, out = run(cmd, 400)
        return None if rc == 0 else f"does not compile:\n{tail(out)}"

    def python_step(self, b: Block, n: int) -> str | None:
        script = self.work / f"block{n}.py"
        script.write_text(b.body)
        self.above = script
        env = dict(os.environ, PYTHONPATH=self.python_path)
        rc, out = run([*self.step, "timeout", "240", self.python, str(script)], 300, env=env, cwd=self.work)
        print(tail(out, 8))
        return None if rc == 0 else f"the step exited {rc}:\n{tail(out)}"

    def shell(self, b: Block, n: int) -> str | None:
        here = self.block_dir(n)
        rc, out = run(["bash", "-euo", "pipefail", "-c", b.body], 300, cwd=here, env=self.private_cluster_env())
        print(tail(out, 8))
        if rc != 0:
            run([str(self.repo / "slurm/dev-cluster.sh"), "stop"], 120, env=self.private_cluster_env())
        return None if rc == 0 else f"exited {rc}:\n{tail(out)}"

    def on_cluster(self, b: Block, n: int) -> str | None:
        """A shell block on the suite's dev cluster; "after": with the block above's program as b.reason names it."""
        if b.kind == "after" and self.above is None:
            return "no runnable block above it"
        here = self.block_dir(n)
        if b.kind == "after":
            name = here / b.reason
            name.parent.mkdir(parents=True, exist_ok=True)
            name.symlink_to(self.above)
        (here / "bin" / "python3").symlink_to(self.python)
        (here / "bin" / "jobkit").symlink_to(self.build / "src" / "cli" / "jobkit")
        env = dict(os.environ, PYTHONPATH=self.python_path, PATH=f"{here / 'bin'}:{os.environ['PATH']}")
        rc, out = run(["bash", "-euo", "pipefail", "-c", b.body], 300, cwd=here, env=env)
        print(tail(out, 8))
        if rc != 0:  # what the block submitted ends with it (the launched tests run one at a time)
            run(["scancel", f"--user={os.getuid()}"], 30)
        return None if rc == 0 else f"exited {rc}:\n{tail(out)}"

    def private_cluster_env(self) -> dict[str, str]:
        """The suite's cluster's settings, moved to the next free block: state dir, ports, subnet."""
        rc, out = run([str(self.repo / "slurm/dev-cluster.sh"), "settings"], 30)
        settings = dict(item.split("=", 1) for item in out.split()) if rc == 0 else {}
        subnet = settings.get("cluster_subnet", "198.18.0")
        head, last = subnet.rsplit(".", 1)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOBKIT_CLUSTER_"))}
        env.update(
            JOBKIT_CLUSTER_DIR=settings.get("cluster_dir", "/var/lib/jobkit-dev-cluster") + "-docs",
            JOBKIT_CLUSTER_PORT=str(int(settings.get("cluster_port", "6817")) + 200),
            JOBKIT_CLUSTER_SUBNET=f"{head}.{int(last) + 2}",
        )
        return env


# ---- Signatures ----

SPAN = re.compile(r"`((?:jobkit\.)?[A-Za-z_][\w.]*)\(([^`()]*)\)`")
PARAM = re.compile(r"^(\*\*?)?([A-Za-z_]\w*)(?:=(.+))?$|^\*$|^/$")


def documented_signatures(text: str) -> list[tuple[str, list[str], int]]:
    found = []
    for m in SPAN.finditer(text):
        params = [p.strip() for p in m.group(2).split(",")] if m.group(2).strip() else []
        if all(PARAM.match(p) for p in params):
            found.append((m.group(1), params, text.count("\n", 0, m.start()) + 1))
    return found


def resolve(name: str):
    import importlib

    parts = name.split(".")
    if parts[0] != "jobkit":
        parts = ["jobkit", *parts]
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None


def value_of(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    try:
        return eval(compile(ast.parse(text, mode="eval"), "<doc>", "eval"), {"__builtins__": {}}, {})
    except Exception:  # noqa: BLE001: a default the docs write as prose, compared as text
        return text


def check_signature(name: str, params: list[str], obj) -> str | None:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None  # a pybind11 function without a signature: its stub is checked by stubtest
    real = [p for p in sig.parameters.values() if p.name != "self"]
    by_name = {p.name: p for p in real}
    keyword_only = False
    order = []
    for shown in params:
        if shown in ("*", "/"):
            keyword_only = keyword_only or shown == "*"
            continue
        m = PARAM.match(shown)
        star, pname, default = m.group(1), m.group(2), m.group(3)
        p = by_name.get(pname)
        if p is None:
            return f"has no parameter '{pname}' (it has: {', '.join(str(q) for q in real)})"
        if star == "*" and p.kind != p.VAR_POSITIONAL or star == "**" and p.kind != p.VAR_KEYWORD:
            return f"'{shown}' is {p.kind.description} there"
        if keyword_only and not star and p.kind != p.KEYWORD_ONLY:
            return f"'{pname}' is shown keyword-only but is {p.kind.description}"
        if not keyword_only and not star and p.kind == p.KEYWORD_ONLY:
            return f"'{pname}' is keyword-only, shown positional"
        if default is not None:
            if p.default is p.empty:
                return f"'{pname}' has no default, the docs show {default}"
            if value_of(default) != p.default:
                return f"'{pname}' defaults to {p.default!r}, the docs show {default}"
        order.append(real.index(p))
    if order != sorted(order):
        return "the docs show its parameters in another order than " + str(sig)
    return None


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--list"]
    if len(args) != 5:
        print(__doc__.rsplit("usage: ", 1)[1], file=sys.stderr)
        return 2
    repo, build = Path(args[0]).resolve(), Path(args[1]).resolve()
    python, python_path, work = args[2], str(Path(args[3]).resolve()), Path(args[4]).resolve()
    found = blocks(repo)
    if "--list" in sys.argv:
        for b in found:
            print(f"{b.where}: {b.kind}{': ' + b.reason if b.reason else ''}")
        return 0

    failures = []
    counts: dict[str, int] = {}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    runner = Runner(repo, build, python, python_path, work)
    for n, b in enumerate(found):
        counts[b.kind] = counts.get(b.kind, 0) + 1
        if b.kind == "output":
            continue
        if b.kind == "not-run" and not b.reason:
            failures.append(f"{b.where}: 'not run:' without a reason")
            continue
        if b.kind == "run" and b.lang not in RUNNABLE or b.kind in ("cluster", "after") and b.lang != "sh":
            failures.append(f"{b.where}: no way to run a {b.lang} block: mark it fragment or not run")
            continue
        why = runner.syntax(b)
        if why is None and b.kind == "run":
            print(f"== {b.where}: running", flush=True)
            why = {"cpp": runner.cpp, "python": runner.python_step, "sh": runner.shell}[b.lang](b, n)
        elif why is None and b.kind in ("cluster", "after"):
            also = f", with the block above as {b.reason}" if b.kind == "after" else ""
            print(f"== {b.where}: running on the dev cluster{also}", flush=True)
            why = runner.on_cluster(b, n)
        elif why is None and b.kind == "fragment" and b.lang == "cpp":
            why = runner.cpp_fragment(b, n)
        print(f"{b.where}: {b.kind}: {'FAILED: ' + why if why else 'ok'}", flush=True)
        if why:
            failures.append(f"{b.where}: {why}")

    sys.path.insert(0, python_path)
    checked = 0
    doc = repo / "docs" / "python.md"
    # The reference: python.md up to its first section; the sections after it speak of the seeds'
    # functions and torch's as well, whose names are not the package's.
    reference = doc.read_text().split("\n## ", 1)[0]
    for name, params, line in documented_signatures(reference):
        obj = resolve(name)
        if obj is None or not callable(obj):
            continue
        checked += 1
        why = check_signature(name, params, obj)
        if why:
            failures.append(f"docs/python.md:{line}: `{name}({', '.join(params)})` {why}")
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    print(f"blocks: {summary}; Python signatures checked: {checked}")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
