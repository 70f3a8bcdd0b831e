#!/usr/bin/env python3
"""Checks that libjobkit.so exports its API and nothing else (include/jobkit/export.hpp).

Lists the library's defined dynamic symbols (nm -D --defined-only -C) and fails on
- a symbol outside namespace jobkit (a std:: or fmt:: template instantiated in the library, a
  C function), except what the C++ runtime makes for the exported classes (their typeinfo,
  typeinfo names and vtables, which name a jobkit class) and the symbols the linker defines;
- a jobkit::detail:: symbol that is not in ALLOWED_DETAIL below (what the public headers'
  templates and inline functions call in the user's code), and any symbol of the internal
  namespaces jobkit::fold:: and jobkit::where::;
- a missing typeinfo of an exception: jobkit::error and its subclasses must be caught across the
  library's boundary;
- a function or class that a public header marks JOBKIT_API and the library does not export (a
  definition compiled where only an unmarked declaration is seen is hidden).
A symbol is judged by the entity it names (the qualified name before its parameters and template
arguments), not by the types in its signature: jobkit::group::run(jobkit::detail::collective_call
const&, ...) is jobkit::group's.

  tests/exported_symbols.py NM LIBRARY INCLUDE_DIR [no-nccl]
  (no-nccl: a build without NCCL, whose library lacks <jobkit/nccl.hpp>'s definitions)
"""
import pathlib
import re
import subprocess
import sys

# The detail:: functions and classes that the public headers' templates and inline functions call,
# and so instantiate in the user's code; each must stay exported.
ALLOWED_DETAIL = {
    "jobkit::detail::site_text",  # helpers.hpp: run_or_abort's message
    "jobkit::detail::describe_self",  # helpers.hpp: run_or_abort's message
    "jobkit::detail::nested_runs_directly",  # helpers.hpp: every helper, nested in a section
    "jobkit::detail::n_at_a_time_round",  # helpers.hpp: do_n_at_a_time
    "jobkit::detail::current_section",  # helpers.hpp: local_zero_first
    "jobkit::detail::section_guard::section_guard",  # helpers.hpp: the helpers' sections
    "jobkit::detail::section_guard::~section_guard",
    "jobkit::detail::check_reduce_op",  # collectives_impl.hpp: all_reduce(reduce_op)
    "jobkit::detail::throw_trailing_bytes",  # serialize.hpp: from_bytes
}
INTERNAL = ("jobkit::detail::", "jobkit::fold::", "jobkit::where::")
# What the C++ runtime makes for a class, naming it: kept when the class is jobkit's.
RUNTIME_PREFIXES = ("typeinfo for ", "typeinfo name for ", "vtable for ", "VTT for ", "guard variable for ",
                    "non-virtual thunk to ", "virtual thunk to ")
# What the linker defines in every shared library (binutils before 2.41 exports them).
LINKER = {"_init", "_fini", "_edata", "_end", "__bss_start"}
EXCEPTIONS = ("jobkit::error", "jobkit::timeout_error")


def entity(name):
    """The qualified name a demangled symbol names, without parameters or template arguments."""
    depth, out = 0, []
    for i, c in enumerate(name):
        if c == "<":
            # operator<, operator<<, operator<=> are names, not template arguments
            if name.endswith("operator", 0, i) or name.endswith("operator<", 0, i):
                out.append(c)
                continue
            depth += 1
        elif c == ">" and depth:
            depth -= 1
        elif c == "(" and depth == 0 and not name.endswith("operator", 0, i):
            break
        elif depth == 0:
            out.append(c)
    return "".join(out).replace("[abi:cxx11]", "").strip()


def problem(symbol):
    """Why this exported symbol should not be exported, or None."""
    if symbol in LINKER:
        return None
    name = symbol
    for prefix in RUNTIME_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    # Without the return type a function template's symbol has ("void jobkit::f<int>(int)"); an
    # operator's name may hold spaces ("jobkit::x::operator bool").
    what = entity(name)
    operator = re.search(r"\S*operator.*$", what)
    what = operator.group(0) if operator else what.split(" ")[-1]
    if not what.startswith("jobkit::"):
        return "outside namespace jobkit"
    if what.startswith(INTERNAL) and what not in ALLOWED_DETAIL:
        return "internal (not in the API, nor called by its templates)"
    return None


def marked(include, with_nccl):
    """The names of what the public headers mark JOBKIT_API: functions and classes."""
    names = set()
    for header in sorted(pathlib.Path(include, "jobkit").rglob("*.hpp")):
        if header.name == "nccl.hpp" and not with_nccl:
            continue
        text = header.read_text(encoding="utf-8")
        names |= set(re.findall(r"^(?:\[\[noreturn\]\] )?JOBKIT_API [^(;]*?(\w+)\(", text, re.M))
        names |= set(re.findall(r"^(?:class|struct) JOBKIT_API (\w+)", text, re.M))
    return names


def main():
    nm, library, include = sys.argv[1:4]
    with_nccl = sys.argv[4:5] != ["no-nccl"]
    listed = subprocess.run([nm, "-D", "--defined-only", "-C", library], check=True, capture_output=True, text=True)
    symbols = sorted({re.sub(r"^\S+\s+\S\s+", "", line) for line in listed.stdout.splitlines() if line.strip()})
    wrong = [(s, why) for s in symbols if (why := problem(s))]
    missing = [f"typeinfo for {e}" for e in EXCEPTIONS if f"typeinfo for {e}" not in symbols]
    exported = {part for s in symbols for part in re.findall(r"\w+", entity(s))}
    missing += [f"{name} (JOBKIT_API)" for name in sorted(marked(include, with_nccl)) if name not in exported]
    for s, why in wrong:
        print(f"exported but {why}: {s}")
    for s in missing:
        print(f"not exported: {s}")
    print(f"{library}: {len(symbols)} exported symbols, {len(wrong)} that should not be, {len(missing)} missing")
    return 1 if wrong or missing else 0


if __name__ == "__main__":
    sys.exit(main())
