"""nbgrader preprocessors of the course (configured in autograder/config.py), one concern each.

* :class:`DeduplicateGradeIds` — nbgrader's ``DeduplicateIds`` without its crash on a duplicated cell.

nbgrader's ``Execute``, in four layers (each a preprocessor of its own; the course's pipeline runs the last):

* :class:`GradingExecute` — its kernels are grading kernels: started by the course's provisioner
  (autograder/provisioner.py: sandboxed, forked from a zygote, their folder made safe for nbgrader
  once they end), their messages bounded (autograder/kernel_channel.py);
* :class:`ClassEditionExecute` — they import the class edition of the course package that holds no
  answer of the graded section or later (autograder/edition.py);
* :class:`JudgedExecute` — the graded test cells are decided by the judge outside the kernel
  (autograder/judge.py);
* :class:`ResilientExecute` — a cell which kills the kernel (``os._exit``, ``exit()``, a crash), lies
  in its messages or hangs it past the timeout (twice: a timed-out cell is retried once in a fresh
  kernel; a kernel that ignores the interrupt is killed) no longer fails the whole submission: the
  cell gets a Chinese error, a fresh kernel replays the cells before it, and grading goes on.
"""
from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import DeduplicateIds, Execute
from nbgrader.utils import is_grade, is_solution
from traitlets import Bool, Enum, Unicode, default
from traitlets.config import Config

from utils.checks.errors import CheckError

from . import edition
from .judge import Judge, kernel_ask
from .kernel_channel import KernelLied
from .provisioner import grading_kernels

TIMEOUT_ENAME = "CellTimeoutError"


def error_output(ename: str, code: str, message: str) -> NotebookNode:
    """An error output as a check's is written: ``[code] message``, rendered with the code's first hint."""
    err = CheckError(code, message)
    return NotebookNode(output_type="error", ename=ename, evalue=err.args[0], traceback=err._render_traceback_())


class DeduplicateGradeIds(DeduplicateIds):
    """nbgrader's DeduplicateIds leaves ``metadata.nbgrader = {}`` on a duplicated cell, which
    then crashes OverwriteCells.add_missing_cells (KeyError 'grade_id'); drop the key instead."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


def is_test_cell(cell) -> bool:
    """An autograded test cell: locked code whose outputs nbgrader scores (not a manually graded answer)."""
    return cell.cell_type == "code" and is_grade(cell) and not is_solution(cell)


class GradingExecute(Execute):
    """nbgrader's Execute whose kernels are grading kernels (autograder/provisioner.py): its kernel
    manager is jupyter_client's own, configured by :func:`~autograder.provisioner.grading_kernels`;
    the provisioner's warnings go to this preprocessor's log. Limits: ``c.GradingLimits``."""

    def create_kernel_manager(self):
        km = grading_kernels(super().create_kernel_manager())
        km.log = self.log
        return km


class ClassEditionExecute(GradingExecute):
    """Grading kernels import the class edition that holds no answer of the graded section or later
    (unless ``c.SandboxProvisioner.course_package`` names a course package)."""

    kernel_edition = Enum(["class", "full"], "class", help="What the grading kernels import: the class edition "
                          "with the answers of the sections before the graded one only (built once per version "
                          "of the course, into edition_cache), or the full course package.").tag(config=True)
    edition_cache = Unicode(help="Where the class editions for grading kernels are built (default: the "
                                 "grading account's cache, ~/.cache/attention-course/class-edition).").tag(config=True)

    @default("edition_cache")
    def _default_edition_cache(self) -> str:
        return str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-course"
                   / "class-edition")

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        section = self.resources.get("nbgrader", {}).get("assignment")   # the notebook's (nbgrader's resources)
        if self.kernel_edition == "class" and section and "course_package" not in self.config.SandboxProvisioner:
            folder = edition.for_grading(edition.section_before(section), Path(self.edition_cache))
            km.update_config(Config({"SandboxProvisioner": {"course_package": folder}}))
        return km


class JudgedExecute(ClassEditionExecute):
    """A graded test cell of the judge's form is decided outside the kernel (autograder/judge.py); any
    other test cell runs in the kernel, as plain nbgrader runs it, with a warning."""

    judge_tests = Bool(True, help="Decide each graded test cell outside the kernel (autograder/judge.py): the "
                                  "kernel only runs the student's code. False runs test cells in the kernel, as "
                                  "plain nbgrader does.").tag(config=True)

    @functools.cached_property
    def judge(self) -> Judge:
        return Judge(parent=self)

    def preprocess_cell(self, cell, resources, index):
        if not (self.judge_tests and is_test_cell(cell)):
            return super().preprocess_cell(cell, resources, index)
        if not self.judge.decides(cell):
            self.judge.warn_left_to_kernel(cell)
            return super().preprocess_cell(cell, resources, index)
        cell.outputs = self.judge.outputs(cell, kernel_ask(self, cell, self.timeout), self._sources())
        return cell, resources

    def _sources(self) -> list[str]:
        """The code the submission runs: its code cells but the test cells (for the judge's rules)."""
        return [cell.source for cell in self.nb.cells if cell.cell_type == "code" and not is_test_cell(cell)]


class _FreshKernel(Exception):
    """Ends a pass over the notebook: go on in a fresh kernel from cell ``resume`` (the kernel was lost, or a
    cell timed out once and is tried again)."""

    def __init__(self, resume: int):
        super().__init__(resume)
        self.resume = resume


class ResilientExecute(JudgedExecute):
    """Execute every cell; survive a cell that kills, hangs or lies through the kernel.

    Only public seams of nbconvert's ExecutePreprocessor: ``preprocess`` runs the notebook in
    one kernel and calls ``preprocess_cell`` for each cell. A cell that loses the kernel ends
    that pass; the next pass (a fresh kernel) replays the cells before it without recording
    anything and executes from the next cell on.
    """

    def preprocess(self, nb, resources=None, km=None):
        self._lost: set[int] = set()       # cells that killed or hung a kernel: never run again
        self._timed_out: set[int] = set()  # cells that timed out once: they get one more try
        self._resume = 0                   # the first cell this pass executes for real
        while True:
            try:
                return super().preprocess(nb, resources, km)
            except _FreshKernel as lost:
                if lost.resume == len(nb.cells):  # the last cell lost the kernel: nothing is left to run
                    return nb, self.resources
                self._resume = lost.resume

    def preprocess_cell(self, cell, resources, index):
        if index < self._resume:
            if index not in self._lost and cell.cell_type == "code" and not is_grade(cell):
                self.execute_cell(copy.deepcopy(cell), index, store_history=False)
                self.nb.cells[index] = cell            # nbclient stores the copy it ran: keep what was recorded
                self.clear_display_id_mapping(index)   # and let no later display update reach it
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._lose(cell, index, "kernel-died",
                       "这个单元格让 Python 内核退出了（例如 exit()、os._exit() 或内存耗尽）；"
                       "评分换了一个新内核，从下一个单元格继续。")
        except KernelLied as lie:
            self._lose(cell, index, "kernel-lied", f"这个单元格运行时，内核发来了诚实的内核不会发的消息：{lie}。"
                                                   "这个单元格不计分；评分换了一个新内核，从下一个单元格继续。")
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
            raise _FreshKernel(index)
        self._lose(cell, index, "timeout", f"这个单元格两次运行都超过 {self.timeout} 秒（可能是死循环），已被中断；"
                                           "评分换了一个新内核，从下一个单元格继续。")

    def _lose(self, cell, index: int, code: str, message: str) -> None:
        self.log.warning("cell %d: %s", index, code)
        self._lost.add(index)
        cell.outputs = [o for o in cell.get("outputs", []) if o.get("ename") != TIMEOUT_ENAME]
        cell.outputs.append(error_output("GradingError", code, message))
        raise _FreshKernel(index + 1)
