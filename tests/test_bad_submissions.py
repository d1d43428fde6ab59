"""Broken and hostile submissions graded in one run with good ones: the run completes, every
other student's grades are intact, and each affected student's feedback says why in Chinese."""
from __future__ import annotations

import copy
import json
import socket
import socketserver
import sys
import threading

import pytest

from autograder import grade

from .busy_machine import cell_timeouts
from .nbgrader_course import Course, slim, with_solution

SECTION = "01_qkv_and_scores"
FULL = {"test_project_qkv": 1, "test_project_qkv_hidden": 2, "test_attention_scores": 1,
        "test_attention_scores_hidden": 2}
PROJECT_ZERO = {**FULL, "test_project_qkv": 0, "test_project_qkv_hidden": 0}
SCORES_ZERO = {**FULL, "test_attention_scores": 0, "test_attention_scores_hidden": 0}
ALL_ZERO = dict.fromkeys(FULL, 0)
PASSED = "通过全部检查"

GOOD_PROJECT = "def project_qkv(x, w_q, w_k, w_v):\n    return x @ w_q, x @ w_k, x @ w_v"
WRONG_PROJECT = "def project_qkv(x, w_q, w_k, w_v):\n    return x @ w_q.T, x @ w_k.T, x @ w_v.T"
GOOD_SCORES = "def attention_scores(q, k):\n    return q @ k.transpose(-2, -1)"
WRONG_SCORES = "def attention_scores(q, k):\n    return k @ q.transpose(-2, -1)"
# A process that forks until refused, then ends with its children; bounded (1000 processes, 15 s) so
# that the test machine survives without a limit.
FORK_BOMB = ("import os, signal, time\n"
             "forked, deadline = 0, time.monotonic() + 15\n"
             "try:\n"
             "    while forked < 1000 and time.monotonic() < deadline:\n"
             "        if os.fork() == 0:\n"
             "            time.sleep(60)\n"
             "            os._exit(0)\n"
             "        forked += 1\n"
             "    print('FORK BOMB NOT STOPPED', forked, flush=True)\n"
             "except OSError as err:\n"
             "    print('FORK REFUSED AFTER', forked, type(err).__name__, flush=True)\n"
             "os.killpg(0, signal.SIGKILL)\n")
FORK_BOMB_CELL = ("import subprocess, sys\n"
                  f"print(subprocess.run([sys.executable, '-c', {FORK_BOMB!r}], capture_output=True, text=True,\n"
                  "                     start_new_session=True).stdout)\n")
NOT_REACHED = "UNREACHABLE"


class Listener(socketserver.ThreadingTCPServer):
    """A server on every address of the test machine; ``received``: what each connection sent."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.received: list[bytes] = []
        super().__init__(("0.0.0.0", 0), Received)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def targets(self) -> list[tuple[str, int]]:
        port = self.server_address[1]
        return [("127.0.0.1", port), (socket.gethostbyname(socket.gethostname()), port)]


class Received(socketserver.BaseRequestHandler):
    def handle(self):
        self.server.received.append(self.request.recv(100))


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.shutdown()
    server.server_close()


def reach_out(targets: list[tuple[str, int]]) -> str:
    """A cell that sends to each of ``targets`` and to its own kernel's connection ports on
    127.0.0.1 (they are TCP ports unless the kernel uses unix sockets) and prints what it reached."""
    return ("import json, socket\n"
            "from ipykernel.connect import get_connection_file\n"
            "info = json.load(open(get_connection_file()))\n"
            f"targets = {targets!r} + [('127.0.0.1', v) for k, v in info.items() if k.endswith('_port')]\n"
            "for address in targets:\n"
            "    try:\n"
            "        socket.create_connection(address, timeout=3).sendall(b'stolen')\n"
            "        print('REACHED', address)\n"
            "    except OSError as err:\n"
            f"        print({NOT_REACHED!r}, address, type(err).__name__)\n")


def good(release: dict) -> dict:
    return with_solution(with_solution(slim(release), "project_qkv", GOOD_PROJECT), "attention_scores", GOOD_SCORES)


def cells_by_id(nb: dict) -> dict[str, dict]:
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): c for c in nb["cells"]}


def change(nb: dict, **solutions: str) -> dict:
    for name, source in solutions.items():
        nb = with_solution(nb, name, source)
    return nb


def without(nb: dict, grade_id: str) -> dict:
    nb = copy.deepcopy(nb)
    nb["cells"] = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") != grade_id]
    return nb


def edited(nb: dict, grade_id: str, **fields) -> dict:
    nb = copy.deepcopy(nb)
    cells_by_id(nb)[grade_id].update(fields)
    return nb


def as_markdown(nb: dict, grade_id: str) -> dict:
    """What JupyterLab saves when a cell's type is switched to Markdown."""
    nb = copy.deepcopy(nb)
    cell = cells_by_id(nb)[grade_id]
    cell["cell_type"] = "markdown"
    cell.pop("outputs")
    cell.pop("execution_count")
    return nb


def with_helper(nb: dict, source: str) -> dict:
    """A cell of the student's own inserted before the first solution cell."""
    nb = copy.deepcopy(nb)
    first = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("solution"))
    nb["cells"].insert(first, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                               "source": source})
    return nb


def duplicated_and_split(nb: dict) -> dict:
    nb = copy.deepcopy(nb)
    cells = nb["cells"]
    i = cells.index(cells_by_id(nb)["attention_scores"])
    cells.insert(i + 1, copy.deepcopy(cells[i]))                                  # duplicated solution cell
    j = cells.index(cells_by_id(nb)["project_qkv"])
    helper = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "def _project(x, w):\n    return x @ w"}
    cells[j]["source"] = ("def project_qkv(x, w_q, w_k, w_v):\n"
                          "    return _project(x, w_q), _project(x, w_k), _project(x, w_v)")
    cells.insert(j, helper)                                                        # a solution split in two
    return nb


def hostile(release: dict, targets: list[tuple[str, int]]) -> dict[str, tuple[dict, dict, str]]:
    """The submissions that must hit the sandbox's limits (the student's own code is right)."""
    g = good(release)
    return {"fork-bomb": (change(g, project_qkv=FORK_BOMB_CELL + GOOD_PROJECT), FULL, "FORK REFUSED"),
            "reaches-out": (with_helper(g, reach_out(targets)), FULL, NOT_REACHED)}


def cases(release: dict, targets: list[tuple[str, int]]) -> dict[str, tuple[object, dict, str]]:
    """student -> (the submission: notebook dict, text or None, expected scores, feedback must contain)."""
    g = good(release)
    return {
        "good": (g, FULL, PASSED),
        **hostile(release, targets),
        "exception": (change(g, project_qkv="1 / 0\n" + GOOD_PROJECT), PROJECT_ZERO, "还没有定义"),
        "infinite-loop": (change(g, project_qkv="def project_qkv(x, w_q, w_k, w_v):\n    while True:\n        pass"),
                          PROJECT_ZERO, "[timeout]"),
        "hangs-once": (change(g, project_qkv="import os, time\n"
                                             "if not os.path.exists('hung-once.marker'):  # the first run only\n"
                                             "    open('hung-once.marker', 'w').close()\n"
                                             "    while True:\n"
                                             "        time.sleep(0.1)\n" + GOOD_PROJECT), FULL, PASSED),
        "memory-hog": (change(g, project_qkv="def project_qkv(x, w_q, w_k, w_v):\n"
                                              "    hog = [torch.ones(10**9) for _ in range(100)]  # 400 GB\n"
                                              "    return x @ w_q, x @ w_k, x @ w_v"), PROJECT_ZERO, "[crashed]"),
        "os-exit": (change(g, project_qkv="import os\nos._exit(1)\n" + GOOD_PROJECT), PROJECT_ZERO, "[kernel-died]"),
        "sys-exit": (change(g, attention_scores="import sys\nsys.exit()\n" + GOOD_SCORES), SCORES_ZERO, "还没有定义"),
        "deleted-test": (without(g, "test_attention_scores"), FULL, PASSED),
        "edited-test": (edited(change(g, attention_scores=WRONG_SCORES), "test_attention_scores",
                               source='print("✓ attention_scores 通过全部检查")'), SCORES_ZERO, "[qk-swapped]"),
        "type-changed": (as_markdown(change(g, attention_scores=WRONG_SCORES), "test_attention_scores"),
                         SCORES_ZERO, "[qk-swapped]"),
        "duplicated-split": (duplicated_and_split(g), FULL, PASSED),
        "invalid-json": ("{ this is not json", ALL_ZERO, "无法被自动评分"),
        "truncated": (json.dumps(g)[: len(json.dumps(g)) // 2], ALL_ZERO, "无法被自动评分"),
        "missing": (None, ALL_ZERO, "文件不存在"),
        "huge-output": (change(g, project_qkv="for i in range(200_000):\n    print(i)\n" + GOOD_PROJECT), FULL, PASSED),
        "stderr-warnings": (change(g, project_qkv="import sys, warnings\nprint('debug', file=sys.stderr)\n"
                                                  "def project_qkv(x, w_q, w_k, w_v):\n"
                                                  "    warnings.warn('a harmless warning')\n"
                                                  "    print('debug', file=sys.stderr)\n"
                                                  "    return x @ w_q, x @ w_k, x @ w_v"), FULL, PASSED),
        # a wrong answer whose kernel lies to its own checks: the judge decides outside the kernel
        # (tests/test_forged_verdicts.py makes kernels lie in more ways, against a control)
        "patch-allclose": (change(g, project_qkv=WRONG_PROJECT + "\ntorch.allclose = lambda *a, **k: True"),
                           PROJECT_ZERO, "[weights-transposed]"),
        "patch-print": (change(g, project_qkv=WRONG_PROJECT
                               + "\nimport builtins\nbuiltins.print = lambda *a, **k: None"),
                        PROJECT_ZERO, "[weights-transposed]"),
        "patch-check": (change(g, project_qkv=WRONG_PROJECT + "\ndef check_project_qkv(f):\n    print('✓')"),
                        PROJECT_ZERO, "[weights-transposed]"),
        "exec-built-string": (change(g, project_qkv=WRONG_PROJECT
                                     + "\nexec('torch.all' + 'close = lambda *a, **k: True')"),
                              PROJECT_ZERO, "[weights-transposed]"),
        # the grading kernel imports the class edition: the graded section's reference is not in it (the name
        # there stands for the learner's own saved solution, which this is not)
        "uses-reference": (change(g, project_qkv="from utils.reference import project_qkv"), PROJECT_ZERO,
                           "ExerciseNeeded"),
        "uses-reference-via-helper": (with_helper(change(g, project_qkv="def project_qkv(*a):\n    return _mine(*a)"),
                                                  "from utils.reference import project_qkv as _ref\n"
                                                  "def _mine(*args):\n    return _ref(*args)"),
                                      PROJECT_ZERO, "[crashed]"),
        "reads-the-answer-file": (change(g, project_qkv="import pathlib, utils.reference as r\n"
                                                        "source = pathlib.Path(r.__file__).parent.joinpath("
                                                        "'s01_qkv_and_scores.py').read_text()\n"
                                                        "exec(source)"), PROJECT_ZERO, "还没有定义"),
    }


def submit_raw(course: Course, student: str, submission) -> None:
    if isinstance(submission, dict):
        course.submit(student, SECTION, submission)
        return
    folder = course.root / "submitted" / student / SECTION
    folder.mkdir(parents=True)
    if submission is None:
        (folder / "notes.txt").write_text("I renamed my notebook, sorry", encoding="utf-8")
    else:
        (folder / f"{SECTION}.ipynb").write_text(submission, encoding="utf-8")


def outputs(course: Course, student: str) -> str:
    """Every output of the student's autograded notebook, as text."""
    path = course.root / "autograded" / student / SECTION / f"{SECTION}.ipynb"
    return json.dumps([c.get("outputs", []) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]])


def assert_sealed(course: Course, listener: Listener) -> None:
    """The hostile submissions' forks were refused and their connections reached nothing."""
    assert "FORK REFUSED" in outputs(course, "fork-bomb"), outputs(course, "fork-bomb")[-300:]
    reached = outputs(course, "reaches-out")
    assert "REACHED" not in reached and NOT_REACHED in reached, reached
    assert listener.received == [], "the test's server on the grading machine was reached from the sandbox"


@pytest.mark.slow
@pytest.mark.needs("bwrap")
def test_bad_submissions_cost_only_their_own_points(tmp_path, monkeypatch, listener):
    course = Course.create(tmp_path, [SECTION], extra_config=cell_timeouts(6))
    source = course.root / "solutions" / SECTION / f"{SECTION}.ipynb"
    source_before = (source.read_bytes(), source.stat().st_mtime_ns)
    plan = cases(course.release_notebook(SECTION), listener.targets)
    for student, (submission, _, _) in plan.items():
        submit_raw(course, student, submission)
    monkeypatch.chdir(course.root)
    monkeypatch.setattr(sys, "argv", ["grade"])
    assert grade.main([SECTION, "--jobs", "2", "--memory-mb", "3000"]) == 0
    course.nbgrader("generate_feedback", SECTION)

    scores = course.scores(SECTION)
    for student, (_, expected, marker) in plan.items():
        got = {g: scores[student][g] for g in FULL}
        assert got == expected, f"{student}: {got}"
        assert marker in course.feedback_html(student, SECTION), f"{student}: feedback lacks {marker!r}"
    assert (course.root / "submitted" / "invalid-json" / SECTION / f"{SECTION}.ipynb.broken").exists()
    assert_sealed(course, listener)
    assert (source.read_bytes(), source.stat().st_mtime_ns) == source_before, "grading touched the source notebook"
