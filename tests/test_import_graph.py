"""The grading runtime and the checks import one another in one direction only: no circle, counting the
imports made inside functions (a lazy import hides a circle from Python, not from a reader)."""
from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

RUNTIME = ("autograder", "utils.checks", "utils.learner_solutions", "utils.pending")


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of utils/ and autograder/."""
    found = {}
    for path in [*root.glob("utils/**/*.py"), *root.glob("autograder/*.py")]:
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its file (``from . import x``: the module x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], *([node.module] if node.module else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names}
            targets |= {m for m in submodules if m in known} or {base}
    return {_owner(t, known) for t in targets} - {None, name}


def _owner(target: str, known: dict[str, Path]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_runtime_and_the_checks_import_in_no_circle():
    known = modules(ROOT)
    graph = {name: imported(name, path, known) for name, path in known.items()}
    runtime = [group for group in circles(graph) if any(m.startswith(RUNTIME) for m in group)]
    assert not runtime, runtime
