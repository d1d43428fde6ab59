"""nbgrader preprocessors of the course (configured in autograder/config.py).

* :class:`DeduplicateGradeIds` — nbgrader's ``DeduplicateIds`` without its crash on a
  duplicated cell.
* :class:`ResilientExecute` — nbgrader's ``Execute`` in a sandbox (autograder/sandbox.py),
  with figures not rendered (utils/grading_backend.py), except that a cell which
  kills the kernel (``os._exit``, ``exit()``, a crash) or hangs it past the timeout (twice: a
  timed-out cell is retried once in a fresh kernel; a kernel that ignores the interrupt is
  killed) no longer fails the whole submission: the cell gets a Chinese error, a fresh kernel
  replays the cells before it, and grading goes on. After each kernel it removes the links, FIFOs,
  sockets and devices the kernel left in the notebook's folder, before nbgrader writes or copies
  anything there (:func:`tidy`).
* :class:`IntegrityCheck` — after execution, zeroes the tests that a submission made lie, and
  those of an exercise whose own code is the reference (see autograder/integrity.py), with a
  Chinese explanation in the feedback.
"""
from __future__ import annotations

import copy
import functools
import os
import stat
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_locked, is_solution
from traitlets import Bool, Int

from utils import GRADING_BACKEND

from .integrity import CourseBindings, borrowed, check_names, course_bindings, imported_checks, scan
from .kernel_pool import ForkingKernelManager, copy_file, opened_folder
from .notebook_format import cell_kind, exercise_of, exercises, grade_id, read
from .sandbox import Limits, SandboxedKernelManager, kernel_manager_class

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
    anything and executes from the next cell on. Each pass ends with its kernel shut down; then
    the notebook's folder is tidied (:func:`tidy`), whichever kernel it was (forked, started by
    bwrap, or not sandboxed).
    """

    sandbox = Bool(True, help="Run the kernels in bubblewrap (autograder/sandbox.py).").tag(config=True)
    fork_kernels = Bool(True, help="Fork the sandboxed kernels from a zygote that imported torch once "
                                   "(see autograder/kernel_pool.py).").tag(config=True)
    draw_figures = Bool(False, help="Render the notebook's figures (see utils/grading_backend.py).").tag(config=True)
    memory_mb = Int(Limits.memory_mb, help="Address space of each sandboxed process, in MB (RLIMIT_AS; "
                                           "see autograder/sandbox.py).").tag(config=True)
    max_processes = Int(Limits.processes, help="Processes and threads of one sandbox "
                                               "(see autograder/sandbox.py).").tag(config=True)

    def __init__(self, **kw):
        super().__init__(**kw)
        if self.sandbox:
            manager = kernel_manager_class(self.log, limits=Limits(self.memory_mb, self.max_processes))
            forking = self.fork_kernels and manager is SandboxedKernelManager   # not where bwrap fails
            self.kernel_manager_class = ForkingKernelManager if forking else manager

    async def async_start_new_kernel(self, **kwargs):
        if not self.draw_figures:
            kwargs["env"] = {**kwargs.get("env", os.environ), "MPLBACKEND": GRADING_BACKEND}
        await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds its own at class creation

    def preprocess(self, nb, resources=None, km=None):
        self._lost: set[int] = set()       # cells that killed or hung a kernel: never run again
        self._timed_out: set[int] = set()  # cells that timed out once: they get one more try
        self._resume = 0                   # the first cell this pass executes for real
        folder = (resources or {}).get("metadata", {}).get("path")
        while True:
            try:
                return super().preprocess(nb, resources, km)
            except _KernelLost as lost:
                if lost.resume == len(nb.cells):  # the last cell lost the kernel: nothing is left to run
                    return nb, self.resources
                self._resume = lost.resume
            finally:  # the pass's kernel has been shut down
                if folder:
                    self._tidy(folder)

    def _tidy(self, folder: str) -> None:
        """Make safe for nbgrader what the kernel left in the notebook's folder (see :func:`tidy`)."""
        if changed := tidy(folder):
            self.log.warning("in %s, removed what grading must not follow or open (links, FIFOs, sockets, devices) "
                             "or gave a hard-linked file a copy of its own: %s", folder, ", ".join(changed))

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


def tidy(folder: str) -> list[str]:
    """Remove from ``folder``'s tree every symbolic link, FIFO, socket and device file and give each
    regular file with more than one hard link a copy of its own; the paths changed (relative to
    ``folder``).

    A kernel works in its notebook's folder, and nbgrader then writes the graded notebook there and
    copies the folder's files to autograded/ and feedback/, following links: a link (or a hard link)
    a kernel made would let that write or copy reach a file anywhere the grader can, and a FIFO would
    stop it. No link is followed here: each folder is opened beneath its parent with ``O_NOFOLLOW``.
    """
    changed: list[str] = []
    with opened_folder(folder) as fd:
        _tidy_folder(fd, "", changed)
    return changed


def _tidy_folder(fd: int, where: str, changed: list[str]) -> None:
    with os.scandir(fd) as entries:
        entries = list(entries)
    for entry in entries:
        path = os.path.join(where, entry.name)
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            if not os.access(entry.name, os.R_OK | os.X_OK, dir_fd=fd, follow_symlinks=False):
                os.chmod(entry.name, stat.S_IMODE(info.st_mode) | stat.S_IRWXU, dir_fd=fd)  # a kernel locked it
            with opened_folder(entry.name, fd) as inner:
                _tidy_folder(inner, path, changed)
        elif not stat.S_ISREG(info.st_mode):
            os.unlink(entry.name, dir_fd=fd)
            changed.append(path)
        elif info.st_nlink > 1:
            copy_file(entry.name, fd, fd)  # a new file, renamed over the shared one
            changed.append(path)


class IntegrityCheck(NbGraderPreprocessor):
    """Zero the tests of a submission that tampers with the checks, and of each exercise whose
    own code uses the reference (autograder/integrity.py), also through a name a course cell bound
    to it (``ReferenceBlock``, ``LM = mine_or_reference(...)``).

    What the static scan cannot see, the checks see at run time (utils/checks/core.py): a check
    whose own machinery was changed fails its test cell with [tampered], and one handed the
    reference with [uses-reference]; those cells lose their points, the other exercises' keep theirs.
    A static ``tampered`` finding zeroes every test of the notebook."""

    def preprocess(self, nb, resources):
        released, checks, course = self._released(resources)
        protected = check_names(checks if released else None)
        solutions = {c.metadata.nbgrader["grade_id"]: c.source for c in nb.cells
                     if c.cell_type == "code" and is_solution(c) and not is_grade(c)}
        others = [c.source for c in nb.cells if c.cell_type == "code" and not is_locked(c)
                  and not is_solution(c) and c.source not in released]   # helpers, edited demos
        tampered = [f for source in [*solutions.values(), *others] for f in scan(source, protected)]
        taken = borrowed(solutions, others, course)
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

    def _released(self, resources) -> tuple[frozenset[str], frozenset[str], CourseBindings]:
        """The code cells of the released notebook (what the course itself wrote), the checks they
        import and the names they bind to an exercise's reference; empty when it is missing."""
        coursedir = CourseDirectory(config=self.config)
        info = resources["nbgrader"]
        folder = coursedir.format_path(coursedir.release_directory, ".", info["assignment"])
        path = Path(folder) / f"{info['notebook']}.ipynb"
        if not path.exists():
            self.log.warning("release notebook %s not found: scanning every code cell", path)
            return frozenset(), frozenset(), CourseBindings()
        version = path.stat()
        return released_code(str(path), (version.st_mtime_ns, version.st_size))


@functools.lru_cache(maxsize=8)
def released_code(path: str, version: tuple[int, int],  # noqa: ARG001
                  ) -> tuple[frozenset[str], frozenset[str], CourseBindings]:
    """Read and parsed once per grading process and ``version`` (mtime, size) of the file: the same
    for every student."""
    nb = read(Path(path))
    code = [c["source"] for c in nb["cells"] if c["cell_type"] == "code"]
    course = [c["source"] for c in nb["cells"] if c["cell_type"] == "code" and cell_kind(c) != "solution"]
    return frozenset(code), frozenset(imported_checks(code)), course_bindings(course, exercises(nb))
