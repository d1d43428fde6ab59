"""The class's exchange and ceilings attacked from real Unix accounts, without a Hub (issue 40): the grading
account's intake service and ``nbgrader collect`` with the class's own config (deploy/jupyterhub/classroom.py),
students handing in from their own accounts, and each account's cgroup (deploy/jupyterhub/ceiling.py).

    kim hands in a 1,200-level folder: only her hand-in is skipped (named), ivan's is collected;
    kim hands in 24 nested folders of 200-byte names after a good hand-in: skipped and named, her
        earlier copy kept, ivan's newer hand-in collected;
    judy hands in, dirties a shared mapping of her notebook before the deadline and writes a late
        answer through it after: what is graded is what she handed in, at the time it was taken;
    ivan, in his cgroup, takes more memory, processes and CPU than his ceiling: stopped there, while
        judy's kernel, in hers, runs.

Needs root (it makes the accounts); under CI=true a skip is a failure (tests/conftest.py).
"""
from __future__ import annotations

import datetime
import errno
import os
import re
import pwd
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from jupyterhub.spawner import set_user_setuid

from deploy.jupyterhub.ceiling import Ceiling, server_preexec
from deploy.jupyterhub.classroom import (Classroom, add_account, as_user, grader_nbgrader_config, intake_command,
                                         prepare_exchange, set_student_group)

from .checkout import checkout_for
from .hub_class import throwaway_class

pytestmark = pytest.mark.needs("root")

COURSE = "intaketest"          # not the Hub test's: its accounts and group may exist at the same time
STUDENTS = ["ivan", "judy", "kim"]
STAMP = "%Y-%m-%d %H:%M:%S.%f UTC"   # nbgrader's Exchange.timestamp_format

# What nbgrader's submit does, as the student: the notebook, `extra` (Python, run in the folder),
# timestamp.txt, the secret last, the folder opened up.
HAND_IN = r"""
import os, secrets, sys
folder, notebook, text, extra = sys.argv[1:5]
os.mkdir(folder)
os.chdir(folder)
with open(notebook, "w") as fh:
    fh.write(text.ljust(4096))
exec(extra)
os.chdir(folder)
with open("timestamp.txt", "w") as fh:
    fh.write("2000-01-01 00:00:00.000000 UTC")
with open("submission_secret.txt", "w") as fh:
    fh.write(secrets.token_hex(64))
os.chmod(folder, 0o777)
"""
DEEP = "for _ in range(1200):\n    os.mkdir('d'); os.chdir('d')"
LONG_NAMES = "for _ in range(24):\n    os.mkdir('x' * 200); os.chdir('x' * 200)\nopen('answers.py', 'w').close()"
# Then, through a shared mapping of the handed-in notebook: one line on stdin dirties its page (the
# kernel stamps ctime at that first write), the next writes the late answer (no new ctime).
MAPPED = r"""
import mmap, os, sys
with open(sys.argv[1], "r+b") as fh:
    page = mmap.mmap(fh.fileno(), 4096)
sys.stdin.readline()
page[0:1] = page[0:1]
print("dirty", flush=True)
sys.stdin.readline()
page[100:111] = b"LATE ANSWER"
print("written", flush=True)
sys.stdin.readline()
"""


def student_env(cls: Classroom, name: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(cls.home(name)), "LANG": "C.UTF-8"}


# (checkout, its Python) as every account of the class runs them: tests/checkout.py (set by exchange_class)
RUN: dict[str, str] = {}


def grader_env(cls: Classroom) -> dict[str, str]:
    """The grading account's commands, from this checkout (RUN: its environment readable by every account)."""
    return {"PATH": os.pathsep.join([str(Path(RUN["python"]).parent), "/usr/bin", "/bin"]),
            "HOME": str(cls.home(cls.grader)), "LANG": "C.UTF-8", "PYTHONPATH": RUN["checkout"]}


def as_grader(cls: Classroom, *args: str) -> subprocess.CompletedProcess:
    return as_user(cls.grader, [RUN["python"], *args], grader_env(cls), cls.course_dir)


@pytest.fixture(scope="module")
def exchange_class():
    """Accounts, the exchange as classroom.py makes it, the course directory with a gradebook, and the
    intake service running as the grading account."""
    cls = Classroom(course_id=COURSE, grader=f"grader-{COURSE}", students=STUDENTS)
    with throwaway_class(cls), tempfile.TemporaryDirectory(prefix="checkout-") as linked:
        cls.root.mkdir()
        for user in cls.members:
            add_account(cls, user)
        os.chmod(linked, 0o755)
        checkout, python = checkout_for(pwd.getpwnam(cls.grader).pw_uid, Path(linked))
        RUN.update(checkout=str(checkout), python=python)
        set_student_group(cls)
        prepare_exchange(cls)
        cls.course_dir.mkdir(mode=0o700)
        cls.db_url = f"sqlite:///{cls.course_dir / 'gradebook.db'}"
        (cls.course_dir / "nbgrader_config.py").write_text(grader_nbgrader_config(cls), encoding="utf-8")
        (cls.course_dir / "students.csv").write_text("id\n" + "\n".join(STUDENTS) + "\n", encoding="utf-8")
        subprocess.run(["chown", "-R", f"{cls.grader}:{cls.grader}", str(cls.course_dir)], check=True)
        roster = as_grader(cls, "-m", "nbgrader", "db", "student", "import", "students.csv", "--log-level=WARN")
        assert roster.returncode == 0, roster.stderr
        service = subprocess.Popen(
            ["runuser", "-u", cls.grader, "--", "env", "-i", *(f"{k}={v}" for k, v in grader_env(cls).items()),
             *intake_command(cls, RUN["python"]), "--interval", "0.1"],
            cwd=cls.course_dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            yield cls
        finally:
            service.terminate()
            print(service.communicate(timeout=30)[1][-3000:])


def assignment(cls: Classroom, name: str, duedate: datetime.datetime | None = None) -> str:
    due = [f"--duedate={duedate.strftime(STAMP)}"] if duedate else []
    proc = as_grader(cls, "-m", "nbgrader", "db", "assignment", "add", name, *due, "--log-level=WARN")
    assert proc.returncode == 0, proc.stderr
    return name


def hand_in(cls: Classroom, student: str, name: str, text: str, extra: str = "") -> Path:
    """A hand-in of ``student`` for assignment ``name``, made as nbgrader's submit makes it; its folder."""
    now = datetime.datetime.now(datetime.timezone.utc)
    folder = cls.exchange / COURSE / "inbound" / f"{student}+{name}+{now.strftime(STAMP)}+{secrets.token_hex(8)}"
    proc = as_user(student, ["/usr/bin/python3", "-c", HAND_IN, str(folder), f"{name}.ipynb", text, extra],
                   student_env(cls, student), cls.home(student))
    assert proc.returncode == 0, proc.stderr
    return folder


def taken(cls: Classroom, folder: Path, seconds: float = 20) -> None:
    """Until the intake service has taken the hand-in ``folder``."""
    deadline = time.monotonic() + seconds
    while not (cls.intake_store / folder.name).exists():
        assert time.monotonic() < deadline, f"the intake service did not take {folder.name}"
        time.sleep(0.05)


def collect(cls: Classroom, name: str) -> subprocess.CompletedProcess:
    """``nbgrader collect --update`` as the grading account (what the formgrader's Collect runs)."""
    return as_grader(cls, "-m", "nbgrader", "collect", name, "--update")


def collected(cls: Classroom, student: str, name: str) -> str:
    return (cls.course_dir / "submitted" / student / name / f"{name}.ipynb").read_text().strip()


def test_a_deep_folder_stops_only_its_own_hand_in(exchange_class):
    cls = exchange_class
    name = assignment(cls, "deep")
    taken(cls, hand_in(cls, "ivan", name, "IVAN ON TIME"))
    deep = hand_in(cls, "kim", name, "KIM", extra=DEEP)
    proc = collect(cls, name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert collected(cls, "ivan", name) == "IVAN ON TIME"
    assert not (cls.course_dir / "submitted" / "kim" / name).exists()
    assert re.search(rf"Not collected: kim's submission {re.escape(deep.name)}: folders deeper than", proc.stderr), \
        proc.stderr[-3000:]


def test_long_names_stop_only_their_own_hand_in(exchange_class):
    cls = exchange_class
    name = assignment(cls, "long")
    taken(cls, hand_in(cls, "kim", name, "KIM FIRST"))
    assert collect(cls, name).returncode == 0 and collected(cls, "kim", name) == "KIM FIRST"
    taken(cls, hand_in(cls, "ivan", name, "IVAN"))
    long = hand_in(cls, "kim", name, "KIM LONG", extra=LONG_NAMES)   # the newest: copied first
    proc = collect(cls, name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert collected(cls, "ivan", name) == "IVAN"
    assert collected(cls, "kim", name) == "KIM FIRST"   # her earlier copy is kept
    assert re.search(rf"Not collected: kim's submission {re.escape(long.name)}: a path longer than", proc.stderr), \
        proc.stderr[-3000:]


def test_a_late_write_through_a_mapping_changes_nothing_graded(exchange_class):
    cls = exchange_class
    name = assignment(cls, "mapped")
    folder = hand_in(cls, "judy", name, "JUDY ON TIME")
    notebook = folder / f"{name}.ipynb"
    mapping = subprocess.Popen(["runuser", "-u", "judy", "--", "/usr/bin/python3", "-c", MAPPED, str(notebook)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        taken(cls, folder)
        mapping.stdin.write("dirty\n")
        mapping.stdin.flush()
        assert mapping.stdout.readline().strip() == "dirty"
        duedate = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=0.1)
        assignment(cls, name, duedate)   # takes longer than 0.1 s
        assert datetime.datetime.now(datetime.timezone.utc) > duedate
        mapping.stdin.write("write\n")
        mapping.stdin.flush()
        assert mapping.stdout.readline().strip() == "written"
        assert "LATE ANSWER" in notebook.read_text()   # the attack worked on her folder
        proc = collect(cls, name)
    finally:
        mapping.communicate("done\n", timeout=30)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert collected(cls, "judy", name) == "JUDY ON TIME"
    stamp = (cls.course_dir / "submitted" / "judy" / name / "timestamp.txt").read_text()
    handed_in = datetime.datetime.strptime(stamp, STAMP).replace(tzinfo=datetime.timezone.utc)
    assert handed_in <= duedate


# ivan's load: more memory, processes and CPU than his ceiling; one line of figures for each.
HOG = r"""
import os, signal, time
def fork(child):
    pid = os.fork()
    if pid == 0:
        child()
        os._exit(0)
    return pid
def hold_memory():
    block = bytearray(60 * 2**20)
    block[::4096] = b"x" * len(block[::4096])   # every page touched
    time.sleep(3)
statuses = [os.waitpid(pid, 0)[1] for pid in [fork(hold_memory) for _ in range(6)]]
print("killed", sum(os.WIFSIGNALED(s) and os.WTERMSIG(s) == signal.SIGKILL for s in statuses), flush=True)
kids, refused = [], 0
while len(kids) < 500:
    try:
        kids.append(fork(lambda: time.sleep(10)))
    except OSError as err:
        refused = err.errno
        break
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print("forked", len(kids), refused, flush=True)
before, start = os.times(), time.monotonic()
def spin():
    while time.monotonic() - start < 2:
        pass
for pid in [fork(spin), fork(spin)]:
    os.waitpid(pid, 0)
after = os.times()
print("cpu", after.children_user + after.children_system - before.children_user - before.children_system, flush=True)
"""
KERNEL_CODE = "print('judy', sum(range(10**6)))"
# A tenth of a CPU: two busy processes pass it in every 100 ms period even on a machine others keep busy.
CEILING = {"memory_bytes": 200 * 2**20, "cpus": 0.1, "processes": 64}


def in_ceiling(cls: Classroom, user: str, cmd: list[str], ceiling: dict) -> tuple[subprocess.Popen, Ceiling]:
    """``cmd`` as ``user`` in a cgroup of their own with ``ceiling``, started as the class's spawner starts a
    server."""
    group = Ceiling.where_available(f"test-{COURSE}/{user}")
    group.set_limits(**ceiling)
    env = {**student_env(cls, user), "PATH": os.pathsep.join([str(Path(RUN["python"]).parent), "/usr/bin", "/bin"])}
    proc = subprocess.Popen(cmd, env=env, cwd=cls.home(user), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=server_preexec(group, {}, 0, set_user_setuid(user)))
    return proc, group


@pytest.mark.needs("cgroups")
def test_a_students_processes_stop_at_her_ceiling_while_anothers_kernel_runs(exchange_class):
    cls = exchange_class
    code = cls.home("judy") / "code.py"
    code.write_text(KERNEL_CODE)
    hog, ivans = in_ceiling(cls, "ivan", ["/usr/bin/python3", "-c", HOG], CEILING)
    kernel, judys = in_ceiling(cls, "judy", [RUN["python"], "-m", "jupyter_client.runapp", "--kernel=python3",
                                             str(code)], {**CEILING, "cpus": 1.0})
    try:
        assert ivans.holds(hog.pid) and judys.holds(kernel.pid) and ivans.limits() == CEILING
        out, err = hog.communicate(timeout=120)
        ran = kernel.communicate(timeout=120)
        throttled = dict(line.split() for line in (ivans.folders["cpu"] / "cpu.stat").read_text().splitlines())
    finally:
        for ceiling in (ivans, judys):
            ceiling.remove()
        for folder in set(ivans.folders.values()):
            folder.parent.rmdir()
    figures = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert hog.returncode == 0, (out, err)
    assert int(figures["killed"][0]) >= 3, out          # 6 x 60 MB under 200 MB: the OOM killer ended some
    forked, refused = map(int, figures["forked"])
    assert forked < CEILING["processes"] and refused == errno.EAGAIN, out
    assert float(figures["cpu"][0]) < 2 * CEILING["cpus"] * 1.5, out   # two busy processes for 2 s
    assert int(throttled["nr_throttled"]) > 0, throttled
    assert kernel.returncode == 0 and f"judy {sum(range(10**6))}" in ran[0], ran
