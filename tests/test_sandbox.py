"""Student code graded in the sandbox (autograder/sandbox.py) cannot see or touch what is not its own.

Each attack of issue 7 is a submission graded for real, once through the course's parallel
command and once through stock ``nbgrader autograde`` with the course's config, beside a good
submission: the attack finds nothing, changes nothing, outlives nothing, and the honest part of
the attacker's notebook (and every other student) keeps its points. Without bwrap these tests
skip: the fallback runs kernels unsandboxed, where every attack below succeeds.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
from pathlib import Path
from secrets import token_hex

import nbformat
import pytest
from traitlets.config import Config

from autograder import grade, sandbox
from autograder.config import configure
from autograder.preprocessors import ResilientExecute

from .busy_machine import cell_timeouts
from .nbgrader_course import Course, with_solution
from .test_zygote_pool import running
from .test_bad_submissions import FULL, GOOD_PROJECT, PROJECT_ZERO, SECTION, good, with_helper

needs_bwrap = pytest.mark.needs("bwrap")

CELL_SECONDS = 6
SIGINT_LOOP = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"


def probe(paths: dict[str, str]) -> str:
    """A cell that tries to read each path and prints READ (with the start of it) or DENIED."""
    return ("import glob, os\n"
            f"for what, pattern in {paths!r}.items():\n"
            "    found = glob.glob(pattern) or [pattern]\n"
            "    for path in found:\n"
            "        try:\n"
            "            with open(path, 'rb') as f:\n"
            "                print('READ', what, path, f.read(3000))\n"
            "        except OSError as err:\n"
            "            print('DENIED', what, type(err).__name__)\n"
            "import pathlib\n"
            "print('LISTED', sorted({n for p in pathlib.Path.cwd().parents for n in os.listdir(p)}))\n"
            "print('GRADED AS', os.environ.get('NBGRADER_EXECUTION'))\n")


# What the reader's probe must be refused, each a file that exists on the host (its name as the probe prints it)
HIDDEN_FROM_KERNELS = ("source notebook", "source, relative", "gradebook", "other students", "instructor home")
# In the command line of the detached process: the test finds it by that, in the sandbox and on the host.
DETACHED = token_hex(8)


def detach(root: Path) -> str:
    """A cell that starts a detached process (it says it started, then writes full marks into the
    gradebook every tenth of a second, forever) and hangs its kernel: the cell times out and runs
    again in a fresh kernel (forked from the same zygote), which prints the processes of the
    detached one it can see."""
    later = ("import pathlib, sqlite3, time\n"
             "pathlib.Path('detached-started.marker').write_text('x')\n"
             "while True:\n"
             "    time.sleep(0.1)\n"
             "    try:\n"
             f"        db = sqlite3.connect({str(root / 'gradebook.db')!r})\n"
             "        db.execute('update grade set manual_score = 99')\n"
             "        db.commit()\n"
             "    except sqlite3.Error:\n"
             "        pass\n")
    return ("import os, subprocess, sys, time\n"
            "if not os.path.exists('detached-started.marker'):\n"
            f"    subprocess.Popen([sys.executable, '-c', {later!r}, {DETACHED!r}], start_new_session=True,\n"
            "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "    deadline = time.monotonic() + 60\n"
            "    while not os.path.exists('detached-started.marker') and time.monotonic() < deadline:\n"
            "        time.sleep(0.05)\n"
            "    while True:\n"
            "        time.sleep(0.1)\n"
            "seen = [p for p in os.listdir('/proc') if p.isdigit()\n"
            f"        and {DETACHED.encode()!r} in open(f'/proc/{{p}}/cmdline', 'rb').read()]\n"
            "print('SURVIVORS', seen)\n")


def notebook(release: dict, project: str = GOOD_PROJECT, before: str = "") -> dict:
    """Both exercises solved (``project`` for the first); ``before``: a cell of the student's own
    inserted before the first exercise."""
    nb = with_solution(good(release), "project_qkv", project)
    return with_helper(nb, before) if before else nb


def scores(course: Course) -> dict[str, dict[str, float]]:
    """student -> the scores of the autograded test cells (not the manually graded answers)."""
    return {student: {g: got[g] for g in FULL} for student, got in course.scores(SECTION).items()}


def outputs(course: Course, student: str) -> str:
    """Every output of the student's autograded notebook, as text."""
    path = course.root / "autograded" / student / SECTION / f"{SECTION}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return json.dumps([c.get("outputs", []) for c in cells], ensure_ascii=False)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    return Course.create(tmp_path_factory.mktemp("sandbox") / "course", [SECTION],
                         extra_config=cell_timeouts(CELL_SECONDS))


@pytest.fixture(scope="module")
def planted_connection_file():
    """A connection file of 'another kernel' where jupyter_client writes them (the temp dir)."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.write(fd, json.dumps({"key": "another-kernels-secret-key", "shell_port": 1}).encode())
    os.close(fd)
    yield path
    os.unlink(path)


@pytest.fixture(scope="module")
def parallel_run(course, planted_connection_file, monkeypatch_module):
    """The attacks graded by ``python -m autograder.grade --jobs 2``."""
    root, release = course.root, course.release_notebook(SECTION)
    home = Path.home() / f".attention-course-test-{DETACHED}"   # a file of the grader's home, planted here
    home.write_text("the grader's own file", encoding="utf-8")
    secrets = {"source notebook": str(root / "solutions" / SECTION / f"{SECTION}.ipynb"),
               "source, relative": f"../../../solutions/{SECTION}/{SECTION}.ipynb",
               "gradebook": str(root / "gradebook.db"),
               "other students": str(root / "submitted" / "*" / SECTION / f"{SECTION}.ipynb"),
               "instructor home": str(home),
               "other kernels": str(Path(planted_connection_file).parent / "*.json")}
    submissions = {"reader": notebook(release, before=probe(secrets)),
                   "detacher": notebook(release, project=detach(root)),
                   "sigint-ignorer": notebook(release, project=SIGINT_LOOP),
                   "zz-good": notebook(release)}
    for student, nb in submissions.items():
        course.submit(student, SECTION, nb)
    monkeypatch_module.chdir(root)
    yield grade.main([SECTION, "--jobs", "2"])
    home.unlink()
    for pid in running(DETACHED):   # where a test below failed
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_without_bwrap_grading_warns_and_runs_unsandboxed(monkeypatch, caplog, capsys, tmp_path):
    """A newcomer's machine: each kernel says in the log that it is not sandboxed, and runs as the grader
    (in its PID namespace), still on unix sockets."""
    monkeypatch.setattr(sandbox.shutil, "which", lambda _: None)
    monkeypatch.setattr(sandbox, "unavailable_reason", sandbox.unavailable_reason.__wrapped__)
    config = Config()
    configure(config)
    look = ("import json, os\nfrom ipykernel.connect import get_connection_file\n"
            "print(json.load(open(get_connection_file()))['transport'], os.readlink('/proc/self/ns/pid'))")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(look)])
    with caplog.at_level(logging.WARNING):
        ResilientExecute(config=config, log=logging.getLogger("grading")).preprocess(
            nb, {"metadata": {"path": str(tmp_path)}})
    assert nb.cells[0].outputs[0]["text"].split() == ["ipc", os.readlink("/proc/self/ns/pid")]
    assert "没有找到 bwrap" in caplog.text and "教师指南 §6.3" in caplog.text
    grade.warn_if_unsealed(Config())
    assert "学生代码将以评分用户的身份运行" in capsys.readouterr().err


@pytest.mark.slow
@needs_bwrap
def test_parallel_grading_of_the_attacks_completes(parallel_run):
    assert parallel_run == 0


@pytest.mark.slow
@needs_bwrap
def test_source_gradebook_other_students_home_and_other_kernels_are_invisible(course, parallel_run):
    assert parallel_run == 0
    out = outputs(course, "reader")
    denied = [what for what in HIDDEN_FROM_KERNELS if f"DENIED {what} " in out]
    assert denied == list(HIDDEN_FROM_KERNELS) and out.count("DENIED") == 5 and "BEGIN HIDDEN TESTS" not in out, out
    assert out.count("READ") == 1 and "READ other kernels" in out, "its own connection file, and no other"
    assert "another-kernels-secret-key" not in out
    listed = out[out.index("LISTED"):].split("\\n")[0]  # the line (outputs are JSON text: newlines escaped)
    # the folders on the way down to its own (``autograded``, its own name) are there, empty but for that way
    others = ("detacher", "zz-good", "sigint-ignorer", "submitted", "gradebook.db", "nbgrader_config.py")
    assert not [name for name in others if name in listed], "the folders above the notebook's show no other student"
    assert scores(course)["reader"] == FULL


@pytest.mark.slow
@needs_bwrap
def test_the_sealed_kernel_still_knows_it_is_being_graded(course, parallel_run):
    """nbgrader's NBGRADER_EXECUTION reaches the kernel through the cleared environment, so the
    notebooks' timing sweeps and training shrink at grading time as they do unsandboxed."""
    assert parallel_run == 0
    assert "GRADED AS autograde" in outputs(course, "reader")


@pytest.mark.slow
@needs_bwrap
def test_a_detached_process_dies_with_the_kernel_and_never_reaches_the_gradebook(course, parallel_run):
    """Its kernel is replaced (the cell timed out): the next kernel, in the same sandbox, sees nothing of it,
    and once grading is over it runs nowhere on the machine."""
    assert parallel_run == 0
    assert list(course.root.glob("autograded/detacher/**/detached-started.marker")), "the detached process never ran"
    assert "SURVIVORS []" in outputs(course, "detacher"), outputs(course, "detacher")[-500:]
    assert running(DETACHED) == []
    assert scores(course)["detacher"] == PROJECT_ZERO


@pytest.mark.slow
@needs_bwrap
def test_a_loop_that_ignores_sigint_costs_only_its_own_exercise(course, parallel_run):
    assert parallel_run == 0
    assert scores(course)["sigint-ignorer"] == PROJECT_ZERO
    assert "[timeout]" in outputs(course, "sigint-ignorer")
    assert scores(course)["zz-good"] == FULL


@pytest.mark.slow
@needs_bwrap
def test_under_nbgrader_autograde_signalling_the_parent_and_ignoring_sigint_harm_no_one(course, parallel_run):
    """Stock ``nbgrader autograde`` (the course's config): a kernel that signals its parent
    (unsandboxed: nbgrader itself, which then abandons every later student) and one that
    ignores the interrupt; the student graded after them gets full marks."""
    assert parallel_run == 0  # same course: run after the parallel grading
    release = course.release_notebook(SECTION)
    signal_parent = "import os, signal\nos.kill(os.getppid(), signal.SIGTERM)\nos.kill(os.getppid(), signal.SIGKILL)"
    course.submit("a-signaller", SECTION, notebook(release, before=signal_parent))
    course.submit("b-sigint-ignorer", SECTION, notebook(release, project=SIGINT_LOOP))
    course.submit("c-good", SECTION, notebook(release))
    course.nbgrader("autograde", SECTION)  # one process, students in this order; raises if it dies
    graded = scores(course)
    assert graded["a-signaller"] == FULL and graded["c-good"] == FULL
    assert graded["b-sigint-ignorer"] == PROJECT_ZERO
