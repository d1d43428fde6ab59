"""A throw-away class on a real JupyterHub (deploy/jupyterhub/classroom.py) and HTTP clients as
its members: Unix accounts created for the test and removed afterwards, a temporary PostgreSQL
gradebook, JupyterHub + configurable-http-proxy on loopback, serving HTTPS with a certificate made
for the test (the clients trust it and nothing else)."""
from __future__ import annotations

import os
import pwd
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import requests

from deploy.jupyterhub.classroom import (ACCOUNT_COMMENT, Classroom, TemporaryPostgres, account_exists,
                                         as_user, free_port, remove_account, remove_student_group, setup, start)

PASSWORD = "hub-test"


class Member:
    """One account's HTTP client: logs in through the Hub's form, then asks the Hub for an API
    token of its own and uses it for everything (Hub API, its server, services)."""

    def __init__(self, hub: "Hub", name: str):
        self.hub, self.name = hub, name
        login = hub.session()
        login.get(hub.url("/hub/login"), timeout=30)
        xsrf = login.cookies.get("_xsrf")
        r = login.post(hub.url("/hub/login"), data={"username": name, "password": PASSWORD, "_xsrf": xsrf},
                       allow_redirects=False, timeout=30)
        assert r.status_code == 302, f"{name} could not log in: {r.status_code}"
        r = login.post(hub.url(f"/hub/api/users/{name}/tokens"), json={"note": "hub test", "expires_in": 3600},
                       headers={"X-XSRFToken": login.cookies.get("_xsrf", path="/hub/")}, timeout=30)
        assert r.status_code == 201, r.text
        self.http = hub.session()
        self.http.headers["Authorization"] = f"token {r.json()['token']}"

    def get(self, path: str, **kw) -> requests.Response:
        return self.http.get(self.hub.url(path), timeout=120, allow_redirects=False, **kw)

    def post(self, path: str, **kw) -> requests.Response:
        return self.http.post(self.hub.url(path), timeout=300, allow_redirects=False, **kw)

    def put(self, path: str, **kw) -> requests.Response:
        return self.http.put(self.hub.url(path), timeout=120, allow_redirects=False, **kw)

    def start_server(self) -> None:
        r = self.post(f"/hub/api/users/{self.name}/server")
        assert r.status_code in (201, 202), r.text

    def wait_for_server(self, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.get(f"/user/{self.name}/api/status").status_code == 200:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{self.name}'s server did not start:\n{self.hub.log()}")

    def ids(self) -> tuple[int, int]:
        """The account's uid and gid."""
        entry = pwd.getpwnam(self.name)
        return entry.pw_uid, entry.pw_gid

    def run(self, *cmd: str) -> subprocess.CompletedProcess:
        """A command as this Unix account (outside the Hub: what a terminal in its JupyterLab runs)."""
        env = {**self.hub.cls.server_environment("student"), "HOME": str(self.hub.cls.home(self.name))}
        return as_user(self.name, list(cmd), env, self.hub.cls.home(self.name))


class Hub:
    def __init__(self, cls: Classroom, base: Path):
        self.cls, self.base = cls, base
        self.cert = cls.ssl_cert   # the clients trust the test's own certificate

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.cls.port}{path}"

    def session(self) -> requests.Session:
        """HTTP that trusts the test's certificate (not the environment's CA bundle, which a
        REQUESTS_CA_BUNDLE would put before a session's own ``verify``)."""
        session = requests.Session()
        session.trust_env = False
        session.verify = self.cert
        return session

    def log(self, whole: bool = False) -> str:
        """The Hub's log, the servers' and the service's included (their output goes to it)."""
        text = (self.base / "hub.log").read_text(encoding="utf-8", errors="replace")
        return text if whole else text[-6000:]

    def wait_until_up(self, proc: subprocess.Popen, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterHub exited ({proc.returncode}):\n{self.log()}")
            try:
                # the service is up once the proxy routes to it (it answers with a login redirect)
                if (requests.get(self.url("/hub/api/"), timeout=5, verify=self.cert).ok
                        and requests.get(self.url(f"/services/{self.cls.course_id}/api/status"), verify=self.cert,
                                         allow_redirects=False, timeout=5).status_code in (302, 403)):
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"JupyterHub did not come up:\n{self.log()}")

    def member(self, name: str) -> Member:
        return Member(self, name)

    def member_as_account(self, name: str) -> Member:
        """Only the Unix account (for commands), not logged in to the Hub."""
        member = Member.__new__(Member)
        member.hub, member.name = self, name
        return member


def is_leftover(user: str) -> bool:
    """An account this test made: classroom.py's comment and a home in a temporary class folder."""
    entry = pwd.getpwnam(user)
    return entry.pw_gecos == ACCOUNT_COMMENT and Path(entry.pw_dir).is_relative_to(
        Path(tempfile.gettempdir())) and "attention-hub-" in entry.pw_dir


def remove_in_background(folder: Path) -> None:
    """``rm -rf folder`` left running: the class's two environments are some 130 000 hard links, whose
    removal waits on the disk for half a minute on a busy machine; nothing else needs it finished."""
    aside = folder.with_name(folder.name + "-removed")
    folder.rename(aside)
    subprocess.Popen(["rm", "-rf", str(aside)], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_certificate(folder: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key (readable by root only, as a real one's key)."""
    folder.mkdir(mode=0o700)
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


@contextmanager
def throwaway_class(cls: Classroom):
    """A temporary folder for the class (``cls.root``, ``cls.home_base`` set in it), where none of the
    class's accounts exists (leftovers of a killed run removed first); afterwards every account of the
    class, its student group and the folder are removed. Yields the folder."""
    for user in filter(account_exists, cls.members):
        if is_leftover(user):   # of a run that was killed before it could clean up
            remove_account(user)
    taken = [u for u in cls.members if account_exists(u)]
    if taken:
        raise RuntimeError(f"accounts exist already, the test will not touch them: {taken}")
    base = Path(tempfile.mkdtemp(prefix="attention-hub-"))
    base.chmod(0o755)  # the accounts must reach their homes and the class folders
    cls.root, cls.home_base = base / "class", base / "home"
    cls.home_base.mkdir()
    try:
        yield base
    finally:
        for user in cls.members:
            remove_account(user, remove_home=False)   # the homes are in base
        remove_student_group(cls)
        remove_in_background(base)


def descendants(pid: int) -> list[int]:
    """Every process started by ``pid`` or by one of its descendants, still running."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError):
            child, ppid = stat.parent.name, stat.read_text().rsplit(")", 1)[1].split()[1]
            children.setdefault(int(ppid), []).append(int(child))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def stop_hub(hub_proc: subprocess.Popen) -> None:
    """The Hub, and what it started in sessions of its own (configurable-http-proxy, the idle culler), which a
    Hub that does not stop in 30 s would leave running after every run of the test."""
    started = descendants(hub_proc.pid)
    hub_proc.terminate()
    try:
        hub_proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(hub_proc.pid, signal.SIGKILL)
    for pid in started:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def running_hub(students: list[str], instructors: list[str], others: list[str]):
    """Accounts, folders, gradebook and a running Hub; all of it removed afterwards. The idle culler
    looks every 5 s (it stops nothing: the timeout is the class's default hour)."""
    cls = Classroom(instructors=instructors, students=students, others=others, authenticator="dummy",
                    dummy_password=PASSWORD, ip="127.0.0.1", port=free_port(), hub_port=free_port(),
                    proxy_api_port=free_port(), formgrader_port=free_port(), idle_cull_every=5)
    with throwaway_class(cls) as base:
        cls.ssl_cert, cls.ssl_key = make_certificate(base / "tls")
        pg = TemporaryPostgres(base / "pg", free_port())
        cls.db_url = pg.url(cls.course_id)
        hub_proc = None
        try:
            pg.start()
            setup(cls, psql_host=str(pg.socket), psql_port=pg.port)
            with open(base / "hub.log", "wb") as log:
                hub_proc = start(cls, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            hub = Hub(cls, base)
            hub.wait_until_up(hub_proc)
            yield hub
        finally:
            if hub_proc is not None and hub_proc.poll() is None:
                stop_hub(hub_proc)
            if pg.data.exists():
                pg.stop()
