"""Section 10's findings read right: a count that agrees is not shown as if it were the fault, and a
failure run outside IPython shows its own code once, not a chained generic one first."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.bugbank import load, s10
from utils.checks import CheckError, check_top_p_filter

from .conftest import ROOT

COUNTS = re.compile(r"每行留下 (\[[\d, ]*\]) 个 token，应为 (\[[\d, ]*\]) 个")
TOP_P_WRONG = [v for v in s10.VARIANTS if v.exercise == "top_p_filter" and v.expected]
# The faults that change how many tokens a row keeps: their findings give both counts; the others' do not.
COUNT_FAULTS = {"top-p-drops-crossing", "top-p-ascending", "top-p-not-probabilities", "top-p-whole-batch",
                "top-p-one-drops"}


@pytest.mark.parametrize("variant", TOP_P_WRONG, ids=lambda v: v.label)
def test_a_top_p_finding_never_shows_equal_counts_as_the_fault(variant):
    with pytest.raises(CheckError) as caught:
        check_top_p_filter(load(variant))
    counts = COUNTS.findall(caught.value.finding)
    if variant.expected in COUNT_FAULTS:
        assert counts and all(kept != want for kept, want in counts), caught.value.finding
    else:
        assert not counts, caught.value.finding


def test_the_mask_order_finding_names_the_tokens_kept_and_the_nucleus():
    variant = next(v for v in TOP_P_WRONG if v.expected == "top-p-mask-order")
    with pytest.raises(CheckError) as caught:
        check_top_p_filter(load(variant))
    assert re.search(r"第 \d+ 行留下的是 token \[[\d, ]+\]，核是 token \[[\d, ]+\]", caught.value.finding), caught.value


# Variants whose diagnosis is raised while handling another failure (a crash turned into its diagnosis).
RAISED_WHILE_HANDLING = ["top_p_filter-rows-are-dim-0", "generate-divides-by-zero"]


@pytest.mark.parametrize("variant_id", RAISED_WHILE_HANDLING)
def test_outside_ipython_a_failure_shows_one_code(variant_id):
    script = ("import sys; from tests.bugbank import all_variants, load; import utils.checks as checks\n"
              f"v = next(v for v in all_variants() if v.id == {variant_id!r})\n"
              "getattr(checks, f'check_{v.exercise}')(load(v))\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    codes = re.findall(r"^\S*CheckError: \[([\w-]+)\]|^\[([\w-]+)\] ", run.stderr, flags=re.M)
    assert run.returncode != 0 and len(codes) == 1, run.stderr[-2000:]
