"""The machinery every check uses: a Chinese error with a stable code, safe calls into the
learner's code, comparisons that diagnose a misconception by matching the candidate's
output against the output each known misconception would give on the same input.
"""
from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import inspect
import re
import sys
import time
import traceback
import types
import unicodedata
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from .codes import describe

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_PASSED: dict[str, object] = {}  # name -> the candidate that last passed its check
# Marks that every machine draws: DejaVu Sans / Sans Mono have them (✅ / ❌ need a colour-emoji font).
PASS_MARK, FAIL_MARK = "✓", "✗"


def joined(subject: str, rest: str) -> str:
    """``subject`` then ``rest``: Chinese runs on without a space, ASCII keeps one ("q 数值不对").

    A wide (CJK) last character of ``subject`` takes no space: "时的输出数值不对", "（B, T）的形状".
    """
    wide = bool(subject) and unicodedata.east_asian_width(subject[-1]) in "WF"
    return f"{subject}{rest}" if wide else f"{subject} {rest}"


def _callables(namespace, names=None) -> dict[str, object]:
    return {name: value for name, value in vars(namespace).items()
            if callable(value) and not isinstance(value, type(builtins)) and (names is None or name in names)}


# What the checks rely on, as it was when the course package was imported (before any
# learner code ran). A check refuses to run on a patched torch.allclose, print, …
# (Only some builtins: IPython legitimately swaps input/exit/quit for every cell.)
_WATCHED = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": torch.nn.functional,
            "torch.testing": torch.testing, "builtins": builtins}
_WATCHED_BUILTINS = {"print", "isinstance", "len", "float", "int", "bool", "abs", "max", "min", "sum", "any",
                     "all", "range", "zip", "enumerate", "getattr", "hasattr", "callable", "type", "repr", "str"}
_ORIGINALS = {prefix: _callables(ns, _WATCHED_BUILTINS if prefix == "builtins" else None)
              for prefix, ns in _WATCHED.items()}


def _tampered() -> str | None:
    """The first watched function replaced since import by code outside torch, if any.

    (torch itself wraps some functions later: importing torch._dynamo, e.g. by creating an
    optimizer, replaces torch.manual_seed with a wrapper defined in torch.)
    """
    for prefix, namespace in _WATCHED.items():
        current = vars(namespace)
        for name, original in _ORIGINALS[prefix].items():
            value = current.get(name, original)
            if value is not original and not str(getattr(value, "__module__", "")).startswith("torch"):
                return f"{prefix}.{name}"
    return None


# --- the checks guard themselves ---------------------------------------------------------------
# Learner code can reach the checks' own modules (``sys.modules[...]``, ``check_x.__globals__``)
# in ways no static scan sees. So when the package has been imported (install_notebook_hooks), each
# check is sealed: what it relies on inside utils.checks is recorded, and before judging the check
# refuses to run when any of it changed, whatever changed it ([tampered], naming what changed):
# * every global name that its code, and the code of every function it reaches, loads — the object
#   bound (and it missing: a new global would shadow a builtin) and, for a list, dict, tensor, …,
#   its contents, deeply (a table of cases emptied in place);
# * each reached function's __code__, __defaults__, __kwdefaults__, __globals__ and closure cells,
#   and each reached class's __dict__ and __bases__ (functions and classes of utils.checks only);
# * all of this module, the machinery every check runs: a change here affects every check.
# So a check is affected by a change of what it actually uses, and by any change of core: another
# check, even of the same section, keeps judging. Not watched: what the checks change themselves as
# they run — a global that a function of its module rebinds (``global``) and the caches below.
_PACKAGE = __name__.rpartition(".")[0]
_RUNTIME_STATE = {__name__: {"_PASSED"}, f"{_PACKAGE}.oracle": {"_STORED"}}
_DATA = (dict, list, tuple, set, types.SimpleNamespace, torch.Tensor)
_MISSING = object()


def _ours(module_name) -> bool:
    return isinstance(module_name, str) and (module_name == _PACKAGE or module_name.startswith(f"{_PACKAGE}."))


class _TensorSnapshot:
    """A tensor's dtype, shape and bytes; equal to a tensor that still holds them."""

    def __init__(self, tensor: torch.Tensor):
        self.dtype, self.shape, self.data = tensor.dtype, tensor.shape, self._bytes(tensor)

    @staticmethod
    def _bytes(tensor: torch.Tensor) -> bytes:
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        return (flat.to(torch.uint8) if flat.dtype == torch.bool else flat).view(torch.uint8).numpy().tobytes()

    def __eq__(self, other) -> bool:
        return (isinstance(other, torch.Tensor) and other.dtype == self.dtype and other.shape == self.shape
                and self._bytes(other) == self.data)

    __hash__ = None


def _snapshot(value):
    """A deep copy of a value's data that compares equal (``snapshot == value``, at C speed: the
    unchanged leaves are the same objects) as long as the value holds the same data."""
    if isinstance(value, torch.Tensor):
        return _TensorSnapshot(value)
    if isinstance(value, dict):
        return {key: _snapshot(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map(_snapshot, value)) if type(value) in (list, tuple) else value
    if isinstance(value, set):
        return set(value)
    if isinstance(value, types.SimpleNamespace):
        return types.SimpleNamespace(**_snapshot(vars(value)))
    return value


def _cells(fn) -> tuple:
    values = []
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            values.append(_MISSING)
    return tuple(values)


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _rebound(namespace: dict) -> set[str]:
    """The globals of a module that its own functions rebind (``global x; x = …``)."""
    functions = [inspect.unwrap(value) for value in namespace.values() if callable(value)]
    return {ins.argval for fn in functions if isinstance(fn, types.FunctionType)
            and fn.__globals__ is namespace for code in _codes(fn.__code__)
            for ins in dis.get_instructions(code) if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}


def _same_name(namespace: dict, name: str, bound, data) -> bool:
    value = namespace.get(name, _MISSING)
    return value is bound and (data is _MISSING or data == value)


def _same_function(fn, code, defaults, kwdefaults, namespace, cells) -> bool:
    return (fn.__code__ is code and fn.__globals__ is namespace and defaults == fn.__defaults__
            and kwdefaults == fn.__kwdefaults__ and cells == _cells(fn))


def _same_class(cls, attributes, bases) -> bool:
    return cls.__bases__ == bases and tuple(vars(cls).items()) == attributes


class _Seal:
    """What each check relies on, recorded once (see above); ``changed(name)`` says what differs now."""

    def __init__(self):
        self.checks: dict[str, Callable] = {}
        self.probes: dict[str, tuple] | None = None   # check name -> probes; None until sealed
        self._state: dict[str, set[str]] = {}

    def register(self, name: str, wrapper: Callable) -> None:
        self.checks[name] = wrapper
        if self.probes is not None:  # a check defined after the package was sealed
            self.probes[name] = self._core + self._walk([wrapper], set(self._core_seen))[0]

    def seal(self) -> None:
        """Record every registered check's probes (at the end of the package's import)."""
        self._core, self._core_seen = self._walk([sys.modules[__name__]], set())
        self.probes = {}
        for name, wrapper in self.checks.items():
            self.register(name, wrapper)

    def changed(self, name: str) -> str | None:
        """What the check ``name`` relies on that is no longer as it was sealed, if anything."""
        if self.probes is None:
            self.seal()
        for same, label, *recorded in self.probes.get(name, ()):
            if not same(*recorded):
                return label
        return None

    def _walk(self, roots: list, seen: set) -> tuple[tuple, set]:
        probes, todo = [], list(roots)
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, types.ModuleType) and _ours(obj.__name__):
                todo += self._names(probes, seen, vars(obj), vars(obj))
            elif isinstance(obj, types.FunctionType) and _ours(obj.__globals__.get("__name__")):
                probes.append((_same_function, f"{obj.__module__}.{obj.__qualname__} 的代码、默认参数或闭包", obj,
                               obj.__code__, _snapshot(obj.__defaults__), _snapshot(obj.__kwdefaults__),
                               obj.__globals__, _cells(obj)))
                names = {name for code in _codes(obj.__code__) for name in code.co_names}
                todo += self._names(probes, seen, obj.__globals__, names)
                todo += [*_cells(obj), *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
            elif isinstance(obj, type) and _ours(obj.__module__):
                probes.append((_same_class, f"类 {obj.__module__}.{obj.__qualname__}", obj, tuple(vars(obj).items()),
                               obj.__bases__))
                for value in vars(obj).values():
                    todo += [getattr(value, part) for part in ("__func__", "fget", "fset", "fdel")
                             if getattr(value, part, None) is not None] or [value]
            elif callable(obj) and hasattr(obj, "__wrapped__"):  # functools.lru_cache and the like
                todo.append(obj.__wrapped__)
        return tuple(probes), seen

    def _names(self, probes: list, seen: set, namespace: dict, names) -> list:
        """Probe each of ``names`` in ``namespace``; the objects bound, to walk on."""
        module = namespace.get("__name__")
        if module not in self._state:
            self._state[module] = _RUNTIME_STATE.get(module, set()) | _rebound(namespace)
        found = []
        for name in names:
            key = (id(namespace), name)
            if key in seen or name.startswith("__") or name in self._state[module]:
                continue
            seen.add(key)
            value = namespace.get(name, _MISSING)
            probes.append((_same_name, f"{module}.{name}", namespace, name, value,
                           _snapshot(value) if isinstance(value, _DATA) else _MISSING))
            found.append(value)
        return found


_SEAL = _Seal()


class CheckError(AssertionError):
    """A failed check: ``[code] finding`` plus the misconception and a hint, in Chinese.

    In Jupyter it renders as a short message (no traceback wall) via IPython's
    ``_render_traceback_`` hook; anywhere else ``str(err)`` starts with ``[code]``.
    """

    def __init__(self, code: str, finding: str):
        self.code = code
        self.finding = finding
        misconception, hint = describe(code)
        self.misconception, self.hint = misconception, hint
        super().__init__(f"[{code}] {finding}\n  可能的误区：{misconception}\n  提示：{hint}")

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{FAIL_MARK} [{self.code}] {self.finding}\x1b[0m",
                f"   可能的误区：{self.misconception}",
                f"   提示：{self.hint}"]


def _explain_name_error(shell, etype, value, tb, tb_offset=None):
    """IPython hook: a NameError in a notebook says, in Chinese, what usually causes it."""
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    name = getattr(value, "name", None) or str(value)
    print(f"提示：{name!s} 还没有定义。先运行定义它的单元格；如果那个单元格报错了，先修好它。")
    return None


def _shell():
    try:
        return get_ipython()  # noqa: F821  (defined inside IPython only)
    except NameError:
        return None


# Learner code is judged in a notebook kernel; the course's own tests and benchmark run the checks
# on the reference itself, outside one.
_IN_NOTEBOOK = _shell() is not None


def install_notebook_hooks() -> None:
    """Called once, when the package has imported every check: seals the checks (see _Seal) and,
    inside IPython/Jupyter, installs the hooks."""
    _SEAL.seal()
    if _IN_NOTEBOOK:
        _shell().set_custom_exc((NameError,), _explain_name_error)


def _learner_line(err: BaseException) -> str:
    """The innermost frame of the traceback that is not course or library code."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if _PACKAGE_DIR not in Path(f.filename).resolve().parents
              and "site-packages" not in f.filename and "/torch/" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"\n   出错的行：{(f.line or '').strip()}"


def call(candidate: Callable, *args, **kwargs):
    """Call learner code: NotImplementedError -> [not-implemented], other errors -> [crashed].

    Warnings are silenced (a warning on stderr would cost points in nbgrader).
    """
    try:
        # stderr output in a graded cell costs the cell its points in nbgrader: a warning or a
        # debug print of a correct solution must not, so both go to stdout / nowhere.
        with warnings.catch_warnings(), contextlib.redirect_stderr(sys.stdout):
            warnings.simplefilter("ignore")
            return candidate(*args, **kwargs)
    except CheckError:
        raise
    except NotImplementedError as err:
        name = getattr(candidate, "__name__", type(candidate).__name__)
        raise CheckError("not-implemented", f"{name} 尚未实现。") from err
    except Exception as err:  # any learner bug: report it kindly, with the learner's line
        raise CheckError("crashed", f"运行时抛出 {type(err).__name__}: {err}{_learner_line(err)}") from err


def check(name: str):
    """Decorate ``check_<name>(candidate, ...)``: time it, print the pass line, remember it.

    A check may return the quiz keys it left to the hidden test; the pass line then names them."""
    seal = _SEAL  # held by the wrapper: rebinding core._SEAL changes nothing (and is itself a change)

    def decorate(fn: Callable) -> Callable:
        from . import oracle  # imported here: oracle imports this module
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(candidate, *args, **kwargs):
            _PASSED.pop(name, None)
            start = time.perf_counter()
            if candidate is None:
                raise CheckError("not-implemented", f"{name} 还没有定义（先运行定义它的单元格）。")
            if oracle.stored_only() and _asks_beyond_visible(signature.bind(candidate, *args, **kwargs)):
                raise CheckError("hidden-only", "班级版只存了可见检查（默认参数）要用的结果；extended=True 或别的 seed "
                                                "的检查只在教师评分时运行。")
            replaced = _tampered()
            if replaced:
                raise CheckError("tampered", f"检测到 {replaced} 被替换了，检查无法可信地运行。")
            changed = seal.changed(name)
            if changed:
                raise CheckError("tampered", f"检测到检查依赖的 {changed} 被改动了，检查无法可信地运行。")
            twin = _IN_NOTEBOOK and reference_twin(name, candidate)
            if twin:
                raise CheckError("uses-reference", f"{name} {twin}，不能算作你自己的实现。")
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and stays fast on a busy CPU
            try:
                with torch.random.fork_rng(devices=[]):
                    judged_later = fn(candidate, *args, **kwargs)
            finally:
                torch.set_num_threads(threads)
            _PASSED[name] = candidate
            verdict = (f"通过可见的检查（{'、'.join(judged_later)} 只由隐藏测试评分）" if judged_later
                       else "通过全部检查")
            print(f"{PASS_MARK} {name} {verdict}（{time.perf_counter() - start:.2f} 秒）")
        seal.register(name, wrapper)
        return wrapper
    return decorate


def _asks_beyond_visible(call: inspect.BoundArguments) -> bool:
    """A check call with other arguments than a check cell's (``extended=False``, ``seed=0``)."""
    call.apply_defaults()
    return bool(call.arguments.get("extended")) or call.arguments.get("seed", 0) != 0


def reference_twin(name: str, candidate) -> str | None:
    """How ``candidate`` is the course's reference ``name`` (the object itself, a subclass of it, or a
    function running its code), if it is; None also when there is no reference to compare with."""
    try:
        from .. import reference
    except ImportError:
        return None
    original = getattr(reference, name, None)
    if original is None:
        return None
    if candidate is original:
        return f"就是课程的参考实现 utils.reference.{name}"
    if isinstance(candidate, type) and isinstance(original, type) and issubclass(candidate, original):
        return f"继承了课程的参考实现 utils.reference.{name}"
    code = getattr(inspect.unwrap(candidate), "__code__", None)
    if code is not None and code is getattr(inspect.unwrap(original), "__code__", None):
        return f"运行的是课程参考实现 utils.reference.{name} 的代码"
    return None


def mine_or_reference(name: str, candidate):
    """The learner's implementation if it passed its check, else the course's reference.

    Demos call this so that a notebook keeps running when an exercise is not done yet. The class
    edition holds no reference of an open assignment: there it is a stand-in that, once the demo uses
    it, says in one line that the demo needs the exercise first (utils/learner_solutions.py).
    """
    if candidate is not None and _PASSED.get(name) is candidate:
        return candidate
    from .. import reference
    if name in getattr(reference, "_OPEN", ()):
        from ..learner_solutions import Pending
        return Pending(name, f"这个演示要用到你的 {name}：先让它通过上面的检查，再运行这个单元格"
                             "（班级版课程包里没有还没截止的作业的参考实现）。")
    print(f"（你的 {name} 还没有通过检查，下面的演示暂用课程的参考实现。）")
    return getattr(reference, name)


class TorchCalls(TorchFunctionMode):
    """Records every torch function called under it (``with TorchCalls() as calls: ...``)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[object, tuple, dict]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)

    def first_named(self, fragment: str) -> str | None:
        """The name of the first function called whose name contains ``fragment``."""
        return next((n for n in (getattr(f, "__name__", "") for f, _, _ in self.calls) if fragment in n), None)

    def received(self, obj) -> bool:
        """Whether ``obj`` itself was passed to any call."""
        return any(a is obj for _, args, kwargs in self.calls for a in (*args, *kwargs.values()))


# --- comparisons ------------------------------------------------------------------------

def close(got, want, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Same shape and values equal within tolerance (NaN matches NaN: a misconception's
    output may well contain NaN where the candidate's does too)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return False
    return bool(torch.allclose(got.detach().double(), want.detach().double(), atol=atol, rtol=rtol,
                               equal_nan=True))


def require_tensor(got, what: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise CheckError("wrong-type", joined(what, f"应该是 torch.Tensor，实际得到 {type(got).__name__}。"))
    return got


def expect(got, want: torch.Tensor, what: str, misconceptions: Sequence[tuple[str, object]] = (),
           atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Pass if ``got`` equals ``want``; otherwise name the misconception whose output it equals.

    ``misconceptions`` pairs a code with the tensor that misconception would produce on the
    same input (or a zero-argument callable computing it, evaluated only when needed).
    """
    if close(got, want, atol, rtol):
        return
    for code, wrong in misconceptions:
        wrong = wrong() if callable(wrong) else wrong
        if wrong is not None and close(got, wrong, atol, rtol):
            raise CheckError(code, f"{what}，与下面这个误区算出的结果完全一致。")
    got = require_tensor(got, what)
    if got.shape != want.shape:
        raise CheckError("wrong-shape", joined(what, f"的形状应为 {tuple(want.shape)}，实际是 {tuple(got.shape)}。"))
    if not torch.isfinite(got).all() and torch.isfinite(want).all():
        raise CheckError("nan-output", joined(what, "含有 NaN/inf（参考结果全是有限值）。"))
    diff = (got.detach().double() - want.double()).abs()
    worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    raise CheckError("wrong", joined(what, f"数值不对：在下标 {worst} 处应为 {want[worst].item():.5g}，"
                                           f"实际是 {got[worst].item():.5g}（最大误差 {diff.max().item():.3g}）。"))


def quiz_answers(candidate: Callable, name: str, keys: Sequence[str]) -> dict:
    """The dict a ``quiz_*()`` returns, with every key of ``keys`` present (else a CheckError)."""
    answers = call(candidate)
    if not isinstance(answers, dict):
        raise CheckError("wrong-type", f"{name}() 应返回 dict，实际得到 {type(answers).__name__}。")
    missing = [key for key in keys if key not in answers]
    if missing:
        raise CheckError("quiz-missing-key", f"答案里没有键 {missing[0]!r}（需要 {', '.join(keys)}）。")
    return answers


def call_pure(candidate: Callable, *args, **kwargs):
    """Call learner code and fail with [modified-input] if any tensor argument changed."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    before = [t.clone() for t in tensors]
    out = call(candidate, *args, **kwargs)
    if any(not torch.equal(b, a) for b, a in zip(before, tensors)):
        raise CheckError("modified-input", "调用之后，输入张量的值被改变了。")
    return out


def randn(*shape: int, seed: int, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype) * scale


def source_of(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


@contextlib.contextmanager
def crash_hint(candidate, patterns: dict[str, str]):
    """Turn a [crashed] into a diagnosis when the source shows the usual cause of that crash."""
    try:
        yield
    except CheckError as err:
        if err.code != "crashed":
            raise
        source = source_of(candidate)
        for code, pattern in patterns.items():
            if re.search(pattern, source):
                raise CheckError(code, err.finding) from err
        raise
