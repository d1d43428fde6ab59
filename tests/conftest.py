from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

from autograder.notebook_format import read

ROOT = Path(__file__).resolve().parents[1]
# The tests make their own working copies (utils/working_copy.py), never the learner's of $COURSE_WORK.
os.environ.pop("COURSE_WORK", None)
SECTIONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())


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
LONGEST_FIRST = ("test_grading.py", "test_browser.py", "test_sandbox.py", "test_exchange_flow.py",
                 "test_bad_submissions.py", "test_notebooks_run.py")
# Files whose tests share a module fixture that takes a minute (a graded class of attacks, an installed
# class edition): dealt as one unit, so that one worker sets it up, not every worker.
ONE_WORKER = ("test_sandbox.py", "test_class_edition.py")


def _cost_rank(item) -> int:
    if item.path.name in LONGEST_FIRST:
        return LONGEST_FIRST.index(item.path.name)
    return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)


# --- tiers: `python3 course.py test --quick` (pytest --quick) runs what is not slow, plus QUICK ------

# Slow: nbgrader runs, the sandbox grading real submissions, the browser, notebooks, a JupyterHub
# (with the tests decorated @pytest.mark.slow in their files). "file" or "file::test" (every
# parametrisation of it).
SLOW = ("test_grading.py::test_bug_bank_through_nbgrader_autograde", "test_browser.py", "test_exchange_flow.py",
        "test_hub.py", "test_notebooks_run.py::test_", "test_honest_submissions.py", "test_class_edition.py",
        "test_progress.py", "test_quickstart.py::test_course_py_lab_serves", "test_postgres_gradebook.py",
        "test_working_copy.py::test_progress_")
# In the quick tier although slow: one notebook, run as a learner runs it, checks and plots included.
QUICK = ("test_notebooks_run.py::test_solution_notebook_runs_and_passes_its_checks[01_qkv_and_scores]",)

# --- security: under CI a skipped one fails ----------------------------------------------------

# What proves that grading is safe (the sandbox, links, bad submissions, the checks' guard, the
# Hub's accounts). Skipping one on a machine without bwrap or a Hub is fine on a laptop; in CI it
# would let a broken sandbox pass, so there a skip is a failure that gives the skip's reason.
SECURITY = ("test_sandbox*.py", "test_link_attacks.py", "test_bad_submissions.py", "test_check_guard.py",
            "test_hub.py")


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="the quick tier: leave out the slow tests (tests/conftest.py's SLOW and "
                          "@pytest.mark.slow) except QUICK")


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: in the quick tier although slow (tests/conftest.py's QUICK)")
    config.addinivalue_line("markers", "security: proves grading safe; under CI its skip is a failure")


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
