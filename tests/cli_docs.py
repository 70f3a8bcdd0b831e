#!/usr/bin/python3
"""The `jobkit` command's help against docs/cli.md's table of commands (test `cli-docs`).

docs/cli.md opens with one block that lists every command and its options (`jobkit CMD [--flag
...]`): the table. This test fails on any drift between it and the program itself:
- the commands of `jobkit --help` are those of the table (the checkpoint actions too);
- for each command, the options its `jobkit CMD --help` names are those the table gives it (for
  `checkpoint`, action by action, from its usage lines);
- the usage error for an unknown checkpoint action names every action.

usage: cli_docs.py JOBKIT CLI_MD
"""

import re
import subprocess
import sys

FLAG = re.compile(r"--[a-z][a-z-]*")


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout + done.stderr


def table(cli_md):
    """{command: set of flags}, {checkpoint action: set of flags} from the first fenced block."""
    text = open(cli_md).read()
    block = text.split("```", 2)[1]
    commands, actions = {}, {}
    for line in block.splitlines():
        code = line.split("#", 1)[0]
        words = code.split()
        if len(words) < 2 or words[0] != "jobkit" or words[1].startswith("-"):
            continue
        flags = set(FLAG.findall(code))
        if words[1] == "checkpoint":
            actions[words[2]] = flags
            commands.setdefault("checkpoint", set()).update(flags)
        else:
            commands.setdefault(words[1], set()).update(flags)
    # `srun --label ... | jobkit fold [options]`: the filter form, no options of its own.
    return commands, actions


def help_commands(jobkit):
    status, out = run(jobkit, "--help")
    if status != 0:
        sys.exit(f"FAIL: jobkit --help: exit status {status}")
    section = out.split("commands:", 1)[1].split("\n\n", 1)[0]
    names, actions = set(), set()
    for line in section.splitlines():
        if not line.startswith("  ") or line.startswith("   "):
            continue  # a description's second line
        head = line.strip()
        if head.startswith("checkpoint"):
            names.add("checkpoint")
            actions.update(a.strip() for a in head[len("checkpoint"):].split(":", 1)[0].split(","))
        elif "," in head.split("  ")[0]:
            names.update(n.strip() for n in head.split(","))
        else:
            names.add(head.split()[0])
    return names, actions


def help_flags(out, name):
    """The options a command's help gives it: those of its usage lines (the lines up to the first
    blank one whose command is `name`) and of its "options:" section (lines that start with one)."""
    flags = set()
    usage, _, rest = out.partition("\n\n")
    for line in usage.splitlines():
        words = line.replace("usage:", "").split()
        if len(words) > 1 and words[0] == "jobkit" and words[1] == name:
            flags.update(FLAG.findall(line))
    if "\noptions:\n" in out:
        for line in out.split("\noptions:\n", 1)[1].splitlines():
            match = re.match(r"  (?:-[a-z], )?(--[a-z][a-z-]*)", line)  # not a description's next line
            if match:
                flags.add(match.group(1))
    return flags


def main():
    jobkit, cli_md = sys.argv[1], sys.argv[2]
    problems = []
    commands, actions = table(cli_md)
    names, help_actions = help_commands(jobkit)
    if names != set(commands):
        problems.append(f"jobkit --help names {sorted(names - set(commands))} that docs/cli.md's table does not, "
                        f"and the table {sorted(set(commands) - names)} that jobkit --help does not")
    if help_actions != set(actions):
        problems.append(f"jobkit --help's checkpoint actions {sorted(help_actions)} are not the table's {sorted(actions)}")
    for name, flags in sorted(commands.items()):
        status, out = run(jobkit, name, "--help")
        if status != 0:
            problems.append(f"jobkit {name} --help: exit status {status}")
            continue
        shown = help_flags(out, name) - {"--help"}
        if shown != flags:
            problems.append(f"jobkit {name} --help names {sorted(shown - flags)} that the table does not give it, "
                            f"and the table {sorted(flags - shown)} that its help does not name")
        if name == "checkpoint":
            for line in out.splitlines():
                words = line.replace("usage:", "").split()
                if len(words) > 2 and words[:2] == ["jobkit", "checkpoint"]:
                    action, used = words[2], set(FLAG.findall(line))
                    if actions.get(action) != used:
                        problems.append(f"jobkit checkpoint {action}: its usage line gives {sorted(used)}, "
                                        f"the table {sorted(actions.get(action, set()))}")
    status, out = run(jobkit, "checkpoint", "frob", "/nonexistent")
    missing = [a for a in actions if f"'{a} " not in out]
    if status != 2 or missing:
        problems.append(f"the usage error for an unknown checkpoint action (exit status {status}) does not name "
                        f"{missing}: {out.strip()}")
    for problem in problems:
        print(f"FAIL: {problem}")
    print(f"{len(commands)} commands, {len(actions)} checkpoint actions, {len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
