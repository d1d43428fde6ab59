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
    expected = None if variant.fits_visible and not extended else variant.expected
    assert got == expected, f"{variant.id}: expected {expected}, check said {got}"


@pytest.mark.parametrize("exercise", EXERCISES)
def test_reference_passes_within_a_second(exercise, capsys):
    """Budget: a check runs in well under a second. CPU time, so a busy machine cannot fake a fail."""
    for extended, budget in ((False, 1.0), (True, 2.0)):
        start = time.process_time()
        assert run_check(exercise, getattr(reference, exercise), extended=extended, seed=3) is None
        spent = time.process_time() - start
        assert spent < budget, f"check_{exercise}(extended={extended}) used {spent:.2f} s of CPU"
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("exercise", EXERCISES)
def test_bank_has_wrong_and_right_variants(exercise):
    kinds = {v.expected is None for v in VARIANTS if v.exercise == exercise}
    assert kinds == {True, False}, f"{exercise} needs both wrong and correct variants"


def test_untouched_stub_is_reported_kindly():
    def stub(*args, **kwargs):
        raise NotImplementedError()
    for exercise in EXERCISES:
        assert run_check(exercise, stub) == "not-implemented"
