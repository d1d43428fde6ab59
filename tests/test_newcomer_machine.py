"""On a newcomer's machine (no bubblewrap, Chromium, PostgreSQL or root) the suite passes: each test that
needs one of them skips, saying what is missing and the command that provides it; under CI the security
tests among them fail instead (tests/conftest.py's ``needs`` marker and SECURITY).

The machine state is made for real, not mocked: the tests marked ``needs`` run in a pytest subprocess
whose PATH has every program of this machine's PATH except those below, as the unprivileged user
``nobody`` where this machine's tests run as root. A checkout that ``nobody`` cannot enter (root's home
in a container, a folder ``mktemp -d`` made) is linked into a folder it can: a copy of hard links, so
the environment of 2 GB costs nothing.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .checkout import checkout_for
from .conftest import ROOT, security_file

# What a newcomer's machine lacks: the sandbox, the browser, PostgreSQL (Debian's pg_config names
# its folder), JupyterHub's proxy.
HIDDEN = {"bwrap", "chromium", "chromium-browser", "initdb", "pg_config", "pg_ctl", "postgres", "createdb",
          "configurable-http-proxy"}
NOBODY = 65534
# need -> the command its skip must name (tests/conftest.py's NEEDS)
ENABLE = {"bwrap": "sudo apt-get install bubblewrap", "chromium": "sudo apt-get install chromium",
          "postgres": "sudo apt-get install postgresql", "root": "sudo python3 course.py test",
          "jupyterhub": "sudo apt-get install npm && sudo npm install -g configurable-http-proxy",
          "cgroups": "as root, on a machine with cgroup v2"}
SKIP = re.compile(r"needs (\w+): (.+?) — to run it: (.+?)(?=; needs |$)")   # one per missing need
# The tests issue 33 saw fail on a machine without bubblewrap, and one of each other kind.
EXPECTED = {
    "test_bad_submissions.py::test_bad_submissions_cost_only_their_own_points": "bwrap",
    "test_link_attacks.py::test_links_planted_by_a_submission_reach_nothing_outside_it[nbgrader-autograde-forked]":
        "bwrap",
    "test_link_attacks.py::test_links_planted_by_a_submission_reach_nothing_outside_it[autograder-grade-bwrap]":
        "bwrap",
    "test_browser.py::test_a_learner_works_through_the_section_in_jupyterlab[02_scaling_and_softmax]": "chromium",
    "test_postgres_gradebook.py::test_parallel_grading_into_a_postgresql_gradebook": "postgres",
    "test_hub.py::test_a_class_on_jupyterhub": "root",
}


def bare_path(folder: Path) -> str:
    """A folder of links to every program on this machine's PATH but HIDDEN (the first of a name wins)."""
    folder.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            program, link = os.path.join(directory, name), folder / name
            if name in HIDDEN or os.path.lexists(link) or os.path.isdir(program) or not os.access(program, os.X_OK):
                continue
            link.symlink_to(program)
    return str(folder)


@pytest.fixture(scope="module")
def bare_machine():
    """(folder for the runs' files, environment, user, checkout, its Python): the bare machine's PATH; nobody
    instead of root, in this checkout or a linked copy of it that nobody can enter."""
    scratch = Path(tempfile.mkdtemp(prefix="newcomer-"))
    as_root = os.geteuid() == 0
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    env.update(PATH=bare_path(scratch / "bin"), HOME=str(scratch), PYTHONDONTWRITEBYTECODE="1")
    user = NOBODY if as_root else None
    if as_root:
        os.chown(scratch, NOBODY, NOBODY)
    try:
        yield scratch, env, user, *((ROOT, sys.executable) if user is None else checkout_for(user, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def start(bare_machine, name: str, ci: str | None) -> tuple[subprocess.Popen, Path]:
    """pytest on every test marked ``needs``, on the bare machine; its JUnit report's path."""
    scratch, env, user, checkout, python = bare_machine
    report = scratch / f"{name}.xml"
    run = subprocess.Popen(
        [python, "-m", "pytest", "-m", "needs", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         f"--basetemp={scratch / name}", f"--junitxml={report}", "tests"],
        cwd=checkout, env=env | ({} if ci is None else {"CI": ci}), user=user, group=user,
        extra_groups=[] if user is not None else None, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return run, report


def outcomes(run: subprocess.Popen, report: Path) -> dict[str, tuple[str, str]]:
    """test id (file::name) -> (skipped / failed / passed, its message)."""
    try:
        output, _ = run.communicate(timeout=180)   # skipping takes seconds; running them, many minutes
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        pytest.fail("the tests ran for minutes: some ran for real instead of skipping")
    assert report.exists(), output[-3000:]
    found = {}
    for case in ET.parse(report).iter("testcase"):
        test = f"{case.get('classname').rsplit('.', 1)[-1]}.py::{case.get('name')}"
        verdict = next((child for child in case if child.tag in ("skipped", "failure", "error")), None)
        if verdict is None:
            found[test] = ("passed", "")
        elif verdict.tag == "skipped":
            found[test] = ("skipped", verdict.get("message", ""))
        else:
            found[test] = ("failed", f"{verdict.get('message', '')} {verdict.text or ''}")
    return found


@pytest.fixture(scope="module")
def runs(bare_machine) -> dict[str, dict[str, tuple[str, str]]]:
    started = {"laptop": start(bare_machine, "laptop", None), "ci": start(bare_machine, "ci", "true")}  # in parallel
    return {name: outcomes(*run) for name, run in started.items()}


def test_on_a_bare_machine_every_test_that_needs_one_skips_naming_what_provides_it(runs):
    laptop = runs["laptop"]
    assert not [t for t, (kind, _) in laptop.items() if kind != "skipped"], laptop
    for test, need in EXPECTED.items():
        assert laptop.get(test, ("not run", ""))[0] == "skipped" and f"needs {need}:" in laptop[test][1], test
    for test, (_, message) in laptop.items():
        said = SKIP.findall(message)
        assert said, f"{test}: the skip names no need and command: {message}"
        for need, reason, command in said:
            assert reason.strip() and command.startswith(ENABLE.get(need, "?")), f"{test}: {need}: {command}"
    hub = SKIP.findall(laptop["test_hub.py::test_a_class_on_jupyterhub"][1])
    assert [need for need, _, _ in hub] == ["root", "postgres", "jupyterhub"], "every missing need, each its command"


def test_under_ci_the_security_tests_among_them_fail_with_the_reason(runs):
    ci = runs["ci"]
    assert set(ci) == set(runs["laptop"])
    for test, (kind, message) in ci.items():
        if not security_file(Path(test.split("::")[0])):
            assert kind == "skipped", f"{test}: not a security test: {message}"
        else:
            assert kind == "failed" and "CI must run this security test, but it would be skipped: needs" in message, \
                f"{test}: {kind} {message}"
