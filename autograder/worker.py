"""A grading worker of ``python -m autograder.grade``: one process that grades one student after
another with nbgrader's own autograde (``NbGraderAPI.autograde``: the same converter and
configuration as ``nbgrader autograde``), so nbgrader's start-up is paid once per worker.

It is forked from a forkserver (:func:`start_forkserver`, first thing the command does), which
imported nbgrader already; it reads the course's configuration itself (nbgrader_config.py may hold what cannot be
sent to another process, such as a lambda) with the command's overrides on top (:class:`Job`). It
puts itself in a session of its own (a kill reaches it and its kernels, nothing else), under the
memory limit (RLIMIT_AS, inherited by the kernels it starts), and answers each student on its
connection. Its standard error is the grading command's: nbgrader's warnings and errors go to the
grading log, each line marked with the student being graded. Its kernels' raw output goes nowhere
(autograder/provisioner.py). Its temporary files (a copy of each submission folder its kernels work
in) go to a folder of its own, which the scheduler removes.
"""
from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import zygote_pool

Grader = Callable[[str], dict]  # student -> nbgrader's autograde result (success, error, log)
# Workers are forked from a server that imported these once (no fork of the scheduler, its threads and
# pipes). Only what a worker needs before it is ready: the server imports them while the scheduler imports
# nbgrader too; preloading what the first submission imports (nbclient, sqlalchemy …) made the workers
# start later than each importing it on its own core (measured: 0.3-0.6 s per run). The last one lets the
# server end without a teardown (autograder/forkserver_exit.py).
CONTEXT = multiprocessing.get_context("forkserver")
FORKSERVER_IMPORTS = ["autograder.worker", "nbgrader.apps.autogradeapp", "autograder.judge",
                      "autograder.forkserver_exit"]


@dataclass(frozen=True)
class Job:
    """What a worker needs to know besides the course's configuration, which it reads itself."""
    section: str
    root: str
    overrides: object  # traitlets Config laid over the course's configuration (which may hold lambdas)
    memory_mb: int     # c.GradingLimits.memory_mb, for the worker itself
    env: dict[str, str]


def start_forkserver() -> None:
    """Start the process workers are forked from; it imports nbgrader meanwhile (idempotent)."""
    CONTEXT.set_forkserver_preload(FORKSERVER_IMPORTS)
    multiprocessing.forkserver.ensure_running()


def child_env(jobs: int) -> dict[str, str]:
    """nbgrader needs its own scripts (alembic) on PATH; parallel kernels get one thread each."""
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if jobs > 1:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def course_app():
    """nbgrader's autograde app, configured exactly like the ``nbgrader autograde`` command; its log
    writes warnings and errors to standard error."""
    from nbgrader.apps.autogradeapp import AutogradeApp

    app = AutogradeApp()
    app.initialize(["--log-level=WARN"])  # reads nbgrader_config.py like the CLI
    return app


def nbgrader_grader(job: Job) -> Grader:
    """In a worker: nbgrader's autograde, configured once like the CLI, for one student at a time."""
    from nbgrader.apps import NbGraderAPI

    from .exchange import Unlisted

    app = course_app()
    config = app.config
    config.merge(job.overrides)
    config.ExchangeFactory.list = Unlisted
    api = NbGraderAPI(config=config, log=app.log)

    def grade_one(student: str) -> dict:
        for handler in app.log.handlers:
            handler.setFormatter(logging.Formatter(f"  [{student}] %(levelname)s %(message)s"))
        return api.autograde(job.section, student, force=True, create=True)
    return grade_one


def limit_memory(megabytes: int) -> None:
    """Cap this process and the kernels it starts (called by the worker itself)."""
    limit = megabytes * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):  # e.g. macOS refuses RLIMIT_AS: grade without the cap
        pass


def work(conn, make_grader: Callable[[Job], Grader], job: Job, scratch: str) -> None:
    """A worker's life (module docstring): grade each student that arrives on ``conn`` and answer on
    it, until None."""
    os.setsid()
    limit_memory(job.memory_mb)
    tempfile.tempdir = scratch
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)   # what it prints goes to the grading log, too
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
    except EOFError:  # the scheduler is gone
        pass
    finally:
        zygote_pool.POOL.close()


def answer(student: str, grade_one: Grader) -> dict:
    """What became of ``student``: graded (``ok``), a failure nbgrader reported (its exporter has tried
    again already, autograder/submission.py), or an exception in this worker (``crashed``)."""
    try:
        result = grade_one(student)
    except Exception as err:  # ours, not the student's: a MemoryError of the worker, a bug …
        return crash_answer(student, err)
    ok = bool(result["success"])
    return {"student": student, "ok": ok, "crashed": False, "detail": "" if ok else failure_reason(result),
            "traceback": "" if ok else result.get("error") or ""}


def crash_answer(student: str | None, err: Exception) -> dict:
    return {"student": student, "ok": False, "crashed": True, "detail": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc()}


def failure_reason(result: dict) -> str:
    """The line of nbgrader's error or log that names what went wrong."""
    lines = [ln.strip() for ln in ((result.get("error") or "") + "\n" + (result.get("log") or "")).splitlines()]
    causes = [ln for ln in lines if ("Error" in ln or "Exception" in ln) and "Please see" not in ln]
    return causes[-1] if causes else next((ln for ln in reversed(lines) if ln), "")
