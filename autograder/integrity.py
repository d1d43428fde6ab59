"""Static integrity scan of a submission: code that would make the checks lie.

Run on every code cell that the student wrote or changed (a cell whose source is not, word
for word, a cell of the released notebook), before grading. Two kinds of findings:

* ``tampered``: replaces what the checks rely on — assigns to an attribute of torch /
  builtins / utils / sys, rebinds a check_* name or print, calls setattr on a module,
  touches IPython's exception machinery, sys.modules, or builds code from strings.
  Every test cell of the notebook then scores 0.
* ``uses-reference``: imports the course's reference implementation. The exercise(s)
  whose solution cell (or a cell after it) does so score 0.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

GUARDED_MODULES = {"torch", "F", "nn", "np", "numpy", "builtins", "utils", "checks", "sys", "math",
                   "warnings", "IPython"}
GUARDED_ROOTS = {"torch", "numpy", "builtins", "utils", "sys", "math", "warnings", "IPython"}
FORBIDDEN_CALLS = {"setattr", "delattr", "exec", "eval", "compile", "__import__", "get_ipython", "globals"}
FORBIDDEN_ATTRIBUTES = {"set_custom_exc", "excepthook", "showtraceback", "_render_traceback_", "modules",
                        "__code__", "__globals__", "__builtins__", "__dict__"}


@dataclass(frozen=True)
class Finding:
    code: str                  # "tampered" or "uses-reference"
    line: str                  # the offending source line
    reason: str                # in Chinese, for the feedback
    names: tuple[str, ...] = ()  # for uses-reference: the names imported (empty: the whole module)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _module_aliases(tree: ast.AST) -> set[str]:
    """Names bound by importing from a guarded package (``import utils.checks as uc`` -> uc)."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in GUARDED_ROOTS}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in GUARDED_ROOTS:
            aliases |= {a.asname or a.name for a in node.names}
    return aliases


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def _rebinds_protected_name(target: ast.AST) -> str | None:
    if isinstance(target, ast.Name) and (target.id.startswith("check_") or target.id in ("print", "CheckError")):
        return target.id
    return None


def _reference_import(node: ast.AST) -> tuple[str, ...] | None:
    """The names a statement imports from utils.reference (() for the whole module), or None."""
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        if module.startswith("utils.reference"):
            return tuple(a.name for a in node.names if a.name != "*")
        if module == "utils" and any(a.name == "reference" for a in node.names):
            return ()
    if isinstance(node, ast.Import) and any(a.name.startswith("utils.reference") for a in node.names):
        return ()
    return None


def scan(source: str) -> list[Finding]:
    """Findings in one cell's source (a cell that does not parse yields none: it just fails)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    findings = []
    guarded = GUARDED_MODULES | _module_aliases(tree)

    def add(node, code, reason, names=()):
        line = lines[node.lineno - 1].strip() if getattr(node, "lineno", None) else ""
        findings.append(Finding(code, line, reason, names))

    for node in ast.walk(tree):
        imported = _reference_import(node)
        if imported is not None:
            add(node, "uses-reference", "导入了课程的参考实现 utils.reference", imported)
        for target in _targets(node):
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _root_name(target) in guarded:
                add(node, "tampered", f"修改了 {_root_name(target)} 模块里的对象")
            elif _rebinds_protected_name(target):
                add(node, "tampered", f"重新定义了 {_rebinds_protected_name(target)}")
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and (node.name.startswith("check_") or node.name == "print"):
            add(node, "tampered", f"重新定义了 {node.name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            add(node, "tampered", f"调用了 {node.func.id}()")
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            add(node, "tampered", f"访问了 {node.attr}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(n.split(".")[0] in ("importlib", "ctypes", "gc", "inspect") for n in names):
                add(node, "tampered", "导入了可以改写运行环境的模块")
    return findings
