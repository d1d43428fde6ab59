"""course.py's set-up: a machine torch 2.13 cannot run on is told what to do before anything is made; torch
comes from PyTorch's CPU index on Linux without an NVIDIA GPU, from the default index when that cannot
be reached; .venv is made afresh when the interpreter changes or an install did not finish; uv installs
from where pip is configured to; one supported Python range is stated everywhere."""
from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

import course
from utils import env

from .conftest import ROOT

GOOD = {"python": (3, 11), "system": "Linux", "machine": "x86_64", "bits": 64, "glibc": "2.36", "macos": None}


@pytest.mark.parametrize("change, says", [
    ({"python": (3, 9)}, "太旧了：本课程需要 Python 3.11–3.14"),
    ({"python": (3, 10)}, "太旧了"),
    ({"python": (3, 15)}, "太新了：课程用的 PyTorch 2.13 还没有 Python 3.15 的安装包"),
    ({"bits": 32}, "32 位"),
    ({"system": "Darwin", "machine": "x86_64", "glibc": None, "macos": "14.5"}, "Intel 芯片的 Mac"),
    ({"system": "Darwin", "machine": "arm64", "glibc": None, "macos": "13.6"}, "需要 macOS 14"),
    ({"glibc": "2.27"}, "glibc ≥ 2.28"),
    ({"glibc": None}, "musl"),
    ({"machine": "riscv64"}, "没有 Linux / riscv64 的安装包"),
    ({"system": "Windows", "machine": "arm64", "glibc": None}, "没有 Windows / arm64 的安装包"),
    ({"system": "FreeBSD", "machine": "amd64", "glibc": None}, "没有 FreeBSD / amd64"),
])
def test_a_machine_without_torch_wheels_is_told_what_to_do(change, says):
    assert says in course.setup_problem({**GOOD, **change})


@pytest.mark.parametrize("machine", [
    GOOD, {**GOOD, "python": (3, 14)}, {**GOOD, "machine": "aarch64", "glibc": "2.28"},
    {**GOOD, "system": "Darwin", "machine": "arm64", "glibc": None, "macos": "14.0"},
    {**GOOD, "system": "Windows", "machine": "amd64", "glibc": None},
])
def test_a_machine_with_torch_wheels_passes(machine):
    assert course.setup_problem(machine) is None


def test_this_machine_passes():
    assert course.setup_problem(course.this_machine()) is None


def old_python() -> str | None:
    """A Python older than the supported range that runs here (on PATH, or one pyenv installed)."""
    candidates = [shutil.which(f"python3.{minor}") for minor in range(8, course.SUPPORTED_PYTHON[0][1])]
    candidates += sorted(str(p) for p in Path("~/.pyenv/versions").expanduser().glob("3.*/bin/python3"))
    for python in filter(None, candidates):
        done = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2] < (3, 11))"],
                              capture_output=True, text=True)
        if done.stdout.strip() == "True":
            return python
    return None


@pytest.mark.skipif(old_python() is None, reason="no Python older than 3.11 here (e.g. pyenv install 3.9)")
def test_an_old_python_gets_the_chinese_message_and_no_environment(tmp_path):
    copy = tmp_path / "course"
    (copy / "utils").mkdir(parents=True)
    for name in ("course.py", "utils/working_copy.py", "utils/sections.py"):
        shutil.copy(ROOT / name, copy / name)
    (copy / "utils" / "__init__.py").write_text("")
    done = subprocess.run([old_python(), "course.py", "setup"], cwd=copy, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "，太旧了：本课程需要 Python 3.11–3.14" in done.stderr, done.stderr
    assert not (copy / ".venv").exists()


# --- where torch comes from ----------------------------------------------------------------------

@pytest.fixture
def index_server():
    """A local package index that answers for torch, as download.pytorch.org/whl/cpu does."""
    class Index(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200 if self.path == "/whl/cpu/torch/" else 404)
            self.end_headers()

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/whl/cpu"
    server.shutdown()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_linux_without_a_gpu_takes_the_cpu_index(index_server):
    assert course.torch_index("Linux", gpu=False, candidate=index_server) == index_server


def test_an_unreachable_cpu_index_falls_back_to_the_default_one(capsys):
    unreachable = f"http://127.0.0.1:{closed_port()}/whl/cpu"
    assert course.torch_index("Linux", gpu=False, candidate=unreachable) is None
    assert "连不上 PyTorch 的 CPU 安装源" in capsys.readouterr().out
    assert course.torch_index("Linux", gpu=False, candidate="http://no-such-host.invalid/whl/cpu") is None


def test_a_gpu_or_another_system_takes_the_default_index(index_server):
    assert course.torch_index("Linux", gpu=True, candidate=index_server) is None
    assert course.torch_index("Darwin", gpu=False, candidate=index_server) is None
    assert course.torch_index("Linux", gpu=False, candidate="default") is None


def test_the_torch_install_names_the_chosen_index_once():
    uv = ["uv", "pip", "install", "--python", "py", "--index-url", "https://mirror/simple", "--find-links", "w"]
    assert course.with_index(uv, "https://cpu") == ["uv", "pip", "install", "--python", "py", "--find-links", "w",
                                                   "--index-url", "https://cpu"]
    assert course.with_index(uv, None) == uv


def test_uv_installs_from_the_sources_pip_is_configured_with():
    listed = ("global.find-links='/opt/wheels'\n:env:.find-links='/opt/wheels'\n"
              "global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple'\n"
              "user.index-url='https://pypi.tuna.tsinghua.edu.cn/simple'\nglobal.cert='/etc/ssl/certs/ca.crt'\n")
    assert course.uv_source_options(listed) == [
        "--find-links", "/opt/wheels", "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/more/simple", "--index-url", "https://pypi.tuna.tsinghua.edu.cn/simple",
        "--index-strategy", "unsafe-best-match"]
    assert course.uv_source_options("global.find-links='/opt/wheels'\n") == ["--find-links", "/opt/wheels"]
    assert course.uv_source_options("") == []


# --- the environment's stamp ---------------------------------------------------------------------

@pytest.fixture
def fake_venv(tmp_path, monkeypatch):
    """course.setup on a .venv in tmp_path, with creating and installing recorded instead of done."""
    monkeypatch.setattr(course, "VENV", tmp_path / ".venv")
    done = []

    def create(_builder, path):
        done.append("create")
        course.venv_python(Path(path)).parent.mkdir(parents=True)
        course.venv_python(Path(path)).touch()

    monkeypatch.setattr(course.venv.EnvBuilder, "create", create)
    monkeypatch.setattr(course, "install", lambda _python, extras: done.append(("install", extras)))
    return done


def test_a_new_environment_is_made_once_and_then_reused(fake_venv):
    course.setup()
    assert fake_venv == ["create", ("install", ())]
    stamp = json.loads(course.stamp_path().read_text())
    assert stamp["python"] == course.interpreter() and stamp["inputs"] == course.inputs_digest()
    assert (course.VENV / "etc/jupyter/labconfig/default_setting_overrides.json").is_file()
    course.setup()
    assert len(fake_venv) == 2, "nothing to do the second time"


def test_learner_commands_install_no_developer_tools_and_test_adds_them(fake_venv):
    course.setup()
    course.setup(("dev",))
    course.setup()                     # a learner command after `test`: dev is there, nothing to do
    assert fake_venv == ["create", ("install", ()), ("install", ("dev",))]


def test_changed_inputs_update_the_environment_in_place(fake_venv, monkeypatch):
    course.setup(("dev",))
    monkeypatch.setattr(course, "inputs_digest", lambda: "a new pyproject.toml")
    course.setup()
    assert fake_venv == ["create", ("install", ("dev",)), ("install", ("dev",))], "the dev tools kept up to date"


def test_another_interpreter_remakes_the_environment(fake_venv, monkeypatch, capsys):
    course.setup()
    (course.VENV / "left-over").touch()
    monkeypatch.setattr(course, "interpreter", lambda: {"prefix": "/usr", "version": "3.12.8",
                                                        "implementation": "cpython"})
    course.setup()
    assert fake_venv == ["create", ("install", ()), "create", ("install", ())]
    assert not (course.VENV / "left-over").exists()
    assert "另一个 Python（3.11" in capsys.readouterr().out


def test_an_install_that_did_not_finish_remakes_the_environment(fake_venv, monkeypatch, capsys):
    def interrupted(_python, _extras):
        raise subprocess.CalledProcessError(1, "pip")

    monkeypatch.setattr(course, "install", interrupted)
    with pytest.raises(subprocess.CalledProcessError):
        course.setup()
    assert course.venv_python().exists() and not course.stamp_path().exists()
    monkeypatch.setattr(course, "install", lambda _python, extras: fake_venv.append(("install", extras)))
    course.setup()
    assert fake_venv == ["create", "create", ("install", ())]
    assert "没有完成" in capsys.readouterr().out


def test_concurrent_runs_set_up_one_after_the_other(fake_venv, monkeypatch):
    """A second course.py started while the first installs waits, then finds the environment made: it
    neither installs again nor takes the first one's unfinished install for a broken one."""
    def slow_install(_python, extras):
        fake_venv.append(("install", extras))
        time.sleep(1)

    monkeypatch.setattr(course, "install", slow_install)
    runs = [threading.Thread(target=course.setup) for _ in range(2)]
    for run in runs:
        run.start()
        time.sleep(0.2)
    for run in runs:
        run.join()
    assert fake_venv == ["create", ("install", ())]


def test_an_unsupported_machine_makes_nothing(fake_venv, monkeypatch):
    monkeypatch.setattr(course, "this_machine", lambda: {**GOOD, "python": (3, 9)})
    with pytest.raises(SystemExit, match="太旧了"):
        course.setup()
    assert fake_venv == [] and not course.VENV.exists()


# --- one supported Python range -----------------------------------------------------------------

def test_one_supported_python_range_everywhere():
    low, high = course.SUPPORTED_PYTHON
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["requires-python"] == f">={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}"
    assert env.MIN_PYTHON == low
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"Python {low[0]}.{low[1]}–{high[0]}.{high[1]}" in readme
    assert not re.search(r"Python 3\.\d+\+", readme), "the README states the range, not an open minimum"
    spec = SpecifierSet(project["requires-python"])
    environment = (ROOT / "environment.yml").read_text(encoding="utf-8")
    conda_python = re.search(r"- python=(\d+\.\d+)", environment).group(1)
    binder_python = (ROOT / "binder" / "runtime.txt").read_text().strip().removeprefix("python-")
    assert f"{conda_python}.0" in spec and f"{binder_python}.0" in spec
    assert sys.version_info[:2] >= low, "this test suite runs on a supported Python"


def test_the_tested_torch_is_pinned_everywhere_it_is_installed():
    for name in ("environment.yml", "binder/requirements.txt"):
        text = (ROOT / name).read_text(encoding="utf-8")
        assert course.TORCH_PIN in text and course.TORCH_CPU_INDEX in text, name


def test_binder_builds_the_learners_environment_and_opens_00_in_the_working_copy():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    launch = re.search(r"`https://mybinder\.org/v2/gh/<用户名>/<仓库名>/HEAD\?labpath=([^`\s]+)`", readme)
    assert launch and launch[1] == "my_work%2F00_start_here%2F00_start_here.ipynb"
    requirements = (ROOT / "binder" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    constraint = next(line.split()[1] for line in requirements if line.startswith("-c "))
    assert (ROOT / "binder" / constraint).resolve() == course.LOCK, "the lockfile, read relative to binder/"
    post_build = ROOT / "binder" / "postBuild"
    script = post_build.read_text(encoding="utf-8")
    assert "-c requirements.lock -e ." in script and "python -m utils.working_copy" in script
    assert "course.write_lab_defaults()" in script and os.access(post_build, os.X_OK)
