"""The course's class on a real JupyterHub (deploy/jupyterhub/), with real Unix accounts, and the
hostile students of issue 29 in the same round.

One Hub, one test (its Unix accounts exist once: pytest-xdist must not split it over two
workers; every failing check is still reported): a grading account running the formgrader as the Hub service
``attention`` and the intake service (each hand-in taken as it arrives; the issue-40 routes against it are
in tests/test_hub_exchange.py), an instructor (group ``formgrade-attention``), seven students (group
``nbgrader-attention``, a Hub group and a Unix group) and one account that may log in but is in no
course. The Hub serves HTTPS (a certificate made for the test). Every member logs in through the
Hub and works with an API token of their own:

    a student tries to squat the exchange's course folder before the first release
    instructor, through the formgrader service: generate + release section 02
    alice, bob, carol, through their own servers (as their Unix accounts): list, fetch, edit
        (bug-bank variants and short answers of tests/test_exchange_flow.py's plan), submit;
        eve submits the released notebook from a terminal (nbgrader's CLI)
    instructor: collect (the formgrader's Collect); a due date; then, before the second collect:
        carol hands in again (the newer submission must be the one graded);
        eve hands in a folder of links (the solutions, alice's collected notebook, a file only the
            grading account reads, /proc/self/environ) and a notebook that prints them, and makes a
            folder in inbound/ under carol's name;
        bob runs `nbgrader submit --student=alice` with a client-side Authenticator override;
        dave hands in after the due date, named and timestamped an hour before it;
        frank hands in a FIFO and a link to /etc/shadow; grace a submission over the size limit;
        the account in no course (mallory) hands in with the same override
    instructor: collect again; the grading account runs `python -m autograder.grade` (sandboxed);
        manual scores and comments through the formgrader's API; feedback generated, released
    students: fetch feedback (bob also fetches for his forged hand-in); the grading account exports
        grades.csv (UTF-8 with BOM) and an LMS gradebook

One student does their part in Chromium (the Assignments tab), and the instructor grades one of
their answers in the formgrader's page; the screenshots' folder is printed.

and asserts every cell's score, the feedback each student fetched, grades.csv and the LMS file,
what each attack got (nothing), then what each account must not be able to do: read the
repository's answers, another's processes' secrets, the course directory, the gradebook. Needs
root, configurable-http-proxy, PostgreSQL and the ``hub`` extra: skipped without them, except under
CI=true where that is a failure.
"""
from __future__ import annotations

import csv
import datetime
import io
import json
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from pathlib import Path

import pytest

from autograder import intake, sandbox
from autograder.notebook_format import cell_kind, grade_id, points
from deploy.jupyterhub.ceiling import Ceiling
from deploy.jupyterhub.classroom import MAX_SUBMISSION_KB
from utils.notebook import TEXT_STUB

from .conftest import ROOT, load_notebook, missing
from .hub_browser import AssignmentsTab, HubBrowser, grade_in_formgrader
from .hub_class import running_hub
from .nbgrader_course import slim, with_solution
from .test_exchange_flow import ANSWERS, BANK, COMMENT, PLAN, STUB, STUDENTS, expected_scores, parallel

pytestmark = [pytest.mark.slow, pytest.mark.needs("root", "postgres", "jupyterhub")]

SECTION = "02_scaling_and_softmax"
COURSE = "attention"
INSTRUCTOR, OUTSIDER = "teacher", "mallory"
# Students of the course who attack it (from a terminal: nbgrader's CLI and the shell).
LATE, LINKER, BLOCKER, HOARDER = "dave", "eve", "frank", "grace"
CLASS = [*STUDENTS, LATE, LINKER, BLOCKER, HOARDER]
GRADED = [*STUDENTS, LATE, LINKER, BLOCKER]   # grace's only hand-in is over the limit: never collected
# Names on the roster (as the gradebook shows them in grades.csv): Chinese, as in a Chinese class.
NAMES = {"alice": ("王", "爱丽丝"), "bob": ("李", "博"), "carol": ("陈", "卡罗尔"), "dave": ("张", "大卫"),
         "eve": ("刘", "伊娃"), "frank": ("赵", "弗兰克"), "grace": ("孙", "格蕾丝")}
# In Chromium: this student fetches and submits in the Assignments tab and fetches the feedback;
# the instructor grades this cell of theirs in the formgrader's page.
BROWSER_STUDENT, BROWSER_CELL = "carol", "answer_why_sqrt_d"
FG = f"/services/{COURSE}/formgrader/api"
# A client-side override of nbgrader's JupyterHubAuthPlugin: what a hostile student types. No check
# of the class may rely on the client's configuration.
NO_AUTH = "--Authenticator.plugin_class=nbgrader.auth.NoAuthPlugin"
OVERSIZE_MB = 25   # over the class's MAX_SUBMISSION_KB (deploy/jupyterhub/classroom.py)


def ok(response, what: str) -> dict | list:
    assert response.status_code == 200, f"{what}: {response.status_code} {response.text[:2000]}"
    body = response.json()
    if isinstance(body, dict) and "success" in body:
        assert body["success"], f"{what}: {body}"
    return body


@pytest.fixture(scope="module")
def hub():
    started = time.monotonic()
    with running_hub(CLASS, [INSTRUCTOR], [OUTSIDER]) as running:
        print(f"\nJupyterHub up after {time.monotonic() - started:.1f} s (log: {running.base / 'hub.log'})")
        yield running
    print(f"JupyterHub test module: {time.monotonic() - started:.1f} s in all")


# --- the students' side ----------------------------------------------------------------------

def edited(nb: dict, student: str, answers: bool = True) -> dict:
    """The student's work on the released notebook: the plan's variants and answers (slimmed)."""
    nb = slim(nb)
    for exercise, variant_id in PLAN[student][SECTION].items():
        if variant_id is not STUB:
            nb = with_solution(nb, exercise, BANK[variant_id].source)
    for cell in nb["cells"]:
        answer = ANSWERS[student][SECTION].get(grade_id(cell))
        if answers and answer and answer[0] is not None:
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


def feedback_path(student) -> str | None:
    """The feedback page the student fetched (``<section>/feedback/<timestamp>/<section>.html``), if any."""
    folder = student.get(f"/user/{student.name}/api/contents/{SECTION}/feedback")
    if folder.status_code == 404:
        return None
    # the first hand-in's (check_a_student_cannot_fetch_anothers_feedback counts them)
    first = min(entry["path"] for entry in ok(folder, "feedback folder")["content"])
    return f"{first}/{SECTION}.html"


def fetched_feedback(student, fetch: bool = True) -> str:
    """The feedback page the student fetched; "" when none came (check_each_student_fetched… fails)."""
    me = f"/user/{student.name}"
    if fetch:
        assignment_action(student, "fetch_feedback")
    path = feedback_path(student)
    if path is None:
        return ""
    return ok(student.get(f"{me}/api/contents/{path}", params={"format": "text"}), "feedback")["content"]


def cli(member, *args: str) -> subprocess.CompletedProcess:
    """nbgrader's command line as the member, in their home, from the students' environment, with the
    client-side override (a terminal in their JupyterLab has no Hub token in it)."""
    return member.run(str(member.hub.cls.class_python), "-m", "nbgrader", *args, NO_AUTH)


def sh(member, script: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = member.run("/bin/sh", "-ec", script)
    assert proc.returncode == 0 or not check, f"{member.name}: {script}\n{proc.stdout}\n{proc.stderr}"
    return proc


def give(member, name: str, nb: dict) -> Path:
    """A notebook in the member's home, theirs (what they could have written themselves)."""
    path = member.hub.cls.home(member.name) / name
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    os.chown(path, *member.ids())
    return path


def stamp(moment: datetime.datetime) -> str:
    """nbgrader's timestamp format (Exchange.timestamp_format), in UTC."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def hand_made(member, owner_named: str, moment: datetime.datetime, notebook: Path, extra: str = "") -> str:
    """A submission folder made by hand in inbound/ (no nbgrader submit): named after ``owner_named`` and
    ``moment``, with ``notebook``, a timestamp.txt saying ``moment``, the shell commands ``extra`` run
    inside it and then, as nbgrader's submit does last, a secret of its own and the folder opened up to
    0777; its name."""
    name = f"{owner_named}+{SECTION}+{stamp(moment)}+handmade"
    folder = member.hub.cls.exchange / COURSE / "inbound" / name
    sh(member, f"""mkdir '{folder}' && cd '{folder}'
        cp '{notebook}' {SECTION}.ipynb
        printf '%s' '{stamp(moment)}' > timestamp.txt
        {extra}
        head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > submission_secret.txt
        chmod 777 .""")
    return name


# What eve's notebook prints when graded: the files her links point at, if they were collected.
LEAKS = ("solutions.ipynb", "alice.ipynb", "reference.py", "environ")
LEAK_CELL = ("import pathlib\n"
             f"for name in {LEAKS!r}:\n"
             "    p = pathlib.Path(name)\n"
             "    print('LEAK', name, p.read_text(errors='replace')[:100000] if p.is_file() else 'absent')\n")


def reference_of_section(cls) -> Path:
    """The section's reference implementation in the grading account's environment (only it reads it)."""
    return cls.grading_repo / "utils" / "reference" / f"s{SECTION}.py"


def plant_links(hub, eve, released: dict) -> None:
    """Eve's second hand-in: her notebook prints what sits next to it; links to the solutions, alice's
    collected notebook, a grader-only file and the collecting process's environment."""
    cls = hub.cls
    nb = slim(released)
    first = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"].insert(first + 1, {"cell_type": "code", "id": "leak", "metadata": {}, "source": LEAK_CELL,
                                   "outputs": [], "execution_count": None})
    targets = {"solutions.ipynb": cls.course_dir / "solutions" / SECTION / f"{SECTION}.ipynb",
               "alice.ipynb": cls.course_dir / "submitted" / "alice" / SECTION / f"{SECTION}.ipynb",
               "reference.py": reference_of_section(cls), "environ": Path("/proc/self/environ")}
    links = "\n".join(f"ln -s '{target}' '{name}'" for name, target in targets.items())
    hand_made(eve, LINKER, datetime.datetime.now(datetime.timezone.utc), give(eve, "leak.ipynb", nb), links)


def attack(hub, graded: dict, duedate: datetime.datetime) -> dict:
    """Every hand-in attack of the round, after the first collect; what each command answered."""
    members, released = graded["members"], graded["released"][0]
    stub = give(members[LINKER], "stub.ipynb", slim(released))
    now = datetime.datetime.now(datetime.timezone.utc)
    plant_links(hub, members[LINKER], released)
    hand_made(members[LINKER], "carol", now + datetime.timedelta(days=1), stub)    # under carol's name
    late_work = give(members[LATE], "late.ipynb", edited(released, "alice", answers=False))
    hand_made(members[LATE], LATE, duedate - datetime.timedelta(hours=1), late_work)   # late, named on time
    hand_made(members[BLOCKER], BLOCKER, now, give(members[BLOCKER], "stub.ipynb", slim(released)),
              "mkfifo pipe && ln -s /etc/shadow shadow")
    hand_made(members[HOARDER], HOARDER, now, give(members[HOARDER], "stub.ipynb", slim(released)),
              f"head -c {OVERSIZE_MB}M /dev/zero > data.bin")
    outsider = graded["outsider"]
    (hub.cls.home(OUTSIDER) / SECTION).mkdir()
    give(outsider, f"{SECTION}/{SECTION}.ipynb", slim(released))
    os.chown(hub.cls.home(OUTSIDER) / SECTION, *outsider.ids())
    return {"forged_submit": cli(members["bob"], "submit", SECTION, "--student=alice"),
            "outsider_submit": cli(outsider, "submit", SECTION),
            "outsider_mkdir": sh(outsider, f"mkdir '{hub.cls.exchange / COURSE / 'inbound' / 'mallory+x'}'", False)}


def squat(hub, eve) -> list[subprocess.CompletedProcess]:
    """Before the first release: move or remove the exchange's course folder, make it, or a folder in it."""
    course = hub.cls.exchange / COURSE
    return [sh(eve, script, check=False) for script in
            (f"mv '{course}' '{course}.old'", f"rm -rf '{course}'", f"mkdir '{course}'",
             f"mkdir -p '{course / 'outbound' / SECTION}'", f"mkdir -p '{course / 'feedback' / 'x'}'")]


# --- the instructor's side -------------------------------------------------------------------

def submissions(teacher) -> dict[str, str]:
    """student -> the id of their submitted notebook in the gradebook."""
    return {sub["student"]: sub["id"]
            for sub in ok(teacher.get(f"{FG}/submitted_notebooks/{SECTION}/{SECTION}"), "submissions")}


def planned_answers(student: str) -> dict:
    return ANSWERS.get(student, {}).get(SECTION, {})


def grade_manually(teacher, in_browser: tuple[str, str] | None) -> None:
    """What the formgrader's page does: a score for each answer a student wrote, a comment
    (except ``in_browser``'s (student, cell), which the instructor grades in the browser)."""
    for student, sub_id in submissions(teacher).items():
        grades = ok(teacher.get(f"{FG}/grades", params={"submission_id": sub_id}), "grades")
        comments = {c["name"]: c for c in ok(teacher.get(f"{FG}/comments", params={"submission_id": sub_id}),
                                             "comments")}
        for grade in grades:   # (an answer left as released is scored 0 by nbgrader itself)
            text, score = planned_answers(student).get(grade["name"], (None, None))
            if text is None or not grade["needs_manual_grade"] or (student, grade["name"]) == in_browser:
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


def wait_for_intake(hub, student: str, since: datetime.datetime, seconds: float = 60) -> None:
    """Until the intake service has taken a hand-in of ``student`` made after ``since`` (naive UTC)."""
    deadline = time.monotonic() + seconds
    while not any(r.owner == student and r.received_at >= since for r in intake.receipts(hub.cls.intake_store)):
        assert time.monotonic() < deadline, f"the intake service took no hand-in of {student}:\n{hub.log()}"
        time.sleep(0.1)


def as_grader(hub, *cmd: str) -> subprocess.CompletedProcess:
    """A command of the grading account, in the course directory, from its environment (what a
    terminal in the formgrader's JupyterLab runs)."""
    from deploy.jupyterhub.classroom import as_user
    cls = hub.cls
    proc = as_user(cls.grader, [str(cls.grading_python), *cmd], cls.grader_environment(), cls.course_dir)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def roster_with_names(hub) -> None:
    """The roster again, with the students' Chinese names (what grades.csv must carry to Excel)."""
    roster = hub.cls.course_dir / "roster.csv"
    roster.write_text("id,last_name,first_name,email\n" + "".join(
        f"{s},{NAMES[s][0]},{NAMES[s][1]},{s}@example.edu\n" for s in CLASS), encoding="utf-8")
    os.chown(roster, *hub.member_as_account(hub.cls.grader).ids())
    as_grader(hub, "-m", "nbgrader", "db", "student", "import", "roster.csv", "--log-level=WARN")


@pytest.fixture(scope="module")
def browser(hub, tmp_path_factory):
    """Chromium, or None where it cannot run (then the browser's student works through the API)."""
    gap = missing("chromium")
    if gap:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the JupyterHub browser steps: {gap.reason} — to run them: {gap.enable}")
        yield None
        return
    shots = tmp_path_factory.mktemp("hub-screenshots")
    print(f"\nscreenshots of the JupyterHub test: {shots}")
    chromium = HubBrowser(hub, shots)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def graded(hub, browser):
    """The whole term of one assignment, attacks included; what the assertions below look at."""
    t0 = time.monotonic()
    teacher = hub.member(INSTRUCTOR)
    students = {name: hub.member(name) for name in STUDENTS}
    members = {**students, **{name: hub.member_as_account(name) for name in CLASS if name not in STUDENTS}}
    outsider = hub.member(OUTSIDER)
    # in parallel: the Hub answers a start request only when the server is up or after 10 s
    parallel(*[member.start_server for member in (*students.values(), outsider)], lambda: roster_with_names(hub))
    for member in (*students.values(), outsider):
        member.wait_for_server()
    print(f"servers: {time.monotonic() - t0:.1f} s", flush=True)

    squatting = squat(hub, members[LINKER])
    ok(teacher.post(f"{FG}/assignment/{SECTION}/assign"), "generate")
    ok(teacher.post(f"{FG}/assignment/{SECTION}/release"), "release")
    by_api = [s for name, s in students.items() if browser is None or name != BROWSER_STUDENT]
    tab = AssignmentsTab(browser, BROWSER_STUDENT) if browser else None
    with ThreadPoolExecutor(max_workers=len(by_api) + 1) as pool:   # the browser stays in this thread
        futures = [pool.submit(do_assignment, s) for s in by_api]
        eve = pool.submit(lambda: [cli(members[LINKER], action, SECTION) for action in ("fetch_assignment", "submit")])
        released = [do_assignment_in_browser(tab, students[BROWSER_STUDENT])] if tab else []
        released += [f.result() for f in futures]
        assert all(p.returncode == 0 for p in eve.result()), [p.stderr for p in eve.result()]
    print(f"released+submitted: {time.monotonic() - t0:.1f} s", flush=True)
    first_collect = ok(teacher.post(f"{FG}/assignment/{SECTION}/collect"), "collect")
    resubmitted = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assignment_action(students["carol"], "submit")                     # carol's newer hand-in, on time
    wait_for_intake(hub, "carol", resubmitted)   # its time is when the intake service took it
    duedate = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(seconds=1)
    as_grader(hub, "-m", "nbgrader", "db", "assignment", "add", SECTION, f"--duedate={stamp(duedate)}",
              "--log-level=WARN")
    time.sleep(max(0.0, (duedate - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 0.1)
    answered = attack(hub, {"members": members, "outsider": outsider, "released": released}, duedate)
    # not asserted here: a collect that one hand-in stops is what check_no_submission_stops_… looks for
    second_collect = teacher.post(f"{FG}/assignment/{SECTION}/collect").json()
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
    forged_feedback = cli(students["bob"], "fetch_feedback", SECTION)   # also for the hand-in named alice
    if tab and feedback[BROWSER_STUDENT]:
        tab.show(feedback_path(students[BROWSER_STUDENT]), COMMENT.format(student=BROWSER_STUDENT, cell=BROWSER_CELL))
    print(f"feedback: {time.monotonic() - t0:.1f} s", flush=True)
    as_grader(hub, "-m", "nbgrader", "export", "--log-level=WARN")
    for lms in ("canvas", "moodle"):
        as_grader(hub, "-m", "nbgrader", "export", "--exporter=autograder.export.LmsCsvExportPlugin",
                  f"--LmsCsvExportPlugin.lms={lms}", f"--to={lms}.csv", "--log-level=WARN")
    return {"teacher": teacher, "students": students, "members": members, "outsider": outsider,
            "released": released, "student_menu": tab.menu if tab else None, "grade_log": graded_run.stderr,
            "feedback": feedback, "squatting": squatting, "duedate": duedate, "resubmitted": resubmitted,
            "collect_log": first_collect.get("log", "") + second_collect.get("log", ""),
            "second_collect": second_collect,
            "forged_feedback": forged_feedback, **answered}


# --- the flow's results ------------------------------------------------------------------------

def solution_lines(section: str) -> set[str]:
    """Lines of the section's solution cells that its released notebook does not have (the answers)."""
    released = "\n".join(c["source"] for c in load_notebook("notebooks", section)["cells"])
    return {line.strip() for c in load_notebook("solutions", section)["cells"] if cell_kind(c) == "solution"
            for line in c["source"].splitlines() if len(line.strip()) >= 16 and line.strip() not in released}


INSTALLED = """import importlib.metadata as m, importlib.util as u, json, sys, utils
d = m.distribution(sys.argv[1])
print(json.dumps({"files": [str(d.locate_file(f)) for f in d.files], "utils": utils.__path__[0],
                  "autograder": u.find_spec("autograder") is not None}))"""


def check_students_work_in_the_class_edition(hub, graded):
    """What is installed in the students' environment holds no answer of section 02 and no autograder."""
    for nb in graded["released"]:
        assert all(TEXT_STUB in "".join(c["source"]) for c in nb["cells"] if grade_id(c).startswith("answer_"))
    edition = (hub.cls.class_env.parent / "class-edition" / "pyproject.toml").read_text(encoding="utf-8")
    [name] = re.findall(r'^name = "([^"]+)"', edition, re.M)
    probe = graded["students"]["alice"].run(str(hub.cls.class_python), "-c", INSTALLED, name)
    assert probe.returncode == 0, probe.stderr
    installed = json.loads(probe.stdout)
    assert not installed["autograder"] and Path(installed["utils"]).is_relative_to(hub.cls.class_env), installed
    answers = solution_lines(SECTION)
    assert len(answers) >= 8, answers
    sources = [Path(f) for f in installed["files"] if f.endswith(".py")]
    assert any(p.name == f"s{SECTION}.py" for p in sources), "the edition's utils/reference of the section"
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert not [line for line in answers if line in text], f"{path} holds an answer of {SECTION}"


def expected_cells(student: str) -> dict[str, float]:
    """Every graded cell's score: the plan's; dave hands in alice's code without answers; eve and frank
    the released notebook."""
    if student in STUDENTS:
        return expected_scores(student, SECTION)
    zero = dict.fromkeys(points(load_notebook("solutions", SECTION)), 0.0)
    if student == LATE:
        return {cell: 0.0 if cell.startswith("answer_") else score
                for cell, score in expected_scores("alice", SECTION).items()}
    return zero


def check_every_cell_scored_as_planned(_hub, graded):
    assert "未能批改" not in graded["grade_log"], graded["grade_log"]
    unsealed = sandbox.FALLBACK_WARNING.split("（")[0]   # the grading account's kernels are sandboxed
    assert unsealed not in graded["grade_log"], graded["grade_log"]
    assert cell_scores(graded["teacher"]) == {s: expected_cells(s) for s in GRADED}


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


def grades_csv(hub) -> tuple[bytes, dict[str, dict]]:
    raw = (hub.cls.course_dir / "grades.csv").read_bytes()
    rows = csv.DictReader(io.StringIO(raw.decode("utf-8-sig")))
    return raw, {r["student_id"]: r for r in rows if r["assignment"] == SECTION}


def check_grades_csv_opens_in_excel(hub, _graded):
    """UTF-8 with a BOM (Excel on Chinese Windows then reads UTF-8), the roster's Chinese names, every
    student's score after the late penalty; the LMS files carry the same scores."""
    raw, rows = grades_csv(hub)
    assert raw.startswith(b"\xef\xbb\xbf"), raw[:40]
    full = sum(points(load_notebook("solutions", SECTION)).values())
    totals = {s: sum(expected_cells(s).values()) if s in GRADED else 0.0 for s in CLASS}
    totals[LATE] = 0.0   # penalty "zero" (autograder/config.py): late scores nothing
    assert {s: (float(r["score"]), float(r["max_score"])) for s, r in rows.items()} == \
        {s: (totals[s], full) for s in CLASS}
    assert {s: (r["last_name"], r["first_name"]) for s, r in rows.items()} == NAMES
    assert rows[HOARDER]["timestamp"] == ""   # never collected
    course = hub.cls.course_dir
    with open(course / "canvas.csv", encoding="utf-8", newline="") as fh:
        canvas = list(csv.reader(fh))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", SECTION]
    assert {r[3]: (r[0], float(r[5])) for r in canvas[1:]} == {s: (f"{NAMES[s][0]}, {NAMES[s][1]}", totals[s])
                                                               for s in CLASS}
    with open(course / "moodle.csv", encoding="utf-8", newline="") as fh:
        moodle = list(csv.reader(fh))
    assert moodle[0] == ["Username", SECTION] and {r[0]: float(r[1]) for r in moodle[1:]} == totals


# --- the attacks of issue 29 ---------------------------------------------------------------------

def collected(hub, student: str) -> Path:
    return hub.cls.course_dir / "submitted" / student / SECTION


def check_the_course_folder_exists_before_any_student_could_take_it(hub, graded):
    """Before the first release eve could not make, move or remove the exchange's course folder, nor
    make a folder in it; the release went through (the fixture asserts it)."""
    assert not [p.args for p in graded["squatting"] if p.returncode == 0], graded["squatting"]
    course = hub.cls.exchange / COURSE
    assert course.stat().st_uid == hub.member_as_account(hub.cls.grader).ids()[0]
    assert sorted(p.name for p in course.iterdir()) == ["feedback", "inbound", "outbound"]


def check_links_in_a_submission_reach_nothing(hub, graded):
    """eve's links were never followed: not collected, and her notebook, run by the grader, found none."""
    assert sorted(p.name for p in collected(hub, LINKER).iterdir()) == \
        sorted([f"{SECTION}.ipynb", "submission_secret.txt", "timestamp.txt"])
    assert all(f"{name}" in graded["collect_log"] for name in LEAKS), graded["collect_log"]
    page = (hub.cls.course_dir / "feedback" / LINKER / SECTION / f"{SECTION}.html").read_text("utf-8")
    shown = unescape(page)   # what eve reads, outputs included
    assert all(f"LEAK {name} absent" in shown for name in LEAKS), "eve's notebook did not run as planned"
    reference = reference_of_section(hub.cls).read_text(encoding="utf-8")
    answers = [line for line in solution_lines(SECTION) if line in reference]
    assert answers, "the reference implements the section's solution lines"
    alice_wrote = ANSWERS["alice"][SECTION]["answer_why_sqrt_d"][0]
    for secret in ("BEGIN HIDDEN TESTS", "评分要点", alice_wrote, "JUPYTERHUB_API_TOKEN", *answers):
        assert secret not in shown, secret


def check_no_submission_stops_anothers_collection(hub, graded):
    """frank's FIFO and link to /etc/shadow are left out, grace (over the limit) is skipped by name,
    and carol's newer hand-in, after both, is the one graded."""
    assert graded["second_collect"]["success"], graded["second_collect"]
    _, rows = grades_csv(hub)
    carols = datetime.datetime.strptime(rows["carol"]["timestamp"], "%Y-%m-%d %H:%M:%S.%f")
    assert carols >= graded["resubmitted"], (carols, graded["resubmitted"])
    assert sorted(p.name for p in collected(hub, BLOCKER).iterdir()) == \
        sorted([f"{SECTION}.ipynb", "submission_secret.txt", "timestamp.txt"])
    log = graded["collect_log"]
    assert "pipe" in log and "shadow" in log, log
    over = f"a file over {MAX_SUBMISSION_KB * 1000} bytes"   # the intake's bound (autograder/tree.py)
    assert re.search(rf"Not collected: {HOARDER}'s submission .*: {over}", log), log
    assert not collected(hub, HOARDER).exists()


def check_a_hand_in_counts_for_the_account_that_made_it(hub, graded):
    """bob's `submit --student=alice` (client override) and eve's folder under carol's name were refused
    and logged; alice and carol are graded on their own work (check_every_cell_scored_as_planned)."""
    assert graded["forged_submit"].returncode == 0, graded["forged_submit"].stderr   # the client let it through
    log = graded["collect_log"]
    assert re.search(r"named after alice but made by bob", log), log
    assert re.search(rf"named after carol but made by {LINKER}", log), log
    for student in ("alice", "carol"):
        notebook = (collected(hub, student) / f"{SECTION}.ipynb").read_text(encoding="utf-8")
        assert ANSWERS[student][SECTION]["answer_why_sqrt_d"][0] in notebook


def check_an_account_in_no_course_cannot_hand_in(hub, graded):
    """mallory's submit with the client override and her mkdir in inbound/ were refused by the file
    system (inbound/ is writable by the course's Unix group only); nothing of hers was collected."""
    refused = graded["outsider_submit"]
    assert refused.returncode != 0 and "permission" in (refused.stdout + refused.stderr).lower(), refused.stderr
    assert graded["outsider_mkdir"].returncode != 0 and "Permission denied" in graded["outsider_mkdir"].stderr
    uid = graded["outsider"].ids()[0]
    assert not [p for p in (hub.cls.exchange / COURSE / "inbound").iterdir() if p.lstat().st_uid == uid]
    assert OUTSIDER not in cell_scores(graded["teacher"])


def check_the_hand_in_time_is_the_grading_sides(hub, graded):
    """dave handed in after the due date, named and timestamped an hour before it: recorded late (the
    kernel's change time), penalised to 0."""
    _, rows = grades_csv(hub)
    dave = rows[LATE]
    handed_in = datetime.datetime.strptime(dave["timestamp"], "%Y-%m-%d %H:%M:%S.%f")
    assert handed_in > graded["duedate"].replace(tzinfo=None), (dave, graded["duedate"])
    assert float(dave["raw_score"]) > 0 and float(dave["late_submission_penalty"]) == float(dave["raw_score"])
    assert float(dave["score"]) == 0.0


def check_a_student_cannot_fetch_anothers_feedback(hub, graded):
    """bob fetched feedback for his own hand-ins, the one named alice included: only his own came."""
    assert graded["forged_feedback"].returncode == 0, graded["forged_feedback"].stderr
    fetched = list((hub.cls.home("bob") / SECTION / "feedback").glob(f"*/{SECTION}.html"))
    assert len(fetched) == 1, fetched
    html = fetched[0].read_text(encoding="utf-8")
    assert not [text for text, _ in ANSWERS["alice"][SECTION].values() if text and text in html]
    assert "alice" not in html.replace("alice+", "")


def check_students_run_nothing_of_the_repository(hub, graded):
    """Students' servers run from the class edition's own environment: no file of the repository or of
    its environment is mapped into them, nor named in their environment; the grading account's
    environment, which holds the answers, is closed to them."""
    repo = str(ROOT)
    for name in STUDENTS:
        pid = server_pid(hub, name)
        assert Path(f"/proc/{pid}/exe").resolve().is_relative_to(hub.cls.class_env.resolve()), name
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert repo not in maps, [line for line in maps.splitlines() if repo in line][:5]
        assert repo not in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    bob = graded["students"]["bob"]
    denied(bob, f"cat {reference_of_section(hub.cls)}")
    denied(bob, f"ls {hub.cls.grading_repo}")


# --- the class's machinery -----------------------------------------------------------------------

def processes() -> dict[int, tuple[int, str]]:
    """pid -> (uid, command line) of every process of the machine."""
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found[int(proc.name)] = (proc.stat().st_uid, cmdline)
            except OSError:
                pass
    return found


def server_pid(hub, name: str) -> int:
    uid = hub.member_as_account(name).ids()[0]
    [pid] = [pid for pid, (owner, cmd) in processes().items() if owner == uid and "jupyterhub.singleuser" in cmd]
    return pid


def class_processes(hub) -> dict[str, int]:
    """The Hub, its proxy, the formgrader, the intake, the idle culler and alice's server: name -> pid."""
    cls, found = hub.cls, {}
    for pid, (uid, cmd) in processes().items():
        if "-m jupyterhub -f" in cmd:
            found["hub"] = pid
        if "configurable-http-proxy" in cmd and str(cls.port) in cmd:
            found["proxy"] = pid
        if "jupyterhub_idle_culler" in cmd:
            found["idle-culler"] = pid
        if "autograder.intake" in cmd:
            found["intake"] = pid
        if uid == hub.member_as_account(cls.grader).ids()[0] and "jupyterhub.singleuser" in cmd:
            found["formgrader"] = pid
    found["alice's server"] = server_pid(hub, "alice")
    return found


SECRET_NAMES = ("JUPYTERHUB_API_TOKEN", "CONFIGPROXY_AUTH_TOKEN", "JUPYTERHUB_CLIENT_SECRET", "JPY_API_TOKEN")


def check_no_secret_is_readable_by_another_account(hub, graded):
    """Every secret of the class (the cookie secret, the proxy's token, each service's and server's API
    token) is on no process's command line, and no student can read another's process environment,
    class.toml (the demo's password) or the Hub's files."""
    found = class_processes(hub)
    assert set(found) == {"hub", "proxy", "idle-culler", "formgrader", "intake", "alice's server"}, found
    secrets = {(hub.cls.hub_dir / "jupyterhub_cookie_secret").read_text().strip()}
    for pid in found.values():
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            name, _, value = entry.decode(errors="replace").partition("=")
            if name in SECRET_NAMES and value:
                secrets.add(value)
    assert len(secrets) >= 4, "the cookie secret, the proxy's token, the services' and the server's tokens"
    on_command_lines = [(pid, cmd) for pid, (_, cmd) in processes().items() if any(s in cmd for s in secrets)]
    assert not on_command_lines, on_command_lines
    bob = graded["students"]["bob"]
    for what, pid in found.items():
        denied(bob, f"cat /proc/{pid}/environ")
    for path in (hub.cls.settings, hub.cls.hub_dir / "jupyterhub_cookie_secret", hub.cls.ssl_key):
        denied(bob, f"cat {path}")


def check_servers_run_under_limits(hub, _graded):
    """Without systemd here: each student's server (and all it starts) in the account's cgroup with the
    class's ceiling, and under its rlimits."""
    pid = server_pid(hub, "alice")
    ceiling = Ceiling.where_available(f"jupyter-{COURSE}/alice")
    assert ceiling.holds(pid), Path(f"/proc/{pid}/cgroup").read_text()
    assert ceiling.limits() == {"memory_bytes": hub.cls.mem_limit_mb * 1024 * 1024, "cpus": hub.cls.cpu_limit,
                                "processes": hub.cls.max_processes}
    limits = Path(f"/proc/{pid}/limits").read_text()

    def soft(name: str) -> str:
        return re.search(rf"^{name}\s+(\S+)", limits, re.M).group(1)

    assert soft("Max address space") == str(hub.cls.mem_limit_mb * 1024 * 1024), limits
    assert soft("Max processes") == str(hub.cls.max_processes), limits
    assert soft("Max cpu time") == str(4 * 3600), limits
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[16]) == 5, stat   # nice


def check_the_idle_culler_watches_the_servers(hub, _graded):
    """jupyterhub-idle-culler runs as a Hub service and its calls to the Hub's API are allowed."""
    culls = [line for line in hub.log(whole=True).splitlines() if "idle-culler@" in line and "/hub/api/users" in line]
    assert culls and all(" 200 " in line for line in culls), culls[-5:]


def check_the_rubric_page_beside_the_formgrader(_hub, graded):
    """The section's 评分要点, generated from solutions/ into the course directory, opens in the staff's
    formgrader service; not for students."""
    page = f"/services/{COURSE}/files/{COURSE}/评分要点/{SECTION}.html"
    r = graded["teacher"].get(page)
    assert r.status_code == 200, r.status_code
    for cell in points(load_notebook("solutions", SECTION)):
        assert (cell in r.text) == cell.startswith("answer_"), cell
    assert graded["students"]["bob"].get(page).status_code == 403


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
    uid = graded["students"]["alice"].ids()[0]
    alices = [p.name for p in (exchange / "inbound").iterdir() if p.stat().st_uid == uid]
    assert len(alices) == 1 and len(alices[0].split("+")) == 4 and len(alices[0].split("+")[3]) >= 12, alices
    assert len(list((exchange / "feedback").glob("*.html"))) == len(GRADED)
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
    assert grader.run(*query).stdout.strip() == str(len(CLASS))
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
    assert listed == [] and refusal in hub.log(whole=True)
    # outbound/ is the course's students' (0750, group nbgrader-attention), not everyone's
    denied(outsider, f"ls {hub.cls.exchange / COURSE / 'outbound'}")
    # her own notebook folder in her home (the fixture wrote it): the Hub's groups refuse her submit
    body = outsider.post(f"{me}/assignments/submit", json={"course_id": COURSE, "assignment_id": SECTION}).json()
    assert not body["success"] and refusal in body["value"], body


CHECKS = (check_students_work_in_the_class_edition,
          check_every_cell_scored_as_planned,
          check_each_student_fetched_their_own_feedback,
          check_grades_csv_opens_in_excel,
          check_the_course_folder_exists_before_any_student_could_take_it,
          check_links_in_a_submission_reach_nothing,
          check_no_submission_stops_anothers_collection,
          check_a_hand_in_counts_for_the_account_that_made_it,
          check_an_account_in_no_course_cannot_hand_in,
          check_the_hand_in_time_is_the_grading_sides,
          check_a_student_cannot_fetch_anothers_feedback,
          check_students_run_nothing_of_the_repository,
          check_no_secret_is_readable_by_another_account,
          check_servers_run_under_limits,
          check_the_idle_culler_watches_the_servers,
          check_the_rubric_page_beside_the_formgrader,
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
        except Exception as failure:   # an assertion, or what an attack left behind (a missing folder)
            failures.append(f"{check.__name__}: {failure!r}")
        print(f"{check.__name__}: {time.monotonic() - started:.1f} s")
    assert not failures, "\n\n".join(failures)
