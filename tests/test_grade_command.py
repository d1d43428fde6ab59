"""Unit tests of autograder/grade.py that need no nbgrader run."""
from __future__ import annotations

import json
import shutil

from autograder import grade

from .conftest import ROOT

SECTION = "01_qkv_and_scores"


def make_course(tmp_path, submission_text: str | None):
    (tmp_path / "notebooks").mkdir()
    shutil.copytree(ROOT / "notebooks" / SECTION, tmp_path / "notebooks" / SECTION)
    folder = tmp_path / "submitted" / "alice" / SECTION
    folder.mkdir(parents=True)
    if submission_text is not None:
        (folder / f"{SECTION}.ipynb").write_text(submission_text, encoding="utf-8")
    return folder / f"{SECTION}.ipynb"


class FakeWorker:
    """Stands in for a grading process: answers each student from a script."""
    script: list[dict] = []

    def __init__(self, root, section, limits, events):
        self.events, self.student, self.since, self.killed_for = events, None, 0.0, ""

    def assign(self, student):
        self.student = student
        self.events.put((self, {"student": student, **FakeWorker.script.pop(0)}))

    def kill_if_overdue(self, wall_seconds):
        pass

    def close(self):
        pass


def test_a_passing_failure_is_retried_as_submitted(tmp_path, monkeypatch):
    released = (ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8")
    notebook = make_course(tmp_path, released)
    FakeWorker.script = [{"ok": False, "detail": "sqlite3.OperationalError: database is locked"},
                         {"ok": True, "detail": ""}]
    monkeypatch.setattr(grade, "Worker", FakeWorker)
    [outcome] = grade.grade_section(tmp_path, SECTION, ["alice"], grade.Limits(jobs=1))
    assert outcome.ok and outcome.note == "" and not FakeWorker.script
    assert not notebook.with_suffix(".ipynb.broken").exists()
    assert notebook.read_text(encoding="utf-8") == released


def test_a_lasting_failure_falls_back_to_the_blank_notebook_with_a_note(tmp_path, monkeypatch):
    released = (ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8")
    notebook = make_course(tmp_path, released)
    failure = {"ok": False, "detail": "KeyError: 'grade_id'"}
    FakeWorker.script = [failure, failure, {"ok": True, "detail": ""}]
    monkeypatch.setattr(grade, "Worker", FakeWorker)
    [outcome] = grade.grade_section(tmp_path, SECTION, ["alice"], grade.Limits(jobs=1))
    assert outcome.ok and "评分程序无法处理" in outcome.note and not FakeWorker.script
    assert notebook.with_suffix(".ipynb.broken").read_text(encoding="utf-8") == released
    note = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]
    assert note["cell_type"] == "markdown" and "KeyError" in note["source"]


def test_a_failure_of_the_blank_notebook_too_is_reported_not_retried_forever(tmp_path, monkeypatch):
    make_course(tmp_path, (ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8"))
    FakeWorker.script = [{"ok": False, "detail": f"boom {i}"} for i in range(3)]
    monkeypatch.setattr(grade, "Worker", FakeWorker)
    [outcome] = grade.grade_section(tmp_path, SECTION, ["alice"], grade.Limits(jobs=1))
    assert not outcome.ok and outcome.note == "boom 2" and not FakeWorker.script


def test_failure_reason_names_the_cause_not_the_boilerplate():
    log = ("[AutogradeApp | ERROR] sqlite3.OperationalError: database is locked\n"
           "[AutogradeApp | ERROR] Please see the the above traceback for details on the specific errors")
    error = "Traceback ...\nnbgrader.converters.base.NbGraderException: Please see the above traceback"
    assert grade.failure_reason({"success": False, "error": error, "log": log}).endswith("database is locked")


def test_pasted_cell_ids_are_repaired_not_rejected(tmp_path):
    nb = json.loads((ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8"))
    nb["cells"].append(dict(nb["cells"][-1]))       # same id twice
    del nb["cells"][0]["id"]                        # and one missing
    notebook = make_course(tmp_path, json.dumps(nb))
    assert grade.repair_unreadable(tmp_path, SECTION, "alice") == ""
    ids = [c["id"] for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"]]
    assert len(ids) == len(set(ids)) == len(nb["cells"])


def test_unreadable_and_missing_files_are_replaced(tmp_path):
    notebook = make_course(tmp_path, '{"cells": [')
    assert "JSONDecodeError" in grade.repair_unreadable(tmp_path, SECTION, "alice")
    assert notebook.with_suffix(".ipynb.broken").exists()
    assert "无法被自动评分" in json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"]
    notebook.unlink()
    assert grade.repair_unreadable(tmp_path, SECTION, "alice") == "文件不存在"
    assert notebook.exists()
