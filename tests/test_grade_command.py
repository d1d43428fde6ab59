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


def test_nbgrader_failure_falls_back_to_the_blank_notebook_with_a_note(tmp_path, monkeypatch):
    released = (ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8")
    notebook = make_course(tmp_path, released)
    answers = iter([(False, "[AutogradeApp | ERROR] KeyError: 'grade_id'"), (True, "")])
    calls = []

    def fake_autograde(root, section, student, limits):
        calls.append(json.loads(notebook.read_text(encoding="utf-8")))
        return next(answers)

    monkeypatch.setattr(grade, "run_autograde", fake_autograde)
    outcome = grade.grade_one(tmp_path, SECTION, "alice", grade.Limits(jobs=1))
    assert outcome.ok and "评分程序无法处理" in outcome.note
    assert notebook.with_suffix(".ipynb.broken").read_text(encoding="utf-8") == released
    second = calls[1]["cells"][0]
    assert second["cell_type"] == "markdown" and "KeyError" in second["source"]


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
