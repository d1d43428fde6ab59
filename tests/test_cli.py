"""course.py's command line: Chinese help for every command, help that installs and runs nothing, the
options JupyterLab's and pytest's own passed through to them, arguments checked before any set-up."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

import course

from .conftest import ROOT

COMMANDS = list(course.COMMANDS)


@pytest.fixture(scope="module")
def bare_course(tmp_path_factory):
    """course.py with what it reads before any set-up, and no .venv: help must not make one."""
    copy = tmp_path_factory.mktemp("bare") / "course"
    (copy / "utils").mkdir(parents=True)
    for name in ("course.py", "pyproject.toml", "requirements.lock", "utils/working_copy.py"):
        shutil.copy(ROOT / name, copy / name)
    (copy / "utils" / "__init__.py").write_text("")
    for folder in ("notebooks", "solutions"):
        shutil.copytree(ROOT / folder, copy / folder)
    return copy


def course_py(folder, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "course.py", *args], cwd=folder, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("args", [["--help"], ["-h"], *([c, "--help"] for c in COMMANDS)], ids=" ".join)
def test_help_is_chinese_and_installs_and_runs_nothing(bare_course, args):
    start = time.monotonic()
    done = course_py(bare_course, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("用法：python3 course.py") and "显示这段说明" in done.stdout
    assert time.monotonic() - start < 10, "help ran something"
    assert not (bare_course / ".venv").exists() and not (bare_course / "my_work").exists()
    assert "+ " not in done.stdout, "a command was run"


def test_every_command_is_listed_with_its_summary(bare_course):
    """Each command on a line of its own: its name, then its summary (a name found anywhere in the text,
    "test" in a summary, would not show the command is listed)."""
    lines = {tuple(line.split(maxsplit=1)) for line in course_py(bare_course, "--help").stdout.splitlines()}
    for name, command in course.COMMANDS.items():
        assert (name, command.summary) in lines, f"{name}: {command.summary}"


@pytest.mark.parametrize("args, says", [
    ([], "错误：the following arguments are required: 命令"),
    (["bogus"], "没有 'bogus' 这个命令"),
    (["setup", "--bogus"], "setup 不认识这些参数：--bogus"),
    (["progress", "--no-browser"], "progress 不认识这些参数"),
    (["build", "99"], "没有 '99' 这一节"),
    (["reset"], "required: 节"),
])
def test_wrong_arguments_are_refused_before_anything_is_set_up(bare_course, args, says):
    done = course_py(bare_course, *args)
    assert done.returncode != 0 and says in done.stderr, done.stderr
    assert not (bare_course / ".venv").exists()


@pytest.fixture
def ran(monkeypatch):
    """course.main with set-up and commands recorded, not done."""
    commands, setups = [], []
    monkeypatch.setattr(course, "setup", lambda extras=(): setups.append(extras) or course.Path("py"))
    monkeypatch.setattr(course, "run", lambda *cmd, **_kw: commands.append([str(c) for c in cmd]))
    monkeypatch.setattr(course.working_copy, "sync", lambda _root: [])
    return commands, setups


def test_pytest_options_reach_pytest_in_order(ran):
    commands, setups = ran
    assert course.main(["test", "--quick", "-k", "setup and not slow", "-x", "tests/test_cli.py"]) == 0
    assert commands[0][-5:] == ["--quick", "-k", "setup and not slow", "-x", "tests/test_cli.py"]
    assert commands[0][1:3] == ["-m", "pytest"] and setups == [("dev",)]
    course.main(["test", "--", "--help"])
    assert commands[1][-1] == "--help" and "--" not in commands[1]


def test_jupyterlab_options_reach_jupyterlab_and_learners_get_no_developer_tools(ran):
    commands, setups = ran
    assert course.main(["lab", "--no-browser", "--port=8899"]) == 0
    assert commands[0][1:4] == ["-m", "jupyter", "lab"] and commands[0][-2:] == ["--no-browser", "--port=8899"]
    course.main(["progress"])
    course.main(["build", "02"])
    assert setups == [(), (), ()]
    assert commands[-2] == ["py", "-m", "autograder.build", "02_scaling_and_softmax"]
    assert commands[-1] == ["py", "-m", "tests.record_fixtures"]


def test_edition_and_hub_pass_their_arguments_on(ran, capsys):
    commands, setups = ran
    course.main(["edition", "student", "out", "--answers-through", "03_single_head_attention"])
    course.main(["hub", "demo", "--port", "8001"])
    assert capsys.readouterr().out.strip() == course.HUB_INSTALLS   # says in one line what it installs
    assert commands[0][-5:] == ["autograder.edition", "student", "out", "--answers-through",
                                "03_single_head_attention"]
    assert commands[1][-2:] == ["--port", "8001"] and commands[1][-4].endswith("classroom.py")
    assert setups == [(), ("hub",)]


def test_a_failing_command_returns_its_exit_code(monkeypatch):
    def fails(*_cmd, **_kw):
        raise subprocess.CalledProcessError(3, "pytest")

    monkeypatch.setattr(course, "setup", lambda _extras=(): course.Path("py"))
    monkeypatch.setattr(course, "run", fails)
    assert course.main(["test"]) == 3
