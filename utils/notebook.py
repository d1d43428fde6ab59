"""The course's notebook conventions, the one home of them: what kind a cell is, what its nbgrader
grade_id says, which exercises a notebook has, which answers a cell shows, the stub of an unanswered
written answer.

The learner-side code (utils/progress.py) and the grading side (autograder/, which re-exports
these from autograder/notebook_format.py) both read notebooks by them; utils/ imports nothing
from autograder/.
"""
from __future__ import annotations

KINDS = ("markdown", "code", "solution", "test", "answer", "export")
TEXT_STUB = "请在这里写下你的回答。"  # what a released answer cell holds until the learner writes one
SHOWS_ANSWER = "shows-answer:"        # tags a cell that shows an exercise's answer: shows-answer:<exercise>
# What a class's notebook holds in place of such a cell while the exercise is open (autograder/release.py,
# autograder/edition.py).
SHOWN_LATER = ("> 这里原本是一段答案（原书的代码或完整的实现），用来和你自己的实现对照。班级版在这一节的作业截止之后"
               "才给出它；现在先让你的实现通过上面的检查。")


def cell_kind(cell: dict) -> str:
    """One of KINDS: nbgrader's metadata (solution / test / answer), the ``export`` tag, else the cell type."""
    meta = cell.get("metadata", {})
    nbg = meta.get("nbgrader")
    if nbg:
        if nbg.get("solution") and not nbg.get("grade"):
            return "solution"
        if nbg.get("grade") and not nbg.get("solution"):
            return "test"
        if nbg.get("grade") and nbg.get("solution"):
            return "answer"
    if "export" in meta.get("tags", []):
        return "export"
    return cell["cell_type"]


def shown_answers(cell: dict) -> set[str]:
    """The exercises whose answer the cell shows (its ``shows-answer:<exercise>`` tags): the book's code after
    the check, to compare with the learner's once it passes, or a later demo written with an earlier answer."""
    return {tag.removeprefix(SHOWS_ANSWER) for tag in cell.get("metadata", {}).get("tags", [])
            if tag.startswith(SHOWS_ANSWER)}


def grade_id(cell: dict) -> str:
    """The cell's nbgrader grade_id ("" for a cell nbgrader does not know)."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def exercises(nb: dict) -> list[str]:
    """The graded exercises of a notebook: the grade_ids of its solution cells, in order."""
    return [grade_id(cell) for cell in nb["cells"] if cell_kind(cell) == "solution"]


def visible_and_hidden(exercise: str) -> tuple[str, str]:
    """The grade_ids of an exercise's visible and hidden test cells."""
    return f"test_{exercise}", f"test_{exercise}_hidden"


def exercise_of(test_grade_id: str) -> str | None:
    """test_softmax -> softmax, test_softmax_hidden -> softmax; None for a cell that is no test."""
    if not test_grade_id.startswith("test_"):
        return None
    return test_grade_id[len("test_"):].removesuffix("_hidden") or None


def points(nb: dict) -> dict[str, float]:
    """grade_id -> points of every graded cell (tests and manually graded answers)."""
    return {grade_id(c): float(c["metadata"]["nbgrader"]["points"]) for c in nb["cells"]
            if cell_kind(c) in ("test", "answer")}
