#!/usr/bin/python3
"""Every environment variable jobkit reads is in docs/environment.md, and every one documented there is
read somewhere (test `environment-doc`).

Read means, in the library, the CLI and the Python module: a name passed to an environment lookup
(`get("NAME")`, `getenv`, `has`, a `*_variable("NAME", ...)` helper; Python's `os.environ.get`,
`os.environ[...]`, `os.getenv`, `"NAME" in os.environ`); in the scripts users run (scripts/*.sh,
slurm/*.sbatch, slurm/dev-cluster.sh): a shell default, `${NAME:-...}`, `${NAME-...}`, `${NAME:+...}`.
Documented means named in docs/environment.md as `NAME` or `NAME=...` in backquotes. The other way,
each name in the first column of a table there (the variables it documents; prose also names those of
PMIx, NCCL and Slurm, which they read) must appear as a whole word in the library, the Python module,
the scripts, bench/ or tests/ (some are read through lists of names, some by benchmarks and tests). Prints each mismatch with where it was found; exit status 1 on any.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Read by the scripts but not jobkit's to document: set by the system or by the files the scripts
# source (/etc/os-release), or the standard ones of the tools they run.
NOT_OURS = {"HOME", "PATH", "PWD", "USER", "TERM", "TMPDIR", "SHELL", "LANG", "VERSION_CODENAME", "ID",
            "VERSION_ID", "BASH_SOURCE", "EUID", "UID", "SECONDS", "RANDOM", "LINENO", "PIPESTATUS"}

NAME = r"([A-Z][A-Z0-9_]{2,})"
CODE_READ = re.compile(r"(?:\bget|\bgetenv|\bhas|_variable|\bsecure_getenv)\(\s*\"" + NAME + r"\"")
PY_READ = re.compile(r"(?:os\.environ\.get|os\.getenv|environ\.get)\(\s*\"" + NAME + r"\"|os\.environ\[\s*\"" + NAME
                     + r"\"\s*\]|\"" + NAME + r"\"\s+(?:not\s+)?in\s+os\.environ")
SHELL_READ = re.compile(r"\$\{" + NAME + r"(?::?[-+])")
DOCUMENTED = re.compile(r"`" + NAME + r"(?:`|=)")
TABLE_NAME = re.compile(r"`" + NAME + r"`")


def sources():
    """(path, kind) of every file whose reads count."""
    for pattern in ("src/**/*.cpp", "src/**/*.hpp", "include/**/*.hpp", "python/jobkit/*.cpp"):
        for path in sorted(ROOT.glob(pattern)):
            yield path, "code"
    for path in sorted(ROOT.glob("python/jobkit/**/*.py")):
        yield path, "python"
    for pattern in ("scripts/*.sh", "slurm/*.sbatch", "slurm/*.sh"):
        for path in sorted(ROOT.glob(pattern)):
            yield path, "shell"


def main():
    doc = (ROOT / "docs/environment.md").read_text()
    documented = set(DOCUMENTED.findall(doc))
    reads = {}
    texts = []
    for path, kind in sources():
        text = path.read_text()
        texts.append(text)
        pattern = {"code": CODE_READ, "python": PY_READ, "shell": SHELL_READ}[kind]
        for match in pattern.finditer(text):
            name = next(group for group in match.groups() if group)
            reads.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    problems = []
    for name in sorted(reads):
        if name not in documented and name not in NOT_OURS:
            problems.append(f"{name} is read ({', '.join(sorted(reads[name]))}) but not in docs/environment.md")
    for pattern in ("bench/**/*", "tests/**/*"):
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and path.suffix in (".sh", ".py", ".cpp", ".hpp", ".c", ".build"):
                texts.append(path.read_text(errors="replace"))
    everything = "\n".join(texts)
    in_tables = set()
    for line in doc.splitlines():
        if line.startswith("| `"):
            in_tables.update(TABLE_NAME.findall(line.split("|")[1]))
    for name in sorted(in_tables):
        if name not in reads and not re.search(r"(?<![A-Za-z0-9_])" + name + r"(?![A-Za-z0-9_])", everything):
            problems.append(f"{name} is in docs/environment.md but nothing reads it")
    for problem in problems:
        print(problem)
    print(f"{len(reads)} variables read, {len(in_tables)} documented in tables, {len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
