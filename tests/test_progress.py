"""The progress view reads the learner's own notebooks right: passed, failed with its code, not
started, answers written or empty; a missing, renamed or corrupt notebook gets a clear message;
the notebooks are never changed."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import nbformat
import pytest

from utils.progress import FAILED, NOT_STARTED, PASSED, course_progress, progress_button, render

from .bugbank import all_variants
from .conftest import ROOT

pytestmark = pytest.mark.slow


def variant(exercise: str, right: bool):
    return next(v for v in all_variants() if v.exercise == exercise and (v.expected is None) == right
                and not v.fits_visible)


def edit_cells(path: Path, sources: dict[str, str]) -> None:
    """Replace the source of the cells with these grade_ids, as a learner's editing would."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in sources:
            cell.source = sources[grade_id]
    nbformat.write(nb, path)


def fingerprints(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """Four sections: 01 half done (one right, one wrong), 02 one right and an answer written
    (and, as in a class, no solutions/ for it), 03 renamed, 04 corrupt."""
    root = tmp_path_factory.mktemp("course")
    sections = ["01_qkv_and_scores", "02_scaling_and_softmax", "03_single_head_attention", "04_masks"]
    for section in sections:
        if section != sections[1]:
            shutil.copytree(ROOT / "solutions" / section, root / "solutions" / section)
        shutil.copytree(ROOT / "notebooks" / section, root / "notebooks" / section)
    notebooks = root / "notebooks"
    edit_cells(notebooks / sections[0] / f"{sections[0]}.ipynb",
               {"project_qkv": variant("project_qkv", right=True).source,
                "attention_scores": variant("attention_scores", right=False).source})
    edit_cells(notebooks / sections[1] / f"{sections[1]}.ipynb",
               {"softmax": variant("softmax", right=True).source, "answer_why_sqrt_d": "因为方差是 D。"})
    third = notebooks / sections[2]
    (third / f"{sections[2]}.ipynb").rename(third / "我的练习.ipynb")
    (notebooks / sections[3] / f"{sections[3]}.ipynb").write_text('{"cells": [', encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def progress(course):
    before = fingerprints(course / "notebooks")
    sections = {s.id: s for s in course_progress(course)}
    assert fingerprints(course / "notebooks") == before, "the learner's notebooks were changed"
    return sections


def statuses(section) -> dict[str, tuple[str, str | None]]:
    return {e.name: (e.status, e.code) for e in section.exercises}


def test_passed_failed_and_not_started(progress):
    assert statuses(progress["01_qkv_and_scores"]) == {
        "project_qkv": (PASSED, None),
        "attention_scores": (FAILED, variant("attention_scores", right=False).expected)}
    assert statuses(progress["02_scaling_and_softmax"]) == {
        "dot_product_variance": (NOT_STARTED, None), "scaled_attention_scores": (NOT_STARTED, None),
        "softmax": (PASSED, None), "softmax_jacobian": (NOT_STARTED, None)}


def test_manually_graded_answers_written_or_empty(progress):
    assert progress["02_scaling_and_softmax"].answers == {"answer_max_subtraction": False, "answer_why_sqrt_d": True}
    assert not any(progress["01_qkv_and_scores"].answers.values())


def test_renamed_and_corrupt_notebooks_are_explained(progress):
    renamed, corrupt = progress["03_single_head_attention"].problem, progress["04_masks"].problem
    assert "我的练习.ipynb" in renamed and "改回 03_single_head_attention.ipynb" in renamed
    assert "无法读取" in corrupt


def test_missing_notebook_is_explained(course, tmp_path):
    root = tmp_path / "course"
    shutil.copytree(course / "solutions" / "03_single_head_attention", root / "solutions" / "03_single_head_attention")
    (root / "notebooks").mkdir()
    (section,) = course_progress(root)
    assert "找不到 notebooks/03_single_head_attention/03_single_head_attention.ipynb" in section.problem


def test_report_reads_as_one_line_per_exercise(progress):
    text = render(list(progress.values()))
    code = variant("attention_scores", right=False).expected
    assert "✗ attention_scores" in text and f"[{code}]" in text
    assert "✓ softmax" in text and "○ softmax_jacobian" in text
    assert "合计：练习 2/6 通过，1 个没通过，3 个未开始；简答题 1/4 已作答。另有 2 节没法检查（见上）。" in text


def test_every_solution_passes_with_only_imports_exercises_and_checks(tmp_path):
    """What the view runs (no demos) is enough for every section's exercises: the solutions,
    read as if they were a learner's notebooks, pass every check."""
    root = tmp_path / "course"
    shutil.copytree(ROOT / "solutions", root / "solutions")
    shutil.copytree(ROOT / "solutions", root / "notebooks")
    sections = course_progress(root)
    failing = {s.id: s.problem or [(e.name, e.detail) for e in s.exercises if e.status != PASSED] for s in sections}
    assert {k: v for k, v in failing.items() if v} == {}
    assert all(all(s.answers.values()) for s in sections)


def test_progress_button_runs_the_view_only_when_clicked(monkeypatch):
    """The cell at the end of 00 shows a button: a headless run (tests, nbgrader) starts no kernels."""
    shown, runs = [], []
    monkeypatch.setattr("IPython.display.display", shown.append)
    monkeypatch.setattr("utils.progress.show_progress", lambda: runs.append(True))
    progress_button()
    (box,) = shown
    assert runs == []
    box.children[0].click()
    assert runs == [True]
