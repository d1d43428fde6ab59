"""The bug bank through a real nbgrader flow: generate → submit → autograde → feedback.

Every variant of the bank gets its code in-process: tests/test_bugbank.py gives each to the learner's
visible check and to the judge's visible and hidden runs (the check definitions the judge runs in grading,
every call and answer through the protocol's codec). What is left to prove here is nbgrader's path, per
exercise, so this test grades a sample whose size does not grow with the bank (``graded_variants``): for
each exercise, one wrong variant per failure kind loses the points of the test cells that catch it, with its
code in the feedback, and one right variant earns the points of its visible and hidden test. The failure
kinds are what grading makes of a wrong answer (FAILURE_KINDS): the visible test catches it (both cells
score 0), or only the hidden one does (the visible cell keeps its points). Each is the bank's first variant
of its exercise and kind (the bank's order: the same sample every run). The feedback never shows the hidden
tests. An untouched learner notebook, demos included, runs top to bottom with its stubs' test cells failing
kindly (the judge's [not-implemented]; a demo that needs an exercise says so in a line) and scores 0 with
"尚未实现"."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess

import nbformat
import pytest
from jupyter_client.connect import LocalPortCache
from traitlets.config import Config

from autograder import grade, sandbox
from autograder.config import configure
from autograder.notebook_format import exercise_of, exercises, grade_id, points, visible_and_hidden
from autograder.preprocessors import ResilientExecute
from autograder.release import without_shown_answers

from .bugbank import all_variants, dependencies
from .conftest import SECTIONS, load_notebook, notebook_path
from .nbgrader_course import Course, slim, with_solution

BANK = all_variants()


# An exercise whose solution calls another exercise of the same notebook (in the learner's
# version, the learner's own function): graded only alongside right variants of what it uses.
DEPENDS = dependencies()


# What grading makes of a wrong variant: the visible test catches it (both test cells score 0), or only
# the hidden one does (the visible cell keeps its points).
FAILURE_KINDS = ("visible", "hidden-only")


def failure_kind(variant) -> str | None:
    """The variant's FAILURE_KINDS entry; None for a right one."""
    if variant.expected is None:
        return None
    return "hidden-only" if variant.fits_visible else "visible"


def graded_variants(exercise: str) -> list:
    """What nbgrader grades of ``exercise``: the bank's first wrong variant of each failure kind it has, then its
    first right one."""
    ours = [v for v in BANK if v.exercise == exercise]
    firsts = [next((v for v in ours if failure_kind(v) == kind), None) for kind in (*FAILURE_KINDS, None)]
    return [v for v in firsts if v]


def plan_submissions(section: str) -> dict[str, dict[str, object]]:
    """student -> {exercise: variant}: every variant of graded_variants is graded by some student.

    Each student carries one variant of every exercise, wrong ones first, then right ones: as many
    students as the exercise with the most wrong variants needs, plus one for a right variant. A
    dependent exercise (its solution calls others of the notebook) is judged only where what it
    depends on is right: first come the rounds in which those prerequisites carry their wrong
    variants, then the rounds in which they carry right ones and the dependent exercise carries
    its variants. The other exercises cycle in every round.
    """
    by_exercise = {e: graded_variants(e) for e in exercises(load_notebook("solutions", section))}
    right = {e: [v for v in vs if v.expected is None] for e, vs in by_exercise.items()}
    wrong = {e: [v for v in vs if v.expected] for e, vs in by_exercise.items()}
    dependents = [e for e in by_exercise if DEPENDS.get(e)]
    prerequisites = {d for e in dependents for d in DEPENDS[e]}
    n_wrong = max((len(wrong[p]) for p in prerequisites), default=0)
    n_judged = max([len(wrong[d]) + 1 for d in dependents], default=0)          # + 1: a right one too
    rounds = max([n_wrong + n_judged] + [len(wrong[e]) + 1 for e in by_exercise
                                         if e not in prerequisites and e not in dependents])

    def pick(exercise: str, r: int):
        if exercise in prerequisites:
            pool, i = (wrong[exercise], r) if r < n_wrong and wrong[exercise] else (right[exercise], r)
        elif exercise in dependents:
            pool, i = (right[exercise], 0) if r < n_wrong else (by_exercise[exercise], r - n_wrong)
        else:
            pool, i = by_exercise[exercise], r
        return pool[i % len(pool)]

    return {f"student{r:02d}": {e: pick(e, r) for e in by_exercise} for r in range(rounds)}


def test_every_exercise_is_graded_right_and_in_each_failure_kind_of_its_bank_beside_right_prerequisites():
    for section in SECTIONS:
        plan = plan_submissions(section)
        judged = {v for variants in plan.values() for e, v in variants.items()
                  if not any(variants[d].expected for d in DEPENDS.get(e, ()))}
        for exercise in exercises(load_notebook("solutions", section)):
            sample = graded_variants(exercise)
            assert set(sample) <= judged, f"{section}: every graded variant of {exercise} beside right prerequisites"
            kinds = [failure_kind(v) for v in sample]
            assert set(kinds) == {failure_kind(v) for v in BANK if v.exercise == exercise}, f"{exercise}: every kind"
            assert len(set(kinds)) == len(kinds) and kinds[-1] is None, f"{exercise}: one of each kind, wrong first"
        # fixed, however many variants the bank has: a round per kind of the prerequisites, then of the dependents
        assert len(plan) <= 2 * len(FAILURE_KINDS) + 1, f"{section}: {len(plan)} students"


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


def nbgrader(course: Course, *args: str) -> None:
    """``nbgrader *args`` in the course; when it fails, the test says what nbgrader logged."""
    try:
        course.nbgrader(*args)
    except subprocess.CalledProcessError as err:
        pytest.fail(f"nbgrader {' '.join(args)} exited {err.returncode}; it logged:\n{err.stderr[-6000:]}")


def test_a_grading_kernel_needs_no_port_that_another_process_can_take_first(monkeypatch, tmp_path):
    """Without bwrap (a bare CI machine) grading falls back to unsandboxed kernels. A kernel on TCP
    binds ports its grader picked, freed and handed over before the kernel started; meanwhile any
    process of the machine (a parallel test's kernel, its client's connections) may take one, and the
    kernel dies before answering: nbgrader autograde exited 1 for the whole assignment. Here the
    first port the grader would pick is taken by another socket first: the cell must still run."""
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: "no bwrap (this test hides it)")
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken, free = iter([other.getsockname()[1]]), LocalPortCache.find_available_port
        monkeypatch.setattr(LocalPortCache, "find_available_port",
                            lambda cache, ip: next(taken, None) or free(cache, ip))
        config = Config()
        configure(config)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
        ResilientExecute(config=config).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert nb.cells[0].outputs[0]["text"] == "42\n"


def assert_released_to_a_class(release: dict, learner: dict) -> None:
    """nbgrader generate_assignment (with the gradebook) wrote the committed learner notebook but for the cells
    that quote an answer and the demos that use them: a note in each place (autograder/release.py)."""
    want = without_shown_answers(nbformat.from_dict(learner), closed=set())
    assert release["metadata"] == learner["metadata"]
    assert [_as_shown(c) for c in release["cells"]] == [_as_shown(c) for c in want["cells"]], \
        "nbgrader generate_assignment must write the committed learner notebook, the answers withheld"


def _as_shown(cell: dict) -> tuple:
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return cell["cell_type"], source, json.dumps(cell["metadata"], sort_keys=True)


# The sections dealt into four groups, as many as `python3 course.py test` has workers on two cores, one course
# each: a course pays once for what every nbgrader run costs before its first notebook (starting nbgrader, the
# grading zygote importing torch), and the four courses still run side by side.
GROUPS = [SECTIONS[i::4] for i in range(4)]


@pytest.mark.slow
@pytest.mark.parametrize("sections", GROUPS, ids=lambda sections: "-".join(s[:2] for s in sections))
def test_bug_bank_through_nbgrader_autograde(sections, tmp_path, monkeypatch):
    """One course of these sections: one nbgrader autograde and one generate_feedback over all of them."""
    course = Course.create(tmp_path / "course", sections)
    plans = {}
    for section in sections:
        committed = json.loads(notebook_path("notebooks", section).read_text(encoding="utf-8"))
        assert_released_to_a_class(course.release_notebook(section), committed)
        plans[section] = submit_bug_bank(course, section)
    if PARALLEL_CHECKED in sections:
        shutil.copytree(course.root, tmp_path / "parallel")
    nbgrader(course, "autograde", "*")
    if PARALLEL_CHECKED in sections:
        assert_parallel_grading_agrees(course, Course(tmp_path / "parallel"), PARALLEL_CHECKED, monkeypatch)
    nbgrader(course, "generate_feedback", "*")
    for section, plan in plans.items():
        assert_graded_as_planned(course, section, plan)


def assert_graded_as_planned(course: Course, section: str, plan: dict[str, dict[str, object]]) -> None:
    """Every judged variant's scores and code in the feedback, no hidden test shown; the untouched notebook's 0."""
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
    assert all(score == 0 for score in scores["untouched"].values()), section
    assert "尚未实现" in course.feedback_html("untouched", section)
    untouched = course.root / "autograded" / "untouched" / section / f"{section}.ipynb"
    assert "image/png" not in untouched.read_text(encoding="utf-8"), "figures are not rendered at grading time"
    assert_stubs_fail_kindly(json.loads(untouched.read_text(encoding="utf-8")))


# What a demo of the class edition may raise when an exercise it uses is not done (one line), and what a cell
# after it may then raise (a name that demo would have defined)
WAITING = {"ExerciseNeeded", "NameError"}


def assert_stubs_fail_kindly(nb: dict) -> None:
    """The learner notebook as released ran top to bottom, demos included, in a kernel on the class edition:
    every test cell of an untouched stub failed with a short [not-implemented] message, not a traceback wall;
    any other error is a demo saying in a line that it waits for an exercise, or a cell after it."""
    tests = {i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and exercise_of(grade_id(c))
             and "check_" in "".join(c["source"])}
    failed = [(i, o) for i, c in enumerate(nb["cells"]) for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert tests <= {i for i, _ in failed}, f"every stub's test cell fails: {sorted(tests)}"
    for index, out in failed:
        if index not in tests:
            assert out["ename"] in WAITING, f"cell {index} raised {out['ename']}: {out['evalue']}"
            continue
        assert out["ename"] == "CheckError", f"cell {index} raised {out['ename']}: {out['evalue']}"
        assert out["evalue"].startswith("[not-implemented]"), out["evalue"]
        assert "尚未实现" in "\n".join(out["traceback"]) or "还没有定义" in out["evalue"], out["evalue"]
        assert len(out["traceback"]) <= 4, "a short message, not a traceback wall"


def test_the_kindness_check_refuses_a_failing_demo_a_wrong_code_and_a_traceback_wall():
    def cell(grade: str, source: str, error: dict | None = None) -> dict:
        return {"cell_type": "code", "source": source, "metadata": {"nbgrader": {"grade_id": grade}} if grade else {},
                "outputs": [{"output_type": "error", **error}] if error else []}
    kind = {"ename": "CheckError", "evalue": "[not-implemented] softmax 尚未实现", "traceback": ["尚未实现"]}
    released = [cell("", "import torch"), cell("test_softmax", "check_softmax(softmax)", kind),
                cell("test_softmax_hidden", "check_softmax(softmax, extended=True)", kind)]
    assert_stubs_fail_kindly({"cells": released})
    assert_stubs_fail_kindly({"cells": released + [cell("", "demo(softmax)", {"ename": "ExerciseNeeded", "evalue": "…",
                                                                            "traceback": ["…"]})]})
    broken = {"failing demo": released + [cell("", "plot(x)", {"ename": "ValueError", "evalue": "x", "traceback": []})],
              "other code": [released[0], cell("test_softmax", "check_softmax(softmax)", kind | {"evalue": "[wrong]"})],
              "traceback wall": [released[0], cell("test_softmax", "check_softmax(softmax)",
                                                   kind | {"traceback": ["尚未实现"] * 12})],
              "a check that ran clean": released[:2] + [cell("test_softmax_hidden", "check_softmax(softmax)")]}
    for name, cells in broken.items():
        with pytest.raises(AssertionError):
            assert_stubs_fail_kindly({"cells": cells})
        print(name, "refused")
