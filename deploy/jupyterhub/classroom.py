"""One class of the course on one machine's JupyterHub, the way The Littlest JupyterHub runs one.

Everyone has a Unix account; each person's JupyterLab runs as that account (LocalProcessSpawner);
the course's formgrader is a Hub service named after the course, run by the grading account;
nbgrader's JupyterHubAuthPlugin tells who may see the course from the Hub groups
``nbgrader-<course>`` (students) and ``formgrade-<course>`` (who may open the formgrader).
The gradebook is a PostgreSQL database reached over the local socket with peer authentication:
only the grading account's role exists, so nobody else can connect to it.

    .venv/bin/python deploy/jupyterhub/classroom.py setup class.toml   # as root: accounts, folders, gradebook
    .venv/bin/python deploy/jupyterhub/classroom.py start class.toml   # as root: JupyterHub + proxy
    .venv/bin/python deploy/jupyterhub/classroom.py demo               # as root: a throw-away class to try

(with the course environment's Python: the servers and the formgrader run from that environment)

What goes where (``root`` of class.toml, /srv/attention by default)::

    root/class.toml         the class (root-owned, 0644: every server reads it)
    root/exchange/          nbgrader's filesystem exchange (root, 1777; see prepare_exchange)
    root/hub/               the Hub's database, cookie secret, proxy pid (root, 0700)
    root/etc/student/       Jupyter and nbgrader config of the students' servers (root, 0755)
    root/etc/grader/        ... of the grading account's formgrader service and its commands
    root/class-edition/     the class edition of the course and the environment students run in
    ~grader/<course>/       the course directory (solutions = nbgrader's source); the home is 0700
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HUB_CONFIG = HERE / "jupyterhub_config.py"
SHARED_PREFIX = Path(sys.prefix)   # the course environment: torch, JupyterLab, nbgrader, JupyterHub


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
    def class_python(self) -> Path:
        return self.root / "class-edition" / "env" / "bin" / "python"

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
    def members(self) -> list[str]:
        return [self.grader, *self.instructors, *self.students, *self.others]

    # --- what the servers are given ----------------------------------------------------------
    @property
    def runtime(self) -> Path:
        return self.root / "runtime"

    def server_environment(self, who: str) -> dict[str, str]:
        """Jupyter finds its config in etc/<who> first, then the shared environment's (where the
        nbgrader and JupyterLab extensions are enabled); the lab extensions are the environment's."""
        env = {
            "JUPYTER_CONFIG_PATH": os.pathsep.join([str(self.etc(who)), str(SHARED_PREFIX / "etc" / "jupyter")]),
            "JUPYTER_PATH": str(SHARED_PREFIX / "share" / "jupyter"),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        }
        if self.runtime.exists():  # see share_runtime
            env.update(PYTHONHOME=str(self.runtime), LD_LIBRARY_PATH=str(self.runtime / "lib"))
        return env

    def grader_environment(self) -> dict[str, str]:
        """What the formgrader service and the grading account's commands run with."""
        return {**self.server_environment("grader"), "HOME": str(self.home(self.grader)),
                "USER": self.grader, "LANG": "C.UTF-8"}


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


def remove_account(user: str) -> None:
    subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)  # that account's processes only
    subprocess.run(["userdel", "--remove", user], capture_output=True)


def as_user(user: str, cmd: list[str], env: dict[str, str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` as ``user`` with exactly ``env`` (runuser, as root)."""
    env_args = [f"{k}={v}" for k, v in env.items()]
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *env_args, *cmd], cwd=cwd,
                          capture_output=True, text=True, **kw)


# --- folders -------------------------------------------------------------------------------------

def prepare_exchange(cls: Classroom) -> None:
    """The exchange root: nbgrader's release insists on mode 777 (it chmods it, or fails); owned by
    root with the sticky bit no one but its owner can rename or delete the course's folder in it.
    nbgrader creates the rest as the grading account: <course>/ and outbound/ 0755, inbound/ 2733
    (students write, cannot list), feedback/ 0711 (students read only the file named by their own
    submission's hash)."""
    cls.exchange.mkdir(parents=True, exist_ok=True)
    os.chown(cls.exchange, 0, 0)
    cls.exchange.chmod(0o1777)


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


def build_class_edition(cls: Classroom) -> None:
    """`course.py edition student` installed into an environment of its own over the shared one's
    packages (a .pth naming its site-packages): students' kernels import the class edition."""
    base = cls.class_python.parent.parent.parent
    if cls.class_python.exists():
        return
    out = base / "class-edition"
    answers = ["--answers-through", cls.answers_through] if cls.answers_through else []
    # what `course.py edition student OUT` runs (without its environment check, which may reinstall)
    subprocess.run([sys.executable, "-m", "autograder.edition", "student", str(out), *answers],
                   check=True, capture_output=True, cwd=REPO)
    env = cls.class_python.parent.parent
    venv.EnvBuilder(with_pip=False).create(env)
    site = subprocess.run([cls.class_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "course-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run([cls.class_python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--disable-pip-version-check", str(out)], check=True, capture_output=True, cwd=base)


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


def grader_nbgrader(cls: Classroom, *args: str) -> subprocess.CompletedProcess:
    proc = as_user(cls.grader, [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
                   cls.grader_environment(), cls.course_dir)
    if proc.returncode:
        raise RuntimeError(f"nbgrader {' '.join(args)} as {cls.grader}:\n{proc.stdout}\n{proc.stderr}")
    return proc


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
    prepare_exchange(cls)
    share_runtime(cls)
    write_configs(cls)
    for user in cls.members:
        add_account(cls, user)
    with ThreadPoolExecutor(max_workers=1) as pool:   # independent of the course and the gradebook
        edition = pool.submit(build_class_edition, cls)
        prepare_course(cls)
        create_gradebook(cls, psql_host, psql_port)
        grader_nbgrader(cls, "db", "student", "import", "students.csv")
        edition.result()


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
