"""The modules of utils/ and autograder/ import one another in one direction only: no circle, counting the
imports made inside functions (a lazy import hides a circle from Python, not from a reader). The teaching
references (utils/reference/, generated from the solutions) import no UI, not even through another module."""
from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

UI = ("ipywidgets", "IPython", "utils.widgets")   # widgets, displays; their modules too (ipywidgets.widgets)


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of utils/ and autograder/."""
    found = {}
    for path in [*root.glob("utils/**/*.py"), *root.glob("autograder/*.py")]:
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its file (``from . import x``: the module x)."""
    return {_owner(t, known) for t in import_targets(name, path, known)} - {None, name}


def import_targets(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The dotted names ``name`` imports anywhere in its file, relative imports resolved (others' too: torch.nn)."""
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
    return targets


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


def reached(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    """``start`` and every module it imports, directly or through others."""
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph[module]
    return seen


def test_utils_and_autograder_import_in_no_circle():
    known = modules(ROOT)
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert not circles(graph), circles(graph)


def test_the_teaching_references_import_no_ui():
    known = modules(ROOT)
    graph = {name: imported(name, path, known) for name, path in known.items()}
    references = [name for name in known if _within(name, "utils.reference")]
    ui = {f"{module} imports {target}" for module in reached(graph, references)
          for target in import_targets(module, known[module], known) if any(_within(target, u) for u in UI)}
    assert len(references) > 1 and not ui, ui


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(f"{package}.")
