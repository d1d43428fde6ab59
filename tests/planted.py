"""Planted candidates for the confirmation tests (tests/test_confirmed_codes*.py): a candidate that computes exactly
one misconception (its oracle's own output), on every call where it differs from the right answer or on the first
only — an accidental match on one case. A check names the code for the first and gives the second a plain finding."""
from __future__ import annotations

import torch

import utils.checks as checks
from autograder.judge import SEEDS
from utils.checks.compare import close

RUNS = [(False, 0), (False, SEEDS - 17), (True, 987_654)]    # (extended, seed): the notebook's, the judge's, hidden
PLAIN = {"wrong", "wrong-shape", "nan-output"}                # what the first wrong case was, no misconception named


def same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return close(a, b)
    return a == b


class Planted:
    """``right(*args)`` except where ``wrong(*args)`` (a misconception's output, None for none) differs from it:
    there the misconception's, on every such call, or on the first only (``once``)."""

    def __init__(self, right, wrong, once: bool):
        self.right, self.wrong, self.once, self.shown = right, wrong, once, False

    def __call__(self, *args, **kwargs):
        # unobserved by the check's watch (a torch function mode): the oracles may call what a learner may not
        with torch.no_grad(), torch._C.DisableTorchFunction():
            want, bad = self.right(*args, **kwargs), self.wrong(*args, **kwargs)
        if bad is None or same(bad, want) or (self.once and self.shown):
            return want
        self.shown = True
        return bad


def first(pairs, code):
    """The output of ``code`` among (code, output) pairs; None when it has none."""
    return next((out for c, out in pairs if c == code), None)


def verdict(exercise: str, candidate, extended: bool, seed: int) -> str | None:
    try:
        getattr(checks, f"check_{exercise}")(candidate, extended=extended, seed=seed)
    except checks.CheckError as err:
        return err.code
    return None


def verdicts(exercise: str, plant, code: str) -> tuple[list, list]:
    """The codes of every run for the candidate that computes ``code`` on every case, and for the one that does once."""
    always = [verdict(exercise, plant(code, False), extended, seed) for extended, seed in RUNS]
    once = [verdict(exercise, plant(code, True), extended, seed) for extended, seed in RUNS]
    return always, once


def assert_confirmed(exercise: str, plant, code: str, of_itself: frozenset = frozenset()) -> None:
    """``code`` is named when ``plant`` computes it on every case, in every run; computing it on one case only gets a
    plain finding (or one of ``of_itself``: what one wrong case shows of itself, with no misconception matched)."""
    always, once = verdicts(exercise, plant, code)
    assert always == [code] * len(RUNS), f"computing {code} on every case gives {always}"
    assert set(once) <= PLAIN | of_itself, f"computing {code} on one case only gives {once}"
