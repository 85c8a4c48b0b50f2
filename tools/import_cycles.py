"""Fail on any import circle among the modules of the given packages (`make lint`).

    python tools/import_cycles.py aqsgd bench specfile

An import circle is a set of modules each of which imports, directly or through the
others, every other one: a strongly connected component of the import graph with more
than one module (or a module importing itself). Imports inside functions count (they run
as soon as the function does); imports under `if TYPE_CHECKING:` do not (they never run).
A package's `__init__` running before its submodules is not an edge: only import
statements are.

The graph is grimp's (the library under import-linter, which parses the import statements
of every module); the components are found here (Tarjan's algorithm), and each circle is
printed with one shortest round trip through it and the line of each import on that
trip. Exit status 1 when there is a circle, else 0.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import grimp

# The packages of this checkout, not those an editable install of another one points at
# (a script's sys.path starts with its own folder, not the working directory).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = ["find_circles", "main", "round_trip"]


def _edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {m: graph.find_modules_directly_imported_by(m) for m in sorted(graph.modules)}


def find_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `edges` (module -> modules it imports) that
    hold a circle, each sorted, in sorted order. Iterative Tarjan: no recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    circles = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in edges:
                    continue  # outside the packages checked
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:  # every successor of node seen
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges[node]:
                        circles.append(sorted(component))
    return sorted(circles)


def round_trip(edges: dict[str, set[str]], circle: Iterable[str]) -> list[str]:
    """The shortest path from the circle's first module back to itself, within the circle
    (breadth first), as [m0, m1, ..., m0]."""
    members = set(circle)
    start = min(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges[node] & members):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no round trip through {sorted(members)}: not a circle")


def _describe(graph: grimp.ImportGraph, edges: dict[str, set[str]], circle: list[str]) -> str:
    trip = round_trip(edges, circle)
    lines = [f"import circle of {len(circle)} modules: {', '.join(circle)}"]
    for importer, imported in zip(trip, trip[1:], strict=False):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = details[0] if details else None
        at = f"line {where['line_number']}: {where['line_contents']}" if where else "?"
        lines.append(f"  {importer} -> {imported}  ({at})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="+", help="top-level packages, importable from here")
    args = parser.parse_args(argv)
    graph = grimp.build_graph(*args.packages, exclude_type_checking_imports=True,
                              cache_dir=None)
    edges = _edges(graph)
    circles = find_circles(edges)
    for circle in circles:
        print(_describe(graph, edges, circle))
    print(f"{len(edges)} modules of {', '.join(args.packages)}: "
          f"{len(circles)} import circle(s)")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
