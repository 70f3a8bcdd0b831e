#!/usr/bin/env python3
"""Checks that the folders of src/ include each other without a cycle, and prints their layers.

A folder's layer is one more than the highest layer of the folders its files include ("folder/..."
includes of another folder of src/; <jobkit/...> is the public API, below every folder). A cycle
(two folders that include each other, directly or through others) has no order: it is printed with
one include of each edge, and the check fails. docs/architecture.md's layer table is this output.

  scripts/check-layers.py [SRC_DIR]
"""
import os
import re
import sys

INCLUDE = re.compile(r'#include "([A-Za-z0-9_]+)/[^"]+"')


def include_graph(src):
    """{folder: {included folder: "file:line" of one such include}}."""
    graph = {}
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder)
        if not os.path.isdir(path):
            continue
        edges = graph.setdefault(folder, {})
        for root, _, files in os.walk(path):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".h")):
                    continue
                file = os.path.join(root, name)
                with open(file, encoding="utf-8") as text:
                    for number, line in enumerate(text, 1):
                        match = INCLUDE.match(line)
                        if match and match.group(1) not in (folder, "jobkit") and os.path.isdir(
                            os.path.join(src, match.group(1))
                        ):
                            edges.setdefault(match.group(1), f"{os.path.relpath(file, src)}:{number}")
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
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    graph = include_graph(src)
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
