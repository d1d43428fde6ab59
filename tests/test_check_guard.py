"""The checks guard themselves (utils/checks/core.py's seal): a check refuses to judge, with
[tampered] naming what changed, when learner code changed what it relies on — however it got
there (``sys.modules`` under a name built at run time, ``check_x.__globals__``, ``setattr`` on a
function's ``__code__``) — and only the checks that rely on what changed refuse. A check handed
the course's reference (itself, a subclass, its code) fails with [uses-reference].

Through real grading: ``python -m autograder.grade`` for the tampering (section 01), ``nbgrader
autograde`` for the reference bound by course cells (section 08's released notebook, unchanged
course cells included); each affected exercise scores 0, the notebook's other exercises keep
their points, and the feedback says why.
"""
from __future__ import annotations

import copy
import sys
import time
import types

import pytest
import torch

import utils.checks as checks
from autograder import grade
from autograder.integrity import course_bindings
from autograder.build import strip_markers
from utils import reference
from utils.checks import core, s01
from utils.notebook import cell_kind, grade_id

from .conftest import load_notebook
from .nbgrader_course import Course, with_solution

# --- the seal, in this process ----------------------------------------------------------------------

GOOD_PROJECT = "def project_qkv(x, w_q, w_k, w_v):\n    return x @ w_q, x @ w_k, x @ w_v"
WRONG_PROJECT = "def project_qkv(x, w_q, w_k, w_v):\n    return x @ w_q.T, x @ w_k.T, x @ w_v.T"
GOOD_SCORES = "def attention_scores(q, k):\n    return q @ k.transpose(-2, -1)"
WRONG_SCORES = "def attention_scores(q, k):\n    return k @ q.transpose(-2, -1)"


def _good_project(x, w_q, w_k, w_v):
    return x @ w_q, x @ w_k, x @ w_v


def _good_scores(q, k):
    return q @ k.transpose(-2, -1)


def _do_nothing(_candidate, _extended=False, _seed=0):
    return None


def _refusal(check, candidate) -> str | None:
    """The [tampered] finding of ``check(candidate)``, None when it judges (and passes)."""
    try:
        check(candidate)
    except core.CheckError as err:
        assert err.code == "tampered", err
        return err.finding
    return None


def test_every_check_is_sealed_and_finds_nothing_changed():
    names = {name.removeprefix("check_") for name in dir(checks) if name.startswith("check_")}
    assert names <= set(core._SEAL.probes)
    assert {name: core._SEAL.changed(name) for name in names if core._SEAL.changed(name)} == {}


TAMPERING = {  # label -> (change it, what the seal of project_qkv names, does attention_scores still judge?)
    "core.close replaced": (lambda mp: mp.setattr(core, "close", lambda *_a, **_k: True),
                            "utils.checks.core.close", False),
    "core changed anywhere": (lambda mp: mp.setattr(core, "source_of", lambda _obj: ""),
                              "utils.checks.core.source_of", False),
    "a section helper replaced": (lambda mp: mp.setattr(s01, "_as_triple", lambda result, _what: result),
                                  "utils.checks.s01._as_triple", True),
    "a builtin shadowed in the section module": (lambda mp: mp.setattr(s01, "isinstance", lambda *_a: True,
                                                                        raising=False),
                                                 "utils.checks.s01.isinstance", True),
    "the check's __code__ swapped": (lambda mp: mp.setattr(checks.check_project_qkv.__wrapped__, "__code__",
                                                           _do_nothing.__code__),
                                     "utils.checks.s01.check_project_qkv 的代码", True),
    "the check's defaults changed": (lambda mp: mp.setattr(checks.check_project_qkv.__wrapped__, "__defaults__",
                                                           (False, 12345)),
                                     "utils.checks.s01.check_project_qkv 的代码", True),
    "the wrapper's closure changed": (lambda mp: mp.setattr(checks.check_project_qkv.__closure__[0], "cell_contents",
                                                            _do_nothing),
                                      "utils.checks.s01.check_project_qkv 的代码", True),
    "the seal rebound": (lambda mp: mp.setattr(core, "_SEAL", core._Seal()), "utils.checks.core._SEAL", False),
}


@pytest.mark.parametrize("label", TAMPERING)
def test_a_change_to_what_a_check_relies_on_makes_it_refuse(label, monkeypatch):
    change, named, other_judges = TAMPERING[label]
    change(monkeypatch)
    try:
        refused = _refusal(checks.check_project_qkv, _good_project)
        other_refused = _refusal(checks.check_attention_scores, _good_scores)
    finally:
        monkeypatch.undo()
    assert refused is not None and named in refused, refused
    assert (other_refused is None) == other_judges, other_refused
    assert _refusal(checks.check_project_qkv, _good_project) is None, "undone: the check judges again"


def test_a_table_of_cases_emptied_in_place_makes_its_check_refuse():
    saved = list(s01.PROJECTION_CASES)
    s01.PROJECTION_CASES.clear()
    try:
        refused = _refusal(checks.check_project_qkv, _good_project)
        other_refused = _refusal(checks.check_attention_scores, _good_scores)
    finally:
        s01.PROJECTION_CASES.extend(saved)
    assert refused is not None and "utils.checks.s01.PROJECTION_CASES" in refused, refused
    assert other_refused is None, "attention_scores does not use that table"
    assert _refusal(checks.check_project_qkv, _good_project) is None


def test_the_guard_costs_well_under_a_millisecond_per_check_call():
    names = sorted(core._SEAL.probes)
    start, rounds = time.process_time(), 20
    for _ in range(rounds):
        for name in names:
            core._SEAL.changed(name)
    per_call = (time.process_time() - start) / (rounds * len(names))
    print(f"guard: {per_call * 1e3:.3f} ms CPU per check call ({len(names)} checks)")
    assert per_call < 2e-3, f"the guard costs {per_call * 1e3:.2f} ms per check call"


# --- the reference, recognised at run time ---------------------------------------------------------------

def test_the_reference_itself_a_subclass_or_its_code_is_recognised():
    class Mine(reference.Block):
        pass

    clone = types.FunctionType(reference.layer_norm.__code__, {})
    assert "就是" in core.reference_twin("Block", reference.Block)
    assert "继承" in core.reference_twin("Block", Mine)
    assert "代码" in core.reference_twin("layer_norm", clone)


def test_own_code_is_not_taken_for_the_reference():
    @torch.no_grad()  # every no_grad function runs torch's one wrapper: the wrapped code is compared
    def generate(_model, idx, *_sizes, **_options):
        return idx

    class Block(torch.nn.Module):
        pass

    assert core.reference_twin("generate", generate) is None
    assert core.reference_twin("Block", Block) is None
    assert core.reference_twin("no_such_exercise", generate) is None


# --- through real grading ---------------------------------------------------------------------------------

FULL_01 = {"test_project_qkv": 1, "test_project_qkv_hidden": 2, "test_attention_scores": 1,
           "test_attention_scores_hidden": 2}
PROJECT_ZERO = {**FULL_01, "test_project_qkv": 0, "test_project_qkv_hidden": 0}
SCORES_ZERO = {**FULL_01, "test_attention_scores": 0, "test_attention_scores_hidden": 0}
MODULES = '__import__("sy" + "s").modules'  # what the static scan cannot follow

TAMPERING_SUBMISSIONS = {  # student -> (project_qkv, attention_scores, expected scores, feedback must contain)
    "good": (GOOD_PROJECT, GOOD_SCORES, FULL_01, "通过全部检查"),
    "core-close": (GOOD_PROJECT, f'{WRONG_SCORES}\n_core = {MODULES}["utils.che" + "cks.core"]\n'
                                 "_core.close = lambda *a, **k: True",
                   SCORES_ZERO, "utils.checks.core.close"),
    "section-helper": (GOOD_PROJECT, f'{WRONG_SCORES}\n_s01 = {MODULES}["utils.checks.s01"]\n'
                                     "_s01.call_pure = lambda f, q, k: q @ k.transpose(-2, -1)",
                       SCORES_ZERO, "utils.checks.s01.call_pure"),
    "code-swap": (f"{WRONG_PROJECT}\n_raw = check_project_qkv.__wrapped__\n"
                  'setattr(_raw, "__co" + "de__", (lambda candidate, extended=False, seed=0: None).__code__)',
                  GOOD_SCORES, PROJECT_ZERO, "check_project_qkv 的代码"),
    "cases-cleared": (f'{WRONG_PROJECT}\n{MODULES}["utils.checks.s01"].PROJECTION_CASES.clear()', GOOD_SCORES,
                      PROJECT_ZERO, "utils.checks.s01.PROJECTION_CASES"),
}


def slim(nb: dict, keep=None) -> dict:
    """The notebook's first code cell, its export and graded cells, prose, and the cells ``keep`` wants."""
    nb = copy.deepcopy(nb)
    first = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"] = [c for i, c in enumerate(nb["cells"])
                   if i == first or cell_kind(c) in ("markdown", "export", "solution", "test")
                   or keep and keep("".join(c["source"]))]
    return nb


@pytest.mark.slow
def test_grading_zeroes_only_the_exercises_whose_checks_were_tampered_with(tmp_path, monkeypatch):
    section = "01_qkv_and_scores"
    course = Course.create(tmp_path, [section])
    release = slim(course.release_notebook(section))
    for student, (project, scores, _, _) in TAMPERING_SUBMISSIONS.items():
        course.submit(student, section, with_solution(with_solution(release, "project_qkv", project),
                                                      "attention_scores", scores))
    monkeypatch.chdir(course.root)
    monkeypatch.setattr(sys, "argv", ["grade"])
    assert grade.main([section, "--jobs", "2"]) == 0
    course.nbgrader("generate_feedback", section)

    scores, wrong = course.scores(section), {}
    for student, (_, _, expected, marker) in TAMPERING_SUBMISSIONS.items():
        got, html = {g: scores[student][g] for g in FULL_01}, course.feedback_html(student, section)
        if got != expected or marker not in html or ("[tampered]" in html) != (student != "good"):
            wrong[student] = (got, marker in html)
    assert wrong == {}, "student -> (scores, feedback names what changed)"


SECTION_08 = "08_ffn_norm_residual"
SWIGLU_IMPL = 'SwiGLUImpl = mine_or_reference("SwiGLU", SwiGLU)'
# How a solution writes the reference Block with what 08's course cell binds: its import, or the
# function it moved the import into.
BLOCK_REFERENCE = {"ReferenceBlock": "ReferenceBlock", "reference_block": "type(reference_block(8))"}


def solutions(section: str) -> dict[str, str]:
    return {grade_id(c): strip_markers(c["source"]) for c in load_notebook("solutions", section)["cells"]
            if cell_kind(c) == "solution"}


HONEST_BLOCK = solutions(SECTION_08)["Block"]  # uses the given CausalSelfAttention and the learner's own SwiGLU


def borrowing_submissions(ref: str) -> dict[str, tuple[str, str]]:
    """student -> (Block's solution cell, feedback must contain)."""
    return {
        "honest": (HONEST_BLOCK, "通过全部检查"),
        "subclass": (f"class Block({ref}):\n    pass", f"class Block({ref}):"),
        "alias": (f"Block = {ref}", f"Block = {ref}"),
        "mine-or-reference-name": (HONEST_BLOCK.replace("SwiGLU(n_embed", "SwiGLUImpl(n_embed"), "SwiGLUImpl(n_embed"),
        "runtime-subclass": ('class Block(__import__("utils.reference", fromlist=["Block"]).Block):\n    pass',
                             "继承了课程的参考实现 utils.reference.Block"),
    }


@pytest.mark.slow
def test_grading_zeroes_an_exercise_that_uses_a_name_a_course_cell_bound_to_its_reference(tmp_path):
    course = Course.create(tmp_path, [SECTION_08])
    release = course.release_notebook(SECTION_08)
    course_cells = ["".join(c["source"]) for c in release["cells"] if cell_kind(c) not in ("solution", "markdown")]
    bound = course_bindings(course_cells, [grade_id(c) for c in release["cells"] if cell_kind(c) == "solution"])
    ref = next(BLOCK_REFERENCE[name] for name in BLOCK_REFERENCE if name in bound.names)  # the real course cell
    kept = slim(release, keep=lambda source: "utils.reference import Block" in source or SWIGLU_IMPL in source)
    full = {grade_id(c): c["metadata"]["nbgrader"]["points"] for c in release["cells"] if cell_kind(c) == "test"}
    submissions = borrowing_submissions(ref)
    for student, (block, _) in submissions.items():
        nb = kept
        for exercise, source in {**solutions(SECTION_08), "Block": block}.items():
            nb = with_solution(nb, exercise, source)
        course.submit(student, SECTION_08, nb)
    course.nbgrader("autograde", SECTION_08)
    course.nbgrader("generate_feedback", SECTION_08)

    scores, wrong = course.scores(SECTION_08), {}
    block_zero = {**full, "test_Block": 0, "test_Block_hidden": 0}
    for student, (_, marker) in submissions.items():
        got, html = {g: scores[student][g] for g in full}, course.feedback_html(student, SECTION_08)
        if (got != (full if student == "honest" else block_zero) or marker not in html or "[tampered]" in html
                or ("[uses-reference]" in html) != (student != "honest")):
            wrong[student] = ({g: v for g, v in got.items() if v != full[g]}, marker in html)
    assert wrong == {}, "student -> (the tests that lost points, feedback says why)"
