"""nbgrader preprocessors of the course (configured in autograder/config.py).

* :class:`DeduplicateGradeIds` — nbgrader's ``DeduplicateIds`` without its crash on a
  duplicated cell.
* :class:`ResilientExecute` — nbgrader's ``Execute`` in a sandbox (autograder/sandbox.py),
  with figures not rendered (utils/grading_backend.py), except that a cell which
  kills the kernel (``os._exit``, ``exit()``, a crash) or hangs it past the timeout (twice: a
  timed-out cell is retried once in a fresh kernel; a kernel that ignores the interrupt is
  killed) no longer fails the whole submission: the cell gets a Chinese error, a fresh kernel
  replays the cells before it, and grading goes on.
* :class:`IntegrityCheck` — after execution, zeroes the tests that a submission made lie, and
  those of an exercise whose own code is the reference (see autograder/integrity.py), with a
  Chinese explanation in the feedback.
"""
from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_locked, is_solution
from traitlets import Bool

from utils import GRADING_BACKEND

from .integrity import borrowed, check_names, imported_checks, scan
from .notebook_format import exercise_of, grade_id
from .sandbox import kernel_manager_class

TIMEOUT_ENAME = "CellTimeoutError"


def error_output(ename: str, code: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=f"[{code}] {message}",
                        traceback=[f"\x1b[31m✗ [{code}] {message}\x1b[0m"])


class DeduplicateGradeIds(DeduplicateIds):
    """nbgrader's DeduplicateIds leaves ``metadata.nbgrader = {}`` on a duplicated cell, which
    then crashes OverwriteCells.add_missing_cells (KeyError 'grade_id'); drop the key instead."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class _KernelLost(Exception):
    """Ends a pass over the notebook: go on in a fresh kernel from cell ``resume``."""

    def __init__(self, resume: int):
        super().__init__(resume)
        self.resume = resume


class ResilientExecute(Execute):
    """Execute every cell; survive a cell that kills or hangs the kernel.

    Only public seams of nbconvert's ExecutePreprocessor: ``preprocess`` runs the notebook in
    one kernel and calls ``preprocess_cell`` for each cell. A cell that loses the kernel ends
    that pass; the next pass (a fresh kernel) replays the cells before it without recording
    anything and executes from the next cell on.
    """

    sandbox = Bool(True, help="Run the kernels in bubblewrap (autograder/sandbox.py).").tag(config=True)
    fork_kernels = Bool(True, help="Fork the sandboxed kernels from a zygote that imported torch once "
                                   "(see autograder/kernel_pool.py).").tag(config=True)
    draw_figures = Bool(False, help="Render the notebook's figures (see utils/grading_backend.py).").tag(config=True)

    def __init__(self, **kw):
        super().__init__(**kw)
        if self.sandbox:
            self.kernel_manager_class = kernel_manager_class(self.log, fork=self.fork_kernels)

    async def async_start_new_kernel(self, **kwargs):
        if not self.draw_figures:
            kwargs["env"] = {**kwargs.get("env", os.environ), "MPLBACKEND": GRADING_BACKEND}
        await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds its own at class creation

    def preprocess(self, nb, resources=None, km=None):
        self._lost: set[int] = set()       # cells that killed or hung a kernel: never run again
        self._timed_out: set[int] = set()  # cells that timed out once: they get one more try
        self._resume = 0                   # the first cell this pass executes for real
        while True:
            try:
                return super().preprocess(nb, resources, km)
            except _KernelLost as lost:
                if lost.resume == len(nb.cells):  # the last cell lost the kernel: nothing is left to run
                    return nb, self.resources
                self._resume = lost.resume

    def preprocess_cell(self, cell, resources, index):
        if index < self._resume:
            if index not in self._lost and cell.cell_type == "code" and not is_grade(cell):
                self.execute_cell(copy.deepcopy(cell), index, store_history=False)
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._lose(cell, index, "kernel-died",
                       "这个单元格让 Python 内核退出了（例如 exit()、os._exit() 或内存耗尽）；"
                       "评分换了一个新内核，从下一个单元格继续。")
        except CellTimeoutError:  # interrupted after the timeout, and still busy a few seconds later
            self._timed_out_once(cell, index)
        if any(o.get("ename") == TIMEOUT_ENAME for o in cell.get("outputs", [])):
            self._timed_out_once(cell, index)
        return cell, resources

    def _timed_out_once(self, cell, index: int) -> None:
        """A cell that timed out runs once more in a fresh kernel before it is given up: now and
        then the client misses a finished cell's reply and waits out the timeout."""
        if index not in self._timed_out:
            self._timed_out.add(index)
            self.log.warning("cell %d timed out: trying it once more in a fresh kernel", index)
            raise _KernelLost(index)
        self._lose(cell, index, "timeout", f"这个单元格两次运行都超过 {self.timeout} 秒（可能是死循环），已被中断；"
                                           "评分换了一个新内核，从下一个单元格继续。")

    def _lose(self, cell, index: int, code: str, message: str) -> None:
        self.log.warning("cell %d: %s", index, code)
        self._lost.add(index)
        cell.outputs = [o for o in cell.get("outputs", []) if o.get("ename") != TIMEOUT_ENAME]
        cell.outputs.append(error_output("GradingError", code, message))
        raise _KernelLost(index + 1)


class IntegrityCheck(NbGraderPreprocessor):
    """Zero the tests of a submission that tampers with the checks, and of each exercise whose
    own code uses the reference (autograder/integrity.py)."""

    def preprocess(self, nb, resources):
        released, checks = self._released(resources)
        protected = check_names(checks if released else None)
        solutions = {c.metadata.nbgrader["grade_id"]: c.source for c in nb.cells
                     if c.cell_type == "code" and is_solution(c) and not is_grade(c)}
        others = [c.source for c in nb.cells if c.cell_type == "code" and not is_locked(c)
                  and not is_solution(c) and c.source not in released]   # helpers, edited demos
        tampered = [f for source in [*solutions.values(), *others] for f in scan(source, protected)]
        taken = borrowed(solutions, others)
        for cell in nb.cells:
            if cell.cell_type == "code" and is_grade(cell):
                self._zero_if_needed(cell, tampered, taken)
        return nb, resources

    @staticmethod
    def _zero_if_needed(cell, tampered, taken) -> None:
        exercise = exercise_of(grade_id(cell))
        if tampered:
            f = tampered[0]
            cell.outputs.append(error_output(
                "IntegrityError", "tampered",
                f"这份提交{f.reason}（`{f.line}`），自动评分的测试一律记 0 分；如有疑问请联系老师。"))
        elif exercise in taken:
            f = taken[exercise]
            cell.outputs.append(error_output(
                "IntegrityError", "uses-reference",
                f"练习 {exercise} 的代码{f.reason}（`{f.line}`），不能算作你自己的实现，本题记 0 分。"))

    def _released(self, resources) -> tuple[frozenset[str], frozenset[str]]:
        """The code cells of the released notebook (what the course itself wrote) and the checks they
        import; empty when it is missing."""
        coursedir = CourseDirectory(config=self.config)
        info = resources["nbgrader"]
        folder = coursedir.format_path(coursedir.release_directory, ".", info["assignment"])
        path = Path(folder) / f"{info['notebook']}.ipynb"
        if not path.exists():
            self.log.warning("release notebook %s not found: scanning every code cell", path)
            return frozenset(), frozenset()
        version = path.stat()
        return released_code(str(path), (version.st_mtime_ns, version.st_size))


@functools.lru_cache(maxsize=8)
def released_code(path: str, version: tuple[int, int]) -> tuple[frozenset[str], frozenset[str]]:  # noqa: ARG001
    """Read and parsed once per grading process and ``version`` (mtime, size) of the file: the same
    for every student."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    code = frozenset("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in cells if c["cell_type"] == "code")
    return code, frozenset(imported_checks(code))
