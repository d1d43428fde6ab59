"""The grade exports of autograder/export.py on a real nbgrader gradebook: grades.csv in UTF-8 with a BOM
(same columns and values as nbgrader's own CsvExportPlugin, quoted as CSV wants) and the LMS
gradebook files. The class on JupyterHub exports both from its PostgreSQL gradebook (tests/test_hub.py)."""
from __future__ import annotations

import csv
import datetime

import nbgrader.api
import pytest
from nbgrader.api import Gradebook
from nbgrader.plugins import CsvExportPlugin

from autograder.export import ExcelCsvExportPlugin, LmsCsvExportPlugin

# id -> (last name, first name); a comma inside a name, as a roster can have
ROSTER = {"s1": ("王", "小明"), "s2": ("Smith, Jr.", "Ann"), "s3": ("李", "雷")}
# (assignment, student) -> (points of the one 10-point cell, late penalty); s3 handed nothing in for a2
SCORES = {("a1", "s1"): (8.0, 0.0), ("a1", "s2"): (6.0, 6.0), ("a1", "s3"): (10.0, 0.0),
          ("a2", "s1"): (3.0, 0.0), ("a2", "s2"): (9.5, 0.0)}


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        # nbgrader stamps a new gradebook with the head revision that an `alembic heads` subprocess prints
        # (seconds on a busy machine); the exports never read it
        patch.setattr(nbgrader.api, "get_alembic_version", lambda: "not-read-by-the-exports")
        yield from filled_gradebook(tmp_path_factory.mktemp("export") / "gradebook.db")


def filled_gradebook(path):
    with Gradebook(f"sqlite:///{path}", "attention") as gb:
        for student, (last, first) in ROSTER.items():
            gb.add_student(student, last_name=last, first_name=first, email=f"{student}@example.edu")
        for assignment in ("a1", "a2"):
            gb.add_assignment(assignment, duedate=datetime.datetime(2026, 12, 1, 12))
            gb.add_notebook(assignment, assignment)
            gb.add_grade_cell("q", assignment, assignment, max_score=10, cell_type="code")
        for (assignment, student), (score, penalty) in SCORES.items():
            gb.add_submission(assignment, student, timestamp=datetime.datetime(2026, 12, 1, 11))
            gb.find_grade("q", assignment, assignment, student).manual_score = score
            gb.find_submission_notebook(assignment, assignment, student).late_submission_penalty = penalty
        gb.db.commit()
        yield gb


def read_csv(path, encoding: str) -> list[dict]:
    with open(path, encoding=encoding, newline="") as fh:
        return list(csv.DictReader(fh))


def test_grades_csv_has_a_bom_and_nbgraders_columns_and_values(gradebook, tmp_path):
    ours, theirs = tmp_path / "grades.csv", tmp_path / "nbgrader.csv"
    ExcelCsvExportPlugin(to=str(ours)).export(gradebook)
    CsvExportPlugin(to=str(theirs)).export(gradebook)
    assert ours.read_bytes().startswith(b"\xef\xbb\xbf") and not theirs.read_bytes().startswith(b"\xef\xbb\xbf")
    rows = read_csv(ours, "utf-8-sig")
    # nbgrader's writer does not quote: the comma in "Smith, Jr." shifts that row's fields
    unshifted = [r for r in read_csv(theirs, "utf-8") if r["student_id"] != "s2"]
    assert [r for r in rows if r["student_id"] != "s2"] == unshifted
    s2 = {r["assignment"]: r for r in rows if r["student_id"] == "s2"}
    assert s2["a1"]["last_name"] == "Smith, Jr." and (s2["a1"]["raw_score"], s2["a1"]["score"]) == ("6.0", "0.0")
    s3 = {r["assignment"]: r for r in rows if r["student_id"] == "s3"}
    assert s3["a2"]["timestamp"] == "" and s3["a2"]["score"] == "0.0"
    assert {(r["assignment"], r["student_id"]): (r["last_name"], r["first_name"]) for r in rows} == \
        {(a, s): ROSTER[s] for a in ("a1", "a2") for s in ROSTER}


@pytest.mark.parametrize("lms, header, identity", [
    ("canvas", ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
     lambda s: [f"{ROSTER[s][0]}, {ROSTER[s][1]}", "", "", s, ""]),
    ("moodle", ["Username"], lambda s: [s]),
])
def test_lms_file_has_a_row_per_student_and_a_column_per_assignment(gradebook, tmp_path, lms, header, identity):
    out = tmp_path / f"{lms}.csv"
    LmsCsvExportPlugin(to=str(out), lms=lms).export(gradebook)
    with open(out, encoding="utf-8", newline="") as fh:
        table = list(csv.reader(fh))
    assert table[0] == [*header, "a1", "a2"]
    after_penalty = {key: str(max(0.0, score - penalty)) for key, (score, penalty) in SCORES.items()}
    assert sorted(table[1:]) == sorted([*identity(s), after_penalty.get(("a1", s), "0.0"),
                                        after_penalty.get(("a2", s), "0.0")] for s in ROSTER)
