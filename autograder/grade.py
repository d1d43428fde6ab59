"""Grade every collected submission of a section, using every core, with limits.

    python -m autograder.grade 01_qkv_and_scores              # all students in submitted/
    python -m autograder.grade 01_qkv_and_scores --jobs 2 --students alice,bob
    python -m autograder.grade 01_qkv_and_scores --sequential  # plain `nbgrader autograde`, for comparison

``--jobs`` worker processes (default: one per core), forked from this one once it has imported
nbgrader and read the course's configuration, each run nbgrader's own autograde
(``NbGraderAPI.autograde``, the same converter and configuration as ``nbgrader autograde``)
for one student after another, so results are exactly nbgrader's while nbgrader's start-up is
paid once, not once per student. Each worker runs in its own session under a memory limit
(RLIMIT_AS, set by the worker itself and inherited by the kernels it starts); a submission that
runs past the wall-clock limit gets its worker (and kernel) killed and replaced. Kernels run
sealed in bubblewrap (autograder/sandbox.py), forked from a zygote that imported torch once per
worker (autograder/kernel_pool.py).

Nothing is lost: a submission nbgrader cannot read (invalid JSON, truncated, missing) or fails
on is kept as ``*.broken`` and replaced by the released notebook with a Chinese note on top,
so the student still gets a grade (0) and feedback that says why. Every path comes from
nbgrader's CourseDirectory (run from the course root, as nbgrader itself). The exit status is
1 when some submission could not be graded at all.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import nbformat

from nbgrader.coursedir import CourseDirectory

from . import kernel_pool, sandbox, zygote

SQLITE_BUSY_SECONDS = 120
TRIES_AS_SUBMITTED = 2  # a failure may be passing (a lock, a lost reply): try again before giving up
BROKEN_NOTE = ("> **评分说明**：你提交的 `{name}` 无法被自动评分（{why}）。"
               "评分时用空白的作业 notebook 代替了它，所以本次自动评分为 0 分。"
               "原文件已保留为 `{name}.broken`，请联系老师。")


@dataclass(frozen=True)
class Limits:
    jobs: int = os.cpu_count() or 1
    memory_mb: int = 6144            # per worker process and per kernel (RLIMIT_AS)
    wall_seconds: int = 900          # per submission
    cell_seconds: int | None = None  # per cell; None keeps autograder/config.py's value


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


def submitted_notebook(coursedir: CourseDirectory, section: str, student: str) -> Path:
    return Path(coursedir.format_path(coursedir.submitted_directory, student, section)) / f"{section}.ipynb"


def released_notebook(coursedir: CourseDirectory, section: str) -> Path:
    return Path(coursedir.format_path(coursedir.release_directory, ".", section)) / f"{section}.ipynb"


def repair_unreadable(coursedir: CourseDirectory, section: str, student: str) -> str:
    """Make the submission gradable; return what was wrong with it ("" when nothing was).

    Duplicate or missing cell ids (a pasted cell) are repaired in place; a file that is no
    notebook at all (invalid JSON, truncated, missing) is replaced by the released notebook.
    """
    notebook = submitted_notebook(coursedir, section, student)
    why = "文件不存在" if not notebook.exists() else _normalize_in_place(notebook)
    return replace_with_released(coursedir, section, student, why) if why else ""


def replace_with_released(coursedir: CourseDirectory, section: str, student: str, why: str) -> str:
    """Keep the submission as ``*.broken``; grade the released notebook with a note on top."""
    notebook = submitted_notebook(coursedir, section, student)
    if notebook.exists():
        shutil.move(notebook, notebook.with_suffix(".ipynb.broken"))
    released = json.loads(released_notebook(coursedir, section).read_text(encoding="utf-8"))
    note = dict(nbformat.v4.new_markdown_cell(BROKEN_NOTE.format(name=notebook.name, why=why)))
    note["id"] = "grading-note"
    released["cells"].insert(0, note)
    notebook.write_text(json.dumps(released, ensure_ascii=False), encoding="utf-8")
    return why


def _normalize_in_place(notebook: Path) -> str:
    """Repair cell ids in place; return why the file is not a valid notebook ("" if it is)."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
        changes, repaired = nbformat.validator.normalize(nb)
        nbformat.validate(repaired)
    except Exception as err:  # invalid JSON, truncated file, not a notebook …
        return f"不是有效的 notebook：{type(err).__name__}"
    if changes:
        notebook.write_text(json.dumps(repaired, ensure_ascii=False), encoding="utf-8")
    return ""


def progress(done: int, total: int, outcome: Outcome) -> None:
    width = 30
    filled = width * done // total
    mark = "✓" if outcome.ok else "✗"
    extra = f"  {outcome.note}" if outcome.note else ""
    print(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {mark} {outcome.student} "
          f"({outcome.seconds:.1f} s){extra}", file=sys.stderr, flush=True)


# --- the worker process ----------------------------------------------------------------------

def serve_students(app, section: str, limits: Limits, requests, answers) -> None:
    """In a worker: grade the students named on ``requests`` (one per line); answer one
    ``@@{json}`` line each on ``answers``."""
    from nbgrader.apps import NbGraderAPI

    os.chdir(app.coursedir.root)
    config = copy.deepcopy(app.config)
    if limits.cell_seconds:
        config.Execute.timeout = limits.cell_seconds
    db_url = app.coursedir.db_url
    if db_url.startswith("sqlite:") and "?" not in db_url:
        # Workers write to one SQLite file at once: wait for a lock instead of failing at once.
        config.CourseDirectory.db_url = db_url + f"?timeout={SQLITE_BUSY_SECONDS}"
    api = NbGraderAPI(config=config)
    for line in requests:
        student = line.strip()
        result = api.autograde(section, student, force=True, create=True)
        answers.write("@@" + json.dumps({"student": student, "ok": bool(result["success"]),
                                         "detail": failure_reason(result)}) + "\n")
        answers.flush()


def failure_reason(result: dict) -> str:
    """The line of nbgrader's error or log that names what went wrong."""
    lines = [ln.strip() for ln in ((result.get("error") or "") + "\n" + (result.get("log") or "")).splitlines()]
    causes = [ln for ln in lines if ("Error" in ln or "Exception" in ln) and "Please see" not in ln]
    return causes[-1] if causes else next((ln for ln in reversed(lines) if ln), "")


class Worker:
    """A grading process, fed one student at a time; its answers arrive on ``events``.

    It is a fork of this process, which has imported nbgrader and read the course's configuration
    already (about 1 s that each worker would otherwise spend again), in a session of its own, so a
    kill reaches nothing else; its kernels die with it (bwrap --die-with-parent). It closes our
    ends of every worker's pipes (so each worker sees the end of its own requests) and puts its
    standard streams on /dev/null: the kernels' raw output never mixes with the answers. Its
    temporary files (a copy of each submission folder its kernels work in) go to a folder of its own
    that :meth:`close` removes, also when the worker was killed before it could tidy up.
    """

    main_ends: set[int] = set()   # this process's ends of the pipes of every worker alive

    def __init__(self, app, section: str, limits: Limits, events: queue.Queue, serve=serve_students):
        (requests_r, requests_w), (answers_r, answers_w) = os.pipe(), os.pipe()
        self.scratch = tempfile.mkdtemp(prefix="grading-worker-")
        self.pid = os.fork()
        if self.pid == 0:
            for fd in (*Worker.main_ends, requests_w, answers_r):
                with contextlib.suppress(OSError):  # a reader thread may have just closed its end
                    os.close(fd)
            self._become_worker(requests_r, answers_w, lambda requests, answers:
                                serve(app, section, limits, requests, answers), child_env(limits.jobs),
                                limits.memory_mb, self.scratch)
        os.close(requests_r)
        os.close(answers_w)
        Worker.main_ends |= {requests_w, answers_r}
        self.requests = os.fdopen(requests_w, "w")
        self.student: str | None = None
        self.since = 0.0
        self.killed_for = ""
        threading.Thread(target=self._read, args=(os.fdopen(answers_r), events), daemon=True).start()

    @staticmethod
    def _become_worker(requests_fd: int, answers_fd: int, serve, env: dict[str, str], memory_mb: int,
                       scratch: str) -> None:
        status = 1
        try:
            os.setsid()
            limit_memory(memory_mb)
            tempfile.tempdir = scratch
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # nbgrader's log and the kernels' raw output go nowhere, as before
                os.dup2(devnull, fd)
            os.environ.clear()
            os.environ.update(env)
            with os.fdopen(requests_fd, "r") as requests, os.fdopen(answers_fd, "w") as answers:
                serve(requests, answers)
            status = 0
        finally:
            kernel_pool.POOL.close()
            os._exit(status)

    def _read(self, answers, events: queue.Queue) -> None:
        with answers:
            for line in answers:
                if line.startswith("@@"):
                    events.put((self, json.loads(line[2:])))
            Worker.main_ends.discard(answers.fileno())
        events.put((self, None))  # the process ended

    def assign(self, student: str) -> None:
        self.student, self.since = student, time.perf_counter()
        self.requests.write(student + "\n")
        self.requests.flush()

    def kill_if_overdue(self, wall_seconds: int) -> None:
        if self.student and not self.killed_for and time.perf_counter() - self.since > wall_seconds:
            self.killed_for = f"超过 {wall_seconds} 秒，已终止"
            os.killpg(self.pid, signal.SIGKILL)

    def stop(self) -> None:
        """No more students: the worker ends once it has answered the last one."""
        if not self.requests.closed:
            Worker.main_ends.discard(self.requests.fileno())
            self.requests.close()

    def close(self) -> None:
        self.stop()
        os.waitpid(self.pid, 0)
        try:
            zygote.remove(self.scratch)
        except OSError as err:
            print(f"  未能删除评分进程的临时文件夹 {self.scratch}：{err}", file=sys.stderr, flush=True)


# --- the scheduler ----------------------------------------------------------------------------

class Grading:
    """Hand students to workers; a failure is retried, then graded as the blank notebook."""

    def __init__(self, app, section: str, students: list[str], limits: Limits):
        self.app, self.coursedir, self.section, self.limits = app, app.coursedir, section, limits
        self.notes = {s: repair_unreadable(self.coursedir, section, s) for s in students}
        self.pending = deque(students)
        self.failures: dict[str, int] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.total = len(students)
        self.events: queue.Queue = queue.Queue()
        self.workers = [self._spawn() for _ in range(min(limits.jobs, len(students)))]

    def _spawn(self) -> Worker:
        return Worker(self.app, self.section, self.limits, self.events)

    def run(self) -> list[Outcome]:
        while len(self.outcomes) < self.total:
            for worker in self.workers:
                if worker.student is None and self.pending:
                    worker.assign(self.pending.popleft())
            try:
                worker, answer = self.events.get(timeout=1)
            except queue.Empty:
                for worker in self.workers:
                    worker.kill_if_overdue(self.limits.wall_seconds)
                continue
            self._handle(worker, answer)
        for worker in self.workers:
            worker.close()
        return sorted(self.outcomes.values(), key=lambda o: o.student)

    def _handle(self, worker: Worker, answer: dict | None) -> None:
        student, seconds = worker.student, time.perf_counter() - worker.since
        if answer is None:  # the worker died (killed when overdue, or crashed): replace it
            worker.close()
            self.workers[self.workers.index(worker)] = self._spawn()
            if student is not None:
                self._failed(student, worker.killed_for or "评分进程意外退出", seconds)
            return
        worker.student = None
        if answer["ok"]:
            self._finish(Outcome(student, True, seconds, self.notes[student]))
        else:
            self._failed(student, answer["detail"], seconds)

    def _failed(self, student: str, detail: str, seconds: float) -> None:
        """Try again as submitted; then grade the blank notebook with a note; then report."""
        self.failures[student] = self.failures.get(student, 0) + 1
        print(f"  {student} 第 {self.failures[student]} 次评分失败：{detail}", file=sys.stderr, flush=True)
        if self.failures[student] > TRIES_AS_SUBMITTED:
            self._finish(Outcome(student, False, seconds, detail))
            return
        if self.failures[student] == TRIES_AS_SUBMITTED:
            self.notes[student] = replace_with_released(self.coursedir, self.section, student,
                                                        f"评分程序无法处理它：{detail}")
        self.pending.appendleft(student)

    def _finish(self, outcome: Outcome) -> None:
        self.outcomes[outcome.student] = outcome
        progress(len(self.outcomes), self.total, outcome)


def grade_section(app, section: str, students: list[str], limits: Limits) -> list[Outcome]:
    """Grade ``students`` with nbgrader's autograde ``app`` (as made by :func:`course_app`)."""
    return Grading(app, section, students, limits).run()


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
