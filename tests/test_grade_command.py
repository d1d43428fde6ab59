"""Tests of ``python -m autograder.grade`` (autograder/grade.py, scheduler.py, worker.py) and of the
student's file (autograder/submission.py). The workers are real (forkserver) processes; most run a
scripted grader (``scripted_grader``) in place of nbgrader, through grade_section's ``make_grader``
seam. The repair and the retry of nbgrader's exporter are also proven through both entry points."""
from __future__ import annotations

import builtins
import contextlib
import copy
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path
from types import SimpleNamespace

import pytest
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from autograder import grade, scheduler, submission
from autograder.config import configure
from autograder.worker import Job, failure_reason, start_forkserver

from .busy_machine import cell_timeouts
from .conftest import ROOT
from .nbgrader_course import Course
from .test_bad_submissions import ALL_ZERO, FULL, good

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


def make_course(tmp_path, submission_text: str | None, students=("alice",), **layout):
    """A course with the released 01 notebook and each student's submission; (coursedir, alice's path)."""
    coursedir = course_directory(tmp_path, **layout)
    shutil.copytree(ROOT / "notebooks" / SECTION, submission.released_notebook(coursedir, SECTION).parent)
    for student in students:
        notebook = submission.submitted_notebook(coursedir, SECTION, student)
        notebook.parent.mkdir(parents=True)
        if submission_text is not None:
            notebook.write_text(submission_text, encoding="utf-8")
    return coursedir, submission.submitted_notebook(coursedir, SECTION, students[0])


def app_of(coursedir: CourseDirectory) -> SimpleNamespace:
    """What grade_section needs of nbgrader's autograde app."""
    return SimpleNamespace(coursedir=coursedir, config=coursedir.config)


# --- a scripted grader, run in the workers ------------------------------------------------------

def script(coursedir: CourseDirectory, **steps: list[dict]) -> None:
    """What the scripted grader does for each try of each student (default: succeed at once)."""
    folder = Path(coursedir.root) / "script"
    folder.mkdir(exist_ok=True)
    for student, actions in steps.items():
        (folder / f"{student}.json").write_text(json.dumps(actions), encoding="utf-8")


def script_left(coursedir: CourseDirectory, student: str) -> list[dict]:
    return json.loads((Path(coursedir.root) / "script" / f"{student}.json").read_text(encoding="utf-8"))


def scripted_grader(job):
    """A worker's grader that follows the script: {"ok": …, "error": …}, {"raise": "Name"},
    {"hang": True} or {"sleep": seconds}, one step per try."""
    def grade_one(student):
        steps = Path(job.root) / "script" / f"{student}.json"
        actions = json.loads(steps.read_text(encoding="utf-8")) if steps.exists() else [{"ok": True}]
        action = actions.pop(0) if actions else {"ok": True}
        if steps.exists():
            steps.write_text(json.dumps(actions), encoding="utf-8")
        return act(action)
    return grade_one


def act(action: dict) -> dict:
    if "raise" in action:
        raise getattr(builtins, action["raise"])("injected by the test")
    while action.get("hang"):
        time.sleep(0.1)
    time.sleep(action.get("sleep", 0))
    return {"success": action.get("ok", True), "error": action.get("error", ""), "log": ""}


def graded(coursedir, students=("alice",), jobs: int = 1, **limits) -> list[scheduler.Outcome]:
    """``students`` graded by the scripted grader, under ``limits`` (c.GradingLimits)."""
    coursedir.config.GradingLimits.update(limits)
    return scheduler.grade_section(app_of(coursedir), SECTION, list(students), jobs, make_grader=scripted_grader)


# --- retries and whose fault a failure is ---------------------------------------------------------

def test_a_passing_failure_of_a_worker_is_retried_as_submitted(tmp_path):
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released)
    script(coursedir, alice=[{"raise": "ConnectionResetError"}, {"ok": True}])
    [outcome] = graded(coursedir)
    assert outcome.ok and outcome.note == "" and not script_left(coursedir, "alice")
    assert not notebook.with_name(notebook.name + ".broken").exists()
    assert notebook.read_text(encoding="utf-8") == released


def test_a_failure_of_nbgrader_is_reported_not_scored_0(tmp_path, capsys):
    """nbgrader failing on a readable notebook is the grader's: no blank notebook, no 0, its traceback logged.
    Reported at once: nbgrader's exporter has tried twice already (autograder/submission.py)."""
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released)
    failure = {"ok": False, "error": "Traceback (most recent call last):\n  File \"x.py\"\nKeyError: 'grade_id'"}
    script(coursedir, alice=[failure, {"ok": True}])
    [outcome] = graded(coursedir)
    assert not outcome.ok and outcome.note.startswith("评分端出错，未记分") and "KeyError: 'grade_id'" in outcome.note
    assert len(script_left(coursedir, "alice")) == 1, "graded once by the scheduler"
    assert notebook.read_text(encoding="utf-8") == released, "the submission is left as it is"
    assert not notebook.with_name(notebook.name + ".broken").exists()
    assert "    | KeyError: 'grade_id'" in capsys.readouterr().err, "nbgrader's traceback is in the log"


@pytest.mark.parametrize("error", ["PermissionError", "MemoryError"])
def test_a_grader_side_exception_in_the_worker_is_not_a_0(tmp_path, monkeypatch, capsys, error):
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released)
    script(coursedir, alice=[{"raise": error}, {"raise": error}])
    monkeypatch.setattr(scheduler, "grade_section",
                        functools.partial(scheduler.grade_section, make_grader=scripted_grader))
    monkeypatch.setattr(grade, "course_app", lambda: app_of(coursedir))
    assert grade.main([SECTION, "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    assert f"未能批改 alice：评分端出错，未记分（不是学生的问题，请检查后重新评分）：{error}: injected" in err
    assert notebook.read_text(encoding="utf-8") == released
    assert not notebook.with_name(notebook.name + ".broken").exists()


def test_a_worker_traceback_reaches_the_log_with_the_student(tmp_path, capsys):
    coursedir, _ = make_course(tmp_path, released_text())
    script(coursedir, alice=[{"raise": "RuntimeError"}, {"ok": True}])
    [outcome] = graded(coursedir)
    err = capsys.readouterr().err
    assert outcome.ok
    assert "alice 第 1 次评分失败" in err and "RuntimeError: injected by the test" in err
    trace = err[err.index("alice 的评分出错，traceback："):]
    assert "    | Traceback (most recent call last):" in trace and "in act" in trace, err
    assert "    | RuntimeError: injected by the test" in trace


def cannot_start(job):
    """A worker's grader whose set-up fails (an unreadable configuration, say)."""
    raise RuntimeError(f"cannot configure nbgrader in {job.root}")


def test_a_worker_that_cannot_start_is_reported_with_its_traceback(tmp_path, capsys):
    coursedir, notebook = make_course(tmp_path, released_text())
    [outcome] = scheduler.grade_section(app_of(coursedir), SECTION, ["alice"], 1, make_grader=cannot_start)
    err = capsys.readouterr().err
    assert not outcome.ok and outcome.note.startswith("评分端出错") and "评分进程启动失败" in outcome.note
    assert "评分进程（正在批改 alice） 的评分出错，traceback：" in err and "in cannot_start" in err
    assert err.count("评分失败") == 2, "tried twice, then reported"


def test_a_grader_that_cannot_read_the_submission_does_not_give_a_0(tmp_path, monkeypatch, caplog):
    """A PermissionError reading the file is the grader's: nbgrader's exporter tries again, then raises (nbgrader
    reports the failure); the file is not replaced by the blank notebook."""
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released)
    real_read_bytes, real_read_text = Path.read_bytes, Path.read_text

    def refuse(real):
        def read(self, *args, **kwargs):
            if self == notebook:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)
        return read
    monkeypatch.setattr(Path, "read_bytes", refuse(real_read_bytes))
    monkeypatch.setattr(Path, "read_text", refuse(real_read_text))
    resources = {"nbgrader": {"assignment": SECTION, "student": "alice", "notebook": SECTION}}
    with pytest.raises(PermissionError):
        submission.SubmissionExporter(config=coursedir.config).from_filename(str(notebook), resources)
    monkeypatch.undo()
    assert "第 1 次，共 2 次" in caplog.text, "tried twice"
    assert notebook.read_text(encoding="utf-8") == released
    assert not notebook.with_name(notebook.name + ".broken").exists()


@pytest.mark.slow
def test_a_database_error_of_nbgrader_is_reported_not_scored_0(tmp_path):
    """Real nbgrader in the worker, with a gradebook it cannot open (and a configuration that holds a
    lambda, as tests/busy_machine.py's does: it cannot be sent to a worker, which reads its own)."""
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released, db_url=f"sqlite:///{tmp_path}/no-such-folder/gradebook.db")
    app = app_of(coursedir)
    app.config.Execute.timeout_func = lambda cell: 60  # noqa: ARG005
    [outcome] = scheduler.grade_section(app, SECTION, ["alice"], 1)
    assert not outcome.ok and outcome.note.startswith("评分端出错，未记分"), outcome.note
    assert "OperationalError" in outcome.note or "unable to open" in outcome.note, outcome.note
    assert notebook.read_text(encoding="utf-8") == released
    assert not notebook.with_name(notebook.name + ".broken").exists()


def test_an_overrun_is_retried_then_graded_as_the_blank_notebook(tmp_path):
    """The student's code running past --timeout: killed, tried again, then the blank notebook with a note."""
    released = released_text()
    coursedir, notebook = make_course(tmp_path, released)
    script(coursedir, alice=[{"hang": True}, {"hang": True}, {"ok": True}])
    # 3 s: the blank notebook's own grading must fit it on a machine the suite's other workers keep busy
    [outcome] = graded(coursedir, submission_seconds=3)
    assert outcome.ok and "超过 3 秒" in outcome.note and "原文件保留为" in outcome.note
    assert not script_left(coursedir, "alice")
    assert notebook.with_name(notebook.name + ".broken").read_text(encoding="utf-8") == released
    note = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]
    assert note["cell_type"] == "markdown" and "超过 3 秒" in note["source"]


def test_an_overdue_worker_is_killed_on_time_while_the_other_keeps_answering(tmp_path, capsys):
    """The limit is checked on every turn, not only once the answers stop coming for a second."""
    quick = [f"quick{k:02d}" for k in range(14)]
    coursedir, _ = make_course(tmp_path, released_text(), students=("hung", *quick))
    script(coursedir, hung=[{"hang": True}, {"ok": True}], **{s: [{"sleep": 0.5}] for s in quick})
    # 4 s: each quick one (0.5 s) must fit it on a machine the suite's other workers keep busy
    outcomes = graded(coursedir, ["hung", *quick], jobs=2, submission_seconds=4)
    assert all(o.ok for o in outcomes), [o for o in outcomes if not o.ok]
    seconds = float(re.search(r"hung 第 1 次评分失败（([\d.]+) 秒）：超过 4 秒", capsys.readouterr().err)[1])
    assert seconds < 5.5, f"killed {seconds:.1f} s after it started, for a limit of 4 s"


def test_failure_reason_names_the_cause_not_the_boilerplate():
    log = ("[AutogradeApp | ERROR] sqlite3.OperationalError: database is locked\n"
           "[AutogradeApp | ERROR] Please see the the above traceback for details on the specific errors")
    error = "Traceback ...\nnbgrader.converters.base.NbGraderException: Please see the above traceback"
    assert failure_reason({"success": False, "error": error, "log": log}).endswith("database is locked")


def test_exit_status_is_1_when_a_submission_could_not_be_graded(tmp_path, monkeypatch, capsys):
    coursedir, _ = make_course(tmp_path, released_text())
    script(coursedir, alice=[{"ok": False, "error": "boom"}])
    monkeypatch.setattr(scheduler, "grade_section",
                        functools.partial(scheduler.grade_section, make_grader=scripted_grader))
    monkeypatch.setattr(grade, "course_app", lambda: app_of(coursedir))
    assert grade.main([SECTION, "--jobs", "1"]) == 1
    assert re.search(r"未能批改 alice：评分端出错.*boom", capsys.readouterr().err)


# --- the student's file ---------------------------------------------------------------------------

def test_pasted_cell_ids_are_repaired_and_the_original_kept(tmp_path):
    nb = json.loads(released_text())
    nb["cells"].append(dict(nb["cells"][-1]))       # same id twice
    del nb["cells"][0]["id"]                        # and one missing
    original = json.dumps(nb).encode()
    coursedir, notebook = make_course(tmp_path, original.decode())
    note = submission.repair(notebook, submission.released_notebook(coursedir, SECTION))
    assert note == f"已修复重复或缺失的单元格 id，原文件保留为 {notebook.name}.broken"
    ids = [c["id"] for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"]]
    assert len(ids) == len(set(ids)) == len(nb["cells"])
    assert notebook.with_name(notebook.name + ".broken").read_bytes() == original


def test_unreadable_and_missing_files_are_replaced(tmp_path):
    coursedir, notebook = make_course(tmp_path, '{"cells": [')
    released = submission.released_notebook(coursedir, SECTION)
    assert "JSONDecodeError" in submission.repair(notebook, released)
    assert notebook.with_name(notebook.name + ".broken").read_text(encoding="utf-8") == '{"cells": ['
    source = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"]
    assert "无法被自动评分" in source and f"原文件已原样保留为 `{notebook.name}.broken`" in source
    notebook.unlink()
    assert submission.repair(notebook, released) == "文件不存在"
    assert notebook.exists()
    assert submission.notebook_problem(notebook) == ("", None)


def test_the_original_bytes_survive_every_later_repair(tmp_path):
    """Repaired ids, then replaced after overrunning, then graded again: the copy is the student's file."""
    nb = json.loads(released_text())
    nb["cells"].append(dict(nb["cells"][-1]))
    original = json.dumps(nb).encode()
    coursedir, notebook = make_course(tmp_path, original.decode())
    kept, released = notebook.with_name(notebook.name + ".broken"), submission.released_notebook(coursedir, SECTION)
    submission.repair(notebook, released)
    submission.replace_with_released(notebook, released, "整份评分超过 1 秒")
    submission.replace_with_released(notebook, released, "整份评分超过 1 秒")
    assert submission.repair(notebook, released) == "", "a later run grades the replacement as is"
    assert kept.read_bytes() == original
    assert sorted(p.name for p in notebook.parent.iterdir()) == [notebook.name, kept.name]


def test_an_earlier_copy_is_never_overwritten(tmp_path):
    """A student's file copied in by hand over a replaced one: kept beside the first copy."""
    coursedir, notebook = make_course(tmp_path, "first")
    released = submission.released_notebook(coursedir, SECTION)
    submission.repair(notebook, released)
    notebook.write_text("second", encoding="utf-8")
    assert submission.repair(notebook, released).endswith(f"原文件保留为 {notebook.name}.broken.1")
    assert notebook.with_name(notebook.name + ".broken").read_text(encoding="utf-8") == "first"
    assert notebook.with_name(notebook.name + ".broken.1").read_text(encoding="utf-8") == "second"


def test_paths_come_from_the_course_directory_not_constants(tmp_path):
    """A course laid out otherwise (release in handouts/, submissions in inbox/): the fallback
    finds the released notebook there and the students are found there."""
    coursedir, notebook = make_course(tmp_path, "not json", release_directory="handouts",
                                      submitted_directory="inbox")
    assert notebook == tmp_path / "inbox" / "alice" / SECTION / f"{SECTION}.ipynb"
    assert scheduler.students_of(coursedir, SECTION) == ["alice"]
    assert "JSONDecodeError" in submission.repair(notebook, submission.released_notebook(coursedir, SECTION))
    released = (tmp_path / "handouts" / SECTION / f"{SECTION}.ipynb").read_text(encoding="utf-8")
    assert json.loads(notebook.read_text(encoding="utf-8"))["cells"][1:] == json.loads(released)["cells"]


def test_a_missing_release_is_named_before_anything_is_graded(tmp_path, monkeypatch, capsys):
    coursedir, _ = make_course(tmp_path, released_text())
    shutil.rmtree(submission.released_notebook(coursedir, SECTION).parent)
    monkeypatch.setattr(scheduler, "Worker", None)  # no worker may start
    monkeypatch.setattr(grade, "course_app", lambda: app_of(coursedir))
    assert grade.main([SECTION, "--jobs", "1"]) == 1
    assert f"nbgrader generate_assignment {SECTION}" in capsys.readouterr().err


# --- the student's file and the grader's passing failures, through both entry points -------------

# In a test course's nbgrader_config.py (where an instructor could put it): the first grading of the student
# "unlucky" raises, as a lost lock or a kernel that did not start would.
FAILS_ONCE = """
import pathlib
from nbgrader.preprocessors import NbGraderPreprocessor


class FailsOnce(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        marker = pathlib.Path(resources["metadata"]["path"], "failed-once.marker")
        if resources["nbgrader"]["student"] == "unlucky" and not marker.exists():
            marker.write_text("")
            raise RuntimeError("the grader's passing failure")
        return nb, resources


c.Autograde.autograde_preprocessors = [FailsOnce, *c.Autograde.autograde_preprocessors]
"""


def pasted_cells(nb: dict) -> dict:
    """What a learner's paste leaves: a cell id twice, another one missing."""
    nb = copy.deepcopy(nb)
    nb["cells"].append(copy.deepcopy(nb["cells"][0]))
    del nb["cells"][1]["id"]
    return nb


@pytest.mark.slow
def test_both_entry_points_repair_the_students_file_and_retry_the_graders_failure(tmp_path):
    """nbgrader autograde and python -m autograder.grade grade the same way (nbgrader's exporter,
    autograder/submission.py): the original of a file that is no notebook or has pasted cell ids is kept,
    the former graded as the released notebook with a note, the latter repaired; a grading that raised is
    graded again. Both exit 0 with the same scores, and each log says what was done, the parallel
    command's under the student's name."""
    course = Course.create(tmp_path / "autograde", [SECTION], extra_config=cell_timeouts(30) + FAILS_ONCE)
    release = course.release_notebook(SECTION)
    plan = {"honest": good(release), "pasted": pasted_cells(good(release)), "unlucky": good(release)}
    for student, nb in plan.items():
        course.submit(student, SECTION, nb)
    garbled = course.root / "submitted" / "garbled" / SECTION / f"{SECTION}.ipynb"
    garbled.parent.mkdir(parents=True)
    garbled.write_text("{ this is not json", encoding="utf-8")
    parallel = Course(tmp_path / "parallel")
    shutil.copytree(course.root, parallel.root)

    logs = [course.nbgrader("autograde", SECTION).stderr]   # raises where nbgrader exits 1
    graded_in_parallel = subprocess.run([sys.executable, "-m", "autograder.grade", SECTION, "--jobs", "2"],
                                        cwd=parallel.root, capture_output=True, text=True)
    assert graded_in_parallel.returncode == 0, graded_in_parallel.stderr[-3000:]
    logs.append(graded_in_parallel.stderr)

    for run in (course, parallel):
        scores = {student: {g: got[g] for g in FULL} for student, got in run.scores(SECTION).items()}
        assert scores == {"honest": FULL, "pasted": FULL, "unlucky": FULL, "garbled": ALL_ZERO}
        submitted = run.root / "submitted"
        assert (submitted / "garbled" / SECTION / f"{SECTION}.ipynb.broken").read_text() == "{ this is not json"
        kept = json.loads((submitted / "pasted" / SECTION / f"{SECTION}.ipynb.broken").read_text(encoding="utf-8"))
        assert kept == plan["pasted"], "the student's own file, as submitted"
        autograded = run.root / "autograded" / "garbled" / SECTION / f"{SECTION}.ipynb"
        assert "无法被自动评分" in autograded.read_text(encoding="utf-8")
    for log in logs:
        assert "已修复重复或缺失的单元格 id" in log and "不是有效的 notebook" in log and "按原样再评一次" in log, log
    assert "[pasted] WARNING" in logs[1] and "[unlucky] WARNING" in logs[1], "the workers' log, in the grading log"


# --- the worker processes ------------------------------------------------------------------------

def open_descriptors() -> list[str]:
    """What this process's descriptors point to, in order (the listing's own one is gone by then)."""
    targets = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        with contextlib.suppress(FileNotFoundError):
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    return targets


def report_on_itself(job):
    """A worker's grader that writes down what the worker is like, in ``<root>/<student>.json``."""
    def grade_one(student):
        Path(job.root, f"{student}.json").write_text(json.dumps({
            "own_session": os.getsid(0) == os.getpid(), "memory": resource.getrlimit(resource.RLIMIT_AS)[0],
            "descriptors": open_descriptors(), "threads": os.environ.get("OMP_NUM_THREADS")}))
        return {"success": True}
    return grade_one


def a_job(root, jobs: int, **limits) -> Job:
    coursedir = course_directory(root)
    coursedir.config.GradingLimits.update(limits)
    return scheduler.worker_job(app_of(coursedir), SECTION, jobs, Config())


def answer_of(worker: scheduler.Worker, timeout: float = 30) -> dict:
    """The worker's answer, after the message that it is ready."""
    for _ in range(2):
        assert wait([worker.conn], timeout), "the worker answers"
        message = worker.conn.recv()
    return message


def test_workers_are_in_their_own_session_set_their_limits_and_hold_no_other_pipes(tmp_path, monkeypatch):
    """No preexec_fn, no fork of this process: the worker sets its session, memory limit and
    environment itself, and holds none of this process's ends of the other workers' connections.
    Its stdin is empty; what it prints goes where its standard error goes (the grading log)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "4")   # the grader's own environment (the suite runs with 1)
    start_forkserver()
    job = a_job(tmp_path, jobs=2, memory_mb=1234)
    first = scheduler.Worker(job, report_on_itself)
    first_end = f"socket:[{os.fstat(first.conn.fileno()).st_ino}]"
    second = scheduler.Worker(job, report_on_itself)
    try:
        for k, worker in enumerate((first, second)):
            worker.assign(f"student{k}")
            assert answer_of(worker)["ok"]
            worker.student = None
    finally:
        first.close()
        second.close()
    assert first.process.exitcode == second.process.exitcode == 0, "each ends once told there is no more"
    for k in range(2):
        info = json.loads((tmp_path / f"student{k}.json").read_text())
        assert info["own_session"] and info["memory"] == 1234 * 1024 * 1024 and info["threads"] == "1"
        assert info["descriptors"][0] == "/dev/null" and info["descriptors"][1] == info["descriptors"][2]
    second_info = json.loads((tmp_path / "student1.json").read_text())
    assert first_end not in second_info["descriptors"], "the second worker holds none of the first's connection"
    assert any(d.startswith("socket:") for d in second_info["descriptors"]), "(its own, it does)"


def leave_temporary_files(job):
    """A worker's grader that leaves a temporary folder (with one it cannot even list), then hangs."""
    def grade_one(student):  # noqa: ARG001  (a grader's signature)
        folder = tempfile.mkdtemp()
        os.makedirs(os.path.join(folder, "locked", "inner"))
        os.chmod(os.path.join(folder, "locked"), 0)
        Path(job.root, "folder").write_text(folder)
        time.sleep(600)
    return grade_one


def test_a_worker_killed_for_overrunning_leaves_no_temporary_files(tmp_path):
    """Its kernels' copies of the submission folders live in the worker's own folder, removed by us."""
    start_forkserver()
    worker = scheduler.Worker(a_job(tmp_path, jobs=1), leave_temporary_files)
    try:
        worker.assign("alice")
        deadline = time.monotonic() + 30
        while not (tmp_path / "folder").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        folder = Path((tmp_path / "folder").read_text())
        worker.kill_if_overdue(0)
        worker.process.join(30)
        assert worker.process.exitcode == -signal.SIGKILL, "killed"
    finally:
        worker.close()
    assert folder.is_relative_to(worker.scratch), "the kernels' temporary files are in the worker's folder"
    assert not Path(worker.scratch).exists()


def test_a_worker_lists_no_exchange_and_logs_nothing_of_it(tmp_path, monkeypatch, capsys):
    """nbgrader's API lists the exchange when it is made; in a worker (which only grades) that logged
    "Unwritable directory, please contact your instructor" as CRITICAL wherever the exchange is absent."""
    from autograder.worker import nbgrader_grader

    course = Course.create(tmp_path / "course", [SECTION])
    monkeypatch.chdir(course.root)
    config = Config()
    config.Exchange.root = str(tmp_path / "no-exchange-here")
    nbgrader_grader(Job(SECTION, str(course.root), config, 6144, dict(os.environ)))
    assert "Unwritable directory" not in capsys.readouterr().err
