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
  - replacing a function's code (``f.__code__ = …``) or a closure cell's contents;
  - touching IPython's exception or input/AST machinery (``set_custom_exc``, ``ast_transformers``, …);
  - importing ``importlib`` (reloading the checks resets their tamper detection) or ``ctypes``;
  - code built from strings: ``exec`` / ``eval`` / ``compile`` of anything but a string
    literal (a literal, like a ``%timeit`` line, is scanned as code itself).
* ``uses-reference`` (see :func:`borrowed`): an exercise whose own code uses the course's
  reference implementation scores 0 — also through a name that a course cell bound to it
  (:func:`course_bindings`: 08's ``ReferenceBlock``) — not a demo cell the notebook invites the
  learner to edit.

Whatever this scan cannot see (a module reached by a roundabout way) the checks see at run time
(``utils.checks.core``): a check refuses to judge when what it relies on was changed ([tampered],
only the exercises whose checks rely on it lose their points) or when it is handed the reference.
"""
from __future__ import annotations

import ast
import functools
import symtable
from collections.abc import Iterable
from dataclasses import dataclass

GUARDED_MODULES = {"torch", "F", "nn", "np", "numpy", "builtins", "utils", "checks", "sys", "math", "warnings",
                   "IPython", "inspect", "gc", "get_ipython"}
GUARDED_ROOTS = {"torch", "numpy", "builtins", "utils", "sys", "math", "warnings", "IPython", "inspect", "gc"}
ALWAYS_PROTECTED = {"print", "CheckError"}
IPYTHON_HOOKS = {"set_custom_exc", "excepthook", "showtraceback", "_showtraceback", "showsyntaxerror",
                 "_render_traceback_", "custom_exceptions", "ast_transformers", "input_transformers_cleanup",
                 "input_transformers_post", "input_transformer_manager"}
FUNCTION_INTERNALS = {"__code__", "__globals__", "__builtins__", "__defaults__", "__kwdefaults__", "cell_contents"}
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


@dataclass(frozen=True)
class CourseBindings:
    """What the released notebook's own code cells bind to the reference of one of its exercises."""
    names: frozenset[str] = frozenset()    # ReferenceBlock, LM = mine_or_reference("DecoderLM", …), …
    modules: frozenset[str] = frozenset()  # R of ``import utils.reference as R``: R.Block is bound, R.Head is not


def _module_level(tree: ast.Module):
    """The statements of a cell outside any function or class body (those themselves included)."""
    todo = list(tree.body)
    while todo:
        stmt = todo.pop(0)
        yield stmt
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo += [child for child in ast.iter_child_nodes(stmt) if isinstance(child, ast.stmt)]


def _is_reference_module(node: ast.AST, modules: frozenset[str] | set[str]) -> bool:
    """``R`` (bound to utils.reference) or ``utils.reference`` itself."""
    if isinstance(node, ast.Name):
        return node.id in modules
    return (isinstance(node, ast.Attribute) and node.attr == "reference" and isinstance(node.value, ast.Name)
            and node.value.id == "utils")


def _holds_reference(node: ast.AST, names: set[str], modules: set[str], exercises: set[str]) -> bool:
    """Whether the expression is an exercise's reference: a name bound to it, ``R.Block``, or
    ``mine_or_reference("Block", Block)`` (the reference until the learner's own passes)."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute):
        return node.attr in exercises and _is_reference_module(node.value, modules)
    first = node.args[0] if _call_name(node) == "mine_or_reference" and node.args else None
    return isinstance(first, ast.Constant) and first.value in exercises


def _uses_reference(node: ast.AST, names: set[str], modules: set[str], exercises: set[str]) -> bool:
    """Whether code (a course function) imports an exercise's reference or reads something holding it."""
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("utils.reference")
               and any(a.name in exercises or a.name == "*" for a in n.names)
               or isinstance(n, (ast.Name, ast.Attribute, ast.Call)) and _holds_reference(n, names, modules, exercises)
               for n in ast.walk(node))


def course_bindings(sources: Iterable[str], exercises: Iterable[str]) -> CourseBindings:
    """The names that the course's code cells (``sources``) bind to the reference of one of this
    notebook's ``exercises``: imported (``from utils.reference import Block as ReferenceBlock``), taken
    from the module (``X = R.Block``), ``X = mine_or_reference("Block", Block)``, an alias of such a
    name, a class deriving from one, a function using one (08's ``reference_block(C)``, which imports
    the reference inside and returns one). Names bound to earlier sections' components (08's
    ``CausalSelfAttention``) are given building blocks: not among them."""
    exercises = set(exercises)
    statements = [stmt for parsed in map(parse, sources) if parsed for stmt in _module_level(parsed[0])]
    names, modules = set(), set()
    for stmt in statements:
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("utils.reference"):
            names |= exercises if any(a.name == "*" for a in stmt.names) else \
                {a.asname or a.name for a in stmt.names if a.name in exercises}
        elif isinstance(stmt, ast.ImportFrom) and stmt.module == "utils":
            modules |= {a.asname or a.name for a in stmt.names if a.name == "reference"}
        elif isinstance(stmt, ast.Import):
            modules |= {a.asname for a in stmt.names if a.name == "utils.reference" and a.asname}
    while True:
        more = set()
        for stmt in statements:
            if isinstance(stmt, ast.Assign) and _holds_reference(stmt.value, names, modules, exercises):
                more |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            elif isinstance(stmt, ast.ClassDef) and any(_holds_reference(b, names, modules, exercises)
                                                        for b in stmt.bases):
                more.add(stmt.name)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _uses_reference(stmt, names, modules,
                                                                                              exercises):
                more.add(stmt.name)
        if more <= names:
            return CourseBindings(frozenset(names), frozenset(modules))
        names |= more


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _global_reads(cell: tuple[ast.Module, list[str]]) -> set[str]:
    """The names a cell reads from the notebook's namespace: not a function's own parameters and locals."""
    tree, lines = cell
    try:
        scopes = [symtable.symtable("\n".join(lines), "<cell>", "exec")]
    except SyntaxError:
        return _names_used(tree)
    found = set()
    while scopes:
        scope = scopes.pop()
        scopes += scope.get_children()
        found |= {s.get_name() for s in scope.get_symbols()
                  if s.is_referenced() and (s.is_global() or scope.get_type() == "module")}
    return found


def _names_bound(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    return {n.id for t in _targets(stmt) for n in ast.walk(t) if isinstance(n, ast.Name)}


def _tainted(trees: list[ast.Module], exercises: set[str], course: CourseBindings) -> set[str]:
    """Names that hold the reference: bound to it by the course's cells, bound by importing it, or
    (transitively) by a top-level definition or assignment that uses such a name."""
    tainted = {name for tree in trees for _, names in _reference_imports(tree, exercises) for name in names}
    tainted |= course.names
    statements = [stmt for tree in trees for stmt in tree.body]
    while True:
        more = {name for stmt in statements if _names_used(stmt) & tainted for name in _names_bound(stmt)} - tainted
        if not more:
            return tainted
        tainted |= more


def _evidence(cell: tuple[ast.Module, list[str]], exercise: str, own: bool, exercises: set[str],
              tainted: set[str], course: CourseBindings) -> str | None:
    """The line showing that ``exercise`` is the reference: in its own solution cell (``own``) an
    import of the reference, a read of a name holding it or of ``R.<exercise>``; in any cell, an
    import that binds the exercise's own name."""
    tree, lines = cell
    imports = _reference_imports(tree, exercises)
    nodes = [stmt for stmt, names in imports if own or exercise in names]
    if own and not nodes:
        reads = _global_reads(cell)
        nodes = sorted((n for n in ast.walk(tree)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in tainted & reads
                        or isinstance(n, ast.Attribute) and n.attr in exercises
                        and _is_reference_module(n.value, course.modules & reads)),
                       key=lambda n: n.lineno)
    return lines[nodes[0].lineno - 1].strip() if nodes else None


def borrowed(solutions: dict[str, str], others: list[str],
             course: CourseBindings = CourseBindings()) -> dict[str, Finding]:
    """exercise -> why its own code counts as the course's reference implementation.

    ``solutions`` maps each exercise to its solution cell; ``others`` are the other code cells
    the student wrote or changed (helpers, edited demos); ``course`` what the unchanged course
    cells bind to the reference (:func:`course_bindings`). An exercise is borrowed when its
    solution cell imports the reference or reads a name that holds it (even through a helper
    cell; a function's own parameters and locals are not such reads), or when some cell binds
    the exercise's own name to the reference. A cell that binds the reference under another name
    (05: ``… import MultiHeadAttention as ReferenceMHA``) borrows nothing as long as no solution
    uses what it binds.
    """
    exercises = set(solutions)
    parsed = {key: parse(src) for key, src in [*solutions.items(), *enumerate(others)]}
    parsed = {key: p for key, p in parsed.items() if p is not None}
    tainted = _tainted([tree for tree, _ in parsed.values()], exercises, course)
    found = {}
    for exercise in solutions:
        for key, cell in parsed.items():
            line = _evidence(cell, exercise, key == exercise, exercises, tainted, course)
            if line is not None:
                found[exercise] = Finding("uses-reference", line, "使用了课程的参考实现 utils.reference")
                break
    return found
