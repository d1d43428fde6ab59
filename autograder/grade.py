"""Grade every collected submission of a section, using every core, with limits.

    python -m autograder.grade 01_qkv_and_scores              # all students in submitted/
    python -m autograder.grade 01_qkv_and_scores --jobs 2 --students alice,bob
    python -m autograder.grade 01_qkv_and_scores --sequential  # plain `nbgrader autograde`, for comparison

``--jobs`` worker processes (default: one per core) each run nbgrader's own autograde
(``NbGraderAPI.autograde``, the same converter and configuration as ``nbgrader autograde``) for one
student after another, so results are exactly nbgrader's while nbgrader's start-up is paid once per
worker, not once per student. Workers come from multiprocessing's forkserver, started first thing:
it imports nbgrader (``set_forkserver_preload``) while this process imports it and reads the course's
configuration, and it holds none of this process's descriptors. Each worker reads the course's
configuration itself, as ``nbgrader autograde`` does (nbgrader_config.py may hold what cannot be sent
to another process, such as a lambda), with our few overrides on top (:class:`Job`); nbgrader is
already imported by then, so that costs little. A worker is sent one student at a time over
a Pipe and answers on it. The main loop waits on the workers' connections and process sentinels, and
on every turn kills a worker whose student has run past the wall-clock limit (its whole session: the
worker runs in a session of its own, so its kernels die with it) and starts a new one. The limit
counts from when the worker said it was ready (a new worker's start-up is not the student's time)
or, before that, from the assignment. Each worker runs under a memory limit (RLIMIT_AS, set by the
worker itself and inherited by the kernels it starts). Kernels run sealed in bubblewrap
(autograder/sandbox.py), forked from a zygote that imported torch once per worker
(autograder/kernel_pool.py).

Whose fault a failure is decides what happens:

* The student's file (missing, not UTF-8, not JSON, not a notebook) is found before grading: it is
  kept byte for byte as ``<name>.broken`` beside it (``<name>.broken.1`` … if that exists) and the
  released notebook, with a Chinese note on top that says why and where the original is, is graded
  instead: 0 points and feedback that explains. Duplicate or missing cell ids are repaired in place,
  after keeping the original the same way; the log line says where. A file grading wrote itself is
  marked (notebook metadata ``autograder_original``) and never kept again.
* The student's code running past ``--timeout``: the worker is killed; the submission is tried once
  more as submitted, then graded as the released notebook with the note.
* Everything else is the grader's: an OSError (a ``PermissionError``…) on the submission, nbgrader
  reporting a failure (a database error…), an exception in a worker (a ``MemoryError`` of the worker,
  a bug of ours) or a worker that dies. The student is tried once more as submitted (a lock passes;
  a failure while preparing the file is not retried), then reported as not graded:
  ``未能批改 <学生>：评分端出错…`` in the summary and exit status 1; the submission is left as it is
  and no score is written for it by us (the gradebook keeps what it had). The traceback of an
  exception in a worker, or nbgrader's own, is printed in the log (stderr) under the student's name.

Every path comes from nbgrader's CourseDirectory (run from the course root, as nbgrader itself).
"""
from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
from traitlets.config import Config

from . import kernel_pool, sandbox, zygote

if TYPE_CHECKING:  # nbgrader is imported by course_app, once the forkserver imports it too
    from nbgrader.coursedir import CourseDirectory

SQLITE_BUSY_SECONDS = 120
TRIES_AS_SUBMITTED = 2  # a failure may be passing (a lock, a lost reply): try again before giving up
ORIGINAL_KEY = "autograder_original"  # notebook metadata of a file grading wrote: where the student's file is
BROKEN_NOTE = ("> **评分说明**：你提交的 `{name}` 无法被自动评分（{why}）。"
               "评分时用空白的作业 notebook 代替了它，所以本次自动评分为 0 分。")
KEPT_NOTE = "原文件已原样保留为 `{kept}`，请联系老师。"
GRADER_FAULT = "评分端出错，未记分（不是学生的问题，请检查后重新评分）：{detail}"
# What the student's file can make json and nbformat raise (a JSON list has no .get …); an OSError is ours.
NOT_A_NOTEBOOK = (ValueError, TypeError, AttributeError, KeyError, nbformat.ValidationError)
# Workers are forked from a server that imported these once (no fork of this process, its threads and pipes).
# Only what a worker needs before it is ready: the server imports them while this process imports nbgrader
# too; preloading what the first submission imports (nbclient, sqlalchemy …) made the workers start later
# than each importing it on its own core (measured: 0.3-0.6 s per run).
CONTEXT = multiprocessing.get_context("forkserver")
PRELOAD = ["autograder.grade", "nbgrader.apps.autogradeapp"]


@dataclass(frozen=True)
class Limits:
    jobs: int = os.cpu_count() or 1
    memory_mb: int = 6144            # per worker process and per kernel (RLIMIT_AS)
    wall_seconds: int = 900          # per submission
    cell_seconds: int | None = None  # per cell; None keeps autograder/config.py's value


@dataclass(frozen=True)
class Job:
    """What a worker needs to know besides the course's configuration, which it reads itself."""
    section: str
    root: str
    overrides: object  # traitlets Config laid over the course's configuration (which may hold lambdas)
    limits: Limits
    env: dict[str, str]


@dataclass
class Outcome:
    student: str
    ok: bool
    seconds: float
    note: str = ""


def nbgrader_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"]


def child_env(jobs: int) -> dict[str, str]:
    """nbgrader needs its own scripts (alembic) on PATH; parallel kernels get one thread each."""
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if jobs > 1:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def limit_memory(megabytes: int) -> None:
    """Cap this process and the kernels it starts (called by the worker itself)."""
    limit = megabytes * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):  # e.g. macOS refuses RLIMIT_AS: grade without the cap
        pass


def course_app():
    """nbgrader's autograde app, configured exactly like the ``nbgrader autograde`` command."""
    from nbgrader.apps.autogradeapp import AutogradeApp

    app = AutogradeApp()
    app.initialize(["--log-level=WARN"])  # reads nbgrader_config.py like the CLI
    return app


def warn_if_unsealed(config) -> None:
    """Say so when the course asks for sandboxed kernels and this machine cannot give them."""
    reason = sandbox.unavailable_reason()
    if config.ResilientExecute.get("sandbox", True) and reason:
        print(sandbox.FALLBACK_WARNING % reason, file=sys.stderr)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def submitted_notebook(coursedir: CourseDirectory, section: str, student: str) -> Path:
    return Path(coursedir.format_path(coursedir.submitted_directory, student, section)) / f"{section}.ipynb"


def released_notebook(coursedir: CourseDirectory, section: str) -> Path:
    return Path(coursedir.format_path(coursedir.release_directory, ".", section)) / f"{section}.ipynb"


# --- the student's file ---------------------------------------------------------------------

def repair_unreadable(coursedir: CourseDirectory, section: str, student: str) -> str:
    """Make the submission gradable; return the log's note on what was done ("" when nothing was).

    Duplicate or missing cell ids (a pasted cell) are repaired in place; a file that is no notebook
    at all (invalid JSON, truncated, missing) is replaced by the released notebook. Either way the
    original is kept first (:func:`keep_original`). An OSError (the grader cannot read or write the
    file) is raised: it is not the student's doing.
    """
    notebook = submitted_notebook(coursedir, section, student)
    why, repaired = notebook_problem(notebook)
    if why:
        return replace_with_released(coursedir, section, student, why)
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


def replace_with_released(coursedir: CourseDirectory, section: str, student: str, why: str) -> str:
    """Keep the submission (:func:`keep_original`); put the released notebook with a note on top
    in its place. Return the log's note."""
    notebook = submitted_notebook(coursedir, section, student)
    kept = keep_original(notebook) if notebook.exists() else ""
    released = json.loads(released_notebook(coursedir, section).read_text(encoding="utf-8"))
    text = BROKEN_NOTE.format(name=notebook.name, why=why) + (KEPT_NOTE.format(kept=kept) if kept else "请联系老师。")
    note = dict(nbformat.v4.new_markdown_cell(text))
    note["id"] = "grading-note"
    released["cells"].insert(0, note)
    write_repaired(notebook, released, kept)
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


def progress(done: int, total: int, outcome: Outcome) -> None:
    width = 30
    filled = width * done // total
    mark = "✓" if outcome.ok else "✗"
    extra = f"  {outcome.note}" if outcome.note else ""
    log(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {mark} {outcome.student} "
        f"({outcome.seconds:.1f} s){extra}")


# --- the worker process ----------------------------------------------------------------------

Grader = Callable[[str], dict]  # student -> nbgrader's autograde result (success, error, log)


def nbgrader_grader(job: Job) -> Grader:
    """In a worker: nbgrader's autograde, configured once like the CLI, for one student at a time."""
    from nbgrader.apps import NbGraderAPI

    config = course_app().config
    config.merge(job.overrides)
    api = NbGraderAPI(config=config)
    return lambda student: api.autograde(job.section, student, force=True, create=True)


def work(conn, make_grader: Callable[[Job], Grader], job: Job, scratch: str) -> None:
    """A worker's life: grade each student that arrives on ``conn`` and answer on it, until None.

    It puts itself in a session of its own (a kill reaches its kernels and nothing else) under the
    memory limit; its standard streams go to /dev/null (the kernels' raw output never reaches the
    log) and what went wrong goes back on ``conn``. Its temporary files (a copy of each submission
    folder its kernels work in) go to ``scratch``, which the main process removes.
    """
    os.setsid()
    limit_memory(job.limits.memory_mb)
    tempfile.tempdir = scratch
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.environ.clear()
    os.environ.update(job.env)
    os.chdir(job.root)
    try:
        try:
            grade_one = make_grader(job)
        except Exception as err:
            conn.send(crash_answer(None, err))
            return
        conn.send({"ready": True})
        while (student := conn.recv()) is not None:
            conn.send(answer(student, grade_one))
    except EOFError:  # the main process is gone
        pass
    finally:
        kernel_pool.POOL.close()


def answer(student: str, grade_one: Grader) -> dict:
    try:
        result = grade_one(student)
    except Exception as err:  # ours, not the student's: a MemoryError of the worker, a bug …
        return crash_answer(student, err)
    ok = bool(result["success"])
    return {"student": student, "ok": ok, "detail": "" if ok else failure_reason(result),
            "traceback": "" if ok else result.get("error") or ""}


def crash_answer(student: str | None, err: Exception) -> dict:
    return {"student": student, "ok": False, "detail": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc()}


def failure_reason(result: dict) -> str:
    """The line of nbgrader's error or log that names what went wrong."""
    lines = [ln.strip() for ln in ((result.get("error") or "") + "\n" + (result.get("log") or "")).splitlines()]
    causes = [ln for ln in lines if ("Error" in ln or "Exception" in ln) and "Please see" not in ln]
    return causes[-1] if causes else next((ln for ln in reversed(lines) if ln), "")


def start_forkserver() -> None:
    """Start the process workers are forked from; it imports nbgrader meanwhile (idempotent)."""
    CONTEXT.set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()


class Worker:
    """A grading process (:func:`work`), fed one student at a time over ``conn``."""

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


# --- the scheduler ----------------------------------------------------------------------------

def worker_job(app, section: str, limits: Limits) -> Job:
    """What the workers change in the course's configuration: the cell limit, SQLite waiting for a lock."""
    overrides = Config()
    if limits.cell_seconds:
        overrides.Execute.timeout = limits.cell_seconds
    db_url = app.coursedir.db_url
    if db_url.startswith("sqlite:") and "?" not in db_url:
        # Workers write to one SQLite file at once: wait for a lock instead of failing at once.
        db_url += f"?timeout={SQLITE_BUSY_SECONDS}"
    overrides.CourseDirectory.db_url = db_url
    return Job(section, str(app.coursedir.root), overrides, limits, child_env(limits.jobs))


class Grading:
    """Hand students to workers; a failure is retried, then handled by whose fault it is (module docstring)."""

    def __init__(self, app, section: str, students: list[str], limits: Limits,
                 make_grader: Callable[[Job], Grader] = nbgrader_grader):
        self.coursedir, self.section, self.limits = app.coursedir, section, limits
        self.job, self.make_grader = worker_job(app, section, limits), make_grader
        self.notes: dict[str, str] = {}
        self.failures: dict[str, int] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.total = len(students)
        self.pending = deque(s for s in students if self._prepared(s))
        self.workers: list[Worker] = []

    def _prepared(self, student: str) -> bool:
        try:
            self.notes[student] = repair_unreadable(self.coursedir, self.section, student)
        except Exception as err:  # the grader's: reading or writing the submission failed
            self._not_graded(student, 0.0, f"{type(err).__name__}: {err}", traceback.format_exc())
            return False
        return True

    def run(self) -> list[Outcome]:
        if self.pending:
            start_forkserver()
        self.workers = [Worker(self.job, self.make_grader) for _ in range(min(self.limits.jobs, len(self.pending)))]
        try:
            while len(self.outcomes) < self.total:
                for worker in self.workers:
                    if worker.student is None and self.pending:
                        worker.assign(self.pending.popleft())
                for worker in self._ready():
                    self._handle(worker)
                for worker in self.workers:
                    worker.kill_if_overdue(self.limits.wall_seconds)
        finally:
            for worker in self.workers:
                worker.close()
        return sorted(self.outcomes.values(), key=lambda o: o.student)

    def _ready(self) -> list[Worker]:
        """The workers that answered or ended, waiting at most until the first busy one is overdue."""
        left = [self.limits.wall_seconds - w.seconds() for w in self.workers if w.student and not w.killed_for]
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
            self._finish(Outcome(student, True, seconds, self.notes[student]))
        else:
            self._failed(student, message["detail"], seconds)

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
        if tries < TRIES_AS_SUBMITTED:
            self.pending.appendleft(student)
        elif overran and tries == TRIES_AS_SUBMITTED:
            self._grade_blank(student, detail, seconds)
        else:  # the grader's, or even the blank notebook overran
            self._not_graded(student, seconds, detail)

    def _grade_blank(self, student: str, detail: str, seconds: float) -> None:
        try:
            self.notes[student] = replace_with_released(self.coursedir, self.section, student,
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


def log_traceback(whose: str, trace: str) -> None:
    log(f"  {whose} 的评分出错，traceback：\n" + textwrap.indent(trace.rstrip(), "    | "))


def grade_section(app, section: str, students: list[str], limits: Limits,
                  make_grader: Callable[[Job], Grader] = nbgrader_grader) -> list[Outcome]:
    """Grade ``students`` with nbgrader's autograde ``app`` (as made by :func:`course_app`);
    ``make_grader`` is the seam where tests put a grader of their own into the workers."""
    return Grading(app, section, students, limits, make_grader).run()


def students_of(coursedir: CourseDirectory, section: str) -> list[str]:
    submitted = Path(coursedir.root) / coursedir.submitted_directory
    return sorted(p.name for p in submitted.glob("*") if submitted_notebook(coursedir, section, p.name).parent.is_dir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="并行批改一节作业的全部提交（nbgrader autograde）。")
    parser.add_argument("section")
    parser.add_argument("--students", help="逗号分隔的学生 id；默认 submitted/ 下的全部学生")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="同时批改的份数（默认：CPU 核数）")
    parser.add_argument("--memory-mb", type=int, default=6144, help="每份提交（含其内核）的内存上限")
    parser.add_argument("--timeout", type=int, default=900, help="每份提交的总时间上限（秒）")
    parser.add_argument("--cell-timeout", type=int, help="每个单元格的时间上限（秒，默认见 autograder/config.py）")
    parser.add_argument("--sequential", action="store_true", help="用一个 nbgrader 进程依次批改（对照用）")
    args = parser.parse_args(argv)
    if not args.sequential:
        start_forkserver()  # it imports nbgrader while this process reads the configuration
    app = course_app()
    warn_if_unsealed(app.config)
    coursedir = app.coursedir
    released = released_notebook(coursedir, args.section)
    if not released.exists():  # it stands in for unreadable submissions, and the integrity scan reads it
        print(f"找不到 {args.section} 的发布版 notebook（{released}）：先运行 "
              f"nbgrader generate_assignment {args.section}。", file=sys.stderr)
        return 1
    students = args.students.split(",") if args.students else students_of(coursedir, args.section)
    if not students:
        print(f"{coursedir.submitted_directory}/ 里没有 {args.section} 的提交。", file=sys.stderr)
        return 1
    start = time.perf_counter()
    if args.sequential:
        status = subprocess.run(nbgrader_cmd("autograde", args.section, "--force"), cwd=coursedir.root,
                                env=child_env(1), check=False).returncode
    else:
        limits = Limits(args.jobs, args.memory_mb, args.timeout, args.cell_timeout)
        failed = [o for o in grade_section(app, args.section, students, limits) if not o.ok]
        for o in failed:
            print(f"未能批改 {o.student}：{o.note}", file=sys.stderr)
        status = 1 if failed else 0
    elapsed = time.perf_counter() - start
    print(f"{len(students)} 份提交，用时 {elapsed:.1f} 秒（{60 * len(students) / elapsed:.1f} 份/分钟）"
          + (f"；有提交未能批改，退出状态 {status}" if status else ""), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
