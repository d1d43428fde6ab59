"""Every check is proven: each known-wrong variant fails with its own code, each differently
written correct variant passes, and the course's reference implementation passes."""
from __future__ import annotations

import time

import pytest
import torch
import torch.nn as nn

import utils.checks as checks
from utils import reference
from utils.checks.codes import CODES

from .bugbank import all_variants, load
from autograder.judge import SEEDS

from .judging import judge_locally

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


# The learner's visible check in the notebook; the judge's visible and hidden runs in grading (fresh seeds up
# to judge.SEEDS, as large as a grading seed gets; every call and answer through the protocol's codec).
RUNS = {"notebook": (False, 0, False), "judge-visible": (False, SEEDS - 17, True),
        "judge-hidden": (True, 987_654, True)}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
@pytest.mark.parametrize("run", RUNS)
def test_variant_gets_its_diagnosis(variant, run):
    assert variant.expected is None or variant.expected in CODES
    extended, seed, judged = RUNS[run]
    candidate = load(variant)
    got = (judge_locally(variant.exercise, candidate, extended, seed) if judged
           else run_check(variant.exercise, candidate, extended=extended, seed=seed))
    expected = None if variant.fits_visible and not extended else variant.expected
    assert got == expected, f"{variant.id} ({run}): expected {expected}, check said {got}"


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


def _fingerprint(value):
    if isinstance(value, torch.Tensor):
        flat = value.detach().double().flatten()
        return ("tensor", tuple(value.shape), round(float((flat * torch.arange(1, flat.numel() + 1)).sum()), 6))
    if isinstance(value, torch.Generator):
        return ("generator", value.initial_seed())
    if isinstance(value, nn.Module):
        return ("module", tuple(_fingerprint(t) for t in value.state_dict().values()))
    return ("other", getattr(value, "__name__", repr(value)))


def _inputs_seen(exercise: str, seed: int) -> list:
    """Everything the hidden check hands the reference implementation under ``seed``."""
    target, seen = getattr(reference, exercise), []
    if isinstance(target, type):
        class Recording(target):
            def forward(self, *args, **kwargs):
                seen.append((_fingerprint(self), *map(_fingerprint, (*args, *kwargs.values()))))
                return super().forward(*args, **kwargs)
        Recording.__name__ = target.__name__
        candidate = Recording
    else:
        def candidate(*args, **kwargs):
            seen.append(tuple(map(_fingerprint, (*args, *kwargs.values()))))
            return target(*args, **kwargs)
        candidate.__name__ = target.__name__
    assert run_check(exercise, candidate, extended=True, seed=seed) is None
    return seen


@pytest.mark.parametrize("exercise", EXERCISES)
def test_seed_gives_new_inputs(exercise):
    """The README promises hidden tests with new seeds: a check's seed must change what it tests."""
    first, second = _inputs_seen(exercise, 0), _inputs_seen(exercise, 1)
    if not any(first):
        pytest.skip(f"check_{exercise} hands the reference no inputs to record (a quiz, or a class "
                    "fed through methods other than forward)")
    assert first != second, f"check_{exercise} ignores its seed: seeds 0 and 1 test the same inputs"
