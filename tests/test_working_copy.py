"""The learner's working copy (utils/working_copy.py): made from notebooks/ on the first run, given
new sections later; a rebuilt release replaces a notebook the learner only opened, is merged around the
answers of one they answered in, and is offered beside one they changed elsewhere; `course.py reset`
restores a notebook or one exercise, keeping a backup. utils/progress.py reads it."""
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


def open_and_run(path: Path) -> None:
    """What opening a notebook in JupyterLab and running it does to the file, without writing a line:
    the kernel's metadata, outputs and execution counts, an autosave in JupyterLab's own layout."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                                    "file_extension": ".py", "codemirror_mode": {"name": "ipython", "version": 3}}
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), 1):
        cell.execution_count = count
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {count}\n")]
        cell.metadata["execution"] = {"iopub.status.idle": "2026-12-06T10:00:00Z"}
    nbformat.write(nb, path)


def sources(path: Path) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells]


def cell_of(path: Path, grade_id: str):
    return next(c for c in nbformat.read(path, as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_the_first_run_copies_the_release_and_records_where_each_file_came_from(course):
    work = course / "my_work"
    messages = working_copy.sync(course)
    assert len(messages) == 1 and "第一次运行" in messages[0]
    for section in (S00, S01):
        assert notebook(work, section).read_bytes() == notebook(course / "notebooks", section).read_bytes()
    manifest = json.loads((work / working_copy.MANIFEST).read_text(encoding="utf-8"))
    assert manifest[f"{S01}/{S01}.ipynb"]["copied"] == working_copy.sha256(notebook(course / "notebooks", S01))
    assert working_copy.sync(course) == []                         # nothing changed: nothing to say


def test_an_update_after_the_learner_opened_a_notebook_and_answered_one_exercise_is_merged_in(course):
    """The issue's case: 01 opened and run (metadata, outputs), one exercise and one written answer done;
    00 only opened. A new release of both: no .new.ipynb, the answers where they were, the rest new."""
    work = course / "my_work"
    working_copy.sync(course)
    mine, untouched = notebook(work, S01), notebook(work, S00)
    open_and_run(mine)
    open_and_run(untouched)
    edit(mine, "project_qkv", "def project_qkv(x, w_q, w_k, w_v):\n    return x @ w_q, x @ w_k, x @ w_v  # 我的答案\n")
    edit(mine, "answer_single_head_shapes", "分数表是 T×T 的。")
    release(course, S01, "新的一段说明")
    release(course, S00, "00 的新说明")
    messages = working_copy.sync(course)

    assert not working_copy.offered_name(mine).exists() and not working_copy.offered_name(untouched).exists()
    assert any("保留了你写的 2 个答案" in m and S01 in m for m in messages), messages
    assert any("已更新（你没有改动过它）" in m and S00 in m for m in messages), messages
    assert "我的答案" in cell_of(mine, "project_qkv").source
    assert cell_of(mine, "answer_single_head_shapes").source == "分数表是 T×T 的。"
    assert sources(mine)[-1] == "新的一段说明"
    new = notebook(course / "notebooks", S01)
    assert cell_of(mine, "attention_scores").source == cell_of(new, "attention_scores").source  # not answered
    answered = {"project_qkv", "answer_single_head_shapes"}
    mine_cells, new_cells = (nbformat.read(path, as_version=4).cells for path in (mine, new))
    assert len(mine_cells) == len(new_cells)
    for ours, theirs in zip(mine_cells, new_cells):
        assert ours.source == theirs.source or theirs.metadata["nbgrader"]["grade_id"] in answered
    assert notebook(work, S00).read_bytes() == notebook(course / "notebooks", S00).read_bytes()

    assert working_copy.sync(course) == []                            # nothing new: nothing to say
    release(course, S01, "再一段说明")                                  # and the next update keeps them too
    working_copy.sync(course)
    assert "我的答案" in cell_of(mine, "project_qkv").source and sources(mine)[-1] == "再一段说明"


def test_a_notebook_changed_outside_its_answers_is_left_alone_and_offered_beside_it(course):
    work = course / "my_work"
    working_copy.sync(course)
    mine = notebook(work, S01)
    edit(mine, "project_qkv", "# 我的答案\n")
    nb = nbformat.read(mine, as_version=4)
    nb.cells.insert(3, nbformat.v4.new_code_cell("print('草稿')"))     # a scratch cell of the learner's
    nbformat.write(nb, mine)
    before = mine.read_bytes()
    release(course, S01, "新的一段说明")
    messages = working_copy.sync(course)
    assert mine.read_bytes() == before
    offered = working_copy.offered_name(mine)
    assert offered.name == f"{S01}.new.ipynb"
    assert sources(offered)[-1] == "新的一段说明" and cell_of(offered, "project_qkv").source == "# 我的答案\n"
    assert "print('草稿')" not in sources(offered)
    assert any(f"{S01}.new.ipynb" in m and "你的 notebook 没有改动" in m and "nbdiff-web" in m for m in messages), \
        messages
    assert working_copy.sync(course) == [] and mine.read_bytes() == before    # offered once, not again

    open_and_run(offered)                                              # opening the offer is not editing it
    release(course, S01, "又一段说明")
    working_copy.sync(course)
    assert sources(offered)[-1] == "又一段说明", "an offer only opened is replaced by the newer one"
    edit(offered, "project_qkv", "# 在新版里接着写\n")                 # the learner moved on in the new one
    release(course, S01, "第三段说明")
    edited_offer = offered.read_bytes()
    messages = working_copy.sync(course)
    assert offered.read_bytes() == edited_offer and mine.read_bytes() == before
    assert any("没有覆盖" in m for m in messages), messages


def test_an_answer_the_new_release_has_no_cell_for_is_not_lost(course):
    work = course / "my_work"
    working_copy.sync(course)
    mine = notebook(work, S01)
    edit(mine, "attention_scores", "# 我写的 attention_scores\n")
    path = notebook(course / "notebooks", S01)
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if "attention_scores" not in c.metadata.get("nbgrader", {}).get("grade_id", "")]
    nbformat.write(nb, path)                                           # the exercise left the section
    before = mine.read_bytes()
    messages = working_copy.sync(course)
    assert mine.read_bytes() == before and working_copy.offered_name(mine).exists()
    assert any("attention_scores" in m and "没有对应的单元格" in m for m in messages), messages


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


def test_reset_restores_one_exercise_and_keeps_a_backup(course):
    work = course / "my_work"
    working_copy.sync(course)
    mine = notebook(work, S01)
    edit(mine, "project_qkv", "# 写坏了\n")
    edit(mine, "attention_scores", "# 这个留着\n")
    before = mine.read_bytes()
    messages = working_copy.reset(course, "01", "project_qkv")
    assert cell_of(mine, "project_qkv").source == cell_of(notebook(course / "notebooks", S01), "project_qkv").source
    assert cell_of(mine, "attention_scores").source == "# 这个留着\n"
    backups = list((work / "backups" / S01).glob("*.ipynb"))
    assert len(backups) == 1 and backups[0].read_bytes() == before
    assert any("备份" in m for m in messages) and any("project_qkv" in m for m in messages)


def test_reset_puts_back_a_deleted_exercise_before_its_check(course):
    work = course / "my_work"
    working_copy.sync(course)
    mine = notebook(work, S01)
    nb = nbformat.read(mine, as_version=4)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "attention_scores"]
    nbformat.write(nb, mine)
    working_copy.reset(course, S01, "attention_scores")
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(mine, as_version=4).cells]
    assert ids.index("attention_scores") + 1 == ids.index("test_attention_scores")


def test_reset_restores_a_whole_notebook(course):
    work = course / "my_work"
    working_copy.sync(course)
    mine = notebook(work, S01)
    edit(mine, "project_qkv", "# 我的答案\n")
    working_copy.reset(course, S01)
    assert mine.read_bytes() == notebook(course / "notebooks", S01).read_bytes()
    assert len(list((work / "backups" / S01).glob("*.ipynb"))) == 1
    release(course, S01, "新的一段说明")                                  # the reset copy counts as untouched
    assert any("已更新（你没有改动过它）" in m for m in working_copy.sync(course))


def test_reset_says_what_it_cannot_do(course):
    working_copy.sync(course)
    with pytest.raises(working_copy.WorkingCopyError,
                       match="没有叫 softmax 的练习（可选：project_qkv、attention_scores、answer_"):
        working_copy.reset(course, S01, "softmax")
    with pytest.raises(working_copy.WorkingCopyError, match="没有 '99' 这一节"):
        working_copy.reset(course, "99")
    assert not (course / "my_work" / "backups").exists(), "nothing backed up for a reset that did not happen"
