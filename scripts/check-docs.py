#!/usr/bin/python3
"""Checks the repository's Markdown and its labels; prints every problem and exits 1 if any.

Links: in every tracked *.md file, every relative link [x](path), [x](path#anchor), [x](#anchor)
and reference definition [x]: path must name a tracked file or directory of the repository, and an
anchor into a Markdown file must be one of its headings as GitHub makes their anchors (lowercase,
punctuation other than - and _ removed, each space a -, repeats suffixed -1, -2, ...) or an
explicit <a name|id>. Links with a scheme (https:, mailto:) are not fetched. Code blocks and code
spans are skipped.

Labels: the project names commits and dates, never working periods: no tracked file may contain
the word "session" followed by a space and a digit, and no tracked path may contain "session"
followed by a digit (case-insensitive).

Python 3 standard library only. Usage: scripts/check-docs.py [--links-only | --labels-only]
"""
import os
import re
import subprocess
import sys
import unicodedata
from urllib.parse import unquote

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

FENCE = re.compile(r'^\s{0,3}(`{3,}|~{3,})')
ATX = re.compile(r'^\s{0,3}(#{1,6})\s+(.*?)\s*(?:\s#+)?\s*$')
SETEXT = re.compile(r'^\s{0,3}(=+|-+)\s*$')
CODE_SPAN = re.compile(r'(`+)(.+?)\1')
INLINE_LINK = re.compile(r'!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)')
REF_DEF = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$')
HTML_ANCHOR = re.compile(r'<a\s[^>]*(?:name|id)\s*=\s*"([^"]+)"', re.I)
SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')
GITHUB_LINE = re.compile(r'^L\d+(-L\d+)?$')
LABEL = r'session [0-9]'
LABEL_PATH = re.compile(r'session[0-9]', re.I)


def git(*args):
    result = subprocess.run(['git', '-C', ROOT, *args], capture_output=True, text=True)
    if result.returncode not in (0, 1) or (result.returncode == 1 and result.stderr):
        sys.exit(f'check-docs: git {" ".join(args)} failed: {result.stderr.strip()}')
    return result.stdout


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split('\n'), 1):
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        yield number, line


def slug(heading):
    """The anchor GitHub gives a heading's text."""
    parts = []
    for i, piece in enumerate(CODE_SPAN.split(heading)):
        # CODE_SPAN.split yields text, backticks, code, text, ...: code is kept as it is.
        kind = i % 3
        if kind == 1:
            continue
        if kind == 0:
            piece = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', piece)  # a link renders as its text
            piece = re.sub(r'<[^>]+>', '', piece)                   # HTML tags render as nothing
        parts.append(piece)
    text = ''.join(parts).strip().lower()
    kept = (c for c in text if c in '-_ ' or unicodedata.category(c)[0] in 'LNM')
    return ''.join(kept).replace(' ', '-')


def anchors(text):
    found, seen = set(), {}
    previous = None
    for _, line in prose_lines(text):
        heading = None
        atx = ATX.match(line)
        if atx:
            heading = atx.group(2)
        elif previous and previous.strip() and SETEXT.match(line) and not previous.lstrip().startswith(
                ('-', '*', '+', '|', '>')):
            heading = previous.strip()
        if heading is not None:
            base = slug(heading)
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f'{base}-{count}')
        found.update(HTML_ANCHOR.findall(line))
        previous = None if atx else line
    return found


def links(text):
    """(line number, target) of every link outside code."""
    for number, line in prose_lines(text):
        line = CODE_SPAN.sub('', line)
        ref = REF_DEF.match(line)
        if ref:
            yield number, ref.group(1)
            continue
        for match in INLINE_LINK.finditer(line):
            yield number, match.group(2)


def check_links():
    tracked = set(git('ls-files', '-z').split('\0')) - {''}
    directories = {os.path.dirname(p) for p in tracked}
    directories |= {d for p in list(directories) for d in _parents(p)}
    cache, problems = {}, []

    def anchors_of(path):
        if path not in cache:
            with open(os.path.join(ROOT, path), encoding='utf-8') as f:
                cache[path] = anchors(f.read())
        return cache[path]

    for source in sorted(p for p in tracked if p.endswith('.md')):
        if not os.path.isfile(os.path.join(ROOT, source)):
            continue  # deleted in the work tree, not yet in the index
        with open(os.path.join(ROOT, source), encoding='utf-8') as f:
            text = f.read()
        for number, target in links(text):
            if not target or SCHEME.match(target) or target.startswith('//'):
                continue
            path, _, anchor = target.partition('#')
            where = f'{source}:{number}: ({target})'
            if path:
                resolved = os.path.normpath(os.path.join(os.path.dirname(source), unquote(path)))
                if resolved.startswith('..') or os.path.isabs(unquote(path)):
                    problems.append(f'{where}: outside the repository')
                    continue
                if resolved not in tracked and resolved not in directories:
                    on_disk = os.path.exists(os.path.join(ROOT, resolved))
                    problems.append(f'{where}: {resolved} ' + ('is not tracked by git' if on_disk else 'does not exist'))
                    continue
            else:
                resolved = source
            if not anchor:
                continue
            anchor = unquote(anchor)
            if not resolved.endswith('.md'):
                if resolved in tracked and not GITHUB_LINE.match(anchor):
                    problems.append(f'{where}: #{anchor} into a file that is not Markdown')
                elif resolved not in tracked:
                    problems.append(f'{where}: #{anchor} into a directory')
                continue
            if anchor not in anchors_of(resolved):
                problems.append(f'{where}: {resolved} has no heading with the anchor #{anchor}')
    return problems


def _parents(path):
    while path:
        path = os.path.dirname(path)
        yield path


def check_labels():
    problems = [f'{line}: a label, not a commit or a date'
                for line in git('grep', '-n', '-I', '-i', '-E', LABEL).splitlines()]
    problems += [f'{path}: a label in a file name'
                 for path in git('ls-files', '-z').split('\0') if LABEL_PATH.search(path)]
    return problems


def main(argv):
    if argv not in ([], ['--links-only'], ['--labels-only']):
        sys.exit(__doc__.strip().splitlines()[-1])
    problems = []
    if argv != ['--labels-only']:
        link_problems = check_links()
        problems += link_problems
        print(f'links: {len(link_problems)} problem(s)')
    if argv != ['--links-only']:
        label_problems = check_labels()
        problems += label_problems
        print(f'labels: {len(label_problems)} hit(s)')
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
