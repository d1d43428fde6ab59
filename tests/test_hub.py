"""The course's class on a real JupyterHub (deploy/jupyterhub/), with real Unix accounts.

One Hub, one test (its Unix accounts exist once: pytest-xdist must not split it over two
workers; every failing check is still reported): a grading account running the formgrader as the Hub service
``attention``, an instructor (group ``formgrade-attention``), three students (group
``nbgrader-attention``) and one account that may log in but is in no course. Every one of them
logs in through the Hub and works with an API token of their own:

    instructor, through the formgrader service: generate + release section 02
    students, through their own servers (as their Unix accounts): list, fetch, edit (bug-bank
        variants and short answers of tests/test_exchange_flow.py's plan), submit
    instructor: collect; the grading account runs `python -m autograder.grade` (sandboxed);
        manual scores and comments through the formgrader's API; feedback generated, released
    students: fetch feedback; the grading account exports grades.csv

One student does their part in Chromium (the Assignments tab), and the instructor grades one of
their answers in the formgrader's page; the screenshots' folder is printed.

and asserts every cell's score, the feedback each student fetched and grades.csv, then what
each account must not be able to do. Needs root, configurable-http-proxy, PostgreSQL and the
``hub`` extra: skipped without them, except under CI=true where that is a failure.
"""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from autograder import sandbox
from autograder.notebook_format import grade_id, points

from .conftest import load_notebook
from .browser_lab import why_no_browser
from .hub_browser import AssignmentsTab, HubBrowser, grade_in_formgrader
from .hub_class import missing_tools, running_hub
from .nbgrader_course import slim, with_solution
from .test_exchange_flow import ANSWERS, BANK, COMMENT, PLAN, STUB, STUDENTS, expected_scores, parallel

pytestmark = pytest.mark.slow

SECTION = "02_scaling_and_softmax"
COURSE = "attention"
INSTRUCTOR, OUTSIDER = "teacher", "mallory"
# In Chromium: this student fetches and submits in the Assignments tab and fetches the feedback;
# the instructor grades this cell of theirs in the formgrader's page.
BROWSER_STUDENT, BROWSER_CELL = "carol", "answer_why_sqrt_d"
FG = f"/services/{COURSE}/formgrader/api"


def ok(response, what: str) -> dict | list:
    assert response.status_code == 200, f"{what}: {response.status_code} {response.text[:2000]}"
    body = response.json()
    if isinstance(body, dict) and "success" in body:
        assert body["success"], f"{what}: {body}"
    return body


@pytest.fixture(scope="module")
def hub():
    reason = missing_tools()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the JupyterHub test: {reason}")
        pytest.skip(reason)
    started = time.monotonic()
    with running_hub(STUDENTS, [INSTRUCTOR], [OUTSIDER]) as running:
        print(f"\nJupyterHub up after {time.monotonic() - started:.1f} s (log: {running.base / 'hub.log'})")
        yield running
    print(f"JupyterHub test module: {time.monotonic() - started:.1f} s in all")


# --- the students' side ----------------------------------------------------------------------

def edited(nb: dict, student: str) -> dict:
    """The student's work on the released notebook: the plan's variants and answers (slimmed)."""
    nb = slim(nb)
    for exercise, variant_id in PLAN[student][SECTION].items():
        if variant_id is not STUB:
            nb = with_solution(nb, exercise, BANK[variant_id].source)
    for cell in nb["cells"]:
        answer = ANSWERS[student][SECTION].get(grade_id(cell))
        if answer and answer[0] is not None:
            cell["source"] = answer[0]
    return nb


def assignment_action(student, action: str) -> list:
    """The assignment list's API on the student's own server (what the Assignments tab calls)."""
    body = {"course_id": COURSE, "assignment_id": SECTION}
    return ok(student.post(f"/user/{student.name}/assignments/{action}", json=body), action)["value"]


def work_on(student) -> dict:
    """The student's edits, saved through the contents API; the released notebook."""
    path = f"/user/{student.name}/api/contents/{SECTION}/{SECTION}.ipynb"
    released = ok(student.get(path), "open")["content"]
    r = student.put(path, json={"type": "notebook", "format": "json", "content": edited(released, student.name)})
    assert r.status_code == 200, r.text
    return released


def do_assignment(student) -> dict:
    listed = ok(student.get(f"/user/{student.name}/assignments", params={"course_id": COURSE}), "list")["value"]
    assert [(a["assignment_id"], a["status"]) for a in listed] == [(SECTION, "released")], listed
    assignment_action(student, "fetch")
    released = work_on(student)
    assignment_action(student, "submit")
    return released


def do_assignment_in_browser(tab, student) -> dict:
    tab.fetch()
    released = work_on(student)
    tab.submit()
    return released


def feedback_path(student) -> str:
    """The feedback page the student fetched (``<section>/feedback/<timestamp>/<section>.html``)."""
    [stamp] = ok(student.get(f"/user/{student.name}/api/contents/{SECTION}/feedback"), "feedback folder")["content"]
    return f"{stamp['path']}/{SECTION}.html"


def fetched_feedback(student, fetch: bool = True) -> str:
    me = f"/user/{student.name}"
    if fetch:
        assignment_action(student, "fetch_feedback")
    html = ok(student.get(f"{me}/api/contents/{feedback_path(student)}", params={"format": "text"}), "feedback")
    return html["content"]


# --- the instructor's side -------------------------------------------------------------------

def submissions(teacher) -> dict[str, str]:
    """student -> the id of their submitted notebook in the gradebook."""
    return {sub["student"]: sub["id"]
            for sub in ok(teacher.get(f"{FG}/submitted_notebooks/{SECTION}/{SECTION}"), "submissions")}


def grade_manually(teacher, in_browser: tuple[str, str] | None) -> None:
    """What the formgrader's page does: a score for each answer a student wrote, a comment
    (except ``in_browser``'s (student, cell), which the instructor grades in the browser)."""
    for student, sub_id in submissions(teacher).items():
        grades = ok(teacher.get(f"{FG}/grades", params={"submission_id": sub_id}), "grades")
        comments = {c["name"]: c for c in ok(teacher.get(f"{FG}/comments", params={"submission_id": sub_id}),
                                             "comments")}
        for grade in grades:
            text, score = ANSWERS[student][SECTION].get(grade["name"], (None, None))
            assert grade["needs_manual_grade"] == (text is not None), (student, grade)
            if text is None or (student, grade["name"]) == in_browser:
                continue
            ok(teacher.put(f"{FG}/grade/{grade['id']}", json={"manual_score": score}), "grade")
            ok(teacher.put(f"{FG}/comment/{comments[grade['name']]['id']}",
                           json={"manual_comment": COMMENT.format(student=student, cell=grade["name"])}), "comment")


def cell_scores(teacher) -> dict[str, dict[str, float]]:
    """student -> {graded cell: score}, as the formgrader's API reports them."""
    scores = {}
    for sub in ok(teacher.get(f"{FG}/submitted_notebooks/{SECTION}/{SECTION}"), "submissions"):
        grades = ok(teacher.get(f"{FG}/grades", params={"submission_id": sub["id"]}), "grades")
        scores[sub["student"]] = {g["name"]: g["auto_score"] if g["manual_score"] is None else g["manual_score"]
                                  for g in grades}
    return scores


def wait_for_grade(teacher, student: str, cell: str, score: float, comment: str, seconds: float = 30) -> None:
    """The formgrader's page saves in the background: until the gradebook has score and comment."""
    deadline = time.monotonic() + seconds
    sub_id = submissions(teacher)[student]
    while True:
        comments = ok(teacher.get(f"{FG}/comments", params={"submission_id": sub_id}), "comments")
        saved = ({c["name"]: c["manual_comment"] for c in comments}[cell], cell_scores(teacher)[student][cell])
        if saved == (comment, score):
            return
        assert time.monotonic() < deadline, f"the formgrader did not save {student}'s {cell}: {saved}"
        time.sleep(0.5)


def as_grader(hub, *cmd: str) -> subprocess.CompletedProcess:
    """A command of the grading account, in the course directory, with the service's environment
    (what a terminal in the formgrader's JupyterLab runs)."""
    from deploy.jupyterhub.classroom import as_user
    cls = hub.cls
    proc = as_user(cls.grader, [sys.executable, *cmd], cls.grader_environment(), cls.course_dir)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def browser(hub, tmp_path_factory):
    """Chromium, or None where it cannot run (then the browser's student works through the API)."""
    reason = why_no_browser()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the JupyterHub browser steps: {reason}")
        yield None
        return
    shots = tmp_path_factory.mktemp("hub-screenshots")
    print(f"\nscreenshots of the JupyterHub test: {shots}")
    chromium = HubBrowser(hub, shots)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def graded(hub, browser):
    """The whole term of one assignment; what the assertions below look at."""
    t0 = time.monotonic()
    teacher = hub.member(INSTRUCTOR)
    students = {name: hub.member(name) for name in STUDENTS}
    outsider = hub.member(OUTSIDER)
    # in parallel: the Hub answers a start request only when the server is up or after 10 s
    parallel(*[member.start_server for member in (*students.values(), outsider)])
    for member in (*students.values(), outsider):
        member.wait_for_server()

    print(f"servers: {time.monotonic() - t0:.1f} s", flush=True)
    ok(teacher.post(f"{FG}/assignment/{SECTION}/assign"), "generate")
    ok(teacher.post(f"{FG}/assignment/{SECTION}/release"), "release")
    by_api = [s for name, s in students.items() if browser is None or name != BROWSER_STUDENT]
    tab = AssignmentsTab(browser, BROWSER_STUDENT) if browser else None
    with ThreadPoolExecutor(max_workers=len(by_api)) as pool:   # the browser stays in this thread
        futures = [pool.submit(do_assignment, s) for s in by_api]
        released = [do_assignment_in_browser(tab, students[BROWSER_STUDENT])] if tab else []
        released += [f.result() for f in futures]
    print(f"released+submitted: {time.monotonic() - t0:.1f} s", flush=True)
    ok(teacher.post(f"{FG}/assignment/{SECTION}/collect"), "collect")
    graded_run = as_grader(hub, "-m", "autograder.grade", SECTION, "--jobs", "2")
    print(f"collected+graded: {time.monotonic() - t0:.1f} s", flush=True)
    grade_manually(teacher, (BROWSER_STUDENT, BROWSER_CELL) if browser else None)
    if browser:
        _, score = ANSWERS[BROWSER_STUDENT][SECTION][BROWSER_CELL]
        comment = COMMENT.format(student=BROWSER_STUDENT, cell=BROWSER_CELL)
        grade_in_formgrader(browser, submissions(teacher)[BROWSER_STUDENT], BROWSER_CELL, score, comment)
        wait_for_grade(teacher, BROWSER_STUDENT, BROWSER_CELL, score, comment)
    ok(teacher.post(f"{FG}/assignment/{SECTION}/generate_feedback"), "generate_feedback")
    ok(teacher.post(f"{FG}/assignment/{SECTION}/release_feedback"), "release_feedback")
    if tab:
        tab.fetch_feedback()
    feedback = dict(zip(students, parallel(*[lambda s=s: fetched_feedback(s, fetch=s in by_api)
                                             for s in students.values()])))
    if tab:
        tab.show(feedback_path(students[BROWSER_STUDENT]), COMMENT.format(student=BROWSER_STUDENT, cell=BROWSER_CELL))
    print(f"feedback: {time.monotonic() - t0:.1f} s", flush=True)
    as_grader(hub, "-m", "nbgrader", "export", "--log-level=WARN")
    return {"teacher": teacher, "students": students, "outsider": outsider, "released": released,
            "student_menu": tab.menu if tab else None,
            "grade_log": graded_run.stderr, "feedback": feedback}


# --- the flow's results ------------------------------------------------------------------------

def check_students_work_in_the_class_edition(hub, graded):
    from autograder.config import TEXT_STUB
    for nb in graded["released"]:
        assert all(TEXT_STUB in "".join(c["source"]) for c in nb["cells"] if grade_id(c).startswith("answer_"))
    probe = graded["students"]["alice"].run(str(hub.cls.class_python), "-c",
                                              "import utils.reference as r, utils.edition as e; print(r.__all__)")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]", "no reference solution of section 02 may reach the students"


def check_every_cell_scored_as_planned(_hub, graded):
    assert "未能批改" not in graded["grade_log"], graded["grade_log"]
    unsealed = sandbox.FALLBACK_WARNING.split("（")[0]   # the grading account's kernels are sandboxed
    assert unsealed not in graded["grade_log"], graded["grade_log"]
    scores = cell_scores(graded["teacher"])
    assert scores == {s: expected_scores(s, SECTION) for s in STUDENTS}


def check_each_student_fetched_their_own_feedback(hub, graded):
    for student, html in graded["feedback"].items():
        assert html == (hub.cls.course_dir / "feedback" / student / SECTION / f"{SECTION}.html").read_text("utf-8")
        assert "BEGIN HIDDEN TESTS" not in html and "评分要点" not in html
        for exercise, variant_id in PLAN[student][SECTION].items():
            if variant_id is STUB:
                assert "尚未实现" in html
            elif BANK[variant_id].expected:
                assert f"[{BANK[variant_id].expected}]" in html, f"{student}: {variant_id}"
        for cell, (text, _) in ANSWERS[student][SECTION].items():
            if text is None:
                assert "No response." in html
            else:
                assert text in html and COMMENT.format(student=student, cell=cell) in html
        others = [s for s in STUDENTS if s != student]
        assert not any(COMMENT.format(student=o, cell=c) in html for o in others for c in ANSWERS[o][SECTION])


def check_grades_csv(hub, _graded):
    rows = list(csv.DictReader(io.StringIO((hub.cls.course_dir / "grades.csv").read_text("utf-8"))))
    full = sum(points(load_notebook("solutions", SECTION)).values())
    assert {r["student_id"]: (float(r["score"]), float(r["max_score"])) for r in rows if r["assignment"] == SECTION} \
        == {s: (sum(expected_scores(s, SECTION).values()), full) for s in STUDENTS}


# --- what the accounts must not be able to do --------------------------------------------------

def denied(member, script: str) -> str:
    """Run ``script`` as the member's Unix account; it must fail for lack of permission."""
    proc = member.run("/bin/sh", "-c", script)
    assert proc.returncode != 0, f"{member.name} could: {script}\n{proc.stdout}"
    assert "Permission denied" in proc.stderr or "Operation not permitted" in proc.stderr, proc.stderr
    return proc.stderr


def check_a_student_cannot_find_another_students_submission_or_feedback(hub, graded):
    bob, exchange = graded["students"]["bob"], hub.cls.exchange / COURSE
    denied(bob, f"ls {exchange / 'inbound'}")
    denied(bob, f"ls {exchange / 'feedback'}")
    denied(bob, f"ls {hub.cls.home('alice')}")     # alice's fetched copy, her feedback, her cache
    # what is there: each submission under a name with a random part (nbgrader's add_random_string)
    alices = [p.name for p in (exchange / "inbound").iterdir() if p.name.startswith("alice+")]
    assert len(alices) == 1 and len(alices[0].split("+")) == 4 and len(alices[0].split("+")[3]) >= 12, alices
    assert len(list((exchange / "feedback").glob("*.html"))) == len(STUDENTS)
    # That name is all that hides it: nbgrader makes the folder 0777 and the files 0644, so whoever
    # knows the name can read the submission (docs/jupyterhub.md says so; pinned here).
    assert bob.run("cat", str(exchange / "inbound" / alices[0] / f"{SECTION}.ipynb")).returncode == 0


def check_a_student_cannot_read_the_course_directory(hub, graded):
    bob, course = graded["students"]["bob"], hub.cls.course_dir
    for path in (course / "solutions" / SECTION / f"{SECTION}.ipynb", course / "grades.csv",
                 course / "submitted" / "alice" / SECTION / f"{SECTION}.ipynb",
                 course / "feedback" / "alice" / SECTION / f"{SECTION}.html"):
        assert path.is_file(), path
        denied(bob, f"cat {path}")
    denied(bob, f"ls {course}")


def check_only_the_grading_account_reaches_the_gradebook(hub, graded):
    socket_dir, port = hub.cls.db_url.split("host=")[1].split("&port=")
    query = ["psql", f"host={socket_dir} port={port} dbname={COURSE} user={hub.cls.grader}", "-tAc",
             "select count(*) from student"]
    grader = hub.member_as_account(hub.cls.grader)
    assert grader.run(*query).stdout.strip() == str(len(STUDENTS))
    proc = graded["students"]["bob"].run(*query)
    assert proc.returncode != 0 and "Peer authentication failed" in proc.stderr, proc.stderr


def check_only_the_course_staff_reach_the_formgrader(_hub, graded):
    assert graded["teacher"].get(f"{FG}/assignments").status_code == 200
    for member in (*graded["students"].values(), graded["outsider"]):
        assert member.get(f"{FG}/assignments").status_code == 403, member.name
        assert member.get(f"/services/{COURSE}/lab").status_code == 403, member.name
    # nor another student's server, nor a formgrader in their own (disabled for students)
    bob = graded["students"]["bob"]
    assert bob.get("/user/alice/api/contents").status_code == 403
    assert bob.get("/user/bob/api/contents").status_code == 200
    assert bob.get("/user/bob/formgrader").status_code == 404
    if graded["student_menu"] is not None:   # and no formgrader or create-assignment in the Nbgrader menu
        assert "nbgrader:open-assignment-list" in graded["student_menu"], graded["student_menu"]
        assert not {"nbgrader:open-formgrader", "nbgrader:open-create-assignment"} & set(graded["student_menu"])


def check_a_student_cannot_change_the_released_assignment(hub, graded):
    bob, exchange = graded["students"]["bob"], hub.cls.exchange
    released = exchange / COURSE / "outbound" / SECTION / f"{SECTION}.ipynb"
    before = released.read_bytes()
    denied(bob, f"echo '{{}}' > {released}")
    denied(bob, f"touch {released.parent / 'extra.py'}")
    denied(bob, f"rm -rf {released.parent}")
    denied(bob, f"mv {exchange / COURSE} {exchange / 'elsewhere'}")   # the root's sticky bit
    assert released.read_bytes() == before
    assert before == (hub.cls.course_dir / "notebooks" / SECTION / f"{SECTION}.ipynb").read_bytes()


def check_an_account_outside_the_course_is_refused(hub, graded):
    outsider = graded["outsider"]
    me = f"/user/{outsider.name}"
    listed = ok(outsider.get(f"{me}/assignments", params={"course_id": COURSE}), "list")["value"]
    assert listed == []
    refusal = "You do not have access to this course."   # nbgrader 0.9.6's words
    # fetch answers with the (empty) list whatever happened; the refusal is in the server's log
    listed = ok(outsider.post(f"{me}/assignments/fetch", json={"course_id": COURSE, "assignment_id": SECTION}),
                "fetch")["value"]
    assert listed == [] and outsider.get(f"{me}/api/contents/{SECTION}").status_code == 404
    assert refusal in hub.log(whole=True)
    # The released notebook itself is not secret: nbgrader leaves outbound/ readable by everyone (0755).
    copied = outsider.run("cp", "-r", str(hub.cls.exchange / COURSE / "outbound" / SECTION), SECTION)
    assert copied.returncode == 0, copied.stderr
    body = outsider.post(f"{me}/assignments/submit", json={"course_id": COURSE, "assignment_id": SECTION}).json()
    assert not body["success"] and refusal in body["value"], body


CHECKS = (check_students_work_in_the_class_edition,
          check_every_cell_scored_as_planned,
          check_each_student_fetched_their_own_feedback,
          check_grades_csv,
          check_a_student_cannot_find_another_students_submission_or_feedback,
          check_a_student_cannot_read_the_course_directory,
          check_only_the_grading_account_reaches_the_gradebook,
          check_only_the_course_staff_reach_the_formgrader,
          check_a_student_cannot_change_the_released_assignment,
          check_an_account_outside_the_course_is_refused)


def test_a_class_on_jupyterhub(hub, graded):
    """Every check above on the one Hub (one test: its Unix accounts exist once, so pytest-xdist
    must not hand parts of it to two workers); every failing check is reported."""
    failures = []
    for check in CHECKS:
        started = time.monotonic()
        try:
            check(hub, graded)
        except AssertionError as failure:
            failures.append(f"{check.__name__}: {failure}")
        print(f"{check.__name__}: {time.monotonic() - started:.1f} s")
    assert not failures, "\n\n".join(failures)
