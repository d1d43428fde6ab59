"""Every check is proven: each known-wrong variant fails with its own code, each differently
written correct variant passes, and the course's reference implementation passes."""
from __future__ import annotations

import time

import pytest

import utils.checks as checks
from utils import reference
from utils.checks.codes import CODES

from .bugbank import all_variants, load

VARIANTS = all_variants()
EXERCISES = sorted({v.exercise for v in VARIANTS})


def run_check(exercise: str, candidate, **kwargs) -> str | None:
    """The code the check reports for ``candidate`` (None when it passes)."""
    try:
        getattr(checks, f"check_{exercise}")(candidate, **kwargs)
    except checks.CheckError as err:
        assert str(err).startswith(f"[{err.code}] "), "every message starts with its bracketed code"
        return err.code
    return None


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
@pytest.mark.parametrize("extended", [False, True], ids=["visible", "hidden"])
def test_variant_gets_its_diagnosis(variant, extended):
    assert variant.expected is None or variant.expected in CODES
    got = run_check(variant.exercise, load(variant), extended=extended, seed=0 if not extended else 7)
    assert got == variant.expected, f"{variant.id}: expected {variant.expected}, check said {got}"


@pytest.mark.parametrize("exercise", EXERCISES)
def test_reference_passes_fast(exercise, capsys):
    start = time.perf_counter()
    assert run_check(exercise, getattr(reference, exercise)) is None
    assert run_check(exercise, getattr(reference, exercise), extended=True, seed=3) is None
    assert time.perf_counter() - start < 2.0, "visible + hidden check must stay well under a second each"
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("exercise", EXERCISES)
def test_bank_has_wrong_and_right_variants(exercise):
    kinds = {v.expected is None for v in VARIANTS if v.exercise == exercise}
    assert kinds == {True, False}, f"{exercise} needs both wrong and correct variants"


def test_untouched_stub_is_reported_kindly():
    def stub(*args, **kwargs):
        raise NotImplementedError()
    for exercise in EXERCISES:
        assert run_check(exercise, stub) == "not-implemented"
