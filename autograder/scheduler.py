"""The scheduler of ``python -m autograder.grade``: hands students to worker processes
(autograder/worker.py), watches the wall clock, and decides by whose fault a failure is.

Workers come from multiprocessing's forkserver (autograder/worker.py), started first thing: it
imports nbgrader while the command imports it and reads the course's configuration, and it holds
none of the command's descriptors. A worker is sent one student at a time over a Pipe
and answers on it. The main loop waits on the workers' connections and process sentinels, and on
every turn kills a worker whose student has run past ``c.GradingLimits.submission_seconds`` (its
whole session: its kernels die with it) and starts a new one. The limit counts from when the worker
said it was ready (a new worker's start-up is not the student's time) or, before that, from the
assignment.

Whose fault a failure is decides what happens (the student's file itself is repaired by nbgrader's
exporter, autograder/submission.py, on this entry point as on ``nbgrader autograde``):

* A student folder without the notebook: the released notebook with a Chinese note is graded
  instead (0 points, feedback that explains); nbgrader alone would skip the student.
* The student's code running past the wall-clock limit: the worker is killed; the submission is tried
  once more as submitted, then graded as the released notebook with the note, the original kept.
* A worker that raised (a ``MemoryError`` of the worker, a bug of ours) or died: the student is tried
  once more, then reported as not graded. A failure nbgrader reports (a database error, grading that
  raised twice in its exporter) is reported at once. Either way: ``未能批改 <学生>：评分端出错…`` in
  the summary and exit status 1; the submission is left as it is and no score is written for it by
  us (the gradebook keeps what it had). Each traceback is printed in the grading log under the
  student's name.
"""
from __future__ import annotations

import multiprocessing.connection
import os
import signal
import sys
import tempfile
import textwrap
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from traitlets.config import Config

from . import zygote
from .limits import GradingLimits
from .submission import released_notebook, replace_with_released, submitted_notebook
from .worker import CONTEXT, Grader, Job, child_env, nbgrader_grader, start_forkserver, work

SQLITE_BUSY_SECONDS = 120
TRIES = 2  # a worker's failure may be passing (a lost reply, a killed process): try again before giving up
GRADER_FAULT = "评分端出错，未记分（不是学生的问题，请检查后重新评分）：{detail}"


@dataclass
class Outcome:
    student: str
    ok: bool
    seconds: float
    note: str = ""


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def log_traceback(whose: str, trace: str) -> None:
    log(f"  {whose} 的评分出错，traceback：\n" + textwrap.indent(trace.rstrip(), "    | "))


def progress(done: int, total: int, outcome: Outcome) -> None:
    width = 30
    filled = width * done // total
    mark = "✓" if outcome.ok else "✗"
    extra = f"  {outcome.note}" if outcome.note else ""
    log(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {mark} {outcome.student} "
        f"({outcome.seconds:.1f} s){extra}")


class Worker:
    """A grading process (autograder/worker.py), fed one student at a time over ``conn``."""

    def __init__(self, job: Job, make_grader: Callable[[Job], Grader] = nbgrader_grader):
        self.scratch = tempfile.mkdtemp(prefix="grading-worker-")
        self.conn, theirs = CONTEXT.Pipe()
        self.process = CONTEXT.Process(target=work, args=(theirs, make_grader, job, self.scratch),
                                       name="grading-worker")
        self.process.start()
        theirs.close()
        self.student: str | None = None
        self.since = 0.0
        self.killed_for = ""   # why we killed it
        self.lost = ""         # what it said went wrong before it ended

    def assign(self, student: str) -> None:
        self.student, self.since = student, time.perf_counter()
        try:
            self.conn.send(student)
        except BrokenPipeError:  # it has ended: its sentinel says so next
            pass

    def seconds(self) -> float:
        return time.perf_counter() - self.since

    def kill_if_overdue(self, wall_seconds: int) -> None:
        if self.student and not self.killed_for and self.seconds() > wall_seconds:
            self.killed_for = f"超过 {wall_seconds} 秒，已终止"
            self.kill()

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # its session: the worker and its kernels
        except ProcessLookupError:  # not in a session of its own yet
            self.process.kill()

    def close(self) -> None:
        """Let an idle worker end (a busy one is killed); remove its temporary files."""
        if self.student and self.process.is_alive():
            self.kill()
        try:
            self.conn.send(None)
        except OSError:  # it has ended already
            pass
        self.process.join()
        self.conn.close()
        try:
            zygote.remove(self.scratch)
        except OSError as err:
            log(f"  未能删除评分进程的临时文件夹 {self.scratch}：{err}")


def worker_job(app, section: str, jobs: int, overrides: Config) -> Job:
    """What the workers need besides the course's configuration: the command's ``overrides``, SQLite
    waiting for a lock, the memory limit."""
    overrides = Config(overrides)
    db_url = app.coursedir.db_url
    if db_url.startswith("sqlite:") and "?" not in db_url:
        # Workers write to one SQLite file at once: wait for a lock instead of failing at once.
        db_url += f"?timeout={SQLITE_BUSY_SECONDS}"
    overrides.CourseDirectory.db_url = db_url
    memory_mb = GradingLimits(config=app.config).memory_mb
    return Job(section, str(app.coursedir.root), overrides, memory_mb, child_env(jobs))


class Grading:
    """Hand students to workers; a failure is retried, then handled by whose fault it is (module docstring)."""

    def __init__(self, app, section: str, students: list[str], jobs: int, overrides: Config,
                 make_grader: Callable[[Job], Grader]):
        self.coursedir, self.section, self.jobs = app.coursedir, section, jobs
        self.wall_seconds = GradingLimits(config=app.config).submission_seconds
        self.job, self.make_grader = worker_job(app, section, jobs, overrides), make_grader
        self.notes: dict[str, str] = {}
        self.failures: dict[str, int] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.total = len(students)
        self.pending = deque(s for s in students if self._prepared(s))
        self.workers: list[Worker] = []

    def _prepared(self, student: str) -> bool:
        """A student folder without the notebook gets the released one with a note (nbgrader would skip it)."""
        notebook = submitted_notebook(self.coursedir, self.section, student)
        try:
            if not notebook.exists():
                self.notes[student] = replace_with_released(notebook, released_notebook(self.coursedir, self.section),
                                                            "文件不存在")
        except Exception as err:  # the grader's: writing the submission failed
            self._not_graded(student, 0.0, f"{type(err).__name__}: {err}", traceback.format_exc())
            return False
        return True

    def run(self) -> list[Outcome]:
        if self.pending:
            start_forkserver()
        self.workers = [Worker(self.job, self.make_grader) for _ in range(min(self.jobs, len(self.pending)))]
        try:
            while len(self.outcomes) < self.total:
                for worker in self.workers:
                    if worker.student is None and self.pending:
                        worker.assign(self.pending.popleft())
                for worker in self._ready():
                    self._handle(worker)
                for worker in self.workers:
                    worker.kill_if_overdue(self.wall_seconds)
        finally:
            for worker in self.workers:
                worker.close()
        return sorted(self.outcomes.values(), key=lambda o: o.student)

    def _ready(self) -> list[Worker]:
        """The workers that answered or ended, waiting at most until the first busy one is overdue."""
        left = [self.wall_seconds - w.seconds() for w in self.workers if w.student and not w.killed_for]
        ready = multiprocessing.connection.wait([*(w.conn for w in self.workers),
                                                 *(w.process.sentinel for w in self.workers)],
                                                timeout=max(0.0, min(left, default=1.0)) + 0.01)
        return [w for w in self.workers if w.conn in ready or w.process.sentinel in ready]

    def _handle(self, worker: Worker) -> None:
        if worker.conn.poll():
            try:
                message = worker.conn.recv()
            except (EOFError, ConnectionResetError):  # it ended (killed with our request unread)
                message = None
            if message is not None:
                self._answered(worker, message)
                return
        self._ended(worker)

    def _answered(self, worker: Worker, message: dict) -> None:
        student, seconds = worker.student, worker.seconds()
        if message.get("ready"):  # its set-up is not the student's time
            worker.since = time.perf_counter()
            return
        if message["student"] is None:  # it could not start: it ends now
            worker.lost = f"评分进程启动失败：{message['detail']}"
            log_traceback(f"评分进程（正在批改 {student}）" if student else "评分进程", message["traceback"])
            return
        worker.student = None
        if message["traceback"]:
            log_traceback(student, message["traceback"])
        if message["ok"]:
            self._finish(Outcome(student, True, seconds, self.notes.get(student, "")))
        elif message["crashed"]:
            self._failed(student, message["detail"], seconds)
        else:  # nbgrader's own failure, after its exporter tried again
            log(f"  {student} 评分失败（{seconds:.1f} 秒）：{message['detail']}")
            self._not_graded(student, seconds, message["detail"])

    def _ended(self, worker: Worker) -> None:
        """The worker died (killed when overdue, or crashed): replace it while there is work left."""
        student, seconds = worker.student, worker.seconds()
        code = worker.process.exitcode
        worker.close()
        if student is not None:
            self._failed(student, worker.killed_for or worker.lost or f"评分进程意外退出（退出码 {code}）",
                         seconds, overran=bool(worker.killed_for))
        if self.pending:
            self.workers[self.workers.index(worker)] = Worker(self.job, self.make_grader)
        else:
            self.workers.remove(worker)

    def _failed(self, student: str, detail: str, seconds: float, overran: bool = False) -> None:
        """Try again as submitted; then grade an overrunning one as the blank notebook with a note;
        report any other (the grader's) as not graded."""
        self.failures[student] = tries = self.failures.get(student, 0) + 1
        log(f"  {student} 第 {tries} 次评分失败（{seconds:.1f} 秒）：{detail}")
        if tries < TRIES:
            self.pending.appendleft(student)
        elif overran and tries == TRIES:
            self._grade_blank(student, detail, seconds)
        else:  # the grader's, or even the blank notebook overran
            self._not_graded(student, seconds, detail)

    def _grade_blank(self, student: str, detail: str, seconds: float) -> None:
        try:
            self.notes[student] = replace_with_released(submitted_notebook(self.coursedir, self.section, student),
                                                        released_notebook(self.coursedir, self.section),
                                                        f"整份评分{detail}")
        except Exception as err:  # the grader's: writing the submission failed
            self._not_graded(student, seconds, f"{type(err).__name__}: {err}", traceback.format_exc())
            return
        self.pending.appendleft(student)

    def _not_graded(self, student: str, seconds: float, detail: str, trace: str = "") -> None:
        if trace:
            log_traceback(student, trace)
        self._finish(Outcome(student, False, seconds, GRADER_FAULT.format(detail=detail)))

    def _finish(self, outcome: Outcome) -> None:
        self.outcomes[outcome.student] = outcome
        progress(len(self.outcomes), self.total, outcome)


def grade_section(app, section: str, students: list[str], jobs: int, overrides: Config | None = None,
                  make_grader: Callable[[Job], Grader] = nbgrader_grader) -> list[Outcome]:
    """Grade ``students`` with nbgrader's autograde ``app`` (as made by autograder/worker.py's
    ``course_app``, with ``overrides`` merged in, which the workers get too); ``make_grader`` is the
    seam where tests put a grader of their own into the workers."""
    return Grading(app, section, students, jobs, overrides or Config(), make_grader).run()


def students_of(coursedir, section: str) -> list[str]:
    """Every student with a folder for ``section`` in submitted/."""
    submitted = Path(coursedir.root) / coursedir.submitted_directory
    return sorted(p.name for p in submitted.glob("*") if submitted_notebook(coursedir, section, p.name).parent.is_dir())
