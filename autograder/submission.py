"""The student's file, made gradable before nbgrader reads it: the same on both entry points.

:class:`SubmissionExporter` is the exporter of nbgrader's ``Autograde`` converter
(``c.Autograde.exporter_class``, autograder/config.py), so ``nbgrader autograde``, the formgrader's
Autograde button and the workers of ``python -m autograder.grade`` all read submissions through it:

* A file that is no notebook (not UTF-8, not JSON, truncated, not a notebook) is kept byte for byte as
  ``<name>.broken`` beside it (``<name>.broken.1`` … if that exists) and the released notebook, with a
  Chinese note on top that says why and where the original is, is graded instead: 0 points and
  feedback that explains. Duplicate or missing cell ids (a pasted cell) are repaired in place, after
  keeping the original the same way. The log says which file and where its original is. A file
  grading wrote itself is marked (notebook metadata ``autograder_original``) and never kept again.
* Grading that raises is the grader's failure (a lock, a kernel that did not start, an OSError on the
  file): the submission is graded once more as it is (``tries``), then nbgrader reports the failure
  and the file is left as it is: never a 0 for the grader's fault.

What nbgrader never hands to an exporter belongs to ``python -m autograder.grade`` alone
(autograder/scheduler.py): a student folder without the notebook (nbgrader autograde skips it) and a
submission that overruns its wall-clock limit; both are then graded as the released notebook with the
note (:func:`replace_with_released`).
"""
from __future__ import annotations

import copy
import itertools
import json
import traceback
from pathlib import Path

import nbformat
from nbconvert.exporters import NotebookExporter
from nbgrader.coursedir import CourseDirectory
from traitlets import Int

ORIGINAL_KEY = "autograder_original"  # notebook metadata of a file grading wrote: where the student's file is
BROKEN_NOTE = ("> **评分说明**：你提交的 `{name}` 无法被自动评分（{why}）。"
               "评分时用空白的作业 notebook 代替了它，所以本次自动评分为 0 分。")
KEPT_NOTE = "原文件已原样保留为 `{kept}`，请联系老师。"
# What the student's file can make json and nbformat raise (a JSON list has no .get …); an OSError is ours.
NOT_A_NOTEBOOK = (ValueError, TypeError, AttributeError, KeyError, nbformat.ValidationError)


class SubmissionExporter(NotebookExporter):
    """nbgrader's notebook exporter, for submissions: repaired before they are read, graded once more
    when grading raises (module docstring)."""

    tries = Int(2, help="How many times a notebook is graded when grading raises (the grader's failures: "
                        "a lock, a kernel that did not start); then nbgrader reports the failure.").tag(config=True)

    def from_filename(self, filename: str, resources: dict | None = None, **kw):
        for tried in itertools.count(1):
            try:
                self._repair(Path(filename), resources or {})
                return super().from_filename(filename, resources=copy.deepcopy(resources), **kw)
            except Exception:
                if tried >= self.tries:
                    raise
                self.log.warning("评分 %s 时出错（第 %d 次，共 %d 次），按原样再评一次：\n%s",
                                 filename, tried, self.tries, traceback.format_exc())

    def _repair(self, notebook: Path, resources: dict) -> None:
        """The submitted notebook made gradable (nbgrader's second pass reads its own copy of it)."""
        info = resources.get("nbgrader")
        if not info:
            return
        coursedir = CourseDirectory(config=self.config)
        submitted = submitted_notebook(coursedir, info["assignment"], info["student"], info["notebook"])
        if notebook.resolve() != submitted.resolve():
            return
        note = repair(notebook, released_notebook(coursedir, info["assignment"], info["notebook"]))
        if note:
            self.log.warning("%s：%s", notebook, note)


def submitted_notebook(coursedir: CourseDirectory, section: str, student: str, name: str = "") -> Path:
    return Path(coursedir.format_path(coursedir.submitted_directory, student, section)) / f"{name or section}.ipynb"


def released_notebook(coursedir: CourseDirectory, section: str, name: str = "") -> Path:
    return Path(coursedir.format_path(coursedir.release_directory, ".", section)) / f"{name or section}.ipynb"


def repair(notebook: Path, released: Path) -> str:
    """Make the submission gradable; return the log's note on what was done ("" when nothing was).

    Duplicate or missing cell ids are repaired in place; a file that is no notebook at all is replaced
    by the released notebook. Either way the original is kept first (:func:`keep_original`). An OSError
    (the grader cannot read or write the file) is raised: it is not the student's doing.
    """
    why, repaired = notebook_problem(notebook)
    if why:
        return replace_with_released(notebook, released, why)
    if repaired is None:
        return ""
    kept = keep_original(notebook)
    write_repaired(notebook, repaired, kept)
    return f"已修复重复或缺失的单元格 id，原文件保留为 {kept}"


def notebook_problem(notebook: Path) -> tuple[str, dict | None]:
    """(why the file is no notebook or "", the notebook with its cell ids repaired if they needed it)."""
    if not notebook.exists():
        return "文件不存在", None
    data = notebook.read_bytes()  # an OSError here is the grader's
    try:
        changes, repaired = nbformat.validator.normalize(json.loads(data.decode("utf-8")))
        nbformat.validate(repaired)
    except NOT_A_NOTEBOOK as err:  # invalid JSON, truncated file, not a notebook …
        return f"不是有效的 notebook：{type(err).__name__}", None
    return "", repaired if changes else None


def replace_with_released(notebook: Path, released: Path, why: str) -> str:
    """Keep the submission (:func:`keep_original`); put the released notebook with a note on top
    in its place. Return the log's note."""
    kept = keep_original(notebook) if notebook.exists() else ""
    nb = json.loads(released.read_text(encoding="utf-8"))
    text = BROKEN_NOTE.format(name=notebook.name, why=why) + (KEPT_NOTE.format(kept=kept) if kept else "请联系老师。")
    note = dict(nbformat.v4.new_markdown_cell(text))
    note["id"] = "grading-note"
    nb["cells"].insert(0, note)
    write_repaired(notebook, nb, kept)
    return f"{why}；原文件保留为 {kept}" if kept else why


def keep_original(notebook: Path) -> str:
    """Copy the submission, byte for byte, beside it before grading changes it; return the copy's name.

    A file grading wrote itself (an earlier repair) is not kept again: the name it records is returned.
    An earlier copy is never overwritten: the next free name is taken.
    """
    recorded = repaired_from(notebook)
    if recorded is not None:
        return recorded
    names = (f"{notebook.name}.broken" + (f".{k}" if k else "") for k in itertools.count())
    kept = next(notebook.with_name(name) for name in names if not notebook.with_name(name).exists())
    kept.write_bytes(notebook.read_bytes())
    return kept.name


def repaired_from(notebook: Path) -> str | None:
    """The kept copy's name recorded in a notebook grading wrote; None for the student's own file."""
    try:
        metadata = json.loads(notebook.read_text(encoding="utf-8")).get("metadata")
    except NOT_A_NOTEBOOK:
        return None
    return metadata.get(ORIGINAL_KEY) if isinstance(metadata, dict) else None


def write_repaired(notebook: Path, nb: dict, kept: str) -> None:
    nb.setdefault("metadata", {})[ORIGINAL_KEY] = kept
    notebook.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
