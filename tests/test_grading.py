"""The bug bank through a real nbgrader flow: generate → submit → autograde → feedback.

Every wrong variant loses exactly its exercise's points (visible and hidden test), every
right variant earns them, the feedback names the diagnosed code and never shows the
hidden tests, and an untouched learner notebook scores 0 with "尚未实现"."""
from __future__ import annotations

import json
import shutil

import pytest

from autograder import grade
from autograder.notebook_format import exercise_of, exercises, grade_id, points, visible_and_hidden

from .bugbank import all_variants, dependencies
from .conftest import ROOT, SECTIONS, load_notebook
from .nbgrader_course import Course, slim, with_solution

BANK = all_variants()


# An exercise whose solution calls another exercise of the same notebook (in the learner's
# version, the learner's own function): graded only alongside right variants of what it uses.
DEPENDS = dependencies()


def plan_submissions(section: str) -> dict[str, dict[str, object]]:
    """student -> {exercise: variant}: every variant of the section is graded by some student.

    Each student carries one variant of every exercise. Exercises that depend on others get
    their own students, in which what they depend on is a right variant.
    """
    by_exercise = {e: [v for v in BANK if v.exercise == e] for e in exercises(load_notebook("solutions", section))}
    first_right = {e: next(v for v in vs if v.expected is None) for e, vs in by_exercise.items()}
    dependent = [e for e in by_exercise if DEPENDS.get(e)]
    groups = [[e for e in by_exercise if e not in dependent]] + ([dependent] if dependent else [])
    plan, k = {}, 0
    for group in groups:
        for round_ in range(max(len(by_exercise[e]) for e in group)):
            plan[f"student{k:02d}"] = {e: by_exercise[e][round_ % len(by_exercise[e])] if e in group
                                       else first_right[e] for e in by_exercise}
            k += 1
    return plan


def submit_bug_bank(course: Course, section: str) -> dict[str, dict[str, object]]:
    release = course.release_notebook(section)
    plan = plan_submissions(section)
    for student, variants in plan.items():
        nb = slim(release)
        for exercise, variant in variants.items():
            nb = with_solution(nb, exercise, variant.source)
        course.submit(student, section, nb)
    course.submit("untouched", section, release)  # the learner notebook as released, demos included
    return plan


# The section whose bug bank is also graded by `python -m autograder.grade` and compared.
PARALLEL_CHECKED = "02_scaling_and_softmax"


def assert_parallel_grading_agrees(sequential: Course, parallel: Course, section: str, monkeypatch) -> None:
    """The parallel grader gives the same scores and the same diagnoses as nbgrader autograde."""
    monkeypatch.chdir(parallel.root)
    assert grade.main([section, "--jobs", "2"]) == 0
    assert parallel.scores(section) == sequential.scores(section)
    codes = error_codes(sequential, section)
    assert sum(map(len, codes.values())) > 10, "the bug bank must make tests fail"
    assert error_codes(parallel, section) == codes


def error_codes(course: Course, section: str) -> dict[tuple[str, str], list[str]]:
    """(student, test cell) -> the [codes] of its error outputs, from the autograded notebooks."""
    codes = {}
    for path in sorted((course.root / "autograded").glob(f"*/{section}/{section}.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if exercise_of(grade_id(cell)):
                codes[path.parts[-3], grade_id(cell)] = [o.get("evalue", "").split("]")[0] for o in cell["outputs"]
                                                   if o.get("output_type") == "error"]
    return codes


@pytest.mark.slow
@pytest.mark.parametrize("section", SECTIONS)
def test_bug_bank_through_nbgrader_autograde(section, tmp_path, monkeypatch):
    course = Course.create(tmp_path / "course", [section])
    released = course.root / "notebooks" / section / f"{section}.ipynb"
    assert released.read_bytes() == (ROOT / "notebooks" / section / f"{section}.ipynb").read_bytes(), \
        "nbgrader generate_assignment (with the gradebook) must write the committed learner notebook"
    plan = submit_bug_bank(course, section)
    if section == PARALLEL_CHECKED:
        shutil.copytree(course.root, tmp_path / "parallel")
    course.nbgrader("autograde", section)
    if section == PARALLEL_CHECKED:
        assert_parallel_grading_agrees(course, Course(tmp_path / "parallel"), section, monkeypatch)
    course.nbgrader("generate_feedback", section)

    scores, full = course.scores(section), points(load_notebook("solutions", section))
    for student, variants in plan.items():
        html = course.feedback_html(student, section)
        assert "BEGIN HIDDEN TESTS" not in html and "extended=True" not in html
        for exercise, variant in variants.items():
            if any(variants[d].expected for d in DEPENDS.get(exercise, ())):
                continue  # it calls a wrong variant of another exercise: its score says nothing
            cells = [g for g in visible_and_hidden(exercise) if g in full]
            got = {g: scores[student][g] for g in cells}
            want = {g: 0 if variant.expected and (g.endswith("_hidden") or not variant.fits_visible) else full[g]
                    for g in cells}
            assert got == want, f"{variant.id}: scored {got}, expected {want}"
            if variant.expected:
                assert f"[{variant.expected}]" in html, f"feedback of {variant.id} must name [{variant.expected}]"
    assert all(score == 0 for score in scores["untouched"].values())
    assert "尚未实现" in course.feedback_html("untouched", section)
