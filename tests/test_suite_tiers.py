"""The suite's tiers and its CI rule (tests/conftest.py): under CI a security test that would skip
fails with the skip's reason; `--quick` keeps the checks, the bug bank and one notebook, and leaves
out nbgrader runs, the browser and the sandbox grading real submissions."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import QUICK, ROOT, SLOW

SKIPPING = '''
import pytest

def test_needs_a_tool():
    pytest.skip("no such tool on this machine")

@pytest.mark.skipif(True, reason="marked to skip here")
def test_marked():
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False
'''


def pytest_in(folder: Path, *args: str, ci: str | None) -> str:
    """Run pytest with the course's conftest as a plugin on ``folder``; its report."""
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    env.update({"PYTHONPATH": str(ROOT)} | ({} if ci is None else {"CI": ci}))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-rA", "-q", *args],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    return run.stdout + run.stderr


def test_under_ci_a_skipped_security_test_fails_with_its_reason(tmp_path):
    (tmp_path / "test_sandbox_generated.py").write_text(SKIPPING, encoding="utf-8")  # test_sandbox*.py
    (tmp_path / "test_other_generated.py").write_text(SKIPPING, encoding="utf-8")
    report = pytest_in(tmp_path, ci="true")
    assert "CI must run this security test, but it would be skipped: no such tool on this machine" in report
    assert "CI must run this security test, but it would be skipped: marked to skip here" in report
    assert "FAILED test_sandbox_generated.py::test_needs_a_tool" in report
    assert "ERROR test_sandbox_generated.py::test_marked" in report          # skipif acts at setup
    assert "XFAIL test_sandbox_generated.py::test_known_bug" in report       # an expected failure stays one
    assert "SKIPPED [1] test_other_generated.py" in report                   # not a security test
    assert "4 failed" not in report and "1 failed" in report and "1 error" in report


def test_without_ci_the_security_test_skips(tmp_path):
    (tmp_path / "test_sandbox_generated.py").write_text(SKIPPING, encoding="utf-8")
    for ci in (None, "false", "0"):
        report = pytest_in(tmp_path, ci=ci)
        assert "2 skipped, 1 xfailed" in report and not re.search(r"\d+ (failed|error)", report), report


def test_under_ci_a_security_module_skipped_as_a_whole_fails(tmp_path):
    (tmp_path / "test_link_attacks.py").write_text(
        'import pytest\npytest.skip("no bwrap here", allow_module_level=True)\n', encoding="utf-8")
    report = pytest_in(tmp_path, ci="true")
    assert "CI must run this security test, but it would be skipped: no bwrap here" in report
    assert "1 error" in report
    assert "1 skipped" in pytest_in(tmp_path, ci=None)


def collected(*args: str) -> list[str]:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"collecting {args} failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    return [line for line in run.stdout.splitlines() if "::" in line]


TIER_FILES = ["tests/test_notebooks_run.py", "tests/test_grading.py", "tests/test_browser.py",
              "tests/test_sandbox.py", "tests/test_check_messages.py", "tests/test_bugbank.py"]


def test_the_quick_tier_keeps_checks_bug_bank_and_one_notebook_and_leaves_out_grading_runs():
    everything, quick = collected(*TIER_FILES), collected("--quick", *TIER_FILES)
    assert set(quick) < set(everything)
    notebooks = [t for t in quick if t.startswith("tests/test_notebooks_run.py::") and "[" in t]
    assert [t.removeprefix("tests/") for t in notebooks] == list(QUICK) and len(QUICK) == 1
    assert not [t for t in quick if "nbgrader_autograde" in t or t.startswith("tests/test_browser.py")]
    assert [t for t in quick if t.startswith("tests/test_sandbox.py")] == \
        ["tests/test_sandbox.py::test_without_bwrap_grading_warns_and_runs_unsandboxed"]   # no kernel in it
    for checks in ("tests/test_bugbank.py::", "tests/test_check_messages.py::"):
        assert [t for t in quick if t.startswith(checks)] == [t for t in everything if t.startswith(checks)]
    assert len([t for t in quick if t.startswith("tests/test_bugbank.py::")]) > 100


def test_every_name_in_the_tier_lists_is_a_test_file_of_the_suite():
    files = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    for name in (*SLOW, *QUICK):
        assert name.split("::")[0] in files, f"{name}: no such test file"


def test_a_one_worker_file_is_dealt_whole_and_long_files_to_every_share(tmp_path):
    """With 4 workers, the tests of a ONE_WORKER file (their module fixture is set up once per worker
    that runs one) stay together in one worker's first share; the other long tests are spread over them."""
    def tests(n: int) -> str:
        return "".join(f"def test_{i}():\n    pass\n\n" for i in range(n))
    for name, n in (("test_sandbox.py", 8), ("test_grading.py", 8), ("test_units.py", 40)):
        (tmp_path / name).write_text(tests(n), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {
        "PYTHONPATH": str(ROOT), "PYTEST_XDIST_WORKER_COUNT": "4"}
    listed = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                             "-p", "no:xdist", "--collect-only", "-q"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120).stdout.split()
    order, shares = [t for t in listed if "::test_" in t], []
    assert len(order) == 56, listed
    for workers_left in range(4, 0, -1):                   # worksteal's first hand-out: an equal part each
        take = len(order) // workers_left
        shares.append(order[:take])
        order = order[take:]
    holding = [share for share in shares if any(t.startswith("test_sandbox.py") for t in share)]
    assert len(holding) == 1 and sum(t.startswith("test_sandbox.py") for t in holding[0]) == 8, shares
    assert all(sum(t.startswith("test_grading.py") for t in share) == 2 for share in shares), shares
