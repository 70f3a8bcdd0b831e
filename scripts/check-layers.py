#!/usr/bin/env python3
"""Checks that the folders of src/ include each other without a cycle, and prints their layers.

A folder's layer is one more than the highest layer of the folders its files include: "folder/..."
includes of another folder of src/, and the public headers, each counted as the folder that
implements it (the folder of the .cpp whose first include it is: jobkit/runtime.hpp is runtime's,
jobkit/collectives.hpp collectives'), its own includes that folder's. A public header that no .cpp
implements (jobkit/jobkit.hpp, jobkit/config.hpp, the engine templates of jobkit/detail/) stands
for what it includes. A cycle (two folders that include each other, directly or through others)
has no order: it is printed with one include of each edge, and the check fails.
docs/architecture.md's layer table is this output.

  scripts/check-layers.py [SRC_DIR [INCLUDE_DIR]]
"""
import os
import re
import sys

INCLUDE = re.compile(r'#include "([A-Za-z0-9_]+)/[^"]+"')
PUBLIC = re.compile(r'#include ["<](jobkit/[A-Za-z0-9_/]+\.hpp)[">]')


def source_files(root):
    for base, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith((".cpp", ".hpp", ".h")):
                yield os.path.join(base, name)


def public_headers(include):
    """{"jobkit/x.hpp": [("jobkit/y.hpp", line) it includes]} for every public header."""
    found = {}
    for file in source_files(os.path.join(include, "jobkit")):
        name = os.path.relpath(file, include)
        with open(file, encoding="utf-8") as text:
            found[name] = [(m.group(1), n) for n, line in enumerate(text, 1) if (m := PUBLIC.match(line))]
    return found


def owners(src, headers):
    """{"jobkit/x.hpp": folder}: the folder of the .cpp whose first include is the header."""
    owner = {}
    for file in source_files(src):
        if not file.endswith(".cpp"):
            continue
        with open(file, encoding="utf-8") as text:
            first = next((line for line in text if line.startswith("#include")), "")
        match = PUBLIC.match(first)
        if match and match.group(1) in headers:
            owner.setdefault(match.group(1), os.path.relpath(file, src).split(os.sep)[0])
    return owner


def include_graph(src, include):
    """{folder: {included folder: "file:line" of one such include}}."""
    headers = public_headers(include)
    owner = owners(src, headers)

    def folders_of(header, seen=()):
        """The folders a public header stands for: its owner, or what it includes."""
        if header in owner:
            return {owner[header]}
        found = set()
        for other, _ in headers.get(header, []):
            if other not in seen:
                found |= folders_of(other, seen + (header,))
        return found

    graph = {}
    for folder in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, folder)):
            graph.setdefault(folder, {})
    # A public header's includes are its owner's.
    for header, includes in headers.items():
        if header in owner:
            for other, number in includes:
                for target in folders_of(other):
                    if target != owner[header]:
                        graph[owner[header]].setdefault(target, f"include/{header}:{number}")
    for folder in graph:
        for file in source_files(os.path.join(src, folder)):
            with open(file, encoding="utf-8") as text:
                for number, line in enumerate(text, 1):
                    targets = set()
                    match = INCLUDE.match(line)
                    if match and match.group(1) not in (folder, "jobkit") and match.group(1) in graph:
                        targets.add(match.group(1))
                    public = PUBLIC.match(line)
                    if public:
                        targets |= folders_of(public.group(1)) - {folder}
                    for target in targets:
                        graph[folder].setdefault(target, f"{os.path.relpath(file, src)}:{number}")
    return graph


def cycles(graph):
    """Strongly connected components of more than one folder (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, {}):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "src")
    include = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "include")
    graph = include_graph(src, include)
    bad = cycles(graph)
    if bad:
        for component in bad:
            print(f"check-layers: a cycle among {', '.join(component)}:")
            for folder in component:
                for other, where in sorted(graph[folder].items()):
                    if other in component:
                        print(f"  {folder} -> {other} ({where})")
        return 1
    layer = {}

    def layer_of(folder):
        if folder not in layer:
            layer[folder] = 1 + max((layer_of(other) for other in graph[folder]), default=-1)
        return layer[folder]

    for folder in graph:
        layer_of(folder)
    for level in range(max(layer.values()) + 1):
        folders = sorted(f for f in layer if layer[f] == level)
        print(f"layer {level}: {', '.join(folders)}")
    print("check-layers: no cycle among the folders of src/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
