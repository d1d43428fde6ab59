"""One class of the course on one machine's JupyterHub, the way The Littlest JupyterHub runs one.

Everyone has a Unix account; each person's JupyterLab runs as that account (LocalProcessSpawner);
the course's formgrader is a Hub service named after the course, run by the grading account;
nbgrader's JupyterHubAuthPlugin tells who may see the course from the Hub groups
``nbgrader-<course>`` (students) and ``formgrade-<course>`` (who may open the formgrader).
The gradebook is a PostgreSQL database reached over the local socket with peer authentication:
only the grading account's role exists, so nobody else can connect to it.

Nothing of the class runs from the repository it was set up from: students' servers run from the
class edition installed in an environment of its own (root/class-edition/env), the grading account
from a copy of the repository in its own 0700 home (~grader/course, with its environment .venv/).
Both environments hold copies of this environment's third-party packages (hard links where on the
same file system).
Hand-ins are taken out of inbound/ as they arrive by the intake service (a Hub service run as the
grading account) and collected from there by autograder.exchange.ExchangeCollect; the exchange's
course folder is made here, before any student could, and only the course's students (the Unix
group ``nbgrader-<course>``) may hand in (docs/jupyterhub.md §7).

    .venv/bin/python deploy/jupyterhub/classroom.py setup class.toml   # as root: accounts, folders, gradebook
    .venv/bin/python deploy/jupyterhub/classroom.py start class.toml   # as root: JupyterHub + proxy
    .venv/bin/python deploy/jupyterhub/classroom.py demo               # as root: a throw-away class to try

(with the course environment's Python: the servers and the formgrader run from that environment)

What goes where (``root`` of class.toml, /srv/attention by default)::

    root/class.toml         the class, as the Hub reads it (root, 0600: it may hold the demo's password)
    root/exchange/          nbgrader's filesystem exchange (root, 1777; see prepare_exchange)
    root/hub/               the Hub's database, cookie secret, proxy pid (root, 0700)
    root/etc/student/       Jupyter and nbgrader config of the students' servers (root, 0755)
    root/etc/grader/        ... of the grading account's formgrader service and its commands
    root/class-edition/     the class edition of the course and the environment students run in (env/)
    ~grader/course/         the grading account's copy of the repository and its .venv/ (the home is 0700)
    ~grader/<course>/       the course directory (solutions = nbgrader's source), 评分要点/ (rubrics),
                            intake/ (each hand-in as the intake service took it: autograder/intake.py)
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path

from autograder import intake

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HUB_CONFIG = HERE / "jupyterhub_config.py"
SHARED_PREFIX = Path(sys.prefix)   # the course environment: torch, JupyterLab, nbgrader, JupyterHub
COURSE_DISTRIBUTION = "attention-course"
# Not copied into the grading account's copy of the repository: environments, caches, learners' work.
NOT_COPIED = (".venv", ".git", "__pycache__", "*.egg-info", "build", ".pytest_cache", "test-artifacts", "my_work")
RUBRICS = "评分要点"   # in the course directory: each section's reference answers and marking scheme
# The grading account's nbgrader: a submission over this is not collected (nbgrader's default is 100 MB).
MAX_SUBMISSION_KB = 20_000


@dataclass
class Classroom:
    """What class.toml says (every key optional; see class.example.toml)."""
    course_id: str = "attention"
    root: Path = Path("/srv/attention")
    home_base: Path = Path("/home")
    grader: str = "grader-attention"
    instructors: list[str] = field(default_factory=list)
    students: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)        # may log in, not in the course
    authenticator: str = "pam"                             # "dummy": demo and tests only
    dummy_password: str = ""
    ip: str = ""                                           # "" = every interface
    port: int = 8000                                       # the proxy: what browsers open
    hub_port: int = 8081
    proxy_api_port: int = 8001
    formgrader_port: int = 9999
    db_url: str = "postgresql+psycopg:///attention?host=/var/run/postgresql"
    answers_through: str = ""                              # the class edition's --answers-through
    mem_limit_mb: int = 4096                               # each server (systemd: all its processes)
    cpu_limit: float = 1.0                                 # CPUs of each server (systemd only)
    # Processes + threads of an account: its server, kernels and terminals together (without systemd:
    # spawner.py's cgroup and rlimits, and its default). Not GradingLimits.max_processes (autograder/limits.py),
    # which caps one grading sandbox (a submission's kernel): another fact, whatever the two numbers are.
    max_processes: int = 256
    idle_timeout: int = 3600                               # s: a server idle this long is stopped
    idle_cull_every: int = 300                             # s: how often the culler looks
    ssl_cert: str = ""                                     # HTTPS on the proxy (or TLS in front of it)
    ssl_key: str = ""

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Classroom":
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
        for key in ("root", "home_base"):
            if key in data:
                data[key] = Path(data[key])
        return cls(**data)

    def dump(self) -> str:
        def value(v):
            return json.dumps(str(v) if isinstance(v, Path) else v, ensure_ascii=False)
        return "".join(f"{f.name} = {value(getattr(self, f.name))}\n" for f in fields(self))

    # --- derived paths ---------------------------------------------------------------------
    @property
    def settings(self) -> Path:
        return self.root / "class.toml"

    @property
    def exchange(self) -> Path:
        return self.root / "exchange"

    @property
    def hub_dir(self) -> Path:
        return self.root / "hub"

    def etc(self, who: str) -> Path:
        return self.root / "etc" / who

    @property
    def class_env(self) -> Path:
        return self.root / "class-edition" / "env"

    @property
    def class_python(self) -> Path:
        return self.class_env / "bin" / "python"

    @property
    def grading_repo(self) -> Path:
        return self.home(self.grader) / "course"

    @property
    def grading_env(self) -> Path:
        return self.grading_repo / ".venv"

    @property
    def grading_python(self) -> Path:
        return self.grading_env / "bin" / "python"

    @property
    def student_group(self) -> str:
        """The Unix group of the course's students (the Hub group's name): who may write inbound/."""
        return f"nbgrader-{self.course_id}"

    def home(self, user: str) -> Path:
        """The account's home: its own where it exists, else where add_account creates it."""
        try:
            return Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            return self.home_base / user

    @property
    def course_dir(self) -> Path:
        return self.home(self.grader) / self.course_id

    @property
    def intake_store(self) -> Path:
        """Where the intake service keeps each hand-in as it arrives (in the 0700 course directory)."""
        return self.course_dir / intake.STORE

    @property
    def members(self) -> list[str]:
        return [self.grader, *self.instructors, *self.students, *self.others]

    # --- what the servers are given ----------------------------------------------------------
    @property
    def runtime(self) -> Path:
        return self.root / "runtime"

    def server_environment(self, who: str) -> dict[str, str]:
        """Jupyter finds its config in etc/<who> first, then its environment's (where the nbgrader and
        JupyterLab extensions are enabled); students run in the class edition's environment, the
        grading account ("grader") in its own."""
        prefix = self.grading_env if who == "grader" else self.class_env
        env = {
            "JUPYTER_CONFIG_PATH": os.pathsep.join([str(self.etc(who)), str(prefix / "etc" / "jupyter")]),
            "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
            "PATH": os.pathsep.join([str(prefix / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
        }
        if self.runtime.exists():  # see share_runtime
            env.update(PYTHONHOME=str(self.runtime), LD_LIBRARY_PATH=str(self.runtime / "lib"))
        return env

    def grader_environment(self) -> dict[str, str]:
        """What the formgrader service and the grading account's commands run with."""
        return {**self.server_environment("grader"), "HOME": str(self.home(self.grader)),
                "USER": self.grader, "LANG": "C.UTF-8"}


def intake_command(cls: Classroom, python: Path | str) -> list[str]:
    """The intake service (autograder/intake.py), run by the Hub as the grading account: takes each hand-in
    out of inbound/ into the course directory as it arrives, with the time of that copy."""
    return [str(python), "-m", "autograder.intake", "--inbound", str(cls.exchange / cls.course_id / "inbound"),
            "--store", str(cls.intake_store), "--max-kb", str(MAX_SUBMISSION_KB)]


# --- configs the servers read (generated: explicit values an administrator can read) ----------

def student_nbgrader_config(cls: Classroom) -> str:
    return f'''# Every student's nbgrader (written by deploy/jupyterhub/classroom.py).
from nbgrader.auth import JupyterHubAuthPlugin

c = get_config()  # noqa: F821
c.Exchange.root = {str(cls.exchange)!r}
c.CourseDirectory.course_id = {cls.course_id!r}
# The Hub decides who is in the course: group nbgrader-{cls.course_id} (students), formgrade-{cls.course_id}.
c.Authenticator.plugin_class = JupyterHubAuthPlugin
'''


def grader_nbgrader_config(cls: Classroom) -> str:
    return f'''# The grading account's nbgrader: the formgrader service and `autograder.grade`
# (written by deploy/jupyterhub/classroom.py; the course directory's own nbgrader_config.py
# is the repository's). No JupyterHubAuthPlugin here: the grading account's commands need no
# Hub token (they also run from a plain shell), and the Hub groups come from class.toml.
c = get_config()  # noqa: F821
c.CourseDirectory.root = {str(cls.course_dir)!r}
c.CourseDirectory.course_id = {cls.course_id!r}
c.CourseDirectory.db_url = {cls.db_url!r}
c.Exchange.root = {str(cls.exchange)!r}
c.NbGrader.logfile = {str(cls.home(cls.grader) / "nbgrader.log")!r}
# Collect trusting only the file system: the folder's owner is the student, the kernel's change time
# the hand-in time; links, FIFOs and devices are never read; a bad submission skips only its student.
c.ExchangeFactory.collect = "autograder.exchange.ExchangeCollect"
c.CourseDirectory.max_dir_size = {MAX_SUBMISSION_KB}    # kB: a larger submission is not collected
c.CourseDirectory.max_file_size = {MAX_SUBMISSION_KB}
# grades.csv in UTF-8 with a BOM: Excel on Chinese Windows opens it right (nbgrader's writes without)
c.ExportApp.plugin_class = "autograder.export.ExcelCsvExportPlugin"
'''


# Students: the assignment list, course list and validate button; not the formgrader nor the
# create-assignment toolbar (what nbgrader's docs enable per account).
STUDENT_SERVER_CONFIG = {"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": False}}}
STUDENT_LAB_PAGE_CONFIG = {"disabledExtensions": {"@jupyter/nbgrader:formgrader": True,
                                                  "@jupyter/nbgrader:create-assignment": True}}
# The grading account's JupyterLab keeps every extension. JupyterHub >= 4.1 forbids iframes, so the
# formgrader's panel inside JupyterLab stays blank: it opens in a tab of its own,
# /services/<course>/formgrader. (nbgrader's docs allow restoring "frame-ancestors 'self'" only with
# JupyterHub.enable_subdomains, per-user origins: not this set-up.)


def write_configs(cls: Classroom) -> None:
    student, grader = cls.etc("student"), cls.etc("grader")
    (student / "labconfig").mkdir(parents=True, exist_ok=True)
    grader.mkdir(parents=True, exist_ok=True)
    (student / "nbgrader_config.py").write_text(student_nbgrader_config(cls), encoding="utf-8")
    (student / "jupyter_server_config.json").write_text(json.dumps(STUDENT_SERVER_CONFIG, indent=1))
    (student / "labconfig" / "page_config.json").write_text(json.dumps(STUDENT_LAB_PAGE_CONFIG, indent=1))
    (grader / "nbgrader_config.py").write_text(grader_nbgrader_config(cls), encoding="utf-8")
    cls.settings.touch(mode=0o600)
    cls.settings.chmod(0o600)   # only the Hub (root) reads it
    cls.settings.write_text(cls.dump(), encoding="utf-8")


# --- accounts ----------------------------------------------------------------------------------

def account_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


ACCOUNT_COMMENT = "attention course (deploy/jupyterhub/classroom.py)"   # the GECOS field of accounts made here


def add_account(cls: Classroom, user: str) -> None:
    """A Unix account whose home only it can read (Debian's useradd leaves homes 0755)."""
    if not account_exists(user):
        subprocess.run(["useradd", "--create-home", "--home-dir", str(cls.home(user)), "--shell", "/bin/bash",
                        "--user-group", "--comment", ACCOUNT_COMMENT, user], check=True, capture_output=True)
    cls.home(user).chmod(0o700)


def remove_account(user: str, remove_home: bool = True) -> None:
    subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)  # that account's processes only
    subprocess.run(["userdel", *(["--remove"] if remove_home else []), user], capture_output=True)


def set_student_group(cls: Classroom) -> None:
    """The Unix group of the course's students, with exactly the students of class.toml."""
    subprocess.run(["groupadd", "-f", cls.student_group], check=True, capture_output=True)
    subprocess.run(["gpasswd", "-M", ",".join(cls.students), cls.student_group], check=True, capture_output=True)


def remove_student_group(cls: Classroom) -> None:
    subprocess.run(["groupdel", cls.student_group], capture_output=True)


def as_user(user: str, cmd: list[str], env: dict[str, str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` as ``user`` with exactly ``env`` (runuser, as root)."""
    env_args = [f"{k}={v}" for k, v in env.items()]
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *env_args, *cmd], cwd=cwd,
                          capture_output=True, text=True, **kw)


# --- folders -------------------------------------------------------------------------------------

def prepare_exchange(cls: Classroom) -> None:
    """The exchange root: nbgrader's students' commands want it writable by everyone and its release
    insists on mode 777; owned by root with the sticky bit, no one but its owner can rename or delete
    what is in it. The course's folder is made here, before any student could squat it, and owned by
    the grading account (nbgrader's release keeps folders that exist and are the releaser's own):

        <course>/    grader, 0755
        outbound/    grader:nbgrader-<course>, 0750   released assignments: the course's students read
        inbound/     grader:nbgrader-<course>, 1730   the course's students hand in, cannot list, cannot
                                                      remove another's; any other account cannot write
        feedback/    grader, 0711                     each reads only the file named by their own secret
    """
    cls.exchange.mkdir(parents=True, exist_ok=True)
    os.chown(cls.exchange, 0, 0)
    cls.exchange.chmod(0o1777)
    course = cls.exchange / cls.course_id
    if course.is_symlink() or (course.exists() and course.stat().st_uid != pwd.getpwnam(cls.grader).pw_uid):
        raise RuntimeError(f"{course} exists and is not the grading account's: remove it, then run setup again")
    for path, group, mode in ((course, cls.grader, 0o755), (course / "outbound", cls.student_group, 0o750),
                              (course / "inbound", cls.student_group, 0o1730),
                              (course / "feedback", cls.grader, 0o711)):
        path.mkdir(exist_ok=True)
        shutil.chown(path, cls.grader, group)
        path.chmod(mode)


def readable_by_everyone(path: Path) -> bool:
    """Whether an account other than the owner can read ``path`` (every folder above it searchable)."""
    path = path.resolve()
    return bool(path.stat().st_mode & stat.S_IROTH) and all(
        p.stat().st_mode & stat.S_IXOTH for p in path.parents)


def share_runtime(cls: Classroom) -> None:
    """The environment's Python, where other accounts can run it.

    A virtual environment runs its base interpreter's libpython and standard library. When those
    sit where other accounts cannot read them (pyenv under /root, 0700), the accounts' processes
    silently load the system's libpython and standard library instead (a different patch release:
    Debian's 3.11.2 under a 3.11.7 environment; measured: its `re` fails soupsieve's selectors, and
    every feedback page with them). Then the runtime's library and standard library are linked
    (or copied) under root/runtime, and the servers get PYTHONHOME and LD_LIBRARY_PATH to it."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])   # the base interpreter's, also inside a venv
    if readable_by_everyone(stdlib / "os.py") or cls.runtime.exists():
        return
    lib = cls.runtime / "lib"
    shutil.copytree(stdlib, lib / stdlib.name, copy_function=_link_readable, symlinks=True,
                    ignore=shutil.ignore_patterns("site-packages", "test", "__pycache__"))
    for shared in (Path(sys.base_prefix) / "lib").glob("libpython*.so*"):
        _link_readable(shared, lib / shared.name)
    for folder in [cls.runtime, *cls.runtime.rglob("*")]:
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(0o755)


def _link_readable(src, dst) -> None:
    """A hard link where the file is readable by everyone already (instant, no space), else a copy."""
    if os.stat(src).st_mode & stat.S_IROTH:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)
    os.chmod(dst, 0o644 | (os.stat(dst).st_mode & 0o111))


def course_entries(site: Path) -> set[str]:
    """The names in ``site`` (a site-packages) that belong to the course's own package (its editable
    finder, or its packages), not to a third-party one."""
    own = [d for d in importlib.metadata.distributions(path=[str(site)]) if d.metadata["Name"] == COURSE_DISTRIBUTION]
    return {f.parts[0] for d in own for f in d.files or [] if f.parts[0] not in ("..", "__pycache__")}


def clone_environment(env: Path) -> None:
    """A virtual environment of its own at ``env`` with this environment's third-party packages, its
    Jupyter data and config (the lab extensions, nbgrader's server extension) and console scripts, but
    not the course's own package: nothing in it refers to this environment or the repository."""
    venv.EnvBuilder(with_pip=False).create(env)
    purelib = Path(sysconfig.get_paths()["purelib"])
    own = course_entries(purelib)

    def not_the_course(folder, names):
        return [n for n in names if n in own] if folder == str(purelib) else []

    shutil.copytree(purelib, env / purelib.relative_to(SHARED_PREFIX), copy_function=_link_readable,
                    symlinks=True, dirs_exist_ok=True, ignore=not_the_course)
    for sub in ("share/jupyter", "etc/jupyter"):
        if (SHARED_PREFIX / sub).is_dir():
            shutil.copytree(SHARED_PREFIX / sub, env / sub, copy_function=_link_readable, dirs_exist_ok=True)
    copy_scripts(env)


def copy_scripts(env: Path) -> None:
    """This environment's console scripts (nbgrader runs `alembic`), pointed at ``env``'s Python."""
    shebang = re.compile(rb"#!" + re.escape(bytes(SHARED_PREFIX / "bin")) + rb"/python[0-9.]*\n")
    for script in (SHARED_PREFIX / "bin").iterdir():
        target = env / "bin" / script.name
        if target.exists() or not script.is_file():
            continue
        with open(script, "rb") as fh:
            text = fh.read()
        if shebang.match(text):
            target.write_bytes(shebang.sub(b"#!" + bytes(env / "bin" / "python") + b"\n", text, count=1))
            target.chmod(0o755)


def pip_install(python: Path, source: Path, *how: str) -> None:
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", *how, str(source)], check=True, capture_output=True,
                   cwd=source.parent)


def build_class_edition(cls: Classroom) -> None:
    """`course.py edition student` installed into an environment of its own: students' servers and
    kernels run from it, and it holds no answer to an open section (nor anything of the repository)."""
    if cls.class_python.exists():
        return
    out = cls.class_env.parent / "class-edition"
    answers = ["--answers-through", cls.answers_through] if cls.answers_through else []
    # what `course.py edition student OUT` runs (without its environment check, which may reinstall)
    subprocess.run([sys.executable, "-m", "autograder.edition", "student", str(out), *answers],
                   check=True, capture_output=True, cwd=REPO)
    clone_environment(cls.class_env)
    pip_install(cls.class_python, out)


def build_grading_environment(cls: Classroom) -> None:
    """A copy of the repository in the grading account's 0700 home, with an environment of its own in
    which the course is installed from that copy (editable, as `course.py setup` does): the formgrader
    and the grading commands run from it, never from the repository setup ran from."""
    if cls.grading_python.exists():
        return
    shutil.copytree(REPO, cls.grading_repo, ignore=shutil.ignore_patterns(*NOT_COPIED), dirs_exist_ok=True)
    clone_environment(cls.grading_env)
    pip_install(cls.grading_python, cls.grading_repo, "--editable")


def write_rubrics(cls: Classroom) -> None:
    """Each section's 评分要点 page, from the course directory's solutions/, as the grading account."""
    grader_run(cls, "-m", "autograder.rubric", "solutions", RUBRICS)


def prepare_course(cls: Classroom) -> None:
    """The grading account's course directory: the repository's solutions/ and nbgrader_config.py."""
    course = cls.course_dir
    if not course.exists():
        shutil.copytree(REPO / "solutions", course / "solutions")
        shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
        roster = "id,first_name,last_name,email\n" + "".join(f"{s},{s},,\n" for s in cls.students)
        (course / "students.csv").write_text(roster, encoding="utf-8")
    subprocess.run(["chown", "-R", f"{cls.grader}:{cls.grader}", str(course)], check=True)
    course.chmod(0o700)


def grader_run(cls: Classroom, *args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` as the grading account, in the course directory, from its environment."""
    proc = as_user(cls.grader, [str(cls.grading_python), *args], cls.grader_environment(), cls.course_dir)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} as {cls.grader}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def grader_nbgrader(cls: Classroom, *args: str) -> subprocess.CompletedProcess:
    return grader_run(cls, "-m", "nbgrader", *args, "--log-level=WARN")


def create_gradebook(cls: Classroom, psql_host: str, port: int = 5432) -> None:
    """The grading account's role and database on a PostgreSQL server (run as postgres)."""
    as_pg = ["runuser", "-u", "postgres", "--"]
    conn = ["-h", psql_host, "-p", str(port)]
    subprocess.run([*as_pg, "createuser", *conn, cls.grader], capture_output=True)  # exists already: fine
    subprocess.run([*as_pg, "createdb", *conn, "--owner", cls.grader, cls.course_id], capture_output=True)


def setup(cls: Classroom, psql_host: str = "/var/run/postgresql", psql_port: int = 5432) -> None:
    """Everything `start` needs, idempotent: run it again after adding students to class.toml."""
    for path, mode in ((cls.root, 0o755), (cls.hub_dir, 0o700), (cls.root / "etc", 0o755),
                       (cls.root / "class-edition", 0o755)):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
    share_runtime(cls)
    write_configs(cls)
    for user in cls.members:
        add_account(cls, user)
    set_student_group(cls)
    prepare_exchange(cls)
    with ThreadPoolExecutor(max_workers=2) as pool:
        edition = pool.submit(build_class_edition, cls)   # independent of the course and the gradebook
        build_grading_environment(cls)
        prepare_course(cls)
        rubrics = pool.submit(write_rubrics, cls)
        create_gradebook(cls, psql_host, psql_port)
        grader_nbgrader(cls, "db", "student", "import", "students.csv")
        rubrics.result()
        edition.result()
    if readable_by_everyone(REPO / "solutions"):
        print(f"Note: every account can read {REPO} (solutions/, utils/reference/). The class does not run from "
              "it: keep it where only root can read it, or remove it (docs/jupyterhub.md §2).", file=sys.stderr)


# --- running the Hub ------------------------------------------------------------------------------

def start(cls: Classroom, **popen) -> subprocess.Popen:
    """JupyterHub (which starts configurable-http-proxy and the formgrader service), as root."""
    env = {**os.environ, "ATTENTION_CLASS": str(cls.settings),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])}
    return subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(HUB_CONFIG)],
                            cwd=cls.hub_dir, env=env, **popen)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TemporaryPostgres:
    """A throw-away PostgreSQL cluster on a Unix socket: local connections by peer authentication
    only (an account connects as the role of its own name), nothing over TCP."""

    def __init__(self, base: Path, port: int):
        self.base, self.port = base, port
        self.data, self.socket = base / "data", base / "socket"

    def _bin(self) -> Path:
        found = shutil.which("initdb")
        if found:
            return Path(found).resolve().parent
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not versions:
            raise FileNotFoundError("PostgreSQL is not installed (apt-get install postgresql)")
        return versions[-1].parent

    def _run(self, *cmd: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True, cwd=self.base)

    def start(self) -> "TemporaryPostgres":
        self.socket.mkdir(parents=True)
        for path in (self.base, self.socket):
            shutil.chown(path, "postgres")
        self.socket.chmod(0o755)
        pg = self._bin()
        self._run(str(pg / "initdb"), "-D", str(self.data), "--auth-local=peer", "--auth-host=reject",
                  "-U", "postgres", "--no-sync")
        # throw-away: no fsync (a crash loses nothing that matters)
        self._run(str(pg / "pg_ctl"), "-D", str(self.data), "-w", "-l", str(self.base / "server.log"), "start",
                  "-o", f"-k {self.socket} -c listen_addresses='' -p {self.port} -c fsync=off"
                        " -c synchronous_commit=off -c full_page_writes=off")
        return self

    def stop(self) -> None:
        self._run(str(self._bin() / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg:///{database}?host={self.socket}&port={self.port}"


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def demo(port: int) -> int:
    """A class of throw-away accounts (dummy passwords), until Ctrl-C; then everything is removed."""
    base = Path(tempfile.mkdtemp(prefix="attention-hub-"))
    base.chmod(0o755)
    pg = TemporaryPostgres(base / "pg", free_port()).start()
    cls = Classroom(root=base / "class", home_base=base / "home", instructors=["teacher"],
                    students=["student1", "student2"], authenticator="dummy", dummy_password="demo",
                    ip="127.0.0.1", port=port, db_url=pg.url("attention"))
    cls.home_base.mkdir()
    cls.home_base.chmod(0o755)
    hub = None
    signal.signal(signal.SIGINT, signal.default_int_handler)   # also when started in the background
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        setup(cls, psql_host=str(pg.socket), psql_port=pg.port)
        hub = start(cls)
        print(f"http://127.0.0.1:{port}/  —  log in as teacher / student1 / student2, password 'demo'."
              f" Formgrader: /services/{cls.course_id}/formgrader. Ctrl-C ends the demo.", flush=True)
        hub.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if hub and hub.poll() is None:
            hub.send_signal(signal.SIGTERM)
            hub.wait(30)
        pg.stop()
        for user in cls.members:
            remove_account(user)
        remove_student_group(cls)
        shutil.rmtree(base, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("setup", "start"):
        sub.add_parser(name).add_argument("class_toml")
    sub.add_parser("demo").add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("run as root: it creates accounts and starts servers as them")
    if args.command == "demo":
        return demo(args.port)
    cls = Classroom.load(args.class_toml)
    if args.command == "setup":
        setup(cls)
        return 0
    return start(cls).wait()


if __name__ == "__main__":
    sys.exit(main())
