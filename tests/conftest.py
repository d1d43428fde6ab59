from __future__ import annotations

import fnmatch
import functools
import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.notebook_format import read
from utils.sections import section_ids

ROOT = Path(__file__).resolve().parents[1]
# The tests make their own working copies (utils/working_copy.py), never the learner's of $COURSE_WORK.
os.environ.pop("COURSE_WORK", None)
SECTIONS = section_ids(ROOT / "solutions")


def notebook_path(kind: str, section: str) -> Path:
    return ROOT / kind / section / f"{section}.ipynb"


def load_notebook(kind: str, section: str) -> dict:
    return read(notebook_path(kind, section))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# pytest-xdist's worksteal scheduler gives each worker one contiguous share of the collected
# tests to start with, then lets an idle worker steal from a busy one. So each share begins with
# its part of the long tests (dealt round-robin, longest first) and ends with quick ones: every
# worker starts on long work and the quick tests fill the gaps at the end.
LONGEST_FIRST = ("test_exchange_flow.py", "test_hub.py", "test_class_edition.py", "test_grading.py",
                 "test_bad_submissions.py", "test_browser.py", "test_sandbox.py", "test_notebooks_run.py")
# Files whose tests share a module fixture that takes a minute (a graded class of attacks, an installed
# class edition) or makes Unix accounts that can exist only once: dealt as one unit, so that one worker
# sets it up, not every worker.
ONE_WORKER = ("test_sandbox.py", "test_class_edition.py", "test_hub_exchange.py")


def _cost_rank(item) -> int:
    if item.path.name in LONGEST_FIRST:
        return LONGEST_FIRST.index(item.path.name)
    return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)


# --- tiers: `python3 course.py test --quick` (pytest --quick) runs what is not slow, plus QUICK ------

# Slow: nbgrader runs, the sandbox grading real submissions, the browser, notebooks, a JupyterHub
# (with the tests decorated @pytest.mark.slow in their files). "file" or "file::test" (every
# parametrisation of it).
SLOW = ("test_grading.py::test_bug_bank_through_nbgrader_autograde", "test_browser.py", "test_exchange_flow.py",
        "test_hub.py", "test_hub_exchange.py", "test_notebooks_run.py::test_", "test_honest_submissions.py",
        "test_class_edition.py",
        "test_progress.py", "test_quickstart.py::test_course_py_lab_serves", "test_postgres_gradebook.py",
        "test_working_copy.py::test_progress_")
# In the quick tier although slow: one notebook, run as a learner runs it, checks and plots included.
QUICK = ("test_notebooks_run.py::test_solution_notebook_runs_and_passes_its_checks[01_qkv_and_scores]",)

# --- security: under CI a skipped one fails ----------------------------------------------------

# What proves that grading is safe (the sandbox, links, bad submissions, verdicts no kernel can forge, the
# Hub's accounts). Skipping one on a machine without bwrap or a Hub is fine on a laptop; in CI it
# would let a broken sandbox pass, so there a skip is a failure that gives the skip's reason.
SECURITY = ("test_sandbox*.py", "test_link_attacks.py", "test_bad_submissions.py", "test_forged_verdicts.py",
            "test_hub*.py")


# --- what a test needs from the machine: @pytest.mark.needs("bwrap", ...) ---------------------------

# A newcomer's machine has no bubblewrap, Chromium, PostgreSQL or root. A test that needs one says so with
# the marker; where one is missing it skips, naming what is missing and the command that provides it
# (under CI a security test's skip is still a failure, below). The probes look where the test's own code
# looks: programs on PATH (PostgreSQL through pg_config, which Debian's postgresql-common puts there),
# the grader's own sandbox check, the effective user id.


@dataclass(frozen=True)
class Missing:
    reason: str
    enable: str   # the command that provides it


def _bwrap() -> Missing | None:
    from autograder import sandbox   # the grader's own check: the tests sandbox exactly where grading does

    if sandbox.unavailable_reason() is None:
        return None
    if shutil.which("bwrap") is None:
        return Missing("bubblewrap is not installed: grading cannot sandbox student code here",
                       "sudo apt-get install bubblewrap")
    return Missing(f"bwrap cannot sandbox here: {sandbox.unavailable_reason()}",
                   "allow unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1 "
                   "(Ubuntu 24.04+: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)")


def _chromium() -> Missing | None:
    if importlib.util.find_spec("playwright") is None:
        return Missing("the Python package playwright is not installed", "python3 course.py test (installs .[dev])")
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        return Missing("Chromium is not installed (Playwright drives the system's)", "sudo apt-get install chromium")
    if shutil.which("fc-list") is None:
        return Missing("fontconfig's fc-list is missing: cannot tell whether a CJK font is installed",
                       "sudo apt-get install fontconfig")
    fonts = subprocess.run(["fc-list", ":lang=zh-cn", "family"], capture_output=True, text=True).stdout
    if "Noto Sans CJK" not in fonts:
        return Missing("no CJK font for Chromium", "sudo apt-get install fonts-noto-cjk")
    return None


def postgres_programs() -> Path | None:
    """The folder of PostgreSQL's initdb, pg_ctl …: on PATH, or Debian's /usr/lib/postgresql/<version>/bin
    that its pg_config names; None where PostgreSQL is not installed."""
    initdb = shutil.which("initdb")
    if initdb is not None:
        return Path(initdb).resolve().parent
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip()
    return Path(found) if found and (Path(found) / "initdb").exists() else None


def _postgres() -> Missing | None:
    if postgres_programs() is None:
        return Missing("PostgreSQL is not installed", "sudo apt-get install postgresql")
    if importlib.util.find_spec("psycopg") is None:
        return Missing("the Python package psycopg is not installed", "python3 course.py test (installs .[dev])")
    return None


def _root() -> Missing | None:
    if os.geteuid() == 0:
        return None
    return Missing("not root: the test creates Unix accounts and starts servers as them",
                   "sudo python3 course.py test tests/test_hub.py")


def _jupyterhub() -> Missing | None:
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            return Missing(f"{tool} is missing", "sudo apt-get install passwd util-linux")
    if shutil.which("configurable-http-proxy") is None:
        return Missing("configurable-http-proxy (JupyterHub's proxy) is not installed",
                       "sudo apt-get install npm && sudo npm install -g configurable-http-proxy@5")
    if importlib.util.find_spec("jupyterhub") is None:
        return Missing("the Python package jupyterhub is not installed", "python3 course.py test (installs .[dev])")
    return None


def _cgroups() -> Missing | None:
    from deploy.jupyterhub.ceiling import Ceiling

    if os.geteuid() == 0 and Ceiling.where_available("probe") is not None:
        return None
    return Missing("no cgroup with the memory, pids and cpu controllers that this user can make",
                   "as root, on a machine with cgroup v2 (or v1's memory, pids and cpu hierarchies) mounted")


NEEDS = {"bwrap": _bwrap, "cgroups": _cgroups, "chromium": _chromium, "postgres": _postgres, "root": _root,
         "jupyterhub": _jupyterhub}


@functools.cache
def missing(need: str) -> Missing | None:
    """What the machine lacks for ``need`` (a key of NEEDS), or None."""
    if need not in NEEDS:
        raise KeyError(f"@pytest.mark.needs({need!r}): no such need; tests/conftest.py's NEEDS has {sorted(NEEDS)}")
    return NEEDS[need]()


def skip_reason(needs) -> str | None:
    """The skip message of a test that needs ``needs``: each missing one with its command; None if none is."""
    gaps = [(need, missing(need)) for need in needs]
    return "; ".join(f"needs {need}: {gap.reason} — to run it: {gap.enable}" for need, gap in gaps if gap) or None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture is set up (a module's may take a minute)."""
    reason = skip_reason([need for marker in item.iter_markers("needs") for need in marker.args])
    if reason:
        pytest.skip(reason)


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="the quick tier: leave out the slow tests (tests/conftest.py's SLOW and "
                          "@pytest.mark.slow) except QUICK")


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: in the quick tier although slow (tests/conftest.py's QUICK)")
    config.addinivalue_line("markers", "security: proves grading safe; under CI its skip is a failure")
    config.addinivalue_line("markers", "needs(*what): skips where the machine lacks one of NEEDS (tests/conftest.py), "
                                       "naming the command that provides it")


def in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab, the course's own `CI=true bash .ci/run`), or any other value but false/0."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _named(item, names) -> bool:
    test = f"{item.path.name}::{item.name}"
    return any(test == name or test.startswith(name) if "::" in name else item.path.name == name for name in names)


def mark_tiers(items) -> None:
    for item in items:
        if _named(item, SLOW):
            item.add_marker(pytest.mark.slow)
        if _named(item, QUICK):
            item.add_marker(pytest.mark.quick)
        if security_file(item.path):
            item.add_marker(pytest.mark.security)


def in_quick_tier(item) -> bool:
    return item.get_closest_marker("quick") is not None or item.get_closest_marker("slow") is None


def security_file(path: Path) -> bool:
    return any(fnmatch.fnmatch(path.name, pattern) for pattern in SECURITY)


def fail_a_skip_in_ci(report) -> None:
    """Under CI, turn ``report`` (a skipped security test or module) into a failure with the skip's reason."""
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"CI must run this security test, but it would be skipped: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item):
    report = yield
    if item.get_closest_marker("security") is not None:
        fail_a_skip_in_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield   # a module-level skip (pytest.skip(allow_module_level=True), importorskip)
    if isinstance(collector, pytest.Module) and security_file(collector.path):
        fail_a_skip_in_ci(report)
    return report


def pytest_collection_modifyitems(config, items):
    mark_tiers(items)
    if config.getoption("quick"):
        left_out = [i for i in items if not in_quick_tier(i)]
        items[:] = [i for i in items if in_quick_tier(i)]
        config.hook.pytest_deselected(items=left_out)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    ranked = sorted(items, key=_cost_rank)  # stable: the order inside a file is kept
    long_ = [i for i in ranked if _cost_rank(i) <= len(LONGEST_FIRST)]
    quick = ranked[len(long_):]
    shares, start = [], 0
    for w, units in enumerate(_units(long_)[w::workers] for w in range(workers)):
        share = [item for unit in units for item in unit]
        end = (w + 1) * len(items) // workers
        take = max(0, end - start - len(share))
        shares += share + quick[:take]
        quick, start = quick[take:], end
    items[:] = shares + quick


def _units(items) -> list[list]:
    """items in runs that one worker takes whole: a ONE_WORKER file's tests together, every other test alone."""
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(item.path.name if item.path.name in ONE_WORKER else item.nodeid, []).append(item)
    return list(units.values())
