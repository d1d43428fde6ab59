"""The learner's working copy (utils/working_copy.py): made from notebooks/ on the first run, given
new sections later, and never written over: a rebuilt release of a notebook the learner changed is
offered beside it. utils/progress.py reads it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from utils import working_copy
from utils.progress import PASSED, course_progress, learner_folder

from .bugbank import all_variants
from .conftest import ROOT

S00, S01, S02 = "00_start_here", "01_qkv_and_scores", "02_scaling_and_softmax"


def notebook(folder: Path, section: str) -> Path:
    return folder / section / f"{section}.ipynb"


@pytest.fixture
def course(tmp_path) -> Path:
    """A course folder with the release of two sections (and the solutions progress reads the outline from)."""
    for section in (S00, S01):
        shutil.copytree(ROOT / "notebooks" / section, tmp_path / "notebooks" / section)
        shutil.copytree(ROOT / "solutions" / section, tmp_path / "solutions" / section)
    return tmp_path


def edit(path: Path, grade_id: str, source: str) -> None:
    """What the learner does: write an exercise and save (JupyterLab writes the whole file)."""
    nb = nbformat.read(path, as_version=4)
    next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id).source = source
    nbformat.write(nb, path)


def release(course: Path, section: str, note: str) -> None:
    """What `course.py build` (or git pull) does to a released notebook: a new version of it."""
    path = notebook(course / "notebooks", section)
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell(note))
    nbformat.write(nb, path)


def test_the_first_run_copies_the_release_and_records_where_each_file_came_from(course):
    work = course / "my_work"
    messages = working_copy.sync(course)
    assert len(messages) == 1 and "第一次运行" in messages[0]
    for section in (S00, S01):
        assert notebook(work, section).read_bytes() == notebook(course / "notebooks", section).read_bytes()
    manifest = json.loads((work / working_copy.MANIFEST).read_text(encoding="utf-8"))
    assert manifest[f"{S01}/{S01}.ipynb"]["copied"] == working_copy.sha256(notebook(course / "notebooks", S01))
    assert working_copy.sync(course) == []                         # nothing changed: nothing to say


def test_a_rebuilt_release_never_touches_the_learners_notebook_and_is_offered_beside_it(course):
    work = course / "my_work"
    working_copy.sync(course)
    mine = notebook(work, S01)
    edit(mine, "project_qkv", "# 我的答案\n")
    before = mine.read_bytes()
    release(course, S01, "新的一段说明")
    release(course, S00, "00 的新说明")                             # the learner never changed 00
    messages = working_copy.sync(course)
    assert mine.read_bytes() == before
    offered = working_copy.offered_name(mine)
    assert offered.name == f"{S01}.new.ipynb"
    assert offered.read_bytes() == notebook(course / "notebooks", S01).read_bytes()
    assert notebook(work, S00).read_bytes() == notebook(course / "notebooks", S00).read_bytes()
    assert any(f"{S01}.new.ipynb" in m and "你的 notebook 没有改动" in m for m in messages), messages
    assert any("已更新" in m and S00 in m for m in messages), messages
    assert working_copy.sync(course) == [] and mine.read_bytes() == before    # offered once, not again

    edit(offered, "project_qkv", "# 在新版里接着写\n")                 # the learner moved on in the new one
    release(course, S01, "又一段说明")
    edited_offer = offered.read_bytes()
    messages = working_copy.sync(course)
    assert offered.read_bytes() == edited_offer and mine.read_bytes() == before
    assert any("没有覆盖" in m for m in messages), messages


def test_a_new_section_is_added_and_a_removed_copy_comes_back(course):
    work = course / "my_work"
    working_copy.sync(course)
    shutil.copytree(ROOT / "notebooks" / S02, course / "notebooks" / S02)
    notebook(work, S00).unlink()
    messages = working_copy.sync(course)
    assert notebook(work, S02).read_bytes() == notebook(course / "notebooks", S02).read_bytes()
    assert notebook(work, S00).is_file()
    assert any("新增" in m and S02 in m for m in messages) and any("重新复制" in m and S00 in m for m in messages)


def test_progress_reads_the_working_copy_not_the_release(course):
    assert learner_folder(course) == course / "notebooks"        # no working copy yet: the release
    working_copy.sync(course)
    assert learner_folder(course) == course / "my_work"
    right = next(v for v in all_variants() if v.exercise == "project_qkv" and v.expected is None)
    edit(notebook(course / "my_work", S01), "project_qkv", right.source)
    sections = {s.id: s for s in course_progress(course, jobs=2)}
    assert {e.name: e.status for e in sections[S01].exercises}["project_qkv"] == PASSED
