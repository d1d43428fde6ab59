"""nbgrader preprocessors of the course (configured in autograder/config.py).

* :class:`DeduplicateGradeIds` — nbgrader's ``DeduplicateIds`` without its crash on a
  duplicated cell.
* :class:`ResilientExecute` — nbgrader's ``Execute``, except that a cell which kills the
  kernel (``os._exit``, ``exit()``, a crash) or hangs it past the timeout (twice: a timed-out
  cell is retried once in a fresh kernel) no longer fails the whole submission: the cell gets a
  Chinese error, a fresh kernel replays the cells before it, and grading goes on.
* :class:`IntegrityCheck` — after execution, zeroes the tests that a submission made lie
  (see autograder/integrity.py) with a Chinese explanation in the feedback.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbclient.client import NotebookClient
from nbformat import NotebookNode
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_locked, is_solution

from .integrity import scan

TIMEOUT_ENAME = "CellTimeoutError"


def error_output(ename: str, code: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=f"[{code}] {message}",
                        traceback=[f"\x1b[31m❌ [{code}] {message}\x1b[0m"])


class DeduplicateGradeIds(DeduplicateIds):
    """nbgrader's DeduplicateIds leaves ``metadata.nbgrader = {}`` on a duplicated cell, which
    then crashes OverwriteCells.add_missing_cells (KeyError 'grade_id'); drop the key instead."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class ResilientExecute(Execute):
    """Execute every cell; survive a cell that kills or hangs the kernel."""

    def preprocess(self, nb, resources=None, km=None):
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        lost: set[int] = set()       # cells that killed or hung a kernel: never run again
        timed_out: set[int] = set()  # cells that timed out once: they get one more try
        start: int | None = 0
        while start is not None:
            start = self._run_from(start, lost, timed_out, resources)
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _run_from(self, start: int, lost: set[int], timed_out: set[int], resources) -> int | None:
        """In a fresh kernel, replay the cells before ``start``, then execute from ``start``.

        Returns where to resume after losing this kernel, or None when every cell ran. A cell
        that times out is run once more in a fresh kernel before it is given up: now and then
        the client misses a finished cell's reply and waits out the timeout (NOTES.md).
        """
        with self.setup_kernel():
            info = self.wait_for_reply(self.kc.kernel_info())
            if info:  # None when a busy machine delays the reply: the metadata can wait
                self.nb.metadata["language_info"] = info["content"]["language_info"]
            for index in range(start):
                cell = self.nb.cells[index]
                if index not in lost and cell.cell_type == "code" and not is_grade(cell):
                    self.execute_cell(copy.deepcopy(cell), index, store_history=False)
            for index in range(start, len(self.nb.cells)):
                cell = self.nb.cells[index]
                try:
                    self.preprocess_cell(cell, resources, index)
                except DeadKernelError:
                    self._lose(cell, index, lost, "kernel-died",
                               "这个单元格让 Python 内核退出了（例如 exit()、os._exit() 或内存耗尽）；"
                               "评分换了一个新内核，从下一个单元格继续。")
                    return index + 1
                if any(o.get("ename") == TIMEOUT_ENAME for o in cell.get("outputs", [])):
                    if index not in timed_out:
                        timed_out.add(index)
                        self.log.warning("cell %d timed out: trying it once more in a fresh kernel", index)
                        return index
                    self._lose(cell, index, lost, "timeout",
                               f"这个单元格两次运行都超过 {self.timeout} 秒（可能是死循环），已被中断；"
                               "评分换了一个新内核，从下一个单元格继续。")
                    return index + 1
        return None

    def _lose(self, cell, index: int, lost: set[int], code: str, message: str) -> None:
        self.log.warning("cell %d: %s", index, code)
        lost.add(index)
        cell.outputs = [o for o in cell.get("outputs", []) if o.get("ename") != TIMEOUT_ENAME]
        cell.outputs.append(error_output("GradingError", code, message))


def _exercise_of(test_grade_id: str, exercises: list[str]) -> str | None:
    """test_softmax_hidden -> softmax (the longest exercise name that fits)."""
    fits = [e for e in exercises if test_grade_id in (f"test_{e}", f"test_{e}_hidden")]
    return max(fits, key=len) if fits else None


class IntegrityCheck(NbGraderPreprocessor):
    """Zero the tests of a submission that tampers with the checks or imports the reference."""

    def preprocess(self, nb, resources):
        released = self._released_sources(resources)
        exercises = [c.metadata.nbgrader["grade_id"] for c in nb.cells
                     if is_solution(c) and not is_grade(c) and c.cell_type == "code"]
        tampered, borrowed = [], {}   # borrowed: exercise -> the finding that imports its reference
        current = None                # the exercise whose solution cell was seen last
        for cell in nb.cells:
            if cell.cell_type != "code" or is_locked(cell):
                continue
            if is_solution(cell):
                current = cell.metadata.nbgrader["grade_id"]
            elif cell.source in released:
                continue
            for finding in scan(cell.source):
                if finding.code == "tampered":
                    tampered.append(finding)
                    continue
                named = [n for n in finding.names if n in exercises]
                for exercise in named or ([] if finding.names else [current] if current else exercises):
                    borrowed.setdefault(exercise, finding)
        for cell in nb.cells:
            if cell.cell_type == "code" and is_grade(cell):
                self._zero_if_needed(cell, exercises, tampered, borrowed)
        return nb, resources

    @staticmethod
    def _zero_if_needed(cell, exercises, tampered, borrowed) -> None:
        exercise = _exercise_of(cell.metadata.nbgrader["grade_id"], exercises)
        if tampered:
            f = tampered[0]
            cell.outputs.append(error_output("IntegrityError", "tampered",
                                             f"这份提交{f.reason}（`{f.line}`），自动评分的测试一律记 0 分；如有疑问请联系老师。"))
        elif exercise in borrowed:
            f = borrowed[exercise]
            cell.outputs.append(error_output("IntegrityError", "uses-reference",
                                             f"练习 {exercise} 的代码{f.reason}（`{f.line}`），不能算作你自己的实现，本题记 0 分。"))

    def _released_sources(self, resources) -> set[str]:
        """Sources of the code cells of the released notebook (what the course itself wrote)."""
        coursedir = CourseDirectory(config=self.config)
        info = resources["nbgrader"]
        path = Path(coursedir.format_path(coursedir.release_directory, ".", info["assignment"])) / f"{info['notebook']}.ipynb"
        if not path.exists():
            self.log.warning("release notebook %s not found: scanning every code cell", path)
            return set()
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return {"".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in cells if c["cell_type"] == "code"}
