"""JupyterLab on a throw-away copy of the course, and a learner's Chromium driving it.

The server listens on loopback with a token and keeps its config, runtime, settings and
workspaces in a temporary directory; the browser is the system Chromium driven by Playwright
(no browser download); tests/conftest.py's needs("chromium") says what is missing when that cannot be had.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import course  # noqa: E402  (standard library only: the lab settings a learner gets)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TOKEN = "browser-test"
COPIED = ["autograder", "notebooks", "solutions", "utils", "nbgrader_config.py", "pyproject.toml"]
# Long notebooks render their off-screen cells only with windowing off: the test reads every cell.
# No news pop-up over the screenshots either.
TEST_SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
                 "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"}}


def copy_course(destination: Path) -> Path:
    """The learner's course folder, copied: the test changes notebooks, never the real ones."""
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=ignore)
        else:
            shutil.copy2(source, destination / name)
    return destination


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """``jupyter lab`` serving ``course_dir`` until ``stop()``."""

    def __init__(self, course_dir: Path, scratch: Path):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        dirs = {name: scratch / name for name in ("config", "runtime", "settings", "workspaces")}
        for path in dirs.values():
            path.mkdir(parents=True)
        course.write_lab_defaults(dirs["config"])
        for name, settings in TEST_SETTINGS.items():
            target = dirs["settings"] / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(settings))
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
               "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]), "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
               "PYTHONPATH": str(course_dir)}  # the kernels import the copy's utils
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={course_dir}",
               "--LabApp.news_url=None", "--LabApp.extension_manager=readonly"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = (scratch / "server.log").open("wb")
        self.process = subprocess.Popen(cmd, cwd=course_dir, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self._wait_until_up()

    def _wait_until_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._api("GET", "status")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start; see {self.log.name}") from None
                time.sleep(0.3)

    def url(self, path: str) -> str:
        """``path`` opened alone, in a fresh workspace of its own."""
        workspace = Path(path).stem
        return f"{self.base}/lab/workspaces/{workspace}/tree/{path}?reset&token={TOKEN}"

    def shut_down_kernels(self) -> None:
        for kernel in self._api("GET", "kernels"):
            self._api("DELETE", f"kernels/{kernel['id']}")

    def _api(self, method: str, path: str):
        request = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                         headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()
