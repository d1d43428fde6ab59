"""The machinery every check uses: a Chinese error with a stable code, safe calls into the
learner's code, comparisons that diagnose a misconception by matching the candidate's
output against the output each known misconception would give on the same input.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import re
import sys
import time
import traceback
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


def install_notebook_hooks() -> None:
    """Called once on import inside IPython/Jupyter; does nothing elsewhere."""
    try:
        shell = get_ipython()  # noqa: F821  (defined inside IPython only)
    except NameError:
        return
    shell.set_custom_exc((NameError,), _explain_name_error)


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
    """Decorate ``check_<name>(candidate, ...)``: time it, print the pass line, remember it."""
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(candidate, *args, **kwargs):
            _PASSED.pop(name, None)
            start = time.perf_counter()
            if candidate is None:
                raise CheckError("not-implemented", f"{name} 还没有定义（先运行定义它的单元格）。")
            replaced = _tampered()
            if replaced:
                raise CheckError("tampered", f"检测到 {replaced} 被替换了，检查无法可信地运行。")
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and stays fast on a busy CPU
            try:
                with torch.random.fork_rng(devices=[]):
                    fn(candidate, *args, **kwargs)
            finally:
                torch.set_num_threads(threads)
            _PASSED[name] = candidate
            print(f"{PASS_MARK} {name} 通过全部检查（{time.perf_counter() - start:.2f} 秒）")
        return wrapper
    return decorate


def mine_or_reference(name: str, candidate):
    """The learner's implementation if it passed its check, else the course's reference.

    Demos call this so that a notebook keeps running when an exercise is not done yet.
    """
    if candidate is not None and _PASSED.get(name) is candidate:
        return candidate
    from .. import reference
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
