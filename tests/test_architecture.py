"""The package's import graph has no cycles: each module can be read, and changed, above the ones it uses.

Every import counts, wherever it is written: at the top, under ``if TYPE_CHECKING:``, or inside a function
(an import deferred to call time still ties the two modules together). An import of ``a.b`` counts as an
edge to ``a.b`` only, not to the package ``a`` that Python also runs first: a package's ``__init__`` that
re-exports its own modules is no cycle of the design. docs/architecture.md ("Layers") draws the order.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from rag_papers.config import PROJECT_ROOT

# (module, module it imports) -> where, as "file:line"
Graph = dict[str, dict[str, str]]


def import_graph(root: Path, package: str) -> Graph:
    """Each module of ``package`` (its files under ``root``) -> the package's modules it imports, with where."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    graph: Graph = {name: {} for name in files}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the package this module is in, up level - 1
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                # ``from pkg import mod`` imports the module ``pkg.mod``; ``from mod import name``, ``mod``
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                if target in files and target != name:
                    graph[name].setdefault(target, f"{path.relative_to(root.parent)}:{node.lineno}")
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in order:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph[start])))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            nxt = next(iter(todo), None)
            if nxt is not None:
                if nxt not in order:
                    order[nxt] = low[nxt] = len(order)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], order[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(graph: Graph, component: list[str]) -> str:
    """A cycle as the imports that make it, each with its file and line."""
    inside = set(component)
    edges = [f"  {a} -> {b} ({where})" for a in component for b, where in sorted(graph[a].items()) if b in inside]
    return " <-> ".join(component) + "\n" + "\n".join(edges)


def test_no_import_cycles() -> None:
    graph = import_graph(PROJECT_ROOT / "rag_papers", "rag_papers")
    found = cycles(graph)
    assert not found, "import cycles in rag_papers:\n" + "\n".join(describe(graph, c) for c in found)
    # The graph was read, not empty: imports of each layer.
    assert "rag_papers.store" in graph["rag_papers.index"] and "rag_papers.store" in graph["rag_papers.ingest"]
    assert "rag_papers.index" in graph["rag_papers.retrieve"]


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A cycle closed by a type-only import, or by one inside a function, is a cycle all the same."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import thing\n")
    (pkg / "c.py").write_text("def f():\n    from .sub.d import g\n    return g\n")
    (pkg / "sub" / "d.py").write_text("from .. import c\n")
    (pkg / "e.py").write_text("import pkg.a\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.sub.d"] == {"pkg.c": "pkg/sub/d.py:1"}
    assert sorted(cycles(graph)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"]]


def test_the_data_directory_layout_is_named_in_one_place() -> None:
    """Every part of HOME is named in paths.py's HOME_LAYOUT and reached through ``home_path`` / ``in_home``:
    no other module joins a name onto a home folder (bench used to spell out "papers.sqlite" itself)."""
    import re
    from typing import get_args

    from rag_papers.paths import HOME_LAYOUT, HomePart

    assert set(HOME_LAYOUT) == set(get_args(HomePart))
    joined = re.compile(r"\bhome\s*/\s*f?[\"']")  # settings.home / "x", home / f"x{...}"
    root = PROJECT_ROOT / "rag_papers"
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "paths.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if joined.search(line)
    ]
    assert found == []
