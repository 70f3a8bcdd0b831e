"""Checks what `jobkit fold` made of fold_step.py's step (tests/launched/fold.sh).

usage: fold_check.py MODE STDOUT STDERR [--ranks N]   MODE: normal, killed or bad-exit (fold_step.py's)
       fold_check.py mix MERGED [--raw RAW] [--ranks N]
                      srun --label ... 2>&1 | jobkit fold (normal step); RAW: what srun wrote

What each rank printed comes from fold_step.script(). Checked, exactly:
1. Unfolding the output (each `[rank: SET] TEXT` gives TEXT to every rank of SET) yields, for
   every rank and stream, the lines that rank printed to that stream, in order: nothing lost,
   nothing invented. A line without a label must be srun's own (`srun: ...`); a labelled line
   from Slurm's step daemon (`slurmstepd...: ...`, srun labels it with a rank) is set apart. mix:
   one merged stream, in which srun may put a rank's stdout and stderr lines in either order:
   each rank's lines are checked in order per kind (those it wrote to stdout, those to stderr).
   Where RAW shows that srun did so, no fold can fold every block whole; 2 and 3 are then left out.
2. Folding: each distinct block (a line, a line and its indented lines, or a traceback through
   its exception line) appears exactly once, as consecutive lines, under the set of the ranks
   that printed it, written as fold writes sets (sorted ranges: 0-16,18-47; 3-4 for two).
3. The number of labelled lines is the sum over those distinct blocks of their line counts.
bad-exit: what is deterministic (fold_step.py's barrier: every rank's config is printed before
rank 3 exits; the others are killed in their 30 s sleep), each rank's lines a prefix of its script.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fold_step  # noqa: E402

LABEL = re.compile(r"^\[rank: ([0-9][0-9,-]*)\] (.*)$")
STEPD = re.compile(r"^slurmstepd(-\S+)?: ")
TRACEBACK_START = "Traceback (most recent call last):"

failures = []


def fail(what):
    failures.append(what)
    if len(failures) <= 20:
        print(f"FAIL: {what}")
    elif len(failures) == 21:
        print("FAIL: ... (more failures left out)")


def format_set(ranks):
    ranks = sorted(ranks)
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


def parse_set(text, size):
    """The ranks of SET, or None when it is not written as fold writes sets."""
    ranks = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        first, last = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if last < first:
            return None
        ranks.extend(range(first, last + 1))
    if not ranks or ranks[-1] >= size or format_set(ranks) != text:
        return None
    return frozenset(ranks)


def blocks(lines):
    """The spec's blocks of one rank's lines of one stream."""
    out, i = [], 0
    indented = lambda line: line[:1] in (" ", "\t")  # noqa: E731
    while i < len(lines):
        block = [lines[i]]
        i += 1
        while i < len(lines) and indented(lines[i]):
            block.append(lines[i])
            i += 1
        if block[0] == TRACEBACK_START and i < len(lines):
            block.append(lines[i])  # the exception line
            i += 1
        out.append(tuple(block))
    return out


def printed(rank, size, mode):
    """(full, sure): the lines rank prints per stream ("out", "err") if it runs to its end, and
    those it certainly prints before the step ends (bad-exit: up to its barrier)."""
    full, sure = {"out": [], "err": []}, None
    both = []  # both streams, in the order printed
    for step in fold_step.script(rank, size, mode):
        if step[0] in full:
            full[step[0]].extend(step[1])
            both.extend(step[1])
        elif step[0] == "partial":
            full["out"].append(step[1])  # fold writes it as a line
            both.append(step[1])
        elif step[0] == "barrier" and mode == "bad-exit":
            sure = {s: list(lines) for s, lines in full.items()}
    sure = sure if sure is not None else dict(full)
    full["both"] = both
    return full, sure


def srun_reordered(path, full, size):
    """The ranks whose lines srun wrote to the merged stream path in another order than printed."""
    seen = {r: [] for r in range(size)}
    for line in read(path):
        m = re.match(r"^ *(\d+): (.*)$", line)
        if m and int(m[1]) in seen:
            seen[int(m[1])].append(m[2])
    return [r for r in range(size) if seen[r] != full[r]["both"] and sorted(seen[r]) == sorted(full[r]["both"])]


def read(path):
    with open(path) as f:
        text = f.read()
    if text and not text.endswith("\n"):
        fail(f"{path} does not end with a newline (its last line: {text.splitlines()[-1]!r})")
    return text.splitlines()


def parse(lines, size, where):
    """[(ranks, text)] of the labelled lines, and the unlabelled ones."""
    labelled, unlabelled = [], []
    for line in lines:
        m = LABEL.match(line)
        if not m:
            unlabelled.append(line)
            continue
        ranks = parse_set(m[1], size)
        if ranks is None:
            fail(f"{where}: rank set {m[1]!r} not written as fold writes sets (sorted ranges, within "
                 f"0-{size - 1}): {line!r}")
            continue
        labelled.append((ranks, m[2]))
    return labelled, unlabelled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["normal", "killed", "bad-exit", "mix"])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--ranks", type=int, default=48)
    parser.add_argument("--raw", help="mix: srun's output that jobkit fold read")
    args = parser.parse_args()
    size, mode = args.ranks, args.mode
    step_mode = "normal" if mode == "mix" else mode
    if len(args.files) != (1 if mode == "mix" else 2):
        parser.error("mix takes one file, the other modes two (stdout, stderr)")

    full, sure = {}, {}
    for r in range(size):
        full[r], sure[r] = printed(r, size, step_mode)
    fold_checked = True
    if args.raw:
        reordered = srun_reordered(args.raw, full, size)
        if reordered:
            fold_checked = False
            print(f"srun wrote the lines of rank(s) {format_set(reordered)} across stdout and stderr in another "
                  "order than printed: folding (every block whole) is not checked, only each rank's lines")
        else:
            print(f"{args.raw}: srun kept every rank's order: every block can fold whole")
    # The streams of the output: ("out", "err"), or one merged stream of both kinds.
    streams = {"merged": ["out", "err"]} if mode == "mix" else {"out": ["out"], "err": ["err"]}

    total_expected = total_labelled = 0
    for name, kinds in streams.items():
        path = args.files[0] if name in ("merged", "out") else args.files[1]
        labelled, unlabelled = parse(read(path), size, name)
        stepd = [(ranks, text) for ranks, text in labelled if STEPD.match(text)]
        labelled = [(ranks, text) for ranks, text in labelled if not STEPD.match(text)]
        for line in unlabelled:
            if not line.startswith("srun: "):
                fail(f"{name}: a line without a label that is not srun's: {line!r}")
        for ranks, text in stepd:
            print(f"{name}: Slurm's step daemon, labelled [rank: {format_set(ranks)}]: {text}")
        for line in unlabelled:
            print(f"{name}: unlabelled: {line}")

        # 1. Unfolding.
        got = {r: [] for r in range(size)}
        for ranks, text in labelled:
            for r in ranks:
                got[r].append(text)
        for r in range(size):
            # The prefix `[rank: R] ` that a rank printed itself is fold's to remove.
            own = re.compile(rf"^\[rank: {r}\] ")
            for kind in kinds:
                want_full = [own.sub("", line) for line in full[r][kind]]
                want_sure = [own.sub("", line) for line in sure[r][kind]]
                if len(kinds) > 1:
                    mine = set(want_full)
                    seen = [t for t in got[r] if t in mine]
                else:
                    seen = got[r]
                if seen[:len(want_full)] != want_full[:len(seen)] or len(seen) > len(want_full):
                    fail(f"{name}: rank {r}'s {kind} lines unfolded are not what it printed, in order:\n"
                         f"  printed {want_full}\n  unfolded {seen}")
                elif len(seen) < len(want_sure):
                    fail(f"{name}: rank {r}'s {kind} lines are missing {want_sure[len(seen):]}")
                elif mode == "bad-exit" and len(seen) > len(want_sure):
                    fail(f"{name}: rank {r} printed past its 30 s sleep: {seen[len(want_sure):]} (srun did not end it)")
                elif mode != "bad-exit" and seen != want_full:
                    fail(f"{name}: rank {r}'s {kind} lines are missing {want_full[len(seen):]}")
            if len(kinds) > 1:
                every = set(sum((full[r][k] for k in kinds), []))
                every |= {own.sub("", line) for line in every}
                invented = [t for t in got[r] if t not in every]
                if invented:
                    fail(f"{name}: rank {r} was given lines it did not print: {invented}")

        total_labelled += len(labelled)
        if not fold_checked:
            continue
        # 2. Folding: the distinct blocks of what every rank certainly printed, each with its ranks.
        expected = {}
        for r in range(size):
            for kind in kinds:
                lines = [re.sub(rf"^\[rank: {r}\] ", "", line) for line in sure[r][kind]]
                mine = blocks(lines)
                if len(set(mine)) != len(mine):
                    sys.exit("fold_check.py: a rank prints a block twice; the checks assume not")
                for block in mine:
                    expected.setdefault(block, set()).add(r)
        for block, ranks in expected.items():
            label = format_set(ranks)
            runs = [i for i in range(len(labelled) - len(block) + 1)
                    if all(labelled[i + j] == (ranks, block[j]) for j in range(len(block)))]
            where = [f"[rank: {format_set(rs)}]" for rs, text in labelled if text == block[0]]
            if len(runs) != 1:
                fail(f"{name}: the block {list(block)} of ranks {label} appears {len(runs)} times as "
                     f"{len(block)} consecutive lines under [rank: {label}] (its first line is under {where})")
        print(f"{name}: {len(expected)} distinct blocks expected, those of more than one rank or line:")
        for block, ranks in expected.items():
            if len(ranks) > 1 or len(block) > 1:
                more = f" (and {len(block) - 1} more lines)" if len(block) > 1 else ""
                print(f"  [rank: {format_set(ranks)}] {block[0]}{more}")

        # 3. The count.
        count = sum(len(block) for block in expected)
        if len(labelled) != count:
            fail(f"{name}: {len(labelled)} labelled lines (besides the step daemon's), expected {count}")
        total_expected += count

    # The derivation by hand, against the one above, for the plain step: stdout 11 config lines
    # alike on all ranks, option_7 twice (47 ranks, rank 17), 48 shard lines: 61; stderr: the
    # tokenizer warning (all), the dataset warning (47), 2 tracebacks of 4 lines: 10.
    if fold_checked and step_mode == "normal" and size == 48 and total_expected != 61 + 10:
        sys.exit(f"fold_check.py: derived {total_expected} labelled lines, by hand 71")
    print(f"{total_labelled} labelled lines, " + (f"{total_expected} expected" if fold_checked else "not checked"))
    if failures:
        print(f"FAIL: {len(failures)} failures")
        sys.exit(1)
    print("fold_check.py: ok")


if __name__ == "__main__":
    main()
