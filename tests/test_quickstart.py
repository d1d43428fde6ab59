"""The README's first Quick start command really opens JupyterLab on the course, in the learner's
working copy (utils/working_copy.py), which it makes on the first run, in Simplified Chinese."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import course

from .conftest import ROOT

TOKEN = "quickstart-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_lab_opens_the_working_copy_in_the_course_folder():
    python = Path("python")
    cmd = [str(part) for part in course.lab_command(python, ROOT / "my_work")]
    assert f"--ServerApp.root_dir={ROOT}" in cmd and str(ROOT / "my_work/00_start_here/00_start_here.ipynb") in cmd
    elsewhere = Path("/learner/attention-work")                   # $COURSE_WORK outside the course
    cmd = [str(part) for part in course.lab_command(python, elsewhere)]
    assert f"--ServerApp.root_dir={elsewhere}" in cmd and str(elsewhere / "00_start_here/00_start_here.ipynb") in cmd


@pytest.mark.slow
def test_course_py_lab_serves_the_first_notebook_of_a_new_working_copy(tmp_path):
    port = free_port()
    work = tmp_path / "work"   # not the course's my_work/: the test leaves a learner's own alone
    env = {**os.environ, "COURSE_WORK": str(work), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws")}
    cmd = [sys.executable, str(ROOT / "course.py"), "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--IdentityProvider.token={TOKEN}"]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                get(f"{base}/api/status")
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        first = get(f"{base}/api/contents/00_start_here/00_start_here.ipynb")
        assert first["type"] == "notebook" and first["content"]["cells"]
        release = ROOT / "notebooks" / "00_start_here" / "00_start_here.ipynb"
        assert (work / "00_start_here" / "00_start_here.ipynb").read_bytes() == release.read_bytes()
        assert "python3" in get(f"{base}/api/kernelspecs")["kernelspecs"]
        # the interface in Simplified Chinese by default: course.py's default setting, and the language pack
        # that makes it take effect (without it JupyterLab stays English and the page says en)
        settings = get(f"{base}/lab/api/settings/@jupyterlab/translation-extension:plugin")
        assert settings["schema"]["properties"]["locale"]["default"] == "zh_CN"   # a default: a user setting wins
        assert "locale" not in settings["settings"]
        assert get(f"{base}/lab/api/translations/zh_CN")["data"]["jupyterlab"][""]["language"] == "zh-CN"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
