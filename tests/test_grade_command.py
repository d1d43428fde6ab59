"""Unit tests of autograder/grade.py that need no nbgrader run."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import resource
import shutil
import signal
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from autograder import grade
from autograder.config import configure

from .conftest import ROOT

SECTION = "01_qkv_and_scores"


def course_directory(root, **layout) -> CourseDirectory:
    """The course's nbgrader configuration rooted at ``root``, with ``layout`` overrides."""
    c = Config()
    configure(c, str(root))
    for name, value in layout.items():
        setattr(c.CourseDirectory, name, value)
    return CourseDirectory(config=c)


def released_text() -> str:
    return (ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8")


def make_course(tmp_path, submission_text: str | None, **layout):
    """A course with the released 01 notebook and alice's submission; (coursedir, submission path)."""
    coursedir = course_directory(tmp_path, **layout)
    shutil.copytree(ROOT / "notebooks" / SECTION, grade.released_notebook(coursedir, SECTION).parent)
    notebook = grade.submitted_notebook(coursedir, SECTION, "alice")
    notebook.parent.mkdir(parents=True)
    if submission_text is not None:
        notebook.write_text(submission_text, encoding="utf-8")
    return coursedir, notebook


def app_of(coursedir: CourseDirectory) -> SimpleNamespace:
    """What grade_section needs of nbgrader's autograde app."""
    return SimpleNamespace(coursedir=coursedir, config=Config())


class FakeWorker:
    """Stands in for a grading process: answers each student from a script."""
    script: list[dict] = []

    def __init__(self, app, section, limits, events):  # noqa: ARG002  (Worker's signature)
        self.events, self.student, self.since, self.killed_for = events, None, 0.0, ""

    def assign(self, student):
        self.student = student
        self.events.put((self, {"student": student, **FakeWorker.script.pop(0)}))

    def kill_if_overdue(self, wall_seconds):
        pass

    def close(self):
        pass


def test_a_passing_failure_is_retried_as_submitted(tmp_path, monkeypatch):
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released)
    FakeWorker.script = [{"ok": False, "detail": "sqlite3.OperationalError: database is locked"},
                         {"ok": True, "detail": ""}]
    monkeypatch.setattr(grade, "Worker", FakeWorker)
    [outcome] = grade.grade_section(app_of(coursedir), SECTION, ["alice"], grade.Limits(jobs=1))
    assert outcome.ok and outcome.note == "" and not FakeWorker.script
    assert not notebook.with_suffix(".ipynb.broken").exists()
    assert notebook.read_text(encoding="utf-8") == released


def test_a_lasting_failure_falls_back_to_the_blank_notebook_with_a_note(tmp_path, monkeypatch):
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released)
    failure = {"ok": False, "detail": "KeyError: 'grade_id'"}
    FakeWorker.script = [failure, failure, {"ok": True, "detail": ""}]
    monkeypatch.setattr(grade, "Worker", FakeWorker)
    [outcome] = grade.grade_section(app_of(coursedir), SECTION, ["alice"], grade.Limits(jobs=1))
    assert outcome.ok and "评分程序无法处理" in outcome.note and not FakeWorker.script
    assert notebook.with_suffix(".ipynb.broken").read_text(encoding="utf-8") == released
    note = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]
    assert note["cell_type"] == "markdown" and "KeyError" in note["source"]


def test_a_failure_of_the_blank_notebook_too_is_reported_not_retried_forever(tmp_path, monkeypatch):
    coursedir, _ = make_course(tmp_path, released_text())
    FakeWorker.script = [{"ok": False, "detail": f"boom {i}"} for i in range(3)]
    monkeypatch.setattr(grade, "Worker", FakeWorker)
    [outcome] = grade.grade_section(app_of(coursedir), SECTION, ["alice"], grade.Limits(jobs=1))
    assert not outcome.ok and outcome.note == "boom 2" and not FakeWorker.script


def test_failure_reason_names_the_cause_not_the_boilerplate():
    log = ("[AutogradeApp | ERROR] sqlite3.OperationalError: database is locked\n"
           "[AutogradeApp | ERROR] Please see the the above traceback for details on the specific errors")
    error = "Traceback ...\nnbgrader.converters.base.NbGraderException: Please see the above traceback"
    assert grade.failure_reason({"success": False, "error": error, "log": log}).endswith("database is locked")


def test_pasted_cell_ids_are_repaired_not_rejected(tmp_path):
    nb = json.loads((ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8"))
    nb["cells"].append(dict(nb["cells"][-1]))       # same id twice
    del nb["cells"][0]["id"]                        # and one missing
    coursedir, notebook = make_course(tmp_path, json.dumps(nb))
    assert grade.repair_unreadable(coursedir, SECTION, "alice") == ""
    ids = [c["id"] for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"]]
    assert len(ids) == len(set(ids)) == len(nb["cells"])


def test_unreadable_and_missing_files_are_replaced(tmp_path):
    coursedir, notebook = make_course(tmp_path, '{"cells": [')
    assert "JSONDecodeError" in grade.repair_unreadable(coursedir, SECTION, "alice")
    assert notebook.with_suffix(".ipynb.broken").exists()
    assert "无法被自动评分" in json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"]
    notebook.unlink()
    assert grade.repair_unreadable(coursedir, SECTION, "alice") == "文件不存在"
    assert notebook.exists()


def test_paths_come_from_the_course_directory_not_constants(tmp_path):
    """A course laid out otherwise (release in handouts/, submissions in inbox/): the fallback
    finds the released notebook there and the students are found there."""
    coursedir, notebook = make_course(tmp_path, "not json", release_directory="handouts",
                                      submitted_directory="inbox")
    assert notebook == tmp_path / "inbox" / "alice" / SECTION / f"{SECTION}.ipynb"
    assert grade.students_of(coursedir, SECTION) == ["alice"]
    assert "JSONDecodeError" in grade.repair_unreadable(coursedir, SECTION, "alice")
    released = (tmp_path / "handouts" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8")
    assert json.loads(notebook.read_text(encoding="utf-8"))["cells"][1:] == json.loads(released)["cells"]


def test_a_missing_release_is_named_before_anything_is_graded(tmp_path, monkeypatch, capsys):
    coursedir, _ = make_course(tmp_path, released_text())
    shutil.rmtree(grade.released_notebook(coursedir, SECTION).parent)
    monkeypatch.setattr(grade, "Worker", None)  # no worker may start
    monkeypatch.setattr(grade, "course_app", lambda: app_of(coursedir))
    assert grade.main([SECTION, "--jobs", "1"]) == 1
    assert f"nbgrader generate_assignment {SECTION}" in capsys.readouterr().err


def test_exit_status_is_1_when_a_submission_could_not_be_graded(tmp_path, monkeypatch, capsys):
    coursedir, _ = make_course(tmp_path, released_text())
    FakeWorker.script = [{"ok": False, "detail": f"boom {i}"} for i in range(3)]
    monkeypatch.setattr(grade, "Worker", FakeWorker)
    monkeypatch.setattr(grade, "course_app", lambda: app_of(coursedir))
    assert grade.main([SECTION, "--jobs", "1"]) == 1
    assert "未能批改 alice：boom 2" in capsys.readouterr().err


def open_descriptors() -> list[str]:
    """What this process's descriptors point to, in order (the listing's own one is gone by then)."""
    targets = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        with contextlib.suppress(FileNotFoundError):
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    return targets


def report_on_itself(app, section, limits, requests, answers):  # noqa: ARG001  (serve_students' signature)
    """A worker's ``serve`` that answers each request with what it is like."""
    for line in requests:
        answers.write("@@" + json.dumps({"student": line.strip(), "own_session": os.getsid(0) == os.getpid(),
                                         "memory": resource.getrlimit(resource.RLIMIT_AS)[0],
                                         "descriptors": open_descriptors(),
                                         "threads": os.environ.get("OMP_NUM_THREADS")}) + "\n")
        answers.flush()


def test_workers_are_forks_in_their_own_session_that_set_their_limits_themselves():
    """No preexec_fn: the fork sets its session, memory limit and environment itself, and holds
    none of our ends of the workers' pipes (so each sees the end of its own requests)."""
    events, workers, pipes, limits = queue.Queue(), [], [], grade.Limits(jobs=2, memory_mb=1234)
    for _ in range(2):
        before = set(grade.Worker.main_ends)
        workers.append(grade.Worker(None, SECTION, limits, events, serve=report_on_itself))
        pipes.append({f"pipe:[{os.fstat(fd).st_ino}]" for fd in grade.Worker.main_ends - before})
    for k, worker in enumerate(workers):
        worker.assign(f"student{k}")
    answers = {answer["student"]: answer for answer in (events.get(timeout=30)[1] for _ in workers)}
    first, second = workers
    first.stop()
    try:
        ended = events.get(timeout=30)
    except queue.Empty:
        ended = None
    second.close()  # the first ends by now in any case
    first.close()
    assert ended == (first, None), "closing its requests ends the first worker while the second still runs"
    for answer in answers.values():
        assert answer["own_session"] and answer["memory"] == 1234 * 1024 * 1024 and answer["threads"] == "1"
        assert answer["descriptors"][:3] == ["/dev/null"] * 3
    assert not pipes[0] & set(answers["student1"]["descriptors"]), "the second worker holds none of the first's pipes"
    assert pipes[1] & set(answers["student1"]["descriptors"]), "(its own, it does)"


def leave_temporary_files(app, section, limits, requests, answers):  # noqa: ARG001  (serve_students' signature)
    """A worker's ``serve`` that leaves a temporary folder (with one it cannot even list), then hangs."""
    for line in requests:
        folder = tempfile.mkdtemp()
        os.makedirs(os.path.join(folder, "locked", "inner"))
        os.chmod(os.path.join(folder, "locked"), 0)
        answers.write("@@" + json.dumps({"student": line.strip(), "folder": folder}) + "\n")
        answers.flush()
        time.sleep(600)


def test_a_worker_killed_for_overrunning_leaves_no_temporary_files():
    """Its kernels' copies of the submission folders live in the worker's own folder, removed by us."""
    events = queue.Queue()
    worker = grade.Worker(None, SECTION, grade.Limits(jobs=1), events, serve=leave_temporary_files)
    try:
        worker.assign("alice")
        folder = Path(events.get(timeout=30)[1]["folder"])
        worker.kill_if_overdue(0)
        assert events.get(timeout=30) == (worker, None), "killed"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.close()
    assert folder.is_relative_to(worker.scratch), "the kernels' temporary files are in the worker's folder"
    assert not Path(worker.scratch).exists()
