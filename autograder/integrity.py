"""Static integrity scan of a submission: code that would make the checks lie.

Run on every code cell that the student wrote or changed (a cell whose source is not, word
for word, a cell of the released notebook), before grading. It flags what *changes* the
environment the checks rely on, never the mere mention of a common name (``self.modules()``,
``x.__dict__``, ``import inspect``, ``print(globals())`` are honest):

* ``tampered`` (every test cell of the notebook then scores 0):
  - assigning to or deleting something reached through a guarded module (torch, builtins,
    utils, sys, …; also through ``vars(torch)``, ``getattr(torch, …)``, ``sys.modules[…]``,
    ``get_ipython()``), or ``setattr`` / ``delattr`` on one;
  - rebinding a check the notebook imports, ``print`` or ``CheckError``, also through
    ``globals()[…]`` or ``globals().update``; changing ``sys.modules`` or a module's ``__dict__``;
  - replacing a function's code (``f.__code__ = …``);
  - touching IPython's exception or input/AST machinery (``set_custom_exc``, ``ast_transformers``, …);
  - importing ``importlib`` (reloading the checks resets their tamper detection) or ``ctypes``;
  - code built from strings: ``exec`` / ``eval`` / ``compile`` of anything but a string
    literal (a literal, like a ``%timeit`` line, is scanned as code itself).
* ``uses-reference`` (see :func:`borrowed`): an exercise whose own code uses the course's
  reference implementation scores 0 — not a demo cell the notebook invites the learner to edit.

Whatever this scan cannot see (a module reached by a roundabout way) the checks' run-time
tamper detection (``utils.checks.core``) still refuses to run on.
"""
from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass

GUARDED_MODULES = {"torch", "F", "nn", "np", "numpy", "builtins", "utils", "checks", "sys", "math", "warnings",
                   "IPython", "inspect", "gc", "get_ipython"}
GUARDED_ROOTS = {"torch", "numpy", "builtins", "utils", "sys", "math", "warnings", "IPython", "inspect", "gc"}
ALWAYS_PROTECTED = {"print", "CheckError"}
IPYTHON_HOOKS = {"set_custom_exc", "excepthook", "showtraceback", "_showtraceback", "showsyntaxerror",
                 "_render_traceback_", "custom_exceptions", "ast_transformers", "input_transformers_cleanup",
                 "input_transformers_post", "input_transformer_manager"}
FUNCTION_INTERNALS = {"__code__", "__globals__", "__builtins__", "__defaults__", "__kwdefaults__"}
RUNS_STRINGS = {"exec", "eval", "compile"}                      # builtins (not torch.compile, re.compile)
SHELL_RUNS_STRINGS = {"run_cell", "run_line_magic", "run_cell_magic", "ex", "ev"}  # get_ipython().<these>
MAGICS = {"run_line_magic", "run_cell_magic"}                    # %magic and %%magic: the code is the last argument
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
NAMESPACES = {"globals", "locals", "vars"}
ENV_MODULES = {"importlib", "ctypes"}


@dataclass(frozen=True)
class Finding:
    code: str    # "tampered" or "uses-reference"
    line: str    # the offending source line
    reason: str  # in Chinese, for the feedback


@functools.lru_cache(maxsize=1)
def _magics():
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager()


def parse(source: str) -> tuple[ast.Module, list[str]] | None:
    """The cell as Python (``%timeit x`` becomes ``get_ipython().run_line_magic(...)``) and its lines."""
    try:
        python = _magics().transform_cell(source)
        return ast.parse(python), python.splitlines()
    except (SyntaxError, ValueError):
        return None


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return None


def _root_name(node: ast.AST) -> str | None:
    """The name a chain like ``vars(torch)['x'].y`` or ``sys.modules['torch'].y`` starts from."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif _call_name(node) in ("vars", "getattr") and node.args:
            node = node.args[0]
        elif _call_name(node) in ("__import__", "import_module") and node.args:
            first = node.args[0]
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            return first.value.split(".")[0] if literal else None
        elif _call_name(node) == "get_ipython":
            return "get_ipython"
        else:
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
    if isinstance(node, (ast.Assign, ast.Delete)):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _namespace_key(target: ast.AST) -> str | None:
    """``globals()['name'] = …`` -> 'name' ('' when the key is not a literal); None for other targets."""
    if isinstance(target, ast.Subscript) and _call_name(target.value) in NAMESPACES and not target.value.args:
        key = target.slice
        return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else ""
    return None


def _is_namespace(node: ast.AST, guarded: set[str]) -> bool:
    """globals(), vars(module), sys.modules, module.__dict__: a mapping of names the checks use."""
    if _call_name(node) in NAMESPACES:
        return not node.args or _root_name(node.args[0]) in guarded
    return (isinstance(node, ast.Attribute) and node.attr in ("modules", "__dict__")
            and _root_name(node.value) in guarded)


class _Scanner:
    def __init__(self, lines: list[str], guarded: set[str], protected):
        self.lines, self.guarded, self.protected = lines, guarded, protected
        self.findings: list[Finding] = []

    def add(self, node: ast.AST, reason: str) -> None:
        line = self.lines[node.lineno - 1].strip() if getattr(node, "lineno", None) else ""
        self.findings.append(Finding("tampered", line, reason))

    def visit(self, node: ast.AST) -> None:
        for target in _targets(node):
            self.target(node, target)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and self.protected(node.name):
            self.add(node, f"重新定义了 {node.name}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node)
        if isinstance(node, ast.Call):
            self.call(node)
        if isinstance(node, ast.Attribute) and node.attr in IPYTHON_HOOKS:
            self.add(node, f"改动了 IPython 的异常或代码转换机制（{node.attr}）")

    def target(self, node: ast.AST, target: ast.AST) -> None:
        key = _namespace_key(target)
        if isinstance(target, ast.Name) and self.protected(target.id):
            self.add(node, f"重新定义了 {target.id}")
        elif key is not None and (key == "" or self.protected(key)):
            self.add(node, f"通过 globals() 改写了 {key or '全局名字'}")
        elif isinstance(target, (ast.Attribute, ast.Subscript)) and _root_name(target) in self.guarded:
            self.add(node, f"修改了 {_root_name(target)} 里的对象")
        elif isinstance(target, ast.Attribute) and (target.attr in FUNCTION_INTERNALS
                                                    or self.protected(_root_name(target) or "")):
            self.add(node, f"改写了函数 {_root_name(target)} 的内部（{target.attr}）")

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if any(m.split(".")[0] in ENV_MODULES for m in modules):
            self.add(node, "导入了可以改写运行环境的模块（importlib / ctypes）")
        from_utils = isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "utils"
        if any(self.protected(a.asname or a.name) and not (from_utils and a.asname in (None, a.name))
               for a in node.names):
            self.add(node, "用别的对象顶替了检查函数或 print")

    def call(self, node: ast.Call) -> None:
        name = _call_name(node)
        first = node.args[0] if node.args else None
        if name in ("setattr", "delattr") and first is not None and self.mentions_guarded(first):
            self.add(node, f"对模块或检查函数调用了 {name}()")
        elif name in MUTATORS and isinstance(node.func, ast.Attribute) and _is_namespace(node.func.value, self.guarded):
            self.add(node, f"改写了模块表或命名空间（{name}）")
        elif isinstance(node.func, ast.Name) and name in RUNS_STRINGS or \
                isinstance(node.func, ast.Attribute) and name in SHELL_RUNS_STRINGS:
            self.strings_as_code(node, name)

    def strings_as_code(self, node: ast.Call, name: str) -> None:
        """A literal is scanned as code; code built at run time cannot be, so it is refused."""
        for arg in node.args[-1:] if name in MAGICS else node.args[:1]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                for finding in scan(arg.value, self.protected):
                    self.add(node, finding.reason)
            elif name not in MAGICS:
                self.add(node, f"执行了运行时拼出的代码（{name}）")

    def mentions_guarded(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and (n.id in self.guarded or self.protected(n.id)) for n in ast.walk(node))


def check_names(checks: Iterable[str] | None):
    """The predicate 'is this a name the checks rely on': the notebook's own checks (any
    ``check_*`` name when they are not known), ``print`` and ``CheckError``."""
    known = None if checks is None else frozenset(checks)
    return lambda name: name in ALWAYS_PROTECTED or (name.startswith("check_") if known is None else name in known)


def imported_checks(sources: Iterable[str]) -> set[str]:
    """The check_* names that these cells (the released notebook's) import from utils.checks."""
    trees = [p[0] for p in map(parse, sources) if p is not None]
    return {a.asname or a.name for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("utils.checks")
            for a in node.names if a.name.startswith("check_")}


def scan(source: str, protected=check_names(None)) -> list[Finding]:
    """The ``tampered`` findings of one cell (a cell that does not parse yields none: it just fails)."""
    parsed = parse(source)
    if parsed is None:
        return []
    tree, lines = parsed
    scanner = _Scanner(lines, GUARDED_MODULES | _module_aliases(tree), protected)
    for node in ast.walk(tree):
        scanner.visit(node)
    return scanner.findings


# --- uses-reference ---------------------------------------------------------------------------

def _reference_imports(tree: ast.AST, exercises: set[str]) -> list[tuple[ast.stmt, set[str]]]:
    """Each statement importing this notebook's exercises (or the whole module) from
    utils.reference, with the names it binds to them. Earlier sections' components (05 imports
    section 03's ``Head``) are the course's to give, not a borrowing."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("utils.reference"):
            names = exercises if any(a.name == "*" for a in node.names) else \
                {a.asname or a.name for a in node.names if a.name in exercises}
        elif isinstance(node, ast.ImportFrom) and node.module == "utils":
            names = {a.asname or a.name for a in node.names if a.name == "reference"}
        elif isinstance(node, ast.Import):
            names = {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("utils.reference")}
        else:
            continue
        if names:
            found.append((node, names))
    return found


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_bound(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    return {n.id for t in _targets(stmt) for n in ast.walk(t) if isinstance(n, ast.Name)}


def _tainted(trees: list[ast.Module], exercises: set[str]) -> set[str]:
    """Names that hold the reference: bound by importing it, or (transitively) by a top-level
    definition or assignment that uses such a name."""
    tainted = {name for tree in trees for _, names in _reference_imports(tree, exercises) for name in names}
    statements = [stmt for tree in trees for stmt in tree.body]
    while True:
        more = {name for stmt in statements if _names_used(stmt) & tainted for name in _names_bound(stmt)} - tainted
        if not more:
            return tainted
        tainted |= more


def _evidence(cell: tuple[ast.Module, list[str]], exercise: str, own: bool, exercises: set[str],
              tainted: set[str]) -> str | None:
    """The line showing that ``exercise`` is the reference: in its own solution cell (``own``) an
    import of the reference or a use of a name holding it; in any cell, an import that binds
    the exercise's own name."""
    tree, lines = cell
    imports = _reference_imports(tree, exercises)
    nodes = [stmt for stmt, names in imports if own or exercise in names]
    if own and not nodes:
        nodes = [n for n in ast.walk(tree)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in tainted]
    return lines[nodes[0].lineno - 1].strip() if nodes else None


def borrowed(solutions: dict[str, str], others: list[str]) -> dict[str, Finding]:
    """exercise -> why its own code counts as the course's reference implementation.

    ``solutions`` maps each exercise to its solution cell; ``others`` are the other code cells
    the student wrote or changed (helpers, edited demos). An exercise is borrowed when its
    solution cell imports the reference or uses a name that holds it (even through a helper
    cell), or when some cell binds the exercise's own name to the reference. A demo cell that
    imports the reference under another name (05: ``… import MultiHeadAttention as
    ReferenceMHA``) borrows nothing as long as no solution uses what it defines.
    """
    exercises = set(solutions)
    parsed = {key: parse(src) for key, src in [*solutions.items(), *enumerate(others)]}
    parsed = {key: p for key, p in parsed.items() if p is not None}
    tainted = _tainted([tree for tree, _ in parsed.values()], exercises)
    found = {}
    for exercise in solutions:
        for key, cell in parsed.items():
            line = _evidence(cell, exercise, key == exercise, exercises, tainted)
            if line is not None:
                found[exercise] = Finding("uses-reference", line, "使用了课程的参考实现 utils.reference")
                break
    return found
