"""The seam between a check and the answers it compares with.

A check itself computes nothing that answers its exercise. What it compares the learner's
output with — the expected output, the output of each known misconception, the hidden cases,
the truths of a quiz — comes from functions marked here:

* ``@oracle``: a float64 re-implementation (or a misconception's output) of check-made data.
  In the course's own clone (self-study, and the instructor's grading) it runs. In the class
  edition (``python3 course.py edition student``) its body is gone; its results on the visible
  cases were stored when the course was built (``utils/checks/fixtures/<module>.pt``) and a
  call looks its result up by its arguments.
* ``@instructor_only``: the hidden cases and a quiz's truths. Nothing of them is stored; in the
  class edition a call says that hidden tests run only where the instructor grades.

So an oracle's arguments must be made by the check (seeded inputs, fixed weights, sizes), never
computed by the learner's code; and a float tensor among them is keyed by the ``@recipe`` that made it,
never by its bits, which differ between CPUs (utils/checks/keys.py): then the same call has the same key
in both editions and on every machine. A stored result is compared with the learner's output with the
tolerances of the full check, as the computed one is.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from .. import edition
from .errors import CheckError
from .keys import fingerprint

FIXTURES = Path(__file__).with_name("fixtures")
_STORED: dict[str, dict[str, object]] = {}        # fixture module -> key -> result (class edition)
_recording: dict[str, dict[str, object]] | None = None
_replaying: dict[str, dict[str, object]] | None = None   # the full edition acting as the class edition
_depth = 0                                        # oracles called by oracles are not stored


def _module_of(fn: Callable) -> str:
    return fn.__module__.rsplit(".", 1)[-1]


def oracle(fn: Callable) -> Callable:
    """Mark ``fn`` as an oracle (module docstring): run it, or look its stored result up."""
    module, name = _module_of(fn), fn.__qualname__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if stored_only():
            return copy.deepcopy(_stored(module, f"{name}:{fingerprint((args, kwargs))}", name))
        global _depth
        _depth += 1
        try:
            result = fn(*args, **kwargs)
        finally:
            _depth -= 1
        if _recording is not None and _depth == 0:
            _recording.setdefault(module, {})[f"{name}:{fingerprint((args, kwargs))}"] = copy.deepcopy(result)
        return result
    wrapper.__oracle__ = True
    return wrapper


def instructor_only(fn: Callable) -> Callable:
    """Mark ``fn`` as data only the instructor's grading has (module docstring)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if stored_only():
            raise CheckError("hidden-only", "这一部分是隐藏测试，只在教师评分时运行。")
        return fn(*args, **kwargs)
    wrapper.__instructor_only__ = True
    return wrapper


def reusable() -> bool:
    """Whether a result computed from oracles may be kept and reused without calling them again: nothing
    records the calls (``course.py build``) and nothing answers them from stored results."""
    return _recording is None and not stored_only()


def stored_only() -> bool:
    """Whether oracles answer from stored results only (the class edition, or the full one replaying)."""
    return edition.IS_STUDENT or _replaying is not None


def _stored(module: str, key: str, name: str):
    """The stored result of one oracle call: from the store being replayed, else the fixture file."""
    if _replaying is not None:
        results = _replaying.get(module, {})
    else:
        if module not in _STORED:
            path = FIXTURES / f"{module}.pt"
            _STORED[module] = torch.load(path, weights_only=True) if path.exists() else {}
        results = _STORED[module]
    if key not in results:
        raise CheckError("check-data-missing", f"检查要用的存储结果（{name}）在这个版本里找不到。")
    return results[key]


@contextlib.contextmanager
def recording() -> Iterator[dict[str, dict[str, object]]]:
    """Store what every outermost oracle returns, by fixture module (``course.py build``)."""
    global _recording
    if edition.IS_STUDENT:
        raise RuntimeError("the class edition has no oracles to record")
    _recording = {}
    try:
        yield _recording
    finally:
        _recording = None


# --- quiz answers: stored as salted digests, never as the numbers themselves -----------------------

SALT = "注意力机制/quiz/"


def _digest(text: str) -> str:
    return hashlib.sha256((SALT + text).encode()).hexdigest()[:24]


def _bucket(value: float, rel_tol: float) -> str:
    """The value's cell on a log scale whose cells are rel_tol wide ("0" for zero)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else "+"
    return f"{sign}{math.floor(math.log(abs(value)) / math.log1p(rel_tol))}"


def answer_key(value, rel_tol: float = 0.0) -> list[str]:
    """What a quiz answer is checked against: salted digests of ``value`` — of its exact form, or, with a
    relative tolerance, of its log-scale cell and both neighbours (so anything within rel_tol matches)."""
    if not rel_tol:
        return [_digest(repr(value))]
    centre = int(_bucket(value, rel_tol)[1:]) if value else 0
    sign = "-" if value < 0 else "+"
    return sorted(_digest(f"{sign}{centre + step}") for step in (-1, 0, 1)) if value else [_digest("0")]


def matches(value, key: list[str], rel_tol: float = 0.0) -> bool:
    """Whether ``value`` is the answer ``answer_key`` made ``key`` from (within ``rel_tol``)."""
    if not rel_tol:
        return _digest(repr(value)) in key
    return _digest(_bucket(float(value), rel_tol)) in key


@contextlib.contextmanager
def replaying(store: dict[str, dict[str, object]]) -> Iterator[None]:
    """Answer every oracle from ``store`` and refuse hidden data, as the class edition does (for tests)."""
    global _replaying
    _replaying = store
    try:
        yield
    finally:
        _replaying = None
