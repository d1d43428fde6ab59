"""Where am I? The learner's progress through the course, from their own notebooks.

For every section (of ``solutions/`` or ``notebooks/``: utils/sections.py, so new sections
appear by themselves) and every exercise in it: does the learner's version pass its visible
check, fail it (with the diagnosis code), or is it not started; and are the manually graded
answers written. The learner's versions are in their working copy (``my_work/``, made by
``python3 course.py lab``: utils/working_copy.py), or in ``notebooks/`` where there is none (a
learner who opens the release with their own ``jupyter lab``).

The learner's code runs in fresh kernels, one per notebook and several at a time; only the
notebook's imports, its exercise cells and their visible checks run, not the demos. The
notebooks themselves are read, never written.

    python3 course.py progress                                    (from the course folder)
    from utils.progress import progress_button; progress_button()   (a notebook cell: a button)
"""
from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from utils.checks.codes import parse_failure
from utils.checks.core import FAIL_MARK, PASS_MARK
from utils.notebook import TEXT_STUB, cell_kind
from utils.sections import section_ids
from utils.working_copy import RELEASE, work_folder

ROOT = Path(__file__).resolve().parents[1]
# Seconds a cell may take: an exercise or its check (a learner's endless loop is reported, not
# waited for), and an import (torch takes a while on a busy machine).
EXERCISE_TIMEOUT, IMPORT_TIMEOUT = 30, 120

PASSED, FAILED, NOT_STARTED = "passed", "failed", "not-started"
MARKS = {PASSED: PASS_MARK, FAILED: FAIL_MARK, NOT_STARTED: "○"}


@dataclass
class Exercise:
    name: str
    status: str = NOT_STARTED
    code: str | None = None     # the diagnosis code of a failed check
    detail: str = ""            # what the check (or the error) said, first line


@dataclass
class Section:
    id: str
    title: str
    exercises: list[Exercise] = field(default_factory=list)
    answers: dict[str, bool] = field(default_factory=dict)  # grade_id -> written
    problem: str | None = None  # why the learner's notebook could not be read or run


# --- what each section contains ----------------------------------------------------------

def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def outline(source: dict, section_id: str) -> Section:
    """The section's title, exercises (not started yet) and manually graded answers (empty)."""
    title = next((c["source"].splitlines()[0].lstrip("# ") for c in source["cells"]
                  if c["cell_type"] == "markdown" and c["source"].strip()), section_id)
    section = Section(section_id, title)
    for cell in source["cells"]:
        kind = cell_kind(cell)
        if kind == "solution":
            section.exercises.append(Exercise(_grade_id(cell)))
        elif kind == "answer":
            section.answers[_grade_id(cell)] = False
    return section


# --- the learner's notebook ---------------------------------------------------------------

def learner_folder(root: Path = ROOT) -> Path:
    """Where the learner's notebooks are: the working copy once there is one, else the release."""
    work = work_folder(root)
    return work if work.is_dir() else root / RELEASE


def read_learner_notebook(notebooks: Path, section_id: str) -> tuple[nbformat.NotebookNode | None, str | None]:
    """The learner's notebook, or None and a Chinese explanation of why it cannot be read."""
    folder = notebooks / section_id
    path = folder / f"{section_id}.ipynb"
    if not path.is_file():
        others = sorted(p.name for p in folder.glob("*.ipynb")) if folder.is_dir() else []
        if others:
            return None, (f"找不到 {path.relative_to(notebooks.parent)}，但这个文件夹里有 {'、'.join(others)}。"
                          f"如果那是你的 notebook，请把它改回 {section_id}.ipynb。")
        return None, f"找不到 {path.relative_to(notebooks.parent)}（被删除或移走了？）。"
    try:
        return nbformat.read(path, as_version=4), None
    except (OSError, ValueError, KeyError, TypeError) as err:  # JSON errors are ValueErrors
        return None, (f"{path.relative_to(notebooks.parent)} 无法读取：它不是一个有效的 notebook"
                      f"（{type(err).__name__}）。可以在 JupyterLab 里用 File → Reload 或从备份恢复。")


def imports_of(source: str) -> str:
    """The top-level import statements of a code cell, without the rest of it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    return "\n".join(ast.get_source_segment(source, node) for node in tree.body
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


def checking_notebook(learner: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The cells that decide progress, in order: the imports of every code cell, the export
    cells (setup an exercise needs), the exercises and their visible checks. No demos."""
    kept = []
    for cell in learner.cells:
        kind = cell_kind(cell)
        if kind == "code" and (imports := imports_of(cell.source)):
            kept.append(nbformat.v4.new_code_cell(imports))
        elif kind in ("export", "solution") or (kind == "test" and "check_" in cell.source):
            kept.append(nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata))
    return nbformat.v4.new_notebook(cells=kept, metadata=learner.metadata)


# --- running it ---------------------------------------------------------------------------

def _error(cell) -> dict | None:
    return next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def judge(exercise: Exercise, solution, check) -> None:
    """Fill in ``exercise`` from the executed solution cell and check cell (either may be None)."""
    if solution is None or check is None:
        exercise.status, exercise.detail = FAILED, "找不到这个练习或它的检查单元格（被删除了？）"
        return
    defining, checking = _error(solution), _error(check)
    if checking is None and PASS_MARK in _stdout(check):
        exercise.status = PASSED
    elif checking is not None and (coded := parse_failure(checking["evalue"])):
        code, finding = coded
        if code == "not-implemented":
            exercise.status = NOT_STARTED
        else:
            exercise.status, exercise.code, exercise.detail = FAILED, code, finding
    else:
        exercise.status = FAILED
        if defining is not None:
            exercise.detail = "定义练习的单元格出错：" + _describe(defining)
        else:
            exercise.detail = _describe(checking) if checking else "检查单元格没有打印通过的结果"


def _describe(error: dict) -> str:
    if error["ename"] == "KeyboardInterrupt":
        return f"运行超过 {EXERCISE_TIMEOUT} 秒，被中断了（死循环？）"
    return f"{error['ename']}: {error['evalue']}".splitlines()[0]


def _timeout(cell) -> int:
    return EXERCISE_TIMEOUT if _grade_id(cell) else IMPORT_TIMEOUT


async def _run(notebook: nbformat.NotebookNode, folder: Path) -> None:
    client = NotebookClient(notebook, timeout_func=_timeout, interrupt_on_timeout=True, allow_errors=True,
                            kernel_name="python3", resources={"metadata": {"path": str(folder)}},
                            shutdown_kernel="immediate")
    await client.async_execute(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # the kernels' own logs


def prepare(root: Path, section_id: str) -> tuple[Section, nbformat.NotebookNode | None]:
    """The section's outline (from solutions/, else from the learner's notebook) and that notebook."""
    learner, problem = read_learner_notebook(learner_folder(root), section_id)
    source_path = root / "solutions" / section_id / f"{section_id}.ipynb"
    source = nbformat.read(source_path, as_version=4) if source_path.is_file() else learner
    section = outline(source, section_id) if source is not None else Section(section_id, section_id)
    section.problem = problem
    return section, learner


async def check_section(section: Section, learner: nbformat.NotebookNode, folder: Path,
                        slots: asyncio.Semaphore) -> None:
    by_id = {_grade_id(c): c for c in learner.cells if _grade_id(c)}
    for answer in section.answers:
        text = by_id[answer].source.strip() if answer in by_id else ""
        section.answers[answer] = text not in ("", TEXT_STUB)
    notebook = checking_notebook(learner)
    async with slots:
        try:
            await _run(notebook, folder)
        except Exception as err:  # the kernel died (exit(), os._exit(), out of memory, …)
            section.problem = (f"运行你的代码时内核退出了（{type(err).__name__}）：练习里是否调用了 exit()、"
                               "os._exit()，或者用光了内存？")
            return
    setup_error = next((e for c in notebook.cells if not _grade_id(c) and (e := _error(c))), None)
    if setup_error:
        section.problem = f"notebook 里的 import 出错了：{setup_error['ename']}: {setup_error['evalue']}"
        return
    ran = {_grade_id(c): c for c in notebook.cells if _grade_id(c)}
    for exercise in section.exercises:
        judge(exercise, ran.get(exercise.name), ran.get(f"test_{exercise.name}"))


def course_progress(root: Path = ROOT, jobs: int | None = None,
                    checked: Callable[[Section, int, int], None] | None = None) -> list[Section]:
    """Every section's progress, from the learner's notebooks (:func:`learner_folder`); ``jobs`` kernels at a time.
    ``checked(section, done, total)`` is called as each section's check ends."""
    sections = section_ids(root / "solutions", root / RELEASE)     # a class may hand out no solutions/
    prepared = [prepare(root, s) for s in sections]
    folder = learner_folder(root)
    to_check = [(section, learner) for section, learner in prepared if learner is not None]
    done = []

    async def check_one(section: Section, learner: nbformat.NotebookNode, slots: asyncio.Semaphore) -> None:
        await check_section(section, learner, folder / section.id, slots)
        done.append(section)
        if checked is not None:
            checked(section, len(done), len(to_check))

    async def check_all() -> None:
        slots = asyncio.Semaphore(jobs or max(2, os.cpu_count() or 2))
        await asyncio.gather(*(check_one(section, learner, slots) for section, learner in to_check))

    _in_own_thread(lambda: asyncio.run(check_all()))  # a notebook's kernel already runs an event loop
    return [section for section, _ in prepared]


def _in_own_thread(work) -> None:
    failure: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as err:  # re-raised in the caller's thread
            failure.append(err)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


# --- showing it ---------------------------------------------------------------------------

def render(sections: list[Section]) -> str:
    lines = []
    for section in sections:
        lines.append(section.title)
        if section.problem:
            lines.append(f"  {FAIL_MARK} {section.problem}")
            continue
        lines += [f"  {MARKS[e.status]} {e.name:<26} {verdict(e)}" for e in section.exercises]
        if section.answers:
            written = sum(section.answers.values())
            lines.append(f"  简答题：{written}/{len(section.answers)} 已作答"
                         + ("" if written == len(section.answers) else
                            f"（还空着：{'、'.join(a for a, w in section.answers.items() if not w)}）"))
    lines.append(summary(sections))
    return "\n".join(lines)


def verdict(exercise: Exercise) -> str:
    if exercise.status != FAILED:
        return {PASSED: "通过", NOT_STARTED: "未开始"}[exercise.status]
    return f"没通过 [{exercise.code}] {exercise.detail}" if exercise.code else f"没通过：{exercise.detail}"


def summary(sections: list[Section]) -> str:
    exercises = [e for s in sections if not s.problem for e in s.exercises]
    count = {status: sum(e.status == status for e in exercises) for status in MARKS}
    answers = [w for s in sections if not s.problem for w in s.answers.values()]
    unchecked = sum(1 for s in sections if s.problem)
    text = (f"合计：练习 {count[PASSED]}/{len(exercises)} 通过，{count[FAILED]} 个没通过，"
            f"{count[NOT_STARTED]} 个未开始；简答题 {sum(answers)}/{len(answers)} 已作答。")
    return text + (f"另有 {unchecked} 节没法检查（见上）。" if unchecked else "")


def show_progress(root: Path = ROOT) -> None:
    """Print the course's progress (``python -m utils.progress``, or the button below)."""
    print(f"正在用全新的内核运行 {learner_folder(root)} 里你的练习和检查单元格（不运行演示，也不会改动你的 notebook；"
          "读的是保存过的版本，先按 Ctrl+S 保存）……", flush=True)
    start = time.perf_counter()
    sections = course_progress(root, checked=lambda section, done, total: print(
        f"  已检查 {done}/{total} 节：{section.title}（{time.perf_counter() - start:.0f} 秒）", flush=True))
    print(render(sections))
    print(f"（用时 {time.perf_counter() - start:.0f} 秒）")


def progress_button() -> None:
    """A button that shows the progress when clicked (the cell at the end of 00): a notebook run
    headless — by the tests, by nbgrader — shows the button and starts no kernels."""
    import ipywidgets as widgets
    from IPython.display import display

    button = widgets.Button(description="查看我的学习进度", button_style="info", layout={"width": "auto"})
    output = widgets.Output()

    def on_click(_button) -> None:
        button.disabled = True
        output.clear_output()
        with output:
            show_progress()
        button.disabled = False

    button.on_click(on_click)
    display(widgets.VBox([button, output]))


if __name__ == "__main__":
    show_progress()
