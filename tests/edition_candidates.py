"""What a student holds: every function, class and constant a package defines, tried as an answer.

The class edition must hold no answer to an open assignment. :func:`passing_candidates` takes a
package (the class edition as installed, or the full course to show the test can fail), collects
everything its modules define and runs the full instructor checks (hidden cases, another seed) on
each as a candidate for each graded exercise.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import multiprocessing
import pkgutil
import signal
import traceback
import types
import warnings

import utils.checks as checks
from utils import reference

SECONDS_PER_TRY = 3      # most candidates fail at once; one that runs out of time is tried again with
SECONDS_PER_RETRY = 60   # this much (a busy machine), and reported if it runs out again
# the contract's classes (an nn.Module or a cache): a function cannot be one, nor a class a function
CLASSES = {name for name in reference.__all__ if isinstance(getattr(reference, name), type)}


def modules_of(package: types.ModuleType, skip: tuple[str, ...] = ()) -> list[types.ModuleType]:
    found = [package]
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not any(info.name == s or info.name.startswith(s + ".") for s in skip):
            with contextlib.suppress(Exception), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found.append(importlib.import_module(info.name))
    return found


def _stripped(value) -> bool:
    """An oracle of the full edition: the class edition keeps only its stored results (utils/checks/oracle.py)."""
    return getattr(value, "__oracle__", False) or getattr(value, "__instructor_only__", False)


def candidates(package: types.ModuleType, skip: tuple[str, ...] = (),
               without_oracles: bool = False) -> dict[str, object]:
    """qualified name -> object: each function and class defined in the package, each constant (as a
    function returning it), and each method of its classes (``without_oracles``: what the class edition
    strips left out, for a full package standing in for it)."""
    found: dict[str, object] = {}
    for module in modules_of(package, skip):
        for name, value in vars(module).items():
            where = f"{module.__name__}.{name}"
            if inspect.iscoroutinefunction(value) or (without_oracles and _stripped(value)):
                continue
            if inspect.isfunction(value) or inspect.isclass(value):
                if getattr(value, "__module__", None) == module.__name__:
                    found[where] = value
                    if inspect.isclass(value):
                        found.update({f"{where}.{m}": f for m, f in vars(value).items() if inspect.isfunction(f)})
            elif not inspect.ismodule(value) and not name.startswith("__") and not callable(value):
                found[where] = (lambda constant: lambda *_args, **_kwargs: constant)(value)
    return found


class _TooLong(BaseException):  # not an Exception: no check or agent may swallow it
    pass


def _alarm(_signum, _frame):
    raise _TooLong()


def outcome(exercise: str, candidate) -> str:
    """"pass", "fail" or "timeout": ``candidate`` under the full (hidden) check of ``exercise``. A try cut
    short is tried again with more time, then reported: a slow candidate might be an answer."""
    first = _try(exercise, candidate, SECONDS_PER_TRY)
    return _try(exercise, candidate, SECONDS_PER_RETRY) if first == "timeout" else first


def _try(exercise: str, candidate, seconds: int) -> str:
    check = getattr(checks, f"check_{exercise}")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            check(candidate, extended=True, seed=7)
        return "pass"
    except _TooLong:
        return "timeout"
    except BaseException:  # noqa: BLE001 — anything else but a pass is a fail, SystemExit included
        return "fail"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def passing_candidates(package: types.ModuleType, exercises: list[str], skip: tuple[str, ...] = (),
                       without_oracles: bool = False) -> list[str]:
    """``exercise <- candidate`` for every candidate of ``package`` that passes an exercise's full check, or
    whose try ran out of time (``exercise <- candidate (timed out)``: it could not be told apart from an answer).

    The search runs in a forked child of this process: a try cut short by its alarm can stop a first import
    half-way (seen: sympy, which torch imports lazily, and transformers' lazy names, broken for every later
    test of the same pytest worker); the child takes such a module with it."""
    receive, send = multiprocessing.Pipe(duplex=False)

    def search() -> None:
        try:
            send.send(("hits", _search(package, exercises, skip, without_oracles)))
        except BaseException:  # noqa: BLE001 — reported to the parent, which raises
            send.send(("error", traceback.format_exc()))

    child = multiprocessing.get_context("fork").Process(target=search)
    child.start()
    send.close()
    kind, value = receive.recv()
    child.join()
    if kind == "error":
        raise RuntimeError(f"the candidate search failed in its child process:\n{value}")
    return value


def _search(package: types.ModuleType, exercises: list[str], skip: tuple[str, ...],
            without_oracles: bool) -> list[str]:
    found = candidates(package, skip, without_oracles)
    hits = []
    for exercise in exercises:
        wants_class = exercise in CLASSES
        for where, obj in found.items():
            if inspect.isclass(obj) != wants_class:
                continue
            result = outcome(exercise, obj)
            if result != "fail":
                hits.append(f"{exercise} <- {where}" + (" (timed out)" if result == "timeout" else ""))
    return hits
