"""The instructor's whole nbgrader flow, end to end, through the filesystem exchange.

One temporary copy of the course (solutions/ + nbgrader_config.py), one exchange directory
(chmod 1777) and three simulated students, each with their own HOME (same OS user, so
``ExchangeCollect.check_owner=False``), for two sections. The students work in the class edition
(``course.py edition student``, installed into an environment of their own: no answer of either
section), the instructor grades with the full course:

    generate_assignment → release_assignment → fetch_assignment (students) → edit → validate → submit
    → collect → autograde → manual grading (Gradebook, as the formgrader does)
    → generate_feedback → release_feedback → fetch_feedback (students) → export

Section 01 is graded with the course's parallel command (``python -m autograder.grade``),
section 02 with stock ``nbgrader autograde``. Every student submits bug-bank variants (some
right, some wrong, one stub left untouched) and writes short answers; the test asserts every
cell's score, the manual scores and the totals in grades.csv, the feedback each student
fetched into their HOME (no hidden test code; diagnosed codes and the instructor's comment
shown), and that nothing was written into the repository. docs/instructor_guide.md describes
the same flow with the same commands.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder.notebook_format import grade_id, points, visible_and_hidden
from utils.notebook import TEXT_STUB

from .bugbank import all_variants
from .class_edition import install
from .conftest import ROOT, load_notebook
from .nbgrader_course import Course, slim, with_solution

COURSE_ID = "attention"
S01, S02 = "01_qkv_and_scores", "02_scaling_and_softmax"
BANK = {v.id: v for v in all_variants()}
STUB = None  # "leave the released stub untouched"

# student -> section -> exercise -> bug-bank variant id (STUB: not attempted)
PLAN = {
    "alice": {
        S01: {"project_qkv": "project_qkv-matmul", "attention_scores": "attention_scores-transpose"},
        S02: {"dot_product_variance": "dot_product_variance-sum-then-var",
              "scaled_attention_scores": "scaled_attention_scores-divide",
              "softmax": "softmax-max-subtraction",
              "softmax_jacobian": "softmax_jacobian-diag-minus-outer"},
    },
    "bob": {
        S01: {"project_qkv": "project_qkv-transposed", "attention_scores": "attention_scores-einsum"},
        S02: {"dot_product_variance": "dot_product_variance-einsum-manual-var",
              "scaled_attention_scores": "scaled_attention_scores-prescaled-q",
              "softmax": "softmax-builtin",
              "softmax_jacobian": "softmax_jacobian-loops"},
    },
    "carol": {
        S01: {"project_qkv": "project_qkv-einsum", "attention_scores": "attention_scores-prescaled"},
        S02: {"dot_product_variance": STUB,
              "scaled_attention_scores": "scaled_attention_scores-by-D",
              "softmax": "softmax-logsumexp",
              "softmax_jacobian": "softmax_jacobian-sign-flipped"},
    },
}

# student -> section -> answer cell -> (what the student writes, or None to leave the stub;
# the instructor's manual score). An untouched answer cell is scored 0 by nbgrader itself.
ANSWERS = {
    "alice": {
        S01: {"answer_single_head_shapes": ("X 是 [B,T,C]，W 是 [C,D]，Q、K、V 都是 [B,T,D]，S 是 [B,T,T]。", 3),
              "answer_score_table_cost": ("每一对查询和键都要打分，所以是 T×T，序列变长两倍分数表变四倍。", 2)},
        S02: {"answer_max_subtraction": ("分子分母同乘 e^{-c}，结果不变；减去最大值后指数不超过 1，不会溢出。", 2),
              "answer_why_sqrt_d": ("q·k 是 D 项之和，方差为 D；除以 √D 后方差回到 1，softmax 不饱和。", 3)},
    },
    "bob": {
        S01: {"answer_single_head_shapes": ("Q、K、V 的形状和 X 一样。", 1),
              "answer_score_table_cost": ("因为要算 T 个分数。", 0)},
        S02: {"answer_max_subtraction": ("为了数值稳定。", 1),
              "answer_why_sqrt_d": ("点积的方差随 D 增长，除以 √D 让它变成 1。", 2)},
    },
    "carol": {
        S01: {"answer_single_head_shapes": ("X:[B,T,C] → Q,K,V:[B,T,D] → S:[B,T,T]。", 3),
              "answer_score_table_cost": (None, 0)},
        S02: {"answer_max_subtraction": (None, 0),
              "answer_why_sqrt_d": ("方差是 D，标准差是 √D，所以除以 √D。", 2)},
    },
}
STUDENTS = sorted(PLAN)
COMMENT = "老师的批注：{student} 的 {cell}"


def expected_scores(student: str, section: str) -> dict[str, float]:
    """Every graded cell's score: a right variant earns its visible and hidden test, a wrong
    one or an untouched stub earns nothing; answer cells get the manual score."""
    full = points(load_notebook("solutions", section))
    expected = {}
    for exercise, variant_id in PLAN[student][section].items():
        right = variant_id is not STUB and BANK[variant_id].expected is None
        for cell in visible_and_hidden(exercise):
            expected[cell] = full[cell] if right else 0.0
    for cell, (_, score) in ANSWERS[student][section].items():
        expected[cell] = float(score)
    assert set(expected) == set(full), "the plan must cover every graded cell"
    return expected


# --- running nbgrader as the instructor and as each student ---------------------------------

def clean_env(home: Path) -> dict[str, str]:
    """This environment's scripts first on PATH (nbgrader runs `alembic`), a HOME of one's own
    and no JUPYTER_* overrides, so config and the exchange cache come from that HOME. The class
    editions that grading kernels import come from the test session's cache (built once per
    version of the course, as the other grading tests find them), not built again in that HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    env["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    env["HOME"] = str(home)
    return env


def run(cmd: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=clean_env(home), capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd[2:])} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


class Instructor:
    def __init__(self, course: Path, exchange: Path, home: Path):
        self.course, self.exchange, self.home = course, exchange, home

    def nbgrader(self, *args: str) -> subprocess.CompletedProcess:
        return run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={self.course}",
                    f"--Exchange.root={self.exchange}", "--log-level=WARN"], self.course, self.home)

    def grade(self, section: str) -> subprocess.CompletedProcess:
        return run([sys.executable, "-m", "autograder.grade", section, "--jobs", "2"], self.course, self.home)


class Student:
    def __init__(self, student_id: str, home: Path, exchange: Path, python: Path):
        self.id, self.home, self.python = student_id, home, python   # python: the class edition's
        home.mkdir(parents=True)
        # What /etc/jupyter/nbgrader_config.py gives every student on a shared server.
        (home / ".jupyter").mkdir()
        (home / ".jupyter" / "nbgrader_config.py").write_text(
            f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n", encoding="utf-8")

    def nbgrader(self, *args: str) -> subprocess.CompletedProcess:
        return run([str(self.python), "-m", "nbgrader", *args, "--log-level=WARN"], self.home, self.home)

    def notebook(self, section: str) -> Path:
        return self.home / section / f"{section}.ipynb"

    def work_on(self, section: str) -> None:
        """Fill the solution cells with the planned variants and write the answers (slimmed:
        the demos cost seconds per run and are not graded)."""
        nb = slim(json.loads(self.notebook(section).read_text(encoding="utf-8")))
        for exercise, variant_id in PLAN[self.id][section].items():
            if variant_id is not STUB:
                nb = with_solution(nb, exercise, BANK[variant_id].source)
        for cell in nb["cells"]:
            answer = ANSWERS[self.id][section].get(grade_id(cell))
            if answer and answer[0] is not None:
                cell["source"] = answer[0]
        self.notebook(section).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")

    def do_assignments(self) -> None:
        self.nbgrader("fetch_assignment", S01, S02)
        for section in (S01, S02):
            released = json.loads(self.notebook(section).read_text(encoding="utf-8"))
            assert all(TEXT_STUB in "".join(c["source"]) for c in released["cells"]
                       if grade_id(c).startswith("answer_"))
            self.work_on(section)
            if section == S01:
                self.validate(section)
            self.nbgrader("submit", section, f"--student={self.id}")

    def validate(self, section: str) -> None:
        """`nbgrader validate` runs the notebook in the class edition: its visible checks diagnose."""
        out = subprocess.run([str(self.python), "-m", "nbgrader", "validate", str(self.notebook(section))],
                             cwd=self.home, env=clean_env(self.home), capture_output=True, text=True).stdout
        for exercise, variant_id in PLAN[self.id][section].items():
            code = "not-implemented" if variant_id is STUB else BANK[variant_id].expected
            if code:
                assert f"[{code}]" in out, f"{self.id}: validate shows no [{code}]:\n{out}"
        assert ("VALIDATION FAILED" in out) == any(
            v is STUB or BANK[v].expected for v in PLAN[self.id][section].values()), out

    def feedback(self, section: str) -> str:
        [html] = (self.home / section / "feedback").glob(f"*/{section}.html")  # <timestamp>/<nb>.html
        return html.read_text(encoding="utf-8")


def parallel(*calls) -> list:
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


# --- nothing may land in the repository ------------------------------------------------------

# Everything nbgrader could write if a command ran against the repository instead of the copy.
WATCHED = ("submitted", "autograded", "feedback", "release", "source", "exchange", "grading",
           "gradebook.db", "grades.csv", ".nbgrader.log", "nbgrader_config.py",
           f"notebooks/{S01}", f"notebooks/{S02}", f"solutions/{S01}", f"solutions/{S02}")


def repo_status() -> set[str]:
    """git status (ignored files included) of the paths this flow could write to.

    Limited to those paths: colleagues may be editing other files while the test runs."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", *WATCHED],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.splitlines())


# --- the flow -------------------------------------------------------------------------------

@pytest.mark.slow
def test_release_collect_grade_feedback_export_through_the_exchange(tmp_path):
    status_before = repo_status()
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    (course / "solutions").mkdir(parents=True)
    for section in (S01, S02):
        shutil.copytree(ROOT / "solutions" / section, course / "solutions" / section)
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    exchange.mkdir()
    os.chmod(exchange, 0o1777)  # every student writes inbound/, only its owner may delete
    (tmp_path / "home").mkdir()
    teacher = Instructor(course, exchange, tmp_path / "home" / "instructor")
    teacher.home.mkdir()
    python = install(tmp_path / "edition", answers_through=None).python
    students = [Student(s, tmp_path / "home" / s, exchange, python) for s in STUDENTS]

    # Roster, then release both sections.
    (course / "students.csv").write_text(
        "id,first_name,last_name,email\n" + "".join(f"{s},{s.title()},Student,{s}@example.edu\n" for s in STUDENTS),
        encoding="utf-8")
    teacher.nbgrader("db", "student", "import", "students.csv")
    teacher.nbgrader("generate_assignment", "*", "--force")   # both sections copied above, in one run
    for section in (S01, S02):  # one instructor command at a time: nbgrader's exchange does not lock
        teacher.nbgrader("release_assignment", section, "--force")
    assert (exchange / COURSE_ID / "outbound" / S01 / f"{S01}.ipynb").is_file()

    # Students fetch, work and submit, all at once.
    parallel(*[s.do_assignments for s in students])
    assert len(list((exchange / COURSE_ID / "inbound").iterdir())) == 2 * len(students)

    # Collect; grade 01 with the parallel command and 02 with stock nbgrader autograde.
    for section in (S01, S02):  # concurrent collects race on creating submitted/<student>/
        teacher.nbgrader("collect", section, "--ExchangeCollect.check_owner=False")
    for student in STUDENTS:
        for section in (S01, S02):
            assert (course / "submitted" / student / section / f"{section}.ipynb").is_file()
    graded = teacher.grade(S01)
    assert "未能批改" not in graded.stderr, graded.stderr
    teacher.nbgrader("autograde", S02)

    # Manual grading, the way the formgrader saves a score: only the answer cells a student
    # actually wrote need a grade (an untouched one was scored 0 by nbgrader itself).
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        for student in STUDENTS:
            for section in (S01, S02):
                notebook = gb.find_submission_notebook(section, section, student)
                needs = {g.name for g in notebook.grades if g.needs_manual_grade}
                written = {cell for cell, (text, _) in ANSWERS[student][section].items() if text is not None}
                assert needs == written, f"{student}/{section}: {needs} need a manual grade"
                for cell, (text, score) in ANSWERS[student][section].items():
                    grade = gb.find_grade(cell, section, section, student)
                    if text is None:
                        assert grade.auto_score == 0 and not grade.needs_manual_grade
                        continue
                    grade.manual_score, grade.needs_manual_grade = score, False
                    gb.find_comment(cell, section, section, student).manual_comment = \
                        COMMENT.format(student=student, cell=cell)
                gb.db.commit()

    # Exact score of every graded cell of every student.
    local = Course(course)
    for section in (S01, S02):
        scores = local.scores(section)
        for student in STUDENTS:
            assert scores[student] == expected_scores(student, section), f"{student}/{section}"

    # Feedback: generate, release through the exchange, fetch into each student's HOME.
    teacher.nbgrader("generate_feedback", "*", "--force")   # both sections, in one run
    for section in (S01, S02):
        teacher.nbgrader("release_feedback", section)
    parallel(*[lambda s=s: s.nbgrader("fetch_feedback", S01, S02, f"--student={s.id}") for s in students])
    for s in students:
        for section in (S01, S02):
            html = s.feedback(section)
            assert html == local.feedback_html(s.id, section)
            assert "BEGIN HIDDEN TESTS" not in html and "extended=True" not in html
            assert "评分要点" not in html, "the mark scheme of the answer cells must not reach students"
            for exercise, variant_id in PLAN[s.id][section].items():
                if variant_id is STUB:
                    assert "尚未实现" in html
                elif BANK[variant_id].expected:
                    assert f"[{BANK[variant_id].expected}]" in html, f"{s.id}: {variant_id}"
            for cell, (text, _) in ANSWERS[s.id][section].items():
                if text is None:
                    assert "No response." in html  # nbgrader's own comment on an untouched answer
                else:
                    assert text in html and COMMENT.format(student=s.id, cell=cell) in html

    # Export: one row per student and section, manual scores included in the totals.
    teacher.nbgrader("export")
    with open(course / "grades.csv", encoding="utf-8", newline="") as fh:
        rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(fh)}
    assert set(rows) == {(s, a) for s in STUDENTS for a in (S01, S02)}
    for (student, section), row in rows.items():
        expected = expected_scores(student, section)
        assert float(row["score"]) == float(row["raw_score"]) == sum(expected.values()), (student, section, row)
        assert float(row["max_score"]) == sum(points(load_notebook("solutions", section)).values())
        assert row["first_name"] == student.title() and row["email"] == f"{student}@example.edu"
    # The planned totals, spelled out (01: 3+3 auto, 3+2 manual; 02: 2+2+4+2 auto, 2+3 manual).
    assert {k: float(r["score"]) for k, r in rows.items()} == {
        ("alice", S01): 11, ("bob", S01): 4, ("carol", S01): 6,
        ("alice", S02): 15, ("bob", S02): 9, ("carol", S02): 6,
    }

    assert repo_status() == status_before, "the flow wrote into the repository"
