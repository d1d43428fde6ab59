"""The class edition (``python3 course.py edition student``): the same diagnoses, and no answer held.

In-process here: the full package stands in for the class edition by answering every oracle from
the stored results (utils/checks/oracle.py ``replaying``) and by leaving out what the edition strips.
tests/test_class_edition.py builds and installs the real edition.
"""
from __future__ import annotations

import math
import sys

import pytest
import torch

import utils
from autograder import fixtures
from utils.checks import oracle
from utils.checks.compare import close
from utils.checks.oracle import FIXTURES

from .bugbank import all_variants, load
from .class_edition import OPEN_EXERCISES
from . import edition_candidates
from .edition_candidates import passing_candidates
from .test_bugbank import EXERCISES, run_check

VARIANTS = all_variants()


@pytest.fixture(scope="module")
def committed() -> fixtures.Store:
    return {path.stem: torch.load(path, weights_only=True) for path in FIXTURES.glob("*.pt")}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_the_class_edition_gives_the_same_diagnosis(variant, committed):
    """The visible check answered from the stored results says what the full check says."""
    full = run_check(variant.exercise, load(variant))
    with oracle.replaying(committed):
        stored = run_check(variant.exercise, load(variant))
    assert stored == full, f"{variant.id}: the class edition says {stored}, the full course {full}"


def same_result(a, b) -> bool:
    """Two oracle results that a check cannot tell apart: floats within compare.close's tolerances, all else equal."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and (close(a, b) if a.is_floating_point() else torch.equal(a, b)))
    if isinstance(a, float):
        return isinstance(b, float) and math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_result, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_result(a[k], b[k]) for k in a)
    return a == b


def test_hidden_data_is_refused_where_it_is_not_stored(committed):
    from utils.checks import CheckError, check_attention
    from utils.reference import attention
    with oracle.replaying(committed), pytest.raises(CheckError) as err:
        check_attention(attention, extended=True, seed=7)
    assert err.value.code == "hidden-only"


@pytest.mark.parametrize("arguments", [{"seed": 1}, {"extended": True}], ids=["other-seed", "extended"])
def test_a_check_beyond_the_visible_one_says_so(committed, arguments):
    """Not [check-data-missing] (as if the course were broken): the class edition says the call is a hidden test's."""
    from utils.checks import CheckError, check_causal_mask
    from utils.reference import causal_mask
    with oracle.replaying(committed), pytest.raises(CheckError) as err:
        check_causal_mask(causal_mask, **arguments)
    assert err.value.code == "hidden-only" and "教师评分" in err.value.finding


@pytest.mark.slow
@pytest.mark.parametrize("exercise", [e for e in EXERCISES if e not in OPEN_EXERCISES])
def test_nothing_the_package_keeps_passes_a_check(exercise):
    """Every function, class and constant of utils/ that the class edition keeps (not the references,
    not the oracles) fails the exercise's full check. (utils.progress runs the learner's notebooks in
    fresh kernels: it holds no answer, and trying it as one would start kernels.) The exercises of
    sections 05–12 are tried in the installed edition itself (tests/test_class_edition.py); here the
    others, whose references that edition keeps."""
    hits = passing_candidates(utils, [exercise], skip=("utils.reference", "utils.progress"), without_oracles=True)
    assert not hits, "the class edition would hand out answers:\n" + "\n".join(hits)


@pytest.mark.slow
def test_the_full_package_fails_that_test():
    """Without the edition (the references and oracles kept) the same search finds answers."""
    hits = passing_candidates(utils, ["attention", "Head", "project_qkv"], skip=())
    assert {"attention <- utils.reference.attention", "Head <- utils.reference.Head"} <= {
        h.replace("s03_single_head_attention.", "") for h in hits}, hits
    assert "attention <- utils.checks.s03.softmax_attention" in hits


def test_the_answer_search_leaves_this_process_as_it_was(tmp_path, monkeypatch):
    """A candidate that imports a package taking longer than a try's alarm does it in the search's child
    process: the half-done import (its first submodule loaded, the package itself gone) cannot reach the
    later tests of this worker, as a half-imported sympy once did. A try that runs out of time twice is
    reported, not counted as a fail: a slow candidate might be an answer."""
    (tmp_path / "searched").mkdir()
    (tmp_path / "searched" / "__init__.py").write_text(
        "def candidate(*args, **kwargs):\n    import slow_package\n", encoding="utf-8")
    (tmp_path / "slow_package").mkdir()
    (tmp_path / "slow_package" / "__init__.py").write_text("from . import part\nimport time\ntime.sleep(5)\n",
                                                           encoding="utf-8")
    (tmp_path / "slow_package" / "part.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(edition_candidates, "SECONDS_PER_RETRY", edition_candidates.SECONDS_PER_TRY)
    import searched
    assert passing_candidates(searched, ["softmax"]) == ["softmax <- searched.candidate (timed out)"]
    assert not [name for name in sys.modules if name.startswith("slow_package")]
